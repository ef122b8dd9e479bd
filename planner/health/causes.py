"""Permanent causes: what ends a gate's wait at once, because no amount of waiting fixes it.

A gate that waits out ``healthTimeoutSeconds`` on a cause that cannot go away only delays the rollback. These
rules tell a permanent cause from a transient state; a transient one stays "progressing" (its message names
it, so a timeout still says what was seen), a permanent one fails the gate with the cause named. Pure, like
:mod:`gpuplan.planner.health.gates`; the waiter supplies what one observation cannot show (the exit codes
seen in earlier rounds, the previous round's verdict).

The rule per gate:

- ``rollout``, ``validator-ready`` (the component's pods of the current template):
  - ``ErrImagePull`` / ``ImagePullBackOff``: permanent when the pull error says the image or tag does not
    exist or access is refused (containerd's ``not found``, ``manifest unknown``, ``unauthorized``,
    ``denied``, ``forbidden``), that the registry's name does not resolve on the node (Go's ``no such
    host``: the node's DNS answered that the name does not exist, an air-gapped node's usual answer, which
    no retry changes), or gives no reason at all (a bare back-off: the kubelet already failed to pull);
    transient when it names a network or registry hiccup (a timeout, a refused or reset connection, a DNS
    server that failed to answer, a 5xx or 429 from the registry), which the kubelet retries by itself.
    ``InvalidImageName``, ``CreateContainerConfigError`` and ``RunContainerError`` are permanent.
  - ``CrashLoopBackOff``: permanent once the container has restarted :data:`CRASH_RESTARTS` times and every
    exit code seen for it is the same (a crash that keeps crashing the same way); fewer restarts, or
    different exit codes, keep waiting (a pod racing a dependency that is still starting).
  - unschedulable: permanent at once when the scheduler's reason cannot change by waiting (the pod's node
    affinity or selector, or a host port another pod holds); any other reason fails after the grace period
    (:data:`gpuplan.planner.health.gates.UNSCHEDULABLE_GRACE_SECONDS`), as before.
- ``runtime-handler``: a node that reports its runtime handlers without the one asked for is permanent when
  no DaemonSet of gpuplan's provides it (an external toolkit: the host's containerd is configured by hand);
  with gpuplan's toolkit the handler appears once its pod has configured the runtime.
- ``allocatable``, and ``gfd-labels``' missing labels: permanent once the component's pod of the current
  template on the node has been Running and Ready for :data:`SETTLE_SECONDS` without the effect showing
  (:func:`settled_pod`): the device plugin registers as it starts and the kubelet writes its devices into the
  node's status at its next update; GFD labels the node as it starts. A plugin whose config yields no
  devices, another resource name or another count, or a GFD that cannot label, is Ready all the same, and
  only its log says why (which the API server shows only through the kubelet).
- ``driver-version``, and ``gfd-labels``' driver label: a node reporting another driver version than the one
  asked for is permanent once two rounds in a row report it (:class:`Confirmation`); the first sighting
  could be a label GFD has not refreshed yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health.gates import (
    GateStatus,
    Obj,
    Observation,
    condition_of,
    container_failure,
    current_pods,
    latest_pods,
    node_of,
    parse_time,
    pod_name,
    pod_ready,
    unschedulable,
)

CRASH_RESTARTS = 3
"""Restarts with the same exit code after which a crash-looping container is a permanent failure."""
PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})
PERMANENT_PULL = (
    "not found",
    "manifest unknown",
    "unauthorized",
    "denied",
    "forbidden",
    "invalid reference",
    "no such host",
)
TRANSIENT_PULL = (
    "i/o timeout",
    "timeout",
    "connection refused",
    "connection reset",
    "temporary failure",
    "too many requests",
    "429",
    "500 internal server error",
    "502 bad gateway",
    "503 service unavailable",
    "504 gateway timeout",
    "eof",
)
"""Pull errors of an unreachable or overloaded registry (containerd's and Go's net errors): retried by the
kubelet with back-off, and they heal when the network does."""
PERMANENT_UNSCHEDULABLE = ("didn't match pod's node affinity/selector", "didn't have free ports")
RUNTIME_HANDLER_MISSING = "RuntimeHandlerMissing"
DRIVER_MISMATCH = "DriverVersionMismatch"
"""The reason of a driver version that differs from the one asked for; :class:`Confirmation` fails it."""

SETTLE_SECONDS = 45.0
"""How long a component's pod has been Ready on a node before an effect it has not made there counts as one
it will not make. A registered plugin's devices show at the kubelet's next node status update
(nodeStatusUpdateFrequency, 10 s, pkg/kubelet/apis/config/v1beta1/defaults.go), GFD's labels at its first
pass; four updates and a half leave a busy node or API server its margin, still far inside a gate's
timeout."""
CAPACITY_NOT_ADVERTISED = "CapacityNotAdvertised"
LABEL_NOT_WRITTEN = "LabelNotWritten"
SETTLED_EFFECTS = {
    "allocatable": (CAPACITY_NOT_ADVERTISED, "without the kubelet reporting it", "a device plugin registers"),
    "gfd-labels": (LABEL_NOT_WRITTEN, "without writing it", "GFD labels a node"),
}
"""gate kind -> (reason, what the settled pod did not do, what it does as it starts)."""
PERMANENT_EFFECTS = frozenset({RUNTIME_HANDLER_MISSING, CAPACITY_NOT_ADVERTISED, LABEL_NOT_WRITTEN})
"""Reasons of an effect gate's problem that fail it at once."""

