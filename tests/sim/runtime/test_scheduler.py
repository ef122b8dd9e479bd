"""The default scheduler: bare pods are bound to a node that fits, or stay Pending with kube-scheduler's
message, condition and FailedScheduling event, and are tried again when the cluster changes."""

from __future__ import annotations

from typing import Any

import pytest
from sim_objects import static_plugin

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.controllers import resources, scheduler
from gpuplan.sim.testing import SimFactory

MERGE = "application/merge-patch+json"
GPU_MESSAGE = (
    "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: "
    "0/1 nodes are available: 1 No preemption victims found for incoming pod."
)


def node(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "gpu": {"model": "a100-80gb", "count": 2},
        "driver": "580.105.08",
        "toolkit": "1.18.1",
        "defaultRuntime": "nvidia",
        **extra,
    }


def gpu_plugin() -> dict[str, Any]:
    """A static device-plugin DaemonSet: it advertises nvidia.com/gpu once Ready."""
    return static_plugin()


def bare_pod(name: str, **spec: Any) -> dict[str, Any]:
    requests = spec.pop("requests", {})
    container: dict[str, Any] = {"name": "main", "image": "busybox:1"}
    if requests:
        container["resources"] = {"requests": requests, "limits": dict(requests)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [container], **spec},
    }


class Cluster:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.pods_rt = sim.store.registry.for_kind("v1", "Pod")
        self.nodes_rt = sim.store.registry.for_kind("v1", "Node")
        self.events_rt = sim.store.registry.for_kind("v1", "Event")

    def create(self, pod: dict[str, Any]) -> None:
        self.sim.store.create(self.pods_rt, pod, namespace="default", manager="kubectl-create")
        assert self.sim.wait_idle(10)

    def pod(self, name: str) -> dict[str, Any]:
        return self.sim.store.get(self.pods_rt, "default", name)

    def scheduled(self, name: str) -> dict[str, Any]:
        return next(c for c in self.pod(name)["status"].get("conditions", []) if c["type"] == "PodScheduled")

    def events(self, name: str, reason: str) -> list[dict[str, Any]]:
        items = self.sim.store.list(self.events_rt, namespace="default").items
        return [e for e in items if e["involvedObject"]["name"] == name and e["reason"] == reason]

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        self.sim.store.patch(self.nodes_rt, None, name, body, MERGE, manager="test")
        assert self.sim.wait_idle(10)


@pytest.fixture
def start(sim_factory: SimFactory) -> Any:
    def run(nodes: list[dict[str, Any]], objects: list[dict[str, Any]] | None = None) -> Cluster:
        scenario = {"nodes": nodes, "objects": objects or [], "timing": {"podReadySeconds": 0.01}}
        sim = sim_factory(scenario, serve=False)
        assert sim.wait_idle(20)
        return Cluster(sim)

    return run


def test_a_gpu_pod_goes_to_the_node_with_a_free_gpu(start: Any) -> None:
    cluster = start([node("gpu-a"), node("gpu-b")], [gpu_plugin()])
    cluster.create(bare_pod("one", requests={"nvidia.com/gpu": "2"}))
    cluster.create(bare_pod("two", requests={"nvidia.com/gpu": "2"}))
    first, second = cluster.pod("one")["spec"]["nodeName"], cluster.pod("two")["spec"]["nodeName"]
    assert {first, second} == {"gpu-a", "gpu-b"}
    assert cluster.scheduled("one")["status"] == "True"
    assert cluster.pod("one")["status"]["phase"] == "Running"
    bound = [m for m in cluster.pod("one")["metadata"]["managedFields"] if m["manager"] == "kube-scheduler"]
    assert bound, "the binding is written by kube-scheduler"
    [event] = cluster.events("one", "Scheduled")
    assert event["message"] == f"Successfully assigned default/one to {first}"
    assert event["source"]["component"] == "default-scheduler"


def test_no_free_gpu_leaves_the_pod_pending_with_the_schedulers_message(start: Any) -> None:
    cluster = start([node("gpu-a")], [gpu_plugin()])
    cluster.create(bare_pod("taker", requests={"nvidia.com/gpu": "2"}))
    cluster.create(bare_pod("waiter", requests={"nvidia.com/gpu": "1"}))
    pod = cluster.pod("waiter")
    assert "nodeName" not in pod["spec"] and pod["status"]["phase"] == "Pending"
    condition = cluster.scheduled("waiter")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        GPU_MESSAGE,
    )
    [event] = cluster.events("waiter", "FailedScheduling")
    assert (event["type"], event["source"]["component"], event["message"]) == (
        "Warning",
        "default-scheduler",
        GPU_MESSAGE,
    )
    cluster.sim.store.delete(cluster.pods_rt, "default", "taker")
    assert cluster.sim.wait_for(lambda: cluster.pod("waiter")["spec"].get("nodeName") == "gpu-a")


