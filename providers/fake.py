"""An in-memory cluster with the Kubernetes provider's interfaces, for other layers' unit tests.

Used by planner, CLI and view tests instead of the real provider: a real implementation of
:class:`~gpuplan.providers.snapshot.ClusterReader` and of the engine's protocols
(:class:`~gpuplan.providers.protocols.ApplyClient`: reads, writes, node operations), not a mock. It keeps
objects as a server would: uid, resourceVersion from one counter, generation bumped when anything but
metadata and status changes, creationTimestamp; every change is a watch event. Snapshots classify foreign
components and reduce nodes as the real provider does. Every call is logged in ``calls``; ``fail_next``
makes the next call of a method raise, to test error paths above the provider.

Semantics, as the writer's (:mod:`gpuplan.providers.kubernetes_write`), without the network:

- a write held to a resourceVersion (``expected_rv``) the object is no longer at raises
  :class:`~gpuplan.providers.protocols.DriftDetected` and writes nothing; so does a create of an object that
  exists, or a write of one the plan saw absent;
- ``apply`` is server-side apply for one field manager: what gpuplan sends is set (maps merge, lists and
  values replace), what it sent before and no longer sends is removed, and every other field (another
  manager's label, the status) stays;
- ``delete`` cascades at once to the objects it owns (``ownerReferences``), unless ``propagation`` is
  ``Orphan``; finalizers are not modelled, so ``wait_gone`` returns at once after a delete;
- lists take label selectors (equality and set-based) and the field selectors the engine uses
  (:mod:`gpuplan.providers.selectors`); a list's resourceVersion is the last one given out;
- ``watch`` yields the matching events after a resourceVersion, then returns, as a stream does at its
  timeout; a watch that had nothing to say advances :meth:`clock` by its timeout (tests that inject the
  fake's clock see the time a quiet watch takes);
- ``cordon`` sets ``spec.unschedulable``; ``evict`` and ``delete_pod`` delete the pod (``block_eviction``
  makes evictions refused, as a PodDisruptionBudget refuses them); ``proxy_get`` answers through
  ``proxy``, a test's callable;
- NFD's NodeFeatures are read into the snapshot as the real provider reduces them; the fake serves their
  kind when a NodeFeature was put (or ``served`` names it), so a fake without any stands for a cluster
  without NFD's CRD; ``node_features_forbidden`` answers the list as a 403 would.

Nothing happens on its own: DaemonSets get no pods unless a test enables the controller
(``controller=DaemonSetController()``, run after every write) or calls :meth:`FakeKubernetes.reconcile`
(:mod:`gpuplan.providers.fake_daemonsets`).

    cluster = FakeKubernetes([hand_deployed_device_plugin], nodes=[lab_node])
    snapshot = cluster.refresh(stack="lab", namespace="gpu-operator", kinds=[("apps/v1", "DaemonSet")])
"""

from __future__ import annotations

import copy
import itertools
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from gpuplan.errors import ProviderError
from gpuplan.providers import foreign
from gpuplan.providers.fake_daemonsets import DaemonSetController
from gpuplan.providers.protocols import (
    ANY_VERSION,
    ApplyClient,
    DriftDetected,
    Listing,
    WatchEvent,
)
from gpuplan.providers.selectors import field_matcher, label_matcher
from gpuplan.providers.snapshot import (
    NFD_NODE_NAME_LABEL,
    NODE_FEATURE,
    STACK_LABEL,
    ClusterReader,
    ClusterSnapshot,
    LiveObject,
    NodeFeatures,
    ObjectKey,
    group_keys,
    merge_node_features,
    node_facts,
    node_feature_devices,
)

CREATION_TIME = "2026-01-01T00:00:00Z"  # fixed: snapshots of the fake are reproducible
NODE = ("v1", "Node")
POD = ("v1", "Pod")
CORE = frozenset({NODE, POD})
"""Served whatever ``served`` says, as by every cluster."""


