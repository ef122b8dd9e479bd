"""The config file the device plugin and GFD share (``api/config/v1``, facts §5), found as they find it.

Where the file comes from, in the real components' order:

* ``--config-file`` / ``CONFIG_FILE`` names a path. With the operator's ``config-manager`` (init container
  and sidecar) that path is written from the ConfigMap mounted at ``CONFIG_FILE_SRCDIR``: the key named by
  the node label ``NODE_LABEL`` (``nvidia.com/device-plugin.config``), else ``DEFAULT_CONFIG``, else the
  ``FALLBACK_STRATEGIES`` (``named``, ``single``, ``empty``) decide (facts §5.3).
* Without a config manager the path must lie in a mounted ConfigMap volume (key = file name, or ``items``).

Parsing follows ``api/config/v1``: only ``version: v1``; each sharing resource needs a name and replicas >= 2;
precedence flag > env > file for ``migStrategy``. Errors carry the components' own wording. Pure; used by
``device_plugin`` and ``gfd``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

import yaml

from gpuplan.sim.kubelet import checks
from gpuplan.sim.kubelet.images import Obj, command_words, env_value, init_containers, pod_containers
from gpuplan.sim.kubelet.outcomes import PodContext
from gpuplan.sim.kubelet.state import NodeGpuState

CONFIG_LABEL = "nvidia.com/device-plugin.config"
MIG_STRATEGIES = ("none", "single", "mixed")
PARSE_PREFIX = "unable to load config: unable to finalize config: unable to parse config file: "
DECODE_PREFIX = "error parsing config file: unmarshal error: error unmarshaling JSON: while decoding JSON: "


class PluginConfigError(ValueError):
    """The config cannot be loaded; the message is what the component logs before it exits."""


@dataclass(frozen=True)
class PluginConfig:
    """What the device plugin and GFD take from their config."""

    mig_strategy: str = "none"
    sharing_strategy: str = "none"  # none | time-slicing | mps
    replicas: int = 1
    rename_by_default: bool = False

    def resources(self, gpu_count: int) -> dict[str, str | None]:
        """Capacity the device plugin advertises: GPUs x replicas, renamed to ``.shared`` if asked."""
        total = str(gpu_count * self.replicas)
        if self.rename_by_default and self.sharing_strategy != "none":
            return {"nvidia.com/gpu.shared": total, "nvidia.com/gpu": "0"}
        return {"nvidia.com/gpu": total}


def load(pod: Obj, container: Obj, node: NodeGpuState, ctx: PodContext) -> PluginConfig:
    """The effective config of ``container`` (the plugin or GFD) in ``pod`` on ``node``."""
    text = config_text(pod, container, node, ctx)
    document = _parse(text) if text is not None else {}
    file_strategy = ((document.get("flags") or {}).get("migStrategy")) or "none"
    strategy = _flag(container, "mig-strategy") or env_value(container, "MIG_STRATEGY") or file_strategy
    if strategy not in MIG_STRATEGIES:
        raise PluginConfigError(
            f"unable to load config: unable to validate flags: invalid --mig-strategy option: {strategy}"
        )
    sharing = document.get("sharing") or {}
    mps = _replicated(sharing.get("mps"), "mps", node)
    time_slicing = _replicated(sharing.get("timeSlicing"), "timeSlicing", node)
    for mode, spec in (("mps", mps), ("time-slicing", time_slicing)):
        if spec is not None and spec[0] > 1:
            return PluginConfig(strategy, mode, spec[0], spec[1])
    return PluginConfig(strategy)


def config_text(pod: Obj, container: Obj, node: NodeGpuState, ctx: PodContext) -> str | None:
    """The config file's content, None when the component runs without one."""
    path = _flag(container, "config-file") or env_value(container, "CONFIG_FILE")
    if not path:
        return None
    manager = _config_manager(pod)
    if manager is not None:
        return select(manager, pod, node, ctx)
    source = _mounted_config_map(pod, container, path, ctx)
    if source is None:
        raise PluginConfigError(
            f"{PARSE_PREFIX}error opening config file: open {path}: no such file or directory"
        )
    return source


def manager_init(container: Obj, pod: Obj, node: NodeGpuState, ctx: PodContext) -> checks.Blocked | None:
    """``config-manager-init``: fails (and crash-loops) when no config can be selected for the node."""
    try:
        select(container, pod, node, ctx)
    except PluginConfigError as exc:
        return checks.Blocked(str(exc), crashes=True)
    return None


def select(manager: Obj, pod: Obj, node: NodeGpuState, ctx: PodContext) -> str:
    """The config-manager's choice of ConfigMap key for the node, as file content ("" = empty config)."""
    label = env_value(manager, "NODE_LABEL") or CONFIG_LABEL
    default = env_value(manager, "DEFAULT_CONFIG") or ""
    strategies = (env_value(manager, "FALLBACK_STRATEGIES") or "named,single").split(",")
    source_dir = env_value(manager, "CONFIG_FILE_SRCDIR") or "/available-configs"
    data = _config_map_data(pod, manager, source_dir, ctx)
    wanted = node.labels.get(label) or default
    if wanted and wanted in data:
        return data[wanted]
    for strategy in strategies:
        if strategy == "named" and default in data:
            return data[default]
        if strategy == "single" and len(data) == 1:
            return next(iter(data.values()))
        if strategy == "empty":
            return ""
    raise PluginConfigError(
        f'Error: unable to get config: no configuration named "{wanted}" in '
        f"{source_dir} and no fallback strategy ({','.join(strategies)}) applies"
    )


