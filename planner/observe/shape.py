"""The shape of a live cluster: its nodes folded into groups of identical ones, and the NVIDIA objects in it.

What ``gpuplan sim snapshot`` writes as a scenario file (design §6, §7.4) and ``gpuplan init --from-cluster``
starts a spec from. Read-only and through the provider's paginated lists only: one list of nodes (each node
reduced to its :class:`NodeShape` as its page arrives, so a 5,000-node fleet is never held whole), one of
DaemonSets, ConfigMaps, Helm's release Secrets (their data dropped on arrival) and ClusterPolicies, and a
few GETs (the ClusterPolicy CRD, the namespaces the objects live in): the request count does not grow with
the nodes.

A node's GPU model is read back as a simulator catalog key from GFD's ``nvidia.com/gpu.product``, from an NFD
PCI device label (``pci-0302_10de_2330.present``, when NFD labels device IDs), or from the PCI device id of
the node's NodeFeature (one paginated list, reduced to each node's NVIDIA devices as the refresh does), which
names it before GFD runs; a node with neither NFD's labels nor a NodeFeature is ``nfd: false``; a model the
catalog does not know, or a GPU node nothing names the model of, becomes a node without ``gpu`` and a ``note``
that the scenario file carries as a comment. The host driver is GFD's ``cuda.driver-version.full`` where no
driver container runs there (``nvidia.com/gpu.deploy.driver=pre-installed``, or no driver DaemonSet at all);
the host toolkit is the ``nvidia`` runtime handler containerd reports where no toolkit DaemonSet runs (a node
does not say the toolkit's version).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplan.modules.pci_ids import GPU_CLASSES
from gpuplan.planner.pools import base_product
from gpuplan.providers import foreign
from gpuplan.providers.protocols import ObjectReader, ReducedLister
from gpuplan.providers.snapshot import (
    NFD_NODE_NAME_LABEL,
    NODE_FEATURE,
    ForeignObject,
    LiveObject,
    ObjectKey,
    PciDevice,
    merge_node_features,
    node_feature_devices,
)

# design §6 catalog: catalog key -> (GFD product, PCI device ID); the simulator's catalog must agree (tested)
CATALOG: Mapping[str, tuple[str, str]] = {
    "rtx-3060": ("NVIDIA-GeForce-RTX-3060", "2504"),
    "t4": ("Tesla-T4", "1eb8"),
    "v100": ("Tesla-V100-SXM2-32GB", "1db5"),
    "a100-80gb": ("NVIDIA-A100-SXM4-80GB", "20b2"),
    "l40s": ("NVIDIA-L40S", "26b9"),
    "h100-80gb": ("NVIDIA-H100-80GB-HBM3", "2330"),
    "h200": ("NVIDIA-H200", "2335"),
    "b200": ("NVIDIA-B200", "2901"),
}
_BY_PRODUCT = {product: key for key, (product, _) in CATALOG.items()}
_BY_DEVICE = {device: key for key, (_, device) in CATALOG.items()}
# NFD's PCI label with the device field: pci-[<class>_]10de_<device>[_...].present (fleet facts §1.3)
_PCI_DEVICE = re.compile(
    r"^feature\.node\.kubernetes\.io/pci-(?:[0-9a-f]{4}_)?10de_([0-9a-f]{4})\b.*\.present$"
)
NFD = "feature.node.kubernetes.io/"
GPU_PRESENT = NFD + "pci-10de.present"
PRE_INSTALLED = "nvidia.com/gpu.deploy.driver"
# labels the simulator (and a real kubelet / NFD) derives from the node's other facts: not written back
_DERIVED = re.compile(
    r"^(beta\.)?kubernetes\.io/instance-type$|^node\.kubernetes\.io/instance-type$"
    r"|^feature\.node\.kubernetes\.io/(kernel-version\.|system-os_release\.)|^nvidia\.com/gfd\.timestamp$"
)
# kubelet's labels with the value the simulator gives every node (another arch or OS is kept as it is)
_KUBELET_DEFAULTS = {
    "kubernetes.io/arch": "amd64",
    "beta.kubernetes.io/arch": "amd64",
    "kubernetes.io/os": "linux",
    "beta.kubernetes.io/os": "linux",
}
_DROPPED_ANNOTATIONS = re.compile(
    r"^(kubectl\.kubernetes\.io/last-applied-configuration|deprecated\.daemonset\.)"
)
_SERVER_SET = ("uid", "resourceVersion", "generation", "managedFields", "creationTimestamp", "selfLink")
_SEEDED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")
CLUSTER_POLICY_CRD = ObjectKey(
    "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, "clusterpolicies.nvidia.com"
)
HELM_RELEASE_TYPE = "helm.sh/release.v1"


@dataclass(frozen=True)
class NodeShape:
    """What makes two nodes alike; a frozen value, so identical nodes share one key (and one object)."""

    gpu_model: str | None
    gpu_count: int
    os: str | None
    kernel: str | None
    driver: str | None
    toolkit: bool
    container_runtime: str | None
    machine: str | None
    instance_type: str | None
    labels: tuple[tuple[str, str], ...]
    taints: tuple[tuple[tuple[str, str], ...], ...]
    unschedulable: bool
    capacity: tuple[tuple[str, str], ...]
    allocatable: tuple[tuple[str, str], ...]
    note: str | None = None
    """Why the node's GPU model could not be read back (None: known, or a CPU-only node)."""
    product: str | None = None
    """GFD's product label, kept for ``init``'s summary even where the catalog has no key for it."""
    nfd: bool = True
    """An nfd-worker runs there: the node has NFD's labels or a NodeFeature (scenario ``nfd``)."""


