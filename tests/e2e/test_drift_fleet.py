"""`gpuplan drift report` on simulated fleets: the cluster part's requests do not grow with nodes (only list
pages do: nodes and the stack's pods, 500 a page), and telemetry is capped by --telemetry-max-nodes."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import run
from gpuplan.sim.testing import SimFactory

if str(Path(__file__).parent) not in sys.path:  # importlib mode keeps tests/e2e off sys.path
    sys.path.insert(0, str(Path(__file__).parent))

from test_drift_lab import LAB_SPEC, put_stack_in_place  # noqa: E402

pytestmark = pytest.mark.slow


def fleet_report(
    sim_factory: SimFactory, nodes: int, folder: Path, capsys: pytest.CaptureFixture[str], *args: str
) -> dict[str, Any]:
    sim = sim_factory(f"fleet-{nodes}")
    assert sim.wait_idle(120)
    folder.mkdir()
    kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
    spec_file = put_stack_in_place(
        kubeconfig, folder, LAB_SPEC.replace('version: "580.105.08"', ""), healthy=False
    )
    assert sim.wait_idle(300)
    code = run(
        ["--kubeconfig", str(kubeconfig), "drift", "report", "-f", str(spec_file), "--format", "json", *args]
    )
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert code in (0, 2) and document["summary"]["nodes"] == nodes
    sim.stop()
    return document


def test_the_cluster_part_costs_the_same_requests_on_a_bigger_fleet_but_a_pods_page(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = fleet_report(sim_factory, 20, tmp_path / "small", capsys, "--no-telemetry")
    big = fleet_report(sim_factory, 150, tmp_path / "big", capsys, "--no-telemetry")
    pods = sum(1 for node in big["nodes"] for cell in node["components"].values() if cell["status"] != "n/a")
    assert pods > 500, "150 GPU nodes x 4 DaemonSets: the stack's pods take two pages"
    assert big["api_requests"] == small["api_requests"] + 1, (small["api_requests"], big["api_requests"])
    assert all(not node["telemetry"]["gpus"] for node in big["nodes"])


def test_telemetry_is_capped_and_says_so(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = fleet_report(
        sim_factory,
        12,
        tmp_path / "fleet",
        capsys,
        "--telemetry-max-nodes",
        "5",
        "--telemetry-concurrency",
        "2",
    )
    scraped = [node["name"] for node in document["nodes"] if node["telemetry"]["gpus"]]
    gpu_nodes = sorted(node["name"] for node in document["nodes"] if node["gpu"]["present"])
    assert scraped == gpu_nodes[:5]
    assert any("telemetry capped: scraped 5 of" in note for note in document["notes"])
    unscraped = next(node for node in document["nodes"] if node["name"] == gpu_nodes[5])
    assert unscraped["components"]["dcgmExporter"]["reason"].endswith("(over --telemetry-max-nodes)")
    assert not [f for f in document["findings"] if f["component"] == "dcgmExporter"], (
        "a node not scraped is not a drift finding"
    )
