"""What "upgraded" means on one node after its driver pod was restarted, and the wait for it (facts §7,
``pod-restart-required`` to ``validation-required``).

:func:`wait_node_upgraded` reads the node's pods until the DaemonSet's new driver pod is in sync and Ready,
the node reports the expected driver version (GFD's ``nvidia.com/cuda.driver-version.full``) and the
validator pod on the node is Ready, as the upgrade controller's states require; the deadline fails with what
is still missing. What cannot come fails at once, with its cause:

- a driver pod that cannot start (CrashLoopBackOff, ImagePullBackOff, ...);
- no driver pod, and the DaemonSet no longer places one on the node (a taint it does not tolerate, a label
  it no longer selects: :func:`gpuplan.planner.driver.node.untargeted`);
- no driver pod, and the DaemonSet controller says the API server refused to create one: a ``FailedCreate``
  Warning Event on the DaemonSet (``Error creating: <the server's error>``, RealPodControl.createPods,
  pkg/controller/controller_utils.go; admission refusing the pod, a ResourceQuota, an invalid template),
  one that came after the DaemonSet's spec was written (:func:`failed_creates`, read before the write).

It waits on a watch of the node's pods, or of the Node itself while only its label is behind; a refusal or
a taint moves no pod, so it is seen at the next read, within one watch window.

Callers: :func:`gpuplan.planner.driver.rollout.roll_driver` (an :class:`UpgradeCheck` as its ``gate``), built
by :class:`gpuplan.planner.driver.step.DriverRollout` from what the cluster runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.planner.driver.node import (
    NodeFailure,
    Timing,
    driver_pod_on,
    is_alive,
    namespace_of,
    untargeted,
    wait_on_node,
)
from gpuplan.planner.health.gates import Obj, in_sync, pod_failure, pod_name, pod_ready
from gpuplan.planner.health.nodes import DRIVER_LABEL
from gpuplan.planner.health.revision import current_hash, labels_of
from gpuplan.providers.protocols import Listing, Reader, RolloutClient
from gpuplan.providers.snapshot import LiveObject, ObjectKey


@dataclass(frozen=True)
class UpgradeCheck:
    """What "upgraded" means on a node: the DaemonSet's new pod, the version, the validator."""

    daemonset: ObjectKey
    expected_version: str | None
    """The driver version the node must report (GFD's label); None skips the check (no GFD to report it)."""
    validator_selector: str | None
    """Label selector of the validator pods in the DaemonSet's namespace; None skips validation."""
    timeout_seconds: float
    refusals_before: frozenset[str] | None = None
    """The DaemonSet's ``FailedCreate`` Events as they were before its spec was written
    (:func:`failed_creates`): one not among them, or one that repeated since, is the controller's answer to
    this rollout. None: Events are not judged (a refusal then fails at the deadline)."""


FAILED_CREATE = "FailedCreate"
"""The reason of the DaemonSet controller's Event when a pod create fails (FailedCreatePodReason,
pkg/controller/controller_utils.go)."""


def failed_creates(reader: Reader, daemonset: ObjectKey) -> frozenset[str]:
    """The ``FailedCreate`` Warning Events about the DaemonSet, each as ``name@resourceVersion``: a repeat of
    the same refusal is the same Event with its count raised (client-go's EventCorrelator), so a new
    resourceVersion tells it from the one listed."""
    return frozenset(_stamp(event) for event in _refusal_events(reader, daemonset))


def _refusal_events(reader: Reader, daemonset: ObjectKey, uid: str | None = None) -> list[Obj]:
    """The DaemonSet's FailedCreate Warning Events; with ``uid``, only those about that very DaemonSet (not
    an earlier one of its name)."""
    listing = reader.list_objects(
        "v1",
        "Event",
        namespace=daemonset.namespace,
        field_selector=(
            f"involvedObject.kind=DaemonSet,involvedObject.name={daemonset.name},"
            f"reason={FAILED_CREATE},type=Warning"
        ),
    )
    return [
        event.manifest
        for event in listing
        if uid is None or (event.manifest.get("involvedObject") or {}).get("uid") == uid
    ]


def _stamp(event: Obj) -> str:
    metadata = event.get("metadata") or {}
    return f"{metadata.get('name')}@{metadata.get('resourceVersion')}"


def refused(reader: Reader, daemonset: ObjectKey, uid: str | None, before: frozenset[str]) -> str | None:
    """The message of the latest ``FailedCreate`` Event of the DaemonSet not in ``before``, or None."""
    fresh = [event for event in _refusal_events(reader, daemonset, uid) if _stamp(event) not in before]
    if not fresh:
        return None
    latest = max(fresh, key=lambda event: str(event.get("lastTimestamp") or event.get("eventTime") or ""))
    return " ".join(str(latest.get("message") or "").split())


