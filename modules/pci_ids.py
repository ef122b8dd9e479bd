"""Which NVIDIA GPU a PCI device id is: the table that names a node's GPU before GPU Feature Discovery runs.

NFD's worker lists every PCI device of a node in its NodeFeature object (``pci.device`` instances with
``vendor``, ``device`` and ``class``, fleet facts §1.2, §1.3), from the moment it runs, long before the
driver and GFD. This table turns such a device id into what GFD would label once it runs: the product
(``nvidia.com/gpu.product``, the NVML name through GFD's sanitiser), the architecture family, the compute
capability, MIG capability and, where a source gives it, the memory NVML reports. The compatibility rules of
``planner/spec/compat.py`` read these facts the same whichever source gave them.

Source: fleet facts §2 (device ids and NVML names from open-gpu-kernel-modules 595.45.04 ``README.md``
"Compatible GPUs" and nvidia-installer 590.48.01 ``nvGpus.h``; compute capability from
developer.nvidia.com/cuda-gpus; memory totals only where §2 found them). A device id missing here is named
as such (:func:`unknown_device`), never guessed from its neighbours.

Callers: :mod:`gpuplan.planner.facts` (NodeFacts from a node's NodeFeature).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

GPU_CLASSES = ("0300", "0302")
"""VGA (GeForce, workstation) and 3D controller (data centre boards), fleet facts §2; an HGX board's
NVSwitches are NVIDIA devices too, of class 0680 (bridge), and are not GPUs."""


@dataclass(frozen=True)
class PciGpu:
    """One GPU product as its PCI device id tells it."""

    device: str
    """Four lower-case hex digits, as NFD publishes ``device`` (``1db5``)."""
    name: str
    """The NVML device name."""
    product: str
    """GFD's ``nvidia.com/gpu.product`` for the unshared GPU."""
    family: str
    """GFD's ``nvidia.com/gpu.family`` (``getArchFamily`` of the compute capability)."""
    cc: tuple[int, int]
    mig_capable: bool
    memory_mib: int | None = None


def _gpu(
    device: str, name: str, family: str, cc: tuple[int, int], mig: bool, memory_mib: int | None = None
) -> PciGpu:
    product = name.replace(" ", "-")  # GFD's sanitiser: these names hold no other character it drops
    return PciGpu(device.lower(), name, product, family, cc, mig, memory_mib)


_AMPERE_GEFORCE = ("2503", "2504", "2544", "2487", "24c7")  # GA106 and GA104 RTX 3060 boards
_TABLE = (
    *(_gpu(device, "NVIDIA GeForce RTX 3060", "ampere", (8, 6), False) for device in _AMPERE_GEFORCE),
    _gpu("1EB8", "Tesla T4", "turing", (7, 5), False, 15360),
    _gpu("1DB5", "Tesla V100-SXM2-32GB", "volta", (7, 0), False),
    _gpu("1DB1", "Tesla V100-SXM2-16GB", "volta", (7, 0), False),
    _gpu("1DB4", "Tesla V100-PCIE-16GB", "volta", (7, 0), False),
    _gpu("1DB6", "Tesla V100-PCIE-32GB", "volta", (7, 0), False),
    _gpu("20B2", "NVIDIA A100-SXM4-80GB", "ampere", (8, 0), True),
    _gpu("20B0", "NVIDIA A100-SXM4-40GB", "ampere", (8, 0), True),
    _gpu("20B5", "NVIDIA A100 80GB PCIe", "ampere", (8, 0), True),
    _gpu("20F1", "NVIDIA A100-PCIE-40GB", "ampere", (8, 0), True),
    _gpu("20B7", "NVIDIA A30", "ampere", (8, 0), True),
    _gpu("26B9", "NVIDIA L40S", "ada-lovelace", (8, 9), False),
    _gpu("2330", "NVIDIA H100 80GB HBM3", "hopper", (9, 0), True, 81559),
    _gpu("2331", "NVIDIA H100 PCIe", "hopper", (9, 0), True),
    _gpu("2321", "NVIDIA H100 NVL", "hopper", (9, 0), True),
    _gpu("2339", "NVIDIA H100", "hopper", (9, 0), True),
    _gpu("2335", "NVIDIA H200", "hopper", (9, 0), True, 143771),
    _gpu("233B", "NVIDIA H200 NVL", "hopper", (9, 0), True),
    _gpu("2901", "NVIDIA B200", "blackwell", (10, 0), True, 183359),
)

BY_DEVICE: Mapping[str, PciGpu] = MappingProxyType({gpu.device: gpu for gpu in _TABLE})


def normalise(device: str) -> str:
    """``0x1DB5`` or ``1DB5`` -> ``1db5``, the form NFD publishes (the kernel's lower-case hex, no ``0x``)."""
    value = device.strip().lower()
    return value[2:] if value.startswith("0x") else value


def lookup(device: str) -> PciGpu | None:
    """The GPU of an NVIDIA PCI device id, None when the table does not have it."""
    return BY_DEVICE.get(normalise(device))


def unknown_device(device: str) -> str:
    """How a device id the table lacks is named in findings and views."""
    return f"NVIDIA device 0x{normalise(device)}, not in gpuplan's PCI table"
