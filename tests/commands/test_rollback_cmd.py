"""`gpuplan rollback` against the simulated lab: apply v1, apply v2 (a device plugin version change), roll
back to v1 through the apply engine (the live DaemonSet runs v1 again, the state's history gains the rollback
as a new generation), roll forward again with --to N (a generation number; a serial, as --to once took,
still works when it is no generation's number); an unknown generation, a state without an earlier generation
and a missing terminal (or --json without --auto-approve) are refused without touching the cluster,
naming rollback; a rollback that fails its gate is undone and reported once, as a rollback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from lab_stack import lab_spec

from gpuplan.cli import run
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile

SPEC = lab_spec(
    devicePlugin="{version: VERSION, healthTimeoutSeconds: 60}",
    gfd="{owner: none}",
    dcgmExporter="{owner: none}",
    validator="{owner: none}",
)
V1, V2 = "v0.20.1", "v0.19.0"
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"


@pytest.fixture
def spec(tmp_path: Path, kubectl: Kubectl) -> Path:
    kubectl(
        "delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset"
    )  # the conflict, resolved
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
    ds = json.loads(
        kubectl(
            "get", "daemonset", "-n", "gpu-operator", "nvidia-device-plugin-daemonset", "-o", "json"
        ).stdout
    )
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
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = _applied_v1_then_v2(spec, kubeconfig, kubectl)
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--auto-approve") == 0
    out = capsys.readouterr().out
    assert f"Rolling back to generation 1 (serial {first}, applied " in out
    assert f"  generation 2  serial {second}  applied " in out and "object(s): toolkit, devicePlugin" in out
    assert "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset" in out
    last = _before_the_summary(out)
    assert last.startswith("Rolled back to generation 1: 1 change(s) applied") and "Apply complete" not in out
    assert _plugin_image(kubectl).endswith(f":{V1}")
    ds = json.loads(
        kubectl(
            "get", "daemonset", "-n", "gpu-operator", "nvidia-device-plugin-daemonset", "-o", "json"
        ).stdout
    )
    assert (
        ds["status"]["updatedNumberScheduled"] == ds["status"]["numberAvailable"] == 1
    )  # waited for the rollout
    state = _state(spec)
    serials = [g.serial for g in state.history]
    assert serials[:2] == [first, second] and len(serials) == 3 and serials[2] > second
    assert state.history[2].spec_digest == state.history[0].spec_digest  # it is generation 1 again
    assert [g.number for g in state.history] == [1, 2, 3]
    assert [g.outcome for g in state.history] == ["applied", "applied", "rolled back to generation 1"]
    record = state.resources["devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"]
    assert record.owned == state.history[0].records[record.address].owned

    # the spec file still says v2: the next plan wants v2 back, and --to returns to generation 2 itself
    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 2
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--to", "2", "--auto-approve") == 0
    assert _plugin_image(kubectl).endswith(f":{V2}")
    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 0


def test_rollback_to_the_generation_in_place_changes_nothing(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    _, second = _applied_v1_then_v2(spec, kubeconfig, kubectl)
    capsys.readouterr()
    # --to took a serial before generations were numbered: a serial no generation number equals still works
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--to", str(second), "--auto-approve") == 0
    captured = capsys.readouterr()
    out = captured.out
    assert f"{second} is no generation's number but the serial of generation 2" in captured.err
    assert out.count("No changes.") == 1  # the plan shown says it; the last line says against what
    assert _before_the_summary(out) == "Nothing to roll back: the cluster already matches generation 2."
    assert out.splitlines()[-1] == "Resources: 0 added, 0 changed, 0 replaced, 0 destroyed."
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--to", "2", "--auto-approve", "--json") == 0
    [event] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert event["type"] == "summary" and event["state"] == "ok"
    assert len(_state(spec).history) == 2


def test_an_unknown_generation_is_refused_with_the_kept_ones(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    _applied_v1_then_v2(spec, kubeconfig, kubectl)
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--to", "999", "--auto-approve") == 1
    err = capsys.readouterr().err
    assert "no applied generation 999 in the state" in err and "generations kept: 1, 2" in err
    assert _plugin_image(kubectl).endswith(f":{V2}")


def test_without_an_earlier_generation_or_a_terminal_nothing_happens(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--auto-approve") == 1
    assert "no earlier applied generation" in capsys.readouterr().err
    _applied_v1_then_v2(spec, kubeconfig, kubectl)
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec)) == 1  # pytest's stdin is not a terminal
    captured = capsys.readouterr()
    assert "Plan:" in captured.out
    assert captured.err.splitlines() == [
        "Error: rollback needs confirmation, and stdin is not a terminal",
        "  Hint: pass --auto-approve to roll back without a prompt, or run on a terminal to confirm",
    ]
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--json") == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[0] == (
        "Error: rollback --json does not ask for confirmation, so it needs --auto-approve"
    )
    assert _plugin_image(kubectl).endswith(f":{V2}")


def test_a_rollback_that_fails_its_gate_is_undone_and_said_once_as_a_rollback(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, lab_sim: Simulator, capsys: pytest.CaptureFixture[str]
) -> None:
    _, second = _applied_v1_then_v2(spec, kubeconfig, kubectl)
    lab_sim.set_image_fault(f"nvcr.io/nvidia/k8s-device-plugin:{V1}", "CrashLoopBackOff")
    capsys.readouterr()
    assert gp(kubeconfig, "rollback", "-f", str(spec), "--auto-approve") == 1
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert re.fullmatch(
        r"Error: Rollback failed: devicePlugin at the rollout gate: CrashLoopBackOff \(pod "
        r"nvidia-device-plugin-daemonset-\w+, node lab-node\)",
        lines[0],
    ), err
    assert lines[2:] == [
        "  Rolled back: 1 change(s) undone, the cluster and the state are as before this rollback; restored "
        "components healthy: devicePlugin.",
        f"  Undone (each object back as it was before this rollback): {PLUGIN}",
        "  Hint: run `gpuplan plan` to see where things stand",
    ]
    assert "Apply failed" not in out + err and "Rollback failed" not in out  # the verdict once, on stderr
    assert _before_the_summary(out) == "rollback complete: 1 change(s) undone"
    assert _plugin_image(kubectl).endswith(f":{V2}")
    assert [g.serial for g in _state(spec).history][-1] == second  # no new generation

    assert gp(kubeconfig, "rollback", "-f", str(spec), "--auto-approve", "--json") == 1
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[-1]["type"] == "summary" and events[-1]["message"].startswith("Rollback failed: ")
    assert not any("Apply failed" in event["message"] for event in events)


def _before_the_summary(out: str) -> str:
    """The line said last before the summary every apply and rollback ends with (resources, gate times, total
    time: tests/views/test_apply_summary.py)."""
    lines = out.splitlines()
    return lines[[line.startswith("Resources: ") for line in lines].index(True) - 1]
