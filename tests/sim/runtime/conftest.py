"""Fixtures for the simulator runtime's unit tests: the store and the loop, without HTTP.

``ds_env`` runs only the DaemonSet controller with a stand-in kubelet the test steers (pods become Ready when
the test says so), for exact control over rollouts. ``cluster`` runs the real pieces of a Simulator (store,
loop, DaemonSet controller, kubelet runtime with the GPU rules, node lifecycle) for a scenario, still without
the API server.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.store import Event, Store
from gpuplan.sim.controllers.cache import Change, Key, Obj
from gpuplan.sim.controllers.daemonset import DaemonSetController
from gpuplan.sim.controllers.loop import Loop

MERGE = "application/merge-patch+json"


class StandInKubelet:
    """Marks pods Running and Ready (or not) when the test asks; new pods stay Pending until then. A pod
    marked for deletion is removed at once (grace period 0), as the simulated kubelets do."""

    def __init__(self, loop: Loop, auto_ready: bool, finish_terminating: bool = True) -> None:
        """``finish_terminating``: remove pods marked for deletion (False: they stay until ``remove``)."""
        self.loop = loop
        self.auto_ready = auto_ready
        self.finish_terminating = finish_terminating
        self._pending: set[Key] = set()
        self._terminating: set[Key] = set()

    def on_change(self, change: Change) -> None:
        if change.kind == "pods" and change.old is None and change.new is not None and self.auto_ready:
            self._pending.add(change.key)
        if (
            self.finish_terminating
            and change.kind == "pods"
            and change.new is not None
            and change.new["metadata"].get("deletionTimestamp")
        ):
            self._terminating.add(change.key)

    def flush(self) -> bool:
        did = bool(self._pending or self._terminating)
        pending, self._pending = sorted(self._pending), set()
        for key in pending:
            self.set_ready(key, True)
        terminating, self._terminating = sorted(self._terminating), set()
        for key in terminating:
            self.remove(key)
        return did

    def remove(self, key: Key) -> None:
        rt = self.loop.store.registry.for_kind("v1", "Pod")
        try:
            gone = self.loop.store.delete(rt, key[0], key[1], grace_period_seconds=0)
        except Exception:  # noqa: BLE001 - the pod may be gone already
            return
        self.loop.observe("pods", gone, deleted=True)

    def set_ready(self, key: Key, ready: bool) -> None:
        rt = self.loop.store.registry.for_kind("v1", "Pod")
        status = "True" if ready else "False"
        body = {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": status, "lastTransitionTime": "2026-01-01T00:00:00Z"}
                ],
            }
        }
        try:
            pod = self.loop.store.patch(
                rt, key[0], key[1], body, MERGE, manager="kubelet", subresource="status"
            )
        except Exception:  # noqa: BLE001 - the pod may be gone already
            return
        self.loop.observe("pods", pod)


class DsEnv:
    def __init__(
        self,
        auto_ready: bool = True,
        finish_terminating: bool = True,
        *,
        manual_clock: bool = False,
        rollout_step_seconds: float = 0.0,
    ) -> None:
        """``manual_clock``: the loop's clock moves only with ``advance`` (timers run without waiting)."""
        self.store = Store(Registry.builtin())
        self.now = 1000.0
        self.loop = Loop(self.store, clock=lambda: self.now) if manual_clock else Loop(self.store)
        self.controller = DaemonSetController(self.loop, rollout_step_seconds=rollout_step_seconds)
        self.kubelet = StandInKubelet(self.loop, auto_ready, finish_terminating)
        self.loop.add_handler(self.controller)
        self.loop.add_handler(self.kubelet)
        self.loop.subscribe()
        self.loop.start()
        self.nodes_rt = self.store.registry.for_kind("v1", "Node")
        self.pods_rt = self.store.registry.for_kind("v1", "Pod")
        self.ds_rt = self.store.registry.for_kind("apps/v1", "DaemonSet")

    def advance(self, seconds: float) -> None:
        """Move the manual clock on, and let the loop run the timers now due."""
        self.now += seconds
        self.loop.run_sync(lambda: None)

    def settle(self, horizon: float = float("inf")) -> None:
        """Until nothing is left to do; with a ``horizon`` of 0, leave the timers not yet due waiting."""
        assert self.loop.wait_idle(10, horizon=horizon)
        assert self.store.flush(10)
        assert self.loop.wait_idle(10, horizon=horizon)

    def add_node(
        self,
        name: str,
        labels: dict[str, str] | None = None,
        taints: list[Obj] | None = None,
        unschedulable: bool = False,
    ) -> None:
        spec: Obj = {"taints": taints} if taints else {}
        if unschedulable:
            spec["unschedulable"] = True
        self.store.create(
            self.nodes_rt,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels or {}},
                "spec": spec,
            },
            manager="kubelet",
        )

    def create_ds(
        self,
        name: str = "ds",
        *,
        spec: Obj | None = None,
        strategy: Obj | None = None,
        image: str = "busybox:1",
    ) -> Obj:
        template_spec = {"containers": [{"name": "main", "image": image}], **(spec or {})}
        body = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "updateStrategy": strategy or {"type": "RollingUpdate"},
                "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec},
            },
        }
        return self.store.create(self.ds_rt, body, manager="test")

    def pods(self, ds: str = "ds") -> list[Obj]:
        return self.store.list(self.pods_rt, namespace="default", label_selector=f"app={ds}").items

    def pods_by_node(self, ds: str = "ds") -> dict[str, list[Obj]]:
        result: dict[str, list[Obj]] = {}
        for pod in self.pods(ds):
            result.setdefault(pod["spec"]["nodeName"], []).append(pod)
        return result

    def ds_status(self, name: str = "ds") -> Obj:
        status: Obj = self.store.get(self.ds_rt, "default", name).get("status", {})
        return status

    def patch_ds(self, name: str, body: Obj) -> None:
        self.store.patch(self.ds_rt, "default", name, body, MERGE, manager="test")

    def patch_node(self, name: str, body: Obj) -> None:
        self.store.patch(self.nodes_rt, None, name, body, MERGE, manager="test")

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self.store.subscribe(callback)

    def close(self) -> None:
        self.loop.stop()
        self.store.close()
        assert not self.loop.errors, self.loop.errors


@pytest.fixture
def ds_env() -> Iterator[DsEnv]:
    env = DsEnv()
    yield env
    env.close()


@pytest.fixture
def stuck_env() -> Iterator[DsEnv]:
    """Pods get Ready on their own, but a pod marked for deletion stays until ``kubelet.remove(key)``."""
    env = DsEnv(finish_terminating=False)
    yield env
    env.close()


@pytest.fixture
def paced_env() -> Iterator[DsEnv]:
    """``ds_env`` whose rolling updates wait 30 s per step, on a clock the test moves (``advance``)."""
    env = DsEnv(manual_clock=True, rollout_step_seconds=30.0)
    yield env
    env.close()


@pytest.fixture
def manual_env() -> Iterator[DsEnv]:
    env = DsEnv(auto_ready=False)
    yield env
    env.close()


def condition(obj: Obj, type_: str) -> dict[str, Any]:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}
