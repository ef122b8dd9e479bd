"""What a refresh saw: plain frozen values, so no Kubernetes client type leaks out of providers/.

Built by :class:`gpuplan.providers.kubernetes.KubernetesProvider` (the real cluster) and
:class:`gpuplan.providers.fake.FakeKubernetes` (unit tests of other layers); read by the planner (diff, plan,
conflicts, compatibility checks) and by saved plans, which hold every object they read to its
:class:`Fingerprint` (:meth:`ClusterSnapshot.content_fingerprints`) and record its resourceVersion for apply's
write preconditions (:meth:`ClusterSnapshot.resource_versions`).

:class:`ClusterReader` is the read interface both providers implement.
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

STACK_LABEL = "gpuplan.io/stack"  # the label every managed object carries (modules/common.py renders it)


@dataclass(frozen=True, order=True)
class ObjectKey:
    """Identifies one object: apiVersion, kind, namespace (None when cluster-scoped) and name."""

    api_version: str
    kind: str
    namespace: str | None
    name: str

    @property
    def ref(self) -> str:
        """``<apiVersion>/<Kind>/<namespace>/<name>``; the namespace is left out for cluster-scoped
        objects."""
        parts = [self.api_version, self.kind, self.namespace, self.name]
        return "/".join(part for part in parts if part is not None)

    @classmethod
    def of(cls, manifest: Mapping[str, Any]) -> ObjectKey:
        metadata = manifest.get("metadata") or {}
        return cls(
            str(manifest.get("apiVersion", "")),
            str(manifest.get("kind", "")),
            metadata.get("namespace") or None,
            str(metadata.get("name", "")),
        )


@dataclass(frozen=True)
class LiveObject:
    """One object as the server returned it (the full manifest, status and managedFields included)."""

    key: ObjectKey
    manifest: Mapping[str, Any]

    @property
    def metadata(self) -> Mapping[str, Any]:
        metadata: Mapping[str, Any] = self.manifest.get("metadata") or {}
        return metadata

    @property
    def uid(self) -> str | None:
        return self.metadata.get("uid")

    @property
    def resource_version(self) -> str | None:
        return self.metadata.get("resourceVersion")

    @property
    def generation(self) -> int | None:
        return self.metadata.get("generation")

    @property
    def labels(self) -> Mapping[str, str]:
        labels: Mapping[str, str] = self.metadata.get("labels") or {}
        return labels

    @property
    def annotations(self) -> Mapping[str, str]:
        annotations: Mapping[str, str] = self.metadata.get("annotations") or {}
        return annotations

    @property
    def managed_fields(self) -> Sequence[Mapping[str, Any]]:
        managed: Sequence[Mapping[str, Any]] = self.metadata.get("managedFields") or ()
        return managed

    @classmethod
    def from_manifest(cls, manifest: Mapping[str, Any]) -> LiveObject:
        return cls(ObjectKey.of(manifest), manifest)

    def fingerprint(self) -> Fingerprint:
        return Fingerprint(
            uid=self.uid or "", generation=self.generation, content=content_digests(self.manifest)
        )


@dataclass(frozen=True)
class Fingerprint:
    """What a saved plan holds a live object to: the same object (``uid``), the same spec (``generation``,
    which the server moves on every spec change and never on a status write) and the same content outside
    the spec (``content``: a digest per part, see :func:`content_digests`). A status write moves none of them,
    while it does move the resourceVersion, so a plan held to these stays fresh on a cluster whose pods come
    and go (planner/plan/planfile.py ``check_fresh``)."""

    uid: str
    generation: int | None
    content: Mapping[str, str]


# metadata the server writes on its own (identity, bookkeeping) and the key's parts, which never differ
_BOOKKEEPING = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
    }
)
# annotations controllers write after a spec change (already seen as a generation move), not content
_CONTROLLER_ANNOTATIONS = frozenset(
    {"deprecated.daemonset.template.generation", "deployment.kubernetes.io/revision"}
)
# metadata parts digested apart (as are the annotations), so a stale plan can say what moved ("its labels")
_METADATA_PARTS = ("labels", "ownerReferences", "finalizers", "deletionTimestamp")


def content_digests(manifest: Mapping[str, Any]) -> dict[str, str]:
    """Part name -> a short SHA-256 of that part of ``manifest``, over what a status write never moves.

    Parts: ``metadata.labels``, ``metadata.annotations`` (less the ones controllers write after a spec
    change), ``metadata.ownerReferences``, ``metadata.finalizers``, ``metadata.deletionTimestamp``, the rest
    of the metadata as ``metadata`` (without the server's bookkeeping: resourceVersion, managedFields ...),
    and, for kinds without ``metadata.generation`` (ConfigMap, ServiceAccount, RBAC, Service, RuntimeClass
    ...), every top-level field but ``status`` (``data``, ``rules``, ``subjects``, ``spec``, ``handler`` ...).
    For kinds with a generation the spec is left to it: it moves exactly when the spec does, and a digest of
    the spec would also move when a newer API server defaults a new field on read. Absent parts are left out,
    so a part that appears or disappears is a change too."""
    metadata = dict(manifest.get("metadata") or {})
    parts: dict[str, Any] = {}
    annotations = {
        name: value
        for name, value in (metadata.pop("annotations", None) or {}).items()
        if name not in _CONTROLLER_ANNOTATIONS
    }
    if annotations:
        parts["metadata.annotations"] = annotations
    for name in _METADATA_PARTS:
        value = metadata.pop(name, None)
        if value not in (None, {}, []):
            parts[f"metadata.{name}"] = value
    rest = {name: value for name, value in metadata.items() if name not in _BOOKKEEPING}
    if rest:
        parts["metadata"] = rest
    if metadata.get("generation") is None:
        parts.update(
            {
                name: value
                for name, value in manifest.items()
                if name not in ("apiVersion", "kind", "metadata", "status")
            }
        )
    return {name: _digest(value) for name, value in sorted(parts.items())}


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class ForeignObject(LiveObject):
    """An NVIDIA component object gpuplan does not manage, and who does.

    ``components``: the gpuplan components it overlaps (``devicePlugin``, ``gfd``, ...; a ClusterPolicy lists
    every component it enables). ``owner``: ``gpu-operator`` (a ClusterPolicy or an object it owns), ``helm``
    (a Helm release), ``gpuplan`` (another gpuplan stack) or ``manual`` (deployed by hand: no owner recorded).
    ``owner_name``: the ClusterPolicy, Helm release or stack name, when known.
    """

    components: tuple[str, ...] = ()
    owner: str = "manual"
    owner_name: str | None = None

    def describe_owner(self) -> str:
        if self.owner == "gpu-operator":
            return (
                f"the GPU Operator (ClusterPolicy {self.owner_name})"
                if self.owner_name
                else "the GPU Operator"
            )
        if self.owner == "helm":
            return f"Helm release {self.owner_name}" if self.owner_name else "a Helm release"
        if self.owner == "gpuplan":
            return f"gpuplan stack {self.owner_name}"
        return "no tool (deployed by hand)"


NodeFeatureStatus = Literal["read", "not-served", "forbidden"]
NODE_FEATURE = ("nfd.k8s-sigs.io/v1alpha1", "NodeFeature")
NFD_NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
"""The label nfd-worker puts on the NodeFeature of its node (fleet facts §1.2); nfd-master selects by it."""
NVIDIA_VENDOR = "10de"


@dataclass(frozen=True)
class PciDevice:
    """One NVIDIA PCI device an nfd-worker listed: its class (4 hex digits) and device id (lower-case hex)."""

    pci_class: str
    device: str


@dataclass(frozen=True)
class NodeFeatures:
    """What NFD's NodeFeature objects (``nfd.k8s-sigs.io/v1alpha1``, fleet facts §1.2) said of the nodes'
    PCI buses: node name -> the NVIDIA PCI devices its worker listed (empty: it listed none). A node absent
    from ``devices`` has no NodeFeature with PCI features. ``status``: ``read``, ``not-served`` (no NFD CRD:
    the cluster runs no NFD) or ``forbidden`` (the credentials may not list them; ``detail`` says why)."""

    status: NodeFeatureStatus = "not-served"
    devices: Mapping[str, tuple[PciDevice, ...]] = field(default_factory=dict)
    detail: str = ""


def node_feature_devices(item: Mapping[str, Any]) -> tuple[str, tuple[PciDevice, ...]] | None:
    """(node, NVIDIA PCI devices) of one NodeFeature, reduced as its page arrives; None for one that names
    no node or publishes no PCI devices (GFD's ``nvidia-features-for-<node>`` carries labels only, and
    ``core.noPublishFeatures`` can drop the ``pci`` sets), which says nothing of the node's PCI bus."""
    metadata = item.get("metadata") or {}
    node = (metadata.get("labels") or {}).get(NFD_NODE_NAME_LABEL)
    instances = ((item.get("spec") or {}).get("features") or {}).get("instances") or {}
    if not node or "pci.device" not in instances:
        return None
    devices = []
    for element in (instances.get("pci.device") or {}).get("elements") or ():
        attributes = element.get("attributes") or {}
        if str(attributes.get("vendor", "")).lower().removeprefix("0x") == NVIDIA_VENDOR:
            device = str(attributes.get("device", "")).lower().removeprefix("0x")
            devices.append(PciDevice(str(attributes.get("class", ""))[:4], device))
    return str(node), tuple(devices)


def merge_node_features(found: Iterable[tuple[str, tuple[PciDevice, ...]] | None]) -> NodeFeatures:
    """One node's first NodeFeature with PCI features wins (nfd-master merges the worker's own first)."""
    devices: dict[str, tuple[PciDevice, ...]] = {}
    for entry in found:
        if entry is not None:
            devices.setdefault(entry[0], entry[1])
    return NodeFeatures("read", devices)


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything one refresh read. ``requests`` is the number of API requests it made: it depends on the
    number of managed kinds and API groups, not on the number of nodes, except that nodes and NFD's
    NodeFeatures (one per node) are each read as one paginated list (500 a page), so a fleet above 500
    nodes costs two requests more per 500 nodes."""

    managed: Mapping[ObjectKey, LiveObject]
    foreign: tuple[ForeignObject, ...]
    nodes: tuple[Mapping[str, Any], ...]
    server_version: str
    requests: int
    namespace: LiveObject | None = None
    """The stack's namespace object, whether gpuplan manages it or not (None: it does not exist)."""
    unserved: tuple[tuple[str, str], ...] = field(default=())
    """Managed kinds (apiVersion, kind) the server does not serve, e.g. a ServiceMonitor without its CRD."""
    node_features: NodeFeatures = field(default_factory=NodeFeatures)
    """NFD's NodeFeature objects, read as one paginated list (:class:`NodeFeatures`)."""

    def resource_versions(self) -> dict[str, str]:
        """``ObjectKey.ref`` -> resourceVersion of every managed and foreign object read (not nodes, whose
        status the kubelet rewrites every few seconds). Apply's writes carry these as preconditions (and
        re-read an object whose version moved); saved plans of older gpuplan versions were held to them."""
        objects: Iterable[LiveObject] = [*self.managed.values(), *self.foreign]
        return {obj.key.ref: obj.resource_version or "" for obj in sorted(objects, key=lambda o: o.key)}

    def content_fingerprints(self) -> dict[str, Fingerprint]:
        """``ObjectKey.ref`` -> :class:`Fingerprint` of every managed and foreign object read (not nodes).
        Saved plans are held to these (planner/plan/planfile.py ``check_fresh``)."""
        objects: Iterable[LiveObject] = [*self.managed.values(), *self.foreign]
        return {obj.key.ref: obj.fingerprint() for obj in sorted(objects, key=lambda o: o.key)}

    def node(self, name: str) -> Mapping[str, Any] | None:
        return next((node for node in self.nodes if node.get("name") == name), None)


class ClusterReader(Protocol):
    """The read side of a Kubernetes provider: what plan and import need. A refresh's snapshot carries NFD's
    NodeFeatures too (:class:`NodeFeatures`: one paginated list, an absent CRD or a 403 recorded, never
    raised)."""

    request_count: int

    def refresh(self, *, stack: str, namespace: str, kinds: Sequence[tuple[str, str]]) -> ClusterSnapshot: ...

    def read(self, key: ObjectKey) -> LiveObject | None: ...

    def read_many(self, keys: Iterable[ObjectKey]) -> dict[ObjectKey, LiveObject]:
        """The objects at ``keys`` that exist, in one request per kind and namespace (see
        :func:`group_keys`)."""
        ...


def group_keys(keys: Iterable[ObjectKey]) -> dict[tuple[str, str, str | None], list[str]]:
    """(apiVersion, kind, namespace) -> the names asked for there, each once, in the order first asked."""
    groups: dict[tuple[str, str, str | None], list[str]] = {}
    for key in keys:
        names = groups.setdefault((key.api_version, key.kind, key.namespace), [])
        if key.name not in names:
            names.append(key.name)
    return groups


def node_facts(node: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Node the planner uses; the rest (images, addresses, heartbeats) is dropped at once,
    which keeps a 5000-node snapshot small. A fleet's nodes repeat the same label keys and values, capacity
    and node info, and the same few owners of each label: each is held once for all nodes (interned; the
    owners as one shared tuple), a third of the reduced nodes at 5,000 (63 -> 30 MiB)."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "name": metadata.get("name", ""),
        "labels": _interned(metadata.get("labels") or {}),
        "labelManagers": {
            sys.intern(label): _one_copy(tuple(managers))
            for label, managers in label_managers(metadata).items()
        },
        "capacity": _interned(status.get("capacity") or {}),
        "allocatable": _interned(status.get("allocatable") or {}),
        "nodeInfo": _interned(status.get("nodeInfo") or {}),
        "runtimeHandlers": list(status.get("runtimeHandlers") or []),
        "conditions": [
            {key: condition.get(key) for key in ("type", "status", "reason", "message")}
            for condition in status.get("conditions") or []
        ],
        "unschedulable": bool(spec.get("unschedulable", False)),
        "taints": list(spec.get("taints") or []),
    }


def _interned(strings: Mapping[str, Any]) -> dict[str, Any]:
    """``strings`` with each key, and each value that is a string, interned."""
    return {
        sys.intern(key): sys.intern(value) if isinstance(value, str) else value
        for key, value in strings.items()
    }


@functools.lru_cache(maxsize=1024)
def _one_copy(managers: tuple[str, ...]) -> tuple[str, ...]:
    """The one tuple of these label owners that every node shares (equal tuples give the first one)."""
    return tuple(sys.intern(manager) for manager in managers)


GPU_LABEL_PREFIX = "nvidia.com/"


def label_managers(metadata: Mapping[str, Any]) -> dict[str, list[str]]:
    """``nvidia.com/*`` label -> the field managers owning it (managedFields), so a label written by hand
    is told from one GPU Feature Discovery wrote; the other labels' owners are dropped like the rest."""
    found: dict[str, list[str]] = {}
    for entry in metadata.get("managedFields") or ():
        labels = ((entry.get("fieldsV1") or {}).get("f:metadata") or {}).get("f:labels") or {}
        for owned in labels:
            if owned.startswith("f:" + GPU_LABEL_PREFIX):
                found.setdefault(owned[2:], []).append(str(entry.get("manager") or ""))
    return found


def with_type(item: dict[str, Any], api_version: str, kind: str) -> dict[str, Any]:
    """List items of built-in kinds come without apiVersion and kind; put them back."""
    item.setdefault("apiVersion", api_version)
    item.setdefault("kind", kind)
    return item
