"""A fleet-scale rollout with the real kubelets: every node gets its pod, and a percentage maxUnavailable
bounds how many nodes are without a Ready pod at any moment (watched through store events)."""

from __future__ import annotations

import math
import threading
from typing import Any

import yaml

from gpuplan.sim.api.store import Event
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.scenario import BUILTIN_DIR

NODES = 60
MERGE = "application/merge-patch+json"


def test_rollout_across_a_fleet_respects_a_percentage(sim_factory: Any) -> None:
    sim: Simulator = sim_factory(f"fleet-{NODES}", serve=False)
    plugin = yaml.safe_load((BUILTIN_DIR / "lab.yaml").read_text())["objects"][0]
    plugin["metadata"]["namespace"] = "default"
    plugin["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}
    ds_rt = sim.store.registry.for_kind("apps/v1", "DaemonSet")
    sim.store.create(ds_rt, plugin, namespace="default", manager="test")
    assert sim.wait_idle(60)
    status = sim.store.get(ds_rt, "default", plugin["metadata"]["name"])["status"]
    assert status["desiredNumberScheduled"] == status["numberReady"] == status["numberAvailable"] == NODES

    ready_by_node: dict[str, bool] = {}
    worst = 0
    lock = threading.Lock()

    def watch(event: Event) -> None:
        nonlocal worst
        if event.rt.kind != "Pod" or event.object["metadata"].get("namespace") != "default":
            return
        with lock:
            node = event.object["spec"]["nodeName"]
            ready_by_node[node] = event.type != "DELETED" and any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in event.object.get("status", {}).get("conditions") or []
            )
            worst = max(worst, NODES - sum(ready_by_node.values()))

    pods_rt = sim.store.registry.for_kind("v1", "Pod")
    ready_by_node.update(
        {p["spec"]["nodeName"]: True for p in sim.store.list(pods_rt, namespace="default").items}
    )
    unsubscribe = sim.store.subscribe(watch)
    sim.store.patch(
        ds_rt,
        "default",
        plugin["metadata"]["name"],
        {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}},
        MERGE,
        manager="test",
    )
    assert sim.wait_idle(60)
    assert sim.store.flush(10)
    unsubscribe()
    status = sim.store.get(ds_rt, "default", plugin["metadata"]["name"])["status"]
    assert status["updatedNumberScheduled"] == status["numberAvailable"] == NODES
    assert worst == math.ceil(NODES * 0.10)
    pods = sim.store.list(pods_rt, namespace="default").items
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted({p["spec"]["nodeName"] for p in pods})
    assert all(p["metadata"]["labels"]["rev"] == "2" for p in pods)
