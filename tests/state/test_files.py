"""The one atomic file writer: 0600 whatever the umask, the old file whole and no temporary file left when a
step fails or the write is interrupted, and the folder fsynced after the rename."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from gpuplan.state import files


def test_a_new_file_is_private_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    target = tmp_path / "state.json"
    files.write_atomically(target, b"{}\n")
    assert target.read_bytes() == b"{}\n"
    assert oct(target.stat().st_mode & 0o777) == "0o600"
    assert os.listdir(tmp_path) == ["state.json"]


def test_a_replaced_file_takes_the_new_mode_and_content(tmp_path: Path) -> None:
    target = tmp_path / "out.prom"
    target.write_text("old\n")
    target.chmod(0o600)
    files.write_atomically(target, b"new\n", mode=0o644)
    assert target.read_text() == "new\n" and oct(target.stat().st_mode & 0o777) == "0o644"
    assert os.listdir(tmp_path) == ["out.prom"]


@pytest.mark.parametrize("step", ["fsync", "chmod", "replace"])
def test_a_failed_step_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    target = tmp_path / "plan.json"
    target.write_text("old\n")

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, step, refuse)
    with pytest.raises(OSError) as raised:
        files.write_atomically(target, b"new\n", mode=0o644)
    assert raised.value.errno == errno.ENOSPC
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["plan.json"]


def test_an_interrupted_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "state.json"
    target.write_text("old\n")

    def interrupt(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupt)
    with pytest.raises(KeyboardInterrupt):
        files.write_atomically(target, b"new\n")
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["state.json"]


def test_a_missing_folder_is_the_os_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        files.write_atomically(tmp_path / "absent" / "plan.json", b"{}")
    assert os.listdir(tmp_path) == []


def test_the_folder_is_fsynced_after_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state.json"
    synced: list[tuple[str, bool]] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), target.exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    files.write_atomically(target, b"{}")
    assert synced[-1] == (str(tmp_path), True)
    assert len(synced) == 2


def test_a_temporary_name_tells_its_writer() -> None:
    temp = files.temp_path(Path("/x/gpuplan.state.json"))
    assert temp.parent == Path("/x") and temp.name.startswith(".gpuplan.state.json.tmp.")
    assert files.temp_pid(temp.name, "gpuplan.state.json") == os.getpid()
    assert files.temp_pid(temp.name, "gpuplan.state.json.backup") is None
    assert files.temp_pid("gpuplan.state.json", "gpuplan.state.json") is None
