"""The simulated cluster's object store: Kubernetes API semantics over plain JSON dicts, in memory.

Interface: docs/sim-internals.md "Store", implemented as written, no deviation. Additions: keyword arguments
``field_validation`` on update/patch and ``Store(..., event_log_size=, clock=, seed_namespaces=)``; methods
``flush``, ``close``, ``delete_collection``, ``evict`` (pods/eviction) and ``bind`` (pods/binding); list and
watch also accept parsed ``selectors.LabelSelector``/``FieldSelector`` values. Callers: ``sim.api.server`` (every REST verb),
``sim.controllers`` and ``sim.kubelet`` (through the same verbs and ``subscribe``), ``sim.cluster``.

How it behaves, where a real apiserver leaves a choice:

- **Storage.** One dict per resource (``group``, ``plural``) keyed by (namespace, name); every served version
  of a resource shares it and answers with its own ``apiVersion``. Stored dicts are never mutated (each write
  stores a new dict), so the event log and list snapshots can share them; every method returns deep copies.
- **resourceVersion** is one global integer counter; a write that changes nothing (same content, same
  managedFields) is a no-op that keeps the old resourceVersion and emits no event, as on a real server.
- **Namespaces** ``default``, ``kube-system``, ``kube-public`` and ``kube-node-lease`` are created by
  ``Store.__init__`` (``seed_namespaces=False`` skips it). Deleting a Namespace deletes everything in it at
  once (DELETED events for each object) instead of a Terminating phase.
- **Deletion** is immediate unless the object has ``metadata.finalizers``: then it gets a
  ``deletionTimestamp`` and goes when an update removes the last finalizer. Propagation is done by the store
  in the same call (the garbage collector's effect, without its delay): Background and Foreground delete the
  dependents (objects whose ``ownerReferences`` name the owner's uid), recursively; Orphan keeps them and
  strips that ownerReference. Deleting a CustomResourceDefinition deletes its custom objects.
- **Lists** are consistent snapshots: a continue token ``base64({"v", "rv", "start"})`` pins the list's
  resourceVersion, and later pages are rebuilt at that version from the event log (410 Expired once the
  bounded log, ``event_log_size`` events, has dropped a change of that resource made after it).
  ``remainingItemCount`` is set only without selectors, as on a real server.
- **Watches** replay the event log after the given resourceVersion (410 Expired "too old resource version"
  when the log has dropped a change of that resource made after it: the floor is per resource, like the
  apiserver's per-type watch cache), or synthesise ADDED events for the current state for ``None``/"0".
  Selector transitions turn MODIFIED into ADDED/DELETED as the watch cache does. No BOOKMARK events.
- **Subscribers** are called by one dispatcher thread (started by the first ``subscribe``), in write order,
  after the write and outside the lock. All subscribers of one event share one deep copy of it: treat
  ``Event.object``/``Event.old`` as read-only. ``flush()`` waits until every event so far, and every event
  those deliveries caused, is delivered (``close()`` stops the thread).
- **Defaults** (``validation.default_new_object``): pods get ``status.phase: Pending`` and their qosClass,
  DaemonSets zeroed status counters, Namespaces ``status.phase: Active`` and their name label, CRDs the
  Established and NamesAccepted conditions, Secrets ``type: Opaque``, Services a ClusterIP. No spec
  defaulting otherwise.
  A pod's ``nodeName`` is set at create or once through ``bind`` (pods/binding); ``evict`` serves
  pods/eviction. ``default``, ``kube-system`` and ``kube-public`` cannot be deleted (403).
"""

from __future__ import annotations

import base64
import bisect
import binascii
import json
import logging
import queue
import random
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar, cast

from gpuplan.sim.api import managed, patch, registry, selectors, validation
from gpuplan.sim.api.registry import ResourceType

log = logging.getLogger(__name__)

Key = tuple[str, str]
Obj = dict[str, Any]
KeyList = list[Key]
ObjList = list[Obj]
ManagedFields = list[dict[str, Any]]
SEED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
IMMORTAL_NAMESPACES = frozenset({"default", "kube-system", "kube-public"})
GC_MANAGER = "kube-controller-manager"
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_CONTINUE_TOO_OLD = ("The provided continue parameter is too old to display a consistent list result. You can "
                     "start a new list without the continue parameter, or use the continue token in this "
                     "response to retrieve the remainder of the results. Continuing with the provided token "
                     "results in an inconsistent list - objects that were created, modified, or deleted "
                     "between the time the first chunk was returned and now may show up in the list.")


