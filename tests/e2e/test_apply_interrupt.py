"""Ctrl-C and SIGTERM during `gpuplan apply`: the walk stops at its next step, what this apply changed is
undone, the lock is released, and the process exits 1 saying so."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.providers.kubernetes_write import KubernetesWriter
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.sim.cluster import Simulator

SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata:
  name: lab
spec:
  driver:
    owner: external
    version: "580.105.08"
  toolkit:
    owner: external
  dcgmExporter:
    version: {exporter}
"""
HAND = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
EXPORTER = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")
OLD, NEW = "4.6.0-4.8.3-distroless", "4.5.2-4.8.1-distroless"


def gpuplan(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_apply_rolls_back_and_releases_the_lock(lab_sim: Simulator, kubeconfig: Path,
                                                               tmp_path: Path, signum: int) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC.format(exporter=OLD))
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        writer.delete(HAND)
        first = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
        assert first.returncode == 0, first.stderr
        lab_sim.set_slow_image(f"nvcr.io/nvidia/k8s/dcgm-exporter:{NEW}", 60)  # the rollout stays in progress
        spec.write_text(SPEC.format(exporter=NEW))
        process = subprocess.Popen([sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), "apply", "-f",
                                    str(spec), "--auto-approve", "--json"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        try:
            assert process.stdout is not None
            for line in process.stdout:
                event = json.loads(line)
                if event["type"] == "progress" and event.get("component") == "dcgmExporter":
                    break
            process.send_signal(signum)
            rest, err = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == 1, err
        events = [json.loads(line) for line in rest.splitlines() if line.startswith("{")]
        types = [event["type"] for event in events]
        assert "rollback_start" in types and "rollback_complete" in types
        assert "interrupted" in err and "Rolled back" in err
        live = writer.read(EXPORTER)
        assert live is not None
        assert live.manifest["spec"]["template"]["spec"]["containers"][0]["image"].endswith(OLD)
    state = json.loads((tmp_path / "gpuplan.state.json").read_text())
    assert state["journal"] == []
    spec.write_text(SPEC.format(exporter=OLD))
    again = gpuplan(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode")  # the lock was released
    assert again.returncode == 0, again.stdout + again.stderr
