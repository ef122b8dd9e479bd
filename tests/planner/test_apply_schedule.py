"""The order of an apply's tasks (planner/apply/schedule.py): a component's changes once the changes that must
come first are made (by default its dependencies'), its gate once its own changes are made and its
dependencies' gates passed; changes first."""

from __future__ import annotations

from gpuplan.modules import catalog
from gpuplan.planner.apply.schedule import Schedule, Task
from gpuplan.planner.graph import Graph

CHAIN = {
    "toolkit": (),
    "devicePlugin": ("toolkit",),
    "gfd": ("devicePlugin",),
    "validator": ("devicePlugin",),
}
ORDER = ["toolkit", "devicePlugin", "gfd", "validator"]


def run_one_at_a_time(schedule: Schedule, failing: Task | None = None) -> list[Task]:
    """The tasks in the order one worker gets them; ``failing`` is never reported done."""
    ran: list[Task] = []
    while schedule.pending():
        ready = schedule.ready(1)
        if not ready:
            break
        [task] = ready
        ran.append(task)
        if task != failing:
            schedule.done(task)
    return ran


def test_one_worker_makes_every_change_before_it_waits_for_the_first_gate() -> None:
    ran = run_one_at_a_time(Schedule(CHAIN, ORDER, ORDER, gated=True))

    assert ran == [Task(c, "changes") for c in ORDER] + [Task(c, "gate") for c in ORDER]


def test_a_changes_task_waits_for_its_dependencies_changes_not_their_gates() -> None:
    schedule = Schedule(CHAIN, ORDER, ORDER, gated=True)
    assert schedule.ready(4) == [Task("toolkit", "changes")]
    schedule.done(Task("toolkit", "changes"))

    assert schedule.ready(4) == [Task("devicePlugin", "changes"), Task("toolkit", "gate")]


def test_a_gate_waits_for_the_gates_of_what_it_depends_on() -> None:
    schedule = Schedule(CHAIN, ORDER, ORDER, gated=True)
    for component in ORDER:
        [task] = schedule.ready(1)
        assert task == Task(component, "changes")
        schedule.done(task)
    assert schedule.ready(4) == [Task("toolkit", "gate")]  # the others' dependencies are not healthy yet
    schedule.done(Task("toolkit", "gate"))
    assert schedule.ready(4) == [Task("devicePlugin", "gate")]
    schedule.done(Task("devicePlugin", "gate"))
    assert schedule.ready(4) == [Task("gfd", "gate"), Task("validator", "gate")]


def test_a_failed_gate_leaves_its_dependents_gates_never_ready() -> None:
    ran = run_one_at_a_time(Schedule(CHAIN, ORDER, ORDER, gated=True), failing=Task("devicePlugin", "gate"))

    assert ran[-2:] == [Task("toolkit", "gate"), Task("devicePlugin", "gate")]
    assert Task("gfd", "gate") not in ran and Task("validator", "gate") not in ran


def test_a_component_without_changes_counts_as_made_and_healthy() -> None:
    ran = run_one_at_a_time(Schedule(CHAIN, ORDER, ["gfd"], gated=True))

    assert ran == [Task("gfd", "changes"), Task("gfd", "gate")]


def test_an_ungated_phase_has_changes_only() -> None:
    ran = run_one_at_a_time(Schedule(CHAIN, ORDER, ORDER, gated=False))

    assert ran == [Task(c, "changes") for c in ORDER]


def test_changes_wait_only_for_the_components_that_write_first() -> None:
    """The toolkit's RuntimeClass must exist before a pod names it; the device plugin's objects need not
    exist before GFD's or the validator's (their pods wait on each node for their prerequisites)."""
    graph = Graph(dict.fromkeys(ORDER, "gpuplan"), CHAIN, writes_first=["toolkit"])
    assert graph.writes_after == {
        "toolkit": (),
        "devicePlugin": ("toolkit",),
        "gfd": ("toolkit",),
        "validator": ("toolkit",),
    }
    schedule = Schedule(CHAIN, ORDER, ORDER, gated=True, writes_after=graph.writes_after)
    assert schedule.ready(4) == [Task("toolkit", "changes")]
    schedule.done(Task("toolkit", "changes"))
    assert schedule.ready(4) == [
        Task("devicePlugin", "changes"),
        Task("gfd", "changes"),
        Task("validator", "changes"),
        Task("toolkit", "gate"),
    ]
    for component in ("devicePlugin", "gfd", "validator"):
        schedule.done(Task(component, "changes"))
    assert schedule.ready(4) == [], "the gates still wait for their dependencies' gates"


def test_the_catalog_writes_the_driver_and_the_toolkit_first() -> None:
    assert [name for name, module in catalog.MODULES.items() if module.writes_first] == ["driver", "toolkit"]
