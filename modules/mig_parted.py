"""The mig-parted config the GPU Operator ships (``default-mig-parted-config``) and the MIG profiles of the
GPUs it names, for the GPUs gpuplan knows (fleet facts §4.1-§4.3).

:data:`DEFAULT_CONFIG` is the v26.7.0 ConfigMap's ``config.yaml`` (``assets/state-mig-manager/
0400_configmap.yaml``) cut to the entries of the GPUs in :data:`GPUS`: A100 80GB / H100 80GB (and their
A800 / H800 and PCIe siblings, which share their device filters), H200 141GB and B200. Each entry keeps its
device filters as written there. :func:`profiles_asked` reads a named config the way mig-parted does
(an entry applies to a GPU its ``device-filter`` names, or to every GPU without one), which
``planner.spec.compat`` checks against the node's GPU before mig-manager is asked to apply it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import yaml

_80GB = (
    '["0x233010DE", "0x233110DE", "0x232210DE", "0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE", '
    '"0x232410DE"]'
)


def _all(name: str, profile: str, count: int) -> str:
    return (
        f"  {name}:\n    - devices: all\n      mig-enabled: true\n      mig-devices:\n"
        f'        "{profile}": {count}\n'
    )


def _family(one: str, double: str, two: str, three: str, seven: str) -> str:
    return "".join(
        (
            _all(f"all-1g.{one}.me", f"1g.{one}+me", 1),
            _all(f"all-1g.{double}", f"1g.{double}", 4),
            _all(f"all-2g.{two}", f"2g.{two}", 3),
            _all(f"all-3g.{three}", f"3g.{three}", 2),
            _all(f"all-4g.{three}", f"4g.{three}", 1),
            _all(f"all-7g.{seven}", f"7g.{seven}", 1),
        )
    )


DEFAULT_CONFIG = (
    "version: v1\nmig-configs:\n"
    "  all-disabled:\n    - devices: all\n      mig-enabled: false\n"
    "  all-enabled:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n"
    "  # H100-80GB, H800-80GB, A100-80GB, A800-80GB\n"
    "  all-1g.10gb:\n"
    f"    - device-filter: {_80GB}\n"
    '      devices: all\n      mig-enabled: true\n      mig-devices:\n        "1g.10gb": 7\n'
    + _family("10gb", "20gb", "20gb", "40gb", "80gb")
    + "  # H200-141GB\n"
    + _all("all-1g.18gb", "1g.18gb", 7)
    + _family("18gb", "35gb", "35gb", "71gb", "141gb")
    + "  # B200\n"
    + _all("all-1g.23gb", "1g.23gb", 7)
    + _family("23gb", "45gb", "45gb", "90gb", "180gb")
    + "  all-balanced:\n"
    "    # B200\n"
    '    - device-filter: ["0x290110DE"]\n'
    "      devices: all\n      mig-enabled: true\n      mig-devices:\n"
    '        "1g.23gb": 2\n        "2g.45gb": 1\n        "3g.90gb": 1\n'
    "    # H200 141GB, H200 NVL\n"
    '    - device-filter: ["0x233510DE", "0x233B10DE"]\n'
    "      devices: all\n      mig-enabled: true\n      mig-devices:\n"
    '        "1g.18gb": 2\n        "2g.35gb": 1\n        "3g.71gb": 1\n'
    "    # H100-80GB, H800-80GB, A100-80GB, A800-80GB\n"
    f"    - device-filter: {_80GB}\n"
    "      devices: all\n      mig-enabled: true\n      mig-devices:\n"
    '        "1g.10gb": 2\n        "2g.20gb": 1\n        "3g.40gb": 1\n'
)
"""``config.yaml`` of ``default-mig-parted-config`` for the GPUs of :data:`GPUS`."""

DEFAULT_GPU_CLIENTS = "version: v1\nsystemd-services:\n" + "".join(
    f"  - {name}\n"
    for name in (
        "nvsm.service",
        "nvsm-mqtt.service",
        "nvsm-core.service",
        "nvsm-api-gateway.service",
        "nvsm-notifier.service",
        "nv_peer_mem.service",
        "nvidia-dcgm.service",
        "dcgm.service",
        "dcgm-exporter.service",
    )
)
"""``clients.yaml`` of ``default-gpu-clients``: the host services stopped around a MIG mode change."""


@dataclass(frozen=True)
class MigGpu:
    """A MIG-capable GPU as GFD names it (``nvidia.com/gpu.product``) and mig-parted filters it."""

    product: str
    device_filter: str  # 0x<device><vendor>
    profiles: tuple[str, ...]


def _profiles(one: str, double: str, two: str, three: str, seven: str) -> tuple[str, ...]:
    return (
        f"1g.{one}",
        f"1g.{one}+me",
        f"1g.{double}",
        f"2g.{two}",
        f"3g.{three}",
        f"4g.{three}",
        f"7g.{seven}",
    )


GPUS: Mapping[str, MigGpu] = MappingProxyType(
    {
        gpu.product: gpu
        for gpu in (
            MigGpu("NVIDIA-A100-SXM4-80GB", "0x20B210DE", _profiles("10gb", "20gb", "20gb", "40gb", "80gb")),
            MigGpu("NVIDIA-H100-80GB-HBM3", "0x233010DE", _profiles("10gb", "20gb", "20gb", "40gb", "80gb")),
            MigGpu("NVIDIA-H200", "0x233510DE", _profiles("18gb", "35gb", "35gb", "71gb", "141gb")),
            MigGpu("NVIDIA-B200", "0x290110DE", _profiles("23gb", "45gb", "45gb", "90gb", "180gb")),
        )
    }
)
"""MIG profiles per GPU product (fleet facts §4.3)."""


def config_names(text: str = DEFAULT_CONFIG) -> tuple[str, ...]:
    """The config names a mig-parted file offers."""
    return tuple(_configs(text))


def profiles_asked(name: str, gpu: MigGpu, text: str = DEFAULT_CONFIG) -> tuple[str, ...] | None:
    """The profiles config ``name`` asks of ``gpu`` (empty: MIG disabled or no instances), or None when no
    entry of it applies to that GPU."""
    entries = [e for e in _configs(text).get(name) or [] if _applies(e, gpu)]
    if not entries:
        return None
    return tuple(str(p) for e in entries if e.get("mig-enabled") for p in (e.get("mig-devices") or {}))


def devices_asked(name: str, gpu: MigGpu, text: str = DEFAULT_CONFIG) -> dict[str, int] | None:
    """The MIG devices config ``name`` makes of one ``gpu``: profile -> count (empty: MIG disabled), or None
    when no entry of it applies to that GPU (mig-parted leaves its layout as it is)."""
    entries = [e for e in _configs(text).get(name) or [] if _applies(e, gpu)]
    if not entries:
        return None
    devices: dict[str, int] = {}
    for entry in entries:
        if entry.get("mig-enabled"):
            for profile, count in (entry.get("mig-devices") or {}).items():
                devices[str(profile)] = devices.get(str(profile), 0) + int(count)
    return devices


def _applies(entry: Mapping[str, Any], gpu: MigGpu) -> bool:
    filters = entry.get("device-filter")
    if filters is None:
        return True
    names = [filters] if isinstance(filters, str) else list(filters)
    return gpu.device_filter.upper() in (str(n).upper() for n in names)


def _configs(text: str) -> dict[str, list[dict[str, Any]]]:
    document = yaml.safe_load(text) or {}
    configs: dict[str, list[dict[str, Any]]] = document.get("mig-configs") or {}
    return configs
