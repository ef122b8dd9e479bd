"""MIG on a simulated node: the mig-parted file, the geometry it asks of each GPU, and what the components
make of the MIG devices that exist (fleet facts §4).

* :func:`parse_config` reads a mig-parted v1 file (facts §4.1): ``version: v1`` and ``mig-configs``, each a
  non-empty list of entries (``device-filter``, ``devices``, ``mig-enabled``, ``mig-devices``).
* :func:`geometry` is what one named config asks of the node's GPUs: GPU index -> the profiles of its MIG
  devices (None: MIG disabled). An entry applies to the GPUs its ``device-filter`` (``0x<device><vendor>``)
  and ``devices`` (``all`` or indices) select; a GPU no entry selects keeps its layout. A profile the GPU does
  not have (facts §4.3), more instances than fit, or MIG on a GPU that is not MIG-capable is refused
  (:class:`MigConfigError`), before anything is changed.
* :func:`plugin_resources` is the device plugin's view (facts §4.5): ``mixed`` advertises
  ``nvidia.com/mig-<profile>`` (``+`` -> ``.``) and keeps the GPUs without MIG as ``nvidia.com/gpu``;
  ``single`` advertises every MIG device as ``nvidia.com/gpu``.
* :func:`gfd_labels` is GFD's (facts §4.6): ``single`` rewrites ``gpu.count`` / ``gpu.product``
  (``<product>-MIG-<profile>``, ``-MIG-INVALID`` when the GPUs do not share one profile) and adds the
  slice, memory and engine labels; ``mixed`` adds ``nvidia.com/mig-<profile>.*`` per profile and sets
  ``gpu.replicas=0`` once every GPU is partitioned.
* :func:`instances` numbers a GPU's MIG devices as NVML does (the GPU instance IDs dcgm-exporter prints as
  ``GPU_I_ID``), :func:`smi_lines` is their ``nvidia-smi -L`` form.

Pure; the geometry is applied by the mig-manager flow (``gpuplan.sim.kubelet.mig_manager``), which keeps it
in ``NodeGpuState.mig``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gpuplan.sim.catalog import MigProfile, mig_profiles, sanitise_label_value
from gpuplan.sim.kubelet.state import GpuDevice, NodeGpuState

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
GPU_SLICES = 7
MEMORY_SLICES = 8
# NVML's first GPU instance ID per placement size on an A100/H100 (7g: 0, 4g: 1, 3g: 1-2, 2g: 3-5,
# 1g with two memory slices: 3-6, 1g: 7-13) [assumed: the placements nvidia-smi mig -lgi shows]
_FIRST_INSTANCE_ID = {(7, 8): 0, (4, 4): 1, (3, 4): 1, (2, 2): 3, (1, 2): 3, (1, 1): 7}
Geometry = Mapping[int, tuple[str, ...] | None]


class MigConfigError(ValueError):
    """The config cannot be applied; the message is what mig-manager logs before it sets ``failed``."""


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a GPU: its GPU instance ID, profile and UUID."""

    instance_id: int
    profile: MigProfile
    uuid: str


def parse_config(text: str) -> dict[str, list[dict[str, Any]]]:
    """The ``mig-configs`` of a mig-parted v1 file, checked as ``api/spec/v1`` checks it."""
    try:
        document = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise MigConfigError(f"error parsing config file: {exc}") from None
    if not isinstance(document, dict) or document.get("version") != "v1":
        raise MigConfigError("error parsing config file: unknown version (only v1 is supported)")
    unknown = sorted(set(document) - {"version", "mig-configs"})
    if unknown:
        raise MigConfigError(f"error parsing config file: unknown field {unknown[0]!r}")
    configs = document.get("mig-configs")
    if not isinstance(configs, dict):
        raise MigConfigError("error parsing config file: missing mig-configs")
    result: dict[str, list[dict[str, Any]]] = {}
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
            raise MigConfigError(f"error parsing config file: mig-configs {name!r} must be a non-empty list")
        result[str(name)] = entries
    return result


def geometry(entries: Sequence[Mapping[str, Any]], node: NodeGpuState) -> dict[int, tuple[str, ...] | None]:
    """What ``entries`` (one named config) ask of each GPU of ``node``; refusals raise MigConfigError."""
    wanted: dict[int, tuple[str, ...] | None] = {}
    for entry in entries:
        for gpu in node.gpus:
            if _selects(entry, gpu):
                wanted[gpu.index] = _layout(entry, gpu)
    return wanted


def applied(node: NodeGpuState, wanted: Geometry) -> bool:
    """Whether ``node``'s GPUs already have the layout ``wanted`` (mig-parted's ``assert``)."""
    return all(node.mig.get(index) == layout for index, layout in wanted.items())


def with_geometry(node: NodeGpuState, wanted: Geometry) -> dict[int, tuple[str, ...]]:
    """``node.mig`` once ``wanted`` is applied."""
    layout = dict(node.mig)
    for index, devices in wanted.items():
        if devices is None:
            layout.pop(index, None)
        else:
            layout[index] = devices
    return layout


def _selects(entry: Mapping[str, Any], gpu: GpuDevice) -> bool:
    filters = entry.get("device-filter")
    if filters is not None:
        wanted = [filters] if isinstance(filters, str) else list(filters)
        own = f"{gpu.model.pci_device_id[2:]}10DE".upper()
        if not any(str(item).upper().removeprefix("0X") == own for item in wanted):
            return False
    devices = entry.get("devices", "all")
    return devices == "all" or (isinstance(devices, list) and gpu.index in devices)


