"""MPS sharing applied on the simulated lab end to end: the MPS control daemon runs on the node GFD labelled
MPS-capable, the node advertises 4 x its GPU, drift and inventory agree, and turning MPS off removes the
daemon and gives the node its one GPU back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lab_stack import full_lab_spec

from gpuplan.cli import run
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

MPS_SPEC = full_lab_spec(devicePlugin="{version: v0.20.1, config: {mps: {replicas: 4}}}")
PLAIN_SPEC = full_lab_spec()
DAEMON = "nvidia-device-plugin-mps-control-daemon"


def gp(kubeconfig: Path, *args: str) -> int:
    return run(["--kubeconfig", str(kubeconfig), *args])


def node(kubectl: Kubectl) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kubectl("get", "node", "lab-node", "-o", "json").stdout)
    return found


def drift_cell(capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """The devicePlugin cell of the lab node in a JSON drift report just printed."""
    [row] = json.loads(capsys.readouterr().out)["nodes"]
    cell: dict[str, str] = row["components"]["devicePlugin"]
    return cell


def test_mps_applies_shares_the_gpu_and_goes_away_again(
    lab_sim: Simulator,
    kubeconfig: Path,
    kubectl: Kubectl,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")  # the lab's own
    assert lab_sim.wait_idle(30)
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(MPS_SPEC)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    assert f"devicePlugin/DaemonSet/gpu-operator/{DAEMON}: create complete" in capsys.readouterr().out

    shared = node(kubectl)
    assert (
        shared["status"]["capacity"]["nvidia.com/gpu"],
        shared["status"]["allocatable"]["nvidia.com/gpu"],
    ) == (
        "4",
        "4",
    )
    labels = shared["metadata"]["labels"]
    assert labels["nvidia.com/mps.capable"] == "true"
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"]) == ("4", "mps")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-3060-SHARED"
    daemon = json.loads(kubectl("get", "daemonset", "-n", "gpu-operator", DAEMON, "-o", "json").stdout)
    assert daemon["status"]["numberReady"] == 1
    log = kubectl("logs", "-n", "gpu-operator", f"daemonset/{DAEMON}", "-c", "mps-control-daemon-ctr").stdout
    assert "CUDA_MPS_PIPE_DIRECTORY=/mps/nvidia.com/gpu/pipe" in log

    assert gp(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json") == 0
    assert drift_cell(capsys) == {"status": "ok", "reason": "pod Ready, allocatable nvidia.com/gpu right"}
    assert gp(kubeconfig, "inventory", "-f", str(spec), "--json") == 0
    [listed] = json.loads(capsys.readouterr().out)["nodes"]
    assert (listed["allocatable_gpus"], listed["gpu"]["count"]) == (4, 1)
    assert listed["sharing"] == {"strategy": "mps", "replicas": 4, "shared_gpus": 4}
    assert gp(kubeconfig, "inventory", "-f", str(spec)) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[shown.index("Shared GPUs:") + 1] == (
        "  lab-node: mps, 4 replicas per GPU (4 allocatable nvidia.com/gpu)"
    )

    # the device plugin's cell is about its own DaemonSet, not the MPS daemon's beside it
    kubectl("delete", "daemonset", "-n", "gpu-operator", "nvidia-device-plugin-daemonset")
    assert lab_sim.wait_idle(30)
    assert gp(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json") == 2
    assert drift_cell(capsys)["reason"] == (
        "its DaemonSet gpu-operator/nvidia-device-plugin-daemonset does not exist"
    )

    spec.write_text(PLAIN_SPEC)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    assert lab_sim.wait_idle(30)
    assert kubectl("get", "daemonset", "-n", "gpu-operator", DAEMON, check=False).returncode != 0
    restored = node(kubectl)
    assert restored["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert restored["metadata"]["labels"]["nvidia.com/mps.capable"] == "false"
    assert restored["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-3060"
