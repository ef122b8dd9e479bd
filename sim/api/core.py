"""The store's state and its one commit path, shared by the layers of ``sim.api.store.Store``.

``Store`` is built in layers, each a module of its own: ``StoreCore`` (here: the lock, the object table, the
event log, the subscriber dispatcher, the resourceVersion counter, ``_commit`` and the request checks every
verb shares) <- ``lifecycle.Lifecycle`` (replacing and deleting stored objects: finalizers, propagation,
namespace and CRD cascades) <- ``writes.Writes`` (create, update, patch and server-side apply: from a request
to the object to store, with defaults, admission and strategies) <- ``store.Store`` (reads, delete verbs,
pod subresources, watch and subscribe: the public interface).

Every ``_``-method documented "under the lock" expects the caller to hold ``self._lock`` (an RLock).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpuplan.sim.api import errors, registry, sharing, validation
from gpuplan.sim.api.dispatch import Dispatcher
from gpuplan.sim.api.objects import Obj, as_version, copy_json, key, meta, now_rfc3339
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.api.table import ObjectTable, object_key
from gpuplan.sim.api.watchlog import Event, EventLog

NAMESPACES = registry.BUILTIN[0]
BUILTIN = registry.BUILTIN
PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")


class StoreCore:
    """State and commit; see the module doc for the layers above it."""

    def __init__(
        self,
        registry: registry.Registry,
        *,
        event_log_size: int = 20000,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.registry = registry
        self._clock = clock or (lambda: datetime.now(UTC))
        self._lock = threading.RLock()
        self._rv = 0
        self._table = ObjectTable(BUILTIN)
        self._log = EventLog(event_log_size)
        self._pool = sharing.Pool()  # this store's shared instances (sim.api.sharing)
        self._dispatcher = Dispatcher(self._pool)
        # id(stored object) -> (it, its read-only answer), while it is the stored version: the next read-only
        # write of the object copies only what changed (the loop's cache holds those answers anyway)
        self._answers: dict[int, tuple[Obj, Obj]] = {}

    # ------------------------------------------------------------------ commit

    def _commit(
        self,
        rt: ResourceType,
        kind: str,
        old: Obj | None,
        new: Obj,
        *,
        read_only: bool = False,
        pooled: bool = True,
    ) -> Obj | None:
        """Store a change with the next resourceVersion, index it, log it and fan it out (under the lock).
        ``read_only``: also make the subscribers' copy of it now and return it, the writer's answer too.
        ``pooled`` False: the writer made ``new``'s recurring parts one instance each (``Writes.create``'s
        ``owned``); they are not looked for in the pool."""
        self._rv += 1
        new["metadata"]["resourceVersion"] = str(self._rv)
        if kind == "DELETED":
            self._table.drop(rt, new)
        else:
            if pooled:
                sharing.share(new, old, self._pool)
            self._table.put(rt, old, new)
        event = Event(kind, rt, new, old)
        self._log.append(self._rv, event)
        answer = self._read_only_answer(rt, kind, old, new) if read_only else None
        if not read_only and old is not None:
            self._answers.pop(id(old), None)
        if self._dispatcher.wants(rt.storage_key, read_only):
            self._dispatcher.put(event, answer)
        else:
            self._dispatcher.passed()
        return answer

    def _read_only_answer(self, rt: ResourceType, kind: str, old: Obj | None, new: Obj) -> Obj:
        """The subscribers' copy of ``new``, made from the one of ``old`` where ``old``'s last write was
        read-only too (the parts ``new`` keeps from ``old`` are not copied again), and remembered for the
        object's next write (under the lock)."""
        previous = self._answers.pop(id(old), None) if old is not None else None
        if previous is not None and (
            previous[0] is not old or previous[1].get("apiVersion") != rt.api_version
        ):
            previous = None  # another object that took the id, or another version of a CRD's kind
        answer = sharing.subscriber_copy(rt, new, self._pool, previous)
        if kind != "DELETED":
            self._answers[id(new)] = (new, answer)
        return answer

    def _answer(self, rt: ResourceType, obj: Obj, read_only: bool) -> Obj:
        """What a write answers with: a deep copy, or (``read_only``) the cheaper copy subscribers get."""
        return sharing.subscriber_copy(rt, obj, self._pool) if read_only else as_version(rt, obj)

    # ------------------------------------------------------------------ lookups

    def _now(self) -> str:
        return now_rfc3339(self._clock)

    def _bucket(self, rt: ResourceType) -> dict[tuple[str, str], Obj]:
        return self._table.bucket(rt)

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> Obj:
        """The stored object, or 404 (under the lock)."""
        old = self._table.get(rt, namespace, name)
        if old is None:
            raise errors.not_found(rt, name)
        return old

    def _exists(self, rt: ResourceType, obj: Obj) -> bool:
        return key(obj) in self._bucket(rt)

    def _priority_classes(self) -> list[Obj]:
        """The stored PriorityClasses, for the Priority admission plugin (none where the kind is not
        served)."""
        rt = self.registry.get(*PRIORITY_CLASSES)
        return list(self._bucket(rt).values()) if rt is not None else []

    # ------------------------------------------------------------------ request checks

    def _check_type(self, rt: ResourceType, obj: Any, *, owned: bool = False) -> Obj:
        """A copy of a request body of kind ``rt``: 400 for another kind or version, or not an object.
        ``owned``: ``obj`` is already the store's private copy (a patch result), used as it is."""
        if not isinstance(obj, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version and api_version != rt.api_version:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the "
                f"expected API version ({rt.api_version})"
            )
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        out: Obj = obj if owned else copy_json(obj)
        out["apiVersion"], out["kind"] = rt.api_version, rt.kind
        if not isinstance(out.get("metadata"), dict):
            out["metadata"] = {}
        return out

    def _check_served(self, rt: ResourceType) -> None:
        """Writes to a kind the registry no longer serves (a deleted CRD's) are 404, as on a real server."""
        if self.registry.get(rt.group, rt.version, rt.plural) is None:
            raise errors.not_served(rt)

    def _check_strict(self, rt: ResourceType, obj: Obj, field_validation: str | None) -> None:
        if (field_validation or "").lower() == "strict":
            unknown = validation.unknown_fields(rt, obj, rt in registry.BUILTIN)
            if unknown:
                raise errors.bad_request(validation.strict_message(unknown))

    def _require_namespace(self, rt: ResourceType, namespace: str) -> None:
        if rt.namespaced and ("", namespace) not in self._bucket(NAMESPACES):
            raise errors.not_found(NAMESPACES, namespace)

    @staticmethod
    def _object_key(rt: ResourceType, namespace: str | None, name: str) -> tuple[str, str]:
        return object_key(rt, namespace, name)

    @staticmethod
    def _part(rt: ResourceType, subresource: str | None) -> str | None:
        """Which part of the object a write owns in managedFields: status, main (all but status), or all."""
        if subresource == "status":
            return "status"
        return "main" if "status" in rt.subresources else None

    @staticmethod
    def _name(obj: Obj) -> str:
        return str(meta(obj).get("name") or "")
