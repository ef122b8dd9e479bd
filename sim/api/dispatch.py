"""Subscriber dispatch: one thread calling the store's subscribers in write order, outside the store lock.

The store puts every committed ``Event`` here that some subscriber wants (a subscriber may name the
resources it wants, and decline the events of read-only writes, whose writers apply the answer themselves:
the simulator's loop; an event none of them wants is neither queued nor copied); the thread, started by the
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Subscriber:
    """A callback and the events it wants: of ``resources`` (None: all), and of read-only writes or not."""

    callback: Callback
    resources: Resources = None
    read_only_writes: bool = True  # False: the writer applied the answer itself (the loop's write-through)

    def wants(self, storage_key: StorageKey, read_only: bool) -> bool:
        return (self.resources is None or storage_key in self.resources) and (
            self.read_only_writes or not read_only
        )


# Events between two moves of the surviving objects out of the cyclic collector's sight (``_tidy``): often
# enough that most survivors are frozen before a collection of the second generation walks them again
# (fleet-1000's collector time: 0.56 s every 1,000 events, 0.26 s every 100, 0.24 s every 25).
FREEZE_EVERY = 100
YOUNG_GENERATIONS = 0  # gc.collect(0): the youngest generation only, where recent garbage cycles are


class Dispatcher:
    """Delivers events to ``subscribers`` from its own thread, in the order ``put`` received them."""

    def __init__(self, pool: sharing.Pool | None = None, *, freeze_every: int = FREEZE_EVERY) -> None:
        self._pool = pool or sharing.Pool()
        self._freeze_every = freeze_every
        self._since_freeze = 0
        # Replaced as a whole (never mutated) under the store lock, so the thread can iterate it unlocked.
        self.subscribers: list[Subscriber] = []
        self._wanted: Resources = frozenset()  # what any subscriber wants of other writes
        self._wanted_read_only: Resources = frozenset()  # and of read-only writes
        # (an event, its copy), (None, None): collect and freeze now (_passed), None: stop
        self._queue: queue.Queue[tuple[Event | None, Obj | None] | None] = queue.Queue()
        self._passed = 0  # writes no subscriber wanted since the last collection they asked for
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

    def set_subscribers(self, subscribers: list[Subscriber]) -> None:
        """Replace the subscribers (under the store lock)."""
        self.subscribers = subscribers
        self._wanted = _union(sub.resources for sub in subscribers)
        self._wanted_read_only = _union(sub.resources for sub in subscribers if sub.read_only_writes)

    def wants(self, storage_key: StorageKey, read_only: bool = False) -> bool:
        """Whether a subscriber wants the event of a write to that resource (the store puts only those)."""
        wanted = self._wanted_read_only if read_only else self._wanted
        return wanted is None or storage_key in wanted

    def caught_up(self) -> bool:
        """Whether every event queued so far was delivered (without waiting)."""
        with self._cond:
            return self._delivered >= self._queued

    def put(self, event: Event, copy: Obj | None = None) -> None:
        """Queue ``event``; ``copy``: the subscribers' copy of its object, when the writer already made it
        (a read-only answer)."""
        with self._cond:
            self._queued += 1
        self._queue.put((event, copy))

    def passed(self) -> None:
        """A write no subscriber wants (under the store lock): none is queued, but writes are what fill the
        collector's generations, so every ``freeze_every`` of them still ask the thread for a collection."""
        self._passed += 1
        if self._passed >= self._freeze_every and self._thread is not None:
            self._passed = 0
            with self._cond:
                self._queued += 1
            self._queue.put((None, None))

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            event, made = item
            if event is None:
                self._tidy(now=True)
                self._count_delivered()
                continue
            old = None if event.old is None else self._shared_copy(event.rt, event.old, reuse=True)
            previous = None if old is None or event.old is None else (event.old, old)
            copy = self._shared_copy(
                event.rt, event.object, reuse=False, event_type=event.type, made=made, previous=previous
            )
            shared = Event(event.type, event.rt, copy, old)
            storage_key, read_only = event.rt.storage_key, made is not None
            for subscriber in list(self.subscribers):
                if not subscriber.wants(storage_key, read_only):
                    continue
                try:
                    subscriber.callback(shared)
                except Exception:  # a failing subscriber must not starve the others
                    log.exception(
                        "store subscriber %r failed on %s %s", subscriber.callback, event.type, event.rt.kind
                    )
            self._tidy()
            self._count_delivered()

    def _count_delivered(self) -> None:
        with self._cond:
            self._delivered += 1
            self._cond.notify_all()

    def _tidy(self, *, now: bool = False) -> None:
        """Every ``freeze_every`` events (``now``: the writes no subscriber wanted asked for it): collect
        cyclic garbage, then freeze what survived (``gc.freeze``).

        The store holds millions of small dicts and lists (a fleet's objects, their versions in the event
        log, the subscribers' copies), and every write makes new ones that outlive the young generations.
        CPython runs a full collection whenever the survivors since the last one reach a quarter of the old
        generation, and a full collection walks every tracked object: with writes proportional to the
        objects, that made the collector's share grow with the square of the fleet (half the CPU of a
        6,000-pod rollout). Frozen objects are never walked again, and are still freed when their last
        reference goes (JSON has no cycles). Collecting the youngest generation first keeps the recent garbage
        cycles out of the frozen set; the older two are not: they hold only what survived the young
        collections since the last freeze, and a full collection walked all of it to find no garbage (5
        objects in a fleet-1000 rollout's 76 of them, 6 % of its CPU). ``stop`` unfreezes, so a stopped
        store's cycles can be collected."""
        self._since_freeze += 1
        if now or self._since_freeze >= self._freeze_every:
            self._since_freeze = 0
            gc.collect(YOUNG_GENERATIONS)
            gc.freeze()

    def _shared_copy(
        self,
        rt: ResourceType,
        stored: Obj,
        *,
        reuse: bool,
        event_type: str = "",
        made: Obj | None = None,
        previous: tuple[Obj, Obj] | None = None,
    ) -> Obj:
        """The subscribers' copy of a stored object: the one an earlier event handed out when ``reuse`` (an
        ``old`` is the previous change's object), else a new one (``previous``: made from the copy of the
        object it replaced, ``sharing.subscriber_copy``), remembered for the object's next change."""
        if reuse:
            found = self._copies.pop(id(stored), None)
            # The id is that object's only while it is held here; the version check covers a CRD's versions.
            if found is not None and found[0] is stored and found[1].get("apiVersion") == rt.api_version:
                return found[1]
            return sharing.subscriber_copy(rt, stored, self._pool)
        copy = made if made is not None else sharing.subscriber_copy(rt, stored, self._pool, previous)
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


def _union(wanted: Iterable[Resources]) -> Resources:
    """The resources any of them wants (None: every resource)."""
    found: set[StorageKey] = set()
    for resources in wanted:
        if resources is None:
            return None
        found |= resources
    return frozenset(found)
