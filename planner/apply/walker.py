"""The apply walker: a plan's changes in dependency order, rolled out early, gated in order, undone on
failure.

:func:`apply` is the engine behind ``gpuplan apply`` (and ``gpuplan rollback`` and ``gpuplan demo``). Each
component with changes is two tasks (:mod:`gpuplan.planner.apply.schedule`): its changes, which start as soon
as the components it depends on have had their changes *made*, and its gate, which is judged once its own
changes are made and the gates of the components it depends on have *passed*. So the chain toolkit, device
plugin, GFD, DCGM exporter, validator rolls its DaemonSets out together, as a bare ``kubectl apply`` of the
same objects would, while each gate's effect checks can still rely on their dependencies' effects (GFD's GPU
count against the device plugin's capacity, the exporter's per-GPU samples against GFD's count). On each node
the order is kept by the pods themselves: the toolkit's driver-validation init container waits for the driver
(so a driver created by the same apply needs no barrier), the device plugin's and GFD's toolkit-validation
init containers wait for the toolkit, and a pod gets Ready only once its node's prerequisites are (as the GPU
Operator's operands do). A change whose effect must exist before a dependent's objects can be created finishes
before the dependent starts: the toolkit's RuntimeClass (an API server rejects a pod that names a missing
one), and the driver DaemonSet's update, which is the node-by-node
:class:`~gpuplan.planner.driver.step.DriverRollout` and returns only when every node runs the new driver, so
nothing that depends on the driver starts while it is in progress. The workers (up to ``parallelism``, each
with its own writer) take changes before gates, so with one worker every rollout starts before the first gate
is waited for. The plan's deletes run afterwards, once every gate passed, over the reversed graph (dependents
first, no gates). Within a component the objects go in a fixed kind order (ServiceAccount, RBAC, ConfigMaps,
RuntimeClass, DaemonSet, Service; deletes in reverse, :func:`gpuplan.planner.apply.steps.ordered`). A gate is
:func:`gpuplan.planner.health.wait.wait`, with the component's ``healthTimeoutSeconds``; a crash-looping,
unpullable or unschedulable pod fails the gate at once.

Failure (a gate, an API error retries could not cure, drift, Ctrl-C / SIGTERM): no new work starts, running
changes and gates stop at their next step, and every change of this apply is undone in reverse order of
completion (:func:`gpuplan.planner.apply.steps.undo`), the changes of components whose gates had not been
reached yet included, then the restored components' gates are waited for
(:mod:`gpuplan.planner.apply.undo`). With ``rollback=False`` nothing is undone and the records of the failed
components, and of the changed ones whose gates were never judged, are marked tainted (the next plan replaces
them). Style P5: a failed component's dependents' gates never pass, and their changes are undone.

The stack namespace is created first when the plan saw it missing. It is not a state record: deleting a
namespace deletes everything in it, which no plan of gpuplan's should do as a side effect.

**Locking**: the caller holds the state lock (``backend.locked("apply")``) for the whole call, as the CLI
does; a library caller must too, and release it on every exit path (the ``with`` block does). The walker
writes the state through the backend only (see :mod:`gpuplan.planner.apply.journal`); pending journal entries
of an interrupted apply must be reconciled (:func:`gpuplan.planner.apply.journal.recover`) before the plan is
made.

**An interrupted apply** (``kill -9`` after a mutation landed but before its health gate passed) leaves done
entries in the journal: :func:`resume_interrupted` runs (:mod:`gpuplan.planner.apply.resume`), before the
next plan, the health gates of the components those entries touched (the walker's own gate code), over the
entries that still stand (:func:`gpuplan.planner.apply.resume.outstanding`: an entry a later undo reversed
cancels out). A component whose DaemonSet the interrupted apply had not created yet is half-made: its steps
are undone (:func:`gpuplan.planner.apply.resume.undo_half_made`, which says why undo and not carry-over), so
the plan that follows creates it whole and that apply's rollback, if it fails, removes all of it. Healthy: the
journal is cleared (serial + 1) and the caller plans as usual. A gate fails: the entries are undone in reverse
order from their ``before`` manifests (:func:`gpuplan.planner.apply.steps.undo`), the restored components'
health is waited for, the journal is cleared and the result says what failed (component, pod, node, reason)
and what was restored. The components whose changes were made but whose gates had not passed when the
apply was killed (several at once, now that rollouts overlap) are exactly those resume gates, in graph order;
at most the components whose changes were still being made can be half-made, and their dependents had not
started.
"""

