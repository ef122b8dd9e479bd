"""Resuming an interrupted apply: which journal entries still stand, their components' health, and undo.

Used by :func:`gpuplan.planner.apply.walker.resume_interrupted`, which ``gpuplan apply`` runs before it plans,
once :func:`gpuplan.planner.apply.journal.recover` has reconciled the pending entries: it turns the entries
that still stand into steps and hands them to :meth:`InterruptedApply.verify`, with the walker's own gate code
and rollback. Every component the interrupted apply created or changed is gated in graph order, except a
half-made one. All healthy: the half-made components are undone and the journal is cleared. A gate fails:
every step is undone in reverse order through the apply's rollback
(:meth:`gpuplan.planner.apply.undo.Rollback.undo`), and the result names the failure and what was undone.

**Entries that still stand** (:func:`outstanding`): an entry that a later entry at the same address reversed
(a rollback's undo, or an undo of this module, killed before the journal was cleared) cancels out with it.
Without that, resuming would first redo the undo (recreate what the rollback deleted) and then undo the
original, churning objects and pods for nothing.

**A half-made component** (:func:`half_made_components`) is one the interrupted apply changed but whose
workload (the DaemonSet its rollout gate names) does not exist: the apply was killed between the component's
ServiceAccount, RBAC or ConfigMaps and its DaemonSet. Its health cannot be verified, because nothing of it
runs. :func:`undo_half_made` undoes its steps at resume, in reverse order through
:func:`gpuplan.planner.apply.steps.undo`, each journaled and recorded like a rollback's, so the cluster and
the state hold none of it and the plan that follows creates the component whole.

Why undo rather than keep those objects and carry their steps into the next apply's rollback set: every apply
stays all-or-nothing on its own journal (its rollback undoes exactly what it changed, nothing inherited), the
result holds even when the spec changed meanwhile (a component dropped from the spec leaves nothing behind),
and no cross-apply record is needed in the state. The cost is recreating a few RBAC objects, which no pod
depends on while the workload is missing. Kill-9 safety: each undo writes its journal entry before its
mutation and the state after; a kill leaves the original entries plus the undo's, which :func:`outstanding`
pairs off, so the next apply undoes only what is left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError
from gpuplan.modules.base import HealthCheck
from gpuplan.planner.apply.model import ApplyEvent, ApplyResult, Failure, Outcome
from gpuplan.planner.apply.steps import Step, StepContext, describe_error, no_interrupts, undo
from gpuplan.planner.apply.undo import Rollback
from gpuplan.planner.health.gates import GateStatus
from gpuplan.planner.plan.model import Change
from gpuplan.providers.protocols import ObjectReader
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.model import JournalEntry


def outstanding(journal: Iterable[JournalEntry]) -> list[JournalEntry]:
    """The done entries of ``journal`` whose change still stands, in journal order: an entry and a later one
    at the same address that reverses it (its ``before`` is the first's ``after`` and vice versa) both
    leave."""
    standing: list[JournalEntry] = []
    for entry in journal:
        if entry.state != "done":
            continue
        earlier = next(
            (index for index in range(len(standing) - 1, -1, -1) if standing[index].address == entry.address),
            None,
        )
        if earlier is not None and _reverses(entry, standing[earlier]):
            del standing[earlier]
        else:
            standing.append(entry)
    return standing


def _reverses(later: JournalEntry, earlier: JournalEntry) -> bool:
    return bool(later.before == earlier.after and later.after == earlier.before)


def workloads_of(checks: Iterable[HealthCheck]) -> list[ObjectKey]:
    """The DaemonSets a component's rollout gates wait for."""
    return [
        ObjectKey("apps/v1", "DaemonSet", check.params.get("namespace"), str(check.params.get("daemonset")))
        for check in checks
        if check.kind == "rollout"
    ]


def half_made_components(
    steps: Sequence[Step],
    checks: Mapping[str, Sequence[HealthCheck]],
    reader: ObjectReader,
    order: Sequence[str],
) -> list[str]:
    """The components (in ``order``) that ``steps`` created or changed but whose workload does not exist."""
    touched = {step.change.component for step in steps if step.change.action != "delete"}
    return [
        component
        for component in order
        if component in touched
        and any(reader.read(key) is None for key in workloads_of(checks.get(component, ())))
    ]


@dataclass
class HalfMadeUndo:
    """What :func:`undo_half_made` did: the addresses undone, and a line per step it could not undo."""

    undone: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


def undo_half_made(
    steps: Sequence[Step], components: Sequence[str], ctx: StepContext, report: Callable[[str, str], None]
) -> HalfMadeUndo:
    """Undo the ``steps`` of ``components`` in reverse order (the last done first), each journaled and its
    record put back; ``report(component, text)`` is told per component what was undone. A step that fails
    is named in ``left`` and the rest still run; the caller keeps the journal then, so the next apply
    retries."""
    outcome = HalfMadeUndo()
    with no_interrupts():
        for component in reversed(components):
            mine = [step for step in steps if step.change.component == component]
            undone: list[str] = []
            for step in reversed(mine):
                try:
                    undo(step, ctx)
                except GpuplanError as exc:
                    outcome.left.append(f"{step.change.address}: {describe_error(exc)}")
                    continue
                undone.append(step.change.address)
            outcome.undone += undone
            report(
                component,
                f"{component}: the interrupted apply made {len(mine)} of its object(s) but never "
                f"its workload; undone ({len(undone)}): {', '.join(undone) or 'none'}, so the "
                "plan that follows creates the component whole",
            )
    return outcome


@dataclass
class InterruptedApply:
    """The walker's parts that checking an interrupted apply uses: its rollback (which also carries the
    writer, the journal's recorder, the components' gates and order, and the event sink), its gate code, and
    its ``failures``, ``events`` and ``result``, filled in place."""

    rollback: Rollback
    gate: Callable[[str], GateStatus]
    """A component's health gates (with the deferred driver-version gate where it is due), waited for."""
    fail: Callable[[Change, Failure], object]
    """Record a failure of ``change`` and tell the hooks (the walker's ``errored``)."""
    failures: list[Failure]
    events: list[ApplyEvent]
    result: ApplyResult
    checks: Mapping[str, Sequence[HealthCheck]] = field(default_factory=dict)
    """The gates of the components as the spec runs them: an external one has no workload of its own, so
    it is never half-made (the rollback's checks judge every component as if gpuplan ran it)."""

    def verify(self, steps: Sequence[Step]) -> ApplyResult:
        """The gates of the components ``steps`` (an interrupted apply's) touched; undone if one fails. A
        half-made component (its workload never created) is undone once the others are healthy."""
        touched = {step.change.component for step in steps if step.change.action != "delete"}
        order, emit = self.rollback.order, self.rollback.emit
        emit(
            ApplyEvent(
                "note",
                "the last apply was interrupted; verifying the health of what it changed: "
                + (", ".join(c for c in order if c in touched) or "nothing"),
            )
        )
        half_made = half_made_components(steps, self.checks, self.rollback.writer, order)
        for component in order:
            if component not in touched or component in half_made:
                continue
            status = self.gate(component)
            if status.state != "passed":
                workload = next(
                    (
                        s.change
                        for s in steps
                        if s.change.component == component and s.change.kind == "DaemonSet"
                    ),
                    steps[-1].change,
                )
                self.fail(
                    workload,
                    Failure(
                        workload.address,
                        f"{status.message} (reason {status.reason})",
                        component,
                        status.reason,
                        status.node,
                        status.pod,
                        status.gate or None,
                    ),
                )
                break
        result = self.result
        result.events = self.events
        if not self.failures:
            return self._settle(steps, half_made)
        self.rollback.undo(steps, self.failures, result)
        result.serial = self.rollback.recorder.serial
        return result

    def _settle(self, steps: Sequence[Step], half_made: Sequence[str]) -> ApplyResult:
        """The interrupted apply's finished components are healthy: undo its half-made ones, clear the journal
        (kept when an undo failed, so the next apply retries what is left)."""
        result, rollback = self.result, self.rollback
        ctx = StepContext(
            writer=rollback.writer,
            recorder=rollback.recorder,
            resource_versions={},
            delete_timeout=rollback.options.delete_timeout,
        )
        undone = undo_half_made(
            steps,
            half_made,
            ctx,
            lambda component, text: rollback.emit(ApplyEvent("note", text, component=component)),
        )
        result.rolled_back = undone.undone
        result.half_made = list(half_made)
        result.kept = len(steps) - len(undone.undone) - len(undone.left)
        if undone.left:
            result.outcome = Outcome.ROLLBACK_INCOMPLETE
            result.left = list(undone.left)
        else:
            rollback.recorder.close(spec_digest=None)
            result.outcome = Outcome.RESUMED
        rollback.emit(ApplyEvent("note", result.message))
        result.serial = rollback.recorder.serial
        return result
