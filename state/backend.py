"""Where state lives: the :class:`StateBackend` contract, its write rules, and :class:`MemoryBackend`.

Callers: the plan/apply engines and the ``gpuplan state`` commands, through any backend;
:class:`gpuplan.state.local.LocalFileBackend` implements the contract on a file, :class:`MemoryBackend` in
memory for the tests of other layers (same rules, same errors).

The write rules (Terraform's ``statemgr``), shared by every backend in :func:`check_write`:

- nothing stored yet: any state is written;
- the same content as the stored state (serial and writer version aside): nothing is written, the serial
  stays (a no-op write is not a new generation);
- another lineage: refused, naming both lineages;
- changed content: the serial must be above the stored one, else refused ("state serial N is older than the
  stored serial M"); ``force=True`` (``gpuplan state push --force``) skips the lineage and serial checks.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

from gpuplan.errors import StateError, StateLockedError
from gpuplan.state.lock import LockInfo, locked_error
from gpuplan.state.model import StateFile, content_key

LOCK_POLL_SECONDS = 0.2
"""How often a run waiting for the state lock (--lock-timeout) tries again."""


@runtime_checkable
class StateBackend(Protocol):
    """Storage of one state. Readers get a consistent snapshot; writers hold the lock (by convention)."""

    def read(self) -> StateFile | None:
        """The stored state (migrated to the current format), or None when there is none yet."""

    def write(self, state: StateFile, *, force: bool = False) -> None:
        """Store ``state`` under the write rules above; raise StateError when they refuse it."""

    def lock(self, operation: str) -> LockInfo:
        """Take the lock for ``operation`` (plan, apply, state rm, ...) or raise StateLockedError."""

    def unlock(self, lock_id: str) -> None:
        """Release a lock this backend took."""

    def force_unlock(self, lock_id: str) -> LockInfo:
        """Remove the lock with this ID, whoever holds it; an ID that does not match is a StateError."""

    def locked(self, operation: str, timeout: float = 0.0) -> contextlib.AbstractContextManager[LockInfo]:
        """``with backend.locked("apply") as info:``: the lock for the block, released on every exit; a held
        lock waited for up to ``timeout`` seconds."""


class StateStore(StateBackend, Protocol):
    """A backend the commands open (file or cluster): it names itself and its lock, and closes."""

    @property
    def where(self) -> str:
        """How messages name the state: its path, or ``kubernetes://NAMESPACE/NAME``."""

    @property
    def lock_where(self) -> str:
        """How messages name the lock: the lock file, or the Lease."""

    def lock_holder(self) -> LockInfo | None:
        """The lock's holder record, if there is one (whether or not its holder lives)."""

    def lock_is_held(self) -> bool:
        """True while a live run holds the lock (force-unlock warns then)."""

    def close(self) -> None:
        """Release the locks still held and what the backend opened."""


_NEWER_DETAIL = "the stored state changed after this one was read from it, or this is an older copy."
_NEWER_HINT = (
    "start again from the stored state (`gpuplan state pull` prints it); "
    "`gpuplan state push --force FILE` replaces it deliberately"
)


def check_write(
    stored: StateFile | None,
    new: StateFile,
    *,
    force: bool = False,
    where: str = "",
    keys: tuple[str, str] | None = None,
) -> bool:
    """Apply the write rules: True when ``new`` must be written, False for a no-op; StateError if refused.
    ``keys``: the :func:`content_key` of ``stored`` and of ``new``, when the caller has them already."""
    if stored is None:
        return True
    stored_key, new_key = keys or (content_key(stored), content_key(new))
    if stored_key == new_key and stored.lineage == new.lineage:
        return False
    if force:
        return True
    if stored.lineage != new.lineage:
        raise StateError(
            f"cannot write a state of lineage {new.lineage} over the stored state of lineage "
            f"{stored.lineage}",
            where=where,
            detail="the two states belong to different histories (another spec or cluster).",
            hint="use the state file that belongs to this spec, or `gpuplan state push --force` "
            "to replace it deliberately",
        )
    if new.serial < stored.serial:
        raise StateError(
            f"state serial {new.serial} is older than the stored serial {stored.serial}",
            where=where,
            detail=_NEWER_DETAIL,
            hint=_NEWER_HINT,
        )
    if new.serial == stored.serial:
        raise StateError(
            f"state serial {new.serial} equals the stored serial but the content differs",
            where=where,
            detail="every changed state needs a higher serial; " + _NEWER_DETAIL,
            hint=_NEWER_HINT,
        )
    return True


class _Lockable(Protocol):
    def lock(self, operation: str) -> LockInfo: ...
    def unlock(self, lock_id: str) -> None: ...


@contextlib.contextmanager
def hold_lock(
    backend: _Lockable,
    operation: str,
    timeout: float = 0.0,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[LockInfo]:
    """The lock of ``backend`` for the ``with`` block, released on every exit path. A lock another run holds
    is waited for up to ``timeout`` seconds (``--lock-timeout``; 0, the default, refuses at once, as
    Terraform's ``-lock-timeout`` does), then refused naming its holder."""
    info = _take_lock(backend, operation, timeout, clock, sleep)
    try:
        yield info
    finally:
        backend.unlock(info.id)


def _take_lock(
    backend: _Lockable,
    operation: str,
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> LockInfo:
    deadline = clock() + max(0.0, timeout)
    while True:
        try:
            return backend.lock(operation)
        except StateLockedError as exc:
            remaining = deadline - clock()
            if remaining <= 0:
                if timeout > 0:
                    exc.detail = "\n".join(
                        filter(None, [exc.detail, f"waited {timeout:g}s for it (--lock-timeout)"])
                    )
                raise
            # nothing to wait on but the clock (another process's OS lock, a Lease in the cluster): poll it,
            # no sooner than the backend says the lock could be free
            sleep(min(max(LOCK_POLL_SECONDS, exc.retry_after or 0.0), remaining))


class MemoryBackend:
    """A backend in memory, with the same rules and errors as the file backend (for tests)."""

    def __init__(self, state: StateFile | None = None) -> None:
        self._state = state
        self._lock: LockInfo | None = None
        self._mutex = threading.Lock()
        self.writes = 0  # how many writes really stored something (no-op writes do not count)

    def read(self) -> StateFile | None:
        with self._mutex:
            return self._state

    def write(self, state: StateFile, *, force: bool = False) -> None:
        with self._mutex:
            if check_write(self._state, state, force=force, where="memory"):
                self._state = state
                self.writes += 1

    def lock(self, operation: str) -> LockInfo:
        with self._mutex:
            if self._lock is not None:
                raise locked_error(self._lock, "memory")
            self._lock = LockInfo.for_this_process(operation)
            return self._lock

    def unlock(self, lock_id: str) -> None:
        with self._mutex:
            if self._lock is None or self._lock.id != lock_id:
                raise StateError(f"lock ID {lock_id} is not held", where="memory")
            self._lock = None

    def force_unlock(self, lock_id: str) -> LockInfo:
        with self._mutex:
            if self._lock is None:
                raise StateError("the state is not locked", where="memory")
            if self._lock.id != lock_id:
                raise StateError(
                    f"lock ID {lock_id} does not match the lock on the state",
                    where="memory",
                    detail=f"the lock ID is {self._lock.id} ({self._lock.describe()})",
                )
            holder, self._lock = self._lock, None
            return holder

    def locked(self, operation: str, timeout: float = 0.0) -> contextlib.AbstractContextManager[LockInfo]:
        return hold_lock(self, operation, timeout)
