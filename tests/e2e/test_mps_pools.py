"""MPS per node pool on the simulator: a pool whose device plugin shares its GPUs through MPS gets the MPS
control daemon on its nodes only (GFD labels them ``nvidia.com/mps.capable=true`` from the pool's config),
and its nodes advertise replicas x GPUs of ``nvidia.com/gpu`` as the real device plugin does (fleet facts
§5); replicas past MPS's limit are refused at plan time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from lab_stack import full_lab_spec

from gpuplan.cli import run
from gpuplan.modules.mps_daemon import NAME as DAEMON
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import SimFactory

POOLED, PLAIN, VOLTA = "infer-l40s", "plain-l40s", "old-v100"
GPUS = 2


def _spec(replicas: int, selector: str = "{pool: inference}") -> str:
    sharing = f"{{config: {{mps: {{replicas: {replicas}}}}}}}"
    pool = f"{{name: inference, nodeSelector: {selector}, devicePlugin: {sharing}}}"
    return full_lab_spec(nodePools=f"[{pool}]")


@pytest.fixture
def cluster(sim_factory: SimFactory) -> Simulator:
    host = {"driver": "580.105.08", "toolkit": "1.18.1"}
    nodes = [
        {"name": POOLED, "gpu": {"model": "l40s", "count": GPUS}, **host, "labels": {"pool": "inference"}},
        {"name": PLAIN, "gpu": {"model": "l40s", "count": GPUS}, **host},
        {"name": VOLTA, "gpu": {"model": "v100", "count": 1}, **host, "labels": {"pool": "volta"}},
    ]
    sim = sim_factory({"nodes": nodes, "timing": {"podReadySeconds": 0.01}})
    assert sim.wait_idle(30)
    return sim


def _gp(
    sim: Simulator, folder: Path, text: str, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str]:
    (folder / "gpustack.yaml").write_text(text)
    kubeconfig = sim.write_kubeconfig(folder / "kubeconfig")
    capsys.readouterr()
    spec, state = str(folder / "gpustack.yaml"), str(folder / "state.json")
    code = run(["--kubeconfig", str(kubeconfig), *args, "-f", spec, "--state", state])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def _items(sim: Simulator, api_version: str, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = sim.store.list(sim.store.registry.for_kind(api_version, kind)).items
    return found


def test_an_mps_pool_runs_the_control_daemon_on_its_nodes_and_shares_their_gpus(
    cluster: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _gp(cluster, tmp_path, _spec(4), capsys, "apply", "--auto-approve")
    assert code == 0, out
    nodes = {node["metadata"]["name"]: node for node in _items(cluster, "v1", "Node")}
    labels = {name: node["metadata"]["labels"] for name, node in nodes.items()}
    assert labels[POOLED]["nvidia.com/mps.capable"] == "true"
    assert labels[PLAIN]["nvidia.com/mps.capable"] == "false"
    assert (labels[POOLED]["nvidia.com/gpu.replicas"], labels[POOLED]["nvidia.com/gpu.sharing-strategy"]) == (
        "4",
        "mps",
    )
    for field in ("capacity", "allocatable"):
        assert nodes[POOLED]["status"][field]["nvidia.com/gpu"] == str(4 * GPUS)
        assert nodes[PLAIN]["status"][field]["nvidia.com/gpu"] == str(GPUS)
    daemons = [
        pod
        for pod in _items(cluster, "v1", "Pod")
        if pod["metadata"].get("labels", {}).get("app") == DAEMON
        and not pod["metadata"].get("deletionTimestamp")
    ]
    assert [pod["spec"]["nodeName"] for pod in daemons] == [POOLED]
    assert all(status["ready"] for pod in daemons for status in pod["status"].get("containerStatuses") or ())


def test_mps_replicas_past_the_limit_are_refused_at_plan_time(
    cluster: Simulator, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = _gp(cluster, tmp_path, _spec(49), capsys, "plan")
    assert code == 1
    [error] = [line for line in out.splitlines() if line.startswith("Error:")]
    assert "gpustack.yaml:" in error and "48" in error, error
    # 32 clients are within MPS's limit from Turing on, past it on the V100 (16 before Turing)
    code, out = _gp(cluster, tmp_path, _spec(32, "{pool: volta}"), capsys, "plan")
    assert code == 1, out
    [error] = [line for line in out.splitlines() if line.startswith("Error:")]
    assert all(word in error for word in ("inference", VOLTA, "V100", "16", "32")), error
