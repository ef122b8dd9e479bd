"""The GPU catalog of design §6: what NVML reports for each simulated GPU model.

Every simulated node carries GPUs of one catalog model. The facts here are what the real components read from
NVML and PCI: GFD derives its ``nvidia.com/gpu.*`` labels from them (facts §4), the DCGM exporter its
``modelName`` and value ranges (facts §6), and the driver rules check driver branch against architecture
(facts §10.1). Pure data; read by ``gpuplan.sim.scenario``, ``gpuplan.sim.nodes`` and ``gpuplan.sim.kubelet``.

Sources: names, memory and compute capability are the NVML figures of design §6 (nvidia-smi prints the same
memory totals); PCI device and subsystem IDs are those of fleet facts §2 (the open GPU kernel modules'
"Compatible GPUs" list, nvidia-installer's legacy list for the V100; the subsystem device is the first
listed, and left out where §2 lists none), which NFD publishes in each node's NodeFeature. B200 memory: NVML
reports 183359 MiB for the HGX B200 (180 GB HBM3e; nvidia-smi prints ``183359MiB``). Minimum drivers and
clock/power figures not in the facts file are marked [assumed] at their entry.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

PCI_CLASS_3D_CONTROLLER = "0302"  # data-centre GPUs: no display engine exposed
PCI_CLASS_VGA = "0300"  # GeForce / workstation cards with display outputs


@dataclass(frozen=True)
class GpuModel:
    """One GPU product as NVML and the PCI bus describe it.

    ``key`` is the catalog key used in scenario files; ``name`` is the exact NVML device name, which GFD
    sanitises into ``nvidia.com/gpu.product`` and the DCGM exporter prints as ``modelName``.
    """

    key: str
    name: str
    memory_mib: int
    cc_major: int
    cc_minor: int
    mig_capable: bool
    pci_device_id: str
    power_limit_w: int
    pci_class: str = PCI_CLASS_3D_CONTROLLER
    min_driver: str = "450.51.05"  # oldest driver release that knows this GPU
    last_driver_branch: int | None = None  # newest driver branch that still supports it (legacy GPUs only)
    max_sm_clock_mhz: int = 1410
    max_mem_clock_mhz: int = 1593
    idle_power_w: int = 60
    nvlink: bool = False
    hbm: bool = False  # HBM reports a memory temperature and supports row remapping
    pci_subsystem_device: str | None = None  # the board's subsystem id (vendor 10de), fleet facts §2

    @property
    def family(self) -> str:
        """GFD's ``getArchFamily`` for this GPU's compute capability (facts §4)."""
        return gpu_family(self.cc_major, self.cc_minor)

    @property
    def product(self) -> str:
        """The ``nvidia.com/gpu.product`` value GFD writes for an unshared GPU."""
        return sanitise_label_value(self.name)

    @property
    def pci_id(self) -> str:
        """``vendor:device`` as the kernel prints it, e.g. ``10de:20b2``."""
        return f"10de:{self.pci_device_id[2:].lower()}"


def gpu_family(cc_major: int, cc_minor: int) -> str:
    """Architecture family from compute capability, exactly as GFD's ``getArchFamily`` maps it."""
    if cc_major == 7:
        return "volta" if cc_minor < 5 else "turing"
    if cc_major == 8:
        return "ada-lovelace" if cc_minor >= 9 else "ampere"
    return _FAMILY_BY_MAJOR.get(cc_major, "undefined")


