"""NVML: the GPUs of the host gpuplan runs on. The only code in gpuplan that imports ``pynvml``.

Called by ``gpuplan inventory --local`` (through :mod:`gpuplan.planner.observe.inventory`); later by refresh
when gpuplan runs on a GPU node itself (design §5: a host-owned driver version from NVML).
:func:`read_local_host` returns plain frozen values (:class:`LocalHost`, :class:`LocalGpu`): no pynvml type
leaks out.

``pynvml`` comes from the ``nvidia-ml-py`` distribution (the ``pynvml`` distribution is deprecated and warns
on import) and is imported lazily inside :func:`load_nvml`, so ``gpuplan --help`` never loads it.

What can go wrong, and what the caller sees:

- no usable driver (``NVMLError_LibraryNotFound``: libnvidia-ml.so.1 missing; ``NVMLError_DriverNotLoaded``;
  ``NVMLError_NoPermission``; a library/kernel-module mismatch) or no pynvml at all ->
  :class:`NvmlUnavailableError`, whose summary is the one line the CLI prints, e.g. "No NVIDIA driver on this
  host: libnvidia-ml.so.1 not found (NVML: Library Not Found)";
- a field a GPU does not support (``NVMLError_NotSupported``, a function the driver lacks
  ``NVMLError_FunctionNotFound``, ``NVMLError_NoData``) -> that field is ``None``; MIG mode "N/A" on a GPU
  without MIG is how NVML says it is not MIG capable;
- any other NVML error while reading a GPU -> :class:`gpuplan.errors.ProviderError` naming the GPU and the
  call.

``nvmlShutdown`` is called on every path once ``nvmlInit`` succeeded.

Seam for tests and rehearsals: ``read_local_host(nvml=...)`` takes any object with pynvml's surface
(:class:`gpuplan.providers.fake_nvml.FakeNvml`); when none is given and the environment variable
``GPUPLAN_NVML_FAKE`` names a JSON description (:func:`gpuplan.providers.fake_nvml.load_description`), that
fake host is read instead of the real one, so ``gpuplan inventory --local`` can be tried, and tested through
the CLI, on a machine without a GPU.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from gpuplan.errors import ProviderError

log = logging.getLogger(__name__)

FAKE_ENV = "GPUPLAN_NVML_FAKE"
T = TypeVar("T")

# NVML errors that mean "this GPU or driver cannot tell", not "something is broken"
_UNSUPPORTED = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoData")
_DRIVER_HINT = (
    "install the NVIDIA driver on this host, or run `gpuplan inventory` without --local to read "
    "the cluster's GPUs"
)
# nvmlInit failures: what the user reads, and what to do
_INIT_FAILURES: dict[str, tuple[str, str]] = {
    "NVMLError_LibraryNotFound": ("No NVIDIA driver on this host: libnvidia-ml.so.1 not found", _DRIVER_HINT),
    "NVMLError_DriverNotLoaded": (
        "No NVIDIA driver on this host: the nvidia kernel module is not loaded",
        "load it (`modprobe nvidia`) or reboot after installing the driver",
    ),
    "NVMLError_NoPermission": (
        "No access to the NVIDIA driver on this host: permission denied",
        "run as a user that may open /dev/nvidiactl and /dev/nvidia*",
    ),
    "NVMLError_LibRmVersionMismatch": (
        "The NVIDIA driver on this host is half upgraded: the NVML library and "
        "the loaded kernel module differ",
        "reboot, or reload the nvidia module",
    ),
}


@dataclass(frozen=True)
class LocalGpu:
    """One GPU as NVML reports it. ``None``: the GPU or driver does not report that field.

    ``mig_capable`` is false when NVML answers MIG mode with "not supported" (nvidia-smi's "N/A");
    ``mig_current``/``mig_pending`` are then ``None``. Power is in watts (NVML reports milliwatts), memory in
    MiB (NVML reports bytes), utilisation in percent over NVML's last sample period."""

    index: int
    name: str | None
    uuid: str | None
    pci_bus_id: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    compute_capability: tuple[int, int] | None
    mig_capable: bool
    mig_current: bool | None
    mig_pending: bool | None
    temperature_c: int | None
    power_usage_w: float | None
    power_limit_w: float | None
    utilization_gpu_pct: int | None
    utilization_memory_pct: int | None


@dataclass(frozen=True)
class LocalHost:
    """What NVML says about this host: the driver, the newest CUDA version it supports (``"13.0"``), the
    GPUs."""

    driver_version: str | None
    cuda_driver_version: str | None
    gpus: tuple[LocalGpu, ...]


class NvmlUnavailableError(ProviderError):
    """NVML cannot be used here: no driver, no library, no permission, or no pynvml. ``reason`` is NVML's
    error in words (``"Library Not Found"``), or ``"pynvml missing"``."""

    def __init__(self, summary: str, *, reason: str, hint: str = "", detail: str = "") -> None:
        super().__init__(summary, hint=hint, detail=detail)
        self.reason = reason


def load_nvml() -> Any:
    """The pynvml module, or the fake host that ``GPUPLAN_NVML_FAKE`` describes (see the module doc)."""
    fake = os.environ.get(FAKE_ENV)
    if fake:
        from gpuplan.providers import fake_nvml

        log.debug("reading the fake NVML host described in %s", fake)
        return fake_nvml.load_description(fake)
    try:
        import pynvml
    except ImportError as exc:
        raise NvmlUnavailableError(
            "NVML bindings are missing: the nvidia-ml-py package is not installed",
            reason="pynvml missing",
            hint="pip install nvidia-ml-py",
        ) from exc
    return pynvml


def read_local_host(nvml: Any | None = None) -> LocalHost:
    """The driver and every GPU of this host (``nvml``: pynvml or a stand-in; default :func:`load_nvml`)."""
    api = nvml if nvml is not None else load_nvml()
    _init(api)
    try:
        driver = _optional(api, "nvmlSystemGetDriverVersion", api.nvmlSystemGetDriverVersion)
        cuda = _optional(api, "nvmlSystemGetCudaDriverVersion", api.nvmlSystemGetCudaDriverVersion)
        count = _required(api, "nvmlDeviceGetCount", api.nvmlDeviceGetCount)
        gpus = tuple(_read_gpu(api, index) for index in range(int(count)))
        return LocalHost(driver_version=_text(driver), cuda_driver_version=cuda_version(cuda), gpus=gpus)
    finally:
        _shutdown(api)


def cuda_version(value: int | None) -> str | None:
    """NVML's CUDA driver version integer as ``major.minor``: ``13000`` -> ``"13.0"``, ``12080`` ->
    ``"12.8"``."""
    if value is None:
        return None
    return f"{int(value) // 1000}.{int(value) % 1000 // 10}"


# ------------------------------------------------------------------------------------------------ internals


def _init(api: Any) -> None:
    try:
        api.nvmlInit()
    except api.NVMLError as exc:
        raise _init_failure(exc) from exc


def _init_failure(exc: Exception) -> NvmlUnavailableError:
    name = type(exc).__name__
    reason = _reason(exc)
    summary, hint = _INIT_FAILURES.get(name, ("NVML cannot be initialised on this host", _DRIVER_HINT))
    return NvmlUnavailableError(f"{summary} (NVML: {reason})", reason=reason, hint=hint)


def _reason(exc: Exception) -> str:
    """``NVMLError_LibraryNotFound`` -> ``Library Not Found``; the class name is the same in pynvml and
    fake."""
    name = type(exc).__name__.removeprefix("NVMLError_")
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name) if name != "NVMLError" else str(exc)


