"""One simulated node's GPU stack: its GPUs, drivers, runtime handlers and faults.

A :class:`NodeGpuState` exists per node; the kubelet runtime (``gpuplan.sim.kubelet.runtime``) owns and
mutates it (applies the rules' :class:`~gpuplan.sim.kubelet.outcomes.NodeEffect`, keeps ``ready_roles``,
``labels`` and ``gpu_faults`` current), and the rules in this package only read it.

GPU identities are deterministic: the UUID is a uuid5 of node name and index, and PCI bus IDs follow the
layout of an 8-GPU HGX board, so every run of a scenario shows the same devices.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from gpuplan.sim.catalog import GpuModel, driver_support_error
from gpuplan.sim.kubelet.images import Role
from gpuplan.sim.scenario import ConcreteNode, GpuFault

GPU_UUID_NAMESPACE = uuid.UUID("6f1c3c4e-8d0b-5d0e-9a57-2c1d6a0f4b11")
# PCI buses of the eight GPUs on a DGX H100 board; a single-GPU workstation has its GPU on bus 01.
HGX_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)
NVIDIA_HANDLERS = ("nvidia", "nvidia-cdi", "nvidia-legacy")


@dataclass(frozen=True)
class GpuDevice:
    """One physical GPU as NVML enumerates it."""

    index: int
    uuid: str  # "GPU-<uuid>", stable per node name and index
    pci_bus_id: str  # NVML's form: "00000000:1B:00.0"
    model: GpuModel

    @property
    def device(self) -> str:
        """The character device name DCGM reports (``nvidia0``)."""
        return f"nvidia{self.index}"


def gpu_devices(node: ConcreteNode) -> list[GpuDevice]:
    """The GPUs of ``node``: deterministic UUIDs and bus IDs."""
    if node.gpu is None:
        return []
    devices = []
    for index in range(node.gpu_count):
        bus = HGX_BUSES[index] if node.gpu_count > 1 and index < len(HGX_BUSES) else 0x01 + index
        gpu_uuid = uuid.uuid5(GPU_UUID_NAMESPACE, f"{node.name}/{index}")
        devices.append(GpuDevice(index, f"GPU-{gpu_uuid}", f"00000000:{bus:02X}:00.0", node.gpu))
    return devices


@dataclass
class NodeGpuState:
    """The GPU facts of one node, as its kubelet and the NVIDIA components see them.

    Construct with just ``NodeGpuState(node)``: GPUs, host driver and toolkit and runtime handlers are
    derived from the scenario node. ``container_driver`` is set by a Ready driver pod's effect;
    ``runtime_handlers`` gains ``nvidia`` (and ``nvidia-cdi``, ``nvidia-legacy``) from a Ready toolkit pod;
    ``ready_roles`` lists the NVIDIA roles with a Ready pod here; ``resources`` is the node's current
    extended-resource capacity (``nvidia.com/gpu`` ...); ``labels`` the node's current labels.
    """

    node: ConcreteNode
    gpus: list[GpuDevice] = field(default_factory=list)
    host_driver: str | None = None
    host_toolkit: str | None = None
    container_driver: str | None = None
    runtime_handlers: set[str] = field(default_factory=set)
    ready_roles: set[Role] = field(default_factory=set)
    gpu_faults: dict[int, GpuFault] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    pending_labels: dict[str, str | None] = field(default_factory=dict)
    """Label writes of this node's effects still on their way to the API server (None: a removal): the
    cache shows the node as it was until their answer comes, and an effect is judged against both."""
    resources: dict[str, str] = field(default_factory=dict)
    mig: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """GPU index -> the profiles of its MIG devices, for each GPU in MIG mode (see ``kubelet.mig``)."""

    def __post_init__(self) -> None:
        # Fields left at their defaults take the scenario node's facts.
        if not self.gpus:
            self.gpus = gpu_devices(self.node)
        if self.host_driver is None:
            self.host_driver = self.node.host_driver
        if self.host_toolkit is None:
            self.host_toolkit = self.node.host_toolkit
        if not self.runtime_handlers:
            self.runtime_handlers = {"runc"} | ({"nvidia"} if self.host_toolkit else set())
        if not self.labels:
            self.labels = dict(self.node.labels)

    @property
    def driver_version(self) -> str | None:
        """The driver NVML reports: the host's, else the one a driver container installed."""
        return self.host_driver or self.container_driver

    @property
    def model(self) -> GpuModel | None:
        return self.node.gpu

    @property
    def default_runtime(self) -> str:
        """containerd's default handler, used by pods without a runtimeClassName."""
        return self.node.default_runtime if self.node.default_runtime in self.runtime_handlers else "runc"

    def driver_error(self) -> str | None:
        """Why no working driver is loaded (none installed, or one that does not support these GPUs)."""
        version = self.driver_version
        if version is None:
            return "driver not loaded"
        if self.node.gpu is None:
            return None
        return driver_support_error(self.node.gpu, version)

    def driver_works(self) -> bool:
        return self.driver_error() is None

    def has_handler(self, handler: str) -> bool:
        return handler in self.runtime_handlers
