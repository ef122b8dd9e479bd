"""`-f/--file SPEC`, shared by the commands that read a spec: ./gpustack.yaml when it is not given, else one
usage error whose hint says what to do, before any cluster access."""

from __future__ import annotations

from pathlib import Path

import pytest
from lab_stack import LAB_HEADER as LAB

from gpuplan import cli, errors

NEEDS_A_SPEC = [
    ["validate"],
    ["graph"],
    ["plan"],
    ["apply", "--auto-approve"],
    ["import", "devicePlugin/DaemonSet/kube-system/nvidia-device-plugin", "DaemonSet/kube-system/x"],
    ["rollback", "--auto-approve"],
    ["drift", "report"],
]


@pytest.mark.parametrize("argv", NEEDS_A_SPEC, ids=lambda argv: " ".join(argv[:2]))
def test_without_a_spec_the_hint_says_to_pass_one_or_create_it(
    argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    unreachable = tmp_path / "no.kubeconfig"  # never read: the error comes first
    assert cli.run(["--kubeconfig", str(unreachable), *argv]) == errors.EXIT_USAGE
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert [line for line in lines if line.startswith("Error:")] == [
        "Error: no stack spec: -f was not given and there is no gpustack.yaml in the current directory"
    ]
    assert "  Hint: pass -f SPEC, or create gpustack.yaml here" in lines
    assert "Traceback" not in captured.err
    assert list(tmp_path.iterdir()) == []  # no state, lock or log written


@pytest.mark.parametrize(
    ("argv", "expected"),
    [(["validate"], "The configuration is valid."), (["graph"], "devicePlugin")],
)
def test_the_spec_in_the_working_directory_is_the_default(
    argv: list[str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "gpustack.yaml").write_text(LAB)
    monkeypatch.chdir(tmp_path)
    assert cli.run(argv) == errors.EXIT_OK
    assert expected in capsys.readouterr().out


def test_an_explicit_spec_wins_over_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "gpustack.yaml").write_text("not: [a, spec")
    other = tmp_path / "other.yaml"
    other.write_text(LAB)
    monkeypatch.chdir(tmp_path)
    assert cli.run(["validate", "-f", str(other)]) == errors.EXIT_OK
    assert capsys.readouterr().out == "The configuration is valid.\n"
