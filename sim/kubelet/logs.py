"""What every simulated container wrote to stdout and stderr, kept as a kubelet's container runtime keeps it.

A kubelet keeps the log of a container's current run and of the run before it (``kubectl logs --previous``),
and forgets both when the pod is removed from the node. Lines are stored with the time they were written, as
the CRI log format stores them, so ``timestamps``, ``sinceSeconds`` and ``tailLines`` can be answered.

Written on the loop's thread (the runtime, its rules' output, the processes a pod really runs) and read by the
API server's threads (``pods/log``, also with ``follow``), so every method takes the one lock, and a reader
that follows waits on its condition instead of polling.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

MAX_LINES_PER_RUN = (
    10_000  # the kubelet rotates logs by size (containerLogMaxSize); a bound keeps memory flat
)
GONE_POLL_SECONDS = 0.5


Head = Callable[
    [datetime], str
]  # renders a line's time-dependent start (a klog or logrus header) from its time


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line: its time, and its text without the newline (``head(time)`` + ``body``).

    The head is rendered when the line is read, so the stored body is the same string object for every pod
    that printed the same words (bodies are interned): a fleet's logs cost a few references per line.
    """

    time: datetime
    body: str
    head: Head | None = None

    @property
    def text(self) -> str:
        return self.head(self.time) + self.body if self.head is not None else self.body


@dataclass(eq=False)
class _Run:
    lines: list[LogLine] = field(default_factory=list)
    finished: bool = False  # the container's run ended: a follower stops after the last line
    dropped: int = 0  # lines rotated away from the front (indexes of followers count them)


@dataclass(frozen=True)
class Cursor:
    """Where a reader of a run stopped: the run and how many of its lines were written before."""

    run: _Run
    written: int


@dataclass
class _Container:
    current: _Run = field(default_factory=_Run)
    previous: _Run | None = None


class ContainerLogs:
    """Logs by pod uid and container name: the current run and the previous one."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._pods: dict[str, dict[str, _Container]] = {}

    def write(self, uid: str, container: str, text: str, *, now: datetime | None = None) -> None:
        """Append ``text`` (one or more lines) to the container's current run."""
        self.write_lines(uid, container, [(None, line) for line in text.splitlines()], now=now)

    def write_lines(
        self,
        uid: str,
        container: str,
        lines: Iterable[tuple[Head | None, str]],
        *,
        now: datetime | None = None,
    ) -> None:
        """Append lines given as (head, body) to the container's current run."""
        when = now or datetime.now(UTC)
        with self._lock:
            run = self._pods.setdefault(uid, {}).setdefault(container, _Container()).current
            run.lines.extend(LogLine(when, sys.intern(body), head) for head, body in lines)
            excess = len(run.lines) - MAX_LINES_PER_RUN
            if excess > 0:
                del run.lines[:excess]
                run.dropped += excess
            self._lock.notify_all()

    def finish(self, uid: str, container: str) -> None:
        """The container's run ended (it exited or was killed): followers of it stop."""
        with self._lock:
            entry = self._pods.get(uid, {}).get(container)
            if entry is not None:
                entry.current.finished = True
                self._lock.notify_all()

    def restart(self, uid: str, container: str) -> None:
        """A new run of the container begins: the current one becomes the previous one."""
        with self._lock:
            entry = self._pods.setdefault(uid, {}).setdefault(container, _Container())
            entry.current.finished = True
            entry.previous, entry.current = entry.current, _Run()
            self._lock.notify_all()

    def forget(self, uid: str) -> None:
        """The pod left its node: its logs go with it."""
        with self._lock:
            for entry in self._pods.pop(uid, {}).values():
                entry.current.finished = True
            self._lock.notify_all()

    def finished(self, uid: str, container: str) -> bool:
        """The current run ended (its container exited and was not started again yet)."""
        with self._lock:
            run = self._run(uid, container, False)
            return run is not None and run.finished

    def has(self, uid: str, container: str, *, previous: bool = False) -> bool:
        with self._lock:
            entry = self._pods.get(uid, {}).get(container)
            return entry is not None and (not previous or entry.previous is not None)

    def read(self, uid: str, container: str, *, previous: bool = False) -> list[LogLine]:
        """The lines of the current (or previous) run, oldest first; empty when there are none."""
        with self._lock:
            run = self._run(uid, container, previous)
            return list(run.lines) if run is not None else []

    def read_current(self, uid: str, container: str) -> tuple[list[LogLine], Cursor | None]:
        """The current run's lines and a cursor after them, for ``follow`` to go on from exactly there."""
        with self._lock:
            run = self._run(uid, container, False)
            if run is None:
                return [], None
            return list(run.lines), Cursor(run, run.dropped + len(run.lines))

    def follow(
        self,
        uid: str,
        container: str,
        *,
        start: int = 0,
        cursor: Cursor | None = None,
        stop: threading.Event | None = None,
        gone: Callable[[], bool] | None = None,
    ) -> Iterator[LogLine]:
        """The current run's lines from index ``start`` on (or the ``cursor``'s run after it), then every
        new one as it is written.

        Ends when the run finishes (also by a restart), the pod is forgotten, ``stop`` is set (the caller
        sets it and calls ``wake``), or ``gone()`` turns true: a reader that cannot be woken (an API client
        that left) is asked every ``GONE_POLL_SECONDS``. Lines rotated away before they were read are lost,
        as with the kubelet's rotated files.
        """
        with self._lock:
            run = cursor.run if cursor is not None else self._run(uid, container, False)
            if run is None:
                return
            index = cursor.written if cursor is not None else run.dropped + start
        while True:
            with self._lock:
                while index - run.dropped >= len(run.lines) and not run.finished:
                    if (stop is not None and stop.is_set()) or (gone is not None and gone()):
                        return
                    self._lock.wait(GONE_POLL_SECONDS if gone is not None else None)
                batch = run.lines[max(index - run.dropped, 0) :]
                index = run.dropped + len(run.lines)
            if not batch:
                return
            yield from batch

    def wake(self) -> None:
        """Wake every follower so it can see its ``stop`` event."""
        with self._lock:
            self._lock.notify_all()

    def _run(self, uid: str, container: str, previous: bool) -> _Run | None:
        entry = self._pods.get(uid, {}).get(container)
        if entry is None:
            return None
        return entry.previous if previous else entry.current