def _config_manager(pod: Obj) -> Obj | None:
    for container in init_containers(pod) + pod_containers(pod):
        if any("config-manager" in word for word in command_words(container)):
            return container
    return None


def _config_map_data(pod: Obj, container: Obj, directory: str, ctx: PodContext) -> dict[str, str]:
    volume = _volume_at(pod, container, directory)
    config_map = _lookup(pod, volume, ctx) if volume else None
    return {str(k): str(v) for k, v in ((config_map or {}).get("data") or {}).items()}


def _mounted_config_map(pod: Obj, container: Obj, path: str, ctx: PodContext) -> str | None:
    directory, file_name = posixpath.split(path)
    volume = _volume_at(pod, container, directory)
    if volume is None:
        return None
    key = file_name
    for item in (volume.get("configMap") or {}).get("items") or []:
        if item.get("path") == file_name:
            key = item.get("key", file_name)
    data = ((_lookup(pod, volume, ctx) or {}).get("data")) or {}
    return str(data[key]) if key in data else None


def _volume_at(pod: Obj, container: Obj, directory: str) -> Obj | None:
    """The ConfigMap volume mounted at ``directory`` in ``container``."""
    names = [
        m.get("name")
        for m in container.get("volumeMounts") or []
        if m.get("mountPath", "").rstrip("/") == directory.rstrip("/")
    ]
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        if volume.get("name") in names and "configMap" in volume:
            return dict(volume)
    return None


def _lookup(pod: Obj, volume: Obj, ctx: PodContext) -> Obj | None:
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    return ctx.config_lookup(namespace, (volume.get("configMap") or {}).get("name", ""))


def _flag(container: Obj, name: str) -> str | None:
    """``--name=value`` or ``--name value`` among the container's command and args."""
    words = command_words(container)
    for index, word in enumerate(words):
        if word.startswith(f"--{name}="):
            return word.split("=", 1)[1]
        if word == f"--{name}" and index + 1 < len(words):
            return words[index + 1]
    return None


def _parse(text: str) -> dict[str, Any]:
    try:
        document = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise PluginConfigError(
            f"{PARSE_PREFIX}error parsing config file: unmarshal error: error converting YAML to JSON: {exc}"
        ) from None
    if not isinstance(document, dict):
        raise PluginConfigError(
            f"{PARSE_PREFIX}{DECODE_PREFIX}cannot unmarshal into Go value of type v1.Config"
        )
    version = document.get("version") or "v1"
    if version != "v1":
        raise PluginConfigError(f"{PARSE_PREFIX}error parsing config file: unknown version: {version}")
    return document


def _replicated(spec: Any, kind: str, node: NodeGpuState) -> tuple[int, bool] | None:
    """(replicas for nvidia.com/gpu, renameByDefault) of a sharing block, checked as api/config/v1 does."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise PluginConfigError(
            f"{PARSE_PREFIX}{DECODE_PREFIX}cannot unmarshal {kind} into v1.ReplicatedResources"
        )
    strategy = spec.get("strategy") or ""
    if strategy:
        raise PluginConfigError(f"{PARSE_PREFIX}{DECODE_PREFIX}unknown time-slicing strategy: {strategy}")
    resources = spec.get("resources")
    if not resources:
        raise PluginConfigError(f"{PARSE_PREFIX}{DECODE_PREFIX}no resources specified")
    replicas = 1
    for resource in resources:
        if not isinstance(resource, dict) or not resource.get("name"):
            raise PluginConfigError(f"{PARSE_PREFIX}{DECODE_PREFIX}no resource name specified")
        devices = resource.get("devices", "all")
        if isinstance(devices, str) and devices != "all":
            raise PluginConfigError(
                f"{PARSE_PREFIX}{DECODE_PREFIX}devices set as '{devices}' but the only valid "
                "string input is 'all'"
            )
        if "replicas" not in resource:
            raise PluginConfigError(f"{PARSE_PREFIX}{DECODE_PREFIX}no replicas specified")
        count = resource["replicas"]
        if not isinstance(count, int) or count < 2:
            raise PluginConfigError(f"{PARSE_PREFIX}{DECODE_PREFIX}number of replicas must be >= 2")
        if resource["name"] == "nvidia.com/gpu":
            replicas = count
    limit = 48 if node.model is not None and (node.model.cc_major, node.model.cc_minor) >= (7, 5) else 16
    if kind == "mps" and replicas > limit:
        raise PluginConfigError(
            f"{PARSE_PREFIX}{DECODE_PREFIX}maximum number of MPS replicas per GPU is {limit}"
        )
    return replicas, bool(spec.get("renameByDefault", False))
