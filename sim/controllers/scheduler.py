"""kube-scheduler for the pods nobody placed: filter the nodes, pick one, bind through ``pods/binding``.

A pod without ``spec.nodeName`` whose ``schedulerName`` is ``default-scheduler`` is placed as the default
profile's plugins decide, in their order; a node fails at the first plugin that rejects it:

- NodeUnschedulable: a cordoned node (``spec.unschedulable``) unless the pod tolerates
  ``node.kubernetes.io/unschedulable:NoSchedule``;
- NodeName, NodeAffinity (``nodeSelector`` and the required node affinity terms) and TaintToleration
  (NoSchedule/NoExecute taints), with the DaemonSet controller's predicates (``scheduling``);
- NodeResourcesFit: the pod's requests (cpu, memory, ``nvidia.com/gpu``, the MIG and shared resources the
  device plugin advertises, anything else) against the node's ``status.allocatable`` minus what the
  non-terminal pods bound there request, and ``pods``.

Among the feasible nodes the least allocated one wins (NodeResourcesFit's LeastAllocated score over cpu and
memory), then the larger sum of matching preferred node-affinity weights, then the node name: deterministic.
The binding is written as ``kube-scheduler`` and PodEvents records ``Scheduled``.

When no node fits, the pod's ``PodScheduled`` condition becomes False with reason ``Unschedulable`` and the
message kube-scheduler writes, also as a Warning ``FailedScheduling`` Event from ``default-scheduler``:
``0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had untolerated taint(s). no new claims
to deallocate, preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2
Preemption is not helpful for scheduling.`` The parts, from kubernetes/kubernetes (v1.35+):
pkg/scheduler/framework/types.go ``FitError.Error`` (the sorted "count reason" histogram, then the
PostFilter messages), plugins/tainttoleration/taint_toleration.go (``node(s) had untolerated taint(s)``),
plugins/dynamicresources/dynamicresources.go ``PostFilter`` (``no new claims to deallocate`` for a pod
without ResourceClaims) and plugins/defaultpreemption/default_preemption.go (``preemption: `` + the
evaluator's histogram: nodes rejected as UnschedulableAndUnresolvable are "not helpful"). Preemption itself
is not simulated: every node that only lacks room reports no victims.

The pod is tried again when something that could make it fit happens: a node is added or its allocatable,
labels, taints or unschedulable flag change (the device plugin registering ``nvidia.com/gpu``), a bound pod
is deleted or finishes (Succeeded/Failed), or the pod's own spec changes.

A loop handler (``gpuplan.sim.controllers.loop``), registered by ``gpuplan.sim.cluster.Simulator``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers import resources
from gpuplan.sim.controllers.cache import Change, Key, Obj, resource_type
from gpuplan.sim.controllers.events import WARNING
from gpuplan.sim.controllers.pod_events import SCHEDULER
from gpuplan.sim.controllers.scheduling import matches_node_selector, matches_required_affinity, tolerates

if TYPE_CHECKING:
    from gpuplan.sim.controllers.loop import Loop

NAME = "default-scheduler"
MANAGER = "kube-scheduler"
MERGE = "application/merge-patch+json"
UNSCHEDULABLE_TAINT: Obj = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"
NO_CLAIMS = "no new claims to deallocate"
NO_NODES = "no nodes available to schedule pods"
# reasons no eviction could cure (framework.UnschedulableAndUnresolvable)
UNRESOLVABLE = frozenset(
    {
        "node(s) were unschedulable",
        "node(s) didn't match the requested node name",
        "node(s) didn't match Pod's node affinity/selector",
        "node(s) had untolerated taint(s)",
    }
)
_NODE_FIELDS = (
    ("metadata", "labels"),
    ("spec", "taints"),
    ("spec", "unschedulable"),
    ("status", "allocatable"),
)


@dataclass(frozen=True)
class Verdict:
    """One node's answer for a pod: no reasons means it fits."""

    node: str
    reasons: tuple[str, ...] = ()


