"""A call run on a daemon thread, its result or its exception handed to whoever asks for it.

The refresh reads the fleet's two big lists this way beside its small ones. Not a thread pool: the
interpreter joins a pool's threads at exit, so a Ctrl-C while a list waits on a slow API server would hold the
process until the request timed out; a daemon thread is left behind, and :meth:`Background.result` waits on an
event, which a signal interrupts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """``call()`` started on a daemon thread named ``name``."""

    def __init__(self, call: Callable[[], T], *, name: str) -> None:
        self._done = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(call,), name=name, daemon=True).start()

    def _run(self, call: Callable[[], T]) -> None:
        try:
            self._result = call()
        except BaseException as exc:  # handed to result(), raised in the caller's thread
            self._error = exc
        finally:
            self._done.set()

    def wait(self) -> None:
        """Until the call has returned or raised (interruptible by Ctrl-C)."""
        self._done.wait()

    def result(self) -> T:
        """What the call returned, once it has; what it raised is raised here."""
        self.wait()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]  # set when no error was
