"""GPU Feature Discovery (``k8s-device-plugin`` image running ``gpu-feature-discovery``, facts §3.5, §4).

Once driver and NVIDIA runtime work (``toolkit-validation``), GFD reads NVML and writes the ``nvidia.com/*``
labels of facts §4 for the node's GPUs, driver and sharing config, and rewrites them every
``GFD_SLEEP_INTERVAL`` (the ``gfd.timestamp`` label moves on in those steps). This module says what GFD
writes; when it writes (its passes: start, changed inputs, interval) is ``gpuplan.sim.kubelet.gfd_passes``.

Field manager: ``gpu-feature-discovery``. The real GFD of v0.20 publishes through NFD (a ``NodeFeature``
object that nfd-master turns into labels, manager ``nfd-master``) or a features.d file; the simulated cluster
runs no NFD, so the simulated GFD writes the same labels to the node itself under its own name, which keeps
"who changed this label" answers pointing at the component that decides them. Removing the pod removes its
labels (as nfd-master does when GFD's NodeFeature disappears).

The CUDA version a driver supports (``cuda.runtime-version.*``) comes from its branch: NVML's
``cudaDriverVersion``. Branches up to 580 (13.0, facts §10.1) are NVIDIA's published pairs; 590 -> 13.1,
595 -> 13.2 and 610 -> 13.3 are [assumed].
"""

from __future__ import annotations

import re

from gpuplan.sim import nodes
from gpuplan.sim.catalog import version_tuple
from gpuplan.sim.kubelet import checks, images, mig, mps, plugin_config
from gpuplan.sim.kubelet.images import Obj, env_value, main_container
from gpuplan.sim.kubelet.outcomes import NodeEffect, PodContext, PodOutcome, crash_loop, running
from gpuplan.sim.kubelet.plugin_config import PluginConfig
from gpuplan.sim.kubelet.state import NodeGpuState

MANAGER = "gpu-feature-discovery"
CUDA_BY_BRANCH = {
    450: (11, 0),
    455: (11, 1),
    460: (11, 2),
    465: (11, 3),
    470: (11, 4),
    495: (11, 5),
    510: (11, 6),
    515: (11, 7),
    520: (11, 8),
    525: (12, 0),
    530: (12, 1),
    535: (12, 2),
    545: (12, 3),
    550: (12, 4),
    555: (12, 5),
    560: (12, 6),
    565: (12, 7),
    570: (12, 8),
    575: (12, 9),
    580: (13, 0),
    590: (13, 1),
    595: (13, 2),
    610: (13, 3),
}
_LABEL_VALUE = re.compile(r"^(?=.{0,63}$)([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_GFD_LABEL = re.compile(
    r"^nvidia\.com/(gpu\.(count|product|memory|family|compute\.|replicas|sharing-strategy|mode"
    r"|machine|clique|multiprocessors|slices\.|engines\.)|cuda\.|mig\.capable$|mig\.strategy$"
    r"|mps\.capable$|gfd\.timestamp$|vgpu\.|mig-\d+g\.)"
)


def is_gfd_label(key: str) -> bool:
    """Whether GFD writes label ``key`` (the operator's gpu.present / gpu.deploy.* are not GFD's)."""
    return bool(_GFD_LABEL.match(key))


def cuda_version(driver: str) -> tuple[int, int]:
    """The newest CUDA version a driver release supports (NVML's cudaDriverVersion)."""
    branch = version_tuple(driver)[0]
    known = [b for b in CUDA_BY_BRANCH if b <= branch]
    return CUDA_BY_BRANCH[max(known)] if known else (10, 0)


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """GFD after its init containers: Ready and labelling, or crash-looping on NVML or config errors."""
    init_count = len(images.init_containers(pod))
    container = main_container(pod) or {}
    blocked = checks.gpu_access(pod, node)
    if blocked is not None:
        return blocked
    try:
        config = plugin_config.load(pod, container, node, ctx)
    except plugin_config.PluginConfigError as exc:
        return crash_loop(init_count, init_count, str(exc))
    stamp = _timestamp(container, ctx.now)
    if not checks.has_nvml(pod, node):
        if (
            env_value(container, "GFD_FAIL_ON_INIT_ERROR")
            or env_value(container, "FAIL_ON_INIT_ERROR")
            or "true"
        ).lower() != "false":
            return crash_loop(
                init_count,
                init_count,
                "error creating NVML labeler: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND",
            )
        return running(init_count, _effect(node, stamp), message="Warning: no NVML: writing timestamp only")
    return running(
        init_count,
        _effect(node, {**gfd_labels(node, config), **stamp}),
        message="Writing labels to output file /etc/kubernetes/node-feature-discovery/features.d/gfd",
    )


