"""The lab's GPU test pod through the real kubectl: the vectoradd sample is scheduled on the GPU node, runs
to completion and logs the sample's output; one asking for more GPUs than the lab has stays Pending."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.kubelet import workloads

pytestmark = pytest.mark.kubectl

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  restartPolicy: Never
  containers:
    - name: cuda-vectoradd
      image: nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0-ubuntu22.04
      resources:
        limits:
          nvidia.com/gpu: {gpus}
"""


def pod(sim: Simulator, name: str) -> dict[str, Any]:
    return sim.store.get(sim.store.registry.for_kind("v1", "Pod"), "default", name)


def test_vectoradd_completes_on_the_lab(lab_sim: Simulator, kubectl: Any) -> None:
    kubectl("apply", "-f", "-", input=POD.format(name="cuda-vectoradd", gpus=1))
    assert lab_sim.wait_for(lambda: pod(lab_sim, "cuda-vectoradd")["status"].get("phase") == "Succeeded")
    row = kubectl("get", "pod", "cuda-vectoradd", "--no-headers").stdout.split()
    assert row[:3] == ["cuda-vectoradd", "0/1", "Completed"]
    uid = pod(lab_sim, "cuda-vectoradd")["metadata"]["uid"]
    assert [line.text for line in lab_sim.runtime.logs.read(uid, "cuda-vectoradd")] == list(
        workloads.VECTORADD_PASSED
    )
    # what the lab write-up types: the sample's own output, nothing else
    assert kubectl("logs", "cuda-vectoradd").stdout.splitlines() == list(workloads.VECTORADD_PASSED)
    events = kubectl("get", "events", "--field-selector", "involvedObject.name=cuda-vectoradd").stdout
    assert "Successfully assigned default/cuda-vectoradd to lab-node" in events
    assert "Started container cuda-vectoradd" in events


def test_more_gpus_than_the_lab_has_stay_pending(lab_sim: Simulator, kubectl: Any) -> None:
    kubectl("apply", "-f", "-", input=POD.format(name="greedy", gpus=2))
    assert lab_sim.wait_idle(10)
    row = kubectl("get", "pod", "greedy", "--no-headers").stdout.split()
    assert row[:3] == ["greedy", "0/1", "Pending"]
    described = kubectl("describe", "pod", "greedy").stdout
    assert "FailedScheduling" in described
    assert "0/1 nodes are available: 1 Insufficient nvidia.com/gpu." in " ".join(described.split())
