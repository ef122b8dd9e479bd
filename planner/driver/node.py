"""One node's driver upgrade, step by step, as the GPU Operator's upgrade controller does it (facts §7).

:func:`gpuplan.planner.driver.rollout.roll_driver` walks the nodes and calls, per node: :func:`gpu_pods_on`
and :func:`clear_gpu_pods` (``pod-deletion-required``; with ``drain.enable`` also :func:`drain_pods`,
``drain-required``), :func:`restart_driver_pod` (``pod-restart-required``: the DaemonSet is ``OnDelete``, so
deleting its pod makes the controller create one from the new template), and then
:func:`gpuplan.planner.driver.gate.wait_node_upgraded` (``validation-required``). Cordon and uncordon
stay with the walker, which keeps their bookkeeping. Every wait reads the node's pods (one list with
``spec.nodeName``) and then blocks on a watch
from that list's resourceVersion, bounded by the deadline from the injected clock: never a fixed sleep.

The plan calls :func:`gpu_pods_on` too, so the pods it says will be evicted are the ones this module evicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuplan.errors import TransientProviderError
from gpuplan.modules.driver import Drain, PodDeletion, UpgradePolicy
from gpuplan.planner.health.gates import Obj, in_sync, node_of, pod_name
from gpuplan.planner.health.revision import current_hash, labels_of
from gpuplan.planner.placement import pod_spec_of, unplaced_because
from gpuplan.providers.protocols import EvictionRefused, Listing, RolloutClient
from gpuplan.providers.snapshot import STACK_LABEL, ObjectKey

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")
DRAIN_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade-drain.skip"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
POLICY_PATH = "spec.driver.upgradePolicy"
"""Where the stack's upgradePolicy is set; a node pool with its own is ``spec.nodePools[i].driver...``."""
EVICTION_RETRY_SECONDS = 5.0  # kubectl drain's pause between evictions a PodDisruptionBudget refused
WATCH_SECONDS = 5.0


@dataclass(frozen=True)
class NodeFailure:
    """Why a node's upgrade stopped: the step, the pod (when one is to blame), the reason and the detail."""

    node: str
    step: str
    reason: str
    message: str
    pod: str | None = None


@dataclass(frozen=True)
class Timing:
    """The injected clocks: ``clock`` for deadlines, ``sleep`` between evictions a budget refused."""

    clock: Callable[[], float]
    sleep: Callable[[float], None]


class NodeStepFailed(Exception):
    """Raised inside a node's steps; the walker turns it into the rollout's failure."""

    def __init__(self, failure: NodeFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


# ------------------------------------------------------------------------------------------- GPU pods


def requests_gpu(pod: Obj) -> bool:
    """Whether any container of ``pod`` requests or limits an NVIDIA GPU or MIG resource."""
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]:
        resources = container.get("resources") or {}
        names = [*(resources.get("requests") or {}), *(resources.get("limits") or {})]
        if any(str(name).startswith(GPU_RESOURCE_PREFIXES) for name in names):
            return True
    return False


def gpu_pods_on(nodes: Iterable[str], pods: Iterable[Obj]) -> list[Obj]:
    """The pods on ``nodes`` that use a GPU and must go before the driver restarts (pod-deletion-required):
    live (not finished, not already terminating), requesting ``nvidia.com/gpu*`` or ``nvidia.com/mig-*``, and
    not the stack's own operand pods. Sorted by node, namespace and name so plans list them stably."""
    wanted = set(nodes)
    found = [
        pod
        for pod in pods
        if node_of(pod) in wanted
        and is_alive(pod)
        and requests_gpu(pod)
        and STACK_LABEL not in labels_of(pod)
    ]
    return sorted(found, key=lambda pod: (node_of(pod) or "", namespace_of(pod), pod_name(pod)))