def test_the_pod_is_scheduled_once_the_device_plugin_advertises_gpus(start: Any) -> None:
    cluster = start([node("gpu-a")])
    cluster.create(bare_pod("early", requests={"nvidia.com/gpu": "1"}))
    assert cluster.scheduled("early")["message"] == GPU_MESSAGE
    cluster.sim.store.create(
        cluster.sim.store.registry.for_kind("apps/v1", "DaemonSet"),
        gpu_plugin(),
        namespace="kube-system",
        manager="kubectl-create",
    )
    assert cluster.sim.wait_for(lambda: cluster.pod("early")["spec"].get("nodeName") == "gpu-a")
    assert cluster.sim.wait_idle(10)
    assert cluster.scheduled("early")["status"] == "True"


def test_taints_selectors_and_affinity_are_counted_per_node(start: Any) -> None:
    cluster = start(
        [
            node("tainted", taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]),
            node("cordoned", unschedulable=True),
            node("labelled", labels={"pool": "gpu"}),
            node("plain"),
        ]
    )
    cluster.create(bare_pod("picky", nodeSelector={"pool": "cpu"}))
    assert cluster.scheduled("picky")["message"] == (
        "0/4 nodes are available: 1 node(s) had untolerated taint(s), 1 node(s) were unschedulable, "
        "2 node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, preemption: "
        "0/4 nodes are available: 4 Preemption is not helpful for scheduling."
    )
    cluster.create(bare_pod("selected", nodeSelector={"pool": "gpu"}))
    assert cluster.pod("selected")["spec"]["nodeName"] == "labelled"
    tolerant = bare_pod(
        "tolerant",
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["tainted"]}]}
                    ]
                }
            }
        },
    )
    cluster.create(tolerant)
    assert cluster.pod("tolerant")["spec"]["nodeName"] == "tainted"
    cluster.patch_node("labelled", {"spec": {"unschedulable": True}})
    cluster.create(bare_pod("after-cordon", nodeSelector={"pool": "gpu"}))
    assert cluster.scheduled("after-cordon")["reason"] == "Unschedulable"
    cluster.patch_node("labelled", {"spec": {"unschedulable": None}})
    assert cluster.pod("after-cordon")["spec"]["nodeName"] == "labelled"


def test_the_least_allocated_node_wins() -> None:
    def a_node(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        }

    busy = bare_pod("busy", requests={"cpu": "3"})
    busy["spec"]["nodeName"] = "a"
    assert resources.requested_on([busy])["cpu"] == 3000
    pod = bare_pod("p", requests={"cpu": "500m"})
    assert scheduler.insufficient(pod, a_node("a"), [busy]) == ()
    assert scheduler.insufficient(bare_pod("big", requests={"cpu": "2"}), a_node("a"), [busy]) == (
        "Insufficient cpu",
    )
    done = {**busy, "status": {"phase": "Succeeded"}}
    assert scheduler.insufficient(bare_pod("big", requests={"cpu": "2"}), a_node("a"), [done]) == ()


def test_a_pod_that_may_not_preempt_says_so() -> None:
    pod = bare_pod("p", requests={"nvidia.com/gpu": "1"}, preemptionPolicy="Never")
    verdicts = [scheduler.Verdict("a", ("Insufficient nvidia.com/gpu",))]
    assert scheduler.unschedulable_message(pod, verdicts) == (
        "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. no new claims to deallocate, preemption: "
        "not eligible due to preemptionPolicy=Never."
    )


def test_mig_and_shared_resources_fit_by_what_the_node_advertises() -> None:
    mig_node = {
        "metadata": {"name": "mig"},
        "status": {
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110", "nvidia.com/mig-1g.10gb": "7"}
        },
    }
    holder = bare_pod("holder", requests={"nvidia.com/mig-1g.10gb": "6"})
    assert (
        scheduler.insufficient(bare_pod("one", requests={"nvidia.com/mig-1g.10gb": "1"}), mig_node, [holder])
        == ()
    )
    assert scheduler.insufficient(
        bare_pod("two", requests={"nvidia.com/mig-1g.10gb": "2"}), mig_node, [holder]
    ) == ("Insufficient nvidia.com/mig-1g.10gb",)
    assert scheduler.insufficient(
        bare_pod("shared", requests={"nvidia.com/gpu.shared": "1"}), mig_node, []
    ) == ("Insufficient nvidia.com/gpu.shared",)


def test_init_containers_count_by_the_largest_one_and_overhead_is_added() -> None:
    pod = bare_pod("p", requests={"cpu": "500m"})
    pod["spec"]["initContainers"] = [
        {"name": "a", "image": "x", "resources": {"requests": {"cpu": "2"}}},
        {"name": "b", "image": "x", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
    ]
    pod["spec"]["overhead"] = {"cpu": "250m"}
    assert resources.pod_requests(pod) == {"cpu": 2250, "memory": 1024**3}