def wait_node_upgraded(writer: RolloutClient, node: str, check: UpgradeCheck, timing: Timing) -> None:
    """Until the node's new driver pod is Ready, the node reports the version and its validator is Ready;
    NodeStepFailed at once when a pod cannot start, or when the time is up."""
    deadline = timing.clock() + check.timeout_seconds
    pending = [_Pending("nothing read yet")]

    def judged(listing: Listing) -> NodeFailure | bool:
        verdict = _upgrade_verdict(writer, node, check, [pod.manifest for pod in listing])
        if isinstance(verdict, NodeFailure):
            return verdict
        if verdict is None:
            return True
        pending[0] = verdict
        if timing.clock() >= deadline:
            return NodeFailure(
                node,
                "validation",
                "Timeout",
                f"{node}: not upgraded after {check.timeout_seconds:g}s: {verdict.message}",
            )
        return False

    wait_on_node(writer, node, judged, timing, deadline, watch_node=lambda: pending[0].on_node)


@dataclass(frozen=True)
class _Pending:
    message: str
    on_node: bool = False
    """Only the Node object is behind (its driver label), so watch it rather than the pods."""


def _upgrade_verdict(
    writer: RolloutClient, node: str, check: UpgradeCheck, pods: Sequence[Obj]
) -> NodeFailure | _Pending | None:
    """None when upgraded, a failure, or what is still missing."""
    live = writer.read(check.daemonset)
    if live is None:
        return NodeFailure(node, "pod-restart", "DaemonSetGone", f"{check.daemonset.ref} was deleted")
    daemonset = live.manifest
    pod = driver_pod_on(node, pods, daemonset)
    if pod is None:
        return _not_coming(writer, node, check, daemonset) or _Pending(f"{node}: no driver pod yet")
    failed = pod_failure([pod], 0.0, float("inf"))
    if failed is not None:
        return NodeFailure(node, "pod-restart", failed.reason or "Failed", failed.message, pod_name(pod))
    if not in_sync(pod, daemonset, current_hash(writer, daemonset)):
        return _Pending(f"{node}: driver pod {pod_name(pod)} still runs an older template")
    if not pod_ready(pod):
        return _Pending(f"{node}: driver pod {pod_name(pod)} is not Ready yet")
    version = _version_problem(writer, node, check.expected_version)
    if version is not None:
        return _Pending(version, on_node=True)
    validator = _validator_problem(node, check, pods)
    return _Pending(validator) if validator is not None else None


def _not_coming(writer: RolloutClient, node: str, check: UpgradeCheck, daemonset: Obj) -> NodeFailure | None:
    """Why the node's missing driver pod will not come: the DaemonSet no longer places it, or the API server
    refused it (see the module doc)."""
    failure = untargeted(writer, node, daemonset)
    if failure is not None or check.refusals_before is None:
        return failure
    uid = (daemonset.get("metadata") or {}).get("uid")
    message = refused(writer, check.daemonset, uid, check.refusals_before)
    if message is None:
        return None
    name = check.daemonset.name
    return NodeFailure(
        node,
        "pod-restart",
        FAILED_CREATE,
        f"{node}: the DaemonSet controller cannot create the driver pod of {name}: {message}",
    )


def _version_problem(writer: RolloutClient, node: str, expected: str | None) -> str | None:
    if expected is None:
        return None
    found = (writer.read(ObjectKey("v1", "Node", None, node)) or _NO_NODE).labels.get(DRIVER_LABEL)
    if found == expected:
        return None
    return (
        f"{node}: reports driver {found}, expected {expected}"
        if found
        else f"{node}: driver version not reported yet (no label {DRIVER_LABEL})"
    )


def _validator_problem(node: str, check: UpgradeCheck, pods: Sequence[Obj]) -> str | None:
    if check.validator_selector is None:
        return None
    wanted = dict(part.split("=", 1) for part in check.validator_selector.split(",") if "=" in part)
    validators = [
        pod
        for pod in pods
        if namespace_of(pod) == check.daemonset.namespace
        and is_alive(pod)
        and all(labels_of(pod).get(k) == v for k, v in wanted.items())
    ]
    if not validators:
        return f"{node}: no validator pod runs there"
    not_ready = [pod for pod in validators if not pod_ready(pod)]
    if not_ready:
        return f"{node}: validator {pod_name(not_ready[0])} is not Ready"
    return None


_NO_NODE = LiveObject(ObjectKey("v1", "Node", None, ""), {})