@dataclass(frozen=True)
class NodeGroup:
    """One scenario ``nodes[]`` entry: a single ``name``, or ``prefix`` + ``count`` nodes named as the
    simulator expands them (prefix + ordinal from 1, zero-padded to the width of ``count``)."""

    shape: NodeShape
    name: str | None = None
    prefix: str | None = None
    count: int = 1
    names: tuple[str, ...] = field(default=(), compare=False)
    """The first few node names of the group (for ``init``'s comments)."""


@dataclass(frozen=True)
class ClusterShape:
    groups: tuple[NodeGroup, ...]
    objects: tuple[dict[str, Any], ...]
    """The NVIDIA objects, stripped of server-set fields, in the order a scenario creates them."""
    node_count: int
    requests: int
    foreign: tuple[ForeignObject, ...] = ()
    """The NVIDIA components' objects with their owners (ownerReferences included), for ``init``."""


# ------------------------------------------------------------------------------------------------- nodes


def gpu_model_of(labels: Mapping[str, str]) -> str | None:
    """The catalog key of a node's GPU: GFD's product (its ``-SHARED`` / ``-MIG-...`` forms included), else
    an NFD PCI device label."""
    product = labels.get("nvidia.com/gpu.product")
    if product:
        base = base_product(product)
        if base in _BY_PRODUCT:
            return _BY_PRODUCT[base]
    for key in labels:
        match = _PCI_DEVICE.match(key)
        if match and match.group(1) in _BY_DEVICE:
            return _BY_DEVICE[match.group(1)]
    return None


def _has_gpu(labels: Mapping[str, str]) -> bool:
    return any(
        key == "nvidia.com/gpu.product"
        or (key.startswith(NFD + "pci-") and "10de" in key and value == "true")
        for key, value in labels.items()
    )


def _os_of(labels: Mapping[str, str], info: Mapping[str, Any]) -> str | None:
    """``ubuntu24.04`` from NFD's os_release labels, else from ``nodeInfo.osImage`` ("Ubuntu 24.04.3 LTS")."""
    os_id = labels.get(NFD + "system-os_release.ID")
    version = labels.get(NFD + "system-os_release.VERSION_ID")
    if os_id and version:
        text = f"{os_id.lower()}{version}"
    else:
        match = re.match(r"^([A-Za-z]+)\D*?(\d+(?:\.\d+)?)", str(info.get("osImage") or ""))
        text = f"{match.group(1).lower()}{match.group(2)}" if match else ""
    return text if re.fullmatch(r"[a-z]+[0-9]+(\.[0-9]+)*", text) else None