def _shutdown(api: Any) -> None:
    try:
        api.nvmlShutdown()
    except api.NVMLError as exc:  # nothing to undo: the process ends soon; never mask the real outcome
        log.debug("nvmlShutdown failed: %s", exc)


def _read_gpu(api: Any, index: int) -> LocalGpu:
    handle = _required(api, f"nvmlDeviceGetHandleByIndex({index})", api.nvmlDeviceGetHandleByIndex, index)

    def get(call: str, *args: Any) -> Any:
        return _optional(api, f"GPU {index}: {call}", getattr(api, call), handle, *args)

    memory = get("nvmlDeviceGetMemoryInfo")
    pci = get("nvmlDeviceGetPciInfo")
    cc = get("nvmlDeviceGetCudaComputeCapability")
    mig = get("nvmlDeviceGetMigMode")
    utilization = get("nvmlDeviceGetUtilizationRates")
    enabled = int(getattr(api, "NVML_DEVICE_MIG_ENABLE", 1))
    return LocalGpu(
        index=index,
        name=_text(get("nvmlDeviceGetName")),
        uuid=_text(get("nvmlDeviceGetUUID")),
        pci_bus_id=_text(pci.busId) if pci is not None else None,
        memory_total_mib=_mib(memory.total) if memory is not None else None,
        memory_used_mib=_mib(memory.used) if memory is not None else None,
        compute_capability=(int(cc[0]), int(cc[1])) if cc is not None else None,
        mig_capable=mig is not None,
        mig_current=int(mig[0]) == enabled if mig is not None else None,
        mig_pending=int(mig[1]) == enabled if mig is not None else None,
        temperature_c=_temperature(api, index, handle),
        power_usage_w=_watts(get("nvmlDeviceGetPowerUsage")),
        power_limit_w=_watts(get("nvmlDeviceGetEnforcedPowerLimit")),
        utilization_gpu_pct=int(utilization.gpu) if utilization is not None else None,
        utilization_memory_pct=int(utilization.memory) if utilization is not None else None,
    )