ExitHistory = Mapping[str, frozenset[int]]
"""``pod uid/container`` -> the exit codes seen for it (from ``lastState.terminated``) in the wait so far."""


def pod_verdict(
    pods: Iterable[Obj], now: float, grace: float, exits: ExitHistory | None = None
) -> GateStatus | None:
    """The first pod (by name) that fails for a permanent cause, as a failed status; else the first that
    cannot start for a transient one, as a progressing status naming it; None when every pod can start."""
    transient: GateStatus | None = None
    for pod in sorted(pods, key=pod_name):
        found = _pod_cause(pod, now, grace, exits or {})
        if found is None:
            continue
        if found.state == "failed":
            return found
        transient = transient or found
    return transient


def _pod_cause(pod: Obj, now: float, grace: float, exits: ExitHistory) -> GateStatus | None:
    failure = container_failure(pod)
    if failure is not None:
        return _container_cause(pod, failure, exits)
    placed = _permanently_unschedulable(pod)
    return placed if placed is not None else unschedulable(pod, now, grace)


def _container_cause(pod: Obj, failure: GateStatus, exits: ExitHistory) -> GateStatus:
    reason = (failure.reason or "").removeprefix("Init:")
    if reason in PULL_REASONS and _transient_pull(failure.message):
        return replace(
            failure, state="progressing", message=f"{failure.message}; the kubelet retries the pull"
        )
    if reason != "CrashLoopBackOff":
        return failure
    status = _container_status(pod, failure.container)
    restarts = int(status.get("restartCount") or 0)
    last = ((status.get("lastState") or {}).get("terminated") or {}).get("exitCode")
    seen = set(exits.get(exit_key(pod, failure.container), frozenset()))
    if last is not None:
        seen.add(int(last))
    code = (
        f"exit code {next(iter(seen))}"
        if len(seen) == 1
        else "exit codes " + ", ".join(map(str, sorted(seen)))
    )
    if restarts >= CRASH_RESTARTS and len(seen) == 1:
        return replace(failure, message=f"{failure.message}; {restarts} restarts, each ended with {code}")
    return replace(
        failure,
        state="progressing",
        message=f"{failure.message}; restart {restarts} of {CRASH_RESTARTS} before it counts as failed"
        + (f" ({code})" if seen else ""),
    )


def _transient_pull(message: str) -> bool:
    lowered = message.lower()
    if any(marker in lowered for marker in PERMANENT_PULL):
        return False
    return any(marker in lowered for marker in TRANSIENT_PULL)


def _permanently_unschedulable(pod: Obj) -> GateStatus | None:
    """Unschedulable for a reason waiting cannot change: failed at once, without the grace period."""
    failure = unschedulable(pod, float("inf"), 0.0)
    if failure is None:
        return None
    conditions = (pod.get("status") or {}).get("conditions") or ()
    message = next((str(c.get("message") or "") for c in conditions if c.get("type") == "PodScheduled"), "")
    if not any(marker in message.lower() for marker in PERMANENT_UNSCHEDULABLE):
        return None
    shown = " ".join(message.split())
    return replace(failure, message=f"{pod_name(pod)}: {failure.reason} ({shown}); waiting cannot place it")


def _container_status(pod: Obj, container: str | None) -> Obj:
    status: Obj = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for found in status.get(key) or ():
            if found.get("name") == container:
                return dict(found)
    return {}


def exit_key(pod: Obj, container: str | None) -> str:
    metadata: Obj = pod.get("metadata") or {}
    return f"{metadata.get('uid') or pod_name(pod)}/{container}"


