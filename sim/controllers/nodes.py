"""Node lifecycle: a node going NotReady and coming back, as kubelet and the node lifecycle controller show
it.

``set_ready(name, False)`` plays a node whose kubelet stopped posting status (the default, ``unreachable``:
every condition Unknown with reason ``NodeStatusUnknown`` and the ``node.kubernetes.io/unreachable`` taints,
as the node lifecycle controller writes them) or a kubelet that reports itself not ready
(``unreachable=False``:
Ready False with reason ``KubeletNotReady`` and the ``node.kubernetes.io/not-ready`` taints). Pods on the node
get their Ready condition set to False (MarkPodsNotReady) and the node's kubelet stops making progress.
``set_ready(name, True)`` restores the kubelet's conditions, removes the taints and lets the kubelet look at
its pods again (which become Ready again through it).

Runs on the loop thread (``gpuplan.sim.controllers.loop.Loop``); called by ``gpuplan.sim.cluster.Simulator``
(scenario ``faults.nodes`` and the control API).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.controllers.cache import Obj, resource_type
from gpuplan.sim.controllers.loop import Loop
from gpuplan.sim.kubelet.runtime import KubeletRuntime

CONTROLLER = "kube-controller-manager"
KUBELET = "kubelet"
MERGE = "application/merge-patch+json"
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"

_HEALTHY = {
    "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
    "MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
}


class NodeLifecycle:
    """Flips nodes between Ready and NotReady, with the conditions, taints and pod readiness of a real one."""

    def __init__(self, loop: Loop, runtime: KubeletRuntime) -> None:
        self.loop = loop
        self.runtime = runtime
        self._nodes_rt = resource_type(loop.store.registry, "v1", "Node")
        self._pods_rt = resource_type(loop.store.registry, "v1", "Pod")

    def set_ready(self, name: str, ready: bool, *, unreachable: bool = True) -> Obj:
        """Make node ``name`` Ready or NotReady; returns the updated Node. Raises ApiError 404 if unknown."""
        node = self.loop.store.get(self._nodes_rt, None, name)
        now = _now()
        if ready:
            conditions = _conditions(node, now, dict(_HEALTHY.items()))
            manager = KUBELET
        elif unreachable:
            message = "Kubelet stopped posting node status."
            conditions = _conditions(
                node, now, dict.fromkeys(_HEALTHY, ("Unknown", "NodeStatusUnknown", message))
            )
            manager = CONTROLLER
        else:
            conditions = _conditions(
                node,
                now,
                {
                    **_HEALTHY,
                    "Ready": (
                        "False",
                        "KubeletNotReady",
                        "container runtime status check may not have completed yet",
                    ),
                },
            )
            manager = KUBELET
        updated = self.loop.store.patch(
            self._nodes_rt,
            None,
            name,
            {"status": {"conditions": conditions}},
            MERGE,
            manager=manager,
            subresource="status",
        )
        self.loop.observe("nodes", updated)
        updated = self._set_taints(
            updated, None if ready else (UNREACHABLE if unreachable else NOT_READY), now
        )
        self.runtime.set_down(name, not ready)
        if not ready:
            self._mark_pods_not_ready(name, now)
        return updated

    def heartbeat(self, name: str) -> None:
        """The kubelet's periodic node status report (``nodeStatusReportFrequency``, kubernetes
        pkg/kubelet/kubelet_node_status.go): its conditions with a new ``lastHeartbeatTime``, from the cached
        node. Nothing for a node whose kubelet is down or that is gone."""
        node = self.loop.cache.node(name)
        if node is None or name in self.runtime.down:
            return
        body = {"status": {"conditions": _conditions(node, _now(), dict(_HEALTHY.items()))}}

        def write() -> Obj | None:
            try:
                return self.loop.store.patch(
                    self._nodes_rt,
                    None,
                    name,
                    body,
                    MERGE,
                    manager=KUBELET,
                    subresource="status",
                    read_only=True,  # only observed
                )
            except ApiError as exc:
                if exc.code == 404:
                    return None  # the node went away meanwhile
                raise

        # a thousand kubelets report at once, none waiting for another's round trip
        self.loop.write_behind("nodes", ("nodes", name), write)

    def _set_taints(self, node: Obj, key: str | None, now: str) -> Obj:
        taints = [
            t
            for t in node.get("spec", {}).get("taints") or []
            if t.get("key") not in (UNREACHABLE, NOT_READY)
        ]
        if key is not None:
            taints += [
                {"key": key, "effect": "NoSchedule"},
                {"key": key, "effect": "NoExecute", "timeAdded": now},
            ]
        if taints == (node.get("spec", {}).get("taints") or []):
            return node
        updated = self.loop.store.patch(
            self._nodes_rt,
            None,
            node["metadata"]["name"],
            {"spec": {"taints": taints or None}},
            MERGE,
            manager=CONTROLLER,
        )
        self.loop.observe("nodes", updated)
        return updated

    def _mark_pods_not_ready(self, node: str, now: str) -> None:
        for pod in self.loop.cache.pods_on(node):
            conditions = [dict(c) for c in pod.get("status", {}).get("conditions") or []]
            changed = False
            for cond in conditions:
                if cond.get("type") == "Ready" and cond.get("status") != "False":
                    cond.update(status="False", lastTransitionTime=now)
                    changed = True
            if not changed:
                continue
            meta = pod["metadata"]
            updated = self.loop.store.patch(
                self._pods_rt,
                meta["namespace"],
                meta["name"],
                {"status": {"conditions": conditions}},
                MERGE,
                manager=CONTROLLER,
                subresource="status",
            )
            self.loop.observe("pods", updated)


def _conditions(node: Obj, now: str, wanted: dict[str, tuple[str, str, str]]) -> list[dict[str, Any]]:
    """The node's conditions with ``wanted`` applied; transition times move only when the status does."""
    current = {c.get("type"): c for c in node.get("status", {}).get("conditions") or []}
    result = []
    for type_, (status, reason, message) in wanted.items():
        old = current.pop(type_, {})
        heartbeat = now if status != "Unknown" else old.get("lastHeartbeatTime", now)
        result.append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": heartbeat,
                "lastTransitionTime": old.get("lastTransitionTime", now)
                if old.get("status") == status
                else now,
            }
        )
    # keep the order kubelet reports them in: pressures first, Ready last
    result.sort(key=lambda c: c["type"] == "Ready")
    return result + list(current.values())


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
