"""After a failed apply: undo what it changed (rollback), or leave it and taint it (``--no-rollback``).

The walker of :mod:`gpuplan.planner.apply.walker` builds one :class:`Rollback` per apply and calls
:meth:`Rollback.undo` when a gate, an API error, drift or an interrupt failed the apply and ``rollback`` is
on, :meth:`Rollback.taint` when it is off. The interrupted-apply check (:mod:`gpuplan.planner.apply.resume`)
undoes through the same :meth:`Rollback.undo`.

Undo runs every step of the apply in reverse order of completion (:func:`gpuplan.planner.apply.steps.undo`,
the driver through its node-by-node rollout too), shielded from Ctrl-C, then waits for the health of each
component it restored. Only a complete, healthy rollback closes the journal; otherwise the journal stays and
names what is left, so the next apply reconciles it. The result says, as data, what failed and what the
rollback did (its outcome, the undone changes, what is left).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from gpuplan.errors import GpuplanError
from gpuplan.modules.base import HealthCheck
from gpuplan.modules.common import POOL_LABEL
from gpuplan.modules.driver import driver_release
from gpuplan.planner.apply.journal import Recorder
from gpuplan.planner.apply.model import ApplyEvent, ApplyOptions, ApplyResult, Failure, Outcome
from gpuplan.planner.apply.steps import Step, StepContext, describe_error, no_interrupts, undo
from gpuplan.planner.driver.step import RollsDriver
from gpuplan.planner.health.gates import GateStatus
from gpuplan.providers.protocols import ApplyClient
from gpuplan.providers.snapshot import ObjectKey


@dataclass
class Rollback:
    """What undoing one apply needs: where to write, its journal, the components' gates and how to wait."""

    writer: ApplyClient
    recorder: Recorder
    options: ApplyOptions
    checks: Mapping[str, Sequence[HealthCheck]]
    order: Sequence[str]
    """The components in graph order: restored ones are waited for in this order."""
    emit: Callable[[ApplyEvent], None]
    wait_healthy: Callable[[str, Sequence[HealthCheck], str | None], GateStatus]
    """A component's gates, waited for without stopping at the apply's cancel flag (rollback runs after
    it)."""
    driver_rollout: RollsDriver | None = None
    """The apply's own driver rollout: it undoes a driver change on the nodes it restarted."""

    def undo(self, applied: Sequence[Step], failures: Sequence[Failure], result: ApplyResult) -> None:
        """Undo ``applied`` (in the order they were done) last first, wait for the restored components, and
        say in ``result`` what failed and whether the cluster and the state are as before the apply."""
        steps = list(reversed(applied))
        self.emit(
            ApplyEvent(
                "rollback_start",
                f"rolling back {len(steps)} change(s) of this apply in reverse order",
                counts={"changes": len(steps)},
            )
        )
        # the driver rollout undoes a driver change node by node too (the adapter rolls the nodes it
        # restarted)
        ctx = StepContext(
            writer=self.writer,
            recorder=self.recorder,
            resource_versions={},
            delete_timeout=self.options.delete_timeout,
            driver_rollout=self.driver_rollout,
            report=lambda text: self.emit(ApplyEvent("note", text, component="driver")),
        )
        restored: dict[str, set[ObjectKey]] = {}
        left: list[str] = list(result.left)  # failed steps that could not undo themselves
        with no_interrupts():
            for step in steps:
                try:
                    key = undo(step, ctx)
                except GpuplanError as exc:
                    left.append(f"{step.change.address}: {describe_error(exc)}")
                    continue
                result.rolled_back.append(step.change.address)
                if key is not None:
                    restored.setdefault(step.change.component, set()).add(key)
            unhealthy = self._wait_restored(restored, _restored_driver(steps, result.rolled_back))
        complete = not left and not unhealthy
        result.failed = list(failures)
        result.outcome = Outcome.ROLLED_BACK if complete else Outcome.ROLLBACK_INCOMPLETE
        result.restored = sorted(restored) if complete else []
        result.left = [] if complete else left + unhealthy
        if complete:
            self.recorder.close(spec_digest=None)
        self.emit(
            ApplyEvent(
                "rollback_complete",
                result.message,
                rolled_back=complete,
                serial=self.recorder.serial,
                counts={"undone": len(result.rolled_back), "left": len(left)},
            )
        )

    def _wait_restored(
        self, restored: Mapping[str, set[ObjectKey]], drivers: Mapping[str | None, str | None]
    ) -> list[str]:
        """Wait for the health of each component rollback restored; its gates, minus a rollout of a DaemonSet
        that no longer exists (the restored one lives elsewhere, e.g. the lab's kube-system plugin). With the
        driver rolled back, the gates expect the restored release, not the one the failed apply wanted."""
        unhealthy = []
        for component in self.order:
            keys = restored.get(component)
            if not keys:
                continue
            rollouts = {
                check.params.get("pool"): _daemonset_key(check) in keys
                for check in self.checks.get(component, ())
                if check.kind == "rollout"
            }
            # a node pool's gates only where its own DaemonSet came back: the pools' settings are this
            # apply's, which the rollback just undid (the restored ones' gates are not known here)
            checks = [
                check
                for check in self.checks.get(component, ())
                if (check.params.get("pool") is None and (check.kind != "rollout" or rollouts.get(None)))
                or rollouts.get(check.params.get("pool"), False)
            ]
            driver = drivers.get(None)
            status = self.wait_healthy(component, _expecting(checks, drivers), driver)
            if status.state != "passed":
                unhealthy.append(f"{component} not healthy after the rollback: {status.message}")
        return unhealthy

    def taint(
        self,
        applied: Sequence[Step],
        failures: Sequence[Failure],
        result: ApplyResult,
        unverified: Collection[str] = (),
    ) -> None:
        """``--no-rollback``: keep ``applied``, mark the records of the failed components and of the
        ``unverified`` ones (changed, their gates never judged because a dependency failed first) tainted,
        so that the next plan replaces them and judges them, and close the journal."""
        failed = {f.component for f in failures if f.component} | set(unverified)
        taint = [
            step.change.address
            for step in applied
            if step.change.component in failed and step.change.action != "delete"
        ]
        if taint:
            self.recorder.update(taint=taint)
        self.recorder.close(spec_digest=None)
        result.failed = list(failures)
        result.outcome = Outcome.KEPT
        result.kept = len(applied)
        result.tainted = taint


