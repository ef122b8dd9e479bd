"""Piped progress and the summary every apply ends with: a gate's wait is a line when it starts and when its
gate, state or counts change (never a line that repeats the last one); the summary counts the resources added,
changed, replaced and destroyed, times each component's gate and the whole run, after a success, a failure
with its rollback, and a no-op; --json adds the same as new keys of its final event."""

from __future__ import annotations

import io
import json
from dataclasses import replace

from gpuplan.planner.apply.model import ApplyEvent
from gpuplan.planner.health.wait import PoolProgress
from gpuplan.views import progress
from gpuplan.views.apply_summary import duration


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def change(kind: str, component: str, action: str) -> ApplyEvent:
    address = f"{component}/DaemonSet/gpu-operator/{component.lower()}"
    return ApplyEvent(kind, address=address, component=component, action=action, elapsed=1.0)


def gate(component: str, state: str, ready: int, elapsed: float, **more: str) -> ApplyEvent:
    return ApplyEvent(
        "progress",
        more.get("message", "pods starting"),
        component=component,
        gate=more.get("gate", "dcgm-metrics"),
        state=state,
        ready=ready,
        desired=1000,
        elapsed=elapsed,
        node=more.get("node"),
    )


def feed(renderer: progress.ApplyHooks, clock: Clock, script: list[tuple[float, ApplyEvent]]) -> None:
    for at, event in script:
        clock.now = at
        renderer.on_event(event)