def _layout(entry: Mapping[str, Any], gpu: GpuDevice) -> tuple[str, ...] | None:
    if not entry.get("mig-enabled"):
        return None
    where = f"device {gpu.index} ({gpu.model.name})"
    profiles = {p.name: p for p in mig_profiles(gpu.model)}
    if not profiles:
        raise MigConfigError(f"error validating MIG config: {where} is not MIG capable")
    counts = entry.get("mig-devices") or {}
    devices: list[str] = []
    for name, count in counts.items():
        profile = profiles.get(str(name))
        if profile is None:
            raise MigConfigError(
                f"error validating MIG config: {where} does not support MIG profile {name} "
                f"(supported: {', '.join(profiles)})"
            )
        devices += [profile.name] * int(count)
    chosen = [profiles[name] for name in devices]
    too_many = any(n > profiles[name].max_count for name, n in Counter(devices).items())
    if (
        too_many
        or sum(p.slices for p in chosen) > GPU_SLICES
        or sum(p.memory_slices for p in chosen) > MEMORY_SLICES
    ):
        raise MigConfigError(
            f"error validating MIG config: the MIG devices {dict(counts)} do not fit {where}"
        )
    return tuple(devices)


def instances(node: NodeGpuState, gpu: GpuDevice) -> list[MigInstance]:
    """The MIG devices of ``gpu`` in NVML's order, numbered by GPU instance ID."""
    profiles = {p.name: p for p in mig_profiles(gpu.model)}
    taken: set[int] = set()
    found = []
    for position, name in enumerate(node.mig.get(gpu.index, ())):
        profile = profiles[name]
        instance_id = _FIRST_INSTANCE_ID.get((profile.slices, profile.memory_slices), 0)
        while instance_id in taken:
            instance_id += 1
        taken.add(instance_id)
        mig_uuid = uuid.uuid5(uuid.NAMESPACE_OID, f"{gpu.uuid}/{position}")
        found.append(MigInstance(instance_id, profile, f"MIG-{mig_uuid}"))
    return found


def plugin_resources(node: NodeGpuState, strategy: str) -> dict[str, str | None] | None:
    """The device plugin's resources on a node with MIG devices; None when no GPU is in MIG mode (or the
    strategy is ``none``), which leaves the full-GPU resources. Resources no longer advertised go to "0"."""
    if not node.mig or strategy not in ("single", "mixed"):
        return None
    whole = sum(1 for gpu in node.gpus if gpu.index not in node.mig)
    devices = [p for gpu in node.gpus for p in instances(node, gpu)]
    resources: dict[str, str | None] = {}
    if strategy == "single":
        resources["nvidia.com/gpu"] = str(len(devices) + whole)
    else:
        counts = Counter(i.profile.resource_suffix for i in devices)
        resources["nvidia.com/gpu"] = str(whole)
        resources.update({f"nvidia.com/mig-{name}": str(n) for name, n in sorted(counts.items())})
    stale = {k: "0" for k in node.resources if k.startswith("nvidia.com/mig-") and k not in resources}
    return {**resources, **stale}


def stale_resources(node: NodeGpuState) -> dict[str, str | None]:
    """MIG resources the node still lists: "0" once no plugin advertises them (the kubelet keeps names)."""
    return {k: "0" for k in node.resources if k.startswith("nvidia.com/mig-")}


def gfd_labels(node: NodeGpuState, strategy: str) -> dict[str, str]:
    """GFD's MIG labels, overriding its full-GPU ones; empty without MIG devices or with strategy none."""
    if not node.mig or strategy not in ("single", "mixed") or node.model is None:
        return {}
    devices = [i for gpu in node.gpus for i in instances(node, gpu)]
    if strategy == "single":
        return _single_labels(node, devices)
    labels: dict[str, str] = {}
    product = node.model.product
    for profile, count in Counter(i.profile for i in devices).items():
        prefix = f"nvidia.com/mig-{profile.resource_suffix}"
        labels.update(
            {f"{prefix}.{key}": value for key, value in _profile_labels(product, profile).items()}
            | {f"{prefix}.count": str(count), f"{prefix}.replicas": "1", f"{prefix}.sharing-strategy": "none"}
        )
    if all(gpu.index in node.mig for gpu in node.gpus):
        labels["nvidia.com/gpu.replicas"] = "0"
    return labels


def _single_labels(node: NodeGpuState, devices: list[MigInstance]) -> dict[str, str]:
    assert node.model is not None
    profiles = {i.profile for i in devices}
    uniform = len(profiles) == 1 and all(gpu.index in node.mig for gpu in node.gpus)
    if not uniform:
        return {"nvidia.com/gpu.product": f"{node.model.product}-MIG-INVALID", "nvidia.com/gpu.count": "0"}
    labels = {
        f"nvidia.com/gpu.{key}": value
        for key, value in _profile_labels(node.model.product, next(iter(profiles))).items()
    }
    return {**labels, "nvidia.com/gpu.count": str(len(devices))}


def _profile_labels(product: str, profile: MigProfile) -> dict[str, str]:
    labels = {
        "product": sanitise_label_value(f"{product}-MIG-{profile.name}"),
        "memory": str(profile.memory_mib),
        "multiprocessors": str(profile.multiprocessors),
        "slices.gi": str(profile.slices),
        "slices.ci": str(profile.slices),
    }
    labels.update({f"engines.{name}": str(count) for name, count in profile.engines.items()})
    return labels


def smi_lines(node: NodeGpuState, gpu: GpuDevice) -> str:
    """``nvidia-smi -L``'s lines for the MIG devices of ``gpu`` (none outside MIG mode)."""
    return "".join(
        f"  MIG {i.profile.name:<11} Device {n:>2}: (UUID: {i.uuid})\n"
        for n, i in enumerate(instances(node, gpu))
    )