def _effect(node: NodeGpuState, labels: dict[str, str]) -> NodeEffect:
    """Set ``labels``; drop GFD labels the node still carries from an earlier config."""
    stale: dict[str, str | None] = {
        key: None for key in node.labels if is_gfd_label(key) and key not in labels
    }
    return NodeEffect(labels={**stale, **labels}, manager=MANAGER)


def gfd_labels(node: NodeGpuState, config: PluginConfig) -> dict[str, str]:
    """The labels GFD derives from NVML for ``node`` (facts §4), without the timestamp."""
    model = node.model
    driver = node.driver_version
    if model is None or driver is None:
        return {}
    shared = config.sharing_strategy != "none"
    product = model.product + ("-SHARED" if shared and not config.rename_by_default else "")
    labels = {
        "nvidia.com/gpu.count": str(len(node.gpus)),
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.memory": str(model.memory_mib),
        "nvidia.com/gpu.family": model.family,
        "nvidia.com/gpu.compute.major": str(model.cc_major),
        "nvidia.com/gpu.compute.minor": str(model.cc_minor),
        "nvidia.com/gpu.replicas": str(config.replicas),
        "nvidia.com/gpu.sharing-strategy": config.sharing_strategy,
        "nvidia.com/gpu.mode": "graphics" if model.pci_class == "0300" else "compute",
        "nvidia.com/mig.capable": str(model.mig_capable).lower(),
        "nvidia.com/mps.capable": str(mps.capable(node, config)).lower(),
        **driver_labels(driver),
    }
    machine = machine_label(nodes.machine_name(node.node))
    if machine is not None:
        labels["nvidia.com/gpu.machine"] = machine
    if config.mig_strategy != "none":
        labels["nvidia.com/mig.strategy"] = config.mig_strategy
    return {**labels, **mig.gfd_labels(node, config.mig_strategy)}


def machine_label(product_name: str) -> str | None:
    """GFD only turns spaces into dashes; a value Kubernetes would refuse (parentheses, commas, > 63 chars)
    is dropped when the labels are applied, so the node then carries no ``gpu.machine`` label."""
    value = product_name.strip().replace(" ", "-") or "unknown"
    return value if _LABEL_VALUE.match(value) else None


def driver_labels(driver: str) -> dict[str, str]:
    """``cuda.driver-version.*``, the deprecated ``cuda.driver.*``, and ``cuda.runtime(-version).*``."""
    parts = driver.split(".") + ["", ""]
    major, minor, revision = parts[0], parts[1], parts[2]
    cuda_major, cuda_minor = cuda_version(driver)
    return {
        "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.driver-version.major": major,
        "nvidia.com/cuda.driver-version.minor": minor,
        "nvidia.com/cuda.driver-version.revision": revision,
        "nvidia.com/cuda.driver.major": major,
        "nvidia.com/cuda.driver.minor": minor,
        "nvidia.com/cuda.driver.rev": revision,
        "nvidia.com/cuda.runtime-version.full": f"{cuda_major}.{cuda_minor}",
        "nvidia.com/cuda.runtime-version.major": str(cuda_major),
        "nvidia.com/cuda.runtime-version.minor": str(cuda_minor),
        "nvidia.com/cuda.runtime.major": str(cuda_major),
        "nvidia.com/cuda.runtime.minor": str(cuda_minor),
    }


def _timestamp(container: Obj, now: float) -> dict[str, str]:
    """``gfd.timestamp``: the start of the current labelling interval (absent with ``--no-timestamp``)."""
    words = images.command_words(container)
    if "--no-timestamp" in words or (env_value(container, "GFD_NO_TIMESTAMP") or "").lower() == "true":
        return {}
    interval = _interval(container)
    return {"nvidia.com/gfd.timestamp": str(int(now // interval * interval))}


def sleep_interval(pod: Obj) -> float:
    """Seconds between two labelling passes of the GFD in ``pod`` (``GFD_SLEEP_INTERVAL``, default 60 s)."""
    return _interval(main_container(pod) or {})


def _interval(container: Obj) -> float:
    return _seconds(env_value(container, "GFD_SLEEP_INTERVAL") or "60s")


def _seconds(duration: str) -> float:
    """A Go duration such as ``60s``, ``1m`` or ``1h30m`` in seconds (60 when unreadable)."""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    total = sum(
        float(amount) * units[unit] for amount, unit in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    )
    return total if total > 0 else 60.0


def removal_effect(pod: Obj, node: NodeGpuState, ctx: PodContext) -> NodeEffect | None:
    """GFD's labels go with it."""
    labels: dict[str, str | None] = {key: None for key in node.labels if is_gfd_label(key)}
    return NodeEffect(labels=labels, manager=MANAGER) if labels else None
