"""The plan on a fresh cluster where GFD never ran: NFD's NodeFeature names each node's GPU, so the
compatibility rules run; a node NFD does not run on is a warning saying what was not checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import run
from gpuplan.sim.testing import SimFactory

SPEC_595 = (
    "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: fresh}\n"
    'spec:\n  driver: {version: "595.91.07"}\n'
)
GFD_H100 = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.count": "8",
}


@pytest.fixture(autouse=True)
def unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "10000")


SELECTS_NO_NODE = (
    "Error: spec.nodeSelector (feature.node.kubernetes.io/pci-10de.present=true) matches none of the"
)


def plan(
    sim_factory: SimFactory,
    scenario: dict[str, Any],
    folder: Path,
    capsys: pytest.CaptureFixture[str],
    *extra: str,
) -> tuple[int, str, str]:
    sim = sim_factory(scenario)
    assert sim.wait_idle(30)
    kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
    spec = folder / "gpustack.yaml"
    spec.write_text(SPEC_595)
    code = run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_driver_595_on_a_v100_that_only_nfd_knows_is_refused_at_plan_time(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = {"nodes": [{"name": "v100-0", "gpu": {"model": "v100", "count": 8}}]}
    code, out, err = plan(sim_factory, scenario, tmp_path, capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        "Error: driver, node v100-0: driver 595.91.07 does not support Tesla-V100-SXM2-32GB (volta): the "
        "last driver branch for Volta and older GPUs is R580"
    )
    assert "Hint: pin driver.version to a 580 release" in err
    assert "  NFD NodeFeature  Tesla-V100-SXM2-32GB (volta): 1 node (v100-0)" in out.splitlines()


def test_the_json_plan_says_which_source_identified_each_gpu(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = {
        "nodes": [
            {"name": "h100-0", "gpu": {"model": "h100-80gb", "count": 8}, "labels": GFD_H100},
            {"name": "l40s-0", "gpu": {"model": "l40s", "count": 4}},
            {"name": "cpu-0"},
        ]
    }
    code, out, _ = plan(sim_factory, scenario, tmp_path, capsys, "--json")
    assert code == 0
    document = json.loads(out)
    assert document["nfd_node_features"] == "read"
    assert {row["node"]: (row["gpu"], row["source"], row["pci_device"]) for row in document["node_gpus"]} == {
        "h100-0": ("NVIDIA-H100-80GB-HBM3", "gfd-label", "0x2330"),
        "l40s-0": ("NVIDIA-L40S", "nfd", "0x26b9"),
    }
    l40s = next(row for row in document["node_gpus"] if row["node"] == "l40s-0")
    assert (l40s["family"], l40s["count"], l40s["unidentified"]) == ("ada-lovelace", 4, None)
    assert not [f for f in document["findings"] if f.get("node")], "every node identified: nothing unchecked"


def test_a_gpu_node_without_nfd_is_a_warning_naming_what_was_not_checked(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = {
        "nodes": [{"name": "v100-0", "gpu": {"model": "v100", "count": 8}, "nfd": False}, {"name": "cpu-0"}]
    }
    code, out, err = plan(sim_factory, scenario, tmp_path, capsys, "--json")
    assert code == 1 and err.startswith(SELECTS_NO_NODE), "no NFD label: the stack lands nowhere"
    document = json.loads(out)
    [warning] = [f for f in document["findings"] if f.get("node")]
    assert (warning["severity"], warning["node"]) == ("warning", "v100-0")
    assert warning["message"] == (
        "no GFD labels and no NodeFeature from NFD: whether it has an NVIDIA GPU, and which, is unknown: "
        "driver, MIG and sharing compatibility not checked on this node"
    )
    assert document["node_gpus"] == [
        {
            "node": "v100-0",
            "gpu": None,
            "family": None,
            "count": None,
            "source": None,
            "pci_device": None,
            "unidentified": warning["message"].split(": driver, MIG")[0],
        }
    ]


def test_without_any_nfd_each_node_is_a_warning(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No node runs NFD: its CRD is not installed (the list answers 404) and no node carries its labels."""
    scenario = {"nodes": [{"name": "v100-0", "gpu": {"model": "v100", "count": 8}, "nfd": False}]}
    code, out, err = plan(sim_factory, scenario, tmp_path, capsys, "--json")
    document = json.loads(out)
    assert code == 1 and err.startswith(SELECTS_NO_NODE)
    assert document["nfd_node_features"] == "not-served"
    [warning] = [f for f in document["findings"] if f.get("node")]
    assert warning["node"] == "v100-0" and warning["message"].startswith(
        "no GFD labels and no NFD in the cluster: whether it has an NVIDIA GPU, and which, is unknown: "
        "driver, MIG and sharing compatibility not checked"
    )
