"""An in-memory stand-in for the ``pynvml`` module, for tests and for rehearsing ``inventory --local``.

:func:`gpuplan.providers.nvml.read_local_host` talks to NVML only through the module-level functions of
``pynvml`` (``nvmlInit``, ``nvmlDeviceGetCount``, ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetName`` ...)
and its ``NVMLError_*`` classes. :class:`FakeNvml` offers that same surface, built from plain
:class:`FakeGpu` descriptions, so tests inject it at the pynvml boundary
(``read_local_host(nvml=FakeNvml([...]))``) and no test needs a GPU. Tests build the descriptions from the
simulator's GPU catalog; this module cannot import it (providers do not depend on the simulator).

Fidelity that matters to the reader:

- the error classes carry pynvml's names and value codes (``NVMLError_NotSupported`` = 3,
  ``NVMLError_LibraryNotFound`` = 12 ...), ``NVMLError(code)`` returns the subclass, ``str()`` gives pynvml's
  text; a test compares them with the real module;
- a GPU without MIG raises ``NVMLError_NotSupported`` from ``nvmlDeviceGetMigMode``, as NVML does;
- any field named in :attr:`FakeGpu.unsupported` raises ``NVMLError_NotSupported``;
- ``init_error`` makes ``nvmlInit`` fail (no library, driver not loaded, no permission);
- every call is logged in :attr:`FakeNvml.calls`, so tests can check that ``nvmlShutdown`` ran.

:func:`load_description` reads the JSON description that ``GPUPLAN_NVML_FAKE`` points at (see
:mod:`gpuplan.providers.nvml`).
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from gpuplan.errors import ConfigError

# pynvml's NVML_ERROR_* codes (nvml.h); the class names are derived from these as pynvml derives them
ERROR_CODES: Mapping[str, int] = {
    "UNINITIALIZED": 1,
    "INVALID_ARGUMENT": 2,
    "NOT_SUPPORTED": 3,
    "NO_PERMISSION": 4,
    "ALREADY_INITIALIZED": 5,
    "NOT_FOUND": 6,
    "INSUFFICIENT_SIZE": 7,
    "INSUFFICIENT_POWER": 8,
    "DRIVER_NOT_LOADED": 9,
    "TIMEOUT": 10,
    "IRQ_ISSUE": 11,
    "LIBRARY_NOT_FOUND": 12,
    "FUNCTION_NOT_FOUND": 13,
    "CORRUPTED_INFOROM": 14,
    "GPU_IS_LOST": 15,
    "RESET_REQUIRED": 16,
    "OPERATING_SYSTEM": 17,
    "LIB_RM_VERSION_MISMATCH": 18,
    "IN_USE": 19,
    "MEMORY": 20,
    "NO_DATA": 21,
    "VGPU_ECC_NOT_SUPPORTED": 22,
    "INSUFFICIENT_RESOURCES": 23,
    "FREQ_NOT_SUPPORTED": 24,
    "ARGUMENT_VERSION_MISMATCH": 25,
    "DEPRECATED": 26,
    "NOT_READY": 27,
    "GPU_NOT_FOUND": 28,
    "INVALID_STATE": 29,
    "RESET_TYPE_NOT_SUPPORTED": 30,
    "UNKNOWN": 999,
}
# pynvml's NVMLError._errcode_to_string (codes it does not list fall back to "NVML Error with code N")
_MESSAGES: Mapping[int, str] = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    5: "Already Initialized",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient External Power",
    9: "Driver Not Loaded",
    10: "Timeout",
    11: "Interrupt Request Issue",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    14: "Corrupted infoROM",
    15: "GPU is lost",
    16: "GPU requires restart",
    17: "The operating system has blocked the request.",
    18: "RM has detected an NVML/RM version mismatch.",
    20: "Insufficient Memory",
    999: "Unknown Error",
}

NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
MIB = 1024 * 1024

# the FakeGpu fields a test may declare unsupported, and the NVML calls that read them
FIELDS = (
    "uuid",
    "pci_bus_id",
    "memory",
    "compute_capability",
    "mig",
    "temperature",
    "power_usage",
    "power_limit",
    "utilization",
)


class NVMLError(Exception):
    """pynvml's base error: ``NVMLError(code)`` builds the subclass for ``code``; ``.value`` is the code."""

    value: int
    code: ClassVar[int] = 0
    """The NVML_ERROR_* code of a subclass (the base class has none)."""
    _by_code: ClassVar[dict[int, type[NVMLError]]] = {}

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._by_code.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __init__(self, value: int) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _MESSAGES.get(self.value, f"NVML Error with code {self.value}")


