"""The drift report knows the mig-manager: its column once the spec owns it, a hand-edited
``nvidia.com/mig.config`` label named with who changed it, a MIG config the mig-manager failed to apply; the
inventory shows the MIG devices the device plugin advertises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lab_stack import full_lab_spec

from gpuplan.cli import run
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, SimFactory

NODE = "a100"
SPEC = full_lab_spec(mig="{strategy: mixed, config: all-1g.10gb}", migManager="{owner: gpuplan}")


def _gp(kubeconfig: Path, *args: str) -> int:
    return run(["--kubeconfig", str(kubeconfig), *args])


def _report(kubeconfig: Path, spec: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = _gp(kubeconfig, "drift", "report", "-f", str(spec), "--format", "json", "--no-telemetry")
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return code, document


@pytest.fixture
def applied(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[Simulator, Path]:
    node = {
        "name": NODE,
        "gpu": {"model": "a100-80gb", "count": 8},
        "driver": "580.105.08",
        "toolkit": "1.18.1",
    }
    sim = sim_factory({"nodes": [node], "timing": {"podReadySeconds": 0.01}})
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC)
    assert _gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0, capsys.readouterr().out
    assert sim.wait_idle(30)
    return sim, kubeconfig


def test_the_inventory_shows_the_mig_devices(
    applied: tuple[Simulator, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kubeconfig = applied
    capsys.readouterr()
    assert _gp(kubeconfig, "inventory", "-f", str(tmp_path / "gpustack.yaml"), "--json") == 0
    [node] = json.loads(capsys.readouterr().out)["nodes"]
    assert node["mig_devices"] == [{"profile": "1g.10gb", "resource": "nvidia.com/mig-1g.10gb", "count": 56}]
    assert node["components"]["device_plugin"] is True and node["sharing"] is None
    assert _gp(kubeconfig, "inventory", "-f", str(tmp_path / "gpustack.yaml")) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines[0].index("DEVICE-PLUGIN")
    assert lines[1][at:].split()[0] == "yes"
    assert lines[lines.index("MIG devices:") + 1] == f"  {NODE}: 1g.10gb ×56"


@pytest.mark.kubectl
def test_a_hand_edited_mig_config_label_is_drift_by_kubectl_label(
    applied: tuple[Simulator, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], kubectl: Kubectl
) -> None:
    sim, kubeconfig = applied
    spec = tmp_path / "gpustack.yaml"
    code, document = _report(kubeconfig, spec, capsys)
    assert code == 0, document["findings"]
    assert "migManager" in document["components"]
    [row] = document["nodes"]
    assert row["components"]["migManager"] == {"status": "ok", "reason": "MIG config applied"}
    _gp(kubeconfig, "drift", "report", "-f", str(spec), "--no-telemetry")
    assert "MIG-MANAGER" in capsys.readouterr().out

    kubectl("label", "node", NODE, "nvidia.com/mig.config=all-disabled", "--overwrite", kubeconfig=kubeconfig)
    assert sim.wait_idle(30)
    code, document = _report(kubeconfig, spec, capsys)
    assert code == 2
    [finding] = [f for f in document["findings"] if f["component"] == "migManager"]
    assert (finding["kind"], finding["node"]) == ("changed", NODE)
    assert finding["fields"] == [
        {
            "path": "metadata.labels.nvidia.com/mig.config",
            "before": "all-1g.10gb",
            "after": "all-disabled",
            "managers": ["kubectl-label"],
        }
    ]
    assert document["nodes"][0]["components"]["migManager"]["status"] == "unhealthy"
    _gp(kubeconfig, "drift", "report", "-f", str(spec), "--no-telemetry")
    text = capsys.readouterr().out
    assert "label nvidia.com/mig.config of node a100 changed outside gpuplan" in text
    assert "(by kubectl-label)" in text


@pytest.mark.kubectl
def test_a_mig_config_the_mig_manager_failed_is_a_node_problem(
    applied: tuple[Simulator, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], kubectl: Kubectl
) -> None:
    sim, kubeconfig = applied
    spec = tmp_path / "gpustack.yaml"
    kubectl(
        "label", "node", NODE, "nvidia.com/mig.config=no-such-config", "--overwrite", kubeconfig=kubeconfig
    )
    assert sim.wait_for(lambda: _labels(sim).get("nvidia.com/mig.config.state") == "failed", 30)
    code, document = _report(kubeconfig, spec, capsys)
    assert code == 2
    cell = document["nodes"][0]["components"]["migManager"]
    assert cell["status"] == "unhealthy"
    assert "the mig-manager could not apply MIG config no-such-config" in cell["reason"]
    _gp(kubeconfig, "drift", "report", "-f", str(spec), "--no-telemetry")
    problems = capsys.readouterr().out.split("Node problems:")[1]
    assert f"{NODE} migManager: unhealthy" in problems and "nvidia.com/mig.config.state=failed" in problems


def _labels(sim: Simulator) -> dict[str, str]:
    node: dict[str, Any] = sim.store.get(sim.store.registry.for_kind("v1", "Node"), None, NODE)
    labels: dict[str, str] = node["metadata"]["labels"]
    return labels
