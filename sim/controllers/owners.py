"""The work queue the Job and CronJob controllers share: owners marked dirty by their own changes and their
children's, synced one by one at the next flush, and re-synced when the batch clock reads a given time.

A subclass names its kind and its children's kind (cache kinds: ``jobs`` and ``pods``, ``cronjobs`` and
``jobs``) and implements ``sync(owner)``. Children are matched to owners by their controlling
ownerReference's uid, as the controllers' ``resolveControllerRef`` does.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from datetime import datetime

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.controllers.cache import Change, Key, Obj, controller_uid, key_of
from gpuplan.sim.controllers.cron import BatchClock
from gpuplan.sim.controllers.loop import Loop, Timer


class OwnerQueue(ABC):
    """Dirty owners, a uid index, and one wake-up timer per owner."""

    kind = ""
    child_kind = ""

    def __init__(self, loop: Loop, clock: BatchClock) -> None:
        self.loop = loop
        self.store = loop.store
        self.clock = clock
        self._dirty: set[Key] = set()
        self._by_uid: dict[str, Key] = {}
        self._timers: dict[Key, Timer] = {}

    def on_change(self, change: Change) -> None:
        if change.kind == self.kind:
            if change.new is not None:
                self._by_uid[change.new["metadata"]["uid"]] = change.key
                self._dirty.add(change.key)
            elif change.old is not None:
                self._by_uid.pop(change.old["metadata"].get("uid", ""), None)
        elif change.kind == self.child_kind:
            for obj in (change.old, change.new):
                owner = controller_uid(obj) if obj is not None else None
                if owner in self._by_uid:
                    self._dirty.add(self._by_uid[owner])

    def mark(self, key: Key) -> None:
        self._dirty.add(key)

    def resync(self) -> None:
        """Look at every owner again (after the batch clock moved)."""
        self._dirty.update(self.loop.cache.objects[self.kind])

    def flush(self) -> bool:
        if not self._dirty:
            return False
        dirty, self._dirty = sorted(self._dirty), set()
        for key in dirty:
            owner = self.loop.cache.objects[self.kind].get(key)
            if owner is not None:
                self.sync(owner)
        return True

    @abstractmethod
    def sync(self, owner: Obj) -> None:
        """Bring ``owner``'s children and status to what its spec asks (the Job or CronJob controller)."""

    def write_status(self, rt: ResourceType, owner: Obj, status: Obj, manager: str) -> None:
        """Store ``status`` through the status subresource when it changed; a gone or meanwhile changed
        owner is synced again (its newer copy is on its way)."""
        if status == (owner.get("status") or {}):
            return
        meta = owner["metadata"]
        try:
            updated = self.store.update(
                rt,
                {**owner, "status": status},
                namespace=meta["namespace"],
                name=meta["name"],
                manager=manager,
                subresource="status",
            )
        except store_mod.ApiError as error:
            if error.code in (404, 409):
                self.mark(key_of(owner))
                return
            raise
        self.loop.observe(self.kind, updated)

    def wake_at(self, key: Key, due: datetime | None) -> None:
        """Sync ``key`` again when the batch clock reads ``due`` (one timer per owner; None: none)."""
        old = self._timers.pop(key, None)
        if old is not None:
            old.cancel()
        if due is not None:
            self._timers[key] = self.loop.call_later(
                self.clock.delay_until(due), lambda: self.mark(key), settling=False
            )
