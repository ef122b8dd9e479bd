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
import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from gpuplan.errors import StateError
from gpuplan.fileio import STATE_LIMIT, read_bounded
from gpuplan.state import files
from gpuplan.state.backend import check_write, hold_lock
from gpuplan.state.document import parse_state
from gpuplan.state.lock import FileLock, LockInfo, pid_alive, tell_user
from gpuplan.state.model import StateFile, content_key, serialised

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


_WRITE_HINTS = {
    errno.ENOSPC: "the disk is full: free space and run the command again; nothing of the state was lost",
    errno.EDQUOT: "the disk quota is used up: free space and run the command again",
    errno.EROFS: "the file system is read-only: put the state on a writable one with --state PATH",
    errno.EACCES: "the user running gpuplan may not write in this folder: fix its permissions, or use "
    "--state PATH in a folder you own",
    errno.EPERM: "the user running gpuplan may not write in this folder: fix its permissions, or use "
    "--state PATH in a folder you own",
}
"""Hints for the OS errors a state write meets, by errno (the error line names the file)."""
LOOSE_MODE = 0o077
"""Permission bits a state file must not have: it is the stack's record, for its owner only."""


@dataclass(frozen=True)
class _Written:
    """The last state this backend wrote: its bytes, and the state and content key they came from."""

    data: bytes
    state: StateFile
    key: str


class LocalFileBackend:
    """The state in one JSON file, its backup beside it, and its lock file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.backup_path = self.path.with_name(self.path.name + BACKUP_SUFFIX)
        self.lock_path = self.path.with_name(self.path.name + LOCK_SUFFIX)
        self._lock = FileLock(self.lock_path)
        self._noted_mode = False
        self._written: _Written | None = None

    @property
    def where(self) -> str:
        return str(self.path)

    @property
    def lock_where(self) -> str:
        return f"the lock file {self.lock_path}"

    # -- reading ---------------------------------------------------------------------------------------
    def read(self) -> StateFile | None:
        data = self._read_bytes(self.path)
        if data is None:
            return None
        state = parse_state(data, source=str(self.path), hint=self._repair_hint())
        self._note_loose_mode()
        return state

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

    def _note_loose_mode(self) -> None:
        """A state readable or writable by others (made by hand, or copied with cp) is said once; the next
        write replaces it with a 0600 file."""
        mode = stat.S_IMODE(os.stat(self.path).st_mode)
        if mode & LOOSE_MODE and not self._noted_mode:
            self._noted_mode = True
            tell_user(
                f"Note: {self.path} has mode {mode:04o}, open to other users; gpuplan's next write of the "
                "state makes it 0600."
            )

    @staticmethod
    def _read_bytes(path: Path) -> bytes | None:
        if not os.path.lexists(path):
            return None
        return read_bounded(path, limit=STATE_LIMIT, what="state file", error=StateError)

    # -- writing ---------------------------------------------------------------------------------------
    def write(self, state: StateFile, *, force: bool = False) -> None:
        previous = self._read_bytes(self.path)
        stored, stored_key = self._stored_for_write(previous, force=force)
        text, key = serialised(state)
        keys = (stored_key or content_key(stored), key) if stored is not None else None
        if not check_write(stored, state, force=force, where=str(self.path), keys=keys):
            return
        files.ensure_folder(self.path.parent, hints=_WRITE_HINTS)
        self._remove_orphaned_temp_files()
        if previous is not None:
            self._replace_atomically(self.backup_path, previous)
        data = text.encode("utf-8")
        self._replace_atomically(self.path, data)
        self._written = _Written(data, state, key)

    def _stored_for_write(self, previous: bytes | None, *, force: bool) -> tuple[StateFile | None, str]:
        """The stored state and its content key (empty when not known yet). The file is read before every
        write, since another writer may have replaced it; when it still holds the bytes this backend wrote
        last, the state it wrote is the stored one, not parsed again."""
        if previous is None:
            return None, ""
        if self._written is not None and self._written.data == previous:
            return self._written.state, self._written.key
        try:
            return parse_state(previous, source=str(self.path), hint=self._repair_hint()), ""
        except StateError:
            if force:  # push --force replaces even a damaged state; its bytes still go to the backup
                return None, ""
            raise

    def _replace_atomically(self, target: Path, data: bytes) -> None:
        try:
            files.write_atomically(target, data)
        except OSError as exc:
            raise StateError(
                f"cannot write {target.name}: {exc.strerror or exc}",
                where=str(target),
                detail="the state on disk is still the last good one (writes go through a temporary file).",
                hint=_WRITE_HINTS.get(
                    exc.errno or 0, f"check the folder {target.parent} and the space left there"
                ),
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

    def locked(self, operation: str, timeout: float = 0.0) -> contextlib.AbstractContextManager[LockInfo]:
        manager: contextlib.AbstractContextManager[LockInfo] = hold_lock(self, operation, timeout)
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