class ApiError(Exception):
    """An API failure as the apiserver reports it; ``status()`` is the metav1 Status body."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None,
                 retry_after: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason, "code": self.code}
        details = dict(self.details or {})
        if self.retry_after is not None:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        return body

    def __repr__(self) -> str:
        return f"ApiError({self.code}, {self.reason!r}, {self.message!r})"


def _details(rt: ResourceType, name: str, **extra: Any) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.plural
    return {**details, **extra}


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
                    _details(rt, name))


MODIFIED_WHY = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(rt: ResourceType, name: str, causes: list[dict[str, str]]) -> ApiError:
    kind_details = {"name": name, **({"group": rt.group} if rt.group else {}), "kind": rt.kind,
                    "causes": causes}
    return ApiError(422, "Invalid", validation.invalid_message(rt, name, causes), kind_details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


NAMESPACES = registry.BUILTIN[0]
BUILTIN = registry.BUILTIN


@dataclass
class ListResult:
    items: list[Obj]
    resource_version: str
    continue_token: str | None
    remaining: int | None


@dataclass(frozen=True)
class Event:
    """One committed change. ``object`` is the state after it (for DELETED, the last state)."""

    type: str
    rt: ResourceType
    object: Obj
    old: Obj | None


def now_rfc3339(clock: Callable[[], datetime]) -> str:
    return clock().astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_T = TypeVar("_T")


def copy_json(value: _T) -> _T:
    """A deep copy of JSON data, several times faster than copy.deepcopy for it."""
    if isinstance(value, dict):
        return cast(_T, {k: copy_json(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(_T, [copy_json(v) for v in value])
    return value


def _meta(obj: Obj) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _key(obj: Obj) -> Key:
    meta = _meta(obj)
    return (meta.get("namespace") or "", meta.get("name") or "")


def _rv(obj: Obj) -> int:
    return int(_meta(obj).get("resourceVersion") or 0)


def _as_version(rt: ResourceType, obj: Obj) -> Obj:
    out: Obj = copy_json(obj)
    out["apiVersion"] = rt.api_version
    out["kind"] = rt.kind
    return out


def _without_bookkeeping(obj: Obj) -> Obj:
    """The object without resourceVersion, to compare content for no-op writes."""
    meta = {k: v for k, v in _meta(obj).items() if k != "resourceVersion"}
    return {**obj, "metadata": meta}


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class _Page:
    """One page of a list over sorted keys: from after ``start``, within ``namespace``, up to a limit."""

    def __init__(self, keys: list[Key], namespace: str | None, start: Key | None) -> None:
        self.keys = keys
        self.namespace = namespace
        self.position = bisect.bisect_right(keys, start) if start is not None else 0
        self.end = len(keys)
        if namespace is not None:
            self.position = max(self.position, bisect.bisect_left(keys, (namespace, "")))
            self.end = bisect.bisect_left(keys, (namespace + "\x00", ""))
        self.last: Key | None = None

    def select(self, objects: dict[Key, Obj], labels: selectors.LabelSelector,
               fields: selectors.FieldSelector, limit: int | None) -> tuple[list[Obj], bool]:
        """The matching objects of the page and whether more follow."""
        chosen: list[Obj] = []
        for index in range(self.position, self.end):
            obj = objects[self.keys[index]]
            if labels.matches(obj) and fields.matches(obj):
                if limit and len(chosen) >= limit:
                    return chosen, True
                chosen.append(obj)
                self.last = self.keys[index]
        return chosen, False

    def remaining(self) -> int:
        """Items after the page (without selectors every key in range is an item)."""
        return self.end - bisect.bisect_right(self.keys, self.last) if self.last is not None else 0


class Watch:
    """A stream of {"type", "object"} for one resource, fed by the store under its lock."""

    def __init__(self, store: Store, rt: ResourceType, namespace: str | None,
                 labels: selectors.LabelSelector, fields: selectors.FieldSelector) -> None:
        self._store = store
        self.rt = rt
        self._namespace = namespace
        self._labels = labels
        self._fields = fields
        self._queue: deque[tuple[str, Obj]] = deque()
        self._cond = threading.Condition()
        self.closed = False

    def _matches(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        if self._namespace is not None and _meta(obj).get("namespace") != self._namespace:
            return False
        return bool(self._labels.matches(obj) and self._fields.matches(obj))

    def _translate(self, event: Event) -> tuple[str, Obj] | None:
        """The event this watcher sees, after its filters (a selector transition is ADDED/DELETED)."""
        now, before = self._matches(event.object), self._matches(event.old)
        if event.type == "ADDED":
            return ("ADDED", event.object) if now else None
        if event.type == "DELETED":
            return ("DELETED", event.object) if before else None
        if now and before:
            return ("MODIFIED", event.object)
        if now:
            return ("ADDED", event.object)
        if before and event.old is not None:
            last = {**event.old, "metadata": {**_meta(event.old), "resourceVersion":
                                              _meta(event.object).get("resourceVersion")}}
            return ("DELETED", last)
        return None

    def _offer(self, event: Event) -> None:
        seen = self._translate(event)
        if seen is not None:
            self._push(seen)

    def _push(self, item: tuple[str, Obj]) -> None:
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
        return {"type": kind, "object": _as_version(self.rt, obj)}

    def close(self) -> None:
        self._store._remove_watch(self)
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


class _Dispatcher:
    """One thread calling subscribers in write order, outside the store lock."""

    def __init__(self) -> None:
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
            shared = Event(event.type, event.rt, _as_version(event.rt, event.object),
                           None if event.old is None else _as_version(event.rt, event.old))
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


class Store:
    """All objects of the simulated cluster. Thread-safe: one lock serialises writes and snapshots."""

    def __init__(self, registry: registry.Registry, *, event_log_size: int = 20000,
                 clock: Callable[[], datetime] | None = None, seed_namespaces: bool = True) -> None:
        """``event_log_size``: events kept for watch replay and list snapshots; ``clock``: the time of
        creationTimestamp and managedFields (UTC now by default); ``seed_namespaces``: create default,
        kube-system, kube-public and kube-node-lease (resourceVersions 1-4, before any subscriber)."""
        self.registry = registry
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._lock = threading.RLock()
        self._rv = 0
        self._objects: dict[tuple[str, str], dict[Key, Obj]] = {}
        self._sorted_keys: dict[tuple[str, str], KeyList] = {}
        self._types: dict[tuple[str, str], ResourceType] = {}
        self._pods_by_node: dict[str, set[Key]] = {}
        self._dependents: dict[str, set[tuple[tuple[str, str], Key]]] = {}
        self._log: deque[tuple[int, Event]] = deque()
        self._log_size = event_log_size
        # Per resource: the resourceVersion of its newest event dropped from the log (older list snapshots
        # and watch starts cannot be served: 410), and of its newest event (a snapshot at or after it is the
        # current state). Per resource, like the apiserver's per-type watch cache, so pod churn does not
        # expire node lists.
        self._floors: dict[tuple[str, str], int] = {}
        self._latest: dict[tuple[str, str], int] = {}
        self._watches: dict[tuple[str, str], set[Watch]] = {}
        self._dispatcher = _Dispatcher()
        for rt in BUILTIN:
            self._types.setdefault(rt.storage_key, rt)
        if seed_namespaces:
            for name in SEED_NAMESPACES:
                self.create(NAMESPACES, {"metadata": {"name": name}}, manager="kube-apiserver")

    # ------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> int:
        return self._rv

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        with self._lock:
            obj = self._bucket(rt).get(self._object_key(rt, namespace, name))
        if obj is None:
            raise not_found(rt, name)
        return _as_version(rt, obj)

    def list(self, rt: ResourceType, *, namespace: str | None = None,
             label_selector: str | selectors.LabelSelector | None = None,
             field_selector: str | selectors.FieldSelector | None = None, limit: int | None = None,
             continue_token: str | None = None) -> ListResult:
        labels, fields = self._selectors(rt, label_selector, field_selector)
        list_rv, start = self._decode_continue(continue_token) if continue_token else (None, None)
        with self._lock:
            list_rv = self._rv if list_rv is None else list_rv
            objects, keys = self._snapshot(rt, list_rv, fields)
            page = _Page(keys, namespace if rt.namespaced else None, start)
            chosen, more = page.select(objects, labels, fields, limit)
            remaining = page.remaining() if more and labels.empty and fields.empty else None
        token = self._encode_continue(list_rv, page.last) if more and page.last is not None else None
        return ListResult([_as_version(rt, o) for o in chosen], str(list_rv), token, remaining)

    def _selectors(self, rt: ResourceType, label_selector: str | selectors.LabelSelector | None,
                   field_selector: str | selectors.FieldSelector | None
                   ) -> tuple[selectors.LabelSelector, selectors.FieldSelector]:
        try:
            labels = label_selector if isinstance(label_selector, selectors.LabelSelector) \
                else selectors.parse_labels(label_selector)
            fields = field_selector if isinstance(field_selector, selectors.FieldSelector) \
                else selectors.parse_fields(field_selector, rt.kind)
        except selectors.SelectorError as exc:
            raise bad_request(str(exc)) from exc
        return labels, fields

    def _snapshot(self, rt: ResourceType, list_rv: int,
                  fields: selectors.FieldSelector) -> tuple[dict[Key, Obj], KeyList]:
        """The objects of ``rt`` as of ``list_rv`` and their sorted keys (called under the lock)."""
        bucket = self._bucket(rt)
        if list_rv >= self._latest.get(rt.storage_key, 0):
            node = fields.exact("spec.nodeName") if rt.kind == "Pod" and not rt.group else None
            if node is not None:
                keys = sorted(k for k in self._pods_by_node.get(node, ()) if k in bucket)
                return bucket, keys
            return bucket, self._keys_sorted(rt)
        if list_rv < self._floors.get(rt.storage_key, 0):
            raise expired(_CONTINUE_TOO_OLD)
        overlay: dict[Key, Obj | None] = {}
        for rv, event in reversed(self._log):
            if rv <= list_rv:
                break
            if event.rt.storage_key == rt.storage_key:
                overlay[_key(event.object)] = None if event.type == "ADDED" else event.old
        objects = dict(bucket)
        for key, old in overlay.items():
            if old is None:
                objects.pop(key, None)
            else:
                objects[key] = old
        return objects, sorted(objects)

    def _keys_sorted(self, rt: ResourceType) -> KeyList:
        keys = self._sorted_keys.get(rt.storage_key)
        if keys is None:
            keys = sorted(self._bucket(rt))
            self._sorted_keys[rt.storage_key] = keys
        return keys

    @staticmethod
    def _encode_continue(list_rv: int, last: Key) -> str:
        start = f"{last[0]}/{last[1]}" if last[0] else last[1]
        raw = json.dumps({"v": "meta.k8s.io/v1", "rv": list_rv, "start": start + "\x00"})
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, Key]:
        try:
            raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
            start = raw["start"].rstrip("\x00")
            namespace, _, name = start.rpartition("/")
            return int(raw["rv"]), (namespace, name)
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise bad_request(f"continue key is not valid: {exc}") from exc

    # ------------------------------------------------------------------ helpers

    def _bucket(self, rt: ResourceType) -> dict[Key, Obj]:
        return self._objects.setdefault(rt.storage_key, {})

    @staticmethod
    def _object_key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rt.namespaced else "", name)

    def _now(self) -> str:
        return now_rfc3339(self._clock)

    def _check_type(self, rt: ResourceType, obj: Any) -> Obj:
        if not isinstance(obj, dict):
            raise bad_request("the body of the request must be a JSON object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version and api_version != rt.api_version:
            raise bad_request(f"the API version in the data ({api_version}) does not match the expected API "
                              f"version ({rt.api_version})")
        if kind and kind != rt.kind:
            raise bad_request(f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})")
        out: Obj = copy_json(obj)
        out["apiVersion"], out["kind"] = rt.api_version, rt.kind
        if not isinstance(out.get("metadata"), dict):
            out["metadata"] = {}
        return out

    def _check_served(self, rt: ResourceType) -> None:
        """Writes to a kind the registry no longer serves (a deleted CRD's) are 404, as on a real server."""
        if self.registry.get(rt.group, rt.version, rt.plural) is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           {"group": rt.group, "kind": rt.plural})

    def _check_strict(self, rt: ResourceType, obj: Obj, field_validation: str | None) -> None:
        if (field_validation or "").lower() == "strict":
            unknown = validation.unknown_fields(rt, obj, rt in registry.BUILTIN)
            if unknown:
                raise bad_request(validation.strict_message(unknown))

    def _require_namespace(self, rt: ResourceType, namespace: str) -> None:
        if rt.namespaced and ("", namespace) not in self._bucket(NAMESPACES):
            raise not_found(NAMESPACES, namespace)

    def _part(self, rt: ResourceType, subresource: str | None) -> str | None:
        if subresource == "status":
            return "status"
        return "main" if "status" in rt.subresources else None

    # ------------------------------------------------------------------ create

    def create(self, rt: ResourceType, obj: Obj, *, namespace: str | None = None, manager: str,
               dry_run: bool = False, field_validation: str = "Ignore") -> Obj:
        obj = self._check_type(rt, obj)
        self._check_served(rt)
        self._check_strict(rt, obj, field_validation)
        # Ownership is computed from the request, before the server's defaults (zeroed status, ...).
        fields = managed.record_update(None, obj, [], manager=manager, api_version=rt.api_version,
                                       time=self._now(), part=self._part(rt, None)) if manager else []
        with self._lock:
            self._prepare_create(rt, obj, namespace)
            obj["metadata"]["managedFields"] = fields
            return self._insert(rt, obj, dry_run)

    def _prepare_create(self, rt: ResourceType, obj: Obj, namespace: str | None) -> None:
        """Namespace, name, validation and the server-set fields of a new object (under the lock)."""
        meta = obj["metadata"]
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace and body_ns and body_ns != namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
            meta["namespace"] = namespace or body_ns or "default"
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = self._generate_name(rt, meta["namespace"] if rt.namespaced else "",
                                               meta["generateName"])
        causes = validation.validate_object(rt, obj)
        if causes:
            raise invalid(rt, meta.get("name") or "", causes)
        if rt.namespaced:
            self._require_namespace(rt, meta["namespace"])
        if _key(obj) in self._bucket(rt):
            raise already_exists(rt, meta["name"])
        for server_field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(server_field, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = self._now()
        if rt.tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        validation.default_new_object(rt, obj, self._now())

    def _generate_name(self, rt: ResourceType, namespace: str, prefix: str) -> str:
        bucket = self._bucket(rt)
        while True:
            name = prefix + "".join(random.choices(_GENERATE_ALPHABET, k=5))
            if (namespace, name) not in bucket:
                return name

    def _insert(self, rt: ResourceType, obj: Obj, dry_run: bool) -> Obj:
        if dry_run:
            return _as_version(rt, obj)
        self._commit(rt, "ADDED", None, obj)
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._register_crd(obj)
        return _as_version(rt, obj)

    # ------------------------------------------------------------------ update

    def update(self, rt: ResourceType, obj: Obj, *, namespace: str | None, name: str, manager: str,
               subresource: str | None = None, dry_run: bool = False,
               field_validation: str = "Ignore") -> Obj:
        obj = self._check_type(rt, obj)
        self._check_strict(rt, obj, field_validation)
        meta = obj["metadata"]
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name on the URL "
                              f"({name})")
        if rt.namespaced and namespace and meta.get("namespace") and meta["namespace"] != namespace:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the "
                              "request")
        with self._lock:
            old = self._current(rt, namespace, name)
            wanted = meta.get("resourceVersion")
            if wanted and wanted != _meta(old)["resourceVersion"]:
                raise conflict(rt, name, MODIFIED_WHY)
            new = self._merge_write(rt, old, obj, subresource)
            return self._replace(rt, old, new, manager=manager, subresource=subresource, dry_run=dry_run)

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        old = self._bucket(rt).get(self._object_key(rt, namespace, name))
        if old is None:
            raise not_found(rt, name)
        return old

    def _merge_write(self, rt: ResourceType, old: Obj, obj: Obj, subresource: str | None) -> Obj:
        """The object a write of ``obj`` produces: server metadata kept, status or main part kept."""
        if subresource is not None and subresource not in rt.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource",
                           _details(rt, _meta(old)["name"]))
        if subresource == "status":
            new = copy_json(old)
            new["apiVersion"] = rt.api_version
            if "status" in obj:
                new["status"] = copy_json(obj["status"])
            else:
                new.pop("status", None)
            return new
        if subresource is not None:
            raise ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested "
                                                    f"resource ({rt.plural}/{subresource})")
        new = copy_json(obj)
        new["apiVersion"] = rt.api_version
        meta, old_meta = new.setdefault("metadata", {}), _meta(old)
        for field in ("name", "namespace", "uid", "creationTimestamp", "generation", "deletionTimestamp",
                      "deletionGracePeriodSeconds"):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        if "managedFields" not in meta:
            meta["managedFields"] = old_meta.get("managedFields", [])
        if "status" in rt.subresources:
            if "status" in old:
                new["status"] = copy_json(old["status"])
            else:
                new.pop("status", None)
        return new

    def _replace(self, rt: ResourceType, old: Obj, new: Obj, *, manager: str, subresource: str | None,
                 dry_run: bool, managed_fields: ManagedFields | None = None) -> Obj:
        """Validate and store an updated object (under the lock); a no-op keeps the old resourceVersion."""
        name = _meta(old)["name"]
        validation.normalise(rt, new)
        causes = validation.validate_object(rt, new) or validation.validate_update(rt, old, new)
        if causes:
            raise invalid(rt, name, causes)
        meta = new["metadata"]
        meta["resourceVersion"] = _meta(old)["resourceVersion"]
        if rt.tracks_generation and _spec_part(old) != _spec_part(new):
            meta["generation"] = int(_meta(old).get("generation") or 0) + 1
        if managed_fields is None and manager:
            managed_fields = managed.record_update(old, new, meta.get("managedFields") or [], manager=manager,
                                                   api_version=rt.api_version, time=self._now(),
                                                   subresource=subresource, part=self._part(rt, subresource))
        if managed_fields is not None:
            meta["managedFields"] = managed_fields
        if _without_bookkeeping(new) == _without_bookkeeping({**old, "apiVersion": rt.api_version}):
            return _as_version(rt, old)
        if dry_run:
            return _as_version(rt, new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._delete_locked(rt, new, "Background")     # the last finalizer went: delete for real
        self._commit(rt, "MODIFIED", old, new)
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._sync_crd(old, new)
        return _as_version(rt, new)

    # ------------------------------------------------------------------ patch

    def patch(self, rt: ResourceType, namespace: str | None, name: str, body: Any, patch_type: str, *,
              manager: str, subresource: str | None = None, dry_run: bool = False, force: bool = False,
              field_validation: str = "Ignore") -> Obj:
        try:
            document = patch.decode(body, patch_type, strategic_ok=rt in registry.BUILTIN)
        except patch.PatchError as exc:
            raise ApiError(exc.code, exc.reason, str(exc)) from exc
        if patch_type == patch.APPLY:
            return self._apply(rt, namespace, name, document, manager=manager, subresource=subresource,
                               dry_run=dry_run, force=force, field_validation=field_validation)
        with self._lock:
            old = self._current(rt, namespace, name)
            try:
                patched = patch.apply(_as_version(rt, old), document, patch_type)
            except patch.PatchError as exc:
                raise ApiError(exc.code, exc.reason, str(exc)) from exc
            patched = self._check_type(rt, patched)
            self._check_strict(rt, patched, field_validation)
            self._check_identity(rt, old, patched)
            new = self._merge_write(rt, old, patched, subresource)
            return self._replace(rt, old, new, manager=manager, subresource=subresource, dry_run=dry_run)

    def _check_identity(self, rt: ResourceType, old: Obj, patched: Obj) -> None:
        """A patch may not rename the object; a resourceVersion in it is a precondition."""
        meta, old_meta = _meta(patched), _meta(old)
        if meta.get("name") != old_meta["name"]:
            raise bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                              f"({old_meta['name']})")
        if meta.get("resourceVersion") not in (None, "", old_meta["resourceVersion"]):
            raise conflict(rt, old_meta["name"], MODIFIED_WHY)

    def _apply(self, rt: ResourceType, namespace: str | None, name: str, document: Any, *, manager: str,
               subresource: str | None, dry_run: bool, force: bool, field_validation: str) -> Obj:
        """Server-side apply: merge the applied fields, own exactly them, 409 on others' differing values."""
        if not manager:
            raise ApiError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required '
                                           "value: is required for apply patch",
                           {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                               validation.required("fieldManager", "is required for apply patch")]})
        applied = self._check_type(rt, document)
        self._check_served(rt)
        self._check_strict(rt, applied, field_validation)
        if not _meta(applied).get("name"):
            _meta(applied)["name"] = name
        if _meta(applied)["name"] != name:
            raise bad_request(f"the name of the object ({_meta(applied)['name']}) does not match the name on "
                              f"the URL ({name})")
        part = self._part(rt, subresource)
        applied_leaves = managed.leaves(applied, part)
        with self._lock:
            old = self._bucket(rt).get(self._object_key(rt, namespace, name))
            if old is None:
                if subresource is not None:
                    raise not_found(rt, name)
                return self._apply_create(rt, applied, set(applied_leaves), namespace, manager, dry_run)
            live = _as_version(rt, old)
            mf = _meta(live).get("managedFields") or []
            found = managed.conflicts(live, applied_leaves, mf, manager=manager, subresource=subresource,
                                      part=part)
            if found and not force:
                raise _apply_conflict(rt, name, found)
            merged = patch.apply_merge(live, applied, part)
            stale = managed.applied_by(mf, manager, subresource) - set(applied_leaves)
            own = (manager, "Apply", subresource or "")
            orphaned = [p for p in stale if not managed.owners_of_path(mf, p, live, exclude=own)]
            patch.remove_paths(merged, orphaned)
            new_mf = managed.record_apply(live, merged, mf, applied=set(applied_leaves), manager=manager,
                                          api_version=rt.api_version, time=self._now(),
                                          subresource=subresource, part=part, forced=found)
            _meta(merged)["managedFields"] = new_mf
            new = self._merge_write(rt, old, merged, subresource)
            return self._replace(rt, old, new, manager=manager, subresource=subresource, dry_run=dry_run,
                                 managed_fields=new_mf)

    def _apply_create(self, rt: ResourceType, applied: Obj, paths: set[managed.Path], namespace: str | None,
                      manager: str, dry_run: bool) -> Obj:
        obj = copy_json(applied)
        self._prepare_create(rt, obj, namespace)
        obj["metadata"]["managedFields"] = managed.record_apply(
            None, obj, [], applied=paths, manager=manager, api_version=rt.api_version, time=self._now())
        return self._insert(rt, obj, dry_run)

    # ------------------------------------------------------------------ delete

    def delete(self, rt: ResourceType, namespace: str | None, name: str, *, propagation: str | None = None,
               dry_run: bool = False, preconditions: dict[str, Any] | None = None) -> Obj:
        if propagation not in (None, "Background", "Foreground", "Orphan"):
            raise bad_request(f'Unsupported value: "{propagation}": supported values: "Foreground", '
                              '"Background", "Orphan"')
        with self._lock:
            old = self._current(rt, namespace, name)
            self._check_preconditions(rt, old, preconditions or {})
            if dry_run:
                return _as_version(rt, old)
            return self._delete_locked(rt, old, propagation or "Background")

    def delete_collection(self, rt: ResourceType, *, namespace: str | None = None,
                          label_selector: str | None = None, field_selector: str | None = None,
                          propagation: str | None = None, dry_run: bool = False) -> ObjList:
        """Delete every object a list with these selectors returns; the deleted objects."""
        items = self.list(rt, namespace=namespace, label_selector=label_selector,
                          field_selector=field_selector).items
        deleted = []
        for item in items:
            try:
                deleted.append(self.delete(rt, _meta(item).get("namespace"), _meta(item)["name"],
                                           propagation=propagation, dry_run=dry_run))
            except ApiError as exc:
                if exc.code != 404:
                    raise
        return deleted

    def _check_preconditions(self, rt: ResourceType, obj: Obj, preconditions: dict[str, Any]) -> None:
        meta = _meta(obj)
        uid, rv = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != meta.get("uid"):
            raise conflict(rt, meta["name"], f"Precondition failed: UID in precondition: {uid}, UID in object "
                                             f"meta: {meta.get('uid')}")
        if rv and rv != meta.get("resourceVersion"):
            raise conflict(rt, meta["name"], f"Precondition failed: ResourceVersion in precondition: {rv}, "
                                             f"ResourceVersion in object meta: {meta.get('resourceVersion')}")

    def _delete_locked(self, rt: ResourceType, old: Obj, propagation: str) -> Obj:
        meta = _meta(old)
        if rt.kind == "Namespace" and not rt.group and meta["name"] in IMMORTAL_NAMESPACES:
            raise ApiError(403, "Forbidden", f'namespaces "{meta["name"]}" is forbidden: this namespace may not '
                                             "be deleted", {"name": meta["name"], "kind": "namespaces"})
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return _as_version(rt, old)
            marked = copy_json(old)
            marked["metadata"]["deletionTimestamp"] = self._now()
            marked["metadata"]["deletionGracePeriodSeconds"] = 0
            self._commit(rt, "MODIFIED", old, marked)
            return _as_version(rt, marked)
        if rt.kind == "Namespace" and not rt.group:
            self._delete_namespace_contents(meta["name"])
        if rt.kind == "CustomResourceDefinition" and rt.group == "apiextensions.k8s.io":
            self._unregister_crd(old)
        if propagation == "Orphan":
            self._orphan_dependents(meta["uid"])
        elif propagation == "Foreground":
            # Foreground: the owner goes last, after its dependents (as the garbage collector finishes it).
            self._delete_dependents(meta["uid"], "Foreground")
        if propagation != "Background":
            return self._remove(rt, old)
        # Background: the owner goes first; the dependents follow at once instead of after a GC pass.
        deleted = self._remove(rt, old)
        self._delete_dependents(meta["uid"], "Background")
        return deleted

    def _remove(self, rt: ResourceType, old: Obj) -> Obj:
        current = self._bucket(rt).get(_key(old))
        if current is None:
            return _as_version(rt, old)
        last = {**old, "metadata": dict(_meta(old))}
        self._commit(rt, "DELETED", current, last)
        return _as_version(rt, last)

    def _delete_dependents(self, uid: str, propagation: str) -> None:
        for storage_key, key in sorted(self._dependents.pop(uid, ())):
            dependent = self._objects.get(storage_key, {}).get(key)
            if dependent is not None and any(r.get("uid") == uid for r in _meta(dependent)["ownerReferences"]):
                self._delete_locked(self._types[storage_key], dependent, propagation)

    def _orphan_dependents(self, uid: str) -> None:
        for storage_key, key in sorted(self._dependents.get(uid, ())):
            dependent = self._objects.get(storage_key, {}).get(key)
            if dependent is None:
                continue
            rt = self._types[storage_key]
            new = copy_json(dependent)
            refs = [r for r in _meta(new).get("ownerReferences", []) if r.get("uid") != uid]
            if refs:
                new["metadata"]["ownerReferences"] = refs
            else:
                new["metadata"].pop("ownerReferences", None)
            self._replace(rt, dependent, new, manager=GC_MANAGER, subresource=None, dry_run=False)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for storage_key, bucket in list(self._objects.items()):
            rt = self._types.get(storage_key)
            if rt is None or not rt.namespaced:
                continue
            for key in [k for k in self._keys_sorted(rt) if k[0] == namespace]:
                if key in bucket:
                    self._delete_locked(rt, bucket[key], "Background")

    # ------------------------------------------------------------------ pod subresources

    def evict(self, namespace: str, name: str, *, dry_run: bool = False) -> dict[str, Any]:
        """POST pods/<name>/eviction (policy/v1): the pod is deleted (no PodDisruptionBudgets here)."""
        self.delete(self._pods(), namespace, name, dry_run=dry_run)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def bind(self, namespace: str, name: str, node: str, *, manager: str = "kube-scheduler",
             dry_run: bool = False) -> Obj:
        """POST pods/<name>/binding: set spec.nodeName once, as the scheduler does (409 if already bound)."""
        pods = self._pods()
        with self._lock:
            old = self._current(pods, namespace, name)
            bound = (old.get("spec") or {}).get("nodeName")
            if bound:
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": pod '
                                                f'{name} is already assigned to node "{bound}"',
                               {"name": name, "kind": "pods/binding"})
            new = copy_json(old)
            new["spec"]["nodeName"] = node
            conditions = [c for c in (new.get("status") or {}).get("conditions", []) if c.get("type") !=
                          "PodScheduled"]
            new.setdefault("status", {})["conditions"] = conditions + [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": self._now()}]
            _meta(new)["managedFields"] = managed.record_update(
                old, new, _meta(old).get("managedFields") or [], manager=manager, api_version="v1",
                time=self._now())
            if not dry_run:
                self._commit(pods, "MODIFIED", old, new)
            return _as_version(pods, new)

    def _pods(self) -> ResourceType:
        return self._types[("", "pods")]

    # ------------------------------------------------------------------ CRDs

    def _register_crd(self, crd: Obj) -> None:
        for rt in registry.from_crd(crd):
            self.registry.register(rt)
            self._types[rt.storage_key] = rt

    def _sync_crd(self, old: Obj, new: Obj) -> None:
        """An updated CRD serves its new versions and names; versions no longer served go away."""
        served = {(t.group, t.version, t.plural) for t in registry.from_crd(new)}
        for gone in registry.from_crd(old):
            if (gone.group, gone.version, gone.plural) not in served:
                self.registry.unregister(gone)
        self._register_crd(new)

    def _unregister_crd(self, crd: Obj) -> None:
        types = registry.from_crd(crd)
        if not types:
            return
        rt = self._types.get(types[0].storage_key, types[0])
        for key in list(self._keys_sorted(rt)):
            obj = self._bucket(rt).get(key)
            if obj is not None:
                self._remove(rt, obj)
        for served in types:
            self.registry.unregister(served)
        for watch in list(self._watches.pop(rt.storage_key, ())):
            watch.close()     # a real server ends the watches of a resource that is no longer served
        self._objects.pop(rt.storage_key, None)
        self._sorted_keys.pop(rt.storage_key, None)

    # ------------------------------------------------------------------ commit, watch, subscribe

    def _commit(self, rt: ResourceType, kind: str, old: Obj | None, new: Obj) -> None:
        """Store a change with the next resourceVersion, index it, log it and fan it out (under the lock)."""
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        storage_key, key = rt.storage_key, _key(new)
        self._types.setdefault(storage_key, rt)
        bucket = self._bucket(rt)
        if kind == "DELETED":
            bucket.pop(key, None)
        else:
            bucket[key] = new
        self._update_sorted_keys(storage_key, kind, key)
        self._index(rt, key, old, None if kind == "DELETED" else new)
        event = Event(kind, rt, new, old)
        self._latest[storage_key] = self._rv
        self._log.append((self._rv, event))
        while len(self._log) > self._log_size:
            dropped_rv, dropped = self._log.popleft()
            self._floors[dropped.rt.storage_key] = dropped_rv
        for watch in list(self._watches.get(storage_key, ())):
            watch._offer(event)
        if self._dispatcher.subscribers:
            self._dispatcher.put(event)

    def _update_sorted_keys(self, storage_key: tuple[str, str], kind: str, key: Key) -> None:
        keys = self._sorted_keys.get(storage_key)
        if keys is None or kind == "MODIFIED":
            return
        at = bisect.bisect_left(keys, key)
        if kind == "ADDED":
            keys.insert(at, key)
        elif at < len(keys) and keys[at] == key:
            del keys[at]

    def _index(self, rt: ResourceType, key: Key, old: Obj | None, new: Obj | None) -> None:
        if rt.kind == "Pod" and not rt.group:
            for obj, add in ((old, False), (new, True)):
                node = ((obj or {}).get("spec") or {}).get("nodeName")
                if node:
                    _index_member(self._pods_by_node, node, key, add)
        entry = (rt.storage_key, key)
        for obj, add in ((old, False), (new, True)):
            for ref in _meta(obj or {}).get("ownerReferences") or []:
                if isinstance(ref, dict) and ref.get("uid"):
                    _index_member(self._dependents, ref["uid"], entry, add)

    def watch(self, rt: ResourceType, *, namespace: str | None = None,
              label_selector: str | selectors.LabelSelector | None = None,
              field_selector: str | selectors.FieldSelector | None = None,
              resource_version: str | None = None) -> Watch:
        labels, fields = self._selectors(rt, label_selector, field_selector)
        watch = Watch(self, rt, namespace if rt.namespaced else None, labels, fields)
        with self._lock:
            if resource_version in (None, "", "0"):
                self._replay_state(rt, watch)
            else:
                self._replay_log(rt, watch, resource_version)
            self._watches.setdefault(rt.storage_key, set()).add(watch)
        return watch

    def _replay_state(self, rt: ResourceType, watch: Watch) -> None:
        bucket = self._bucket(rt)
        for key in self._keys_sorted(rt):
            if watch._matches(bucket[key]):
                watch._push(("ADDED", bucket[key]))

    def _replay_log(self, rt: ResourceType, watch: Watch, resource_version: str) -> None:
        try:
            since = int(resource_version)
        except ValueError as exc:
            raise bad_request(f'invalid resource version "{resource_version}"') from exc
        floor = self._floors.get(rt.storage_key, 0)
        if since < floor:
            raise expired(f"too old resource version: {since} ({floor + 1})")
        for rv, event in self._log:
            if rv > since and event.rt.storage_key == rt.storage_key:
                watch._offer(event)

    def _remove_watch(self, watch: Watch) -> None:
        with self._lock:
            self._watches.get(watch.rt.storage_key, set()).discard(watch)

    def subscribe(self, callback: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``callback`` for every event of every kind, in write order, from the dispatcher thread."""
        with self._lock:
            self._dispatcher.subscribers = [*self._dispatcher.subscribers, callback]
            self._dispatcher.start()

        def unsubscribe() -> None:
            with self._lock:
                self._dispatcher.subscribers = [s for s in self._dispatcher.subscribers if s is not callback]
        return unsubscribe

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until subscribers have seen every event, including those their own writes caused; False on
        timeout."""
        return self._dispatcher.flush(timeout)

    def close(self) -> None:
        """Stop the dispatcher thread and end every watch."""
        self._dispatcher.stop()
        with self._lock:
            watches = [w for group in self._watches.values() for w in group]
        for watch in watches:
            watch.close()


_M = TypeVar("_M")


def _index_member(index: dict[str, set[_M]], name: str, member: _M, add: bool) -> None:
    if add:
        index.setdefault(name, set()).add(member)
    elif name in index:
        index[name].discard(member)
        if not index[name]:
            del index[name]


def _apply_conflict(rt: ResourceType, name: str, found: list[tuple[dict[str, Any], managed.Path]]) -> ApiError:
    message, causes = managed.conflict_report(found)
    return ApiError(409, "Conflict", message, {**_details(rt, name), "causes": causes})