@dataclass
class ExitCodes:
    """The exit codes the waiter saw for each container across its rounds (a pod's status keeps only the
    last run's), so that a crash loop counts as permanent only when it keeps ending the same way."""

    seen: dict[str, frozenset[int]] = field(default_factory=dict)

    def record(self, pods: Iterable[Obj]) -> ExitHistory:
        for pod in pods:
            status: Obj = pod.get("status") or {}
            for key in ("initContainerStatuses", "containerStatuses"):
                for container in status.get(key) or ():
                    code = ((container.get("lastState") or {}).get("terminated") or {}).get("exitCode")
                    if code is not None:
                        name = exit_key(pod, container.get("name"))
                        self.seen[name] = self.seen.get(name, frozenset()) | {int(code)}
        return dict(self.seen)


# ------------------------------------------------------------------------------------------ effect gates


def effect_cause(check: HealthCheck, node: Obj, observation: Observation, driver: str | None) -> str | None:
    """The reason of a permanent (or, for a driver mismatch, to-be-confirmed) cause of ``check``'s problem on
    ``node``; ``driver``: the version the node reports (GFD's label, or the DCGM exporter's scrape)."""
    if check.kind == "runtime-handler" and observation.daemonset is None:
        handlers = [
            str(h.get("name"))
            for h in (node.get("status") or {}).get("runtimeHandlers") or ()
            if h.get("name")
        ]
        if handlers and str(check.params.get("handler") or "nvidia") not in handlers:
            return RUNTIME_HANDLER_MISSING
    if check.kind in SETTLED_EFFECTS and _settled_miss(check, node) and settled_pod(node, observation):
        return SETTLED_EFFECTS[check.kind][0]
    expected = check.params.get("version") if check.kind == "driver-version" else None
    if check.kind == "gfd-labels":
        expected = observation.expected_driver
    if expected and driver and driver != expected:
        return DRIVER_MISMATCH
    return None


def _settled_miss(check: HealthCheck, node: Obj) -> bool:
    """Whether the node's problem is one a settled pod would have fixed: any allocatable problem, and a GFD
    label missing (not one that disagrees: its driver label has its own rule), of the gate's own component
    (a check with ``settled: false`` waits for another component's effect)."""
    if check.params.get("settled") is False:
        return False  # another component's effect, waited for after this one's work
    if check.kind != "gfd-labels":
        return True
    labels = (node.get("metadata") or {}).get("labels") or {}
    return any(not labels.get(key) for key in check.params.get("labels") or ())


def settled_pod(node: Obj, observation: Observation) -> tuple[str, float] | None:
    """The component's pod of the current template on ``node`` that has been Running and Ready for longer
    than :data:`SETTLE_SECONDS` (its name, and the seconds since it turned Ready); None when there is none,
    or its pods were not read."""
    ds = observation.daemonset
    if ds is None or not observation.pods_read:
        return None
    name = (node.get("metadata") or {}).get("name")
    for pod in sorted(
        latest_pods(ds, current_pods(ds, observation.pods), observation.revision_hash), key=pod_name
    ):
        if node_of(pod) != name or (pod.get("status") or {}).get("phase") != "Running" or not pod_ready(pod):
            continue
        since = parse_time((condition_of(pod, "Ready") or {}).get("lastTransitionTime"))
        if since is not None and observation.now - since > SETTLE_SECONDS:
            return pod_name(pod), observation.now - since
    return None


def settled_detail(check: HealthCheck, node: Obj, observation: Observation) -> str:
    """What the failure of a settled effect adds to the node's problem: the pod, how long it has been
    Ready, and where the reason is to be read."""
    found = settled_pod(node, observation)
    if found is None or check.kind not in SETTLED_EFFECTS:
        return ""
    pod, seconds = found
    _, missed, starts = SETTLED_EFFECTS[check.kind]
    where = (node.get("metadata") or {}).get("name")
    return (
        f"; {pod} has been Ready there for {seconds:.0f}s {missed} ({starts} as it starts): its config or "
        f"the node's GPUs do not give what the spec asks for, and its log on {where} says why"
    )


@dataclass
class Confirmation:
    """A driver version mismatch fails the gate when two rounds in a row report it on the same node."""

    previous: GateStatus | None = None

    def confirm(self, status: GateStatus) -> GateStatus:
        previous, self.previous = self.previous, status
        if status.state != "progressing" or status.reason != DRIVER_MISMATCH or previous is None:
            return status
        if (previous.reason, previous.node, previous.message) != (status.reason, status.node, status.message):
            return status
        return replace(status, state="failed", message=f"{status.message} (reported in two rounds in a row)")
