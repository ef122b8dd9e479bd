"""`gpuplan rollback` against the simulated lab: apply v1, apply v2 (a device plugin version change), roll
back to v1 through the apply engine (the live DaemonSet runs v1 again, the state's history gains the rollback
as a new generation), roll forward again with --to; an unknown serial, a state without an earlier
generation and a missing terminal are refused without touching the cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.cli import run
from gpuplan.sim.testing import Kubectl
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile

SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata:
  name: lab
spec:
  driver: {owner: external, version: "580.105.08"}
  toolkit: {owner: external}
  devicePlugin: {version: VERSION, healthTimeoutSeconds: 60}
  gfd: {owner: none}
  dcgmExporter: {owner: none}
  validator: {owner: none}
"""
V1, V2 = "v0.20.1", "v0.19.0"


@pytest.fixture
def spec(tmp_path: Path, kubectl: Kubectl) -> Path:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")  # the conflict, resolved
    path = tmp_path / "gpustack.yaml"
    path.write_text(SPEC.replace("VERSION", V1))
    return path


def gp(kubeconfig: Path, *args: str) -> int:
    return run(["--kubeconfig", str(kubeconfig), *args])


def _state(spec: Path) -> StateFile:
    backend = LocalFileBackend(spec.parent / "gpuplan.state.json")
    try:
        state = backend.read()
    finally:
        backend.close()
    assert state is not None
    return state


def _plugin_image(kubectl: Kubectl) -> str:
    ds = json.loads(kubectl("get", "daemonset", "-n", "gpu-operator", "nvidia-device-plugin-daemonset",
                            "-o", "json").stdout)
    image: str = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def _applied_v1_then_v2(spec: Path, kubeconfig: Path, kubectl: Kubectl) -> tuple[int, int]:
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    first = _state(spec).history[-1].serial
    spec.write_text(SPEC.replace("VERSION", V2))
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    assert _plugin_image(kubectl).endswith(f":{V2}")
    return first, _state(spec).history[-1].serial


def test_rollback_returns_to_the_previous_generation_as_a_new_one(
        spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _applied_v1_then_v2(spec, kubeconfig, kubectl)
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--auto-approve") == 0
    out = capsys.readouterr().out
    assert f"Rolling back to generation serial {first}" in out
    assert f"  serial {second}  applied " in out and "object(s): toolkit, devicePlugin" in out
    assert "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset" in out
    assert f"Rolled back to generation {first}" in out
    assert _plugin_image(kubectl).endswith(f":{V1}")
    ds = json.loads(kubectl("get", "daemonset", "-n", "gpu-operator", "nvidia-device-plugin-daemonset",
                            "-o", "json").stdout)
    assert ds["status"]["updatedNumberScheduled"] == ds["status"]["numberAvailable"] == 1  # waited for the rollout
    state = _state(spec)
    serials = [g.serial for g in state.history]
    assert serials[:2] == [first, second] and len(serials) == 3 and serials[2] > second
    assert state.history[2].spec_digest == state.history[0].spec_digest  # it is generation 1 again
    record = state.resources["devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"]
    assert record.owned == state.history[0].records[record.address].owned

    # the spec file still says v2: the next plan wants v2 back, and --to returns to generation 2 itself
    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 2
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--to", str(second), "--auto-approve") == 0
    assert _plugin_image(kubectl).endswith(f":{V2}")
    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 0


def test_rollback_to_the_generation_in_place_changes_nothing(
        spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]) -> None:
    _, second = _applied_v1_then_v2(spec, kubeconfig, kubectl)
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--to", str(second), "--auto-approve") == 0
    assert f"already matches generation {second}" in capsys.readouterr().out
    assert len(_state(spec).history) == 2


def test_an_unknown_serial_is_refused_with_the_kept_ones(
        spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = _applied_v1_then_v2(spec, kubeconfig, kubectl)
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--to", "999", "--auto-approve") == 1
    err = capsys.readouterr().err
    assert "no applied generation with serial 999" in err and f"generations kept: {first}, {second}" in err
    assert _plugin_image(kubectl).endswith(f":{V2}")


def test_without_an_earlier_generation_or_a_terminal_nothing_happens(
        spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]) -> None:
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--auto-approve") == 1
    assert "no earlier applied generation" in capsys.readouterr().err
    _applied_v1_then_v2(spec, kubeconfig, kubectl)
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec)) == 1  # pytest's stdin is not a terminal
    captured = capsys.readouterr()
    assert "stdin is not a terminal" in captured.err and "Plan:" in captured.out
    assert _plugin_image(kubectl).endswith(f":{V2}")