class Scheduler:
    """The default scheduler, on the loop thread."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self._queue: set[Key] = set()
        self._unschedulable: set[Key] = set()
        self._pods_rt = resource_type(loop.store.registry, "v1", "Pod")

    # -- what to try -----------------------------------------------------------------------------------
    def on_change(self, change: Change) -> None:
        if change.kind == "nodes":
            if change.old is None or change.new is None or _node_changed(change.old, change.new):
                self._retry_all()
        elif change.kind == "pods":
            self._on_pod(change)

    def _on_pod(self, change: Change) -> None:
        old, new = change.old, change.new
        if new is None:
            self._queue.discard(change.key)
            self._unschedulable.discard(change.key)
            if old is not None and _bound(old) and resources.holds_resources(old):
                self._retry_all()
            return
        if _bound(new):
            self._unschedulable.discard(change.key)
            if old is not None and resources.holds_resources(old) and not resources.holds_resources(new):
                self._retry_all()
            return
        if wants_scheduling(new) and (old is None or old.get("spec") != new.get("spec")):
            self._queue.add(change.key)

    def _retry_all(self) -> None:
        self._queue |= self._unschedulable
        self._unschedulable.clear()

    # -- work ------------------------------------------------------------------------------------------
    def flush(self) -> bool:
        if not self._queue:
            return False
        queue, self._queue = self._queue, set()
        pods = [self.loop.cache.pods[k] for k in queue if k in self.loop.cache.pods]
        for pod in sorted(pods, key=_queue_order):
            if wants_scheduling(pod):
                self._schedule(pod)
        return True

    def _schedule(self, pod: Obj) -> None:
        nodes = [self.loop.cache.nodes[k] for k in sorted(self.loop.cache.nodes)]
        verdicts = [self._filter(pod, node) for node in nodes]
        feasible = [n for n, v in zip(nodes, verdicts, strict=True) if not v.reasons]
        if feasible:
            self._bind(pod, min(feasible, key=lambda n: self._rank(pod, n)))
            return
        self._unschedulable.add(_key(pod))
        self._report(pod, unschedulable_message(pod, verdicts))

    def _filter(self, pod: Obj, node: Obj) -> Verdict:
        name = node["metadata"]["name"]
        rejected = filter_node(pod, node)
        if rejected:
            return Verdict(name, rejected)
        return Verdict(name, insufficient(pod, node, self.loop.cache.pods_on(name)))

    def _rank(self, pod: Obj, node: Obj) -> tuple[float, int, str]:
        """Lower is better: the least allocated node, then preferred affinity, then the name."""
        name = node["metadata"]["name"]
        free = resources.allocatable(node)
        used = resources.requested_on(self.loop.cache.pods_on(name), scoring=True)
        wanted = resources.scoring_requests(pod)
        shares = [
            (free[r] - used.get(r, 0) - wanted[r]) * 100 / free[r] if free.get(r) else 0.0
            for r in ("cpu", "memory")
        ]
        return (-sum(shares) / len(shares), -preferred_weight(pod, node), name)

    # -- writes ----------------------------------------------------------------------------------------
    def _bind(self, pod: Obj, node: Obj) -> None:
        meta = pod["metadata"]
        try:
            bound = self.loop.store.bind(meta["namespace"], meta["name"], node["metadata"]["name"])
        except store_mod.ApiError as exc:
            if exc.code in (404, 409):  # gone, or bound by someone else meanwhile
                return
            raise
        self.loop.observe("pods", bound)

    def _report(self, pod: Obj, message: str) -> None:
        self.loop.events.record(pod, WARNING, "FailedScheduling", message, SCHEDULER)
        conditions = [
            c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] != "PodScheduled"
        ]
        current: Obj = next(
            (c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), {}
        )
        wanted = {"status": "False", "reason": "Unschedulable", "message": message}
        if all(current.get(k) == v for k, v in wanted.items()):
            return
        condition = {
            "type": "PodScheduled",
            **wanted,
            "lastProbeTime": None,
            "lastTransitionTime": current.get("lastTransitionTime")
            if current.get("status") == "False"
            else datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        meta = pod["metadata"]
        try:
            updated = self.loop.store.patch(
                self._pods_rt,
                meta["namespace"],
                meta["name"],
                {"status": {"conditions": [*conditions, condition]}},
                MERGE,
                manager=MANAGER,
                subresource="status",
            )
        except store_mod.ApiError as exc:
            if exc.code == 404:
                return
            raise
        self.loop.observe("pods", updated)


# -- the plugins, pure ---------------------------------------------------------------------------------
def wants_scheduling(pod: Obj) -> bool:
    spec = pod.get("spec") or {}
    return (
        not spec.get("nodeName")
        and (spec.get("schedulerName") or NAME) == NAME
        and not pod["metadata"].get("deletionTimestamp")
        and resources.holds_resources(pod)
    )


def filter_node(pod: Obj, node: Obj) -> tuple[str, ...]:
    """The first rejection of NodeUnschedulable, NodeName, TaintToleration, NodeAffinity; () if none."""
    spec = pod.get("spec") or {}
    tolerations = spec.get("tolerations") or []
    node_spec = node.get("spec") or {}
    if node_spec.get("unschedulable") and not any(tolerates(t, UNSCHEDULABLE_TAINT) for t in tolerations):
        return ("node(s) were unschedulable",)
    if spec.get("nodeName") and spec["nodeName"] != node["metadata"]["name"]:
        return ("node(s) didn't match the requested node name",)
    for taint in node_spec.get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return ("node(s) had untolerated taint(s)",)
    if not matches_node_selector(spec.get("nodeSelector") or {}, node) or not matches_required_affinity(
        spec.get("affinity") or {}, node
    ):
        return ("node(s) didn't match Pod's node affinity/selector",)
    return ()


def insufficient(pod: Obj, node: Obj, bound: list[Obj]) -> tuple[str, ...]:
    """NodeResourcesFit: ``Too many pods`` and ``Insufficient <resource>`` for what does not fit."""
    free = resources.allocatable(node)
    used = resources.requested_on(bound)
    reasons = ["Too many pods"] if used["pods"] + 1 > free.get("pods", 0) else []
    for name, wanted in sorted(resources.pod_requests(pod).items(), key=_resource_order):
        if wanted > free.get(name, 0) - used.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return tuple(reasons)


def preferred_weight(pod: Obj, node: Obj) -> int:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    return sum(
        int(term.get("weight") or 0)
        for term in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        if matches_required_affinity(
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [term.get("preference") or {}]
                    }
                }
            },
            node,
        )
    )


def unschedulable_message(pod: Obj, verdicts: list[Verdict]) -> str:
    """The FitError message with the PostFilter plugins' messages, as kube-scheduler writes it."""
    if not verdicts:
        return NO_NODES
    total = len(verdicts)
    filtered = histogram(reason for v in verdicts for reason in v.reasons)
    preemption = preemption_message(pod, verdicts)
    return f"0/{total} nodes are available: {filtered}. {NO_CLAIMS}, preemption: {preemption}"


