"""What a node tells about its GPUs and GPU stack, read from a v1 Node object (GFD and NFD labels, status).

GFD labels (facts §4) carry the GPU model, family, compute capability, count, MIG capability and the driver
version; NFD labels carry the OS and kernel; the node status carries the runtime handlers, the container
runtime and the allocatable ``nvidia.com/gpu``.

Which source identifies a node's GPU (:attr:`NodeFacts.gpu_source`), in this order:

1. ``gfd-label``: GFD's labels, when present. They come from NVML on the node and say more than the PCI
   bus can: MIG products and per-profile counts, MIG mode, the driver version.
2. ``nfd``: before GFD has run, the node's NodeFeature object, in which nfd-worker lists every PCI device
   (fleet facts §1.2); the device id of its NVIDIA GPUs is looked up in ``modules/pci_ids.py`` (fleet facts
   §2) for the product, family, compute capability, MIG capability and count. MIG mode stays unknown.
3. none: the GPU is *unknown*, every GPU field is ``None`` and :attr:`NodeFacts.gpu_known` is false;
   :attr:`NodeFacts.unidentified` says why (no source described the node, or its device id is not in the
   table). Nothing is guessed. The DCGM exporter and NVML only fill in the driver version, as before.

Callers: :mod:`gpuplan.planner.spec.compat` (rules against the nodes' GPUs), :meth:`Spec.context_for`
(:func:`stack_platform`, the OS tag and runtime that plan and drift render with), and refresh/drift, which may
set ``containerized_driver`` (a gpuplan driver pod runs there) or a driver version read from DCGM or NVML.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gpuplan.modules import pci_ids
from gpuplan.planner import pools
from gpuplan.providers.snapshot import NodeFeatures, PciDevice

DriverSource = Literal["gfd-label", "dcgm", "nvml"]
GpuSource = Literal["gfd-label", "nfd"]
GPU_SOURCE_NAMES: Mapping[str, str] = {"gfd-label": "GFD labels", "nfd": "NFD NodeFeature"}
"""How the plan and the inventory name the source that identified a node's GPU."""
Runtime = Literal["containerd", "crio", "docker"]
DRIVER_UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
"""The operator's driver upgrade state label (k8s-operator-libs ``upgrade.UpgradeStateLabelKeyFmt`` with the
``gpu`` driver name), which gpuplan's node-by-node driver steps write too."""
DRIVER_CHANGING_STATES = frozenset(
    {
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
        "upgrade-failed",
    }
)
"""The states between cordon and uncordon: a node labelled with one was cordoned by a driver rollout, not by a
person, and the driver it reports is a containerised one being changed (its pod may be gone for a moment: a
hand-back between two DaemonSets, a restart), never a host driver."""

NFD_GPU_LABELS = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
MAJOR_ONLY_OS = ("rhel", "rocky", "ol")  # the driver image tag uses only the major version (facts §1.4)


def family_of(major: int, minor: int) -> str:
    """GFD's ``getArchFamily`` (facts §4)."""
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    families = {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
        13: "rubin",
    }
    return families.get(major, "undefined")


