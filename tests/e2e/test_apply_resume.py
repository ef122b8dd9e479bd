"""An apply killed (SIGKILL) during a component's health wait: its mutation landed and its journal entry is
done, but the gate never ran. The next `gpuplan apply` runs that gate first: healthy, it clears the journal and
goes on ("No changes"); crash-looping, it rolls the interrupted change back from the entry's before-object,
exits 1 saying so, and leaves the journal empty."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
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
  devicePlugin:
    version: {plugin}
"""
HAND = ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
PLUGIN = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
PLUGIN_ADDRESS = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
OLD, NEW = "v0.20.1", "v0.17.4"  # GFD stays on OLD, so a fault on the NEW image touches the plugin only


def gpuplan(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def plugin_image(writer: KubernetesWriter) -> str:
    live = writer.read(PLUGIN)
    assert live is not None
    image: str = live.manifest["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


@pytest.fixture
def interrupted(lab_sim: Simulator, kubeconfig: Path, tmp_path: Path) -> Iterator[tuple[Path, KubernetesWriter, str]]:
    """The stack applied at OLD, then an apply to NEW killed right after the plugin DaemonSet's change landed
    (its journal entry done), while its slow pods are still starting."""
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(SPEC.format(plugin=OLD))
    with KubernetesWriter(kubeconfig=str(kubeconfig)) as writer:
        writer.delete(HAND)
        first = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
        assert first.returncode == 0, first.stdout + first.stderr
        new_image = plugin_image(writer).rsplit(":", 1)[0] + f":{NEW}"
        lab_sim.set_slow_image(new_image, 3)  # the gate is still waiting when the process is killed
        spec.write_text(SPEC.format(plugin=NEW))
        process = subprocess.Popen([sys.executable, "-m", "gpuplan", "--kubeconfig", str(kubeconfig), "apply",
                                    "-f", str(spec), "--auto-approve", "--json"], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
        try:
            assert process.stdout is not None
            for line in process.stdout:
                event = json.loads(line)
                if event["type"] == "change_complete" and event.get("address") == PLUGIN_ADDRESS:
                    process.send_signal(signal.SIGKILL)
                    break
            process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        assert process.returncode == -signal.SIGKILL
        state = json.loads((tmp_path / "gpuplan.state.json").read_text())
        assert [(e["address"], e["state"]) for e in state["journal"] if e["address"] == PLUGIN_ADDRESS] == [
            (PLUGIN_ADDRESS, "done")]
        assert plugin_image(writer) == new_image
        yield spec, writer, new_image


def test_a_crash_looping_change_of_an_interrupted_apply_is_rolled_back_by_the_next_apply(
        interrupted: tuple[Path, KubernetesWriter, str], lab_sim: Simulator, kubeconfig: Path) -> None:
    spec, writer, new_image = interrupted
    lab_sim.set_image_fault(new_image, "CrashLoopBackOff")
    plan = gpuplan(kubeconfig, "plan", "-f", str(spec))
    assert "the last apply was interrupted" in plan.stdout + plan.stderr
    resumed = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert resumed.returncode == 1, resumed.stdout + resumed.stderr
    assert "interrupted apply failed its health gates" in resumed.stderr, resumed.stderr
    assert "devicePlugin" in resumed.stderr and "CrashLoopBackOff" in resumed.stderr
    assert "Rolled back" in resumed.stderr and PLUGIN_ADDRESS in resumed.stderr
    assert plugin_image(writer).endswith(f":{OLD}")
    state = json.loads((spec.parent / "gpuplan.state.json").read_text())
    assert state["journal"] == []


def test_a_healthy_change_of_an_interrupted_apply_is_verified_and_the_journal_cleared(
        interrupted: tuple[Path, KubernetesWriter, str], kubeconfig: Path) -> None:
    spec, writer, new_image = interrupted
    resumed = gpuplan(kubeconfig, "apply", "-f", str(spec), "--auto-approve")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "the last apply was interrupted" in resumed.stdout
    assert "journal is cleared" in resumed.stdout and "No changes" in resumed.stdout, resumed.stdout
    assert plugin_image(writer) == new_image
    state = json.loads((spec.parent / "gpuplan.state.json").read_text())
    assert state["journal"] == []
