"""DCGM fields the simulated exporter knows: the default counters of facts §6 and a few commented-out extras
a custom ``dcgm-metrics.csv`` may enable, each with its Prometheus type, HELP text and how its value moves.

Values are deterministic functions of the GPU, the time and its faults (``GpuFault``): utilisation follows a
slow per-GPU wave (period 5-10 min), temperature, power, clocks and memory follow utilisation, counters only
grow (energy is the closed-form integral of the power curve). Used by ``gpuplan.sim.kubelet.dcgm``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from gpuplan.sim.kubelet.state import GpuDevice
from gpuplan.sim.scenario import GpuFault

# Driver XID texts (NVIDIA "XID Errors" table) for the codes a fault is likely to name.
XID_MESSAGES = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
}


@dataclass(frozen=True)
class Sample:
    """Everything a field's value may depend on, for one GPU at one instant."""

    gpu: GpuDevice
    now: float
    fault: GpuFault | None

    @property
    def seed(self) -> int:
        return int(self.gpu.uuid[4:12], 16)

    @property
    def omega(self) -> float:
        return 2 * math.pi / (300 + self.seed % 300)

    @property
    def phase(self) -> float:
        return (self.seed % 1000) / 1000 * 2 * math.pi

    @property
    def natural_util(self) -> float:
        """The GPU's own load: 35 +- 30 %, a wave over minutes."""
        return 35 + 30 * math.sin(self.omega * self.now + self.phase)

    @property
    def util(self) -> float:
        if self.fault is not None and self.fault.utilization is not None:
            return float(self.fault.utilization)
        return self.natural_util

    @property
    def xid(self) -> int:
        return self.fault.xid if self.fault is not None and self.fault.xid is not None else 0


def _gpu_temp(s: Sample) -> int:
    if s.fault is not None and s.fault.temperature is not None:
        return s.fault.temperature
    return int(30 + 0.45 * s.util) + s.seed % 5


def _memory_temp(s: Sample) -> int:
    return _gpu_temp(s) + 4 if s.gpu.model.hbm else 0  # GDDR boards report no memory temperature


def _power(s: Sample) -> float:
    model = s.gpu.model
    return round(model.idle_power_w + (model.power_limit_w - model.idle_power_w) * 0.9 * s.util / 100, 3)


def _energy_mj(s: Sample) -> int:
    """Integral of the natural power curve from t=0: idle + k*(35 + 30 sin(w t + p)), always increasing."""
    model = s.gpu.model
    k = (model.power_limit_w - model.idle_power_w) * 0.9 / 100
    mean, swing = model.idle_power_w + 35 * k, 30 * k
    joules = mean * s.now - swing / s.omega * (math.cos(s.omega * s.now + s.phase) - math.cos(s.phase))
    return int(joules * 1000)


def _fb_reserved(s: Sample) -> int:
    return int(s.gpu.model.memory_mib * 0.0065)


def _fb_used(s: Sample) -> int:
    return int(s.gpu.model.memory_mib * (0.01 + 0.6 * s.util / 100))


def _fb_free(s: Sample) -> int:
    return s.gpu.model.memory_mib - _fb_used(s) - _fb_reserved(s)


def _sm_clock(s: Sample) -> int:
    return int(210 + (s.gpu.model.max_sm_clock_mhz - 210) * min(1.0, s.util / 20))


def _nvlink_total(s: Sample) -> int:
    return int(s.now * 25_000) if s.gpu.model.nvlink else 0


def _uncorrectable_rows(s: Sample) -> int:
    return 1 if s.xid in (48, 63, 64, 94, 95) else 0


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # Prometheus type: gauge | counter (label fields are in LABEL_FIELDS)
    help: str
    value: Callable[[Sample], float | int]


DEFAULT_FIELDS: tuple[Field, ...] = (
    Field("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", _sm_clock),
    Field(
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "Memory clock frequency (in MHz).",
        lambda s: s.gpu.model.max_mem_clock_mhz,
    ),
    Field("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", _memory_temp),
    Field("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", _gpu_temp),
    Field("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", _power),
    Field(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        _energy_mj,
    ),
    Field(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", lambda s: s.seed % 3
    ),
    Field("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda s: int(s.util)),
    Field("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", lambda s: int(s.util * 0.6)),
    Field("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", lambda s: 0),
    Field("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", lambda s: 0),
    Field("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", lambda s: s.xid),
    Field("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", _fb_free),
    Field("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", _fb_used),
    Field("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", _fb_reserved),
    Field(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total number of NVLink bandwidth counters for all lanes.",
        _nvlink_total,
    ),
    Field("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", lambda s: 0),
    Field(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        _uncorrectable_rows,
    ),
    Field(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        lambda s: 0,
    ),
    Field(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        lambda s: 1 if s.xid == 64 else 0,
    ),
    Field(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        lambda s: round(s.util / 100 * 0.98, 6),
    ),
    Field(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        lambda s: round(s.util / 100 * 0.4, 6),
    ),
    Field(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        lambda s: round(s.util / 100 * 0.5, 6),
    ),
    Field(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both "
        "protocol headers and data payloads - in bytes per second.",
        lambda s: int(s.util * 9_000_000),
    ),
    Field(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both "
        "protocol headers and data payloads - in bytes per second.",
        lambda s: int(s.util * 13_000_000),
    ),
)

# Fields of the default CSV that are commented out, for custom collectors files.
EXTRA_FIELDS: tuple[Field, ...] = (
    Field(
        "DCGM_FI_DEV_POWER_VIOLATION",
        "counter",
        "Throttling duration due to power constraints (in us).",
        lambda s: 0,
    ),
    Field(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        "counter",
        "Throttling duration due to thermal constraints (in us).",
        lambda s: int(s.now * 1000) if _gpu_temp(s) >= 85 else 0,
    ),
    Field(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        lambda s: 0,
    ),
    Field(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        lambda s: 1 if s.xid == 48 else 0,
    ),
    Field(
        "DCGM_FI_PROF_SM_ACTIVE",
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned (in %).",
        lambda s: round(s.util / 100 * 0.9, 6),
    ),
    Field(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gauge",
        "The ratio of number of warps resident on an SM (in %).",
        lambda s: round(s.util / 100 * 0.45, 6),
    ),
)

FIELDS: dict[str, Field] = {field.name: field for field in DEFAULT_FIELDS + EXTRA_FIELDS}
LABEL_FIELDS = (
    "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_NVML_VERSION",
    "DCGM_FI_DEV_BRAND",
    "DCGM_FI_DEV_SERIAL",
    "DCGM_FI_DEV_NAME",
)
# default-counters.csv order: the label field sits between the row-remap counters and the DCP (PROF) fields.
DEFAULT_CSV_FIELDS = (
    [(field.name, field.kind) for field in DEFAULT_FIELDS[:20]]
    + [("DCGM_FI_DRIVER_VERSION", "label")]
    + [(field.name, field.kind) for field in DEFAULT_FIELDS[20:]]
)
# DCGM's double-valued fields, printed with %f by the exporter; every other field is an int64 ("%d").
FLOAT_FIELDS = frozenset(
    {"DCGM_FI_DEV_POWER_USAGE"}
    | {
        f.name
        for f in DEFAULT_FIELDS + EXTRA_FIELDS
        if f.name.startswith("DCGM_FI_PROF_") and not f.name.endswith("_BYTES")
    }
)
