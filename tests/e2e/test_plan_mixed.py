"""The plan against mixed clusters: compatibility findings per node, and changes that name the nodes they
touch.

GFD has not run in these simulated clusters, so the scenarios give the nodes the labels GFD would have written
(the simulator keeps a scenario's own labels), as a cluster where GFD already runs would carry them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import run
from gpuplan.sim.testing import SimFactory

# model -> (GFD product label, compute major, minor, family)
GFD = {
    "a100-80gb": ("NVIDIA-A100-SXM4-80GB", 8, 0, "ampere"),
    "h100-80gb": ("NVIDIA-H100-80GB-HBM3", 9, 0, "hopper"),
    "l40s": ("NVIDIA-L40S", 8, 9, "ada-lovelace"),
    "rtx-3060": ("NVIDIA-GeForce-RTX-3060", 8, 6, "ampere"),
    "v100": ("Tesla-V100-SXM2-32GB", 7, 0, "volta"),
}
MIXED = Path(__file__).resolve().parents[2] / "sim" / "scenarios" / "mixed.yaml"


def with_gfd_labels(node: dict[str, Any]) -> dict[str, Any]:
    product, major, minor, family = GFD[node["gpu"]["model"]]
    node = dict(node)
    node["labels"] = {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.family": family,
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
        "nvidia.com/gpu.count": str(node["gpu"]["count"]),
        "nvidia.com/cuda.driver-version.full": node["driver"],
    }
    return node


def plan(
    kubeconfig: Path, spec_text: str, folder: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, str]:
    spec = folder / "gpustack.yaml"
    spec.write_text(spec_text)
    code = run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec), *extra])
    return code, capsys.readouterr().out


@pytest.fixture(autouse=True)
def unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    """A terminal wide enough for every line: these tests read a component or finding line whole."""
    monkeypatch.setenv("COLUMNS", "10000")


def test_mixed_cluster_gpuplan_driver_over_host_drivers(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = yaml.safe_load(MIXED.read_text())
    scenario["nodes"] = [with_gfd_labels(node) for node in scenario["nodes"]] + [{"name": "cpu-node"}]
    sim = sim_factory(scenario)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec = (
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: mixed}\n"
        'spec:\n  driver: {version: "580.105.08"}\n  toolkit: {owner: external}\n'
    )
    code, out = plan(kubeconfig, spec, tmp_path, capsys, "--json")
    assert code == 0
    document = json.loads(out)
    host_driver = [
        (f["component"], f["node"])
        for f in document["findings"]
        if f["severity"] == "error" and "already runs a host driver" in f["message"]
    ]
    assert host_driver == [
        ("driver", "a100-node"),
        ("driver", "h100-node"),
        ("driver", "l40s-node"),
        ("driver", "rtx-node"),
    ]
    gpu_nodes = ["a100-node", "h100-node", "l40s-node", "rtx-node"]
    daemonsets = [c for c in document["changes"] if c["kind"] == "DaemonSet"]
    assert {c["component"] for c in daemonsets} == {
        "driver",
        "devicePlugin",
        "gfd",
        "dcgmExporter",
        "validator",
    }
    assert all(c["nodes"] == gpu_nodes for c in daemonsets), "the CPU node runs none of them"
    assert document["applicable"] is False and document["gpu_nodes"] == 4 and document["nodes_total"] == 5

    code, human = plan(kubeconfig, spec, tmp_path, capsys)
    assert "      nodes: 4 nodes (a100-node, h100-node, l40s-node and 1 more)" in human
    # the same finding on three nodes is one line in the human view (the JSON above keeps one per node)
    assert (
        "  Error: driver, on 3 nodes: h100-node, l40s-node, rtx-node: the node already runs a host driver "
        "(driver 580.105.08)"
    ) in human
    assert "  Error: driver, node a100-node: the node already runs a host driver (driver 570.195.03)" in human


def test_a_595_driver_on_v100_nodes_is_refused(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = {
        "namePrefix": "v100-",
        "count": 2,
        "gpu": {"model": "v100", "count": 8},
        "os": "ubuntu22.04",
        "driver": "580.105.08",
        "toolkit": "1.18.1",
    }
    scenario = {
        "nodes": [
            with_gfd_labels(node),
            with_gfd_labels(
                {
                    "name": "h100-0",
                    "gpu": {"model": "h100-80gb", "count": 8},
                    "driver": "595.58.03",
                    "toolkit": "1.18.1",
                }
            ),
        ]
    }
    sim = sim_factory(scenario)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec = (
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: v100}\n"
        'spec:\n  driver: {owner: external, version: "595.58.03"}\n  toolkit: {owner: external}\n'
    )
    code, out = plan(kubeconfig, spec, tmp_path, capsys, "--json", "--detailed-exitcode")
    assert code == 1, "a driver branch the nodes' GPUs cannot run refuses the plan, changes or not"
    document = json.loads(out)
    refused = [
        f["node"] for f in document["findings"] if "does not support Tesla-V100-SXM2-32GB" in f["message"]
    ]
    assert refused == ["v100-1", "v100-2"]
    mismatch = [
        f["node"] for f in document["findings"] if "the node reports driver 580.105.08" in f["message"]
    ]
    assert mismatch == ["v100-1", "v100-2"]
    driver = document["components"]["driver"]
    assert driver["status"] == "mismatch" and driver["problem_nodes"] == ["v100-1", "v100-2"]
    assert driver["detail"].startswith("verified 595.58.03 on 1/3 nodes; mismatch on node v100-1")
    assert document["applicable"] is False
