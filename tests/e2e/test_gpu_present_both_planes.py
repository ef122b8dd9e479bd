"""The operator's ``nvidia.com/gpu.present=true`` on a running cluster, on the built-in control plane and on a
real one: gpuplan writes it on every GPU node (in a node pool or not) and on no CPU node, records it as a
label it owns, so that a selector third-party charts use lists the GPU nodes; a hand removal is drift, which
the plan shows and the next apply puts back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lab_stack import lab_spec
from test_sharing_both_planes import GFD, PLUGIN, Story, scenario, story

from gpuplan.sim.testing import ClusterFactory, Kubectl

__all__ = ["story"]  # the fixture, shared with the sharing stories

pytestmark = [pytest.mark.slow, pytest.mark.kubectl]

PRESENT = "nvidia.com/gpu.present"
GPU_NODES = ["gpu-a", "gpu-b"]


def selected(kubectl: Kubectl, kubeconfig: Path) -> list[str]:
    out = kubectl("get", "nodes", "-l", f"{PRESENT}=true", "-o", "name", kubeconfig=kubeconfig).stdout
    return sorted(line.removeprefix("node/") for line in out.split())


def test_every_gpu_node_carries_gpu_present_and_its_removal_is_drift(
    cluster_factory: ClusterFactory, tmp_path: Path, story: Any, kubectl: Kubectl
) -> None:
    cluster = cluster_factory(
        scenario(
            tmp_path,
            {"name": "gpu-a", "gpu": {"model": "l40s", "count": 2}, "labels": {"pool": "inference"}},
            {"name": "gpu-b", "gpu": {"model": "rtx-3060", "count": 1}},
            {"name": "cpu-c"},
        )
    )
    s: Story = story(cluster)
    spec = lab_spec(
        devicePlugin=PLUGIN, gfd=GFD, nodePools="[{name: inference, nodeSelector: {pool: inference}}]"
    )
    s.spec.write_text(spec)
    code, out = s.gpuplan("plan", "-f", str(s.spec))
    assert code == 0, out
    assert f"    label 1 node (gpu-a) {PRESENT}=true\n" in out, out  # under the inference pool
    assert f"  (no pool): label 1 node (gpu-b) {PRESENT}=true\n" in out, out
    assert "cpu-c" not in out
    assert selected(kubectl, s.kubeconfig) == []

    s.apply(spec)
    assert selected(kubectl, s.kubeconfig) == GPU_NODES
    assert PRESENT not in s.labels("cpu-c")
    state = json.loads((tmp_path / "gpuplan.state.json").read_text())
    assert {node: labels.get(PRESENT) for node, labels in state["node_labels"].items()} == dict.fromkeys(
        GPU_NODES, "true"
    )
    s.converged()

    kubectl("label", "node", "gpu-b", f"{PRESENT}-", kubeconfig=s.kubeconfig)
    code, out = s.gpuplan("drift", "report", "-f", str(s.spec), "--format", "json")
    assert code == 2, out
    [finding] = [f for f in json.loads(out)["findings"] if f.get("node") == "gpu-b"]
    assert finding["kind"] == "changed"
    assert finding["fields"][0]["path"] == f"metadata.labels.{PRESENT}"
    assert (finding["fields"][0]["before"], finding["fields"][0]["after"]) == ("true", None)
    code, out = s.gpuplan("plan", "-f", str(s.spec), "--detailed-exitcode")
    assert code == 2 and f"(no pool): label 1 node (gpu-b) {PRESENT}=true" in out, out

    s.apply(spec)
    assert selected(kubectl, s.kubeconfig) == GPU_NODES
    s.converged()