def _temperature(api: Any, index: int, handle: Any) -> int | None:
    """The GPU core temperature: ``nvmlDeviceGetTemperatureV`` (current drivers), else the deprecated
    ``nvmlDeviceGetTemperature`` (drivers or bindings that predate the versioned call)."""
    sensor = getattr(api, "NVML_TEMPERATURE_GPU", 0)
    versioned = getattr(api, "nvmlDeviceGetTemperatureV", None)
    if versioned is not None:
        try:
            return int(versioned(handle, sensor))
        except api.NVMLError as exc:
            if type(exc).__name__ != "NVMLError_FunctionNotFound":
                _raise_unless_unsupported(exc, f"GPU {index}: nvmlDeviceGetTemperatureV")
                return None
    value = _optional(
        api, f"GPU {index}: nvmlDeviceGetTemperature", api.nvmlDeviceGetTemperature, handle, sensor
    )
    return int(value) if value is not None else None


def _optional(api: Any, what: str, call: Callable[..., T], *args: Any) -> T | None:
    """``call(*args)``, or None when NVML says the GPU or driver does not support it."""
    try:
        return call(*args)
    except api.NVMLError as exc:
        _raise_unless_unsupported(exc, what)
        return None


def _required(api: Any, what: str, call: Callable[..., T], *args: Any) -> T:
    try:
        return call(*args)
    except api.NVMLError as exc:
        raise _read_failure(exc, what) from exc


def _raise_unless_unsupported(exc: Exception, what: str) -> None:
    """Returns when NVML only said "not supported here" (the field becomes None); raises otherwise."""
    if type(exc).__name__ not in _UNSUPPORTED:
        raise _read_failure(exc, what) from exc
    log.debug("%s: %s", what, exc)


def _read_failure(exc: Exception, what: str) -> ProviderError:
    return ProviderError(
        f"NVML could not read {what}: {exc}",
        hint="`nvidia-smi -q` shows what the driver reports; a lost GPU needs a reset or reboot",
    )


def _text(value: Any) -> str | None:
    """pynvml returns str in current versions and bytes in old ones."""
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _mib(value: Any) -> int:
    return int(value) // (1024 * 1024)


def _watts(milliwatts: Any) -> float | None:
    return None if milliwatts is None else int(milliwatts) / 1000.0
