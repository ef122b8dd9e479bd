"""The kubelets' side of graceful pod deletion: stop a terminating pod's containers, then remove the pod.

A pod DELETE gives a running pod a grace period (``gpuplan.sim.api.graceful``): it gets a
``deletionTimestamp`` and shows ``Terminating``, and the real kubelet sends its containers SIGTERM, waits for
them to exit (at most the grace period), and then deletes the pod with ``gracePeriodSeconds=0`` and its uid
as precondition, which removes it from the API server. Simulated processes exit on SIGTERM at once, so the
simulated kubelet records ``Killing`` (``Stopping container c``) and removes a terminating pod in the same
loop pass: deletion completes within a kubelet pass, not after 30 s. The pod's node effects go when the
DELETED event arrives (``KubeletRuntime._remove``), as they do when a pod is deleted outright.

A pod whose node's kubelet is down (the node is NotReady) or that no simulated kubelet runs stays
Terminating, as on a real cluster; the node lifecycle controller's forced deletion after its timeouts is
not simulated. When the node comes back, its kubelet finishes the pods it finds terminating.

Owned by ``gpuplan.sim.kubelet.runtime.KubeletRuntime`` (loop thread, no locks).
"""

from __future__ import annotations

from collections.abc import Callable

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers.cache import Change, Key, Obj, resource_type
from gpuplan.sim.controllers.events import NORMAL, Source
from gpuplan.sim.controllers.loop import Loop


def is_terminating(pod: Obj | None) -> bool:
    return pod is not None and bool(pod.get("metadata", {}).get("deletionTimestamp"))


class Terminations:
    """Terminating pods waiting for their kubelet to stop them."""

    def __init__(self, loop: Loop, kubelet_runs: Callable[[str], bool]) -> None:
        """``kubelet_runs(node)``: a simulated kubelet runs on that node and is up."""
        self.loop = loop
        self._kubelet_runs = kubelet_runs
        self._pending: set[Key] = set()
        self._pods_rt = resource_type(loop.store.registry, "v1", "Pod")

    def note(self, change: Change) -> None:
        """A pod changed: one newly marked for deletion is to be stopped."""
        if change.kind == "pods" and is_terminating(change.new) and not is_terminating(change.old):
            self._pending.add(change.key)

    def node_up(self, node: str) -> None:
        """The node's kubelet is back: it stops what was marked for deletion meanwhile."""
        self._pending.update(
            k
            for k in self.loop.cache.pods_by_node.get(node, set())
            if is_terminating(self.loop.cache.pods.get(k))
        )

    def flush(self) -> bool:
        if not self._pending:
            return False
        pending, self._pending = sorted(self._pending), set()
        for key in pending:
            pod = self.loop.cache.pods.get(key)
            if (
                is_terminating(pod)
                and pod is not None
                and self._kubelet_runs(pod["spec"].get("nodeName", ""))
            ):
                self._remove(pod)
        return True

    def _remove(self, pod: Obj) -> None:
        """Stop the containers (``Killing`` events, as the kubelet records them), then delete the pod for
        good, as the kubelet's status manager does."""
        meta = pod["metadata"]
        kubelet = Source("kubelet", pod["spec"].get("nodeName", ""))
        for container in pod["spec"].get("containers") or []:
            self.loop.events.record(
                pod,
                NORMAL,
                "Killing",
                f"Stopping container {container['name']}",
                kubelet,
                field_path=f"spec.containers{{{container['name']}}}",
            )
        try:
            gone = self.loop.store.delete(
                self._pods_rt,
                meta["namespace"],
                meta["name"],
                grace_period_seconds=0,
                preconditions={"uid": meta.get("uid")},
            )
        except store_mod.ApiError as exc:
            if exc.code in (404, 409):  # already gone, or a new pod of that name
                return
            raise
        if is_terminating(gone):  # finalizers hold it: it goes when the last one is removed
            self.loop.observe("pods", gone)
        else:
            self.loop.observe("pods", gone, deleted=True)
