"""``gpuplan state list|show|pull|push|rm``: output, exit codes and one-line errors (design §4)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan import cli
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import ResourceRecord, StateFile, make_address, to_json

DS = make_address("devicePlugin", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")
GFD = make_address("gfd", "DaemonSet", "gpu-operator", "gpu-feature-discovery")
RC = make_address("toolkit", "RuntimeClass", None, "nvidia")


def _record(address: str, **fields: object) -> ResourceRecord:
    component, kind, *rest = address.split("/")
    namespace, name = (rest[0], rest[1]) if len(rest) == 2 else (None, rest[0])
    return ResourceRecord(
        address=address,
        component=component,
        api_version="apps/v1",
        kind=kind,
        namespace=namespace,
        name=name,
        owned={"spec": {"selector": {"matchLabels": {"app": name}}}},
        uid=f"uid-{name}",
        resource_version="42",
        generation=2,
        applied_serial=3,
        **fields,
    )


@pytest.fixture
def lab(tmp_path: Path) -> Path:
    """A spec folder with a state of three records, one tainted, at serial 3."""
    (tmp_path / "gpustack.yaml").write_text("apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\n")
    state = StateFile.new().with_records([_record(DS), _record(GFD, status="tainted"), _record(RC)])
    LocalFileBackend(tmp_path / "gpuplan.state.json").write(state.next_serial().next_serial().next_serial())
    return tmp_path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.run(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_prints_addresses_and_marks_tainted(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "state", "list", "-f", str(lab / "gpustack.yaml"))
    assert code == 0
    assert out.splitlines() == [DS, f"{GFD} (tainted)", RC]


def test_list_json(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "state", "list", "--state", str(lab / "gpuplan.state.json"), "--json")
    document = json.loads(out)
    assert code == 0 and document["serial"] == 3
    assert [(r["address"], r["status"]) for r in document["resources"]] == [
        (DS, "ready"),
        (GFD, "tainted"),
        (RC, "ready"),
    ]


def test_the_default_state_is_in_the_current_folder(
    lab: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(lab)
    code, out, _ = _run(capsys, "state", "list")
    assert code == 0 and DS in out


def test_no_state_is_a_clear_message_exit_0_for_list_and_1_for_show_and_rm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "gpuplan.state.json"
    message = f"No state file at {missing}: nothing is managed yet."
    code, out, err = _run(capsys, "state", "list", "--state", str(missing))
    assert (code, out, err.strip()) == (0, "", message)
    for argv in (["show", DS], ["rm", DS]):
        code, _, err = _run(capsys, "state", *argv, "--state", str(missing))
        assert code == 1 and err.splitlines()[0] == f"Error: {message}"
    assert not missing.exists()


def test_show_prints_the_record(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "state", "show", GFD, "-f", str(lab / "gpustack.yaml"))
    assert code == 0
    assert out.splitlines()[0] == f"# {GFD}"
    for expected in (
        "uid:",
        "uid-gpu-feature-discovery",
        "resourceVersion:",
        "42",
        "status:",
        "tainted",
        "applied at serial: 3 (state serial 3)",
        "owned fields:",
        "app: gpu-feature-discovery",
    ):
        assert expected in out
    code, out, _ = _run(capsys, "state", "show", RC, "-f", str(lab / "gpustack.yaml"), "--json")
    assert json.loads(out)["namespace"] is None and json.loads(out)["uid"] == "uid-nvidia"


def test_show_of_an_unknown_address_names_near_matches(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "state", "show", GFD + "x", "-f", str(lab / "gpustack.yaml"))
    assert code == 1
    lines = err.splitlines()
    assert lines[0] == f"Error: no object '{GFD}x' in the state"
    assert f"Did you mean: {GFD}" in lines[1]


def test_rm_removes_records_takes_the_lock_and_bumps_the_serial(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    backend = LocalFileBackend(lab / "gpuplan.state.json")
    code, out, _ = _run(capsys, "state", "rm", GFD, RC, GFD, "-f", str(lab / "gpustack.yaml"))
    assert code == 0
    assert out.splitlines() == [
        f"Removed {GFD}",
        f"Removed {RC}",
        "Removed 2 object(s) from the state (serial 3 -> 4). The cluster was not changed; "
        "`gpuplan import` adopts them again.",
    ]
    state = backend.read()
    assert state is not None and list(state.resources) == [DS] and state.serial == 4
    assert not backend.lock_path.exists()  # released


def test_rm_with_an_unknown_address_removes_nothing(lab: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = (lab / "gpuplan.state.json").read_bytes()
    code, _, err = _run(
        capsys, "state", "rm", GFD, "gfd/DaemonSet/gpu-operator/gpu-feature", "-f", str(lab / "gpustack.yaml")
    )
    assert code == 1 and "Did you mean: " + GFD in err
    assert (lab / "gpuplan.state.json").read_bytes() == before


def test_rm_is_refused_while_another_run_holds_the_lock(
    lab: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = LocalFileBackend(lab / "gpuplan.state.json")
    with holder.locked("apply") as info:
        code, _, err = _run(capsys, "state", "rm", GFD, "-f", str(lab / "gpustack.yaml"))
    assert code == 1
    assert err.splitlines()[0].endswith(f"state is locked by {info.describe()}")
    assert f"Hint: gpuplan force-unlock {info.id}" in err
    state = holder.read()
    assert state is not None and GFD in state.resources


def test_pull_prints_the_state_and_push_writes_it_back_after_the_checks(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_path = str(lab / "gpuplan.state.json")
    code, pulled, _ = _run(capsys, "state", "pull", "--state", state_path)
    assert code == 0 and pulled == (lab / "gpuplan.state.json").read_text()
    document = json.loads(pulled)
    del document["resources"][RC]
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(document))
    code, _, err = _run(
        capsys, "state", "push", str(edited), "--state", state_path
    )  # same serial, other content
    assert code == 1 and "state serial 3 equals the stored serial but the content differs" in err
    document["serial"] = 4
    edited.write_text(json.dumps(document))
    code, out, _ = _run(capsys, "state", "push", str(edited), "--state", state_path)
    assert code == 0 and out.startswith("Pushed state serial 4")
    state = LocalFileBackend(lab / "gpuplan.state.json").read()
    assert state is not None and RC not in state.resources
    code, out, _ = _run(capsys, "state", "push", str(edited), "--state", state_path)
    assert code == 0 and "nothing was written" in out


def test_push_refuses_another_lineage_unless_forced(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = StateFile.new().with_record(_record(DS)).next_serial()
    source = tmp_path / "foreign.json"
    source.write_text(to_json(foreign))
    state_path = str(lab / "gpuplan.state.json")
    code, _, err = _run(capsys, "state", "push", str(source), "--state", state_path)
    assert code == 1 and foreign.lineage in err.splitlines()[0]
    code, _, _ = _run(capsys, "state", "push", str(source), "--state", state_path, "--force")
    assert code == 0
    assert LocalFileBackend(lab / "gpuplan.state.json").read() == foreign


def test_push_force_replaces_a_damaged_state(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (lab / "gpuplan.state.json").write_text("{damaged")
    good = StateFile.new().next_serial()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(to_json(good).encode())))
    code, _, err = _run(capsys, "state", "push", "-", "--state", str(lab / "gpuplan.state.json"))
    assert code == 1 and "not valid JSON" in err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(to_json(good).encode())))
    code, _, _ = _run(capsys, "state", "push", "-", "--state", str(lab / "gpuplan.state.json"), "--force")
    assert code == 0
    assert (lab / "gpuplan.state.json.backup").read_text() == "{damaged"


def test_push_of_a_damaged_file_names_it(
    lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format_version": 2,\n "serial": }')
    code, _, err = _run(capsys, "state", "push", str(bad), "-f", str(lab / "gpustack.yaml"))
    assert code == 1 and err.startswith(f"Error: {bad}:2:12: the state file is not valid JSON")


def test_a_missing_spec_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "state", "list", "-f", str(tmp_path / "nope.yaml"))
    assert code == 64 and "does not exist" in err


def test_the_console_script_prints_one_error_line_and_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuplan",
            "state",
            "show",
            DS,
            "--state",
            str(tmp_path / "gpuplan.state.json"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert (
        proc.stderr.splitlines()[0] == f"Error: No state file at {tmp_path / 'gpuplan.state.json'}: "
        "nothing is managed yet."
    )
    assert "Traceback" not in proc.stderr