from __future__ import annotations

import concurrent.futures as futures
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuplan.errors import GpuplanError, StateError
from gpuplan.modules import catalog
from gpuplan.modules.base import HealthCheck
from gpuplan.planner import graph as graph_mod
from gpuplan.planner import pools
from gpuplan.planner.apply import host_drivers
from gpuplan.planner.apply import resume as apply_resume
from gpuplan.planner.apply.driver_check import UNVERIFIED, VERSION_GATE, DriverVersionCheck
from gpuplan.planner.apply.journal import Recorder, is_label_entry
from gpuplan.planner.apply.model import (
    STOPPED,
    ApplyCancelled,
    ApplyEvent,
    ApplyHooks,
    ApplyOptions,
    ApplyResult,
    Failure,
    Operation,
    Outcome,
    Walk,
)
from gpuplan.planner.apply.node_labels import NodeLabeller
from gpuplan.planner.apply.schedule import Schedule, Task
from gpuplan.planner.apply.steps import Step, StepContext, describe_error, ordered, perform, step_of_entry
from gpuplan.planner.apply.undo import Rollback
from gpuplan.planner.driver.step import DriverRollout, DriverRolloutFailed, RollsDriver
from gpuplan.planner.health import wait as health_wait
from gpuplan.planner.health.follow import ApplyCaches
from gpuplan.planner.health.gates import GateStatus
from gpuplan.planner.plan import rollback as plan_rollback
from gpuplan.planner.plan.decide import hands_back
from gpuplan.planner.plan.model import Change, NodeLabels, Plan
from gpuplan.planner.pools import PlannedPools
from gpuplan.planner.spec.model import Spec
from gpuplan.providers.protocols import ApplyClient, DriftDetected, FoldingLister
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.backend import StateBackend
from gpuplan.state.model import StateFile

__all__ = ["STOPPED", "apply", "resume_interrupted"]
STATE_WRITE = "StateWriteFailed"
"""The reason of a change whose state record could not be written (a full disk, a read-only folder)."""


def apply(
    plan: Plan,
    *,
    spec: Spec,
    backend: StateBackend,
    writer: ApplyClient,
    hooks: ApplyHooks,
    options: ApplyOptions | None = None,
) -> ApplyResult:
    """Apply ``plan`` (made from ``spec``) to the cluster ``writer`` talks to; the caller holds the lock."""
    return _Walker(Walk.of(plan), spec, backend, writer, hooks, options or ApplyOptions()).run()


def resume_interrupted(
    *,
    spec: Spec,
    backend: StateBackend,
    writer: ApplyClient,
    hooks: ApplyHooks,
    options: ApplyOptions | None = None,
) -> ApplyResult | None:
    """Verify or roll back the done journal entries an interrupted apply left (pending ones reconciled
    first by :func:`gpuplan.planner.apply.journal.recover`); None when the journal is empty. ``ok``: every
    touched component passed its gates and the journal is cleared; else the entries were undone in reverse
    order (``rolled_back``, ``rollback_complete``) and ``message`` names the failure and what was restored."""
    state = backend.read()
    if state is None or not state.journal:
        return None
    # the node labels an interrupted apply wrote are recorded (recover); the next plan puts them right
    entries = [entry for entry in apply_resume.outstanding(state.journal) if not is_label_entry(entry)]
    steps = [step_of_entry(entry, writer) for entry in entries]
    walk = Walk(spec.metadata.name, tuple(step.change for step in steps), has_changes=bool(steps))
    walker = _Walker(
        walk, spec, backend, writer, hooks, replace(options or ApplyOptions(), operation=Operation.RESUME)
    )
    check = apply_resume.InterruptedApply(
        rollback=walker.rollback,
        gate=lambda component: walker.gate(component, writer),
        fail=walker.errored,
        failures=walker.shared.failures,
        events=walker.events,
        result=walker.result,
        checks=walker.checks,
    )
    return check.verify(steps)


