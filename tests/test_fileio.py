"""Files a user hands gpuplan are read safely: a FIFO, a device, a folder or an oversized file is one
``Error:`` line naming the file and exit code 1, at once, never a hang or an endless read, for every kind
of file gpuplan reads (spec, state, saved plan, scenario)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuplan import cli
from gpuplan.errors import GpuplanError
from gpuplan.fileio import MiB, read_bounded, read_text_bounded


def hostile(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"hostile-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    elif kind == "huge":
        with path.open("wb") as handle:
            handle.truncate(300 * MiB)  # sparse: no disk used, but larger than every cap
    return path


KINDS = ["fifo", "dev-zero", "folder", "huge"]
EXPECTED = {
    "fifo": "is a named pipe (FIFO), not a regular file",
    "dev-zero": "is a character device, not a regular file",
    "folder": "is a directory, not a regular file",
    "huge": "is larger than",
}


@pytest.mark.parametrize("kind", KINDS)
def test_the_reader_refuses_what_is_not_a_small_regular_file(tmp_path: Path, kind: str) -> None:
    path = hostile(tmp_path, kind)
    with pytest.raises(GpuplanError) as caught:
        read_bounded(path, limit=4 * MiB, what="spec")
    assert EXPECTED[kind] in caught.value.summary and caught.value.where == str(path)


def test_the_reader_reads_a_regular_file_and_names_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_bytes(b"kind: GPUStack\n")
    assert read_text_bounded(good, limit=MiB, what="spec") == "kind: GPUStack\n"
    bad = tmp_path / "bad"
    bad.write_bytes(b"ok\xff")
    with pytest.raises(GpuplanError, match=r"not UTF-8 text \(byte 2 is 0xff\)"):
        read_text_bounded(bad, limit=MiB, what="spec")
    with pytest.raises(GpuplanError, match="cannot read the spec: No such file"):
        read_bounded(tmp_path / "absent", limit=MiB, what="spec")


def commands(path: Path) -> dict[str, list[str]]:
    return {
        "spec": ["validate", "-f", str(path)],
        "state": ["state", "list", "--state", str(path)],
        "plan": ["show", str(path)],
        "pushed state": ["state", "push", str(path), "--state", str(path.with_name("target.json"))],
        "scenario": ["sim", "start", "--scenario", str(path), "--kubeconfig", str(path.with_name("kc"))],
    }


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["spec", "state", "plan", "pushed state", "scenario"])
def test_every_command_refuses_a_hostile_file_with_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, command: str
) -> None:
    path = hostile(tmp_path, kind)
    assert cli.run(commands(path)[command]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and str(path) in lines[0] and EXPECTED[kind] in lines[0], err
    assert "Traceback" not in err and "internal error" not in err


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)
)
"""Nine levels of nine aliases: a few hundred bytes that stand for 9^9 (387 million) values."""


@pytest.mark.parametrize("command", ["spec", "scenario"])
def test_a_yaml_alias_bomb_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    assert cli.run(commands(path)[command]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"Error: {path}:") and "expands to more than" in err, err


@pytest.mark.parametrize("command", ["spec", "scenario"])
def test_yaml_nested_too_deeply_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 50_000 + "]" * 50_000)
    assert cli.run(commands(path)[command]) == 1
    err = capsys.readouterr().err
    assert "nested too deeply" in err and "internal error" not in err, err
