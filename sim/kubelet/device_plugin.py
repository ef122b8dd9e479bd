"""The NVIDIA device plugin (``nvcr.io/nvidia/k8s-device-plugin``, binary ``nvidia-device-plugin``, facts
§3.4, §5).

Behaviour on a node:

* Operator-style pods wait in ``toolkit-validation`` (``Init:0/1``) until driver and NVIDIA runtime work.
* The plugin needs NVML. In a container the runtime hook did not prepare (no NVIDIA handler, as with the
  README's static manifest on a node whose containerd default is ``runc``), or on a node without GPUs,
  platform detection fails: with ``FAIL_ON_INIT_ERROR`` true (the default) it exits and crash-loops; with
  false it logs "No devices found. Waiting indefinitely." and runs without advertising anything.
* A config that does not load (replicas < 2, unknown version, ...) is fatal: CrashLoopBackOff with the error.
* Otherwise it registers with the kubelet: capacity and allocatable ``nvidia.com/gpu`` = GPUs x replicas
  (``nvidia.com/gpu.shared`` with ``renameByDefault``). GPUs a mig-manager put in MIG mode are advertised as
  their MIG devices by the ``single`` and ``mixed`` strategies (``mig.plugin_resources``, fleet facts §4.5);
  MIG-disabled GPUs stay full ``nvidia.com/gpu``.
* When the pod goes away the kubelet sees the plugin unregister and reports its resources as "0".
"""

from __future__ import annotations

from gpuplan.sim.kubelet import checks, images, mig, mps, plugin_config
from gpuplan.sim.kubelet.images import Obj, env_value, main_container
from gpuplan.sim.kubelet.outcomes import NodeEffect, PodContext, PodOutcome, crash_loop, running
from gpuplan.sim.kubelet.state import NodeGpuState

DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
NO_DEVICES = "No devices found. Waiting indefinitely."
PLATFORM_FAILED = (
    "Incompatible platform detected. If this is a GPU node, did you configure the NVIDIA Container "
    "Toolkit? You can check the prerequisites at: "
    "https://github.com/NVIDIA/k8s-device-plugin#prerequisites"
)


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """The plugin container after its init containers finished."""
    init_count = len(images.init_containers(pod))
    container = main_container(pod) or {}
    blocked = checks.gpu_access(pod, node)
    if blocked is not None:
        return blocked
    try:
        config = plugin_config.load(pod, container, node, ctx)
        _validate_flags(container)
    except plugin_config.PluginConfigError as exc:
        return crash_loop(init_count, init_count, f"error starting plugins: {exc}")
    if not checks.has_nvml(pod, node):
        if _fails_on_init_error(container):
            return crash_loop(
                init_count,
                init_count,
                f"{PLATFORM_FAILED}\nerror starting plugins: error creating "
                "plugin manager: unable to create plugin manager: platform "
                "detection failed",
            )
        return running(init_count, message=f"{PLATFORM_FAILED}\n{NO_DEVICES}")
    waiting = mps.plugin_waits(config, node, init_count)
    if waiting is not None:
        return waiting
    resources = mig.plugin_resources(node, config.mig_strategy) or {
        **config.resources(len(node.gpus)),
        **mig.stale_resources(node),
    }
    if "nvidia.com/gpu.shared" in node.resources and "nvidia.com/gpu.shared" not in resources:
        resources["nvidia.com/gpu.shared"] = "0"
    return running(
        init_count,
        NodeEffect(resources=resources),
        message=f"Registered device plugin for '{next(iter(resources))}' with Kubelet",
    )


def _validate_flags(container: Obj) -> None:
    """The plugin's ``validateFlags``: device list and device ID strategies must be known values."""
    strategies = (env_value(container, "DEVICE_LIST_STRATEGY") or "envvar").split(",")
    unknown = [s for s in strategies if s.strip() not in DEVICE_LIST_STRATEGIES]
    if unknown:
        raise plugin_config.PluginConfigError(
            f"unable to load config: unable to validate flags: invalid "
            f"--device-list-strategy option: invalid strategy: {unknown[0]}"
        )
    id_strategy = env_value(container, "DEVICE_ID_STRATEGY") or "uuid"
    if id_strategy not in ("uuid", "index"):
        raise plugin_config.PluginConfigError(
            f"unable to load config: unable to validate flags: invalid "
            f"--device-id-strategy option: {id_strategy}"
        )


def _fails_on_init_error(container: Obj) -> bool:
    return (env_value(container, "FAIL_ON_INIT_ERROR") or "true").lower() != "false"


def removal_effect(pod: Obj, node: NodeGpuState, ctx: PodContext) -> NodeEffect | None:
    """The plugin unregisters: the kubelet keeps its resource names at "0"."""
    names = {"nvidia.com/gpu"} | {name for name in node.resources if name == "nvidia.com/gpu.shared"}
    return NodeEffect(resources={**dict.fromkeys(sorted(names), "0"), **mig.stale_resources(node)})
