"""`gpuplan apply` against the simulated lab: refused without a terminal or --auto-approve, refused while the
kube-system conflict is unresolved, applied after `gpuplan import` (the seed checks with kubectl: capacity 1,
GFD labels, DCGM metrics through the pod proxy), then "no changes"; saved plans applied exactly or refused as
stale; --json streams the design §4.1 events; a failure exits 1 saying it was rolled back, once, in each
output mode (plain lines, --json, a terminal); "No changes." is said once; a broken lock is one Note: line on
stderr."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_terminal import FakeTerminal
from lab_stack import LAB_SPEC

from gpuplan import errors
from gpuplan.cli import run
from gpuplan.commands.apply import failed_error
from gpuplan.planner.apply.model import STOPPED, ApplyOptions, ApplyResult, Failure, Operation, Outcome
from gpuplan.planner.plan.build import Plan
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl
from gpuplan.state.lock import LockInfo
from gpuplan.state.model import StateFile

SPEC = LAB_SPEC  # the demo's whole stack
PLUGIN = "devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset"
HAND = "DaemonSet/kube-system/nvidia-device-plugin-daemonset"


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(SPEC)
    return path


def gp(kubeconfig: Path, *args: str) -> int:
    return run(["--kubeconfig", str(kubeconfig), *args])


class _TerminalInput(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_without_a_terminal_and_without_auto_approve_apply_refuses(
    spec: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    assert gp(kubeconfig, "apply", "-f", str(spec)) == 1
    out, err = capsys.readouterr()
    assert "Plan: 28 to add" in out  # the same human view as `gpuplan plan`
    assert err.splitlines() == [
        "Error: apply needs confirmation, and stdin is not a terminal",
        "  Hint: pass --auto-approve to apply without a prompt, or run on a terminal to confirm",
    ]
    # --json shows no plan and its stdout is JSON lines: no prompt there, on a terminal or not
    monkeypatch.setattr("sys.stdin", _TerminalInput("yes\n"))
    assert gp(kubeconfig, "apply", "-f", str(spec), "--json") == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err.splitlines()[0] == "Error: apply --json does not ask for confirmation, so it needs --auto-approve"
    )
    assert not (spec.parent / "gpuplan.state.json").exists()
    assert kubectl("get", "namespace", "gpu-operator", check=False).returncode != 0


def test_an_unresolved_conflict_is_refused_with_its_resolutions(
    spec: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 1
    err = capsys.readouterr().err
    assert "this plan cannot be applied" in err and f"gpuplan import -f {spec} {PLUGIN} {HAND}" in err


@pytest.mark.parametrize("saved", [False, True], ids=["fresh-plan", "saved-plan"])
def test_lab_story_import_then_apply_then_the_seed_checks_and_no_changes(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str], saved: bool
) -> None:
    assert gp(kubeconfig, "import", "-f", str(spec), PLUGIN, HAND) == 0
    if saved:
        assert gp(kubeconfig, "plan", "-f", str(spec), "--out", str(spec.parent / "lab.plan")) == 0
    capsys.readouterr()
    approval = [str(spec.parent / "lab.plan")] if saved else ["--auto-approve"]
    assert gp(kubeconfig, "apply", "-f", str(spec), *approval) == 0
    out = capsys.readouterr().out
    # the undo note is said once: beside its change in the plan shown, or before a saved plan (not shown)
    # applies; the plan wraps long lines to the terminal, so the note is looked for with its words joined
    assert (
        " ".join(out.split()).count(
            "deletes apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset, which gpuplan did not "
            "create"
        )
        == 1
    )
    assert ("Before you confirm:" in out) is False and ("Applying the saved plan; note:" in out) is saved
    assert "-/+ devicePlugin/DaemonSet/gpu-operator/nvidia-device-plugin-daemonset: replace complete" in out
    assert "Apply complete" in out
    if saved:
        return  # the rest is the same story

    assert (
        kubectl(
            "get", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset", check=False
        ).returncode
        != 0
    )
    node = json.loads(kubectl("get", "node", "lab-node", "-o", "json").stdout)
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-GeForce-RTX-3060"
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "1"
    pods = json.loads(
        kubectl("get", "pods", "-n", "gpu-operator", "-l", "app=nvidia-dcgm-exporter", "-o", "json").stdout
    )["items"]
    name = pods[0]["metadata"]["name"]
    metrics = kubectl(
        "get", "--raw", f"/api/v1/namespaces/gpu-operator/pods/{name}:9400/proxy/metrics"
    ).stdout
    assert "DCGM_FI_DEV_GPU_TEMP" in metrics

    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 0
    capsys.readouterr()
    # "No changes." is said once: the plan shown ends with it (a saved plan's apply says it itself); the
    # summary's resource counts follow, as after every apply
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    out = capsys.readouterr().out
    assert out.count("No changes.") == 1 and out.rstrip().endswith(
        "No changes. The cluster matches the configuration.\n"
        "Resources: 0 added, 0 changed, 0 replaced, 0 destroyed."
    )
    nothing = spec.parent / "nothing.plan"
    assert gp(kubeconfig, "plan", "-f", str(spec), "--out", str(nothing)) == 0
    capsys.readouterr()
    assert gp(kubeconfig, "apply", "-f", str(spec), str(nothing)) == 0
    assert capsys.readouterr().out.count("No changes.") == 1
    # --json: one event, and the stream ends with its summary as every apply's does
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json") == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events == [
        {
            "type": "summary",
            "message": "No changes. The cluster matches the configuration.",
            "state": "ok",
            "counts": {"changed": 0, "failed": 0, "rolled_back": 0},
            "resources": {"added": 0, "changed": 0, "replaced": 0, "destroyed": 0},
            "gate_seconds": {},
        }
    ]


def test_a_saved_plan_is_applied_exactly_and_refused_once_stale(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    saved = spec.parent / "lab.plan"
    assert gp(kubeconfig, "plan", "-f", str(spec), "--out", str(saved)) == 0
    assert gp(kubeconfig, "apply", "-f", str(spec), str(saved), "--json") == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    types = [event["type"] for event in events]
    assert types[0] == "apply_start" and types[-1] == "summary"
    assert {"change_start", "change_complete", "progress"} <= set(types)
    assert events[-1]["state"] == "ok" and events[-1]["counts"]["changed"] == 28

    assert gp(kubeconfig, "apply", "-f", str(spec), str(saved)) == 1  # the state moved on since
    err = capsys.readouterr().err
    assert "Saved plan is stale" in err and "state serial 0 ->" in err


def test_a_failed_apply_exits_1_and_says_it_was_rolled_back(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, lab_sim: Simulator, capsys: pytest.CaptureFixture[str]
) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    lab_sim.set_image_fault("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless", "ImagePullBackOff")
    spec.write_text(SPEC.replace("4.6.0-4.8.3-distroless", "4.5.2-4.8.1-distroless"))
    capsys.readouterr()
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 1
    out, err = capsys.readouterr()
    assert "ImagePullBackOff" in out and "rolling back 1 change(s)" in out
    assert re.match(
        r"Error: Apply failed: dcgmExporter at the rollout gate: ImagePullBackOff \(pod \S+, node "
        r"lab-node\)\n",
        err,
    ), err
    assert "  Rolled back: 1 change(s) undone" in err
    spec.write_text(SPEC)
    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 0


EXPORTER = "dcgmExporter/DaemonSet/gpu-operator/nvidia-dcgm-exporter"
CRASHING = "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-distroless"


def _assert_the_final_error(err: str) -> None:
    """Said once, on stderr: the short verdict naming component, gate, reason, pod and node; the cluster's
    words; what the rollback did; each undone object; the next step."""
    lines = err.splitlines()
    assert sum("Apply failed" in line for line in lines) == 1 and lines[0].startswith("Error: "), err
    headline = re.fullmatch(
        r"Error: Apply failed: dcgmExporter at the rollout gate: CrashLoopBackOff \(pod "
        r"(nvidia-dcgm-exporter-\w+), node lab-node\)",
        lines[0],
    )
    assert headline is not None, err
    pod = headline.group(1)
    assert lines[1].startswith(
        f"  {EXPORTER} at the rollout gate: {pod} on lab-node: CrashLoopBackOff (back-off"
    )
    assert lines[2:] == [
        "  Rolled back: 1 change(s) undone, the cluster and the state are as before this apply; restored "
        "components "
        "healthy: dcgmExporter.",
        f"  Undone (each object back as it was before this apply): {EXPORTER}",
        "  Hint: run `gpuplan plan` to see where things stand",
    ]


def test_a_crash_looping_exporter_is_reported_once_in_every_output_mode(
    spec: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    lab_sim: Simulator,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    lab_sim.set_image_fault(CRASHING, "CrashLoopBackOff")
    spec.write_text(SPEC.replace("4.6.0-4.8.3-distroless", "4.5.2-4.8.1-distroless"))
    capsys.readouterr()

    # plain lines (no terminal): the failure once as its change_errored line, the verdict only on stderr
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 1
    out, err = capsys.readouterr()
    _assert_the_final_error(err)
    progress = out[out.index("applying 1 change(s)") :].splitlines()
    [failure] = [line for line in progress if line.startswith("!")]
    assert "CrashLoopBackOff" in failure
    # before its third restart the crash loop is not yet the verdict: a waiting line may name it so
    assert all(
        "before it counts as failed" in line
        for line in progress
        if "CrashLoopBackOff" in line and line != failure
    )
    assert progress.count("rolling back 1 change(s) of this apply in reverse order") == 1
    assert "Apply failed" not in out
    # the summary follows the rollback's line: what was applied and undone, the gate's time, the total
    summary = progress[progress.index("rollback complete: 1 change(s) undone") + 1 :]
    assert summary[:3] == [
        "Resources: 0 added, 1 changed, 0 replaced, 0 destroyed; 1 undone by the rollback.",
        "Gate times (first change to gate passed):",
        summary[2],
    ]
    assert re.fullmatch(r"  dcgmExporter  failed after [0-9.]+s", summary[2]), summary
    assert len(summary) == 4 and summary[3].startswith("Total time: ")

    # --json: every stdout line an event, ending with the failed summary; the error still on stderr
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json") == 1
    out, err = capsys.readouterr()
    _assert_the_final_error(err)
    events = [json.loads(line) for line in out.splitlines()]
    assert events[-1]["type"] == "summary" and events[-1]["state"] == "failed" and events[-1]["rolled_back"]
    [errored] = [event for event in events if event["type"] == "change_errored"]
    assert (errored["component"], errored["reason"], errored["node"]) == (
        "dcgmExporter",
        "CrashLoopBackOff",
        "lab-node",
    )
    assert [event["type"] for event in events].count("rollback_complete") == 1

    # a terminal: the live display leaves the verdict to the error too
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stdout", terminal)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 1
    _assert_the_final_error(capsys.readouterr().err)
    shown = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in terminal.lines]
    assert "Apply failed" not in terminal.getvalue() and "rollback complete: 1 change(s) undone" in shown
    # the component's status line gave way to its result, the failure with its reason, the ✗ in red
    [failed] = [line for line in shown if "CrashLoopBackOff" in line and "before it counts" not in line]
    assert failed.startswith("✗ dcgmExporter  failed  ") and f"{EXPORTER} at the rollout gate" in failed
    assert terminal.getvalue().count("\x1b[31m✗\x1b[0m dcgmExporter") == 1
    assert shown[-1].startswith("Total time: ")

    spec.write_text(SPEC)
    assert gp(kubeconfig, "plan", "-f", str(spec), "--detailed-exitcode") == 0


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait(timeout=30)
    return process.pid


def test_a_broken_lock_is_a_note_on_stderr_and_json_stays_clean(
    spec: Path, kubeconfig: Path, kubectl: Kubectl
) -> None:
    """The real console entry point (its logging set up as users get it): the dead holder's lock is broken
    with one Note: line, no logging record, and stdout is nothing but the JSON events."""
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    dead = LockInfo.for_this_process("apply").model_copy(update={"pid": _dead_pid()})
    (spec.parent / "gpuplan.state.json.lock").write_text(dead.model_dump_json())
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan",
            "--kubeconfig",
            str(kubeconfig),
            "apply",
            "-f",
            str(spec),
            "--auto-approve",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"Note: broke the state lock held by {dead.describe()}: the process is gone.\n"
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events[-1]["type"] == "summary" and events[-1]["state"] == "ok"


@pytest.mark.parametrize("answer", ["no", "yes"])
def test_on_a_terminal_only_yes_is_accepted(
    spec: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    answer: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    monkeypatch.setattr("sys.stdin", _TerminalInput(answer + "\n"))
    terminal = FakeTerminal()
    monkeypatch.setattr("sys.stdout", terminal)
    monkeypatch.setenv("NO_COLOR", "1")
    code = gp(kubeconfig, "apply", "-f", str(spec))
    out, err = terminal.getvalue(), capsys.readouterr().err
    assert "Only 'yes' will be accepted to approve." in out
    if answer == "yes":
        assert code == 0 and "Apply complete" in out
        # the live display, without colour (NO_COLOR): each component's result and the summary stay
        assert "\x1b[3" not in out and "\x1b[1m" not in out
        assert "✓ devicePlugin  healthy  1/1 nodes  " in "\n".join(terminal.lines)
        assert not [line for line in terminal.lines if line.startswith("… ")], "no status line is left"
        assert "Resources: 28 added, 0 changed, 0 replaced, 0 destroyed." in terminal.lines, terminal.lines
    else:
        assert code == 1 and "apply cancelled" in err
        assert kubectl("get", "namespace", "gpu-operator", check=False).returncode != 0


@pytest.mark.parametrize(("flags", "rollback"), [((), True), (("--no-rollback",), False)])
def test_the_rollback_flag_reaches_the_walker(
    spec: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, ...],
    rollback: bool,
) -> None:
    """The walker rolls a driver change node by node itself (tests/planner/test_apply_result.py); the
    command only says whether a failure is undone."""
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    seen: list[ApplyOptions] = []

    def walk(plan: Plan, **kwargs: Any) -> ApplyResult:
        seen.append(kwargs["options"])
        return ApplyResult()

    monkeypatch.setattr("gpuplan.planner.apply.walker.apply", walk)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve", *flags) == 0
    [options] = seen
    assert options.rollback is rollback and options.operation is Operation.APPLY


@pytest.mark.parametrize("telemetry", [True, False])
def test_the_specs_prometheus_reaches_the_metrics_gate_unopened(
    spec: Path, kubeconfig: Path, kubectl: Kubectl, monkeypatch: pytest.MonkeyPatch, telemetry: bool
) -> None:
    """The walker's metrics gate asks the spec's Prometheus only when the API server will not proxy to the
    exporters (tests/planner/test_health_wait.py): the command hands it a way to open one, and opens none."""
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    if telemetry:
        spec.write_text(SPEC + "  telemetry: {prometheus: {url: http://prometheus.monitoring:9090}}\n")
    seen: list[ApplyOptions] = []

    def walk(plan: Plan, **kwargs: Any) -> ApplyResult:
        seen.append(kwargs["options"])
        return ApplyResult()

    monkeypatch.setattr("gpuplan.planner.apply.walker.apply", walk)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve") == 0
    [options] = seen
    if not telemetry:
        assert options.prometheus is None
        return
    assert options.prometheus is not None
    assert options.prometheus().url == "http://prometheus.monitoring:9090"


def test_an_interruption_is_its_own_headline_and_stopped_components_are_not_failures() -> None:
    """The walker's message for Ctrl-C: its one failure of no component heads the error and is not repeated as
    detail; a component stopped because of it is not named as a cause."""
    interrupted = Failure("apply", "interrupted (Ctrl-C or SIGTERM)", reason="Interrupted")
    stopped = Failure(EXPORTER, "stopped: another component failed", "dcgmExporter", STOPPED)
    outcome = "Rolled back: 1 change(s) undone, the cluster and the state are as before this apply."
    result = ApplyResult(
        outcome=Outcome.ROLLED_BACK, failed=[interrupted, stopped], rolled_back=[EXPORTER], interrupted=True
    )
    assert result.message == f"Apply failed: {interrupted.describe()}. {outcome}"
    error = failed_error(result)
    assert error.exit_code == errors.EXIT_INTERRUPTED, "undone like any failure, but it exits 130"
    assert error.render().splitlines() == [
        "Error: Apply failed: interrupted (Ctrl-C or SIGTERM)",
        f"  {outcome}",
        f"  Undone (each object back as it was before this apply): {EXPORTER}",
        "  Hint: run `gpuplan plan` to see where things stand",
    ]


def test_two_failed_components_both_head_the_error_and_a_kept_apply_names_its_tainted_objects() -> None:
    first = Failure(
        EXPORTER, "p1 on n1: CrashLoopBackOff", "dcgmExporter", "CrashLoopBackOff", "n1", "p1", "rollout"
    )
    second = Failure(
        "gfd/DaemonSet/gpu-operator/gpu-feature-discovery",
        "labels missing on n2 (reason Timeout)",
        "gfd",
        "Timeout",
        "n2",
        None,
        "gfd-labels",
    )
    what = f"{first.describe()}; {second.describe()}"
    result = ApplyResult(outcome=Outcome.ROLLBACK_INCOMPLETE, failed=[first, second], left=["x: 409"])
    journal = "The journal in the state names what is left; the next apply reconciles it."
    incomplete = f"Rollback incomplete: x: 409. {journal}"
    assert result.message == f"Apply failed: {what}. {incomplete}"
    error = failed_error(result)
    assert error.summary == (
        "Apply failed: dcgmExporter at the rollout gate: CrashLoopBackOff (pod p1, node n1); "
        "gfd at the gfd-labels gate: Timeout (node n2)"
    )
    assert error.detail.splitlines() == [
        first.describe(),
        second.describe(),
        incomplete,
    ]
    assert error.hint == "run `gpuplan apply` again: it reconciles the journal first"
    kept = ApplyResult(outcome=Outcome.KEPT, failed=[first], kept=2, tainted=[EXPORTER])
    assert failed_error(kept, rollback=False).render().splitlines() == [
        "Error: Apply failed: dcgmExporter at the rollout gate: CrashLoopBackOff (pod p1, node n1)",
        f"  {first.describe()}",
        "  Not rolled back (--no-rollback): 2 change(s) stay applied; "
        f"tainted (the next plan replaces them): {EXPORTER}.",
        "  Hint: fix the cause and apply again: the next plan replaces the tainted objects",
    ]


def test_a_failed_resume_of_an_interrupted_apply_ends_json_with_a_summary_and_heads_the_error(
    spec: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The interrupted apply's done entries failed their gates and were undone (the walker's verdict, faked
    here; tests/e2e/test_apply_resume.py runs the real one): --json ends with a failed summary, the error is
    headed by the cause."""
    failure = Failure(
        PLUGIN,
        "p on lab-node: CrashLoopBackOff",
        "devicePlugin",
        "CrashLoopBackOff",
        "lab-node",
        "p",
        "rollout",
    )
    message = (
        f"The interrupted apply failed its health gates: {failure.describe()}. Rolled back: 1 change(s) "
        f"undone, the cluster and the state are as before the interrupted apply. Undone: {PLUGIN}."
    )

    def resume(**kwargs: Any) -> ApplyResult:
        result = ApplyResult(
            operation=Operation.RESUME,
            outcome=Outcome.ROLLED_BACK,
            failed=[failure],
            rolled_back=[PLUGIN],
            serial=7,
        )
        assert result.message == message
        return result

    monkeypatch.setattr(
        "gpuplan.commands.apply.reconcile_journal",
        lambda *args, **kwargs: StateFile.model_construct(journal=[object()]),
    )
    monkeypatch.setattr("gpuplan.planner.apply.walker.resume_interrupted", resume)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--json") == 1
    out, err = capsys.readouterr()
    assert [json.loads(line) for line in out.splitlines()] == [
        {
            "type": "summary",
            "message": message,
            "state": "failed",
            "serial": 7,
            "rolled_back": True,
            "counts": {"changed": 0, "failed": 1, "rolled_back": 1},
            # the run's tally (here: the walker faked, so no events to count)
            "resources": {"added": 0, "changed": 0, "replaced": 0, "destroyed": 0},
            "gate_seconds": {},
        }
    ]
    assert err.splitlines()[:2] == [
        "Error: The interrupted apply failed its health gates: devicePlugin at the "
        "rollout gate: CrashLoopBackOff (pod p, node lab-node)",
        f"  {failure.describe()}",
    ]