def preemption_message(pod: Obj, verdicts: list[Verdict]) -> str:
    if (pod.get("spec") or {}).get("preemptionPolicy") == "Never":
        return "not eligible due to preemptionPolicy=Never."
    outcomes = (NOT_HELPFUL if set(v.reasons) & UNRESOLVABLE else NO_VICTIMS for v in verdicts)
    return f"0/{len(verdicts)} nodes are available: {histogram(outcomes)}."


def histogram(reasons: Any) -> str:
    """``sortReasonsHistogram``: "count reason" strings, sorted, joined by ", "."""
    counts = Counter(reasons)
    return ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items()))


def _resource_order(item: tuple[str, int]) -> tuple[int, str]:
    order = {"cpu": 0, "memory": 1, "ephemeral-storage": 2}
    return (order.get(item[0], 3), item[0])


def _queue_order(pod: Obj) -> tuple[int, str, str]:
    """PrioritySort: higher priority first, then the older pod."""
    meta = pod["metadata"]
    return (
        -int((pod.get("spec") or {}).get("priority") or 0),
        meta.get("creationTimestamp") or "",
        meta["name"],
    )


def _bound(pod: Obj) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _key(pod: Obj) -> Key:
    return (pod["metadata"].get("namespace") or "", pod["metadata"]["name"])


def _node_changed(old: Obj, new: Obj) -> bool:
    return any((old.get(a) or {}).get(b) != (new.get(a) or {}).get(b) for a, b in _NODE_FIELDS)
