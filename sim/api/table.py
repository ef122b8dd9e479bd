"""The store's object table: one dict per resource keyed by (namespace, name), with its indexes.

Indexes kept in step with every committed change (``put``/``drop``):

- sorted keys per resource (built on first list, then maintained by bisection), so lists and pages are in
  (namespace, name) order as etcd returns them;
- pods by ``spec.nodeName``, so a kubelet's ``fieldSelector=spec.nodeName=X`` list does not scan every pod;
- dependents by owner uid (from ``metadata.ownerReferences``), for deletion propagation.

Stored dicts are never mutated: a write stores a new dict. Not thread-safe by itself; ``sim.api.store`` calls
it under its lock.
"""

from __future__ import annotations

import bisect
from typing import TypeVar

from gpuplan.sim.api import selectors
from gpuplan.sim.api.objects import Key, Obj, StorageKey, key, meta
from gpuplan.sim.api.registry import ResourceType

Dependent = tuple[StorageKey, Key]


class ObjectTable:
    """Every stored object, by resource and key, and the kinds (``types``) those resources are."""

    def __init__(self, types: tuple[ResourceType, ...]) -> None:
        self.objects: dict[StorageKey, dict[Key, Obj]] = {}
        self.types: dict[StorageKey, ResourceType] = {rt.storage_key: rt for rt in reversed(types)}
        self._sorted_keys: dict[StorageKey, list[Key]] = {}
        self._pods_by_node: dict[str, set[Key]] = {}
        self._dependents: dict[str, set[Dependent]] = {}

    def bucket(self, rt: ResourceType) -> dict[Key, Obj]:
        return self.objects.setdefault(rt.storage_key, {})

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> Obj | None:
        return self.bucket(rt).get(object_key(rt, namespace, name))

    def keys_sorted(self, rt: ResourceType) -> list[Key]:
        keys = self._sorted_keys.get(rt.storage_key)
        if keys is None:
            keys = sorted(self.bucket(rt))
            self._sorted_keys[rt.storage_key] = keys
        return keys

    def keys_for(self, rt: ResourceType, fields: selectors.FieldSelector) -> list[Key]:
        """The sorted keys a list with ``fields`` must scan: a node's pods only, when it selects one node."""
        node = fields.exact("spec.nodeName") if rt.kind == "Pod" and not rt.group else None
        if node is None:
            return self.keys_sorted(rt)
        bucket = self.bucket(rt)
        return sorted(k for k in self._pods_by_node.get(node, ()) if k in bucket)

    def put(self, rt: ResourceType, old: Obj | None, new: Obj) -> None:
        """Store ``new`` (added, or replacing ``old``) and index it."""
        self.types.setdefault(rt.storage_key, rt)
        found = key(new)
        added = found not in self.bucket(rt)
        self.bucket(rt)[found] = new
        keys = self._sorted_keys.get(rt.storage_key)
        if added and keys is not None:
            keys.insert(bisect.bisect_left(keys, found), found)
        self._index(rt, found, old, new)

    def drop(self, rt: ResourceType, old: Obj) -> None:
        """Remove the object stored as ``old`` and its index entries."""
        found = key(old)
        self.bucket(rt).pop(found, None)
        keys = self._sorted_keys.get(rt.storage_key)
        if keys is not None:
            at = bisect.bisect_left(keys, found)
            if at < len(keys) and keys[at] == found:
                del keys[at]
        self._index(rt, found, old, None)

    def forget(self, rt: ResourceType) -> None:
        """Drop a resource's whole slot (a deleted CRD's kind, once its objects are gone)."""
        self.objects.pop(rt.storage_key, None)
        self._sorted_keys.pop(rt.storage_key, None)

    def dependents(self, uid: str, *, take: bool = False) -> list[Dependent]:
        """(storage key, key) of the objects whose ownerReferences name ``uid``, sorted; ``take`` also
        forgets the entry (the owner is going away)."""
        found = self._dependents.pop(uid, set()) if take else self._dependents.get(uid, set())
        return sorted(found)

    def stored(self, dependent: Dependent) -> tuple[ResourceType, Obj] | None:
        storage_key, found = dependent
        obj = self.objects.get(storage_key, {}).get(found)
        return None if obj is None else (self.types[storage_key], obj)

    def _index(self, rt: ResourceType, found: Key, old: Obj | None, new: Obj | None) -> None:
        """Move the object's index entries from ``old`` to ``new``; a part both hold by one instance (a
        status write keeps the spec and the ownerReferences) moves nothing."""
        both = old is not None and new is not None
        kept_spec = old is not None and new is not None and old.get("spec") is new.get("spec")
        if rt.kind == "Pod" and not rt.group and not kept_spec:
            for obj, add in ((old, False), (new, True)):
                node = ((obj or {}).get("spec") or {}).get("nodeName")
                if node:
                    _index_member(self._pods_by_node, node, found, add)
        if both and meta(old or {}).get("ownerReferences") is meta(new or {}).get("ownerReferences"):
            return
        entry = (rt.storage_key, found)
        for obj, add in ((old, False), (new, True)):
            for ref in meta(obj or {}).get("ownerReferences") or []:
                if isinstance(ref, dict) and ref.get("uid"):
                    _index_member(self._dependents, ref["uid"], entry, add)


def object_key(rt: ResourceType, namespace: str | None, name: str) -> Key:
    """The key of ``name``: cluster-scoped kinds ignore the namespace."""
    return ((namespace or "") if rt.namespaced else "", name)


_M = TypeVar("_M")


def _index_member(index: dict[str, set[_M]], name: str, member: _M, add: bool) -> None:
    if add:
        index.setdefault(name, set()).add(member)
    elif name in index:
        index[name].discard(member)
        if not index[name]:
            del index[name]
