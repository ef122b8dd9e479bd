"""Subscriber dispatch: one thread calling the store's subscribers in write order, outside the store lock.

The store puts every committed ``Event`` here (only while someone subscribes); the thread, started by the
first ``Store.subscribe``, gives all subscribers of one event one shared deep copy of it (read-only for them)
and logs, rather than propagates, a subscriber's exception so the others still get the event. ``flush`` waits
until every event queued so far, and every event those deliveries caused, is delivered.

Caller: ``sim.api.store`` (``subscribe``, ``flush``, ``close``); the subscribers are the simulator's
controller loop and kubelets, and tests.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from gpuplan.sim.api.objects import as_version
from gpuplan.sim.api.watchlog import Event

log = logging.getLogger(__name__)


class Dispatcher:
    """Delivers events to ``subscribers`` from its own thread, in the order ``put`` received them."""

    def __init__(self) -> None:
        # Replaced as a whole (never mutated) under the store lock, so the thread can iterate it unlocked.
        self.subscribers: list[Callable[[Event], None]] = []
        self._queue: queue.Queue[Event | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._queued = 0
        self._delivered = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sim-store-dispatcher", daemon=True)
            self._thread.start()

    def put(self, event: Event) -> None:
        with self._cond:
            self._queued += 1
        self._queue.put(event)

    def _run(self) -> None:
        while (event := self._queue.get()) is not None:
            shared = Event(event.type, event.rt, as_version(event.rt, event.object),
                           None if event.old is None else as_version(event.rt, event.old))
            for callback in list(self.subscribers):
                try:
                    callback(shared)
                except Exception:  # a failing subscriber must not starve the others
                    log.exception("store subscriber %r failed on %s %s", callback, event.type, event.rt.kind)
            with self._cond:
                self._delivered += 1
                self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        if threading.current_thread() is self._thread:
            return False      # a subscriber waiting for its own delivery to finish would wait forever
        # Until idle, not just up to the events queued now: deliveries that write queue more events.
        with self._cond:
            return bool(self._cond.wait_for(lambda: self._delivered >= self._queued, timeout))

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=10)
            self._thread = None
