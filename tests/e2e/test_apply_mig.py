"""MIG end to end on the simulator: gpuplan runs the mig-manager, labels its node with spec.mig.config, and
the apply waits until the node reports it applied (fleet facts §4.4); the device plugin then advertises the
MIG devices (§4.5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lab_stack import full_lab_spec

from gpuplan.cli import run
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory

NODE = "a100"


def _spec(mig: str, manager: str = "{owner: gpuplan}") -> str:
    return full_lab_spec(mig=mig, migManager=manager)


def _node(sim: Simulator) -> dict[str, Any]:
    found: dict[str, Any] = sim.store.get(sim.store.registry.for_kind("v1", "Node"), None, NODE)
    return found


def _apply(kubeconfig: Path, folder: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    spec = folder / "gpustack.yaml"
    spec.write_text(text)
    state = folder / "state.json"
    code = run(
        ["--kubeconfig", str(kubeconfig), "apply", "-f", str(spec), "--state", str(state), "--auto-approve"]
    )
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def a100(sim_factory: SimFactory) -> Simulator:
    node = {
        "name": NODE,
        "gpu": {"model": "a100-80gb", "count": 8},
        "driver": "580.105.08",
        "toolkit": "1.18.1",
    }
    sim = sim_factory({"nodes": [node], "timing": {"podReadySeconds": 0.01}})
    assert sim.wait_idle(30)
    return sim


def test_mixed_all_1g_10gb_and_back(
    a100: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = a100.write_kubeconfig(tmp_path / "kubeconfig")
    code, out = _apply(kubeconfig, tmp_path, _spec("{strategy: mixed, config: all-1g.10gb}"), capsys)
    assert code == 0, out
    node = _node(a100)
    labels = node["metadata"]["labels"]
    assert (labels["nvidia.com/mig.config"], labels["nvidia.com/mig.config.state"]) == (
        "all-1g.10gb",
        "success",
    )
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "56"
    assert any(
        entry.get("manager") == "gpuplan-node-labels" for entry in node["metadata"]["managedFields"]
    )  # the driver rollout's own labels are another manager's

    code, out = _apply(kubeconfig, tmp_path, _spec("{strategy: mixed}"), capsys)
    assert code == 0, out
    node = _node(a100)
    assert node["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_single_strategy(a100: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = a100.write_kubeconfig(tmp_path / "kubeconfig")
    code, out = _apply(kubeconfig, tmp_path, _spec("{strategy: single, config: all-1g.10gb}"), capsys)
    assert code == 0, out
    assert _node(a100)["status"]["allocatable"]["nvidia.com/gpu"] == "56"