def _resources(values: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """Capacity or allocatable without what device plugins add (they add it again where they run)."""
    return tuple(sorted((k, str(v)) for k, v in values.items() if "/" not in k))


def _pci_model(gpus: Sequence[PciDevice]) -> tuple[str | None, str | None]:
    """(catalog key, note) of the GPUs a NodeFeature lists: the model while GFD has not labelled the node."""
    devices = sorted({gpu.device for gpu in gpus})
    if len(devices) == 1 and devices[0] in _BY_DEVICE:
        return _BY_DEVICE[devices[0]], None
    named = ", ".join(f"10de:{device}" for device in devices)
    if len(devices) > 1:
        return None, f"GPUs of several PCI device ids ({named}): the simulator's nodes have one model"
    return None, f"GPU of PCI device id {named} is not in the simulator's catalog"


def node_shape(
    node: Mapping[str, Any],
    *,
    driver_containers: bool,
    toolkit_containers: bool,
    pci: Sequence[PciDevice] | None = None,
) -> NodeShape:
    """One node's shape; ``driver_containers`` / ``toolkit_containers``: such DaemonSets exist, so a
    driver or an ``nvidia`` handler on a node may be theirs, not the host's; ``pci``: the NVIDIA PCI
    devices of the node's NodeFeature (None: it has none), which name the model before GFD runs."""
    metadata = node.get("metadata") or {}
    labels: dict[str, str] = dict(metadata.get("labels") or {})
    status = node.get("status") or {}
    info = status.get("nodeInfo") or {}
    spec = node.get("spec") or {}
    gpus = [device for device in pci or () if device.pci_class in GPU_CLASSES]
    model = gpu_model_of(labels)
    has_gpu = _has_gpu(labels) or bool(gpus)
    note = None
    if has_gpu and model is None:
        product = labels.get("nvidia.com/gpu.product")
        if product:
            note = f"GPU {product} is not in the simulator's catalog"
        elif gpus:
            model, note = _pci_model(gpus)
        else:
            note = "a GPU node, but no GFD product label nor NFD PCI device label names its model"
    name = str(metadata.get("name", ""))
    kept = {k: v for k, v in labels.items() if not _derived(k, v, name)}
    if model is not None:
        kept.pop(GPU_PRESENT, None)  # the simulator labels its GPU nodes so
    host_driver = labels.get(PRE_INSTALLED) == "pre-installed" or not driver_containers
    handlers = {str(h.get("name")) for h in status.get("runtimeHandlers") or [] if isinstance(h, Mapping)}
    taints = tuple(
        tuple(sorted((str(k), str(v)) for k, v in taint.items() if k in ("key", "value", "effect")))
        for taint in spec.get("taints") or []
        if isinstance(taint, Mapping) and taint.get("key") != "node.kubernetes.io/unschedulable"
    )
    count = str(
        labels.get("nvidia.com/gpu.count")
        or (status.get("capacity") or {}).get("nvidia.com/gpu")
        or (len(gpus) if gpus else "")
    )
    return NodeShape(
        gpu_model=model,
        gpu_count=max(1, min(16, int(count))) if count.isdigit() else 1,
        os=_os_of(labels, info),
        kernel=labels.get(NFD + "kernel-version.full") or info.get("kernelVersion") or None,
        driver=labels.get("nvidia.com/cuda.driver-version.full") if host_driver and model else None,
        toolkit="nvidia" in handlers and not toolkit_containers,
        container_runtime=info.get("containerRuntimeVersion") or None,
        machine=labels.get("nvidia.com/gpu.machine") if model else None,
        instance_type=labels.get("node.kubernetes.io/instance-type"),
        labels=tuple(sorted(kept.items())),
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        capacity=_resources(status.get("capacity") or {}),
        allocatable=_resources(status.get("allocatable") or {}),
        note=note,
        product=labels.get("nvidia.com/gpu.product"),
        nfd=pci is not None or any(key.startswith(NFD) for key in labels),
    )


def _derived(key: str, value: str, name: str) -> bool:
    if key == "kubernetes.io/hostname":
        return value == name
    return bool(_DERIVED.match(key)) or _KUBELET_DEFAULTS.get(key) == value


_NUMBERED = re.compile(r"^(.*?)(\d+)$")
SAMPLE_NAMES = 3


def fold(nodes: Iterable[tuple[str, NodeShape]]) -> list[NodeGroup]:
    """Identical nodes as ``prefix`` + ``count`` groups where their names are exactly what the simulator
    would expand that group to; every other node on its own. Groups keep the order nodes came in."""
    by_shape: dict[NodeShape, list[str]] = {}
    for name, shape in nodes:
        by_shape.setdefault(shape, []).append(name)
    groups: list[tuple[int, NodeGroup]] = []
    order = 0
    for shape, names in by_shape.items():
        by_prefix: dict[str, list[str]] = {}
        for name in names:
            match = _NUMBERED.match(name)
            by_prefix.setdefault(match.group(1) if match else "\0" + name, []).append(name)
        for prefix, members in by_prefix.items():
            if not prefix.startswith("\0") and len(members) > 1 and _expands_to(prefix, members):
                sample = tuple(sorted(members)[:SAMPLE_NAMES])
                groups.append((order, NodeGroup(shape, prefix=prefix, count=len(members), names=sample)))
                order += 1
                continue
            for name in members:
                groups.append((order, NodeGroup(shape, name=name, names=(name,))))
                order += 1
    return [group for _, group in sorted(groups, key=lambda item: item[0])]


def _expands_to(prefix: str, names: Sequence[str]) -> bool:
    width = len(str(len(names)))
    return set(names) == {f"{prefix}{n:0{width}d}" for n in range(1, len(names) + 1)}


# ------------------------------------------------------------------------------------------------ objects


def strip(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A manifest as a user would write it: no status, no server-set metadata, no owner references (their
    uids name objects of this cluster only), no last-applied copy (it could hold anything); a Secret keeps
    its type and metadata, never its data."""
    metadata = dict(manifest.get("metadata") or {})
    for key in (*_SERVER_SET, "ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds"):
        metadata.pop(key, None)
    annotations = {
        k: v for k, v in (metadata.get("annotations") or {}).items() if not _DROPPED_ANNOTATIONS.match(k)
    }
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    if not metadata.get("labels"):
        metadata.pop("labels", None)
    dropped = {"apiVersion", "kind", "metadata", "status"}
    if manifest.get("kind") == "Secret":
        dropped |= {"data", "stringData"}
    rest = {k: v for k, v in manifest.items() if k not in dropped}
    return {
        "apiVersion": manifest.get("apiVersion"),
        "kind": manifest.get("kind"),
        "metadata": metadata,
        **rest,
    }


def _config_maps_used(daemonset: Mapping[str, Any]) -> set[str]:
    pod = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    names = {
        str((v.get("configMap") or {}).get("name")) for v in pod.get("volumes") or [] if v.get("configMap")
    }
    for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        for source in container.get("envFrom") or []:
            if (source.get("configMapRef") or {}).get("name"):
                names.add(str(source["configMapRef"]["name"]))
    return names


def _policy_config_maps(policy: Mapping[str, Any]) -> set[str]:
    spec = policy.get("spec") or {}
    found = set()
    for section in spec.values():
        if isinstance(section, Mapping):
            config = section.get("config")
            if isinstance(config, Mapping) and config.get("name"):
                found.add(str(config["name"]))
    return found


class ShapeReader(ReducedLister, ObjectReader, Protocol):
    """What the shape needs of a provider: paginated reduced lists and single reads."""


def read_shape(provider: ShapeReader, *, secret_labels: str = "owner=helm") -> ClusterShape:
    """The cluster's shape, read through ``provider``; the node list is folded as it is read."""
    start = provider.request_count
    nvidia_ds = [d for d in provider.list_reduced("apps/v1", "DaemonSet", _nvidia_daemonset) if d is not None]
    policies = provider.list_reduced(*CLUSTER_POLICY, _typed(*CLUSTER_POLICY))
    components = {c for d in nvidia_ds for c in foreign.daemonset_components(d)}
    # a ClusterPolicy deploys the driver and toolkit unless disabled (facts §3)
    components |= {c for p in foreign.foreign_cluster_policies(_live(policies)) for c in p.components}
    features = provider.list_reduced(*NODE_FEATURE, node_feature_devices, label_selector=NFD_NODE_NAME_LABEL)
    reduce = _node_reducer(
        driver_containers="driver" in components,
        toolkit_containers="toolkit" in components,
        pci=merge_node_features(features).devices,
    )
    named = provider.list_reduced("v1", "Node", reduce)
    body = [
        *_needed_by(provider, nvidia_ds),
        *_policy_crd(provider, policies),
        *(strip(p) for p in policies),
        *_config_maps(provider, nvidia_ds, policies),
        *_helm_markers(provider, [*nvidia_ds, *policies], secret_labels),
        *(strip(d) for d in nvidia_ds),
    ]
    return ClusterShape(
        groups=tuple(fold(named)),
        objects=tuple(_without_defaults(o) for o in [*_namespaces(provider, body), *body]),
        node_count=len(named),
        requests=provider.request_count - start,
        foreign=tuple(
            foreign.foreign_daemonsets(_live(nvidia_ds), stack="")
            + foreign.foreign_cluster_policies(_live(policies))
        ),
    )


def _config_maps(
    provider: ShapeReader, daemonsets: Sequence[Mapping[str, Any]], policies: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The ConfigMaps the DaemonSets mount or read, and those a ClusterPolicy names in their namespaces."""
    used: set[tuple[str, str]] = set()
    for daemonset in daemonsets:
        namespace = str((daemonset.get("metadata") or {}).get("namespace") or "default")
        used |= {(namespace, name) for name in _config_maps_used(daemonset)}
    policy_maps = {name for policy in policies for name in _policy_config_maps(policy)}
    operator_ns = {str((d.get("metadata") or {}).get("namespace")) for d in daemonsets}

    def keep(item: dict[str, Any]) -> dict[str, Any] | None:
        meta = item.get("metadata") or {}
        where = (str(meta.get("namespace")), str(meta.get("name")))
        wanted = where in used or (where[1] in policy_maps and where[0] in operator_ns)
        return strip({**item, "apiVersion": "v1", "kind": "ConfigMap"}) if wanted else None

    return [m for m in provider.list_reduced("v1", "ConfigMap", keep) if m is not None]


def _helm_markers(
    provider: ShapeReader, owners: Sequence[Mapping[str, Any]], selector: str
) -> list[dict[str, Any]]:
    """Helm's release Secrets of the releases ``owners`` belong to, as markers (never their data)."""
    releases = {helm_release(o) for o in owners} - {None}
    if not releases:
        return []
    markers = provider.list_reduced("v1", "Secret", _helm_marker, label_selector=selector)
    return [
        m for m in markers if m is not None and (m["metadata"].get("labels") or {}).get("name") in releases
    ]


def _policy_crd(provider: ShapeReader, policies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    crd = provider.read(CLUSTER_POLICY_CRD) if policies else None
    return [strip(crd.manifest)] if crd is not None else []


def _namespaces(provider: ShapeReader, objects: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The Namespaces the objects live in, but those every cluster has."""
    found = []
    for name in sorted({str(o["metadata"]["namespace"]) for o in objects if o["metadata"].get("namespace")}):
        if name in _SEEDED_NAMESPACES:
            continue
        live = provider.read(ObjectKey("v1", "Namespace", None, name))
        found.append(strip(live.manifest) if live is not None else _namespace(name))
    return found


RBAC = "rbac.authorization.k8s.io/v1"


def _needed_by(provider: ShapeReader, daemonsets: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What the DaemonSets' pods need to start: their ServiceAccounts, the RBAC bound to those, their
    RuntimeClasses; read by name or in one list per binding kind (a number that follows the DaemonSets,
    never the nodes)."""
    accounts: set[tuple[str, str]] = set()
    runtime_classes: set[str] = set()
    for daemonset in daemonsets:
        namespace = str((daemonset.get("metadata") or {}).get("namespace") or "default")
        pod = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
        accounts.add((namespace, str(pod.get("serviceAccountName") or "default")))
        if pod.get("runtimeClassName"):
            runtime_classes.add(str(pod["runtimeClassName"]))
    found: list[dict[str, Any]] = []
    keys = [ObjectKey("node.k8s.io/v1", "RuntimeClass", None, name) for name in sorted(runtime_classes)]
    keys += [
        ObjectKey("v1", "ServiceAccount", ns, name) for ns, name in sorted(accounts) if name != "default"
    ]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in provider.list_reduced(RBAC, kind, _bound_to(accounts, kind)):
            if binding is None:
                continue
            found.append(binding)
            ref = binding.get("roleRef") or {}
            scope = None if ref.get("kind") == "ClusterRole" else binding["metadata"].get("namespace")
            keys.append(ObjectKey(RBAC, str(ref.get("kind")), scope, str(ref.get("name"))))
    for key in dict.fromkeys(keys):
        live = provider.read(key)
        if live is not None:
            found.append(strip(live.manifest))
    order = ("RuntimeClass", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
    return sorted(found, key=lambda o: order.index(str(o.get("kind"))))


def _bound_to(accounts: set[tuple[str, str]], kind: str) -> Any:
    def keep(item: dict[str, Any]) -> dict[str, Any] | None:
        for subject in item.get("subjects") or []:
            if subject.get("kind") != "ServiceAccount":
                continue
            namespace = subject.get("namespace") or (item.get("metadata") or {}).get("namespace")
            if (str(namespace), str(subject.get("name"))) in accounts:
                return strip({**item, "apiVersion": RBAC, "kind": kind})
        return None

    return keep


def _node_reducer(
    *, driver_containers: bool, toolkit_containers: bool, pci: Mapping[str, tuple[PciDevice, ...]]
) -> Any:
    interned: dict[NodeShape, NodeShape] = {}

    def reduce(node: dict[str, Any]) -> tuple[str, NodeShape]:
        name = str((node.get("metadata") or {}).get("name"))
        shape = node_shape(
            node,
            driver_containers=driver_containers,
            toolkit_containers=toolkit_containers,
            pci=pci.get(name),
        )
        return name, interned.setdefault(shape, shape)

    return reduce


def _nvidia_daemonset(item: dict[str, Any]) -> dict[str, Any] | None:
    if not foreign.daemonset_components(item):
        return None
    return {**item, "apiVersion": "apps/v1", "kind": "DaemonSet"}


def _helm_marker(item: dict[str, Any]) -> dict[str, Any] | None:
    """Helm's release Secret as a marker: its name, labels and type; the release itself (the data) never."""
    if item.get("type") != HELM_RELEASE_TYPE:
        return None
    return strip({**item, "apiVersion": "v1", "kind": "Secret"})


def helm_release(manifest: Mapping[str, Any]) -> str | None:
    """The Helm release an object belongs to (Helm's own label and annotation), None when none."""
    metadata = manifest.get("metadata") or {}
    if str((metadata.get("labels") or {}).get("app.kubernetes.io/managed-by", "")).lower() != "helm":
        return None
    release = (metadata.get("annotations") or {}).get("meta.helm.sh/release-name")
    return str(release) if release else None


def _typed(api_version: str, kind: str) -> Any:
    def typed(item: dict[str, Any]) -> dict[str, Any]:
        return {**item, "apiVersion": api_version, "kind": kind}

    return typed


def _live(manifests: Iterable[Mapping[str, Any]]) -> list[Any]:
    return [LiveObject.from_manifest(dict(m)) for m in manifests]


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _without_defaults(manifest: dict[str, Any]) -> dict[str, Any]:
    """A Namespace's ``spec.finalizers`` is the server's default: left out like the rest it sets."""
    if manifest.get("kind") == "Namespace":
        return {k: v for k, v in manifest.items() if k != "spec"}
    return manifest
