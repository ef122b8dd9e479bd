"""An in-memory cluster with the read interface of the Kubernetes provider, for other layers' unit tests.

Used by planner, CLI and view tests instead of :class:`~gpuplan.providers.kubernetes.KubernetesProvider`
(a real implementation of :class:`~gpuplan.providers.snapshot.ClusterReader`, not a mock).
It keeps objects as a server would (uid, resourceVersion from one counter, generation bumped when anything
but metadata and status changes, creationTimestamp) and builds snapshots with the same classification of
foreign components and the same node facts as the real provider. Every call is logged in ``calls``;
``fail_next`` makes the next call of a method raise, to test error paths above the provider.

    cluster = FakeKubernetes([hand_deployed_device_plugin], nodes=[lab_node])
    snapshot = cluster.refresh(stack="lab", namespace="gpu-operator", kinds=[("apps/v1", "DaemonSet")])
"""

from __future__ import annotations

import copy
import itertools
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gpuplan.providers import foreign
from gpuplan.providers.snapshot import STACK_LABEL, ClusterSnapshot, LiveObject, ObjectKey, node_facts

CREATION_TIME = "2026-01-01T00:00:00Z"  # fixed: snapshots of the fake are reproducible


class FakeKubernetes:
    """Objects and nodes in dicts; ``served`` limits the kinds the fake API serves (None: every kind)."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] = (),
        *,
        nodes: Iterable[Mapping[str, Any]] = (),
        server_version: str = "v1.34.1",
        served: Iterable[tuple[str, str]] | None = None,
    ) -> None:
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, Any]] = {}
        self._counter = itertools.count(1)
        self._failures: dict[str, list[Exception]] = {}
        self.server_version = server_version
        self.served = None if served is None else set(served)
        self.request_count = 0
        self.calls: list[tuple[str, Any]] = []
        for manifest in objects:
            self.put(manifest)
        for node in nodes:
            self.put_node(node)

    # ------------------------------------------------------------------------------------- test set-up

    def put(self, manifest: Mapping[str, Any]) -> LiveObject:
        """Create or replace an object, with the metadata a server would set; returns what it stored."""
        obj = copy.deepcopy(dict(manifest))
        key = ObjectKey.of(obj)
        metadata = obj.setdefault("metadata", {})
        previous = self._objects.get(key)
        if previous is None:
            metadata.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, key.ref)))
            metadata.setdefault("creationTimestamp", CREATION_TIME)
            metadata.setdefault("generation", 1)
        else:
            old_meta = previous["metadata"]
            metadata["uid"] = old_meta["uid"]
            metadata["creationTimestamp"] = old_meta["creationTimestamp"]
            changed = _spec_of(previous) != _spec_of(obj)
            metadata["generation"] = old_meta.get("generation", 1) + (1 if changed else 0)
        metadata["resourceVersion"] = str(next(self._counter))
        self._objects[key] = obj
        return LiveObject(key, copy.deepcopy(obj))

    def remove(self, key: ObjectKey) -> None:
        self._objects.pop(key, None)

    def put_node(self, node: Mapping[str, Any]) -> None:
        """Add or replace a Node (a full Node object, as the API returns it)."""
        obj = copy.deepcopy(dict(node))
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Node")
        self._nodes[str(obj.get("metadata", {}).get("name", ""))] = obj

    def remove_node(self, name: str) -> None:
        self._nodes.pop(name, None)

    def fail_next(self, method: str, error: Exception) -> None:
        """The next call of ``method`` (``refresh`` or ``read``) raises ``error``."""
        self._failures.setdefault(method, []).append(error)

    # ------------------------------------------------------------------------------------------- reads

    def refresh(self, *, stack: str, namespace: str, kinds: Sequence[tuple[str, str]]) -> ClusterSnapshot:
        self._call("refresh", {"stack": stack, "namespace": namespace, "kinds": tuple(kinds)})
        wanted = set(kinds)
        managed = {
            key: LiveObject(key, copy.deepcopy(obj))
            for key, obj in sorted(self._objects.items())
            if (key.api_version, key.kind) in wanted
            and self._serves(key.api_version, key.kind)
            and (obj["metadata"].get("labels") or {}).get(STACK_LABEL) == stack
        }
        daemonsets = self._all("apps/v1", "DaemonSet")
        found = foreign.foreign_daemonsets(daemonsets, stack=stack)
        found += foreign.foreign_cluster_policies(self._all("nvidia.com/v1", "ClusterPolicy"))
        namespace_key = ObjectKey("v1", "Namespace", None, namespace)
        namespace_object = self._objects.get(namespace_key)
        return ClusterSnapshot(
            managed=managed,
            foreign=tuple(sorted(found, key=lambda f: f.key)),
            nodes=tuple(node_facts(node) for _, node in sorted(self._nodes.items())),
            server_version=self.server_version,
            requests=1,
            namespace=LiveObject(namespace_key, copy.deepcopy(namespace_object))
            if namespace_object
            else None,
            unserved=tuple(kind for kind in dict.fromkeys(kinds) if not self._serves(*kind)),
        )

    def read(self, key: ObjectKey) -> LiveObject | None:
        self._call("read", key)
        obj = self._objects.get(key)
        if obj is None or not self._serves(key.api_version, key.kind):
            return None
        return LiveObject(key, copy.deepcopy(obj))

    def _all(self, api_version: str, kind: str) -> list[LiveObject]:
        if not self._serves(api_version, kind):
            return []
        return [
            LiveObject(key, copy.deepcopy(obj))
            for key, obj in sorted(self._objects.items())
            if (key.api_version, key.kind) == (api_version, kind)
        ]

    def _serves(self, api_version: str, kind: str) -> bool:
        return self.served is None or (api_version, kind) in self.served

    def _call(self, method: str, argument: Any) -> None:
        self.calls.append((method, argument))
        self.request_count += 1
        pending = self._failures.get(method)
        if pending:
            raise pending.pop(0)


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    # what bumps generation on a real server: anything outside metadata and status
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}
