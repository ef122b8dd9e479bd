"""The loop's informer cache: the latest known copy of every node, pod, DaemonSet, Service, Endpoints,
EndpointSlice, Namespace, Job, CronJob and PodDisruptionBudget, with indexes.

Fed by store events (and by handlers' own writes, so a controller never acts twice on a state it has already
changed before the event arrives). A copy is replaced only by a newer resourceVersion; a deletion leaves a
tombstone resourceVersion so a late ADDED/MODIFIED event of a deleted object cannot bring it back.

Owned by the loop thread (``gpuplan.sim.controllers.loop.Loop``): no locking. Read by the DaemonSet
controller, the node lifecycle controller, the kubelet runtime, the endpoints and disruption controllers.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from gpuplan.sim.api.registry import Registry, ResourceType

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

TRACKED = (
    "nodes",
    "pods",
    "daemonsets",
    "services",
    "endpoints",
    "endpointslices",
    "namespaces",
    "jobs",
    "cronjobs",
    "poddisruptionbudgets",
)


@dataclass(frozen=True)
class Change:
    """One object's transition as the cache saw it: ``old`` is None for an addition, ``new`` for a removal."""

    kind: str  # plural: one of TRACKED
    key: Key
    old: Obj | None
    new: Obj | None


def resource_type(registry: Registry, api_version: str, kind: str) -> ResourceType:
    """A kind the simulator's own controllers write (always served: they are built-ins)."""
    rt = registry.for_kind(api_version, kind)
    if rt is None:
        raise LookupError(f"the registry does not serve {api_version} {kind}")
    return rt


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata", {})
    return (meta.get("namespace") or "", meta["name"])


def rv_of(obj: Obj) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def controller_uid(obj: Obj) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            uid: str | None = ref.get("uid")
            return uid
    return None


class Cache:
    """Latest copies of the TRACKED kinds; pods indexed by node name and by controller uid."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[Key, Obj]] = {kind: {} for kind in TRACKED}
        self._rv: dict[tuple[str, Key], int] = {}
        self.pods_by_node: dict[str, set[Key]] = defaultdict(set)
        self.pods_by_owner: dict[str, set[Key]] = defaultdict(set)

    @property
    def nodes(self) -> dict[Key, Obj]:
        return self.objects["nodes"]

    @property
    def pods(self) -> dict[Key, Obj]:
        return self.objects["pods"]

    @property
    def daemonsets(self) -> dict[Key, Obj]:
        return self.objects["daemonsets"]

    @property
    def services(self) -> dict[Key, Obj]:
        return self.objects["services"]

    @property
    def jobs(self) -> dict[Key, Obj]:
        return self.objects["jobs"]

    @property
    def cronjobs(self) -> dict[Key, Obj]:
        return self.objects["cronjobs"]

    def node(self, name: str) -> Obj | None:
        return self.objects["nodes"].get(("", name))

    def apply(self, kind: str, obj: Obj, *, deleted: bool = False) -> Change | None:
        """Take a newer copy (or a deletion) of ``obj``; the change, or None when nothing new."""
        if kind not in self.objects:
            return None
        key = key_of(obj)
        rv = rv_of(obj)
        last = self._rv.get((kind, key), 0)
        old = self.objects[kind].get(key)
        if deleted:
            if old is None or rv < last:
                return None
            self._rv[(kind, key)] = max(rv, last)
            self._unindex(kind, key, old)
            del self.objects[kind][key]
            return Change(kind, key, old, None)
        if rv == last and old is not None and old is not obj:
            # The store's event of a write a handler already observed: the same state, in the copy that
            # shares the store's recurring parts (sim.api.sharing), kept instead of the write's full answer.
            self.objects[kind][key] = obj
            return None
        if rv <= last:
            return None
        self._rv[(kind, key)] = rv
        if old is not None:
            self._unindex(kind, key, old)
        self.objects[kind][key] = obj
        self._index(kind, key, obj)
        return Change(kind, key, old, obj)

    def pods_on(self, node_name: str) -> list[Obj]:
        return [self.pods[k] for k in sorted(self.pods_by_node.get(node_name, ()))]

    def pods_of(self, owner_uid: str) -> list[Obj]:
        return [self.pods[k] for k in sorted(self.pods_by_owner.get(owner_uid, ()))]

    def _index(self, kind: str, key: Key, obj: Obj) -> None:
        if kind != "pods":
            return
        node = obj.get("spec", {}).get("nodeName")
        if node:
            self.pods_by_node[node].add(key)
        owner = controller_uid(obj)
        if owner:
            self.pods_by_owner[owner].add(key)

    def _unindex(self, kind: str, key: Key, obj: Obj) -> None:
        if kind != "pods":
            return
        node = obj.get("spec", {}).get("nodeName")
        if node:
            _discard(self.pods_by_node, node, key)
        owner = controller_uid(obj)
        if owner:
            _discard(self.pods_by_owner, owner, key)


def _discard(index: dict[str, set[Key]], name: str, key: Key) -> None:
    keys = index.get(name)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[name]
