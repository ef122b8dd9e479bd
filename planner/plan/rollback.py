"""``gpuplan rollback``: the plan that returns the cluster to an applied generation of the state's history.

The state keeps the last applied generations (:meth:`gpuplan.state.model.StateFile.with_generation`), each
with the owned fields of every object as that apply left them. :func:`rollback_plan` turns one of them into
desired objects and plans against the live cluster with the plan's own machinery
(:mod:`gpuplan.planner.plan.build`:
the same three-way diff, actions, reasons, drift, conflicts and views), so the rollback is reviewed like any
plan and applied by the same engine and health gates (:func:`gpuplan.planner.apply.walker.apply`). Objects the
generation did not have are deleted; objects it had that are gone are created again. The applied rollback is
a new generation (its serial is new; its spec digest is the old generation's), as Helm records a rollback as
a new revision.

A generation records the spec it was applied with, so the rollback's health gates are that spec's: the
capacity its sharing config advertises, the labels GFD writes with it, its driver release. A generation
recorded before gpuplan kept the spec takes what it does not record from the current spec (the health gates
of each component), with the driver's expected version from the generation's driver DaemonSet.

Callers: the ``rollback`` command (:mod:`gpuplan.commands.rollback`).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuplan.errors import StateError
from gpuplan.modules.base import COMPONENTS, Address, ComponentName, DesiredObject, Owner
from gpuplan.modules.driver import driver_release
from gpuplan.planner.plan import build as plan_mod
from gpuplan.planner.plan.build import Plan
from gpuplan.planner.spec.model import Spec, from_recorded
from gpuplan.providers.snapshot import ClusterSnapshot
from gpuplan.state.lock import tell_user
from gpuplan.state.model import Generation, StateFile, now_rfc3339


def choose_generation(state: StateFile | None, to: int | None) -> Generation:
    """The generation to return to: number ``to`` (``gpuplan state history``), or the one before the newest
    (the previous apply).

    ``--to`` took a state serial before generations were numbered; a ``to`` that numbers no kept generation
    but is the serial of exactly one is still read as that serial (a script written then keeps working),
    with a Note. A ``to`` that is a number of one generation and the serial of another is refused."""
    history = list(state.history) if state is not None else []
    if to is not None:
        if state is None:
            raise StateError(
                "there is no state yet, so no generation to roll back to", hint="apply a configuration first"
            )
        return _by_number_or_serial(state, to)
    if len(history) < 2:
        kept = ", ".join(str(g.number) for g in history) or "none"
        raise StateError(
            "there is no earlier applied generation to roll back to",
            detail=f"generations kept: {kept}",
            hint="rollback needs two applies at least; pass --to N to pick one (`gpuplan state history`)",
        )
    return history[-2]


def _by_number_or_serial(state: StateFile, to: int) -> Generation:
    by_number = [g for g in state.history if g.number == to]
    by_serial = [g for g in state.history if g.serial == to]
    if by_number and by_serial and by_number[0] is not by_serial[0]:
        raise StateError(
            f"--to {to} is ambiguous: generation {to} (serial {by_number[0].serial}) or the generation "
            f"applied at serial {to} (generation {by_serial[0].number})",
            hint=f"--to takes a generation number: --to {to} means generation {to} once no serial of a kept "
            f"generation is {to}; to return to the other, pass --to {by_serial[0].number}",
        )
    if by_number:
        return by_number[0]
    if by_serial:
        generation = by_serial[0]
        tell_user(
            f"Note: --to takes a generation number; {to} is no generation's number but the serial of "
            f"generation {generation.number}, which this rollback returns to."
        )
        return generation
    return state.numbered(to)


def rollback_spec(spec: Spec, generation: Generation) -> Spec:
    """The spec the generation was applied with. Where it recorded none: ``spec`` with what the generation's
    objects decide: each component's owner (gpuplan where the generation has objects of it; the spec's owner
    where that is not gpuplan; else none), the driver's version and the node pools (the gates of the rollback
    are the generation's, not the current spec's)."""
    if generation.spec is not None:
        return from_recorded(generation.spec)
    present = {record.component for record in generation.records.values()}
    updates: dict[str, object] = {}
    for name, config in spec.components().items():
        owner: Owner = (
            "gpuplan" if name in present else (config.owner if config.owner != "gpuplan" else "none")
        )
        fields: dict[str, object] = {"owner": owner}
        if name == "driver" and owner == "gpuplan":
            version = _generation_driver_version(generation)
            if version is not None:
                fields["version"] = version
        updates[_spec_key(name)] = config.model_copy(update=fields)
    spec = spec.with_pools(generation.node_pools)
    return spec.model_copy(update={"spec": spec.spec.model_copy(update=updates)})


def last_applied(state: StateFile | None) -> Generation | None:
    """The generation whose objects the state holds now (the newest, unless something changed the records
    since it was applied: an import, a ``state rm``, an apply kept with ``--no-rollback``), if there is one.
    An apply that fails returns the cluster to it, so its rollback is judged by its spec."""
    if state is None or not state.history:
        return None
    newest = state.history[-1]
    applied = {address: record.owned for address, record in newest.records.items()}
    if applied != {address: record.owned for address, record in state.resources.items()}:
        return None
    return newest


def disagreements(spec: Spec, restored: Spec) -> list[tuple[str, object, object]]:
    """Where the spec file ``spec`` asks for something else than the spec a rollback restored: (path, the
    file's value, the restored value) per differing setting, in the spec's order. A rollback leaves the file
    as it is, so each of these is a change the next plan proposes again."""
    wanted = _leaves(spec.model_dump(mode="json", by_alias=True, exclude={"metadata"}))
    running = _leaves(restored.model_dump(mode="json", by_alias=True, exclude={"metadata"}))
    return [
        (path, wanted.get(path), running.get(path))
        for path in dict.fromkeys([*wanted, *running])
        if wanted.get(path) != running.get(path)
    ]


def _leaves(value: object, path: str = "") -> dict[str, object]:
    if isinstance(value, dict) and value:
        found: dict[str, object] = {}
        for key, item in value.items():
            found.update(_leaves(item, f"{path}.{key}" if path else str(key)))
        return found
    if isinstance(value, list) and value:
        found = {}
        for index, item in enumerate(value):
            found.update(_leaves(item, f"{path}[{index}]"))
        return found
    return {path: value}


def rollback_plan(
    spec: Spec,
    state: StateFile,
    snapshot: ClusterSnapshot,
    generation: Generation,
    *,
    spec_file: str = "gpustack.yaml",
    created_at: str | None = None,
) -> Plan:
    """The plan that makes the live objects the generation's again (pure, like make_plan)."""
    target = rollback_spec(spec, generation)
    plan = plan_mod.make_plan(
        target,
        state,
        snapshot,
        spec_file=spec_file,
        created_at=created_at or now_rfc3339(),
        desired=desired_objects(generation),
        node_labels=generation.node_labels,
    )
    return plan.model_copy(update={"spec_digest": generation.spec_digest})


def desired_objects(generation: Generation) -> tuple[DesiredObject, ...]:
    """The generation's recorded objects as desired objects, in address order."""
    return tuple(
        DesiredObject(Address.parse(address), record.owned)
        for address, record in sorted(generation.records.items())
    )


def describe_history(state: StateFile | None) -> list[str]:
    """One line per kept generation, newest last: number, serial, time, object count, components."""
    lines = []
    for generation in state.history if state is not None else ():
        components = sorted({r.component for r in generation.records.values()}, key=_component_order)
        lines.append(
            f"generation {generation.number}  serial {generation.serial}  applied {generation.applied_at}  "
            f"{len(generation.records)} object(s): {', '.join(components) or 'none'}"
        )
    return lines


def _generation_driver_version(generation: Generation) -> str | None:
    for record in generation.records.values():
        if record.component == "driver" and record.kind == "DaemonSet":
            release: str | None = driver_release(record.owned)
            return release
    return None


_SPEC_KEYS: Mapping[ComponentName, str] = {
    "driver": "driver",
    "toolkit": "toolkit",
    "devicePlugin": "device_plugin",
    "gfd": "gfd",
    "dcgmExporter": "dcgm_exporter",
    "validator": "validator",
    "migManager": "mig_manager",
}


def _spec_key(component: ComponentName) -> str:
    return _SPEC_KEYS[component]


def _component_order(component: str) -> int:
    names = [str(name) for name in COMPONENTS]
    return names.index(component) if component in names else len(names)
