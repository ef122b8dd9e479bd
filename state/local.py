"""The local state backend: ``gpuplan.state.json`` beside the spec, written atomically, with a backup.

Callers: every command that has ``-f SPEC`` / ``--state PATH`` (plan, apply, state, force-unlock, drift,
rollback) builds one with :func:`resolve_state_path`; the engines use it through the
:class:`gpuplan.state.backend.StateBackend` contract.

A write never leaves a partial file (Terraform truncates its state in place and loses it to a Ctrl-C,
hashicorp/terraform#34266; gpuplan does not):

1. the previous state's bytes are kept as ``<name>.backup``, written atomically with
   :func:`gpuplan.state.files.write_atomically` (a temporary file in the same folder, created 0600, fsynced,
   renamed into place, the folder fsynced);
2. the new JSON replaces the state file the same way.

At every moment of a ``kill -9`` the state path holds either the old or the new complete file, and the backup
a complete previous generation (or, killed between the two renames, a copy of the current one); a temporary
file left by a killed writer is removed by the next write once its pid is gone.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from gpuplan.errors import StateError
from gpuplan.fileio import STATE_LIMIT, read_bounded
from gpuplan.state import files
from gpuplan.state.backend import check_write, hold_lock
from gpuplan.state.document import parse_state
from gpuplan.state.lock import FileLock, LockInfo, pid_alive
from gpuplan.state.model import StateFile, to_json

STATE_FILE_NAME = "gpuplan.state.json"
BACKUP_SUFFIX = ".backup"
LOCK_SUFFIX = ".lock"


def default_state_path(spec_path: Path | None) -> Path:
    """``gpuplan.state.json`` in the spec's folder, or in the current folder when there is no spec."""
    folder = spec_path.parent if spec_path is not None else Path.cwd()
    return folder / STATE_FILE_NAME


def resolve_state_path(state_path: Path | None, spec_path: Path | None) -> Path:
    """``--state`` wins; otherwise the default beside ``-f SPEC`` (design §3.2)."""
    return state_path if state_path is not None else default_state_path(spec_path)


class LocalFileBackend:
    """The state in one JSON file, its backup beside it, and its lock file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + BACKUP_SUFFIX)
        self.lock_path = self.path.with_name(self.path.name + LOCK_SUFFIX)
        self._lock = FileLock(self.lock_path)

    # -- reading ---------------------------------------------------------------------------------------
    def read(self) -> StateFile | None:
        data = self._read_bytes(self.path)
        if data is None:
            return None
        return parse_state(data, source=str(self.path), hint=self._repair_hint())

    def read_backup(self) -> StateFile | None:
        data = self._read_bytes(self.backup_path)
        return None if data is None else parse_state(data, source=str(self.backup_path))

    def _repair_hint(self) -> str:
        if self.backup_path.exists():
            return (
                f"restore it from {self.backup_path.name} (the previous generation): "
                f"cp {self.backup_path} {self.path}"
            )
        return (
            "repair the file by hand, or replace it with a good copy through "
            "`gpuplan state push --force FILE`"
        )

    @staticmethod
    def _read_bytes(path: Path) -> bytes | None:
        if not os.path.lexists(path):
            return None
        return read_bounded(path, limit=STATE_LIMIT, what="state file", error=StateError)

    # -- writing ---------------------------------------------------------------------------------------
    def write(self, state: StateFile, *, force: bool = False) -> None:
        previous = self._read_bytes(self.path)
        stored = self._stored_for_write(previous, force=force)
        if not check_write(stored, state, force=force, where=str(self.path)):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_orphaned_temp_files()
        if previous is not None:
            self._replace_atomically(self.backup_path, previous)
        self._replace_atomically(self.path, to_json(state).encode("utf-8"))

    def _stored_for_write(self, previous: bytes | None, *, force: bool) -> StateFile | None:
        if previous is None:
            return None
        try:
            return parse_state(previous, source=str(self.path), hint=self._repair_hint())
        except StateError:
            if force:  # push --force replaces even a damaged state; its bytes still go to the backup
                return None
            raise

    def _replace_atomically(self, target: Path, data: bytes) -> None:
        try:
            files.write_atomically(target, data)
        except OSError as exc:
            raise StateError(
                f"cannot write {target.name}: {exc.strerror or exc}",
                where=str(target),
                detail="the previous file is unchanged (writes go through a temporary file).",
            ) from None

    def _remove_orphaned_temp_files(self) -> None:
        """Temporary files of writers that were killed before their rename (their pid is gone)."""
        for candidate in self.path.parent.iterdir():
            pid = files.temp_pid(candidate.name, self.path.name) or files.temp_pid(
                candidate.name, self.backup_path.name
            )
            if pid is not None and not pid_alive(pid):
                with contextlib.suppress(FileNotFoundError):
                    candidate.unlink()

    # -- locking ---------------------------------------------------------------------------------------
    def lock(self, operation: str) -> LockInfo:
        return self._lock.acquire(operation)

    def unlock(self, lock_id: str) -> None:
        self._lock.release(lock_id)

    def force_unlock(self, lock_id: str) -> LockInfo:
        return self._lock.force_release(lock_id)

    def locked(self, operation: str) -> contextlib.AbstractContextManager[LockInfo]:
        manager: contextlib.AbstractContextManager[LockInfo] = hold_lock(self, operation)
        return manager

    def lock_holder(self) -> LockInfo | None:
        return self._lock.holder()

    def lock_is_held(self) -> bool:
        """True while a live process keeps the OS lock on the lock file."""
        held: bool = self._lock.held_by_a_live_process()
        return held

    def close(self) -> None:
        """Release the locks this backend still holds."""
        self._lock.close()