def drain_candidates(
    node: str, pods: Iterable[Obj], selector: Callable[[Mapping[str, str]], bool]
) -> list[Obj]:
    """What ``kubectl drain`` would evict: live pods on the node, except DaemonSet pods, mirror pods and pods
    labelled to skip the drain, that match the drain's pod selector."""
    return sorted(
        (
            pod
            for pod in pods
            if node_of(pod) == node
            and is_alive(pod)
            and not _daemon_pod(pod)
            and MIRROR_ANNOTATION not in _annotations(pod)
            and labels_of(pod).get(DRAIN_SKIP_LABEL) != "true"
            and selector(labels_of(pod))
        ),
        key=lambda pod: (namespace_of(pod), pod_name(pod)),
    )


def refusal(
    pod: Obj, *, force: bool, delete_empty_dir: bool, where: str = f"{POLICY_PATH}.podDeletion"
) -> str | None:
    """Why the deletion rules refuse ``pod`` (kubectl drain's filters), or None. ``where``: the spec path of
    the rules (``...upgradePolicy.podDeletion`` or ``.drain``), so the hint names the key a user sets."""
    if not force and not _controller_ref(pod):
        return (
            f"{namespace_of(pod)}/{pod_name(pod)} is not managed by a controller; deleting it loses it "
            f"(set {where}.force: true to delete it anyway)"
        )
    if not delete_empty_dir and any(
        "emptyDir" in volume for volume in (pod.get("spec") or {}).get("volumes") or ()
    ):
        return (
            f"{namespace_of(pod)}/{pod_name(pod)} uses an emptyDir volume whose data would be lost "
            f"(set {where}.deleteEmptyDir: true to delete it anyway)"
        )
    return None


def refusal_by(pod: Obj, rules: PodDeletion | Drain, where: str) -> str | None:
    """:func:`refusal` under ``rules``, set at spec path ``where``."""
    return refusal(pod, force=rules.force, delete_empty_dir=rules.delete_empty_dir, where=where)


def clear_gpu_pods(
    writer: RolloutClient, node: str, policy: UpgradePolicy, timing: Timing, policy_path: str = POLICY_PATH
) -> list[str]:
    """Evict the node's GPU pods (podDeletion) and wait until they are gone; the pods evicted.
    ``policy_path``: where ``policy`` is set in the spec (for the hints)."""
    rules = policy.pod_deletion
    pods = gpu_pods_on([node], pods_of(node_pods(writer, node)))
    where = f"{policy_path}.podDeletion"
    return _evict_all(writer, node, "pod-deletion", pods, (rules, where), rules.timeout_seconds, timing)


def drain_pods(
    writer: RolloutClient,
    node: str,
    policy: UpgradePolicy,
    timing: Timing,
    selector: Callable[[Mapping[str, str]], bool],
    policy_path: str = POLICY_PATH,
) -> list[str]:
    """Drain the node (drain.enable): evict what ``kubectl drain`` would and wait until it is gone."""
    rules = policy.drain
    pods = drain_candidates(node, pods_of(node_pods(writer, node)), selector)
    return _evict_all(
        writer, node, "drain", pods, (rules, f"{policy_path}.drain"), rules.timeout_seconds, timing
    )


