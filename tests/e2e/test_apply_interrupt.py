"""Ctrl-C and SIGTERM during `gpuplan apply`: the walk stops at its next step, what this apply changed is
undone, the lock is released, and the process exits 130 (interrupted) saying so."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from apply_process import LAB_SPEC, ApplyProcess, gpuplan, state_of

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator

SPEC = (
    LAB_SPEC
    + """\
  dcgmExporter:
    version: {exporter}
"""
)
EXPORTER = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")
OLD, NEW = "4.6.0-4.8.3-distroless", "4.5.2-4.8.1-distroless"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_apply_rolls_back_and_releases_the_lock(
    lab_sim: Simulator, lab_writer: KubernetesWriter, kubeconfig: Path, tmp_path: Path, signum: int
) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC.format(exporter=OLD))
    first = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert first.returncode == 0, first.stderr
    lab_sim.set_slow_image(f"nvcr.io/nvidia/k8s/dcgm-exporter:{NEW}", 60)  # the rollout stays in progress
    spec.write_text(SPEC.format(exporter=NEW))
    with ApplyProcess(kubeconfig, spec) as process:
        process.wait_for(
            lambda event: event["type"] == "progress" and event.get("component") == "dcgmExporter"
        )
        process.send(signum)
        assert process.finish() == 130, process.stderr
    types = [event["type"] for event in process.rest_events()]
    assert "rollback_start" in types and "rollback_complete" in types
    assert "interrupted" in process.stderr and "Rolled back" in process.stderr
    live = lab_writer.read(EXPORTER)
    assert live is not None
    assert live.manifest["spec"]["template"]["spec"]["containers"][0]["image"].endswith(OLD)
    assert state_of(spec)["journal"] == []
    spec.write_text(SPEC.format(exporter=OLD))
    again = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")  # the lock was released
    assert again.returncode == 0, again.stdout + again.stderr
