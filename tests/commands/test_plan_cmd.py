"""`gpuplan plan` through the CLI against the simulated lab: exit codes, --json, --out, and errors that print
one Error: line, exit 1 and write nothing."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from lab_stack import LAB_SPEC, full_lab_spec

from gpuplan.cli import run
from gpuplan.sim.cluster import Simulator
from gpuplan.state.local import LocalFileBackend


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(LAB_SPEC)
    return path


def test_lab_plan_exits_2_with_detailed_exitcode_and_writes_no_state(
    spec_file: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--detailed-exitcode"])
    out = capsys.readouterr().out
    assert code == 2
    assert "Plan: 28 to add, 0 to change, 0 to replace, 0 to destroy." in out
    assert "DaemonSet kube-system/nvidia-device-plugin-daemonset already runs it" in out
    assert sorted(p.name for p in spec_file.parent.iterdir()) == ["gpustack.yaml", "kubeconfig"], (
        "plan writes neither state nor lock file"
    )
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file)]) == 0, "0 without the flag"


def test_json_output_has_the_contract_keys(
    spec_file: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["format_version"] == "1"
    assert document["summary"]["create"] == len(document["changes"]) == 28
    assert {"address", "component", "action", "reason", "before", "after"} <= set(document["changes"][0])
    assert (
        document["conflicts"][0]["object"] == "apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset"
    )
    assert document["drift"] == [] and document["applicable"] is False


def test_out_saves_a_plan_that_show_renders_identically(
    spec_file: Path, kubeconfig: Path, tmp_path: Path, lab_sim: Simulator, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "lab.plan"
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--out", str(saved)]) == 0
    planned = capsys.readouterr().out
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert f"Saved the plan to {saved}" in planned
    assert lab_sim.token not in saved.read_text() and "BEGIN CERTIFICATE" not in saved.read_text()
    assert run(["show", str(saved)]) == 0
    shown = capsys.readouterr().out
    assert planned.startswith(shown)
    assert run(["show", str(saved), "--json"]) == 0
    document = json.loads(saved.read_text())
    assert document.pop("spec_text") == spec_file.read_text() and document.pop("digest").startswith("sha256:")
    assert json.loads(capsys.readouterr().out) == document  # the plan's document; the seal is the file's


def test_target_and_refresh_only(
    spec_file: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--target", "gfd", "--json"]) == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert {c["component"] for c in document["changes"]} == {"gfd", "devicePlugin", "toolkit"}
    assert document["complete"] is False
    code = run(
        [
            "--kubeconfig",
            str(kubeconfig),
            "plan",
            "-f",
            str(spec_file),
            "--refresh-only",
            "--detailed-exitcode",
        ]
    )
    assert code == 0, "no state, so nothing can have drifted"
    assert "No changes. The state matches the cluster" in capsys.readouterr().out


def test_an_unreachable_cluster_is_one_error_line_and_nothing_written(
    spec_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "dead-kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: abc}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    saved = tmp_path / "p.plan"
    code = run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--out", str(saved)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith("Error: cannot reach the cluster") and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("Error:")] == err.splitlines()[:1]
    assert not saved.exists() and not (tmp_path / "gpuplan.state.json").exists()
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    with backend.locked("test"):
        pass  # the plan released the lock on its error path


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--target", "gdf"], 1, "unknown component 'gdf'"),
        (["--refresh-only", "--destroy"], 64, "--refresh-only and --destroy cannot be combined"),
    ],
)
def test_usage_and_target_errors_happen_before_any_cluster_access(
    spec_file: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    code: int,
    message: str,
) -> None:
    absent = tmp_path / "no-such-kubeconfig"  # any cluster access would fail with a kubeconfig error instead
    assert run(["--kubeconfig", str(absent), "plan", "-f", str(spec_file), *args]) == code
    err = capsys.readouterr().err
    assert message in err and "kubeconfig" not in err


def test_a_malformed_spec_names_file_line_and_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(full_lab_spec(devicePlugin="{versoin: v0.20.1}"))
    assert run(["plan", "-f", str(spec)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {spec}:7:") and "versoin" in err


def test_a_held_state_lock_is_refused(
    spec_file: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = LocalFileBackend(spec_file.parent / "gpuplan.state.json")
    with backend.locked("apply"):
        assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file)]) == 1
    assert "state is locked by pid" in capsys.readouterr().err


def test_out_into_a_missing_folder_is_one_error_line_with_a_hint(
    spec_file: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = spec_file.parent / "nonexistent" / "dir" / "p.plan"
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec_file), "--out", str(target)]) == 1
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("Error:")] == err.splitlines()[:1]
    assert "cannot write the plan" in err and str(target) in err and "Traceback" not in err
    assert "Hint: the folder does not exist" in err
    assert not target.parent.exists()


def test_destroy_plans_every_managed_object_deleted_in_reverse_order(
    tmp_path: Path, kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuplan.planner import graph
    from gpuplan.planner.spec.model import load_spec

    spec_file = tmp_path / "gpustack.yaml"
    spec_file.write_text(full_lab_spec(devicePlugin="{owner: external}"))
    assert run(["--kubeconfig", str(kubeconfig), "apply", "-f", str(spec_file), "--auto-approve"]) == 0
    capsys.readouterr()
    state = LocalFileBackend(tmp_path / "gpuplan.state.json").read()
    assert state is not None

    code = run(
        [
            "--kubeconfig",
            str(kubeconfig),
            "plan",
            "-f",
            str(spec_file),
            "--destroy",
            "--json",
            "--detailed-exitcode",
        ]
    )
    document = json.loads(capsys.readouterr().out)
    assert code == 2 and document["destroy"] is True
    assert {c["action"] for c in document["changes"]} == {"delete"}
    assert all(c["reason"] == "DELETE_BECAUSE_DESTROY" for c in document["changes"])
    assert {c["address"] for c in document["changes"]} == set(state.resources)
    order = graph.build(load_spec(spec_file)).order()
    components = list(dict.fromkeys(c["component"] for c in document["changes"]))
    assert components == [name for name in reversed(order) if name in components], "dependents go first"
    for component in components:
        kinds = [c["kind"] for c in document["changes"] if c["component"] == component]
        assert "DaemonSet" not in kinds or kinds[0] == "DaemonSet", "the workload before its account and RBAC"
    assert document["summary"]["delete"] == len(state.resources)


def test_plan_and_apply_show_validates_warnings_first_and_once(
    tmp_path: Path, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown image tag fails the apply at the pull: `plan` and `apply` say so before their output, as
    `validate` says it (stderr, so --json stays one document), and only once."""
    spec = tmp_path / "gpustack.yaml"
    spec.write_text(full_lab_spec(devicePlugin="{version: v0.99.0}"))
    warning = (
        "Warning: devicePlugin: version v0.99.0 is not a known release of nvcr.io/nvidia/k8s-device-plugin; "
        "its pods would fail to pull the image"
    )
    monkeypatch.setattr("sys.stderr", sys.stdout)  # one stream: the order of the two is what is checked
    for command in (["plan", "-f", str(spec)], ["apply", "-f", str(spec)]):
        run(["--kubeconfig", str(kubeconfig), *command])
        lines = capsys.readouterr().out.splitlines()
        assert lines.count(warning) == 1, command
        assert lines.index(warning) < lines.index("Components:"), command
        assert lines[lines.index(warning) + 1].startswith("  Hint: known releases, newest first: v0.20.1")
    monkeypatch.undo()
    assert run(["--kubeconfig", str(kubeconfig), "plan", "-f", str(spec), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["changes"] and captured.err.splitlines()[0] == warning