def _evict_all(
    writer: RolloutClient,
    node: str,
    step: str,
    pods: Sequence[Obj],
    rules: tuple[PodDeletion | Drain, str],
    timeout_seconds: int,
    timing: Timing,
) -> list[str]:
    for pod in pods:
        refused = refusal_by(pod, *rules)
        if refused is not None:
            raise NodeStepFailed(NodeFailure(node, step, "PodDeletionRefused", refused, pod_name(pod)))
    deadline = timing.clock() + timeout_seconds if timeout_seconds else None
    keys = [ObjectKey("v1", "Pod", namespace_of(pod), pod_name(pod)) for pod in pods]
    uids = {pod_name(pod): (pod.get("metadata") or {}).get("uid") for pod in pods}
    pending = list(keys)
    refusals: dict[ObjectKey, str] = {}  # the budget's own words, which name it
    while pending:
        answers = {key: writer.evict(key) for key in pending}
        refusals.update({key: a.reason for key, a in answers.items() if isinstance(a, EvictionRefused)})
        pending = [key for key in pending if not answers[key]]
        if not pending:
            break
        if deadline is not None and timing.clock() >= deadline:
            raise NodeStepFailed(_eviction_timeout(node, step, pending, refusals, timeout_seconds))
        timing.sleep(EVICTION_RETRY_SECONDS)

    def gone(listing: Listing) -> NodeFailure | bool:
        left = [pod_name(p.manifest) for p in listing if uids.get(pod_name(p.manifest), object()) == p.uid]
        return not left or (
            deadline is not None
            and timing.clock() >= deadline
            and NodeFailure(
                node,
                step,
                "PodDeletionTimeout",
                f"{node}: {', '.join(sorted(left))} still running {timeout_seconds}s after eviction",
                sorted(left)[0],
            )
        )

    wait_on_node(writer, node, gone, timing, deadline)
    return [f"{key.namespace}/{key.name}" for key in keys]


def _eviction_timeout(
    node: str,
    step: str,
    pending: Sequence[ObjectKey],
    refusals: Mapping[ObjectKey, str],
    timeout_seconds: int,
) -> NodeFailure:
    """The pods a budget kept for the whole step, the budget's reason, and what would let them go."""
    names = ", ".join(f"{key.namespace}/{key.name}" for key in pending)
    reasons = "; ".join(dict.fromkeys(refusals[key] for key in pending if key in refusals))
    field = "drain" if step == "drain" else "podDeletion"
    namespaces = " ".join(sorted({f"-n {key.namespace}" for key in pending}))
    return NodeFailure(
        node,
        step,
        "EvictionTimeout",
        f"{node}: a PodDisruptionBudget still forbids evicting {names} after {timeout_seconds}s"
        + (f" ({reasons})" if reasons else "")
        + f"; hint: let that budget allow a disruption (kubectl get pdb {namespaces}) or move the pod off "
        f"the node, then apply again; upgradePolicy.{field}.timeoutSeconds is how long a node waits for it",
        pending[0].name,
    )


# -------------------------------------------------------------------------------------- driver restart


def driver_pod_on(node: str, pods: Iterable[Obj], daemonset: Obj) -> Obj | None:
    """The live pod of ``daemonset`` on ``node`` (by owner uid), the newest if there are several."""
    uid = (daemonset.get("metadata") or {}).get("uid")
    owned = [
        pod
        for pod in pods
        if node_of(pod) == node
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
        and any(ref.get("uid") == uid for ref in (pod.get("metadata") or {}).get("ownerReferences") or ())
    ]
    return max(
        owned, key=lambda pod: str((pod.get("metadata") or {}).get("creationTimestamp") or ""), default=None
    )


NODE_NOT_TARGETED = "NodeNotTargeted"
CONDITION_TAINTS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/network-unavailable",
    }
)
"""The taints the node lifecycle controller keeps in step with a node condition (taintKeyToNodeConditionMap,
pkg/controller/nodelifecycle/node_lifecycle_controller.go) that DaemonSet pods do not tolerate as NoSchedule:
they go when the condition clears, so a node they keep a new pod from is waited for, not given up."""