@pytest.mark.parametrize(
    ("flags", "parallelism"), [(("--parallelism", "2"), 2), ((), 4)], ids=["flag", "default"]
)
def test_the_parallelism_flag_reaches_the_walker(
    spec: Path,
    kubeconfig: Path,
    kubectl: Kubectl,
    monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, ...],
    parallelism: int,
) -> None:
    """--parallelism is the walker's worker count; each worker needs its own writer, so a factory comes too
    (without one the walker runs sequentially whatever parallelism says)."""
    kubectl("delete", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset")
    seen: list[ApplyOptions] = []

    def walk(plan: Plan, **kwargs: Any) -> ApplyResult:
        seen.append(kwargs["options"])
        return ApplyResult()

    monkeypatch.setattr("gpuplan.planner.apply.walker.apply", walk)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve", *flags) == 0
    [options] = seen
    assert options.parallelism == parallelism and options.writer_factory is not None


def test_a_parallelism_below_1_is_refused_before_anything_is_applied(
    spec: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def walk(plan: Plan, **kwargs: Any) -> ApplyResult:
        raise AssertionError("the walker ran with parallelism 0")

    monkeypatch.setattr("gpuplan.planner.apply.walker.apply", walk)
    assert gp(kubeconfig, "apply", "-f", str(spec), "--auto-approve", "--parallelism", "0") != 0
    assert "--parallelism" in capsys.readouterr().err


def test_a_state_that_could_not_be_written_heads_the_error_with_why() -> None:
    """A full disk while recording a change: the error says so, not 'toolkit: ApiError'."""
    why = (
        "cannot write gpuplan.state.json: No space left on device (the state on disk is still the last good "
        "one (writes go through a temporary file).)"
    )
    failure = Failure("toolkit/RuntimeClass/nvidia", why, "toolkit", "StateWriteFailed")
    error = failed_error(ApplyResult(outcome=Outcome.ROLLBACK_INCOMPLETE, failed=[failure], left=["x"]))
    assert error.summary == f"Apply failed: toolkit: {why}"