def _daemonset_key(check: HealthCheck) -> ObjectKey:
    return ObjectKey(
        "apps/v1", "DaemonSet", check.params.get("namespace"), str(check.params.get("daemonset"))
    )


def _restored_driver(steps: Sequence[Step], undone: Sequence[str]) -> dict[str | None, str | None]:
    """The driver release a rollback put back, per node pool (None: the stack's DaemonSet): the
    before-object's of each driver DaemonSet step it undid."""
    found: dict[str | None, str | None] = {}
    for step in steps:
        change = step.change
        if change.component == "driver" and change.kind == "DaemonSet" and change.address in undone:
            labels = ((step.restore or {}).get("metadata") or {}).get("labels") or {}
            found.setdefault(labels.get(POOL_LABEL), driver_release(step.restore) if step.restore else None)
    return found


def _expecting(checks: Sequence[HealthCheck], drivers: Mapping[str | None, str | None]) -> list[HealthCheck]:
    """``checks`` with each driver-version gate expecting the release the rollback restored on its pool's
    DaemonSet (when it restored one)."""
    return [
        HealthCheck(check.kind, {**check.params, "version": drivers[check.params.get("pool")]})
        if check.kind == "driver-version" and drivers.get(check.params.get("pool")) is not None
        else check
        for check in checks
    ]
