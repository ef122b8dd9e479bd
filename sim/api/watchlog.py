"""The store's event log and watches: what changed at each resourceVersion, and who is told.

- ``Event``: one committed change (``object`` after it, ``old`` before it), as subscribers and watches see
  it. Re-exported by ``sim.api.store``.
- ``Watch``: the stream of one watch request, filtered by namespace and selectors; a selector transition turns
  MODIFIED into ADDED/DELETED as the apiserver's watch cache does; the store pushes its BOOKMARKs (a
  watch-list's initial-events-end, and the timed ones of a watch that allows bookmarks).
- ``EventLog``: the bounded log (``size`` events) and the open watches per resource. Per resource it keeps
  the resourceVersion of its newest dropped event (its floor: older watch starts and list snapshots are 410
  Expired) and of its newest event (a snapshot at or after it is the current state). Per resource, like the
  apiserver's per-type watch cache, so pod churn does not expire node lists.

Not thread-safe by itself: ``sim.api.store`` calls the log under its lock; a ``Watch``'s queue has its own
condition, so consumers read it without the store lock.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuplan.sim.api import errors, selectors
from gpuplan.sim.api.objects import Key, Obj, StorageKey, as_version, key, meta
from gpuplan.sim.api.registry import ResourceType


@dataclass(frozen=True)
class Event:
    """One committed change. ``object`` is the state after it (for DELETED, the last state)."""

    type: str
    rt: ResourceType
    object: Obj
    old: Obj | None


class Watch:
    """A stream of {"type", "object"} for one resource, fed by the store under its lock."""

    def __init__(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
        on_close: Callable[[Watch], None],
    ) -> None:
        self.rt = rt
        self._namespace = namespace
        self._labels = labels
        self._fields = fields
        self._on_close = on_close
        self._queue: deque[tuple[str, Obj]] = deque()
        self._cond = threading.Condition()
        self.closed = False

    def matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self._namespace is not None and meta(obj).get("namespace") != self._namespace:
            return False
        return bool(self._labels.matches(obj) and self._fields.matches(obj))

    def _translate(self, event: Event) -> tuple[str, Obj] | None:
        """The event this watcher sees, after its filters (a selector transition is ADDED/DELETED)."""
        now, before = self.matches(event.object), self.matches(event.old)
        if event.type == "ADDED":
            return ("ADDED", event.object) if now else None
        if event.type == "DELETED":
            return ("DELETED", event.object) if before else None
        if now and before:
            return ("MODIFIED", event.object)
        if now:
            return ("ADDED", event.object)
        if before and event.old is not None:
            last = {
                **event.old,
                "metadata": {**meta(event.old), "resourceVersion": meta(event.object).get("resourceVersion")},
            }
            return ("DELETED", last)
        return None

    def offer(self, event: Event) -> None:
        seen = self._translate(event)
        if seen is not None:
            self.push(seen)

    def push(self, item: tuple[str, Obj]) -> None:
        with self._cond:
            self._queue.append(item)
            self._cond.notify_all()

    def next(self, timeout: float | None) -> dict[str, Any] | None:
        """The next event, or None after ``timeout`` seconds (or once closed and drained)."""
        with self._cond:
            if not self._queue and not self.closed:
                self._cond.wait_for(lambda: bool(self._queue) or self.closed, timeout)
            if not self._queue:
                return None
            kind, obj = self._queue.popleft()
        return {"type": kind, "object": as_version(self.rt, obj)}

    def close(self) -> None:
        self._on_close(self)
        with self._cond:
            self.closed = True
            self._cond.notify_all()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while True:
            item = self.next(None)
            if item is None:
                return
            yield item

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventLog:
    """The last ``size`` events in resourceVersion order, with each resource's floor, and the open watches."""

    def __init__(self, size: int) -> None:
        self._entries: deque[tuple[int, Event]] = deque()
        self._size = size
        self._floors: dict[StorageKey, int] = {}
        self._latest: dict[StorageKey, int] = {}
        self._watches: dict[StorageKey, set[Watch]] = {}

    def append(self, rv: int, event: Event) -> None:
        """Log a committed change, drop what falls out of the bound, and feed the resource's watches."""
        storage_key = event.rt.storage_key
        self._latest[storage_key] = rv
        self._entries.append((rv, event))
        while len(self._entries) > self._size:
            dropped_rv, dropped = self._entries.popleft()
            self._floors[dropped.rt.storage_key] = dropped_rv
        for watch in list(self._watches.get(storage_key, ())):
            watch.offer(event)

    def is_current(self, rt: ResourceType, rv: int) -> bool:
        """Whether nothing of ``rt`` changed after ``rv`` (the live objects are the state at ``rv``)."""
        return rv >= self._latest.get(rt.storage_key, 0)

    def changes_since(self, rt: ResourceType, rv: int, too_old: str) -> dict[Key, Obj | None]:
        """Per key changed after ``rv``: its state at ``rv`` (None: it did not exist). 410 ``too_old`` when
        the log no longer holds every change of ``rt`` since then."""
        if rv < self._floors.get(rt.storage_key, 0):
            raise errors.expired(too_old)
        before: dict[Key, Obj | None] = {}
        for event_rv, event in reversed(self._entries):
            if event_rv <= rv:
                break
            if event.rt.storage_key == rt.storage_key:
                # walking backwards, the earliest change after rv is seen last: it holds the state at rv
                before[key(event.object)] = None if event.type == "ADDED" else event.old
        return before

    def replay(self, rt: ResourceType, watch: Watch, resource_version: str) -> None:
        """Feed ``watch`` every logged change of ``rt`` after ``resource_version`` (410 when dropped)."""
        try:
            since = int(resource_version)
        except ValueError as exc:
            raise errors.bad_request(f'invalid resource version "{resource_version}"') from exc
        floor = self._floors.get(rt.storage_key, 0)
        if since < floor:
            raise errors.expired(f"too old resource version: {since} ({floor + 1})")
        for rv, event in self._entries:
            if rv > since and event.rt.storage_key == rt.storage_key:
                watch.offer(event)

    def add_watch(self, watch: Watch) -> None:
        self._watches.setdefault(watch.rt.storage_key, set()).add(watch)

    def remove_watch(self, watch: Watch) -> None:
        self._watches.get(watch.rt.storage_key, set()).discard(watch)

    def take_watches(self, storage_key: StorageKey) -> list[Watch]:
        """Forget (and return, for closing) the watches of a resource that is no longer served."""
        return list(self._watches.pop(storage_key, ()))

    def all_watches(self) -> list[Watch]:
        return [watch for group in self._watches.values() for watch in group]