class FakeKubernetes:
    """Objects (nodes among them) in one dict; ``served`` limits the kinds the fake API serves (None: every
    kind; nodes and pods always); ``controller`` runs after every write (see the module doc)."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] = (),
        *,
        nodes: Iterable[Mapping[str, Any]] = (),
        server_version: str = "v1.34.1",
        served: Iterable[tuple[str, str]] | None = None,
        controller: DaemonSetController | None = None,
    ) -> None:
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._events: list[tuple[int, ObjectKey, WatchEvent]] = []
        self._counter = itertools.count(1)
        self._version = 0
        self._made: Counter[ObjectKey] = Counter()
        self._failures: dict[str, list[Exception]] = {}
        self._refusals: Counter[ObjectKey] = Counter()
        self._sent: dict[ObjectKey | tuple[ObjectKey, str], dict[str, Any]] = {}
        """What gpuplan last applied or created of each object: the fields it manages."""
        self.server_version = server_version
        self.served = None if served is None else set(served)
        self.controller = controller
        self.proxy: Callable[[str, str, int, str], bytes] | None = None
        """Answers ``proxy_get(namespace, pod, port, path)``; None: the fake serves no pod proxy."""
        self.now = 0.0
        self.node_features_forbidden = False
        """The NodeFeature list answers 403 (credentials without ``list`` on them)."""
        self.request_count = 0
        self.calls: list[tuple[str, Any]] = []
        for manifest in objects:
            self.put(manifest)
        for node in nodes:
            self.put_node(node)

    # ------------------------------------------------------------------------------------- test set-up

    def put(self, manifest: Mapping[str, Any]) -> LiveObject:
        """Create or replace an object, with the metadata a server would set; returns what it stored."""
        stored = self.store(manifest)
        return LiveObject(ObjectKey.of(stored), copy.deepcopy(stored))

    def remove(self, key: ObjectKey) -> None:
        self.discard(key)

    def put_node(self, node: Mapping[str, Any]) -> None:
        """Add or replace a Node (a full Node object, as the API returns it)."""
        self.put({"apiVersion": "v1", "kind": "Node", **node})

    def remove_node(self, name: str) -> None:
        self.discard(ObjectKey(*NODE, None, name))

    def fail_next(self, method: str, error: Exception) -> None:
        """The next call of ``method`` (``refresh``, ``read``, ``apply`` ...) raises ``error``."""
        self._failures.setdefault(method, []).append(error)

    def block_eviction(self, pod: ObjectKey, times: int = 1) -> None:
        """The next ``times`` evictions of ``pod`` are refused, as a PodDisruptionBudget refuses them."""
        self._refusals[pod] += times

    def reconcile(self) -> None:
        """One pass of the DaemonSet controller (``controller``, or a default one when none is set)."""
        (self.controller or DaemonSetController()).reconcile(self)

    def clock(self) -> float:
        """Seconds as the fake's watches spend them (see the module doc), for a test's injected clock."""
        return self.now

    def close(self) -> None:
        return None

    # ------------------------------------------------------------------- the store (the controller's too)

    def objects(self, api_version: str, kind: str) -> list[dict[str, Any]]:
        """The stored objects of a kind, by key (copies)."""
        return [
            copy.deepcopy(obj)
            for key, obj in sorted(self._objects.items())
            if (key.api_version, key.kind) == (api_version, kind)
        ]

    def dump(self) -> dict[ObjectKey, dict[str, Any]]:
        """Every stored object by key (copies), for a test that compares a whole cluster before and after."""
        return {key: copy.deepcopy(obj) for key, obj in sorted(self._objects.items())}

    def store(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Write ``manifest`` as the server stores it (uid, resourceVersion, generation), with its event."""
        obj = copy.deepcopy(dict(manifest))
        key = ObjectKey.of(obj)
        metadata = obj.setdefault("metadata", {})
        previous = self._objects.get(key)
        if previous is None:
            made = self._made[key]
            self._made[key] += 1
            identity = key.ref if made == 0 else f"{key.ref}#{made}"  # a recreated object is another one
            metadata.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, identity)))
            metadata.setdefault("creationTimestamp", CREATION_TIME)
            metadata.setdefault("generation", 1)
        else:
            old_meta = previous["metadata"]
            metadata["uid"] = old_meta["uid"]
            metadata["creationTimestamp"] = old_meta["creationTimestamp"]
            changed = _spec_of(previous) != _spec_of(obj)
            metadata["generation"] = old_meta.get("generation", 1) + (1 if changed else 0)
        metadata["resourceVersion"] = self._next_version()
        self._objects[key] = obj
        self._event("ADDED" if previous is None else "MODIFIED", key, obj)
        return copy.deepcopy(obj)

    def discard(self, key: ObjectKey) -> None:
        """Remove the object (nothing it owns), with its DELETED event."""
        obj = self._objects.pop(key, None)
        self._sent.pop(key, None)
        if obj is not None:
            obj["metadata"]["resourceVersion"] = self._next_version()
            self._event("DELETED", key, obj)

    def _next_version(self) -> str:
        self._version = next(self._counter)
        return str(self._version)

    def _event(self, kind: str, key: ObjectKey, obj: Mapping[str, Any]) -> None:
        self._events.append((self._version, key, WatchEvent(kind, copy.deepcopy(obj))))

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
            nodes=tuple(node_facts(node) for node in self.objects(*NODE)),
            server_version=self.server_version,
            requests=1,
            namespace=LiveObject(namespace_key, copy.deepcopy(namespace_object))
            if namespace_object
            else None,
            unserved=tuple(kind for kind in dict.fromkeys(kinds) if not self._serves(*kind)),
            node_features=self._node_features(),
        )

    def _node_features(self) -> NodeFeatures:
        listed = [
            obj
            for obj in self.objects(*NODE_FEATURE)
            if NFD_NODE_NAME_LABEL in (obj["metadata"].get("labels") or {})
        ]
        named = self.served is not None and NODE_FEATURE in self.served
        if not (listed or named):
            return NodeFeatures("not-served")
        if self.node_features_forbidden:
            return NodeFeatures("forbidden", detail="nodefeatures.nfd.k8s-sigs.io is forbidden")
        return merge_node_features(node_feature_devices(obj) for obj in listed)

    def read(self, key: ObjectKey) -> LiveObject | None:
        self._call("read", key)
        return self._live(key)

    def read_many(self, keys: Iterable[ObjectKey]) -> dict[ObjectKey, LiveObject]:
        """One call per kind and namespace, as the real provider spends one request per group."""
        found: dict[ObjectKey, LiveObject] = {}
        for (api_version, kind, namespace), names in group_keys(keys).items():
            self._call("read_many", (api_version, kind, namespace, tuple(names)))
            for name in names:
                live = self._live(ObjectKey(api_version, kind, namespace, name))
                if live is not None:
                    found[live.key] = live
        return found

    def list_objects(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        self._call("list", (api_version, kind, namespace, label_selector, field_selector))
        if not self._serves(api_version, kind):
            return Listing((), None)
        matches = self._matcher(api_version, kind, namespace, label_selector, field_selector)
        items = tuple(
            LiveObject(key, copy.deepcopy(obj))
            for key, obj in sorted(self._objects.items())
            if matches(key, obj)
        )
        return Listing(items, str(self._version))

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        return self.list_objects(
            *POD, namespace=namespace, label_selector=label_selector, field_selector=field_selector
        )

    def list_nodes(self, *, label_selector: str | None = None) -> Listing:
        return self.list_objects(*NODE, label_selector=label_selector)

    def watch(
        self,
        api_version: str,
        kind: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        timeout: float = 30.0,
    ) -> Iterator[WatchEvent]:
        self._call("watch", (api_version, kind, namespace, label_selector, field_selector, resource_version))
        if not self._serves(api_version, kind):
            raise ProviderError(f"the cluster does not serve {api_version} {kind}")
        matches = self._matcher(api_version, kind, namespace, label_selector, field_selector)
        return self._stream(matches, resource_version, timeout)

    def _stream(
        self, matches: Callable[[ObjectKey, Mapping[str, Any]], bool], since: str | None, timeout: float
    ) -> Iterator[WatchEvent]:
        if since is None:  # no version: the current objects as ADDED, as a watch from "now" starts
            pending = [WatchEvent("ADDED", o) for k, o in sorted(self._objects.items()) if matches(k, o)]
        else:
            pending = [e for v, k, e in self._events if v > int(since) and matches(k, e.object)]
        for event in pending:
            yield WatchEvent(event.type, copy.deepcopy(event.object))
        if not pending:
            self.now += timeout

    def proxy_get(self, namespace: str, pod: str, port: int, path: str) -> bytes:
        self._call("proxy_get", (namespace, pod, port, path))
        if self.proxy is None:
            raise ProviderError(f"scrape {namespace}/{pod}:{port}{path}: the fake serves no pod proxy")
        return self.proxy(namespace, pod, port, path)

    def _live(self, key: ObjectKey) -> LiveObject | None:
        obj = self._objects.get(key)
        if obj is None or not self._serves(key.api_version, key.kind):
            return None
        return LiveObject(key, copy.deepcopy(obj))

    def _matcher(
        self,
        api_version: str,
        kind: str,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
    ) -> Callable[[ObjectKey, Mapping[str, Any]], bool]:
        labels, fields = label_matcher(label_selector), field_matcher(field_selector)

        def matches(key: ObjectKey, obj: Mapping[str, Any]) -> bool:
            return (
                (key.api_version, key.kind) == (api_version, kind)
                and (namespace is None or key.namespace == namespace)
                and labels(obj)
                and fields(obj)
            )

        return matches

    def _all(self, api_version: str, kind: str) -> list[LiveObject]:
        if not self._serves(api_version, kind):
            return []
        return [LiveObject(ObjectKey.of(obj), obj) for obj in self.objects(api_version, kind)]

    def _serves(self, api_version: str, kind: str) -> bool:
        return self.served is None or (api_version, kind) in self.served or (api_version, kind) in CORE

    def _call(self, method: str, argument: Any) -> None:
        self.calls.append((method, argument))
        self.request_count += 1
        pending = self._failures.get(method)
        if pending:
            raise pending.pop(0)

    # ------------------------------------------------------------------------------------------ writes

    def apply(
        self,
        obj: Mapping[str, Any],
        *,
        expected_rv: str | None = ANY_VERSION,
        dry_run: bool = False,
        field_manager: str | None = None,
    ) -> LiveObject:
        key = ObjectKey.of(obj)
        self._call("apply", key)
        live = self._guard(key, expected_rv)
        sent = _configuration(obj)
        # each manager's last applied configuration: what it omits now is removed, another's stays
        sent_key = key if field_manager is None else (key, field_manager)
        body = sent if live is None else _applied_over(live.manifest, self._sent.get(sent_key, {}), sent)
        written = self._write(body, dry_run)
        if not dry_run:
            self._sent[sent_key] = sent
        return written

    def create(self, obj: Mapping[str, Any], *, dry_run: bool = False) -> LiveObject:
        key = ObjectKey.of(obj)
        self._call("create", key)
        self._guard(key, None)
        written = self._write(_configuration(obj), dry_run)
        if not dry_run:
            self._sent[key] = _configuration(obj)
        return written

    def delete(
        self,
        key: ObjectKey,
        *,
        propagation: str = "Background",
        expected_rv: str | None = ANY_VERSION,
        dry_run: bool = False,
    ) -> LiveObject | None:
        self._call("delete", key)
        live = self._live(key)
        if live is None and expected_rv in (ANY_VERSION, None):
            return None
        self._guard(key, expected_rv)
        assert live is not None  # the guard let only a live object through
        if not dry_run:
            self._delete_cascading(key, orphan=propagation == "Orphan")
            self._reconciled()
        return live

    def replace(
        self, obj: Mapping[str, Any], *, expected_rv: str | None = ANY_VERSION, timeout: float = 120.0
    ) -> LiveObject:
        key = ObjectKey.of(obj)
        old = self.delete(key, expected_rv=expected_rv)
        if old is not None:
            self.wait_gone(key, uid=old.uid, timeout=timeout)
        return self.create(obj)

    def wait_gone(self, key: ObjectKey, *, uid: str | None, timeout: float) -> None:
        self._call("wait_gone", key)
        live = self._live(key)
        if live is not None and (uid is None or live.uid == uid):
            self.now += timeout  # nothing in the fake will remove it
            raise ProviderError(
                f"{key.ref} still exists {timeout:g}s after it was deleted",
                where=key.ref,
                hint="check what holds it (finalizers, a stuck garbage collector)",
            )

    def _guard(self, key: ObjectKey, expected_rv: str | None) -> LiveObject | None:
        """The live object, when it is at ``expected_rv`` (None: absent; ANY_VERSION: any); else drift."""
        live = self._live(key)
        found = live.resource_version if live is not None else None
        if expected_rv != ANY_VERSION and found != expected_rv:
            raise DriftDetected(key, expected=expected_rv, found=live)
        return live

    def _write(self, body: dict[str, Any], dry_run: bool) -> LiveObject:
        key = ObjectKey.of(body)
        if not self._serves(key.api_version, key.kind):
            raise ProviderError(
                f"the cluster does not serve {key.api_version} {key.kind}",
                where=key.ref,
                hint="install the CustomResourceDefinition of this kind first",
            )
        if dry_run:
            return LiveObject(key, body)
        stored = self.store(body)
        self._reconciled()
        current = self._live(key)
        return current if current is not None else LiveObject(key, stored)

    def _delete_cascading(self, key: ObjectKey, *, orphan: bool) -> None:
        obj = self._objects.get(key)
        if obj is None:
            return
        uid = obj["metadata"].get("uid")
        self.discard(key)
        if orphan:
            return
        for dependent, manifest in sorted(self._objects.items()):
            refs = manifest["metadata"].get("ownerReferences") or ()
            if any(ref.get("uid") == uid for ref in refs):
                self._delete_cascading(dependent, orphan=False)

    def _reconciled(self) -> None:
        if self.controller is not None:
            self.controller.reconcile(self)

    # ---------------------------------------------------------------------------------- node operations

    def cordon(self, node: str, on: bool = True) -> LiveObject:
        key = ObjectKey(*NODE, None, node)
        self._call("cordon", (node, on))
        live = self._live(key)
        if live is None:
            raise ProviderError(f"node {node} not found", where=key.ref)
        body = copy.deepcopy(dict(live.manifest))
        spec = body.setdefault("spec", {})
        if on:
            spec["unschedulable"] = True
        else:
            spec.pop("unschedulable", None)
        if body == live.manifest:
            return live
        return self._write(body, dry_run=False)

    def label_node(self, node: str, labels: Mapping[str, str | None]) -> LiveObject:
        key = ObjectKey(*NODE, None, node)
        self._call("label_node", (node, dict(labels)))
        live = self._live(key)
        if live is None:
            raise ProviderError(f"node {node} not found", where=key.ref)
        body = copy.deepcopy(dict(live.manifest))
        current = body.setdefault("metadata", {}).setdefault("labels", {})
        for label, value in labels.items():
            if value is None:
                current.pop(label, None)
            else:
                current[label] = value
        return live if body == live.manifest else self._write(body, dry_run=False)

    def evict(self, pod: ObjectKey) -> bool:
        self._call("evict", pod)
        if self._refusals[pod] > 0:
            self._refusals[pod] -= 1
            return False
        if pod in self._objects:
            self._delete_cascading(pod, orphan=False)
            self._reconciled()
        return True

    def delete_pod(self, pod: ObjectKey, *, grace_seconds: int | None = None) -> bool:
        self._call("delete_pod", pod)
        if pod not in self._objects:
            return False
        self._delete_cascading(pod, orphan=False)
        self._reconciled()
        return True


SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields")


def _configuration(obj: Mapping[str, Any]) -> dict[str, Any]:
    """What a write sends as gpuplan's fields: not the status, nor the metadata the server keeps."""
    sent = {key: copy.deepcopy(value) for key, value in obj.items() if key != "status"}
    metadata = sent.get("metadata") or {}
    sent["metadata"] = {key: value for key, value in metadata.items() if key not in SERVER_METADATA}
    return sent


def _applied_over(
    live: Mapping[str, Any], before: Mapping[str, Any], sent: Mapping[str, Any]
) -> dict[str, Any]:
    """Server-side apply, for one field manager: ``live`` less the fields it sent ``before`` and no longer
    sends, with what it ``sent`` now set (maps merge, lists and values replace); others' fields stay."""
    merged = copy.deepcopy(dict(live))
    for path in _leaves(before):
        if not _holds(sent, path):
            _drop(merged, path)
    _merge(merged, sent)
    return merged


def _leaves(value: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    for key, item in value.items():
        if isinstance(item, Mapping) and item:
            yield from _leaves(item, (*prefix, key))
        else:
            yield (*prefix, key)


def _holds(value: Any, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return False
        value = value[key]
    return True


def _drop(value: dict[str, Any], path: tuple[str, ...]) -> None:
    parent: Any = value
    for key in path[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    if isinstance(parent, dict):
        parent.pop(path[-1], None)


def _merge(into: dict[str, Any], sent: Mapping[str, Any]) -> None:
    for key, value in sent.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _spec_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    # what bumps generation on a real server: anything outside metadata and status
    return {key: value for key, value in obj.items() if key not in ("metadata", "status")}


def _implements(fake: FakeKubernetes) -> tuple[ApplyClient, ClusterReader]:
    """Never called: mypy checks here that the fake implements every protocol the engine types against."""
    return fake, fake
