"""`drift report --output`: every way the write can fail after the report was built is one `Error:` line that
names the file and hints at the fix (exit 1), never "internal error"; the old file and no temp file remain."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import run
from gpuplan.commands import drift as drift_cmd
from gpuplan.state.local import LocalFileBackend
from gpuplan.state.model import StateFile

SPEC = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\n"


class FakeReport:
    """What `check` returns, without a cluster: the command only renders it and reads `drift`."""

    drift = False

    def document(self) -> dict[str, Any]:
        return {"drift": False}

    def exit_code(self) -> int:
        return 0


@pytest.fixture
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "gpustack.yaml"
    path.write_text(SPEC)
    LocalFileBackend(tmp_path / "gpuplan.state.json").write(StateFile.new().next_serial())
    monkeypatch.setattr(drift_cmd, "check", lambda *args, **kwargs: FakeReport())
    monkeypatch.setattr(drift_cmd, "render", lambda document, output_format, color: "gpuplan_drift 0\n")
    return path


def failing(monkeypatch: pytest.MonkeyPatch, name: str, code: int) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(os, name, refuse)


def error_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err
    return [line.strip() for line in err.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("step", "code", "hint"),
    [
        ("fsync", errno.ENOSPC, "disk is full"),
        ("replace", errno.EACCES, "may not write there"),
        ("chmod", errno.EPERM, "may not write there"),
        ("replace", errno.EROFS, "read-only"),
    ],
)
def test_a_write_failing_after_the_temp_file_exists_is_one_error_line_with_a_hint(
    spec_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    step: str,
    code: int,
    hint: str,
) -> None:
    target = spec_file.parent / "out.prom"
    target.write_text("old\n")
    failing(monkeypatch, step, code)
    assert run(["drift", "report", "-f", str(spec_file), "--output", str(target)]) == 1
    lines = error_lines(capsys)
    assert lines[0] == f"Error: {target}: cannot write the report: {os.strerror(code)}"
    assert [line for line in lines if line.startswith("Hint:")] == [
        next(line for line in lines if line.startswith("Hint:"))
    ] and hint in lines[-1]
    assert target.read_text() == "old\n"
    assert sorted(os.listdir(spec_file.parent)) == ["gpuplan.state.json", "gpustack.yaml", "out.prom"]


def test_a_missing_folder_is_one_error_line_naming_the_file(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = spec_file.parent / "absent" / "out.prom"
    assert run(["drift", "report", "-f", str(spec_file), "--output", str(target)]) == 1
    lines = error_lines(capsys)
    assert lines[0].startswith(f"Error: {target}: cannot write the report: ")
    assert "folder does not exist" in lines[-1]


def test_the_report_is_written_when_nothing_fails(
    spec_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = spec_file.parent / "out.prom"
    assert run(["drift", "report", "-f", str(spec_file), "--output", str(target), "--no-status"]) == 0
    assert target.read_text() == "gpuplan_drift 0\n" and capsys.readouterr().out == ""
