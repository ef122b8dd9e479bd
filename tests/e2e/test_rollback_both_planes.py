"""Rollback stories on the built-in control plane and on a real one: a rollback, automatic or asked for,
is judged by the generation it restores (its capacity, its labels, its driver), never by the spec that failed
or by today's spec file; and after it gpuplan says what the spec file still asks for.

Each story runs gpuplan's commands in this process and reads the nodes through the API (no simulator
store), so it holds on both control planes."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_stack import lab_spec
from test_sharing_both_planes import QUICK_GFD, Story, scenario, sharing

from gpuplan.sim.testing import ClusterFactory

pytestmark = pytest.mark.slow

BROKEN_EXPORTER = "4.5.2-4.8.1-distroless"
EXPORTER = "4.6.0-4.8.3-distroless"


def shared_spec(replicas: int, *, exporter: str = EXPORTER) -> str:
    """Time-slicing ``replicas`` on the one RTX; the exporter's image is the failure a test chooses."""
    return lab_spec(
        devicePlugin=f"{{version: v0.20.1, healthTimeoutSeconds: 60, {sharing('timeSlicing', replicas)[1:]}",
        gfd=QUICK_GFD,
        dcgmExporter=f"{{version: {exporter}, healthTimeoutSeconds: 60}}",
    )


def test_a_rollback_is_judged_by_the_generation_it_restores(
    cluster_factory: ClusterFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = cluster_factory(scenario(tmp_path, {"name": "rtx", "gpu": {"model": "rtx-3060", "count": 1}}))
    s = Story(cluster, tmp_path, capsys)
    s.apply(shared_spec(4))
    s.converged()
    s.apply(shared_spec(8))
    assert s.allocatable() == {"rtx": "8"}
    s.converged()

    # a sharing change whose apply fails after the device plugin's gate passed: the rollback restores the
    # replicas of generation 2 and waits for their capacity (8), not the failed spec's (2)
    cluster.set_image_fault(f"nvcr.io/nvidia/k8s/dcgm-exporter:{BROKEN_EXPORTER}", "CrashLoopBackOff")
    s.spec.write_text(shared_spec(2, exporter=BROKEN_EXPORTER))
    code, out = s.gpuplan("apply", "-f", str(s.spec), "--auto-approve")
    assert code == 1, out
    assert "Rollback incomplete" not in out and "rolled back" in out.lower(), out
    assert s.allocatable() == {"rtx": "8"}

    # the spec file back at generation 2's, then a rollback to generation 1: judged by generation 1's spec
    # (4 per GPU), not by the spec file's (8)
    s.spec.write_text(shared_spec(8))
    s.converged()
    code, out = s.gpuplan("rollback", "-f", str(s.spec), "--to", "1", "--auto-approve")
    assert code == 0, out
    assert s.allocatable() == {"rtx": "4"}
    # the spec file still asks for 8: said, with what follows and the command that keeps generation 1
    state = tmp_path / "gpuplan.state.json"
    assert (
        f"Note: {s.spec} still asks for what generation 1 does not run:\n"
        "  spec.devicePlugin.config.timeSlicing.replicas: 8 (generation 1: 4)\n"
        "Until they agree, `gpuplan plan --detailed-exitcode` exits 2" in out
    ), out
    keep = f"gpuplan state history --state {state} --spec 1 > {s.spec}"
    assert out.rstrip().endswith(keep), out
    code, out = s.gpuplan("plan", "-f", str(s.spec), "--detailed-exitcode")
    assert code == 2, out
    code, kept = s.gpuplan("state", "history", "--state", str(state), "--spec", "1")
    assert code == 0, kept
    s.spec.write_text(kept)
    s.converged()
    assert s.allocatable() == {"rtx": "4"}
