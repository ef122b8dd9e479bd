"""Every agent node's Lease in ``kube-node-lease``, renewed as the kubelet's node lease controller renews it.

The controller (``k8s.io/component-helpers/apimachinery/lease/controller.go``, started by kubernetes
``pkg/kubelet/kubelet.go`` with ``NodeLeaseDurationSeconds`` 40 and a renew interval of a quarter of it)
creates the Lease named after its node (holderIdentity the node, an ownerReference to the Node:
``pkg/kubelet/util/nodelease.go``), then every interval PUTs its latest copy with a new ``renewTime``,
without reading it first; a 409 (someone else wrote it) or a 404 (deleted) makes it GET, or create, and try
again. The node lifecycle controller (kubernetes ``pkg/controller/nodelifecycle``) counts a renewal as the
node's heartbeat and marks a node whose Lease has not moved for ``--node-monitor-grace-period`` (50 s)
unreachable: Ready Unknown and the ``unreachable`` taints.

One thread renews every node of the agent, each on its own slot: node ``i`` of ``n`` first at
``i * interval / n``, then every ``interval``, so the writes are spread evenly instead of bursting. The
rate is one PUT per node per interval, which no batching can lower (the API has no multi-object update):
1,000 nodes at the kubelet's 10 s are 100 requests a second, one every 10 ms. An agent may renew less
often (``renew_seconds``) as long as a renewal lands well within the grace period: 20 s still allows one to
fail (50 req/s at fleet-1000). A paused node (its kubelet stopped: ``set_node_ready(name, False)``) is
left out of the schedule until resumed, so a real node lifecycle controller sees it go quiet.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.object_store import ObjectStore
from gpuplan.sim.controllers.cache import resource_type

log = logging.getLogger(__name__)

Obj = dict[str, Any]
NAMESPACE = "kube-node-lease"
MANAGER = "kubelet"
DURATION_SECONDS = 40  # the kubelet's NodeLeaseDurationSeconds
RENEW_FRACTION = 0.25  # kubelet.go nodeLeaseRenewIntervalFraction


class NodeLeases:
    """The renewer of the agent's node Leases (one thread)."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        duration_seconds: int = DURATION_SECONDS,
        renew_seconds: float | None = None,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.duration_seconds = duration_seconds
        self.renew_seconds = renew_seconds if renew_seconds is not None else duration_seconds * RENEW_FRACTION
        self.wall_clock = wall_clock
        self.renewals = 0
        self.failures = 0
        self._rt = resource_type(store.registry, "coordination.k8s.io/v1", "Lease")
        self._owners: dict[str, str] = {}  # node -> its Node's uid
        self._latest: dict[str, Obj] = {}
        self._paused: set[str] = set()
        self._schedule: deque[tuple[float, str]] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def add(self, node: str, uid: str) -> None:
        """Hold ``node``'s Lease (``uid``: its Node's, for the ownerReference); renewed from the next slot."""
        with self._cond:
            self._owners[node] = uid
            if self._thread is not None:
                self._schedule.appendleft((time.monotonic(), node))
                self._cond.notify_all()

    def pause(self, node: str) -> None:
        """Renew ``node``'s Lease no more until ``resume`` (a renewal already under way completes)."""
        with self._cond:
            self._paused.add(node)
            self._schedule = deque(entry for entry in self._schedule if entry[1] != node)

    @property
    def scheduled(self) -> list[str]:
        """The nodes whose Leases are due to be renewed, soonest first."""
        with self._cond:
            return [node for _, node in self._schedule]

    def resume(self, node: str) -> None:
        """Renew ``node``'s Lease again, at once (a kubelet that comes back renews on start)."""
        with self._cond:
            self._paused.discard(node)
            if all(entry[1] != node for entry in self._schedule):
                self._schedule.appendleft((time.monotonic(), node))
            self._cond.notify_all()

    def start(self) -> None:
        now = time.monotonic()
        with self._cond:
            nodes = sorted(self._owners)
            self._schedule = deque(
                (now + self.renew_seconds * i / len(nodes), node) for i, node in enumerate(nodes)
            )
        self._thread = threading.Thread(target=self._run, name="gpuplan-agent-leases", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def lease(self, node: str) -> Obj | None:
        """The last copy of ``node``'s Lease this renewer wrote or read."""
        with self._cond:
            found = self._latest.get(node)
        return copy.deepcopy(found) if found is not None else None

    # -- the thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping and (not self._schedule or self._schedule[0][0] > time.monotonic()):
                    wait = self._schedule[0][0] - time.monotonic() if self._schedule else None
                    self._cond.wait(wait)
                if self._stopping:
                    return
                _, node = self._schedule.popleft()
                # the next slot first: a slow write must not shift every later node's
                self._schedule.append((time.monotonic() + self.renew_seconds, node))
            try:
                self._renew(node)
                self.renewals += 1
            except ApiError as exc:
                self.failures += 1
                log.warning("lease of node %s: %s", node, exc.message)

    def _renew(self, node: str) -> None:
        """``controller.sync``: PUT the latest copy; on a conflict or a missing Lease, read or create it."""
        with self._cond:
            latest = self._latest.get(node)
        if latest is not None:
            try:
                self._update(node, latest)
                return
            except ApiError as exc:
                if exc.code not in (404, 409):
                    raise
        try:
            current = self.store.get(self._rt, NAMESPACE, node)
        except ApiError as exc:
            if exc.code != 404:
                raise
            created = self.store.create(
                self._rt, self._new_lease(node, None), namespace=NAMESPACE, manager=MANAGER
            )
            with self._cond:
                self._latest[node] = created
            return
        self._update(node, current)

    def _update(self, node: str, base: Obj) -> None:
        updated = self.store.update(
            self._rt, self._new_lease(node, base), namespace=NAMESPACE, name=node, manager=MANAGER
        )
        with self._cond:
            self._latest[node] = updated

    def _new_lease(self, node: str, base: Obj | None) -> Obj:
        """``controller.newLease`` + the kubelet's ``setNodeOwnerFunc``."""
        lease: Obj = (
            copy.deepcopy(base)
            if base is not None
            else {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": node, "namespace": NAMESPACE},
                "spec": {"holderIdentity": node},
            }
        )
        lease["metadata"].pop("managedFields", None)
        lease.setdefault("spec", {})["leaseDurationSeconds"] = self.duration_seconds
        lease["spec"]["renewTime"] = self.wall_clock().strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # metav1.MicroTime
        uid = self._owners.get(node)
        if uid and not lease["metadata"].get("ownerReferences"):
            lease["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
            ]
        return lease
