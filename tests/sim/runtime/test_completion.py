"""Containers that run to completion: the restartPolicy decides the phase, the status shows the exit, and the
CUDA vectoradd sample passes or fails as the node's GPU stack lets it."""

from __future__ import annotations

from typing import Any

import pytest
from sim_objects import static_plugin

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.kubelet import workloads
from gpuplan.sim.testing import SimFactory

VECTORADD = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
RUNTIME_CLASS = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "nvidia"},
    "handler": "nvidia",
}


def plugin(runtime_class: str | None = None) -> dict[str, Any]:
    return static_plugin(**({"runtimeClassName": runtime_class} if runtime_class else {}))


def gpu_node(default_runtime: str = "nvidia", **extra: Any) -> dict[str, Any]:
    return {
        "name": "gpu-node",
        "gpu": {"model": "a100-80gb", "count": 1},
        "driver": "580.105.08",
        "toolkit": "1.18.1",
        "defaultRuntime": default_runtime,
        **extra,
    }


def vectoradd_pod(name: str, restart_policy: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [
                {
                    "name": "cuda-vectoradd",
                    "image": VECTORADD,
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            **spec,
        },
    }


class Cluster:
    def __init__(self, sim: Simulator) -> None:
        self.sim = sim
        self.pods_rt = sim.store.registry.for_kind("v1", "Pod")

    def create(self, pod: dict[str, Any]) -> None:
        self.sim.store.create(self.pods_rt, pod, namespace="default", manager="kubectl-create")

    def pod(self, name: str) -> dict[str, Any]:
        return self.sim.store.get(self.pods_rt, "default", name)

    def main(self, name: str) -> dict[str, Any]:
        statuses = self.pod(name)["status"].get("containerStatuses") or [{}]
        status: dict[str, Any] = statuses[0]
        return status

    def phase(self, name: str) -> str:
        return str(self.pod(name).get("status", {}).get("phase"))

    def log(self, name: str) -> list[str]:
        uid = self.pod(name)["metadata"]["uid"]
        return [line.text for line in self.sim.runtime.logs.read(uid, "cuda-vectoradd")]

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next(c for c in self.pod(name)["status"]["conditions"] if c["type"] == type_)


@pytest.fixture
def start(sim_factory: SimFactory) -> Any:
    def run(node: dict[str, Any], objects: list[dict[str, Any]]) -> Cluster:
        timing = {"podReadySeconds": 0.01, "crashLoopBackoffSeconds": 0.01}
        sim = sim_factory({"nodes": [node], "objects": objects, "timing": timing}, serve=False)
        assert sim.wait_idle(20)
        return Cluster(sim)

    return run


def test_vectoradd_passes_and_the_pod_succeeds(start: Any) -> None:
    cluster = start(gpu_node(), [plugin()])
    cluster.create(vectoradd_pod("vectoradd", "Never"))
    assert cluster.sim.wait_for(lambda: cluster.phase("vectoradd") == "Succeeded")
    main = cluster.main("vectoradd")
    terminated = main["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert terminated["startedAt"] and terminated["finishedAt"]
    assert (main["ready"], main["started"], main["restartCount"]) == (False, False, 0)
    assert cluster.condition("vectoradd", "Ready")["reason"] == "PodCompleted"
    assert cluster.log("vectoradd") == list(workloads.VECTORADD_PASSED)
    assert cluster.pod("vectoradd")["spec"]["nodeName"] == "gpu-node"


def test_without_the_nvidia_runtime_vectoradd_fails_with_the_cuda_error(start: Any) -> None:
    # the device plugin runs with the nvidia RuntimeClass; the test pod names none and gets containerd's runc
    cluster = start(gpu_node("runc"), [RUNTIME_CLASS, plugin("nvidia")])
    cluster.create(vectoradd_pod("never", "Never"))
    assert cluster.sim.wait_for(lambda: cluster.phase("never") == "Failed")
    terminated = cluster.main("never")["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (1, "Error")
    assert cluster.log("never") == [
        "[Vector addition of 50000 elements]",
        "Failed to allocate device vector A (error code CUDA driver version is insufficient for CUDA runtime "
        "version)!",
    ]
    assert cluster.condition("never", "Ready")["reason"] == "PodFailed"


def test_on_failure_restarts_a_failing_container_and_never_a_passing_one(start: Any) -> None:
    cluster = start(gpu_node("runc"), [RUNTIME_CLASS, plugin("nvidia")])
    cluster.create(vectoradd_pod("retried", "OnFailure"))
    cluster.create(vectoradd_pod("passes", "OnFailure", runtimeClassName="nvidia"))
    assert cluster.sim.wait_for(lambda: cluster.main("retried").get("restartCount", 0) >= 2)
    retried = cluster.main("retried")
    assert retried["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert retried["lastState"]["terminated"]["exitCode"] == 1
    assert cluster.phase("retried") == "Running"
    assert cluster.sim.runtime.logs.has(
        cluster.pod("retried")["metadata"]["uid"], "cuda-vectoradd", previous=True
    )
    assert cluster.sim.wait_for(lambda: cluster.phase("passes") == "Succeeded")
    assert cluster.main("passes")["restartCount"] == 0


def test_always_restarts_even_a_container_that_exits_zero(start: Any) -> None:
    cluster = start(gpu_node(), [plugin()])
    cluster.create(vectoradd_pod("always", "Always"))
    assert cluster.sim.wait_for(lambda: cluster.main("always").get("restartCount", 0) >= 1)
    main = cluster.main("always")
    assert main["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert main["lastState"]["terminated"]["reason"] == "Completed"
    assert cluster.phase("always") == "Running"


def test_a_container_the_nvidia_hook_cannot_start_fails_a_never_pod(start: Any) -> None:
    cluster = start(gpu_node(driver=None), [RUNTIME_CLASS])
    pod = vectoradd_pod("no-driver", "Never", runtimeClassName="nvidia", nodeName="gpu-node")
    pod["spec"]["containers"][0].pop("resources")
    cluster.create(pod)
    assert cluster.sim.wait_for(lambda: cluster.phase("no-driver") == "Failed")
    terminated = cluster.main("no-driver")["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (128, "StartError")
    assert "nvidia-container-cli: initialization error" in terminated["message"]


def test_without_gpus_advertised_vectoradd_stays_pending(start: Any) -> None:
    cluster = start(gpu_node(), [])
    cluster.create(vectoradd_pod("waiting", "Never"))
    assert cluster.sim.wait_idle(10)
    assert cluster.phase("waiting") == "Pending"
    scheduled = cluster.condition("waiting", "PodScheduled")
    assert scheduled["reason"] == "Unschedulable"
    assert scheduled["message"].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
