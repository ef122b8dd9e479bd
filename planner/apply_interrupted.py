"""Checking an interrupted apply: the health of what it changed, then clear its journal or undo it.

:func:`gpuplan.planner.apply.resume_interrupted` (run by ``gpuplan apply`` before it plans) turns the done
journal entries that still stand (:func:`gpuplan.planner.apply_resume.outstanding`) into steps and hands them
to :meth:`InterruptedApply.verify`, with the walker's own gate code (``gate``) and rollback.

Every component the interrupted apply created or changed is gated in graph order, except a half-made one (its
workload never created, :func:`gpuplan.planner.apply_resume.half_made_components`), whose health cannot be
told. All healthy: the half-made components are undone (:func:`gpuplan.planner.apply_resume.undo_half_made`)
and the journal is cleared. A gate fails: every step is undone in reverse order through the apply's rollback
(:meth:`gpuplan.planner.apply_rollback.Rollback.undo`), and the result names the failure and what was undone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuplan.planner import apply_resume
from gpuplan.planner.apply_model import ApplyEvent, ApplyResult, Failure
from gpuplan.planner.apply_rollback import Rollback
from gpuplan.planner.apply_steps import Step, StepContext
from gpuplan.planner.health import GateStatus
from gpuplan.planner.plan_model import Change


@dataclass
class InterruptedApply:
    """The walker's parts that checking an interrupted apply uses: its rollback (which also carries the writer,
    the journal's recorder, the components' gates and order, and the event sink), its gate code, and its
    ``failures``, ``events`` and ``result``, filled in place."""

    rollback: Rollback
    gate: Callable[[str], GateStatus]
    """A component's health gates (with the deferred driver-version gate where it is due), waited for."""
    fail: Callable[[Change, Failure], object]
    """Record a failure of ``change`` and tell the hooks (the walker's ``errored``)."""
    failures: list[Failure]
    events: list[ApplyEvent]
    result: ApplyResult

    def verify(self, steps: Sequence[Step]) -> ApplyResult:
        """The gates of the components ``steps`` (an interrupted apply's) touched; undone if one fails. A
        half-made component (its workload never created) is undone once the others are healthy."""
        touched = {step.change.component for step in steps if step.change.action != "delete"}
        order, emit = self.rollback.order, self.rollback.emit
        emit(ApplyEvent("note", "the last apply was interrupted; verifying the health of what it changed: "
                                + (", ".join(c for c in order if c in touched) or "nothing")))
        half_made = apply_resume.half_made_components(steps, self.rollback.checks, self.rollback.writer, order)
        for component in order:
            if component not in touched or component in half_made:
                continue
            status = self.gate(component)
            if status.state != "passed":
                workload = next((s.change for s in steps if s.change.component == component
                                 and s.change.kind == "DaemonSet"), steps[-1].change)
                self.fail(workload, Failure(workload.address, f"{status.message} (reason {status.reason})",
                                            component, status.reason, status.node, status.pod,
                                            status.gate or None))
                break
        result = self.result
        result.events = self.events
        if not self.failures:
            return self._settle(steps, half_made)
        self.rollback.undo(steps, self.failures, result)
        result.failed = list(self.failures)
        result.message = result.message.replace("Apply failed:", "The interrupted apply failed its health "
                                                "gates:", 1).replace("before this apply", "before the "
                                                                     "interrupted apply", 1)
        if result.rolled_back:
            result.message += f" Undone: {', '.join(result.rolled_back)}."
        result.serial = self.rollback.recorder.serial
        return result

    def _settle(self, steps: Sequence[Step], half_made: Sequence[str]) -> ApplyResult:
        """The interrupted apply's finished components are healthy: undo its half-made ones, clear the journal
        (kept when an undo failed, so the next apply retries what is left)."""
        result, rollback = self.result, self.rollback
        ctx = StepContext(writer=rollback.writer, recorder=rollback.recorder, resource_versions={},
                          delete_timeout=rollback.options.delete_timeout)
        undone = apply_resume.undo_half_made(
            steps, half_made, ctx, lambda component, text: rollback.emit(ApplyEvent("note", text, component=component)))
        result.rolled_back = undone.undone
        kept = len(steps) - len(undone.undone) - len(undone.left)
        if undone.left:
            result.rollback_complete = False
            result.message = (f"The interrupted apply left {', '.join(half_made)} half-made, and undoing it "
                              f"failed: {'; '.join(undone.left)}. The journal in the state names what is left; "
                              "the next apply retries it.")
        else:
            rollback.recorder.close(spec_digest=None)
            result.ok = True
            parts = [f"{kept} change(s) healthy"] if kept or not half_made else []
            if half_made:
                parts.append(f"half-made {', '.join(half_made)} undone ({len(undone.undone)} change(s))")
            result.message = f"The interrupted apply resumed: {', '.join(parts)}; its journal is cleared."
        rollback.emit(ApplyEvent("note", result.message))
        result.serial = rollback.recorder.serial
        return result