@dataclass(frozen=True)
class NodeFacts:
    """The GPU facts of one node. ``None`` means unknown (typically: GFD has not run there yet)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    has_nvidia_gpu: bool = False
    """NFD (or GFD) says the node has an NVIDIA PCI device."""
    gpu_product: str | None = None
    gpu_family: str | None = None
    cc: tuple[int, int] | None = None
    """CUDA compute capability (major, minor)."""
    gpu_count: int | None = None
    mig_capable: bool | None = None
    mig_enabled: bool | None = None
    driver_version: str | None = None
    driver_version_source: DriverSource | None = None
    preinstalled_driver: bool = False
    """k8s-driver-manager found a host driver and labelled nvidia.com/gpu.deploy.driver=pre-installed."""
    containerized_driver: bool = False
    """A gpuplan-managed driver container runs on the node (set by refresh from the driver DaemonSets'
    placement), or a driver rollout is changing it (:data:`DRIVER_CHANGING_STATES`)."""
    runtime_handlers: tuple[str, ...] = ()
    container_runtime: str | None = None
    os_id: str | None = None
    os_version: str | None = None
    kernel: str | None = None
    allocatable_gpus: int | None = None
    allocatable_mig: tuple[tuple[str, int], ...] = ()
    """Allocatable ``nvidia.com/mig-<profile>`` (the mixed strategy's MIG devices): (profile, count)."""
    gpu_source: GpuSource | None = None
    """Which source identified the GPU (see the module doc); None: none did."""
    pci_device: str | None = None
    """The NVIDIA PCI device id NFD listed (``0x1db5``), when a NodeFeature named one."""
    gpu_memory_mib: int | None = None
    unidentified: str | None = None
    """Why no source identified this node's GPU (None: identified, or no source says it has one)."""

    @property
    def gpu_known(self) -> bool:
        return self.gpu_product is not None

    @property
    def nfd_missing_here(self) -> bool:
        """NFD runs in the cluster (its NodeFeatures were read) but described neither this node nor, by its
        labels, any GPU on it."""
        return self.unidentified == NO_SOURCE

    @property
    def nfd_missing(self) -> bool:
        """NFD runs in the cluster but has published no NodeFeature for this node."""
        return self.unidentified in (NO_NODE_FEATURE, NO_SOURCE, NO_NFD)

    @property
    def os_tag(self) -> str | None:
        """The driver image OS suffix for this node, e.g. ``ubuntu24.04`` or ``rhel9``."""
        if not self.os_id or not self.os_version:
            return None
        version = self.os_version.split(".")[0] if self.os_id in MAJOR_ONLY_OS else self.os_version
        return f"{self.os_id}{version}"

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> NodeFacts:
        metadata = node.get("metadata") or {}
        labels: dict[str, str] = dict(metadata.get("labels") or {})
        status = node.get("status") or {}
        info = status.get("nodeInfo") or {}
        cc = _compute_capability(labels)
        product = labels.get("nvidia.com/gpu.product")
        driver = labels.get("nvidia.com/cuda.driver-version.full")
        has_gpu = has_nvidia_gpu(labels)
        return cls(
            name=str(metadata.get("name", "")),
            labels=labels,
            has_nvidia_gpu=has_gpu,
            gpu_source="gfd-label" if product is not None else None,
            gpu_memory_mib=_int(labels.get("nvidia.com/gpu.memory")),  # MiB, as NVML reports it (facts §4)
            unidentified=NO_GFD if has_gpu and product is None else None,
            gpu_product=product,
            gpu_family=labels.get("nvidia.com/gpu.family") or (family_of(*cc) if cc else None),
            cc=cc,
            gpu_count=_int(labels.get("nvidia.com/gpu.count")),
            mig_capable=_bool(labels.get("nvidia.com/mig.capable")),
            mig_enabled=_mig_enabled(labels),
            driver_version=driver,
            driver_version_source="gfd-label" if driver else None,
            preinstalled_driver=labels.get("nvidia.com/gpu.deploy.driver") == "pre-installed",
            containerized_driver=labels.get(DRIVER_UPGRADE_STATE_LABEL) in DRIVER_CHANGING_STATES,
            runtime_handlers=tuple(
                str(h.get("name")) for h in status.get("runtimeHandlers") or [] if h.get("name")
            ),
            container_runtime=_runtime(str(info.get("containerRuntimeVersion", ""))),
            os_id=labels.get("feature.node.kubernetes.io/system-os_release.ID"),
            os_version=labels.get("feature.node.kubernetes.io/system-os_release.VERSION_ID"),
            kernel=labels.get("feature.node.kubernetes.io/kernel-version.full") or info.get("kernelVersion"),
            allocatable_gpus=_int((status.get("allocatable") or {}).get("nvidia.com/gpu")),
            allocatable_mig=_mig_resources(status.get("allocatable") or {}),
        )


def gpu_identity(fact: NodeFacts) -> dict[str, str]:
    """The GPU identity node pools select by (:func:`gpuplan.planner.pools.identity_of`): GFD's, else the
    PCI id's NFD listed."""
    return pools.identity_of(fact.labels, pci_ids.lookup(fact.pci_device) if fact.pci_device else None)


def pool_labels(fact: NodeFacts) -> dict[str, str]:
    """The labels node pools are matched against (design §8.3, :mod:`gpuplan.planner.pools`)."""
    return pools.pool_labels(fact.labels, gpu_identity(fact))


def reported_driver(node: Mapping[str, Any]) -> str | None:
    """The driver version a node with an NVIDIA GPU reports (GFD's label), as :meth:`NodeFacts.from_node`
    has it, without the node's other facts: what an apply records of every node of a fleet."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    driver = labels.get("nvidia.com/cuda.driver-version.full")
    if not driver:
        return None
    return str(driver) if has_nvidia_gpu(labels) else None


def has_nvidia_gpu(labels: Mapping[str, str]) -> bool:
    """Whether a node's labels say it has an NVIDIA GPU: NFD's PCI vendor labels, or GFD's product."""
    return labels.get("nvidia.com/gpu.product") is not None or any(
        labels.get(key) == "true" for key in NFD_GPU_LABELS
    )


MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


def _mig_resources(allocatable: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """The device plugin's mixed strategy advertises each MIG profile as ``nvidia.com/mig-<profile>``."""
    found = (
        (key.removeprefix(MIG_RESOURCE_PREFIX), _int(value) or 0)
        for key, value in sorted(allocatable.items())
        if key.startswith(MIG_RESOURCE_PREFIX)
    )
    return tuple((profile, count) for profile, count in found if count)


NO_GFD = "GPU model unknown until GFD runs"
NO_SOURCE = "no GFD labels and no NodeFeature from NFD: whether it has an NVIDIA GPU, and which, is unknown"
NO_NODE_FEATURE = "GPU model unknown: no GFD labels, and NFD has published no NodeFeature for this node"
NO_NFD = "no GFD labels and no NFD in the cluster: whether it has an NVIDIA GPU, and which, is unknown"
NFD_LABEL_PREFIX = "feature.node.kubernetes.io/"


def with_node_features(fact: NodeFacts, features: NodeFeatures) -> NodeFacts:
    """``fact`` with what the node's NodeFeature says of its GPUs, when GFD has not labelled it (GFD's labels
    win, see the module doc); the PCI device id is kept either way."""
    devices = [device for device in features.devices.get(fact.name, ()) if _is_gpu(device.pci_class)]
    pci_device = f"0x{_most_common(devices)}" if devices else None
    if fact.gpu_source == "gfd-label":
        return dataclasses.replace(fact, pci_device=pci_device)
    if features.status == "read" and fact.name not in features.devices:
        why = NO_NODE_FEATURE if fact.has_nvidia_gpu else NO_SOURCE
        return dataclasses.replace(fact, unidentified=why)
    if features.status == "not-served" and not any(key.startswith(NFD_LABEL_PREFIX) for key in fact.labels):
        return dataclasses.replace(fact, unidentified=NO_NFD)  # not even NFD's labels: no NFD ran there
    if pci_device is None:
        return fact
    gpu = pci_ids.lookup(pci_device)
    if gpu is None:
        return dataclasses.replace(
            fact, has_nvidia_gpu=True, pci_device=pci_device, unidentified=pci_ids.unknown_device(pci_device)
        )
    return dataclasses.replace(
        fact,
        has_nvidia_gpu=True,
        gpu_product=gpu.product,
        gpu_family=gpu.family,
        cc=gpu.cc,
        gpu_count=sum(1 for device in devices if device.device == gpu.device),
        mig_capable=gpu.mig_capable,
        gpu_memory_mib=gpu.memory_mib,
        gpu_source="nfd",
        pci_device=pci_device,
        unidentified=None,
    )


def _is_gpu(pci_class: str) -> bool:
    return pci_class[:4] in pci_ids.GPU_CLASSES


def _most_common(devices: Sequence[PciDevice]) -> str:
    """The device id most of the node's GPUs have (a node of one model, as GFD assumes too)."""
    ids = [device.device for device in devices]
    return max(dict.fromkeys(ids), key=ids.count)


def _compute_capability(labels: Mapping[str, str]) -> tuple[int, int] | None:
    major = _int(labels.get("nvidia.com/gpu.compute.major"))
    minor = _int(labels.get("nvidia.com/gpu.compute.minor"))
    if major is None or major == 0:
        return None
    return major, minor or 0


def _mig_enabled(labels: Mapping[str, str]) -> bool | None:
    """MIG mode as GFD reports it: MIG products or per-profile counts; unknown before GFD ran."""
    if "nvidia.com/gpu.product" not in labels:
        return None
    if "-MIG-" in labels["nvidia.com/gpu.product"]:
        return True
    if any(
        key.startswith("nvidia.com/mig-") and key.endswith(".count") and value not in ("", "0")
        for key, value in labels.items()
    ):
        return True
    config = labels.get("nvidia.com/mig.config")
    return config is not None and config != "all-disabled" or False


def _runtime(version: str) -> str | None:
    scheme = version.split("://", 1)[0] if "://" in version else ""
    return {"containerd": "containerd", "cri-o": "crio", "docker": "docker"}.get(scheme)


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _bool(value: str | None) -> bool | None:
    return None if value is None else value == "true"


@dataclass(frozen=True)
class Platform:
    """The OS tag and container runtime the stack's objects are rendered for (None: the spec's defaults)."""

    os_tag: str | None = None
    container_runtime: Runtime | None = None


def stack_platform(nodes: Sequence[NodeFacts]) -> Platform:
    """The one answer plan, apply and drift render with, by the GPU Operator's rules over the GPU nodes: the
    first GPU node's OS (facts §1.4) and the runtime they report, containerd preferred (facts §3). While no
    node is known to have a GPU (NFD has not labelled them yet), the rules look at every node."""
    gpu_nodes = [node for node in nodes if node.has_nvidia_gpu] or list(nodes)
    return Platform(os_tag=stack_os_tag(gpu_nodes), container_runtime=stack_container_runtime(gpu_nodes))


def stack_os_tag(nodes: Sequence[NodeFacts]) -> str | None:
    """The driver image OS suffix: the first node's that reports one, as the operator picks it (facts
    §1.4)."""
    return next((node.os_tag for node in nodes if node.os_tag), None)


def stack_container_runtime(nodes: Sequence[NodeFacts]) -> Runtime | None:
    """The container runtime the nodes report; containerd wins when they disagree (the operator's choice)."""
    found = {node.container_runtime for node in nodes if node.container_runtime}
    preference: tuple[Runtime, ...] = ("containerd", "crio", "docker")
    return next((runtime for runtime in preference if runtime in found), None)
