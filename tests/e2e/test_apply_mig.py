"""MIG end to end on the simulator: gpuplan runs the mig-manager, labels its node with spec.mig.config, and
the apply waits until the node reports it applied (fleet facts §4.4); the device plugin then advertises the
MIG devices (§4.5)."""

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


def _plan(kubeconfig: Path, folder: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    spec = folder / "gpustack.yaml"
    spec.write_text(text)
    state = folder / "state.json"
    code = run(
        [
            "--kubeconfig",
            str(kubeconfig),
            "plan",
            "-f",
            str(spec),
            "--state",
            str(state),
            "--json",
            "--detailed-exitcode",
        ]
    )
    captured = capsys.readouterr()
    return code, captured.out


def test_the_plan_names_the_gpu_pods_a_mig_change_disrupts_and_refuses_a_profile_the_gpu_lacks(
    a100: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = a100.write_kubeconfig(tmp_path / "kubeconfig")
    code, out = _apply(kubeconfig, tmp_path, _spec("{strategy: mixed}"), capsys)
    assert code == 0, out
    workload = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "default"},
        "spec": {
            "containers": [
                {
                    "name": "t",
                    "image": "example.com/trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    a100.store.create(
        a100.store.registry.for_kind("v1", "Pod"), workload, namespace="default", manager="test"
    )
    assert a100.wait_idle(30)

    code, out = _plan(kubeconfig, tmp_path, _spec("{strategy: mixed, config: all-1g.10gb}"), capsys)
    assert code == 2, out
    document = json.loads(out)
    [change] = [c for c in document["changes"] if c["address"].startswith("migManager/DaemonSet/")]
    assert change["disruptive"] and "becomes all-1g.10gb" in change["disruption"]
    assert change["gpu_pods"] == {NODE: ["default/trainer"]}

    code, out = _plan(kubeconfig, tmp_path, _spec("{strategy: mixed, config: all-1g.18gb}"), capsys)
    assert code == 1  # shown, then refused: a compatibility error blocks the plan
    document = json.loads(out)
    assert any("1g.18gb" in blocker and NODE in blocker for blocker in document["blockers"]), document[
        "blockers"
    ]


def test_a_config_the_mig_manager_refuses_fails_the_apply_at_once(
    a100: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A custom ConfigMap gpuplan cannot read: the plan cannot check it, the mig-manager's failed ends the
    apply (and rolls it back) without waiting for the gate's timeout."""
    store = a100.store
    store.create(
        store.registry.for_kind("v1", "Namespace"), {"metadata": {"name": "gpu-operator"}}, manager="t"
    )
    layout = "version: v1\nmig-configs:\n  h200-only:\n    - devices: all\n      mig-enabled: true\n"
    layout += '      mig-devices: {"1g.18gb": 7}\n'
    config_map = {"metadata": {"name": "mine"}, "data": {"config.yaml": layout}}
    store.create(
        store.registry.for_kind("v1", "ConfigMap"), config_map, namespace="gpu-operator", manager="t"
    )
    kubeconfig = a100.write_kubeconfig(tmp_path / "kubeconfig")
    spec = _spec(
        "{strategy: mixed, config: h200-only}",
        "{owner: gpuplan, config: {name: mine}, healthTimeoutSeconds: 600}",
    )
    code, out = _apply(kubeconfig, tmp_path, spec, capsys)
    assert code == 1, out
    assert (
        "a100: the mig-manager could not apply MIG config h200-only (nvidia.com/mig.config.state=failed)"
        in out
    )


@pytest.mark.kubectl
def test_a_node_relabelled_by_hand_is_labelled_again(
    a100: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str], kubectl: Kubectl
) -> None:
    kubeconfig = a100.write_kubeconfig(tmp_path / "kubeconfig")
    spec = _spec("{strategy: mixed, config: all-1g.10gb}")
    code, out = _apply(kubeconfig, tmp_path, spec, capsys)
    assert code == 0, out
    kubectl("label", "node", NODE, "nvidia.com/mig.config=all-disabled", "--overwrite", kubeconfig=kubeconfig)
    assert a100.wait_for(lambda: _node(a100)["status"]["allocatable"].get("nvidia.com/gpu") == "8", 30)

    code, out = _plan(kubeconfig, tmp_path, spec, capsys)
    document = json.loads(out)
    assert [(n["pool"], n["label"], n["value"], n["before"]) for n in document["node_labels"]] == [
        (None, "nvidia.com/mig.config", "all-1g.10gb", {NODE: "all-disabled"})
    ]
    [change] = [c for c in document["changes"] if c["action"] != "no-op"]
    assert (change["address"], change["reason"]) == (
        "migManager/DaemonSet/gpu-operator/nvidia-mig-manager",
        "UPDATE_BECAUSE_NODE_LABELS",
    )
    assert f"({NODE}) lack nvidia.com/mig.config=all-1g.10gb: apply labels them" in change["reason_text"]
    code, out = _apply(kubeconfig, tmp_path, spec, capsys)
    assert code == 0, out
    assert _node(a100)["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "56"
