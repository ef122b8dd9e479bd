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

import functools
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


@functools.lru_cache(maxsize=1024)
def version_tuple(version: str) -> tuple[int, ...]:
    """``"580.105.08"`` -> ``(580, 105, 8)``; non-numeric parts count as 0 so odd tags still compare.
    Cached: the kubelet rules compare a node's driver at every evaluation of its pods."""
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


@dataclass(frozen=True)
class MigProfile:
    """One GPU instance profile of a MIG-capable GPU, as NVML describes it (fleet facts §4.3).

    ``name`` is the profile string mig-parted and the device plugin use (``1g.10gb``, ``1g.10gb+me``);
    ``slices`` the compute (GPU instance) slices, ``memory_slices`` the eighths of memory it takes;
    ``max_count`` how many fit on one GPU; ``memory_mib`` / ``multiprocessors`` what GFD labels.
    """

    name: str
    slices: int
    memory_slices: int
    max_count: int
    memory_mib: int
    multiprocessors: int

    @property
    def resource_suffix(self) -> str:
        """The device plugin's name for it: ``+`` becomes ``.`` (``nvidia.com/mig-1g.10gb.me``)."""
        return self.name.replace("+", ".")

    @property
    def engines(self) -> Mapping[str, int]:
        """GFD's ``engines.*`` counts. Copy, decoder and JPEG engines follow the slices as on the H100 of
        fleet facts §4.6 (1g: 1, 2g: 2, 3g: 3); 4g and 7g counts, OFA and the +me variants are [assumed]."""
        media = self.slices if self.slices <= 3 else (4 if self.slices == 4 else 7)
        whole = self.slices == 7 or self.name.endswith("+me")
        return MappingProxyType(
            {"copy": media, "decoder": media, "encoder": 0, "jpeg": media, "ofa": 1 if whole else 0}
        )


def _mig_family(memory: tuple[str, str, str, str, str], mib: int, sm: int) -> tuple[MigProfile, ...]:
    """The seven profiles of an A100/H100-class GPU: names from ``memory`` (1g, 1g with two memory slices,
    2g, 3g, 7g sizes), memory and SMs scaled from one slice's ``mib`` / ``sm`` (the go-nvml mocks of fleet
    facts §4.3; their figures are approximations for H200 and B200)."""
    one, double, two, three, seven = memory
    return (
        MigProfile(f"1g.{one}", 1, 1, 7, mib, sm),
        MigProfile(f"1g.{one}+me", 1, 1, 1, mib, sm),
        MigProfile(f"1g.{double}", 1, 2, 4, 2 * mib + 256, sm),
        MigProfile(f"2g.{two}", 2, 2, 3, 2 * mib + 256, 2 * sm),
        MigProfile(f"3g.{three}", 3, 4, 2, 4 * mib + 768, 3 * sm),
        MigProfile(f"4g.{three}", 4, 4, 1, 4 * mib + 768, 4 * sm),
        MigProfile(f"7g.{seven}", 7, 8, 1, 8 * mib + 1536, 7 * sm),
    )


_A100_80GB_MIG = _mig_family(("10gb", "20gb", "20gb", "40gb", "80gb"), 9856, 14)
MIG_PROFILES: Mapping[str, tuple[MigProfile, ...]] = MappingProxyType(
    {
        "a100-80gb": _A100_80GB_MIG,
        # H100 80GB: 1g.10gb 9984 MiB / 16 SM, 2g.20gb 20096 / 32, 3g.40gb 40320 / 60 (fleet facts §4.6)
        "h100-80gb": tuple(
            MigProfile(p.name, p.slices, p.memory_slices, p.max_count, mib, sm)
            for p, (mib, sm) in zip(
                _mig_family(("10gb", "20gb", "20gb", "40gb", "80gb"), 9984, 16),
                ((9984, 16), (9984, 16), (20096, 16), (20096, 32), (40320, 60), (40320, 64), (80896, 132)),
            )
        ),
        "h200": _mig_family(("18gb", "35gb", "35gb", "71gb", "141gb"), 18432, 16),
        "b200": _mig_family(("23gb", "45gb", "45gb", "90gb", "180gb"), 23552, 18),
    }
)


def mig_profiles(model: GpuModel) -> tuple[MigProfile, ...]:
    """The MIG profiles ``model`` offers (none for a GPU that is not MIG-capable)."""
    return MIG_PROFILES.get(model.key, ()) if model.mig_capable else ()
