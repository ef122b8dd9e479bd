"""`gpuplan apply` against the simulated lab: refused without a terminal or --auto-approve, refused while the
kube-system conflict is unresolved, applied after `gpuplan import` (the seed checks with kubectl: capacity 1,
GFD labels, DCGM metrics through the pod proxy), then "no changes"; saved plans applied exactly or refused as
stale; --json streams the design §4.1 events; a failure exits 1 saying it was rolled back."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import run
from gpuplan.planner.apply_model import ApplyOptions, ApplyResult
from gpuplan.planner.driver_rollout_apply import DriverRollout
from gpuplan.planner.plan import Plan
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl

SPEC = """\
apiVersion: gpuplan.io/v1alpha1
kind: GPUStack
metadata:
  name: lab
spec:
  namespace: gpu-operator
  driver:
    owner: external
    version: "580.105.08"
  toolkit:
    owner: external
  devicePlugin:
    version: v0.20.1
  gfd:
    version: v0.20.1
  dcgmExporter:
    version: 4.6.0-4.8.3-distroless
  validator: {}
"""
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
HAND = "DaemonSet/kube-system/nvidia-device-plugin-daemonset"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(SPEC)
    return path


def gp(kubeconfig: Path, *args: str) -> int:
    return run(["--kubeconfig", str(kubeconfig), *args])


def test_without_a_terminal_and_without_auto_approve_apply_refuses(
        spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    assert gp(kubeconfig, "apply", "-f", str(spec)) == 1
    out, err = capsys.readouterr()
    assert "Plan: 20 to add" in out  # the same human view as `gpuplan plan`
    assert "stdin is not a terminal" in err and "--auto-approve" in err
    assert not (spec.parent / "gpuplan.state.json").exists()
    assert kubectl("get", "namespace", "gpu-operator", check=False).returncode != 0


def test_an_unresolved_conflict_is_refused_with_its_resolutions(
        spec: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 1
    err = capsys.readouterr().err
    assert "this plan cannot be applied" in err and f"gpuplan import -f {spec} {PLUGIN} {HAND}" in err


def test_lab_story_import_then_apply_then_the_seed_checks_and_no_changes(
        spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]) -> None:
    assert gp(kubeconfig, "import", "-f", str(spec), PLUGIN, HAND) == 0
    capsys.readouterr()
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    out = capsys.readouterr().out
    assert "deletes apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset, which gpuplan did not create" in out
    assert "-/+ devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset: replace complete" in out
    assert "Apply complete" in out

    assert kubectl("get", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset",
                   check=False).returncode != 0
    node = json.loads(kubectl("get", "node", "lab-node", "-o", "json").stdout)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-3060"
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "1"
    pods = json.loads(kubectl("get", "pods", "-n", "gpu-operator", "-l", "app=nvidia-dcgm-exporter",
                              "-o", "json").stdout)["items"]
    name = pods[0]["metadata"]["name"]
    metrics = kubectl("get", "--raw", f"/api/v1/namespaces/gpu-operator/pods/{name}:9400/proxy/metrics").stdout
    assert "DCGM_FI_DEV_GPU_TEMP" in metrics

    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 0
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    assert "No changes." in capsys.readouterr().out


def test_a_saved_plan_is_applied_exactly_and_refused_once_stale(
        spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    saved = spec.parent / "lab.plan"
    assert gp(kubeconfig, "plan", "-f", str(spec), "--out", str(saved)) == 0
    assert gp(kubeconfig, "apply", "-f", str(spec), str(saved), "--json") == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    types = [event["type"] for event in events]
    assert types[0] == "apply_start" and types[-1] == "summary"
    assert {"change_start", "change_complete", "progress"} <= set(types)
    assert events[-1]["state"] == "ok" and events[-1]["counts"]["changed"] == 20

    assert gp(kubeconfig, "apply", "-f", str(spec), str(saved)) == 1  # the state moved on since
    err = capsys.readouterr().err
    assert "Saved plan is stale" in err and "state serial 0 ->" in err


def test_a_failed_apply_exits_1_and_says_it_was_rolled_back(
        spec: Path, kubeconfig: Path, kubectl: Kubectl, lab_sim: Simulator,
        capsys: pytest.CaptureFixture[str]) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    lab_sim.set_image_fault("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless", "ImagePullBackOff")
    spec.write_text(SPEC.replace("4.6.0-4.8.3-distroless", "4.5.2-4.8.1-distroless"))
    capsys.readouterr()
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 1
    out, err = capsys.readouterr()
    assert "ImagePullBackOff" in out and "rolling back 1 change(s)" in out
    assert err.startswith("Error: Apply failed:") and "Rolled back" in err and "node lab-node" in err
    spec.write_text(SPEC)
    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 0


class _TerminalInput(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("answer", ["no", "yes"])
def test_on_a_terminal_only_yes_is_accepted(spec: Path, kubeconfig: Path, kubectl: Kubectl, answer: str,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    monkeypatch.setattr("sys.stdin", _TerminalInput(answer + "\n"))
    code = gp(kubeconfig, "apply", "-f", str(spec))
    out, err = capsys.readouterr()
    assert "Only 'yes' will be accepted to approve." in out
    if answer == "yes":
        assert code == 0 and "Apply complete" in out
    else:
        assert code == 1 and "apply cancelled" in err
        assert kubectl("get", "namespace", "gpu-operator", check=False).returncode != 0


@pytest.mark.parametrize(("flags", "restore"), [((), True), (("--no-rollback",), False)])
def test_the_command_rolls_a_driver_change_node_by_node(spec: Path, kubeconfig: Path, kubectl: Kubectl,
                                                        monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...],
                                                        restore: bool) -> None:
    """Without the DriverRollout a driver change is a plain OnDelete update that restarts no node."""
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    seen: list[tuple[Plan, ApplyOptions]] = []

    def walk(plan: Plan, **kwargs: Any) -> ApplyResult:
        seen.append((plan, kwargs["options"]))
        return ApplyResult(ok=True)
    monkeypatch.setattr("gpuplan.planner.apply.apply", walk)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve", *flags) == 0
    [(plan, options)] = seen
    assert isinstance(options.driver_rollout, DriverRollout)
    assert options.driver_rollout.restore is restore and options.rollback is restore
    assert options.driver_rollout.resource_versions == dict(plan.resource_versions)
