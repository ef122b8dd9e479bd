"""The local file backend: atomic replacement, the backup, file modes, default paths (design §3.2)."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuplan.errors import StateError
from gpuplan.state import files
from gpuplan.state.local import LocalFileBackend, default_state_path, resolve_state_path
from gpuplan.state.model import StateFile, to_json


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _written(backend: LocalFileBackend, make_record, count: int) -> list[StateFile]:
    states, state = [], StateFile.new()
    for n in range(count):
        state = state.with_record(make_record(f"ds-{n}")).next_serial()
        backend.write(state)
        states.append(state)
    return states


def test_default_path_is_beside_the_spec_or_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert default_state_path(tmp_path / "lab" / "gpustack.yaml") == tmp_path / "lab" / "gpuplan.state.json"
    monkeypatch.chdir(tmp_path)
    assert default_state_path(None) == tmp_path / "gpuplan.state.json"
    assert resolve_state_path(tmp_path / "x.json", tmp_path / "lab" / "gpustack.yaml") == tmp_path / "x.json"


def test_each_write_replaces_the_file_and_keeps_the_previous_one_as_backup(
    tmp_path: Path, make_record
) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    first = _written(backend, make_record, 1)[0]
    inode = backend.path.stat().st_ino
    assert not backend.backup_path.exists()
    second = first.with_record(make_record("gfd")).next_serial()
    backend.write(second)
    assert backend.path.stat().st_ino != inode  # a new file renamed into place, not rewritten in place
    assert backend.backup_path.read_text() == to_json(first)
    third = second.without(make_record("gfd").address).next_serial()
    backend.write(third)
    assert backend.read() == third and backend.read_backup() == second
    assert backend.path.read_text() == to_json(third)


def test_state_backup_and_lock_files_are_0600_whatever_the_umask(
    tmp_path: Path, make_record, open_umask: None
) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    _written(backend, make_record, 2)
    with backend.locked("apply"):
        assert _mode(backend.lock_path) == 0o600
    assert _mode(backend.path) == 0o600
    assert _mode(backend.backup_path) == 0o600


def test_a_wider_existing_state_file_is_narrowed_by_the_next_write(
    tmp_path: Path, make_record, open_umask: None
) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    state = _written(backend, make_record, 1)[0]
    backend.path.chmod(0o644)
    backend.write(state.with_record(make_record("gfd")).next_serial())
    assert _mode(backend.path) == 0o600 and _mode(backend.backup_path) == 0o600


def test_a_failed_write_leaves_the_old_state_and_no_temporary_file(
    tmp_path: Path, make_record, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    state = _written(backend, make_record, 1)[0]
    before = backend.path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", disk_full)
    with pytest.raises(StateError, match="No space left on device") as caught:
        backend.write(state.with_record(make_record("gfd")).next_serial())
    assert "still the last good one" in caught.value.detail
    monkeypatch.undo()
    assert backend.path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpuplan.state.json"]


def test_temporary_files_of_killed_writers_are_removed_by_the_next_write(tmp_path: Path, make_record) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    state = _written(backend, make_record, 1)[0]
    dead_pid = _a_dead_pid()
    orphans = [
        tmp_path / f".gpuplan.state.json.tmp.{dead_pid}.0a1b2c3d",
        tmp_path / f".gpuplan.state.json.backup.tmp.{dead_pid}.0a1b2c3e",
    ]
    live = tmp_path / f".gpuplan.state.json.tmp.{os.getpid()}.0a1b2c3f"  # a writer still running
    for path in [*orphans, live]:
        path.write_text("{partial")
    backend.write(state.with_record(make_record("gfd")).next_serial())
    assert not any(path.exists() for path in orphans)
    assert live.exists()


def test_the_state_folder_is_created_on_first_write(tmp_path: Path) -> None:
    backend = LocalFileBackend(tmp_path / "new" / "folder" / "gpuplan.state.json")
    backend.write(StateFile.new().next_serial())
    assert backend.read() is not None


def test_a_folder_at_the_state_path_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "gpuplan.state.json").mkdir()
    with pytest.raises(StateError, match="is a directory, not a regular file"):
        LocalFileBackend(tmp_path / "gpuplan.state.json").read()


def _a_dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait(timeout=30)
    return process.pid


@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.ENOSPC, "the disk is full"), (errno.EROFS, "read-only"), (errno.EACCES, "may not write")],
)
def test_a_failed_state_write_names_the_file_the_cause_and_that_nothing_was_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, words: str, make_record: Any
) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    first = StateFile.new().next_serial()
    backend.write(first)

    def refuse(target: Path, data: bytes, **_: object) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr("gpuplan.state.files.write_atomically", refuse)
    with pytest.raises(StateError) as caught:
        backend.write(first.with_record(make_record()).next_serial())
    error = caught.value
    assert error.where.endswith("gpuplan.state.json.backup") or error.where == str(backend.path)
    assert os.strerror(code) in error.summary and words in error.hint
    assert "still the last good one" in error.detail
    monkeypatch.undo()
    assert backend.read() == first


def test_a_state_folder_that_cannot_be_made_is_one_error_with_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = LocalFileBackend(tmp_path / "missing" / "gpuplan.state.json")

    def refuse(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(StateError, match="cannot create the state's folder: Permission denied") as caught:
        backend.write(StateFile.new().next_serial())
    assert "--state PATH" in caught.value.hint


def test_a_state_open_to_other_users_is_said_once_and_made_0600_by_the_next_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_record: Any
) -> None:
    backend = LocalFileBackend(tmp_path / "gpuplan.state.json")
    first = StateFile.new().next_serial()
    backend.write(first)
    os.chmod(backend.path, 0o666)
    assert backend.read() == first and backend.read() == first
    err = capsys.readouterr().err
    assert err.count("Note:") == 1 and "has mode 0666, open to other users" in err
    backend.write(first.with_record(make_record()).next_serial())
    assert stat.S_IMODE(backend.path.stat().st_mode) == 0o600
