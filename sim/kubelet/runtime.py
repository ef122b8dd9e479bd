"""The simulated kubelets: every node's pods brought to life by the GPU rules, on the loop's one thread.

For each node the runtime keeps a ``NodeGpuState`` (``gpuplan.sim.kubelet.state``) and a record per pod bound
to it. A new pod gets the status a kubelet reports at once (Pending, ContainerCreating / PodInitializing);
after ``timing.podReadySeconds`` (+ ``imagePullSeconds`` and the pod's ``slowImages`` delay) the rules
(``gpuplan.sim.kubelet.rules.evaluate``) decide its outcome, ``pods.outcome_status`` turns that into the
status (written through the status subresource as ``kubelet``), and the outcome's ``NodeEffect`` is applied to
the Node (``node_effects``): labels as a metadata patch with the effect's own field manager (GFD writes as
``gpu-feature-discovery``), capacity/allocatable and runtimeHandlers through the node status subresource as
``kubelet``. Whenever a node's state changes (labels, resources, runtime handlers, driver, the set of roles
with a Ready pod) the other pods on it are evaluated again: a Ready toolkit lets the device plugin get Ready,
which lets the validator finish. A crash-looping container restarts after an exponential back-off, as the real
kubelet's 10 s, 20 s, 40 s ... capped at 300 s, scaled to ``timing.crashLoopBackoffSeconds`` (its restartCount
grows; ``crash_loop``); the back-off starts over after a run of 60 x that first delay without a crash (the
kubelet's 10 minutes), measured on ``clock``, which tests inject. A deleted pod's ``removal_effect`` is
applied; a pod marked for deletion (graceful delete) is removed by its node's kubelet in the same pass
(``termination``). A node marked down (NotReady fault) makes no progress until it is up again. GFD's labels
land only at its labelling passes (``gfd_passes``: start, changed inputs, every ``GFD_SLEEP_INTERVAL``), so
hand edits last until then. A container that exits (a run-to-completion image) keeps its run's result
until it restarts, as its restartPolicy decides (``completion``); a gpuplan pod's command runs as a real
process (``processes``), stopped when the pod goes. An image whose tag the registry lacks fails its pull,
ErrImagePull then ImagePullBackOff (``image_pulls``, from ``image_catalog.yaml``), and so does any image of
a registry the scenario node cannot reach (``unreachableRegistries``).

Driven by ``gpuplan.sim.controllers.loop.Loop`` (one timer heap, no thread per node or pod); built by
``gpuplan.sim.cluster.Simulator``, which also routes the pod proxy and runtime faults here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.api.objects import rfc3339
from gpuplan.sim.controllers.cache import Change, Key, Obj, resource_type
from gpuplan.sim.controllers.loop import Loop, Timer
from gpuplan.sim.kubelet import completion, crash_loop, images, node_effects, pods, ports, rules
from gpuplan.sim.kubelet.gfd_passes import GfdPasses
from gpuplan.sim.kubelet.image_pulls import ImagePulls
from gpuplan.sim.kubelet.logs import ContainerLogs
from gpuplan.sim.kubelet.mig_manager import MigManagers
from gpuplan.sim.kubelet.output_writer import OutputWriter
from gpuplan.sim.kubelet.pod_ips import FIRST_BLOCK, PodIps
from gpuplan.sim.kubelet.processes import ProcessRunner
from gpuplan.sim.kubelet.state import NodeGpuState
from gpuplan.sim.kubelet.termination import Terminations, is_terminating

log = logging.getLogger(__name__)

MANAGER = "kubelet"
MERGE = "application/merge-patch+json"
OUTPUT_OF_THEIR_OWN = frozenset({images.Role.VECTORADD, images.Role.GPUPLAN})
"""Roles whose log is their run's own output (the sample's lines, the real process's), not the programs'
lines of ``container_output``."""
MAX_EVALUATIONS_PER_FLUSH = 4  # bounds a cascade between pods whose effects keep changing the node
# the back-off lives in crash_loop; these names stay for the runtime's callers and tests
CRASH_LOOP_CAP_FACTOR = crash_loop.CAP_FACTOR
CRASH_LOOP_RESET_FACTOR = crash_loop.RESET_FACTOR
crash_loop_delay = crash_loop.delay


@dataclass
class Timing:
    """The scenario's timing (``gpuplan.sim.scenario.Timing``), mutable at runtime."""

    pod_ready_seconds: float = 0.1
    image_pull_seconds: float = 0.0
    crash_loop_backoff_seconds: float = 0.2
    mig_reconfigure_seconds: float = 0.1


