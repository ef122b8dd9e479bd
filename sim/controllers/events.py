"""core/v1 Events as the cluster's components write them: client-go's event recorder, correlator and spam
filter.

What ``kubectl get events`` and ``kubectl describe`` show comes from here. An ``EventRecorder`` writes Events
the way ``record.EventBroadcaster`` + ``EventCorrelator`` of client-go do:

- an Event is named ``<involved object name>.<unix nanoseconds in hex>``, in the involved object's namespace
  (``default`` for a cluster-scoped object), with ``involvedObject`` (kind, namespace, name, uid, apiVersion,
  resourceVersion, fieldPath for a container), ``source`` (component, host), ``reportingComponent`` and
  ``reportingInstance``, ``firstTimestamp``/``lastTimestamp``, ``count`` and ``type`` Normal or Warning;
- a repeat (same source, involved object, type, reason and message) is not a new Event: the stored one gets
  ``count + 1`` and a new ``lastTimestamp`` (the correlator's EventLogger, an LRU of 4096 entries);
- the spam filter: per source and involved object, a token bucket of 25 events refilled at one per 300 s;
  what exceeds it is dropped, as client-go drops it. That is what keeps a crash-looping pod (or a DaemonSet
  whose pods are refused on every retry) from writing an event per restart for ever.

Not reproduced: the EventAggregator's "(combined from similar events)" merging of events that differ only
in their message. Events are written without managedFields (manager ``""``): cheap at fleet scale, and
nothing reads an Event's field ownership. The store takes each body as it is (``owned``, no answer), and the
recorder gives the events that repeat an ``involvedObject`` or ``source`` one instance of it, which the
store's sharing then pools without encoding it again (ten Events per pod of a fleet).

Callers: ``gpuplan.sim.controllers.daemonset`` (SuccessfulCreate, FailedCreate, SuccessfulDelete) and
``gpuplan.sim.controllers.pod_events`` (scheduler and kubelet events), all on the loop thread; an
``EventRecorder`` is not thread-safe.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.api.object_store import ObjectStore
from gpuplan.sim.api.objects import rfc3339
from gpuplan.sim.controllers.cache import Obj, resource_type

NORMAL = "Normal"
WARNING = "Warning"
MERGE = "application/merge-patch+json"
LRU_SIZE = 4096  # client-go maxLruCacheEntries
SPAM_BURST = 25  # client-go defaultSpamBurst
SPAM_REFILL_SECONDS = 300  # client-go defaultSpamQPS = 1/300


@dataclass(frozen=True)
class Source:
    """Who reports: ``component`` (kubelet, default-scheduler, daemonset-controller) and ``host`` (a
    kubelet's node name; empty for controllers)."""

    component: str
    host: str = ""


@dataclass
class _Bucket:
    tokens: float
    at: float


class EventRecorder:
    """Writes, aggregates and rate-limits Events through the store (from the loop thread only)."""

    def __init__(
        self,
        store: ObjectStore,
        *,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.wall_clock = wall_clock
        self.clock = clock
        self._events_rt = resource_type(store.registry, "v1", "Event")
        self._seen: OrderedDict[tuple[Any, ...], tuple[str, str, int]] = OrderedDict()
        # recent involvedObjects and every source, one instance for the events that repeat them (_reuse)
        self._refs: OrderedDict[tuple[Any, ...], Obj] = OrderedDict()
        self._sources: dict[Source, Obj] = {}
        self._buckets: OrderedDict[tuple[Any, ...], _Bucket] = OrderedDict()
        self._last_name_ns = 0
        self.dropped = 0

    def record(
        self, involved: Obj, type_: str, reason: str, message: str, source: Source, *, field_path: str = ""
    ) -> None:
        """Record that ``reason``/``message`` happened to ``involved`` (a stored object), as ``source``."""
        ref = self._reuse(object_reference(involved, field_path))
        if not self._allowed(source, ref):
            self.dropped += 1
            return
        identity = (
            source,
            ref["kind"],
            ref.get("namespace", ""),
            ref["name"],
            ref.get("uid", ""),
            ref.get("apiVersion", ""),
            field_path,
            type_,
            reason,
            message,
        )
        moment = self.wall_clock()
        now = rfc3339(moment)
        seen = self._seen.get(identity)
        if seen is not None and self._bump(seen, now):
            namespace, name, count = seen
            self._seen[identity] = (namespace, name, count + 1)
            self._seen.move_to_end(identity)
            return
        namespace = ref.get("namespace") or "default"
        name = f"{ref['name']}.{self._name_suffix(moment)}"
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            # one string for a message every pod of a template gets (``Started container c``)
            "message": sys.intern(message),
            "source": self._source(source),
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": type_,
            "eventTime": None,
            "reportingComponent": source.component,
            "reportingInstance": source.host,
        }
        try:
            self.store.create(
                self._events_rt, body, namespace=namespace, manager="", answer=False, owned=True
            )
        except store_mod.ApiError:
            return  # a namespace going away: client-go gives up on such an event too
        self._seen[identity] = (namespace, name, 1)
        if len(self._seen) > LRU_SIZE:
            self._seen.popitem(last=False)

    def _reuse(self, ref: Obj) -> Obj:
        """The instance of an equal involvedObject written before, else ``ref``, remembered: a container's
        Pulled, Created and Started (and its pod's Scheduled) name the same object, and the store's sharing
        knows a part it pooled by its identity without encoding it again (``sim.api.sharing``). The stored
        Events hold it as it is (``owned``), so it is never changed."""
        identity = tuple(ref.values()) + tuple(ref)
        found = self._refs.get(identity)
        if found is not None:
            self._refs.move_to_end(identity)
            return found
        self._refs[identity] = ref
        if len(self._refs) > LRU_SIZE:
            self._refs.popitem(last=False)
        return ref

    def _source(self, source: Source) -> Obj:
        """One ``source`` map per reporting component and host (a node's kubelet), for every Event of it."""
        found = self._sources.get(source)
        if found is None:
            found = self._sources[source] = {
                "component": source.component,
                **({"host": source.host} if source.host else {}),
            }
        return found

    def _bump(self, seen: tuple[str, str, int], now: str) -> bool:
        """Patch the stored repeat's count and lastTimestamp; False when it is gone (write a new one)."""
        namespace, name, count = seen
        try:
            self.store.patch(
                self._events_rt,
                namespace,
                name,
                {"count": count + 1, "lastTimestamp": now},
                MERGE,
                manager="",
                read_only=True,
            )
        except store_mod.ApiError:
            return False
        return True

    def _allowed(self, source: Source, ref: Obj) -> bool:
        """The spam filter's token bucket per source and involved object."""
        key = (source, ref["kind"], ref.get("namespace", ""), ref["name"], ref.get("uid", ""))
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(SPAM_BURST), now)
            if len(self._buckets) > LRU_SIZE:
                self._buckets.popitem(last=False)
        else:
            bucket.tokens = min(float(SPAM_BURST), bucket.tokens + (now - bucket.at) / SPAM_REFILL_SECONDS)
            bucket.at = now
            self._buckets.move_to_end(key)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _name_suffix(self, moment: datetime) -> str:
        """``%x`` of the time in nanoseconds, kept strictly increasing so two events never share a name."""
        stamp = int(moment.timestamp() * 1e9)
        self._last_name_ns = max(stamp, self._last_name_ns + 1)
        return f"{self._last_name_ns:x}"


def object_reference(obj: Obj, field_path: str = "") -> Obj:
    """``ref.GetReference``: the involvedObject of an Event about ``obj``."""
    meta = obj.get("metadata") or {}
    ref: Obj = {"kind": obj.get("kind", ""), "name": meta.get("name", "")}
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    for field, value in (
        ("uid", meta.get("uid")),
        ("apiVersion", obj.get("apiVersion")),
        ("resourceVersion", meta.get("resourceVersion")),
    ):
        if value:
            ref[field] = value
    if field_path:
        ref["fieldPath"] = field_path
    return ref
