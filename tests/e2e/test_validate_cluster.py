"""``gpuplan validate --cluster``: the compatibility rules against the nodes' GPUs on a fresh cluster where
GFD never ran (NFD's NodeFeature names them), from a read-only look: every request the API server answers
is a GET, and no state file or lock appears."""

from __future__ import annotations

from pathlib import Path

import pytest
from request_log import record_requests

from gpuplan.cli import run
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory

SPEC = (
    "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: fresh}\n"
    'spec:\n  driver: {version: "DRIVER"}\n'
)
SCENARIO = {
    "nodes": [
        {"name": "v100-0", "gpu": {"model": "v100", "count": 8}},
        {"name": "h100-0", "gpu": {"model": "h100-80gb", "count": 8}},
        {"name": "dark-0", "gpu": {"model": "t4"}, "nfd": False},
    ]
}


@pytest.fixture(autouse=True)
def unwrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "10000")


def validate(
    sim: Simulator, folder: Path, driver: str, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str, str]:
    kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
    spec = folder / "gpustack.yaml"
    spec.write_text(SPEC.replace("DRIVER", driver))
    code = run(["--kubeconfig", str(kubeconfig), "validate", "-f", str(spec), "--cluster"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_validate_cluster_refuses_595_on_the_v100_nfd_found_reading_only(
    sim_factory: SimFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sim = sim_factory(SCENARIO)
    assert sim.wait_idle(30)
    seen = record_requests(sim, monkeypatch)
    code, out, err = validate(sim, tmp_path, "595.91.07", capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        "Error: driver: node v100-0: driver 595.91.07 does not support Tesla-V100-SXM2-32GB (volta): the "
        "last driver branch for Volta and older GPUs is R580"
    )
    assert "Checked 3 nodes: 2 by NFD NodeFeature; 1 node not identified." in out
    assert "Warning: node dark-0: no GFD labels and no NodeFeature from NFD" in out
    methods = {method for method, _ in seen}
    assert seen and methods == {"GET"}, sorted(methods)
    assert [path for _, path in seen if "nodefeatures" in path] == [
        "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeatures"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpustack.yaml", "kubeconfig"], "no state, no lock"


def test_validate_cluster_passes_a_driver_every_gpu_runs(
    sim_factory: SimFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory({"nodes": SCENARIO["nodes"][:2]})
    assert sim.wait_idle(30)
    code, out, err = validate(sim, tmp_path, "580.173.02", capsys)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "Checked 2 nodes: 2 by NFD NodeFeature."
    assert out.splitlines()[-1] == "The configuration is valid."