@dataclass
class Faults:
    """Runtime-switchable pod faults: image -> failure kind, image -> extra seconds before Ready."""

    images: dict[str, str] = field(default_factory=dict)
    slow_images: dict[str, float] = field(default_factory=dict)


@dataclass
class PodRecord:
    """What a kubelet remembers about one pod it runs."""

    key: Key
    uid: str
    node: str
    role: images.Role
    images: tuple[str, ...]
    pod_ip: str
    start_time: str
    started: bool = False  # the first evaluation happened
    outcome: rules.PodOutcome | None = None
    restarts: int = 0  # restartCount: never reset
    backoff: crash_loop.BackOff = field(default_factory=crash_loop.BackOff)
    timer: Timer | None = None
    evaluations: int = 0  # in the flush numbered flush_gen
    flush_gen: int = 0
    run_ended: bool = False  # the main container's run exited: nothing changes until it restarts
    exits: list[int] = field(default_factory=list)  # exit codes of its runs, oldest first


class KubeletRuntime:
    """All simulated kubelets of the cluster."""

    def __init__(
        self,
        loop: Loop,
        *,
        timing: Timing | None = None,
        faults: Faults | None = None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``wall_clock``: the times written to statuses and the GFD/DCGM values; ``clock``: monotonic
        seconds for how long a container ran (the crash-loop back-off reset), the loop's clock by default."""
        self.loop = loop
        self.clock: Callable[[], float] = clock or (lambda: self.loop.clock())
        self.store = loop.store
        self.timing = timing or Timing()
        self.faults = faults or Faults()
        self.wall_clock = wall_clock
        self.states: dict[str, NodeGpuState] = {}
        self.records: dict[Key, PodRecord] = {}
        self._by_node: dict[str, set[Key]] = {}
        self._host_ips: dict[str, tuple[str | None, str]] = {}  # node -> (its resourceVersion, InternalIP)
        self.down: set[str] = set()
        self._flush_gen = 0
        self._admit: set[Key] = set()
        self._evaluate: set[Key] = set()
        self._dirty_nodes: set[str] = set()
        self._removed: list[tuple[Obj, PodRecord]] = []
        # pod -> (its latest status write, the status it sends) until the answer is observed
        self._statuses_in_flight: dict[Key, tuple[object, Obj]] = {}
        self._pods_rt = resource_type(loop.store.registry, "v1", "Pod")
        self._cm_rt = resource_type(loop.store.registry, "v1", "ConfigMap")
        self.gfd_passes = GfdPasses(
            loop, lambda key: self._evaluate.add(key)
        )  # _evaluate is swapped per flush
        self.terminations = Terminations(loop, self._kubelet_runs)
        self.pulls = ImagePulls(loop, lambda: self.timing.crash_loop_backoff_seconds)
        self.logs = ContainerLogs()  # read by the API server's pods/log
        self.declared_ports: tuple[ports.DeclaredPort, ...] = ()  # the scenario's ``ports``
        self.pod_ips = PodIps.loopback(FIRST_BLOCK)  # pod_network.PodNetwork picks its own network
        self.on_pod_ip: Callable[[Key, Obj, str], None] = lambda key, pod, ip: None
        self.processes = ProcessRunner(loop, self.logs, lambda key: self._evaluate.add(key))
        self.output = OutputWriter(self.logs, lambda: self.wall_clock())  # what the containers print
        self.mig_managers = MigManagers(
            loop,
            seconds=lambda: self.timing.mig_reconfigure_seconds,
            request_evaluation=lambda key: self._evaluate.add(key),
            delete_pod=self._delete_pod,
        )

    # -- node registry -----------------------------------------------------------------------------------
    def add_state(self, state: NodeGpuState) -> None:
        """Run a kubelet for ``state``'s node (call before its Node object is created)."""
        self.states[state.node.name] = state

    def set_down(self, node: str, down: bool) -> None:
        """A down kubelet makes no progress; when it comes back it looks at all its pods again."""
        if down:
            self.down.add(node)
            return
        self.down.discard(node)
        self.terminations.node_up(node)
        for key in self.loop.cache.pods_by_node.get(node, set()):
            if key in self.records:
                self._evaluate.add(key)
            else:
                self._admit.add(key)

    def reevaluate(self, predicate: Callable[[PodRecord], bool]) -> None:
        """Evaluate again every started pod that ``predicate`` picks (after a runtime fault changed)."""
        self._evaluate.update(k for k, r in self.records.items() if r.started and predicate(r))

    # -- events --------------------------------------------------------------------------------------
    def on_change(self, change: Change) -> None:
        if change.kind == "pods":
            self._on_pod(change)
        elif change.kind == "nodes":
            self._on_node(change)

    def _on_pod(self, change: Change) -> None:
        self.terminations.note(change)
        if change.new is None:
            record = self._forget(change.key)
            self._admit.discard(change.key)
            self._evaluate.discard(change.key)
            if record is not None and change.old is not None:
                self._removed.append((change.old, record))
            return
        if is_terminating(change.new):
            return  # being stopped: no admission, no restart for a new image
        record = self.records.get(change.key)
        if record is None and change.new.get("spec", {}).get("nodeName"):
            self._admit.add(change.key)
        elif record is not None and _images(change.new) != record.images:
            record.images = _images(change.new)  # a new image: the kubelet restarts the container
            record.role = images.identify(change.new)
            record.run_ended = completion.is_terminal(record.outcome)
            self._container_started(record)
            self._evaluate.add(change.key)

    def _forget(self, key: Key) -> PodRecord | None:
        self.gfd_passes.forget(key)
        self.pulls.forget(key)
        self.mig_managers.forget(key)
        self._statuses_in_flight.pop(key, None)
        record = self.records.pop(key, None)
        if record is not None:
            keys = self._by_node.get(record.node, set())
            keys.discard(key)
        return record

    def _on_node_keys(self, node: str) -> list[Key]:
        return sorted(self._by_node.get(node, set()))

    def _on_node(self, change: Change) -> None:
        name = change.key[1]
        if change.new is None:
            self.states.pop(name, None)
            self._host_ips.pop(name, None)
            for key in self._on_node_keys(name):
                gone = self._forget(key)
                if gone is not None:
                    self.processes.stop(gone.uid, 0)  # the node and what ran on it are gone
            return
        state = self.states.get(name)
        if state is None:
            return
        labels = dict(change.new["metadata"].get("labels") or {})
        if labels != state.labels:
            state.labels = labels
            self._dirty_nodes.add(name)
        if change.old is None:  # the kubelet registered: pods bound before it can start now
            self._admit.update(self.loop.cache.pods_by_node.get(name, set()))

    # -- work ----------------------------------------------------------------------------------------
    def flush(self) -> bool:
        did: bool = self.terminations.flush()
        self._flush_gen += 1
        while self._admit or self._evaluate or self._dirty_nodes or self._removed:
            did = True
            removed, self._removed = self._removed, []
            for pod, gone in removed:
                self._remove(pod, gone)
            admit, self._admit = sorted(self._admit), set()
            for key in admit:
                self._admit_pod(key)
            for node in sorted(self._dirty_nodes):
                self._evaluate.update(k for k in self._on_node_keys(node) if self.records[k].started)
            self._dirty_nodes.clear()
            evaluate, self._evaluate = sorted(self._evaluate), set()
            for key in evaluate:
                record = self.records.get(key)
                if record is None:
                    continue
                if record.flush_gen != self._flush_gen:
                    record.flush_gen, record.evaluations = self._flush_gen, 0
                if record.evaluations < MAX_EVALUATIONS_PER_FLUSH:
                    record.evaluations += 1
                    self._evaluate_pod(record)
        return did

    def _kubelet_runs(self, node: str) -> bool:
        return bool(node in self.states and node not in self.down and self.loop.cache.node(node) is not None)

    def _admit_pod(self, key: Key) -> None:
        pod = self.loop.cache.pods.get(key)
        if pod is None or key in self.records or is_terminating(pod):
            return
        node = pod.get("spec", {}).get("nodeName", "")
        if node not in self.states or node in self.down or self.loop.cache.node(node) is None:
            return
        record = PodRecord(
            key=key,
            uid=pod["metadata"].get("uid", ""),
            node=node,
            role=images.identify(pod),
            images=_images(pod),
            pod_ip=self._next_ip(),
            start_time=self._now(),
        )
        self.records[key] = record
        self._by_node.setdefault(node, set()).add(key)
        self.on_pod_ip(key, pod, record.pod_ip)  # the pod network listens before the status says so
        self._write_status(record, pods.pending_status(pod, self._placement(record)))
        record.timer = self.loop.call_later(self._startup_delay(record), lambda: self._start(key))

    def _start(self, key: Key) -> None:
        record = self.records.get(key)
        if record is None:
            return
        record.timer = None
        record.started = True
        self._container_started(record)
        self._evaluate.add(key)

    def _container_started(self, record: PodRecord) -> None:
        """The pod's main container (re)started: a GFD labels on its first pass, then at its interval."""
        pod = self.loop.cache.pods.get(record.key)
        if record.role is images.Role.GFD and pod is not None:
            self.gfd_passes.started(record.key, pod)
        else:
            self.gfd_passes.forget(record.key)

    def _startup_delay(self, record: PodRecord) -> float:
        slow = max((self.faults.slow_images.get(i, 0.0) for i in record.images), default=0.0)
        return self.timing.pod_ready_seconds + self.timing.image_pull_seconds + slow

    def _evaluate_pod(self, record: PodRecord) -> None:
        pod = self.loop.cache.pods.get(record.key)
        state = self.states.get(record.node)
        if pod is None or state is None or record.node in self.down or not record.started:
            return
        if record.run_ended:
            return
        outcome = rules.evaluate(pod, state, self._pod_context(record))
        key = record.key
        unreachable = state.node.unreachable_registries
        self.pulls.pulled(
            key, record.images, self.faults.images, lambda: self._evaluate.add(key), unreachable
        )
        if record.role is images.Role.GPUPLAN:
            outcome = self.processes.outcome(record.key, pod, record.restarts, outcome)
        if record.role is images.Role.MIG_MANAGER:
            outcome = self.mig_managers.outcome(record.key, pod, state, outcome, self.context())
        outcome = completion.settle(pod, outcome)
        self._run_ended(record, pod, outcome)
        previous, record.outcome = record.outcome, outcome
        self._schedule_restart(record, outcome)
        status = pods.outcome_status(pod, outcome, self._placement(record))
        changed_status = self._write_status(record, status)
        if record.role not in OUTPUT_OF_THEIR_OWN and (changed_status or not _same_report(previous, outcome)):
            self.output.observed(record.uid, pod, status, outcome, state)
        effect = outcome.effect
        if effect is not None and record.role is images.Role.GFD:
            effect = self.gfd_passes.labels_to_write(record.key, effect)
        changed = effect is not None and self.apply_effect(record.node, effect)
        was_ready = previous is not None and previous.ready
        if changed or was_ready != outcome.ready:
            self._node_changed(record.node, except_key=record.key)

    def _run_ended(self, record: PodRecord, pod: Obj, outcome: rules.PodOutcome) -> None:
        """A run that exited: its log is kept, and its result stays until the kubelet restarts it."""
        if outcome.exit_code is None:
            return
        record.run_ended = True
        record.exits.append(outcome.exit_code)
        container = str((images.main_container(pod) or {}).get("name", ""))
        if outcome.log:
            if self.logs.has(record.uid, container):
                self.logs.restart(record.uid, container)
            self.logs.write(record.uid, container, "\n".join(outcome.log), now=self.wall_clock())
            self.logs.finish(record.uid, container)

    def _pod_context(self, record: PodRecord) -> rules.PodContext:
        """The context with the pod's pulls of tags the registry lacks as image faults (``image_pulls``)."""
        context = self.context()
        state = self.states.get(record.node)
        unreachable = state.node.unreachable_registries if state is not None else frozenset()
        pull_faults = self.pulls.faults(record.key, record.images, self.faults.images, unreachable)
        if pull_faults is self.faults.images:
            return context
        return dataclasses.replace(context, image_faults=pull_faults)

    def _schedule_restart(self, record: PodRecord, outcome: rules.PodOutcome) -> None:
        if not outcome.crash_looping:
            if record.timer is not None:
                record.timer.cancel()
                record.timer = None
            record.backoff.running(self.clock())
            return
        if record.timer is None:
            key = record.key
            delay = record.backoff.crashed(self.timing.crash_loop_backoff_seconds, self.clock())
            record.timer = self.loop.call_later(delay, lambda: self._restart(key), settling=False)

    def _restart(self, key: Key) -> None:
        record = self.records.get(key)
        if record is None:
            return
        record.timer = None
        if record.node not in self.down:
            record.run_ended = False
            record.restarts += 1
            record.backoff.restarted(self.clock())
            self._container_started(record)
        self._evaluate.add(key)

    def _remove(self, pod: Obj, record: PodRecord) -> None:
        if record.timer is not None:
            record.timer.cancel()
        self.logs.forget(record.uid)
        self.processes.stop(record.uid, completion.grace_period(pod))
        self.output.forget(record.uid)
        state = self.states.get(record.node)
        if state is None:
            return
        effect = rules.removal_effect(pod, state, self.context())
        if effect is not None:
            self.apply_effect(record.node, effect)
        self._node_changed(record.node, except_key=None)

    def _node_changed(self, node: str, except_key: Key | None) -> None:
        state = self.states.get(node)
        records = [self.records[k] for k in self._on_node_keys(node)]
        if state is not None:
            state.ready_roles = {
                r.role
                for r in records
                if r.outcome is not None and r.outcome.ready and r.role is not images.Role.OTHER
            }
        self._evaluate.update(r.key for r in records if r.started and r.key != except_key)

    # -- node effects --------------------------------------------------------------------------------
    def apply_effect(self, node_name: str, effect: rules.NodeEffect) -> bool:
        """Apply ``effect`` to the node and its state (``node_effects``); True when anything changed."""
        changed: bool = node_effects.apply(self.loop, self.states[node_name], effect)
        return changed

    # -- pod status ----------------------------------------------------------------------------------
    def _write_status(self, record: PodRecord, status: Obj) -> bool:
        """Patch the pod's status to ``status``; False when it already says it (no write). The patch goes
        out behind the loop (``Loop.write_behind``): until its answer is in the cache, the status it sends
        is the base of the next one, as the kubelet's status manager compares with what it last sent."""
        pod = self.loop.cache.pods.get(record.key)
        if pod is None:
            return True
        in_flight = self._statuses_in_flight.get(record.key)
        base = in_flight[1] if in_flight is not None else pod.get("status")
        status = pods.keep_transition_times(status, base)
        if pods.same_status(status, base):
            return False
        ns, name = record.key
        body = {"status": pods.status_patch(status, base)}
        token = object()
        self._statuses_in_flight[record.key] = (token, status)

        def write() -> Obj | None:
            try:
                return self.store.patch(
                    self._pods_rt,
                    ns,
                    name,
                    body,
                    MERGE,
                    manager=MANAGER,
                    subresource="status",
                    read_only=True,  # only observed
                )
            except store_mod.ApiError as exc:
                if exc.code == 404:
                    return None
                raise

        def done() -> None:
            if self._statuses_in_flight.get(record.key, (None,))[0] is token:
                del self._statuses_in_flight[record.key]

        self.loop.write_behind("pods", record.key, write, done)
        return True

    def _placement(self, record: PodRecord) -> pods.Placement:
        return pods.Placement(
            host_ip=self._host_ip(record.node),
            pod_ip=record.pod_ip,
            start_time=record.start_time,
            now=self._now(),
            restarts=record.restarts,
            backoff_step=record.backoff.step,
            last_exit_code=_previous_exit(record),
        )

    # -- helpers for the Simulator -------------------------------------------------------------------
    def context(self) -> rules.PodContext:
        return rules.PodContext(
            image_faults=dict(self.faults.images),
            config_lookup=self._config_map,
            now=float(int(self.wall_clock().timestamp())),
        )

    def serve_proxy(self, pod: Obj, port: int, path: str) -> tuple[int, str, bytes]:
        """What the process in ``pod`` answers on ``port``/``path`` (run on the loop thread)."""
        node = pod.get("spec", {}).get("nodeName", "")
        state = self.states.get(node)
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in pod.get("status", {}).get("conditions") or []
        )
        if state is None or node in self.down or pod.get("status", {}).get("phase") != "Running" or not ready:
            name = pod["metadata"]["name"]
            raise store_mod.ApiError(
                503,
                "ServiceUnavailable",
                f'error trying to reach service: pod "{name}" is not running and ready',
            )
        return ports.serve(
            pod,
            state,
            port,
            path,
            now=self.wall_clock().timestamp(),
            config_lookup=self._config_map,
            declared=self.declared_ports,
        )

    def _config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.store.get(self._cm_rt, namespace, name)
        except store_mod.ApiError as exc:
            if exc.code == 404:
                return None
            raise
        return found

    def _delete_pod(self, pod: Obj) -> None:
        """Delete ``pod`` through the API as a component on the node does (graceful: its kubelet stops it)."""
        meta = pod["metadata"]
        try:
            deleted = self.store.delete(self._pods_rt, meta["namespace"], meta["name"])
        except store_mod.ApiError as exc:
            if exc.code == 404:
                return
            raise
        if deleted.get("kind") != "Status":
            self.loop.observe("pods", deleted, deleted=not deleted["metadata"].get("deletionTimestamp"))

    def _host_ip(self, node_name: str) -> str:
        """The node's InternalIP, read again only when the node changed (every evaluation asks)."""
        node = self.loop.cache.node(node_name) or {}
        version = (node.get("metadata") or {}).get("resourceVersion")
        known = self._host_ips.get(node_name)
        if known is not None and known[0] == version:
            return known[1]
        found = ""
        for address in node.get("status", {}).get("addresses") or []:
            if address.get("type") == "InternalIP":
                found = str(address.get("address", ""))
                break
        self._host_ips[node_name] = (version, found)
        return found

    def _next_ip(self) -> str:
        return self.pod_ips.next()

    def _now(self) -> str:
        moment = self.wall_clock()
        if moment.tzinfo is UTC:  # one string per second, shared by every status stamped in it
            return rfc3339(moment)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _images(pod: Obj) -> tuple[str, ...]:
    spec = pod.get("spec", {})
    return tuple(
        c.get("image", "") for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])
    )


def _previous_exit(record: PodRecord) -> int | None:
    """The exit code of the main container's run before its current state (a run that ended counts as
    the current state)."""
    finished = record.exits[:-1] if record.run_ended else record.exits
    return finished[-1] if finished else None


def _same_report(previous: rules.PodOutcome | None, outcome: rules.PodOutcome) -> bool:
    """Whether ``outcome`` tells the container output what ``previous`` told it: with an unchanged status
    too, observing it again would print nothing (most evaluations are of a pod whose neighbour changed)."""
    return (
        previous is not None
        and previous.init_done == outcome.init_done
        and previous.ready == outcome.ready
        and previous.message == outcome.message
    )