_FAMILY_BY_MAJOR = {
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

_NOT_IN_LABEL = re.compile(r"[^A-Za-z0-9\-_. ]")


def sanitise_label_value(value: str) -> str:
    """GFD's sanitiser: drop characters outside ``[A-Za-z0-9-_. ]``, spaces become ``-``, at most 63 chars."""
    return _NOT_IN_LABEL.sub("", value).strip().replace(" ", "-")[:63].strip("-_.")


_MODELS = (
    GpuModel(
        "rtx-3060",
        "NVIDIA GeForce RTX 3060",
        12288,
        8,
        6,
        False,
        "0x2504",
        170,
        pci_class=PCI_CLASS_VGA,
        min_driver="460.39",  # [assumed] first Linux release with GA106
        max_sm_clock_mhz=2100,
        max_mem_clock_mhz=7501,
        idle_power_w=15,
    ),
    GpuModel(
        "t4",
        "Tesla T4",
        15360,
        7,
        5,
        False,
        "0x1EB8",
        70,
        min_driver="410.79",
        max_sm_clock_mhz=1590,
        max_mem_clock_mhz=5001,
        idle_power_w=10,
        pci_subsystem_device="0x12A2",
    ),
    GpuModel(
        "v100",
        "Tesla V100-SXM2-32GB",
        32768,
        7,
        0,
        False,
        "0x1DB5",
        300,
        min_driver="396.26",
        last_driver_branch=580,  # facts §10.1: R580 is the last branch for Maxwell, Pascal and Volta
        max_sm_clock_mhz=1530,
        max_mem_clock_mhz=877,
        idle_power_w=40,
        nvlink=True,
        hbm=True,
    ),
    GpuModel(
        "a100-80gb",
        "NVIDIA A100-SXM4-80GB",
        81920,
        8,
        0,
        True,
        "0x20B2",
        400,
        min_driver="450.51.05",
        max_sm_clock_mhz=1410,
        max_mem_clock_mhz=1593,
        idle_power_w=60,
        nvlink=True,
        hbm=True,
        pci_subsystem_device="0x1463",
    ),
    GpuModel(
        "l40s",
        "NVIDIA L40S",
        46068,
        8,
        9,
        False,
        "0x26B9",
        350,
        min_driver="535.54.03",  # [assumed] L40S shipped with the R535 data-centre branch
        max_sm_clock_mhz=2520,
        max_mem_clock_mhz=9001,
        idle_power_w=35,
        pci_subsystem_device="0x1851",
    ),
    GpuModel(
        "h100-80gb",
        "NVIDIA H100 80GB HBM3",
        81559,
        9,
        0,
        True,
        "0x2330",
        700,
        min_driver="525.60.13",
        max_sm_clock_mhz=1980,
        max_mem_clock_mhz=2619,
        idle_power_w=70,
        nvlink=True,
        hbm=True,
        pci_subsystem_device="0x16C1",
    ),
    GpuModel(
        "h200",
        "NVIDIA H200",
        143771,
        9,
        0,
        True,
        "0x2335",
        700,
        min_driver="550.54.14",  # [assumed] facts §10.1: H200 needs a newer branch than R525
        max_sm_clock_mhz=1980,
        max_mem_clock_mhz=3201,
        idle_power_w=75,
        nvlink=True,
        hbm=True,
        pci_subsystem_device="0x18BE",
    ),
    GpuModel(
        "b200",
        "NVIDIA B200",
        183359,
        10,
        0,
        True,
        "0x2901",
        1000,
        min_driver="570.133.20",  # facts §10.1: HGX B200 needs >= 570.133.20 (GPU Operator docs)
        max_sm_clock_mhz=1965,
        max_mem_clock_mhz=3996,
        idle_power_w=140,
        nvlink=True,
        hbm=True,
        pci_subsystem_device="0x1999",
    ),
)

CATALOG: Mapping[str, GpuModel] = MappingProxyType({model.key: model for model in _MODELS})


def version_tuple(version: str) -> tuple[int, ...]:
    """``"580.105.08"`` -> ``(580, 105, 8)``; non-numeric parts count as 0 so odd tags still compare."""
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def driver_support_error(model: GpuModel, driver: str) -> str | None:
    """Why driver release ``driver`` cannot drive ``model`` (facts §10.1), or None when it can.

    The wording is what the driver's kernel module logs (``NVRM:``) when it refuses a GPU it does not support.
    """
    branch = version_tuple(driver)[0]
    too_new = model.last_driver_branch is not None and branch > model.last_driver_branch
    too_old = version_tuple(driver) < version_tuple(model.min_driver)
    if not (too_new or too_old):
        return None
    return (
        f"NVRM: The NVIDIA GPU (PCI ID: {model.pci_id}) installed in this system is not supported by the "
        f"NVIDIA {driver} driver release. Please see 'Appendix A - Supported NVIDIA GPU Products' in this "
        f"release's README."
    )
