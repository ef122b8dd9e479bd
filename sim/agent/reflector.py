"""One kind's list and watch against a Kubernetes API server, turned into the store ``Event``s a subscriber of
the in-process store receives: client-go's reflector (``k8s.io/client-go/tools/cache/reflector.go``).

- **List** in pages (``limit`` + ``continue``, ``ListWatch``'s pager), then **watch** from the list's
  resourceVersion with ``allowWatchBookmarks=true``; a watch that ends (its ``timeoutSeconds``, the server
  closing it) is opened again from the last resourceVersion seen, an event's or a BOOKMARK's.
- **410 Gone** (the watch's HTTP answer or an ERROR event: the server's history no longer reaches back that
  far; also an expired ``continue`` token) lists again from scratch, as ``reflector.go``'s
  ``isExpiredError`` path does. The new list replaces what was known: ADDED or MODIFIED for what it holds
  (the loop's cache drops what it already has at that resourceVersion), DELETED for what it no longer holds
  (client-go's ``DeletedFinalStateUnknown``), so a subscriber ends up as if it had seen every event.
- Other failures (connection refused or dropped, 5xx, 429) wait and try again: back-off from
  ``BACKOFF_S`` doubling to ``MAX_BACKOFF_S`` (``reflector.go``'s 800 ms .. 30 s back-off manager, scaled
  down so a test's outage heals quickly), reset by a watch that delivered something.

``keep`` filters what reaches the subscribers (a node agent's pods: those bound to its nodes); what it
drops still moves the resourceVersion on. ``seen`` is the latest resourceVersion delivered or bookmarked:
``RemoteStore.caught_up`` compares it with the resourceVersions of the agent's own writes.

Only ``objects`` (for ``keep_objects``: the ConfigMaps a kubelet reads) holds the objects themselves; the
rest keeps each object's resourceVersion, which the re-list's comparison needs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuplan.sim.agent.client import ApiClient, WatchStream, path_of, status_error
from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.api.watchlog import Event

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
BACKOFF_S = 0.05
MAX_BACKOFF_S = 5.0
PAGE_SIZE = 500
"""client-go's pager default (``pager.defaultPageSize``)."""
WATCH_TIMEOUT_S = 300
"""client-go picks ``minWatchTimeout`` (5 min) to twice that at random; one figure keeps runs repeatable."""


@dataclass
class ReflectorStats:
    """What a reflector did, for tests and logs."""

    lists: int = 0
    watches: int = 0
    gone: int = 0  # 410s that made it list again
    failures: int = 0  # lists and watches that failed otherwise (then waited and tried again)
    events: int = 0


class Reflector:
    """List-then-watch of ``rt`` on a thread of its own, feeding ``deliver``."""

    def __init__(
        self,
        client: ApiClient,
        rt: ResourceType,
        deliver: Callable[[Event], None],
        *,
        field_selector: str | None = None,
        keep: Callable[[Obj], bool] | None = None,
        keep_objects: bool = False,
        page_size: int = PAGE_SIZE,
        watch_timeout_s: int = WATCH_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.rt = rt
        self.deliver = deliver
        self.field_selector = field_selector
        self.keep = keep
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.stats = ReflectorStats()
        self.synced = threading.Event()
        self.objects: dict[Key, Obj] | None = {} if keep_objects else None
        self._versions: dict[Key, int] = {}
        self._seen = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    @property
    def seen(self) -> int:
        with self._lock:
            return self._seen

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"gpuplan-agent-{self.rt.plural}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # -- the thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        resource_version: str | None = None
        backoff = BACKOFF_S
        while not self._stop.is_set():
            try:
                if resource_version is None:
                    resource_version = self._list()
                    self.synced.set()
                resource_version, delivered = self._watch(resource_version)
                if delivered:
                    backoff = BACKOFF_S
            except ApiError as exc:
                if self._stop.is_set():
                    return
                if exc.code == 410:
                    self.stats.gone += 1
                    log.info("%s: %s; listing again", self.rt.plural, exc.message)
                    resource_version = None
                    continue
                self.stats.failures += 1
                log.info("%s: %s; trying again in %.2f s", self.rt.plural, exc.message, backoff)
                if self._stop.wait(backoff):
                    return
                backoff = min(backoff * 2, MAX_BACKOFF_S)

    def _list(self) -> str:
        """Every object, page by page, handed over as one replacement; the list's resourceVersion."""
        query: dict[str, str] = {"limit": str(self.page_size)}
        if self.field_selector:
            query["fieldSelector"] = self.field_selector
        items: list[Obj] = []
        while True:
            answer = self.client.request("GET", path_of(self.rt), query=query)
            items += answer.get("items") or []
            meta = answer.get("metadata") or {}
            if not meta.get("continue"):
                break
            query["continue"] = str(meta["continue"])
        self.stats.lists += 1
        self._replace(items, str(meta.get("resourceVersion") or "0"))
        return str(meta.get("resourceVersion") or "0")

    def _replace(self, items: list[Obj], resource_version: str) -> None:
        listed: dict[Key, Obj] = {}
        for item in items:
            # a list's items carry no apiVersion and kind; Events name their object's (object_reference)
            item.setdefault("apiVersion", self.rt.api_version)
            item.setdefault("kind", self.rt.kind)
            if self.keep is None or self.keep(item):
                listed[_key(item)] = item
        for key, version in list(self._versions.items()):
            if key not in listed:
                stub = {"metadata": {"namespace": key[0], "name": key[1], "resourceVersion": str(version)}}
                self._forward("DELETED", self.objects.get(key, stub) if self.objects is not None else stub)
        for key, item in listed.items():
            self._forward("MODIFIED" if key in self._versions else "ADDED", item)
        self._advance(_int(resource_version))

    def _watch(self, resource_version: str) -> tuple[str, bool]:
        """Watch from ``resource_version`` until the server ends the answer; where it got to, and whether
        anything came."""
        query = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout_s),
        }
        if self.field_selector:
            query["fieldSelector"] = self.field_selector
        stream = self.client.watch(path_of(self.rt), query, self.watch_timeout_s)
        self._stream = stream
        if self._stop.is_set():
            stream.close()
        self.stats.watches += 1
        delivered = False
        try:
            for event in stream.events():
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise status_error(obj)
                version = str((obj.get("metadata") or {}).get("resourceVersion") or resource_version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._event(str(kind), obj)
                    delivered = True
                resource_version = version
                self._advance(_int(version))
        finally:
            self._stream = None
        return resource_version, delivered

    def _event(self, kind: str, obj: Obj) -> None:
        key = _key(obj)
        if self.keep is None or self.keep(obj):
            self._forward(kind, obj)
        elif key in self._versions:  # no longer ours (a selector of ours stopped matching): gone for us
            self._forward("DELETED", obj)

    def _forward(self, kind: str, obj: Obj) -> None:
        key = _key(obj)
        if kind == "DELETED":
            self._versions.pop(key, None)
            if self.objects is not None:
                self.objects.pop(key, None)
        else:
            self._versions[key] = _int((obj.get("metadata") or {}).get("resourceVersion"))
            if self.objects is not None:
                self.objects[key] = obj
        self.stats.events += 1
        self.deliver(Event(kind, self.rt, obj, None))

    def _advance(self, version: int) -> None:
        """Delivered up to ``version`` (after the delivery: caught_up then implies the subscriber has it)."""
        with self._lock:
            self._seen = max(self._seen, version)


def _key(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
