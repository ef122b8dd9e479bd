"""`gpuplan validate -f SPEC`: findings, the valid message, exit codes; no cluster needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_stack import LAB_HEADER as LAB
from lab_stack import STACK_HEADER as HEADER

from gpuplan import cli, errors


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gpustack.yaml"
    path.write_text(text)
    return str(path)


def test_valid_spec_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["validate", "-f", write(tmp_path, LAB)]) == errors.EXIT_OK
    captured = capsys.readouterr()
    assert captured.out == "The configuration is valid.\n" and captured.err == ""


def test_warnings_are_printed_and_still_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, HEADER + '  driver: {version: "550.144.03"}\n  toolkit: {owner: external}\n')
    assert cli.run(["validate", "-f", spec]) == errors.EXIT_OK
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "Warning: driver: driver 550.144.03 (branch R550) is not in the GPU Operator v26.7"
    )
    assert out[1].startswith("  Hint: supported branches: R610, R595, R580, R535")
    assert out[2].startswith("Warning: toolkit: a containerised driver with a host toolkit")
    assert out[-1] == "The configuration is valid. (2 warnings)"


def test_error_findings_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, HEADER + "  toolkit: {owner: none}\n")
    assert cli.run(["validate", "-f", spec]) == errors.EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.err.splitlines()[0] == (
        "Error: toolkit: toolkit has owner none, but devicePlugin, gfd, "
        "dcgmExporter, validator need it on every GPU node"
    )
    assert "The configuration is valid." not in captured.out


def test_spec_error_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, LAB.replace("toolkit:", "tolkit:"))
    assert cli.run(["validate", "-f", spec]) == errors.EXIT_ERROR
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("Error:")] == [
        f"Error: {spec}:6:3: unknown field 'tolkit'"
    ]
    assert "did you mean 'toolkit'?" in err


def test_missing_file_and_missing_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.run(["validate", "-f", str(tmp_path / "nope.yaml")]) == errors.EXIT_ERROR
    assert "cannot read the spec" in capsys.readouterr().err
    assert cli.run(["validate"]) == errors.EXIT_USAGE


def test_an_empty_mig_manager_section_says_that_it_now_runs_the_mig_manager(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``migManager: {}`` meant off before it meant owned (design §8.3): a spec that relied on it is told
    where, and how to keep it off. A spec whose MIG config needs the mig-manager never relied on it."""
    spec = write(tmp_path, LAB + "  migManager: {}\n")
    assert cli.run(["validate", "-f", spec]) == errors.EXIT_OK
    out = capsys.readouterr().out.splitlines()
    line = len(LAB.splitlines()) + 1
    assert out == [
        f"Warning: migManager: {spec}:{line}:3: migManager: {{}} now means gpuplan runs the mig-manager, as "
        "{} does for every component (it meant off before): the next apply creates it",
        "  Hint: to keep it off, set migManager: {owner: none}",
        "The configuration is valid. (1 warning)",
    ]
    mig = LAB + "  mig: {strategy: mixed, config: all-1g.10gb}\n  migManager: {}\n"
    assert cli.run(["validate", "-f", write(tmp_path, mig)]) == errors.EXIT_OK
    assert "now means gpuplan runs" not in capsys.readouterr().out
    owned = LAB + "  migManager: {owner: gpuplan}\n"
    assert cli.run(["validate", "-f", write(tmp_path, owned)]) == errors.EXIT_OK
    assert "now means gpuplan runs" not in capsys.readouterr().out
