"""What a watcher of a real kubelet sees of a DaemonSet pod's start, end to end: the status transitions
(every one a real kubelet's status manager writes, none coalesced away) and the Events of each container,
in order. The store's and kubelets' per-write savings (sharing, copies made from the previous answer,
Events written without the pool) must leave both exactly as they are."""

from __future__ import annotations

import threading
from typing import Any

from gpuplan.sim.api.store import Event
from gpuplan.sim.cluster import Simulator

DEADLINE = 10.0
Obj = dict[str, Any]
IMAGE = "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04"


def _daemonset() -> Obj:
    spec = {
        "initContainers": [{"name": "wait", "image": IMAGE, "command": ["sh", "-c", "true"]}],
        "containers": [{"name": "ctr", "image": IMAGE}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "exporter", "namespace": "gpu-operator"},
        "spec": {
            "selector": {"matchLabels": {"app": "exporter"}},
            "template": {"metadata": {"labels": {"app": "exporter"}}, "spec": spec},
        },
    }


def _state(status: Obj | None) -> tuple[Any, ...]:
    """A status as a watcher reads it: phase, Ready, and each container's state (waiting reason, running,
    terminated reason)."""
    status = status or {}

    def states(field: str) -> tuple[str, ...]:
        found = []
        for entry in status.get(field) or []:
            state = entry.get("state") or {}
            if "waiting" in state:
                found.append(f"{entry['name']}:waiting:{state['waiting'].get('reason')}")
            elif "running" in state:
                found.append(f"{entry['name']}:running:{entry.get('ready')}")
            elif "terminated" in state:
                found.append(f"{entry['name']}:terminated:{state['terminated'].get('reason')}")
        return tuple(found)

    ready = next((c["status"] for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return (status.get("phase"), ready, states("initContainerStatuses"), states("containerStatuses"))


def test_a_pod_s_start_is_each_status_a_kubelet_writes_and_each_container_s_events(sim_factory: Any) -> None:
    sim: Simulator = sim_factory("lab", serve=False)
    assert sim.wait_idle(30)
    pods = sim.store.registry.for_kind("v1", "Pod")
    seen: list[tuple[Any, ...]] = []
    lock = threading.Lock()

    def watch(event: Event) -> None:
        if event.rt is pods and event.object["metadata"].get("namespace") == "gpu-operator":
            with lock:
                state = _state(event.object.get("status"))
                if not seen or seen[-1] != state:
                    seen.append(state)

    sim.store.subscribe(watch)
    namespaces = sim.store.registry.for_kind("v1", "Namespace")
    sim.store.create(namespaces, {"metadata": {"name": "gpu-operator"}}, manager="test")
    daemonsets = sim.store.registry.for_kind("apps/v1", "DaemonSet")
    sim.store.create(daemonsets, _daemonset(), namespace="gpu-operator", manager="test")

    def started() -> bool:
        with lock:
            return bool(seen) and seen[-1][1] == "True"

    assert sim.wait_for(started, DEADLINE)
    assert sim.store.flush(DEADLINE)
    assert seen == [
        ("Pending", None, (), ()),
        ("Pending", "False", ("wait:waiting:PodInitializing",), ("ctr:waiting:PodInitializing",)),
        ("Running", "True", ("wait:terminated:Completed",), ("ctr:running:True",)),
    ]
    (pod,) = sim.store.list(pods, namespace="gpu-operator").items
    listed = sim.store.list(sim.store.registry.for_kind("v1", "Event"), namespace="gpu-operator").items
    by_name = sorted(listed, key=lambda e: e["metadata"]["name"])
    about_pod = [
        (e["reason"], e["involvedObject"].get("fieldPath", ""), e["source"].get("component"))
        for e in by_name
        if e["involvedObject"]["name"] == pod["metadata"]["name"]
    ]
    assert about_pod == [
        ("Scheduled", "", "default-scheduler"),
        ("Pulling", "spec.initContainers{wait}", "kubelet"),
        ("Pulled", "spec.initContainers{wait}", "kubelet"),
        ("Created", "spec.initContainers{wait}", "kubelet"),
        ("Started", "spec.initContainers{wait}", "kubelet"),
        ("Pulled", "spec.containers{ctr}", "kubelet"),
        ("Created", "spec.containers{ctr}", "kubelet"),
        ("Started", "spec.containers{ctr}", "kubelet"),
    ]
    pulled = next(
        e for e in by_name if e["reason"] == "Pulled" and "{ctr}" in e["involvedObject"]["fieldPath"]
    )
    assert pulled["message"] == f'Container image "{IMAGE}" already present on machine'
    created = next(e for e in by_name if e["reason"] == "SuccessfulCreate")
    assert created["message"] == f"Created pod: {pod['metadata']['name']}"
    for event in by_name:
        assert event["count"] == 1 and event["type"] == "Normal" and event["metadata"]["uid"]
        assert event["firstTimestamp"] == event["lastTimestamp"] == event["metadata"]["creationTimestamp"]
    assert len({e["metadata"]["name"] for e in by_name}) == len(by_name)