@dataclass
class _Shared:
    """What the workers share; guarded by ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    steps: list[Step] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    cancel: threading.Event = field(default_factory=threading.Event)
    restored: list[str] = field(default_factory=list)
    """Changes undone by their own step when it failed (a driver rollout that put the old driver back)."""
    unrestored: list[str] = field(default_factory=list)
    """Failed steps that could not undo themselves (putting the old driver back failed too)."""
    healthy: set[str] = field(default_factory=set)
    """Components whose gates passed in this apply."""


class _Walker:
    def __init__(
        self,
        walk: Walk,
        spec: Spec,
        backend: StateBackend,
        writer: ApplyClient,
        hooks: ApplyHooks,
        options: ApplyOptions,
    ) -> None:
        self.walk, self.spec, self.backend, self.writer, self.options = walk, spec, backend, writer, options
        self.graph = graph_mod.build(spec)
        self.checks: dict[str, tuple[HealthCheck, ...]] = dict(spec.health_checks().items())
        self.shared = _Shared()
        self.caches = (
            ApplyCaches(options.writer_factory)
            if options.writer_factory is not None and isinstance(writer, FoldingLister)
            else None
        )
        """The nodes and pods every gate of this apply reads, each followed by a client of its own."""
        self.events: list[ApplyEvent] = []
        self._hooks, self._hooks_lock = hooks, threading.Lock()
        self._local = threading.local()
        self._writers: list[ApplyClient] = []
        state = backend.read() or StateFile.new()
        if state.pending_journal():
            raise StateError(
                "the state holds the journal of an interrupted apply",
                detail="\n".join(
                    f"{e.action} {e.address} (started {e.started_at})" for e in state.pending_journal()
                ),
                hint="reconcile it first: gpuplan.planner.apply.journal.recover, or `gpuplan apply`",
            )
        self.recorder = Recorder(backend, state)
        self.planned = PlannedPools(tuple(spec.pool_selectors()), walk.pool_identity, walk.pool_of)
        self.labeller = NodeLabeller(
            spec.label_rules(),
            self.planned,
            self.recorder,
            lambda text, component: self.emit(ApplyEvent("note", text, component=component)),
        )
        self.result = ApplyResult(operation=options.operation, returning_to=options.returning_to)
        self.driver_version = DriverVersionCheck(self.checks, pending=walk.has_changes)
        self.handed_back = frozenset(
            change.address for change in walk.changes if hands_back(change, walk.changes)
        )
        """The plan's deletes of driver DaemonSets whose nodes an update takes back, done before it."""
        self.driver_rollout: RollsDriver = options.driver_rollout or DriverRollout(
            spec, resource_versions=walk.resource_versions, restore=options.rollback
        )
        restoring = _restoring_spec(spec, state)
        self.rollback = Rollback(
            writer=writer,
            recorder=self.recorder,
            options=options,
            checks=_restore_checks(
                restoring, self.checks if restoring is spec else dict(restoring.health_checks().items())
            ),
            order=self.graph.order(),
            emit=self.emit,
            wait_healthy=lambda component, checks, driver: self._wait_healthy(
                component, checks, self.writer, rolling_back=True, expected_driver=driver, spec=restoring
            ),
            driver_rollout=self.driver_rollout,
        )

    # -- events -------------------------------------------------------------------------------------------
    def emit(self, event: ApplyEvent) -> None:
        with self._hooks_lock:
            self.events.append(event)
            self._hooks.on_event(event)

    # -- the whole apply -----------------------------------------------------------------------------------
    def run(self) -> ApplyResult:
        work = [c for c in self.walk.changes if c.action != "no-op"]
        self.emit(
            ApplyEvent(
                "apply_start",
                f"applying {len(work)} change(s) to stack {self.walk.stack}",
                counts=dict(self.walk.counts),
            )
        )
        try:
            self._write_node_labels()
            if work:
                self._ensure_namespace(work)
                back = self.handed_back
                # a delete that hands its nodes back to an update goes with the update (steps.ordered)
                forward: dict[str, list[Change]] = {
                    c: ordered(
                        [x for x in work if x.component == c and (x.action != "delete" or x.address in back)]
                    )
                    for c in self.graph.order()
                }
                backward: dict[str, list[Change]] = {
                    c: ordered(
                        [
                            x
                            for x in work
                            if x.component == c and x.action == "delete" and x.address not in back
                        ]
                    )
                    for c in self.graph.order()
                }
                self._run_phase(
                    forward,
                    self.graph.depends_on,
                    self.graph.order(),
                    gate=True,
                    writes_after=self.graph.writes_after,
                )
                if not self.shared.failures:
                    self._verify_driver_version(self.writer, final=True)
                if not self.shared.failures:
                    self._run_phase(
                        backward, _reversed(self.graph.depends_on), self.graph.reverse_order(), gate=False
                    )
            if not self.shared.failures:
                self._remove_placement_labels()
        except KeyboardInterrupt:
            self._fail(Failure("apply", "interrupted (Ctrl-C or SIGTERM)", reason="Interrupted"))
        except GpuplanError as exc:
            self._fail(Failure("apply", describe_error(exc), reason="ApiError"))
        finally:
            for extra in self._writers:
                extra.close()
        try:
            return self._finish(work)
        finally:
            if self.caches is not None:
                self.caches.close()

    def _finish(self, work: Sequence[Change]) -> ApplyResult:
        result = self.result
        result.failed = list(self.shared.failures)
        result.changed = [step.change.address for step in self.shared.steps]
        result.rolled_back = list(self.shared.restored)
        result.left = list(self.shared.unrestored)
        result.drift = any(f.reason == "Drift" for f in result.failed)
        result.interrupted = any(f.reason == "Interrupted" for f in result.failed)
        if not result.failed:
            self.recorder.close(
                spec_digest=self.walk.spec_digest,
                changes=Counter(str(change.action) for change in work),
                outcome=_generation_outcome(self.options),
                host_drivers=host_drivers.reported(
                    self.spec, self.writer, self.caches.nodes if self.caches is not None else None
                ),
                node_pools=self.spec.recorded_pools(),
                spec=self.spec.recorded(),
            )
            result.outcome = Outcome.APPLIED if work or self.labeller.written else Outcome.NO_CHANGES
        elif self.options.rollback:
            self._restore_node_labels()
            self.rollback.undo(self.shared.steps, self.shared.failures, result)
        else:
            unverified = {s.change.component for s in self.shared.steps} - self.shared.healthy
            self.rollback.taint(self.shared.steps, self.shared.failures, result, unverified)
        result.serial = self.recorder.serial
        result.events = self.events
        self.emit(
            ApplyEvent(
                "summary",
                result.message,
                serial=result.serial,
                rolled_back=bool(result.rolled_back),
                state="ok" if result.ok else "failed",
                counts={
                    "changed": len(result.changed),
                    "failed": len(result.failed),
                    "rolled_back": len(result.rolled_back),
                },
            )
        )
        return result

    def _write_node_labels(self) -> None:
        """The plan's node labels first (design §7.1): the device plugin's config-manager reads its label on
        its node, so it is in place when the components' pods start. A label that follows GFD waits for its
        component's gates when this apply changes that component (:meth:`_label_before_gates`)."""
        for item in self.walk.node_labels:
            if _placement_removal(item):
                continue
            if item.value is None or self._deferred(item.label) is None:
                self.labeller.write(self.writer, item)

    def _remove_placement_labels(self) -> None:
        """The pool labels that placed a pool's own DaemonSets, removed once every change is made: removed
        first, the pool's driver pods would go and the stack's start at once, before the hand-back that
        takes the nodes node by node (cordon, GPU pods cleared) has run."""
        for item in self.walk.node_labels:
            if _placement_removal(item):
                self.labeller.write(self.writer, item)

    def _deferred(self, label: str) -> str | None:
        """The component whose gates ``label`` is written before, when this apply changes (and so gates)
        it."""
        component = self.labeller.follows_gfd(label)
        gated = {c.component for c in self.walk.changes if c.action not in ("no-op", "delete")}
        return component if component in gated else None

    def _label_before_gates(self, component: str, writer: ApplyClient) -> None:
        """Its dependencies' gates passed (GFD has labelled the nodes): the labels ``component`` reads. A
        rollback writes the generation's, as the plan lists them; an apply the spec's, on the nodes as
        they are now (GFD may have labelled more since the plan)."""
        if self.options.returning_to is None:
            self.labeller.before_gates(writer, component)
            return
        for item in self.walk.node_labels:
            if item.value is not None and self._deferred(item.label) == component:
                self.labeller.write(writer, item)

    def _restore_node_labels(self) -> None:
        """A failed apply puts back the node labels it wrote (newest first)."""
        for written, exc in self.labeller.restore(self.writer):
            self.shared.unrestored.append(
                f"label {written.label} of node {written.node}: {describe_error(exc)}"
            )

    def _ensure_namespace(self, work: Sequence[Change]) -> None:
        namespace = self.walk.namespace
        if self.walk.namespace_exists or not any(
            c.action != "delete" and (c.after or {}).get("metadata", {}).get("namespace") == namespace
            for c in work
        ):
            return
        key = ObjectKey("v1", "Namespace", None, namespace)
        if self.writer.read(key) is None:
            try:
                self.writer.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
            except DriftDetected as exc:
                # there now: gpuplan never owns the namespace, so whoever made it (our own create whose answer
                # was lost, or someone else since the read) made what is needed
                if exc.found is None:
                    raise
                return
            self.emit(
                ApplyEvent(
                    "note",
                    f"created namespace {namespace} (cluster setup, not a state record: "
                    "gpuplan never deletes a namespace)",
                )
            )

    # -- the phases ---------------------------------------------------------------------------------------
    def _run_phase(
        self,
        work: Mapping[str, list[Change]],
        depends_on: Mapping[str, Sequence[str]],
        order: Sequence[str],
        *,
        gate: bool,
        writes_after: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Hand the ready tasks (:class:`~gpuplan.planner.apply.schedule.Schedule`) to free workers until
        every task ran or one failed; then wait for the running ones (they stop at their next step)."""
        schedule = Schedule(
            depends_on, order, [c for c in order if work.get(c)], gated=gate, writes_after=writes_after
        )
        slots = max(1, self.options.parallelism) if self.options.writer_factory else 1
        with futures.ThreadPoolExecutor(max_workers=slots, thread_name_prefix="gpuplan-apply") as pool:
            running: dict[futures.Future[bool], Task] = {}
            while True:
                if not self._stopping():
                    for task in schedule.ready(slots - len(running)):
                        running[pool.submit(self._task, task, work[task.component])] = task
                if not running:
                    return
                for future in self._wait_some(running):
                    task = running.pop(future)
                    if future.result():
                        schedule.done(task)

    def _task(self, task: Task, changes: list[Change]) -> bool:
        if task.kind == "changes":
            return self._changes(task.component, changes)
        return self._gate(task.component, changes)

    def _wait_some(self, running: Mapping[futures.Future[bool], Task]) -> set[futures.Future[bool]]:
        try:
            done, _ = futures.wait(list(running), timeout=0.5, return_when=futures.FIRST_COMPLETED)
        except KeyboardInterrupt:
            self._fail(
                Failure(
                    "apply",
                    "interrupted (Ctrl-C or SIGTERM): stopping at the next step",
                    reason="Interrupted",
                )
            )
            return set()
        return done

    def _stopping(self) -> bool:
        return self.shared.cancel.is_set()

    def _fail(self, failure: Failure) -> None:
        with self.shared.lock:
            self.shared.failures.append(failure)
        self.shared.cancel.set()

    # -- one component --------------------------------------------------------------------------------------
    def _changes(self, component: str, changes: list[Change]) -> bool:
        """Run in a worker: the component's changes, in order. True when every one was made."""
        ctx = self._context()
        if any(change.action != "delete" for change in changes):
            self.driver_version.rolling_out(component)
        for change in changes:
            if self._stopping():
                return False
            self.emit(
                ApplyEvent(
                    "change_start",
                    f"{change.action} {change.address}",
                    address=change.address,
                    component=component,
                    action=change.action,
                )
            )
            started = time.monotonic()
            if self.caches is not None and change.kind == "DaemonSet" and change.after:
                health_wait.watch_warnings(self.caches, change.after)
            try:
                step = perform(change, ctx)
            except DriftDetected as exc:
                return self.errored(change, Failure(change.address, describe_error(exc), component, "Drift"))
            except DriverRolloutFailed as exc:  # where the rollout stopped: the node, its pod and why
                with self.shared.lock:  # the rollout undoes itself: the old driver back on its nodes
                    if exc.restored:
                        self.shared.restored.append(change.address)
                    elif self.options.rollback:
                        self.shared.unrestored.append(f"{change.address}: {exc.detail}")
                return self.errored(
                    change,
                    Failure(
                        change.address,
                        describe_error(exc),
                        component,
                        exc.reason,
                        exc.node,
                        exc.pod,
                        "driver-rollout",
                    ),
                )
            except StateError as exc:  # the cluster was written, the record of it was not: say why
                return self.errored(
                    change, Failure(change.address, describe_error(exc), component, STATE_WRITE)
                )
            except GpuplanError as exc:
                return self.errored(
                    change, Failure(change.address, describe_error(exc), component, "ApiError")
                )
            if step is not None:
                with self.shared.lock:
                    self.shared.steps.append(step)
            self.emit(
                ApplyEvent(
                    "change_complete",
                    f"{change.action} {change.address} done",
                    address=change.address,
                    component=component,
                    action=change.action,
                    elapsed=time.monotonic() - started,
                    serial=self.recorder.serial,
                )
            )
        return not self._stopping()

    def _gate(self, component: str, changes: list[Change]) -> bool:
        """Run in a worker once the component's changes are made and its dependencies' gates passed: its
        gates (and the driver-version gate when it is due). True when it is healthy."""
        writer = self._thread_writer()
        if self._stopping():
            return False
        try:
            self._label_before_gates(component, writer)
        except GpuplanError as exc:
            workload = next((c for c in changes if c.kind == "DaemonSet"), changes[-1])
            return self.errored(
                workload, Failure(workload.address, describe_error(exc), component, "ApiError")
            )
        status = self.gate(component, writer)
        if status.state == "passed":
            self._emit_notes(component, status)
            with self.shared.lock:
                self.shared.healthy.add(component)
            self.driver_version.settled(component)
            return self._verify_driver_version(writer)
        workload = next((c for c in changes if c.kind == "DaemonSet"), changes[-1])
        failure = Failure(
            workload.address,
            status.message,
            component,
            status.reason,
            status.node,
            status.pod,
            status.gate or None,
        )
        return self.errored(workload, failure)

    def errored(self, change: Change, failure: Failure) -> bool:
        self._fail(failure)
        self.emit(
            ApplyEvent(
                "change_errored",
                failure.describe(),
                address=change.address,
                component=failure.component,
                action=change.action,
                gate=failure.gate,
                reason=failure.reason,
                node=failure.node,
                pod=failure.pod,
            )
        )
        return False

    def gate(self, component: str, writer: ApplyClient) -> GateStatus:
        """The component's health gates (plus the deferred driver-version gate where due), waited for."""
        checks = self.driver_version.gates_now(
            component, self.checks.get(component, ()), writer, self._wait_options(component)
        )
        return self._wait_healthy(component, checks, writer)

    def _wait_healthy(
        self,
        component: str,
        checks: Sequence[HealthCheck],
        writer: ApplyClient,
        *,
        rolling_back: bool = False,
        timeout: float | None = None,
        expected_driver: str | None = None,
        spec: Spec | None = None,
    ) -> GateStatus:
        if not checks:
            return GateStatus("passed", "no health checks")
        cancel = self.shared.cancel

        def progress(report: health_wait.Progress) -> None:
            self.emit(
                ApplyEvent(
                    "progress",
                    report.message,
                    component=component,
                    gate=report.gate,
                    state=report.state,
                    ready=report.ready,
                    desired=report.desired,
                    elapsed=report.elapsed,
                    node=report.node,
                    pools=report.pools or None,
                )
            )
            if cancel.is_set() and not rolling_back:
                raise ApplyCancelled("stopped: another component failed or the apply was interrupted")

        try:
            return health_wait.wait(
                checks,
                writer,
                self.options.health_timeout.get(component, timeout),
                progress,
                options=self._wait_options(component, expected_driver, spec),
            )
        except ApplyCancelled as exc:
            return GateStatus("failed", exc.summary, reason=STOPPED)

    def _emit_notes(self, component: str, status: GateStatus) -> None:
        """What a passed gate did not judge as usual (:attr:`GateStatus.notes`), for the user to see."""
        for note in status.notes:
            self.emit(ApplyEvent("note", f"{component}: {note}", component=component, gate=status.gate))

    def _wait_options(
        self, component: str, expected_driver: str | None = None, spec: Spec | None = None
    ) -> health_wait.WaitOptions:
        """``expected_driver``: the release a rollback restored, instead of the spec's; ``spec``: the one the
        rollback restores, instead of this walk's."""
        judged = spec or self.spec
        return health_wait.WaitOptions(
            component=component,
            expected_driver=expected_driver or judged.spec.driver.explicit_version(),
            node_selector=dict(judged.spec.node_selector),
            pool_drivers=judged.pool_drivers(),
            # the identity the plan read holds for any spec; its pools only for the plan's own
            pools=self.planned if judged is self.spec else PlannedPools(identity=self.planned.identity),
            unschedulable_grace=self.options.unschedulable_grace,
            poll_seconds=self.options.poll_seconds,
            caches=self.caches,
            ignore=tuple(judged.spec.ignore),
            prometheus=self.options.prometheus,
        )

    def _verify_driver_version(self, writer: ApplyClient, *, final: bool = False) -> bool:
        """The deferred driver-version gate, once GFD or the DCGM exporter reports a version (after the
        component whose gate just passed, or at the end of the forward walk); a wrong version fails the apply.
        At the end with no source at all: a warning, not a failure (nothing can tell)."""
        if self._stopping():
            return False
        gates = self.driver_version.due(writer, self._wait_options("driver"))
        if gates is None:
            if final and self.driver_version.pending:
                self.emit(ApplyEvent("note", f"warning: {UNVERIFIED}", component="driver", gate=VERSION_GATE))
            return True
        status = self._wait_healthy("driver", gates, writer, timeout=self.driver_version.timeout)
        if status.state == "passed":
            self._emit_notes("driver", status)
            return True
        address = next(
            (c.address for c in self.walk.changes if c.component == "driver" and c.kind == "DaemonSet"),
            "driver",
        )
        failure = Failure(
            address,
            status.message,
            "driver",
            status.reason,
            status.node,
            status.pod,
            status.gate or VERSION_GATE,
        )
        self._fail(failure)
        self.emit(
            ApplyEvent(
                "change_errored",
                failure.describe(),
                address=address,
                component="driver",
                gate=failure.gate,
                reason=failure.reason,
                node=failure.node,
                pod=failure.pod,
            )
        )
        return False

    def _context(self) -> StepContext:
        writer = self._thread_writer()
        return StepContext(
            writer=writer,
            recorder=self.recorder,
            resource_versions=self.walk.resource_versions,
            delete_timeout=self.options.delete_timeout,
            driver_rollout=self.driver_rollout,
            report=lambda text: self.emit(ApplyEvent("note", text, component="driver")),
            handed_back=self.handed_back,
        )

    def _thread_writer(self) -> ApplyClient:
        if self.options.writer_factory is None or threading.current_thread() is threading.main_thread():
            return self.writer
        writer: ApplyClient | None = getattr(self._local, "writer", None)
        if writer is None:
            writer = self.options.writer_factory()
            self._local.writer = writer
            with self.shared.lock:
                self._writers.append(writer)
        return writer


def _restoring_spec(spec: Spec, state: StateFile) -> Spec:
    """The spec a rollback of this walk is judged by: the one the generation it returns to was applied with
    (:func:`gpuplan.planner.plan.rollback.last_applied`), so that its gates wait for that generation's
    capacity, labels and driver, not for the failed spec's; ``spec`` where no such generation recorded its
    spec."""
    restoring = plan_rollback.last_applied(state)
    if restoring is None or restoring.spec is None:
        return spec
    try:
        return plan_rollback.rollback_spec(spec, restoring)
    except GpuplanError:  # recorded by a gpuplan whose spec this one no longer reads
        return spec


def _restore_checks(
    spec: Spec, checks: Mapping[str, tuple[HealthCheck, ...]]
) -> dict[str, tuple[HealthCheck, ...]]:
    """The gates rollback waits for. A component the spec no longer runs (owner none or external) has no gates
    of its own, yet rollback recreates the objects this apply deleted, which were gpuplan's: they are judged
    as gpuplan runs the component (before, the wait passed at once with "no health checks"). Its other
    settings are the spec's: the deleted objects' own healthTimeoutSeconds is not known here."""
    context = spec.context()
    restored = dict(checks)
    for name, config in spec.components().items():
        if config.owner != "gpuplan":
            as_run = config.model_copy(update={"owner": "gpuplan"})
            restored[name] = catalog.MODULES[name].health_checks(as_run, context)
    return restored


def _reversed(depends_on: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    dependents: dict[str, list[str]] = {name: [] for name in depends_on}
    for name, deps in depends_on.items():
        for dep in deps:
            dependents[dep].append(name)
    return {name: tuple(sorted(others)) for name, others in dependents.items()}


def _generation_outcome(options: ApplyOptions) -> str:
    """What ``gpuplan state history`` says of the generation this walk made."""
    if options.operation is Operation.ROLLBACK and options.returning_to is not None:
        return f"rolled back to generation {options.returning_to}"
    if options.operation is Operation.TAKEOVER:
        return "took over from the GPU Operator"  # takeover.TAKEOVER_OUTCOME, which imports this module
    return "resumed" if options.operation is Operation.RESUME else "applied"


def _placement_removal(item: NodeLabels) -> bool:
    """Whether ``item`` removes the pool label that placed a pool's own DaemonSets (removed last)."""
    return item.value is None and item.label == pools.POOL_LABEL