def untargeted(writer: RolloutClient, node: str, daemonset: Obj) -> NodeFailure | None:
    """A failure when ``daemonset`` no longer places a pod on ``node`` (a taint it does not tolerate, a
    label its selector or affinity no longer matches): deleting its pod there leaves the node without one,
    and a deleted one is not made again. A cordon does not count: the controller tolerates
    ``node.kubernetes.io/unschedulable`` for every DaemonSet pod (AddOrUpdateDaemonPodTolerations,
    pkg/controller/daemon/util/daemonset_util.go)."""
    live = writer.read(ObjectKey("v1", "Node", None, node))
    if live is None:
        return None
    found = unplaced_because(pod_spec_of(daemonset), live.manifest, passing=CONDITION_TAINTS)
    if found is None:
        return None
    why, taint = found
    name = (daemonset.get("metadata") or {}).get("name")
    return NodeFailure(
        node,
        "pod-restart",
        NODE_NOT_TARGETED,
        f"{node}: DaemonSet {name} no longer places a pod on the node: {why}; hint: "
        + (
            "remove the taint (kubectl taint node "
            f"{node} {taint.get('key')}:{taint.get('effect')}-) or tolerate it (spec.daemonsets.tolerations)"
            if taint is not None
            else "label the node as the DaemonSet selects it, or leave it out of the stack's node selector"
        )
        + ", then apply again",
    )


def restart_driver_pod(writer: RolloutClient, node: str, daemonset: Obj) -> str | None:
    """Delete the node's driver pod unless it already runs the current template; the pod deleted."""
    pod = driver_pod_on(node, pods_of(node_pods(writer, node)), daemonset)
    if pod is None or in_sync(pod, daemonset, current_hash(writer, daemonset)):
        return None
    writer.delete_pod(ObjectKey("v1", "Pod", namespace_of(pod), pod_name(pod)))
    return str(pod_name(pod))


# --------------------------------------------------------------------------------------------- waiting


def node_pods(writer: RolloutClient, node: str) -> Listing:
    """Every pod on the node, in every namespace (one list by field selector)."""
    return writer.list_pods(field_selector=f"spec.nodeName={node}")


def pods_of(listing: Listing) -> list[Obj]:
    return [pod.manifest for pod in listing]


def wait_on_node(
    writer: RolloutClient,
    node: str,
    done: Callable[[Listing], NodeFailure | bool],
    timing: Timing,
    deadline: float | None,
    *,
    watch_node: Callable[[], bool] = lambda: False,
) -> None:
    """Read the node's pods until ``done`` says True (or a failure, raised), waiting on a watch of those pods
    (or of the Node itself while ``watch_node()`` says only a node label is missing)."""
    while True:
        listing = node_pods(writer, node)
        verdict = done(listing)
        if isinstance(verdict, NodeFailure):
            raise NodeStepFailed(verdict)
        if verdict:
            return
        remaining = (
            WATCH_SECONDS if deadline is None else max(0.0, min(WATCH_SECONDS, deadline - timing.clock()))
        )
        if watch_node():  # GFD relabels the node after the restart; the pods no longer change
            # A change between the judgement and this read waits at most WATCH_SECONDS.
            current = writer.read(ObjectKey("v1", "Node", None, node))
            events = writer.watch(
                "v1",
                "Node",
                field_selector=f"metadata.name={node}",
                resource_version=current.resource_version if current else None,
                timeout=max(remaining, 1.0),
            )
        else:
            events = writer.watch(
                "v1",
                "Pod",
                field_selector=f"spec.nodeName={node}",
                resource_version=listing.resource_version,
                timeout=max(remaining, 1.0),
            )
        try:
            for _event in events:
                break
        except TransientProviderError:
            pass  # expired or dropped: read afresh
        finally:
            close = getattr(events, "close", None)
            if callable(close):
                close()


# --------------------------------------------------------------------------------------------- helpers


def is_alive(pod: Obj) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


def _controller_ref(pod: Obj) -> bool:
    return any(ref.get("controller") for ref in (pod.get("metadata") or {}).get("ownerReferences") or ())


def _daemon_pod(pod: Obj) -> bool:
    return any(
        ref.get("kind") == "DaemonSet" and ref.get("controller")
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or ()
    )


def _annotations(obj: Obj) -> Mapping[str, str]:
    annotations: Mapping[str, str] = (obj.get("metadata") or {}).get("annotations") or {}
    return annotations


def namespace_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")
