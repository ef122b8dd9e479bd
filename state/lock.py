"""The state lock: one run at a time, a holder that names itself, and no lock outliving a dead process.

Callers: :class:`gpuplan.state.local.LocalFileBackend` (``lock``/``unlock``/``force_unlock``), which the plan
and apply engines hold for a whole run, ``gpuplan state rm|push`` and ``gpuplan force-unlock``.

How it works, beside the state file ``S``:

- ``S.lock`` (mode 0600) is locked with ``flock(LOCK_EX | LOCK_NB)``. The kernel drops an flock when the last
  descriptor of its holder closes, so a crashed or ``kill -9``-ed run never blocks the next one.
- The file holds a JSON record naming the holder (:class:`LockInfo`: id, pid, host, user, operation, created,
  version), which a second run reports in its :class:`StateLockedError` ("state is locked by pid 123 on host
  h (operation apply, since ..., lock ID ...)").
- A record found under a free flock was left by a holder that died: the lock is taken over and the broken
  record is returned in ``LockInfo.broken``, and the user is told on stderr in one ``Note:`` line
  (:func:`broken_lock_note`), whatever the command: every command that locks goes through here, and stdout
  (``--json``) stays clean. A logging record would reach the user as ``WARNING gpuplan.state.lock: ...`` in
  the CLI's log format, or not at all. A record naming a dead pid on this host is
  stale too, even while some inherited descriptor keeps the flock (a forked child of the dead holder): the
  file is unlinked and a fresh one locked, so the orphaned flock guards nothing.
- Unlock removes the record's file, then closes the descriptor. ``force_unlock(id)`` unlinks the file of any
  holder, but only when the id matches. Every take-over first checks that the file it locked is still the one
  at the path (same inode), so a race with an unlink retries instead of locking a ghost.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import uuid
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuplan.errors import StateError, StateLockedError
from gpuplan.state import files
from gpuplan.state.model import current_user, gpuplan_version, now_rfc3339

FORCE_UNLOCK_HINT = "gpuplan force-unlock {id} if you are sure no other run is using it"
_ATTEMPTS = 5  # take-overs race with other runs' unlinks only briefly; a few retries settle it


class LockInfo(BaseModel):
    """Who holds the lock; persisted in the lock file as JSON."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    pid: int
    host: str
    user: str
    operation: str
    created: str
    version: str
    broken: LockInfo | None = Field(
        default=None, exclude=True, description="The dead holder's record this lock replaced, if any."
    )

    @classmethod
    def for_this_process(cls, operation: str) -> LockInfo:
        return cls(
            id=str(uuid.uuid4()),
            pid=os.getpid(),
            host=socket.gethostname(),
            user=current_user(),
            operation=operation,
            created=now_rfc3339(),
            version=gpuplan_version(),
        )

    def describe(self) -> str:
        return (
            f"pid {self.pid} on host {self.host} (operation {self.operation}, since {self.created}, "
            f"lock ID {self.id})"
        )

    def is_dead_here(self) -> bool:
        """True when the holder ran on this host and its process no longer exists."""
        return self.host == socket.gethostname() and not pid_alive(self.pid)


def locked_error(holder: LockInfo | None, lock_path: Path | str) -> StateLockedError:
    if holder is None:
        return StateLockedError(
            "state is locked by another run (its lock record is unreadable)",
            where=str(lock_path),
            hint=f"remove {lock_path} if you are sure no other run is using the state",
        )
    return StateLockedError(
        f"state is locked by {holder.describe()}",
        where=str(lock_path),
        detail=f"user {holder.user}, gpuplan {holder.version}",
        hint=FORCE_UNLOCK_HINT.format(id=holder.id),
    )


def broken_lock_note(broken: LockInfo) -> str:
    """``Note: broke the state lock held by pid 1234 on host h (operation apply, since ..., lock ID ...):
    ...``."""
    why = (
        "the process is gone"
        if broken.is_dead_here()
        else "its run ended without releasing it (no process holds the lock file any more)"
    )
    return f"Note: broke the state lock held by {broken.describe()}: {why}."


