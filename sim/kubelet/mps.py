"""CUDA MPS sharing on a node: the MPS control daemon, GFD's ``nvidia.com/mps.capable``, and the device
plugin's wait for the daemon (fleet facts §5, NVIDIA/k8s-device-plugin ``cmd/mps-control-daemon``).

* The daemon (``mps-control-daemon`` in the ``k8s-device-plugin`` image) loads the same config file as the
  plugin, through the config-manager its pod carries (:mod:`gpuplan.sim.kubelet.plugin_config`). With an MPS
  config it starts one ``nvidia-cuda-mps-control`` per shared resource, with its pipe and log directories
  ``/mps/<resource>/pipe`` and ``/mps/<resource>/log``, then creates ``/mps/.ready``; without one it logs
  "No devices are configured for MPS sharing; Waiting indefinitely." and runs (``cmd/mps-control-daemon/
  main.go``: ``startDaemons``). A config that does not load is fatal, as for the plugin.
* ``/mps/.ready`` is on the host (``/run/nvidia/mps``) and is removed when the daemon stops; a simulated
  node has no files, so a Ready daemon pod on the node stands for it.
* The plugin with an MPS config does not start its resource until the daemon signalled readiness
  (``internal/plugin/mps.go``: ``waitForDaemon`` polls ``.ready`` and the control pipe, the plugin manager
  retries the start every 30 s). Simplification: the real container has no readiness probe and is Ready
  while it waits; the simulated one is Running but not Ready until it registers, so its log says
  "Registered" when it does, not before.
* GFD labels ``nvidia.com/mps.capable=true`` only when the node's config shares through MPS and no GPU is
  MIG-enabled (``internal/lm/nvml.go``: ``newMPSCapabilityLabeler``).

Pure; called by ``rules`` (the daemon), ``device_plugin`` and ``gfd``.
"""

from __future__ import annotations

from gpuplan.sim.kubelet import checks, images, plugin_config
from gpuplan.sim.kubelet.images import Obj, Role, main_container
from gpuplan.sim.kubelet.outcomes import (
    NodeEffect,
    PodContext,
    PodOutcome,
    crash_loop,
    running,
    running_unready,
)
from gpuplan.sim.kubelet.plugin_config import PluginConfig
from gpuplan.sim.kubelet.state import NodeGpuState

ROOT = "/mps"
NOT_CONFIGURED = "No devices are configured for MPS sharing; Waiting indefinitely."
# [assumed] wording: startDaemons wraps the NVML error of rm.AddDefaultResourcesToConfig this way
NO_NVML = (
    "error starting plugins: unable to add default resources to config: failed to initialize NVML: "
    "ERROR_LIBRARY_NOT_FOUND"
)


def mig_enabled(node: NodeGpuState) -> bool:
    """Whether any GPU of ``node`` runs in MIG mode (the geometry the simulated mig-manager applied)."""
    return bool(node.mig)


def capable(node: NodeGpuState, config: PluginConfig) -> bool:
    """GFD's ``nvidia.com/mps.capable``: the config shares through MPS and no GPU is MIG-enabled."""
    return config.sharing_strategy == "mps" and not mig_enabled(node)


def shared_resource(config: PluginConfig) -> str:
    """The resource the daemon serves (its pipe directory's name), as the plugin advertises it."""
    return next(iter(config.resources(1)))


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """The daemon container after its init containers (toolkit-validation, mount-shm, config-manager)."""
    init_count = len(images.init_containers(pod))
    blocked = checks.gpu_access(pod, node)
    if blocked is not None:
        return blocked
    try:
        config = plugin_config.load(pod, main_container(pod) or {}, node, ctx)
    except plugin_config.PluginConfigError as exc:
        return crash_loop(init_count, init_count, f"error starting plugins: {exc}")
    if not checks.has_nvml(pod, node):
        return crash_loop(init_count, init_count, NO_NVML)
    if config.sharing_strategy != "mps":
        return running(init_count, message=NOT_CONFIGURED)
    resource = shared_resource(config)
    return running(
        init_count,
        message="\n".join(
            [
                f'"Staring MPS daemon" resource="{resource}"',  # sic, the daemon's own spelling
                f"CUDA_MPS_PIPE_DIRECTORY={ROOT}/{resource}/pipe",
                f"CUDA_MPS_LOG_DIRECTORY={ROOT}/{resource}/log",
                f"created {ROOT}/.ready",
            ]
        ),
    )


def plugin_waits(config: PluginConfig, node: NodeGpuState, init_count: int) -> PodOutcome | None:
    """The device plugin with an MPS config whose node has no ready MPS daemon: it advertises nothing."""
    if config.sharing_strategy != "mps" or Role.MPS_CONTROL_DAEMON in node.ready_roles:
        return None
    resource = shared_resource(config)
    served = sorted(n for n in node.resources if n in ("nvidia.com/gpu", "nvidia.com/gpu.shared"))
    return running_unready(
        init_count,
        f'"Waiting for MPS daemon to be ready" resource="{resource}" '
        'reason="MPS daemon has not signalled readiness"',
        NodeEffect(resources=dict.fromkeys(served, "0")) if served else None,
    )