def test_piped_progress_names_a_wait_once_and_then_only_its_changes() -> None:
    out, clock = io.StringIO(), Clock()
    plain = progress.PlainLines(out, clock=clock)
    slow = "node-0042: no DCGM_FI_DEV_GPU_TEMP yet"
    for tick in range(13):  # a round a second; a node more ready every fifth round only
        plain.on_event(
            gate("dcgmExporter", "progressing", 800 + tick // 5, float(tick), message=f"{slow} {tick}")
        )
    plain.on_event(gate("dcgmExporter", "progressing", 802, 12.5, gate="allocatable", message="x"))
    plain.on_event(gate("dcgmExporter", "progressing", 802, 13.0, gate="allocatable", message="x"))
    plain.on_event(gate("dcgmExporter", "failed", 802, 14.0, gate="allocatable", message="x"))
    plain.on_event(
        gate("dcgmExporter", "progressing", 802, 0.0, gate="allocatable", message="x")
    )  # same again
    plain.on_event(gate("dcgmExporter", "passed", 1000, 1.0, message="ok"))
    assert out.getvalue().splitlines() == [
        f"  dcgmExporter: waiting for dcgm-metrics: 800/1000 nodes ready ({slow} 0) 0.0s",
        f"  dcgmExporter: waiting for dcgm-metrics: 801/1000 nodes ready ({slow} 5) 5.0s",
        f"  dcgmExporter: waiting for dcgm-metrics: 802/1000 nodes ready ({slow} 10) 10.0s",
        "  dcgmExporter: waiting for allocatable: 802/1000 nodes ready (x) 12.5s",
        "  dcgmExporter: dcgm-metrics passed: 1000/1000 nodes ready 1.0s",
    ]


def test_a_wait_that_stands_still_is_one_line_until_a_pool_moves_or_another_event_comes() -> None:
    out = io.StringIO()
    plain = progress.PlainLines(out, clock=Clock())
    pools = (
        PoolProgress("a", "rollout", "progressing", 0, 2),
        PoolProgress("b", "rollout", "progressing", 1, 2),
    )
    for tick in range(60):  # an hour of rounds that see nothing move
        plain.on_event(
            replace(gate("devicePlugin", "progressing", 1, float(tick), gate="rollout"), pools=pools)
        )
    moved = (pools[0], PoolProgress("b", "rollout", "progressing", 2, 2))
    plain.on_event(replace(gate("devicePlugin", "progressing", 1, 60.0, gate="rollout"), pools=moved))
    plain.on_event(change("change_start", "devicePlugin", "update"))  # its rollback, say: a new wait follows
    plain.on_event(replace(gate("devicePlugin", "progressing", 1, 0.0, gate="rollout"), pools=moved))
    waits = [line for line in out.getvalue().splitlines() if "waiting for" in line]
    assert [line.split("per pool: ")[1] for line in waits] == [
        "a rollout 0/2, b rollout 1/2",
        "a rollout 0/2, b rollout 2/2",
        "a rollout 0/2, b rollout 2/2",
    ]


SUCCESS = [
    (0.0, ApplyEvent("apply_start", "applying 5 change(s) to stack lab")),
    (0.0, change("change_start", "toolkit", "adopt")),
    (0.5, change("change_complete", "toolkit", "adopt")),
    (0.5, change("change_start", "devicePlugin", "replace")),
    (1.0, change("change_complete", "devicePlugin", "replace")),
    (1.0, change("change_start", "dcgmExporter", "create")),
    (2.0, change("change_complete", "dcgmExporter", "create")),
    (2.0, change("change_start", "gfd", "update")),
    (2.5, change("change_complete", "gfd", "update")),
    (30.0, gate("devicePlugin", "progressing", 500, 29.0)),
    (42.6, gate("devicePlugin", "passed", 1000, 41.6, gate="allocatable")),
    (45.0, gate("dcgmExporter", "passed", 1000, 43.0)),
    (46.0, gate("gfd", "passed", 1000, 43.5, gate="rollout")),
    (50.0, gate("dcgmExporter", "passed", 1000, 1.0, gate="driver-version")),  # a later gate: not timed
    (50.0, change("change_start", "migManager", "delete")),
    (52.0, change("change_complete", "migManager", "delete")),
    (192.0, ApplyEvent("summary", "Apply complete: 5 change(s) applied.", state="ok")),
]


def test_the_summary_of_a_success_counts_the_resources_and_times_each_gate() -> None:
    out, clock = io.StringIO(), Clock()
    feed(progress.PlainLines(out, clock=clock), clock, SUCCESS)
    lines = out.getvalue().splitlines()
    assert lines[lines.index("Apply complete: 5 change(s) applied.") :] == [
        "Apply complete: 5 change(s) applied.",
        "Resources: 1 adopted, 1 added, 1 changed, 1 replaced, 1 destroyed.",
        "Gate times (first change to gate passed):",
        "  toolkit       0.5s, no gate",
        "  devicePlugin  42.1s, healthy on 1000/1000 nodes",
        "  dcgmExporter  44.0s, healthy on 1000/1000 nodes",
        "  gfd           44.0s, healthy on 1000/1000 nodes",
        "  migManager    2.0s, no gate",
        "Total time: 3m 12.0s.",
    ]


def test_json_adds_the_summary_to_its_final_event_and_the_slowest_node_to_progress() -> None:
    out, clock = io.StringIO(), Clock()
    feed(
        progress.JsonLines(out, clock=clock),
        clock,
        [*SUCCESS[:9], (9.0, gate("gfd", "progressing", 1, 7.0, node="n")), *SUCCESS[9:]],
    )
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert events[9]["node"] == "n"
    assert events[-1] == {
        "type": "summary",
        "message": "Apply complete: 5 change(s) applied.",
        "state": "ok",
        "resources": {"adopted": 1, "added": 1, "changed": 1, "replaced": 1, "destroyed": 1},
        "gate_seconds": {
            "toolkit": 0.5,
            "devicePlugin": 42.1,
            "dcgmExporter": 44.0,
            "gfd": 44.0,
            "migManager": 2.0,
        },
        "total_seconds": 192.0,
    }


def test_the_summary_after_a_failure_says_what_was_applied_undone_and_how_long_it_took() -> None:
    out, clock = io.StringIO(), Clock()
    script = [
        (0.0, ApplyEvent("apply_start", "applying 2 change(s) to stack lab")),
        (0.0, change("change_start", "devicePlugin", "update")),
        (0.0, change("change_start", "dcgmExporter", "create")),
        (1.0, change("change_complete", "devicePlugin", "update")),
        (2.0, change("change_complete", "dcgmExporter", "create")),
        (31.0, gate("dcgmExporter", "failed", 812, 29.0)),
        (
            31.0,
            ApplyEvent("change_errored", "x: CrashLoopBackOff", component="dcgmExporter", reason="Crash"),
        ),
        (32.0, ApplyEvent("change_errored", "stopped", component="devicePlugin", reason="Stopped")),
        (32.0, ApplyEvent("rollback_start", "rolling back 2 change(s)")),
        (40.0, gate("devicePlugin", "passed", 1000, 8.0)),  # the restore's wait: not the apply's gate time
        (40.0, ApplyEvent("rollback_complete", "x", rolled_back=True, counts={"undone": 2, "left": 0})),
        (40.5, ApplyEvent("summary", "Apply failed: x", state="failed", rolled_back=True)),
    ]
    feed(progress.PlainLines(out, clock=clock), clock, script)
    lines = out.getvalue().splitlines()
    assert lines[lines.index("rollback complete: 2 change(s) undone") + 1 :] == [
        "Resources: 1 added, 1 changed, 0 replaced, 0 destroyed; 2 undone by the rollback.",
        "Gate times (first change to gate passed):",
        "  devicePlugin  stopped after 32.0s",
        "  dcgmExporter  failed after 31.0s",
        "Total time: 40.5s.",
    ]
    assert not any("Apply failed" in line for line in lines), "the verdict is the command's Error: line"
    assert sum("CrashLoopBackOff" in line for line in lines) == 1


def test_a_no_op_apply_after_its_plan_ends_with_the_resource_counts_alone() -> None:
    out = io.StringIO()
    progress.PlainLines(out, clock=Clock()).on_event(ApplyEvent("summary", "", state="ok"))
    assert out.getvalue().splitlines() == ["Resources: 0 added, 0 changed, 0 replaced, 0 destroyed."]
    out = io.StringIO()
    progress.JsonLines(out, clock=Clock()).on_event(ApplyEvent("summary", "No changes.", state="ok"))
    assert json.loads(out.getvalue()) == {
        "type": "summary",
        "message": "No changes.",
        "state": "ok",
        "resources": {"added": 0, "changed": 0, "replaced": 0, "destroyed": 0},
        "gate_seconds": {},
    }


def test_durations_stay_short() -> None:
    assert [duration(s) for s in (0.04, 42.06, 192.0, 3725.0)] == ["0.0s", "42.1s", "3m 12.0s", "1h 02m"]


def pools(training: int, state: str = "progressing") -> tuple[PoolProgress, ...]:
    return (
        PoolProgress(None, "rollout", "passed", 3, 3),
        PoolProgress("training", "allocatable", state, training, 20),
    )


def test_piped_progress_of_a_component_gated_per_node_pool_says_each_pool_and_when_one_moves_on() -> None:
    out, clock = io.StringIO(), Clock()
    plain = progress.PlainLines(out, clock=clock)
    plain.on_event(
        replace(
            gate("devicePlugin", "progressing", 5, 0.0, gate="allocatable", message="x"),
            desired=20,
            pools=pools(5),
        )
    )
    plain.on_event(
        replace(
            gate("devicePlugin", "progressing", 6, 1.0, gate="allocatable", message="x"),
            desired=20,
            pools=pools(6),
        )
    )
    plain.on_event(
        replace(
            gate("devicePlugin", "progressing", 0, 2.0, gate="allocatable", message="x"),
            desired=20,
            pools=(PoolProgress(None, "allocatable", "progressing", 0, 3), *pools(20, "passed")[1:]),
        )
    )
    per_pool = "; per pool: (no pool)"
    assert out.getvalue().splitlines() == [
        f"  devicePlugin: waiting for allocatable: 5/20 nodes ready (x) 0.0s{per_pool} passed 3/3, "
        "training allocatable 5/20",
        f"  devicePlugin: waiting for allocatable: 6/20 nodes ready (x) 1.0s{per_pool} passed 3/3, "
        "training allocatable 6/20",
        f"  devicePlugin: waiting for allocatable: 0/20 nodes ready (x) 2.0s{per_pool} allocatable 0/3, "
        "training passed 20/20",
    ], "a pool's count or gate that moved is a line at once"


def test_the_summary_and_json_count_every_pool_s_nodes() -> None:
    out, clock = io.StringIO(), Clock()
    done = replace(
        gate("devicePlugin", "passed", 20, 9.0, gate="allocatable"), desired=20, pools=pools(20, "passed")
    )
    script = [
        (0.0, change("change_start", "devicePlugin", "update")),
        (1.0, change("change_complete", "devicePlugin", "update")),
        (10.0, done),
    ]
    feed(
        progress.JsonLines(out, clock=clock),
        clock,
        [*script, (11.0, ApplyEvent("summary", "ok", state="ok"))],
    )
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    assert events[2]["pools"] == [
        {"pool": None, "gate": "rollout", "state": "passed", "ready": 3, "desired": 3},
        {"pool": "training", "gate": "allocatable", "state": "passed", "ready": 20, "desired": 20},
    ]
    plain = io.StringIO()
    feed(
        progress.PlainLines(plain, clock=clock),
        clock,
        [*script, (11.0, ApplyEvent("summary", "ok", state="ok"))],
    )
    assert "  devicePlugin  10.0s, healthy on 23/23 nodes" in plain.getvalue().splitlines()