def tell_user(line: str) -> None:
    """A line for the person running gpuplan, on stderr, looked up at call time (so the CLI's and the tests'
    captures see it), never on stdout, which may be JSON lines."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


class FileLock:
    """The lock of one state file, held through an open descriptor per lock ID."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._held: dict[str, int] = {}  # lock ID -> descriptor carrying the flock

    def acquire(self, operation: str) -> LockInfo:
        """Take the lock, or raise StateLockedError naming the live holder."""
        files.ensure_folder(self.path.parent)
        broken: LockInfo | None = None
        for _ in range(_ATTEMPTS):
            fd = self._open()
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_record(fd)
                if holder is not None and holder.is_dead_here():
                    # Its flock lives on in an inherited descriptor; the holder itself is gone.
                    self._unlink_if_same(fd)
                    os.close(fd)
                    broken = holder
                    continue
                os.close(fd)
                raise locked_error(holder, self.path) from None
            if not self._is_current(fd):  # unlinked between our open and flock: lock the new file instead
                os.close(fd)
                continue
            # A record under a free flock: its holder died without unlocking.
            return self._take(fd, operation, broken or _read_record(fd))
        raise StateLockedError(
            "could not take the state lock: other runs keep replacing the lock file",
            where=str(self.path),
            hint="retry when the other run has finished",
        )

    def _take(self, fd: int, operation: str, broken: LockInfo | None) -> LockInfo:
        info = LockInfo.for_this_process(operation).model_copy(update={"broken": broken})
        os.fchmod(fd, 0o600)
        os.ftruncate(fd, 0)
        os.pwrite(fd, (info.model_dump_json(indent=2) + "\n").encode("utf-8"), 0)
        os.fsync(fd)
        self._held[info.id] = fd
        if broken is not None:
            tell_user(broken_lock_note(broken))
        return info

    def release(self, lock_id: str) -> None:
        """Remove the record and drop the flock of a lock this object took."""
        fd = self._held.pop(lock_id, None)
        if fd is None:
            raise StateError(
                f"lock ID {lock_id} is not held by this run",
                where=str(self.path),
                detail=self._holder_detail(),
            )
        try:
            if not self._unlink_if_same(fd):
                tell_user(
                    f"Warning: the state lock of this run (lock ID {lock_id}) was removed by "
                    "`gpuplan force-unlock` while the run held it; another run may have used the state since."
                )
        finally:
            os.close(fd)

    def force_release(self, lock_id: str) -> LockInfo:
        """Remove the lock whose ID is ``lock_id``, whoever holds it; return its record."""
        if lock_id in self._held:
            holder = self.holder()
            self.release(lock_id)
            if holder is None:
                raise StateError(f"lock {lock_id} had no record", where=str(self.path))
            return holder
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            raise StateError(
                "the state is not locked",
                where=str(self.path),
                detail=f"no lock file, so nothing to unlock for lock ID {lock_id}",
            ) from None
        try:
            holder = _read_record(fd)
            if holder is None or holder.id != lock_id:
                real = (
                    f"the lock ID is {holder.id} ({holder.describe()})"
                    if holder
                    else "it has no readable record"
                )
                raise StateError(
                    f"lock ID {lock_id} does not match the lock on the state",
                    where=str(self.path),
                    detail=real,
                    hint="pass the lock ID that the error of the blocked run named",
                )
            # The holder (if alive) keeps an flock on the unlinked file; new runs lock a fresh one.
            self._unlink_if_same(fd)
            return holder
        finally:
            os.close(fd)

    def holder(self) -> LockInfo | None:
        """The record of the lock file, if there is one (whether or not its holder lives)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return _read_record(fd)
        finally:
            os.close(fd)

    def held_by_a_live_process(self) -> bool:
        """True while some process keeps the flock (for force-unlock's warning)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def close(self) -> None:
        """Release every lock still held (a backend going away must not keep the state locked)."""
        for lock_id in list(self._held):
            self.release(lock_id)

    def _holder_detail(self) -> str:
        holder = self.holder()
        return f"the lock is held by {holder.describe()}" if holder else "the state is not locked"

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StateError(
                f"cannot open the lock file: {exc.strerror}",
                where=str(self.path),
                hint="the state's folder must be writable to lock it: fix its permissions, or pass --state "
                "PATH in a folder you can write",
            ) from None

    def _is_current(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def _unlink_if_same(self, fd: int) -> bool:
        """Unlink the lock file if it is still the one ``fd`` has open; False if another replaced it."""
        if not self._is_current(fd):
            return False
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        return True


def _read_record(fd: int) -> LockInfo | None:
    size = os.fstat(fd).st_size
    if not size:
        return None
    try:
        return LockInfo.model_validate(json.loads(os.pread(fd, size, 0)))
    except (ValueError, ValidationError):  # half-written by a holder just starting, or damaged
        return None