def _class_name(code_name: str) -> str:
    """``NOT_SUPPORTED`` -> ``NVMLError_NotSupported``, exactly as pynvml's _extractNVMLErrorsAsClasses."""
    return "NVMLError_" + string.capwords(code_name, "_").replace("_", "")


def _error_class(code_name: str, value: int) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        return NVMLError.__new__(cls, value)

    def init(self: NVMLError, *args: Any) -> None:
        Exception.__init__(self, value)

    made = type(
        _class_name(code_name),
        (NVMLError,),
        {"__new__": new, "__init__": init, "__module__": __name__, "code": value},
    )
    NVMLError._by_code[value] = made
    return made


ERROR_CLASSES: Mapping[str, type[NVMLError]] = {
    _class_name(name): _error_class(name, value) for name, value in ERROR_CODES.items()
}


def error(name: str) -> NVMLError:
    """An instance of ``NVMLError_<name>``, e.g. ``error("LibraryNotFound")``."""
    return NVMLError(ERROR_CLASSES[f"NVMLError_{name}"].code)


@dataclass(frozen=True)
class FakeGpu:
    """One GPU as NVML would report it. ``unsupported`` names fields (:data:`FIELDS`) whose NVML call raises
    ``NVMLError_NotSupported``; ``errors`` maps a field (or ``name``) to the NVMLError class suffix its call
    raises instead (``{"memory": "GpuIsLost"}``); ``mig_current``/``mig_pending`` matter only when
    ``mig_capable``."""

    name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    mig_capable: bool
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_bus_id: str = "00000000:01:00.0"
    memory_used_mib: int = 0
    mig_current: bool = False
    mig_pending: bool = False
    temperature_c: int = 35
    power_usage_w: float = 60.0
    power_limit_w: float = 300.0
    utilization_gpu: int = 0
    utilization_memory: int = 0
    unsupported: frozenset[str] = field(default_factory=frozenset)
    errors: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        unknown = (set(self.unsupported) | set(self.errors)) - {*FIELDS, "name"}
        if unknown:
            raise ValueError(f"unknown fields {sorted(unknown)}; known: name, {', '.join(FIELDS)}")
        wrong = [name for name in self.errors.values() if f"NVMLError_{name}" not in ERROR_CLASSES]
        if wrong:
            raise ValueError(f"unknown NVML errors {wrong}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FakeGpu:
        values = dict(data)
        cc = values.get("compute_capability")
        if isinstance(cc, str):
            major, _, minor = cc.partition(".")
            values["compute_capability"] = (int(major), int(minor or 0))
        elif isinstance(cc, Sequence):
            values["compute_capability"] = (int(cc[0]), int(cc[1]))
        values["unsupported"] = frozenset(values.get("unsupported") or ())
        values["errors"] = dict(values.get("errors") or {})
        return cls(**values)


class _Handle:
    """What nvmlDeviceGetHandleByIndex returns: opaque to the reader, like pynvml's device pointer."""

    def __init__(self, index: int) -> None:
        self.index = index


class FakeNvml:
    """The pynvml functions and error classes that gpuplan uses, answering from :class:`FakeGpu` values."""

    NVMLError = NVMLError
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        *,
        driver_version: str = "580.105.08",
        cuda_driver_version: int = 13000,
        init_error: str | None = None,
        temperature_v: bool = True,
    ) -> None:
        """``init_error``: an NVMLError class suffix (``LibraryNotFound``, ``DriverNotLoaded``,
        ``NoPermission`` ...) that ``nvmlInit`` raises. ``temperature_v=False`` plays a driver older than
        ``nvmlDeviceGetTemperatureV`` (the call raises ``NVMLError_FunctionNotFound``)."""
        if init_error is not None and f"NVMLError_{init_error}" not in ERROR_CLASSES:
            raise ValueError(f"unknown NVML error {init_error!r}")
        self.gpus = tuple(gpus)
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.init_error = init_error
        self.temperature_v = temperature_v
        self.calls: list[str] = []
        self._initialised = 0
        for name, cls in ERROR_CLASSES.items():
            setattr(self, name, cls)

    @classmethod
    def without_library(cls) -> FakeNvml:
        """A host without libnvidia-ml.so.1: no driver installed."""
        return cls(init_error="LibraryNotFound")

    @classmethod
    def driver_not_loaded(cls) -> FakeNvml:
        """A host with the library but no loaded kernel module."""
        return cls(init_error="DriverNotLoaded")

    @property
    def initialised(self) -> bool:
        return self._initialised > 0

    # ------------------------------------------------------------------------------------------ library

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise error(self.init_error)
        self._initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self._check_initialised()
        self._initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._call("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise error("InvalidArgument")
        return _Handle(index)

    # ------------------------------------------------------------------------------------------- device

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetName", handle, "name").name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle, "uuid").uuid

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetPciInfo", handle, "pci_bus_id")
        return SimpleNamespace(busId=gpu.pci_bus_id)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle, "memory")
        total, used = gpu.memory_mib * MIB, gpu.memory_used_mib * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        return self._gpu(
            "nvmlDeviceGetCudaComputeCapability", handle, "compute_capability"
        ).compute_capability

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", handle, "mig")
        if not gpu.mig_capable:
            raise error("NotSupported")
        return [int(gpu.mig_current), int(gpu.mig_pending)]

    def nvmlDeviceGetTemperatureV(self, handle: _Handle, sensor: int) -> int:
        if not self.temperature_v:
            self._call("nvmlDeviceGetTemperatureV")
            raise error("FunctionNotFound")
        return self._temperature("nvmlDeviceGetTemperatureV", handle, sensor)

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return self._temperature("nvmlDeviceGetTemperature", handle, sensor)

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return round(self._gpu("nvmlDeviceGetPowerUsage", handle, "power_usage").power_usage_w * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return round(self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle, "power_limit").power_limit_w * 1000)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle, "utilization")
        return SimpleNamespace(gpu=gpu.utilization_gpu, memory=gpu.utilization_memory)

    # ---------------------------------------------------------------------------------------- internals

    def _temperature(self, call: str, handle: _Handle, sensor: int) -> int:
        gpu = self._gpu(call, handle, "temperature")
        if sensor != NVML_TEMPERATURE_GPU:
            raise error("InvalidArgument")
        return gpu.temperature_c

    def _call(self, name: str) -> None:
        self.calls.append(name)
        self._check_initialised()

    def _check_initialised(self) -> None:
        if not self.initialised:
            raise error("Uninitialized")

    def _gpu(self, call: str, handle: _Handle, field_name: str) -> FakeGpu:
        self._call(call)
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise error("InvalidArgument")
        gpu = self.gpus[handle.index]
        if field_name in gpu.errors:
            raise error(gpu.errors[field_name])
        if field_name in gpu.unsupported:
            raise error("NotSupported")
        return gpu


def load_description(path: str | Path) -> FakeNvml:
    """A :class:`FakeNvml` from a JSON file::

        {"driver_version": "580.105.08", "cuda_driver_version": 13000,
         "init_error": null,
         "gpus": [{"name": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920, "compute_capability": "8.0",
                   "mig_capable": true, "uuid": "GPU-...", "unsupported": ["power_usage"]}]}

    ``init_error`` (e.g. ``"LibraryNotFound"``) plays a host without a driver."""
    where = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        gpus = [FakeGpu.from_dict(gpu) for gpu in data.get("gpus") or ()]
        return FakeNvml(
            gpus,
            driver_version=str(data.get("driver_version", "580.105.08")),
            cuda_driver_version=int(data.get("cuda_driver_version", 13000)),
            init_error=data.get("init_error"),
            temperature_v=bool(data.get("temperature_v", True)),
        )
    except OSError as exc:
        raise ConfigError(
            "the fake NVML description cannot be read", where=where, detail=f"{type(exc).__name__}: {exc}"
        ) from exc
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(
            "the fake NVML description is malformed",
            where=where,
            detail=f"{type(exc).__name__}: {exc}",
            hint="see gpuplan.providers.fake_nvml.load_description for the format",
        ) from exc
