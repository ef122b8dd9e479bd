"""MIG per node pool on the simulator: an A100 pool's own mig.config wins over the stack's on its nodes, the
device plugin advertises the MIG devices and GFD labels them as it does on real nodes (fleet facts §4.5,
§4.6), the mig-manager reports the config applied, and all-disabled gives the GPUs back; a profile the pool's
GPU lacks is refused at plan time, and the plan names the GPU pods a MIG change disrupts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from lab_stack import full_lab_spec

from gpuplan.cli import run
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory
from gpuplan.state.document import parse_state

POOLED, PLAIN = "train-a100", "plain-a100"
GPUS = 2


def _spec(pool_config: str, strategy: str = "mixed") -> str:
    pools = f"[{{name: training, nodeSelector: {{pool: training}}, mig: {{config: {pool_config}}}}}]"
    return full_lab_spec(mig=f"{{strategy: {strategy}}}", migManager="{owner: gpuplan}", nodePools=pools)


@pytest.fixture
def a100s(sim_factory: SimFactory) -> Simulator:
    host = {"gpu": {"model": "a100-80gb", "count": GPUS}, "driver": "580.105.08", "toolkit": "1.18.1"}
    nodes = [{"name": POOLED, **host, "labels": {"pool": "training"}}, {"name": PLAIN, **host}]
    sim = sim_factory({"nodes": nodes, "timing": {"podReadySeconds": 0.01}})
    assert sim.wait_idle(30)
    return sim


def _node(sim: Simulator, name: str) -> dict[str, Any]:
    found: dict[str, Any] = sim.store.get(sim.store.registry.for_kind("v1", "Node"), None, name)
    return found


def _gp(
    sim: Simulator, folder: Path, text: str, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    (folder / "gpustack.yaml").write_text(text)
    kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
    capsys.readouterr()
    code = run(
        [
            "--kubeconfig",
            str(kubeconfig),
            *args,
            "-f",
            str(folder / "gpustack.yaml"),
            "--state",
            str(folder / "state.json"),
        ]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _apply(sim: Simulator, folder: Path, text: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _gp(sim, folder, text, capsys, "apply", "--auto-approve")
    assert code == 0, out + err


def test_a_mig_pool_partitions_its_gpus_and_all_disabled_gives_them_back(
    a100s: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GFD has not labelled the nodes MIG-capable yet: the plan cannot name them, apply finds them before the
    # mig-manager's gates
    code, out, _ = _gp(a100s, tmp_path, _spec("all-1g.10gb"), capsys, "plan", "--json")
    labels = [n for n in json.loads(out)["node_labels"] if n["label"] != "nvidia.com/gpu.present"]
    assert code == 0 and labels == [], out
    _apply(a100s, tmp_path, _spec("all-1g.10gb"), capsys)
    node = _node(a100s, POOLED)
    labels = node["metadata"]["labels"]
    for field in ("capacity", "allocatable"):
        assert node["status"][field]["nvidia.com/mig-1g.10gb"] == str(7 * GPUS)
    assert (labels["nvidia.com/mig.config"], labels["nvidia.com/mig.config.state"]) == (
        "all-1g.10gb",
        "success",
    )
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.10gb.count"] == str(7 * GPUS)
    assert (labels["nvidia.com/mig-1g.10gb.slices.gi"], labels["nvidia.com/mig-1g.10gb.slices.ci"]) == (
        "1",
        "1",
    )
    assert labels["nvidia.com/mig-1g.10gb.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert {
        key.removeprefix("nvidia.com/mig-1g.10gb."): labels[key]
        for key in labels
        if key.startswith("nvidia.com/mig-1g.10gb.")
        and key.split(".")[-1] in ("replicas", "sharing-strategy")
    } == {"replicas": "1", "sharing-strategy": "none"}
    assert all(
        f"nvidia.com/mig-1g.10gb.{key}" in labels for key in ("memory", "multiprocessors", "engines.copy")
    )
    assert labels["nvidia.com/gpu.replicas"] == "0"  # the full GPUs are all partitioned (fleet facts §4.6)
    # the node of no pool has the stack's config: all-disabled
    plain = _node(a100s, PLAIN)
    assert plain["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"
    assert plain["status"]["allocatable"]["nvidia.com/gpu"] == str(GPUS)
    state = parse_state((tmp_path / "state.json").read_text(), source="state.json")
    # every GPU node carries gpu.present, written first
    common = {"nvidia.com/gpu.deploy.mig-manager": "true", "nvidia.com/gpu.present": "true"}
    assert state.node_labels == {
        PLAIN: {**common, "nvidia.com/mig.config": "all-disabled"},
        POOLED: {**common, "nvidia.com/mig.config": "all-1g.10gb"},
    }

    code, out, err = _gp(a100s, tmp_path, _spec("all-1g.10gb"), capsys, "plan", "--detailed-exitcode")
    assert code == 0, out + err  # the pool's label stays: no plan relabels the node

    # drift judges the pool's node by the pool's MIG config, the other by the stack's
    code, out, _ = _gp(a100s, tmp_path, _spec("all-1g.10gb"), capsys, "drift", "report", "--format", "json")
    report = json.loads(out)
    assert code == 0, report["findings"]
    assert {row["name"]: row["components"]["migManager"]["status"] for row in report["nodes"]} == {
        POOLED: "ok",
        PLAIN: "ok",
    }

    _apply(a100s, tmp_path, _spec("all-disabled"), capsys)
    node = _node(a100s, POOLED)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(GPUS)
    assert node["status"]["allocatable"].get("nvidia.com/mig-1g.10gb", "0") == "0"
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"


def test_the_single_strategy_counts_the_mig_devices_as_gpus(
    a100s: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _apply(a100s, tmp_path, _spec("all-1g.10gb", strategy="single"), capsys)
    node = _node(a100s, POOLED)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(7 * GPUS)
    labels = node["metadata"]["labels"]
    assert (labels["nvidia.com/mig.strategy"], labels["nvidia.com/gpu.count"]) == ("single", str(7 * GPUS))
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
    assert _node(a100s, PLAIN)["status"]["allocatable"]["nvidia.com/gpu"] == str(GPUS)


def test_the_plan_lists_the_pods_a_pools_mig_change_disrupts_and_refuses_a_profile_its_gpu_lacks(
    a100s: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _apply(a100s, tmp_path, _spec("all-disabled"), capsys)
    for name in (POOLED, PLAIN):
        workload = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"trainer-{name}", "namespace": "default"},
            "spec": {
                "nodeName": name,
                "containers": [
                    {
                        "name": "t",
                        "image": "example.com/t:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
        a100s.store.create(
            a100s.store.registry.for_kind("v1", "Pod"), workload, namespace="default", manager="test"
        )
    assert a100s.wait_idle(30)

    code, out, _ = _gp(a100s, tmp_path, _spec("all-1g.10gb"), capsys, "plan", "--json", "--detailed-exitcode")
    assert code == 2, out
    document = json.loads(out)
    assert [(n["pool"], n["label"], n["value"], n["before"]) for n in document["node_labels"]] == [
        ("training", "nvidia.com/mig.config", "all-1g.10gb", {POOLED: "all-disabled"})
    ]
    [change] = [c for c in document["changes"] if c["address"].startswith("migManager/DaemonSet/")]
    assert change["disruptive"] and f"1 node ({POOLED}) becomes all-1g.10gb" in change["disruption"]
    assert change["gpu_pods"] == {POOLED: [f"default/trainer-{POOLED}"]}  # the other node keeps its GPUs

    code, out, err = _gp(a100s, tmp_path, _spec("all-1g.18gb"), capsys, "plan")
    assert code == 1, out + err
    errors = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, err
    assert all(word in errors[0] for word in ("training", POOLED, "A100", "1g.18gb")), errors[0]
