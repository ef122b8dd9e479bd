"""Subscriber dispatch: one thread calling the store's subscribers in write order, outside the store lock.

The store puts every committed ``Event`` here that some subscriber wants (a subscriber may name the
resources it wants; an event none of them wants is neither queued nor copied); the thread, started by the
first ``Store.subscribe``, gives all subscribers of one event one shared deep copy of it (read-only for them)
and logs, rather than propagates, a subscriber's exception so the others still get the event. An event's
``old`` is the stored object of the same key's previous event, so its copy is that event's ``object`` copy,
reused (one copy per event instead of two). ``flush`` waits until every event queued so far, and every event
those deliveries caused, is delivered.

Caller: ``sim.api.store`` (``subscribe``, ``flush``, ``close``); the subscribers are the simulator's
controller loop and kubelets, and tests.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable

from gpuplan.sim.api import sharing
from gpuplan.sim.api.objects import Obj, StorageKey
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.api.watchlog import Event

log = logging.getLogger(__name__)
# How many recent events' object copies are kept for reuse as the ``old`` of the object's next change.
SHARED_COPIES = 16384
Callback = Callable[[Event], None]
Resources = frozenset[StorageKey] | None
"""The resources a subscriber wants (their storage keys); None: every resource."""
# Events between two moves of the surviving objects out of the cyclic collector's sight (``_tidy``).
FREEZE_EVERY = 1000


class Dispatcher:
    """Delivers events to ``subscribers`` from its own thread, in the order ``put`` received them."""

    def __init__(self, pool: sharing.Pool | None = None, *, freeze_every: int = FREEZE_EVERY) -> None:
        self._pool = pool or sharing.Pool()
        self._freeze_every = freeze_every
        self._since_freeze = 0
        # Replaced as a whole (never mutated) under the store lock, so the thread can iterate it unlocked.
        self.subscribers: list[tuple[Callback, Resources]] = []
        self._wanted: Resources = frozenset()
        self._queue: queue.Queue[tuple[Event, Obj | None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._queued = 0
        self._delivered = 0
        # id(stored object) -> (that object, the copy subscribers got of it); dispatcher thread only. A stored
        # object comes back as ``old`` of its next change, which then reuses the copy instead of making one.
        self._copies: OrderedDict[int, tuple[Obj, Obj]] = OrderedDict()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sim-store-dispatcher", daemon=True)
            self._thread.start()

    def set_subscribers(self, subscribers: list[tuple[Callback, Resources]]) -> None:
        """Replace the subscribers (under the store lock), each with the resources it wants."""
        wanted: set[StorageKey] = set()
        for _, resources in subscribers:
            if resources is None:
                self.subscribers, self._wanted = subscribers, None
                return
            wanted |= resources
        self.subscribers, self._wanted = subscribers, frozenset(wanted)

    def wants(self, storage_key: StorageKey) -> bool:
        """Whether a subscriber wants the events of that resource (the store puts only those)."""
        return self._wanted is None or storage_key in self._wanted

    def put(self, event: Event, copy: Obj | None = None) -> None:
        """Queue ``event``; ``copy``: the subscribers' copy of its object, when the writer already made it
        (a read-only answer)."""
        with self._cond:
            self._queued += 1
        self._queue.put((event, copy))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            event, made = item
            old = None if event.old is None else self._shared_copy(event.rt, event.old, reuse=True)
            shared = Event(
                event.type,
                event.rt,
                self._shared_copy(event.rt, event.object, reuse=False, event_type=event.type, made=made),
                old,
            )
            storage_key = event.rt.storage_key
            for callback, resources in list(self.subscribers):
                if resources is not None and storage_key not in resources:
                    continue
                try:
                    callback(shared)
                except Exception:  # a failing subscriber must not starve the others
                    log.exception("store subscriber %r failed on %s %s", callback, event.type, event.rt.kind)
            self._tidy()
            with self._cond:
                self._delivered += 1
                self._cond.notify_all()

    def _tidy(self) -> None:
        """Every ``freeze_every`` events: collect cyclic garbage, then freeze what survived (``gc.freeze``).

        The store holds millions of small dicts and lists (a fleet's objects, their versions in the event
        log, the subscribers' copies), and every write makes new ones that outlive the young generations.
        CPython runs a full collection whenever the survivors since the last one reach a quarter of the old
        generation, and a full collection walks every tracked object: with writes proportional to the
        objects, that made the collector's share grow with the square of the fleet (half the CPU of a
        6,000-pod rollout). Frozen objects are never walked again, and are still freed when their last
        reference goes (JSON has no cycles); collecting first keeps garbage cycles out of the frozen set.
        ``stop`` unfreezes, so a stopped store's cycles can be collected."""
        self._since_freeze += 1
        if self._since_freeze >= self._freeze_every:
            self._since_freeze = 0
            gc.collect()
            gc.freeze()

    def _shared_copy(
        self, rt: ResourceType, stored: Obj, *, reuse: bool, event_type: str = "", made: Obj | None = None
    ) -> Obj:
        """The subscribers' copy of a stored object: the one an earlier event handed out when ``reuse`` (an
        ``old`` is the previous change's object), else a new one, remembered for the object's next change."""
        if reuse:
            found = self._copies.pop(id(stored), None)
            # The id is that object's only while it is held here; the version check covers a CRD's versions.
            if found is not None and found[0] is stored and found[1].get("apiVersion") == rt.api_version:
                return found[1]
            return sharing.subscriber_copy(rt, stored, self._pool)
        copy = made if made is not None else sharing.subscriber_copy(rt, stored, self._pool)
        if event_type != "DELETED":  # a deleted object has no next change
            self._copies[id(stored)] = (stored, copy)
        while len(self._copies) > SHARED_COPIES:
            self._copies.popitem(last=False)
        return copy

    def flush(self, timeout: float) -> bool:
        if threading.current_thread() is self._thread:
            return False  # a subscriber waiting for its own delivery to finish would wait forever
        # Until idle, not just up to the events queued now: deliveries that write queue more events.
        with self._cond:
            return bool(self._cond.wait_for(lambda: self._delivered >= self._queued, timeout))

    def stop(self) -> None:
        gc.unfreeze()
        if self._thread is not None:
            self._queue.put(None)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=10)
            self._thread = None
