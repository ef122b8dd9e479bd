"""What every pod goes through before its main container does its job: image pulls, the pod sandbox and
volumes, the init containers, and (for GPU components) getting the NVIDIA libraries into the container.

Each check returns a :class:`~gpuplan.sim.kubelet.outcomes.PodOutcome` when the pod is stopped there, or
None when it gets past. Called by ``gpuplan.sim.kubelet.rules.evaluate`` in pod start order; pure.

The init containers the NVIDIA components use (facts §2.3) are recognised by what they run:
``nvidia-validator`` with ``COMPONENT=driver|toolkit|cuda|plugin``, the ``until [ -f .../toolkit-ready ]``
wait loop, the driver manager, and the device-plugin config manager. A validation passes when what it
validates works on the node. Simplification: the ``toolkit-ready`` marker is treated as present whenever the
driver works and an NVIDIA runtime handler is configured (the real marker is written by the operator
validator's ``toolkit-validation``, which passes under exactly those conditions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuplan.sim.kubelet import image_catalog, images, registry_network
from gpuplan.sim.kubelet.images import Obj, command_words, env_value
from gpuplan.sim.kubelet.outcomes import (
    NodeEffect,
    PodContext,
    PodOutcome,
    crash_loop,
    creating,
    init_waiting,
)
from gpuplan.sim.kubelet.state import NVIDIA_HANDLERS, NodeGpuState

VALIDATION_COMPONENTS = ("driver", "toolkit", "cuda", "plugin")


@dataclass(frozen=True)
class Blocked:
    """Why an init container does not finish: it waits (Init:n/m) or exits non-zero
    (Init:CrashLoopBackOff)."""

    message: str
    crashes: bool = False
    effect: NodeEffect | None = None


InitHook = Callable[[Obj, Obj, NodeGpuState, PodContext], Blocked | None]


def image_fault(pod: Obj, ctx: PodContext) -> PodOutcome | None:
    """The scenario's image faults (``faults.images``), first failing container in start order."""
    total_init = len(images.init_containers(pod))
    for index, (name, image, is_init) in enumerate(images.all_images(pod)):
        failure = ctx.image_faults.get(image)
        if failure is None:
            continue
        done = index if is_init else total_init
        return image_failure(pod, name, image, failure, done, total_init)
    return None


def image_failure(
    pod: Obj, container: str, image: str, failure: str, done: int, total_init: int
) -> PodOutcome:
    """The outcome a real kubelet shows for ``failure`` of ``container``; messages as kubelet words them."""
    phase = "Pending" if done < total_init else "Running"
    if failure == image_catalog.NOT_FOUND:
        return PodOutcome("Pending", False, done, "ErrImagePull", image_catalog.not_found_message(image))
    if failure == image_catalog.NOT_FOUND_BACK_OFF:
        return PodOutcome("Pending", False, done, "ImagePullBackOff", image_catalog.back_off_message(image))
    if failure == registry_network.UNREACHABLE:
        return PodOutcome("Pending", False, done, "ErrImagePull", registry_network.unreachable_message(image))
    if failure == registry_network.UNREACHABLE_BACK_OFF:
        message = registry_network.back_off_message(image)
        return PodOutcome("Pending", False, done, "ImagePullBackOff", message)
    if failure == "ErrImagePull":
        message = (
            f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
            f"{image}: not found"
        )
        return PodOutcome("Pending", False, done, "ErrImagePull", message)
    if failure == "ImagePullBackOff":
        return PodOutcome("Pending", False, done, "ImagePullBackOff", f'Back-off pulling image "{image}"')
    if failure == "RunContainerError":
        message = (
            "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
            "runc create failed: unable to start container process: error during container init: "
            'exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown'
        )
        return PodOutcome(phase, False, done, "RunContainerError", message, True)
    message = f"back-off 10s restarting failed container={container} pod={images.pod_ref(pod)}"
    return PodOutcome(phase, False, done, "CrashLoopBackOff", message, True)


def pod_handler(pod: Obj, node: NodeGpuState) -> str:
    """The runtime handler that runs the pod: its RuntimeClass's (named alike), else containerd's default."""
    runtime_class = (pod.get("spec") or {}).get("runtimeClassName")
    return str(runtime_class) if runtime_class else node.default_runtime


def sandbox(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome | None:
    """The pod sandbox needs its runtime handler, and ConfigMap volumes need their ConfigMap."""
    handler = pod_handler(pod, node)
    if not node.has_handler(handler):
        return creating(
            "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox "
            f'runtime: no runtime for "{handler}" is configured'
        )
    namespace = (pod.get("metadata") or {}).get("namespace", "default")
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        source = volume.get("configMap")
        if source is None or source.get("optional"):
            continue
        if ctx.config_lookup(namespace, source.get("name", "")) is None:
            return creating(
                f'MountVolume.SetUp failed for volume "{volume.get("name")}" : configmap '
                f'"{source.get("name")}" not found'
            )
    return None


def init_containers(
    pod: Obj, node: NodeGpuState, ctx: PodContext, hooks: dict[str, InitHook]
) -> PodOutcome | None:
    """Run the init containers in order; the first that does not finish decides the outcome.

    ``hooks`` handles component-specific init containers by kind (``driver-manager``, ``config-manager``).
    """
    inits = images.init_containers(pod)
    for index, container in enumerate(inits):
        kind = init_kind(container)
        hook = hooks.get(kind)
        blocked = hook(container, pod, node, ctx) if hook else validation(kind, container, pod, node)
        if blocked is None:
            continue
        if blocked.crashes:
            return crash_loop(index, len(inits), blocked.message, blocked.effect)
        return init_waiting(index, blocked.message, blocked.effect)
    return None


def init_kind(container: Obj) -> str:
    """What an init container does: a validation component, ``driver-manager``, ``config-manager``, or
    other."""
    words = command_words(container)
    name = str(container.get("name", ""))
    if name == "k8s-driver-manager" or any(word.endswith("driver-manager") for word in words):
        return "driver-manager"
    if any("config-manager" in word for word in words):
        return "config-manager"
    component = env_value(container, "COMPONENT")
    if component in VALIDATION_COMPONENTS and any("nvidia-validator" in word for word in words):
        return component
    if any(word.endswith("/toolkit-ready") for word in words):
        return "toolkit-ready"
    if any(word.endswith("/driver-ready") for word in words):
        return "driver-ready"
    for component in VALIDATION_COMPONENTS:
        if name == f"{component}-validation":
            return component
    return "other"


def validation(kind: str, container: Obj, pod: Obj, node: NodeGpuState) -> Blocked | None:
    """The validator's checks (facts §8) and the operands' marker-file waits."""
    if kind == "other":
        return None
    waits = kind in ("toolkit-ready", "driver-ready", "plugin") or env_value(container, "WITH_WAIT") == "true"
    problem = validation_problem(kind, pod, node)
    if problem is None:
        return None
    return Blocked(problem, crashes=not waits)


def validation_problem(kind: str, pod: Obj, node: NodeGpuState) -> str | None:
    """Why validation ``kind`` fails on ``node`` now, or None when it passes."""
    driver_error = node.driver_error()
    if driver_error is not None:
        if kind == "toolkit-ready":
            return "waiting for nvidia container stack to be setup"
        return f"driver validation failed, retrying after 5 seconds: {driver_error}"
    if kind in ("driver", "driver-ready"):
        return None
    if kind == "toolkit-ready":
        has_nvidia = any(node.has_handler(handler) for handler in NVIDIA_HANDLERS)
        return None if has_nvidia else "waiting for nvidia container stack to be setup"
    if pod_handler(pod, node) not in NVIDIA_HANDLERS:
        return (
            'failed to validate the toolkit: exec: "nvidia-smi": executable file not found in $PATH '
            "(the container does not run with an NVIDIA runtime)"
        )
    if kind == "toolkit":
        return None
    if not node.gpus:
        return "failed to validate cuda workload: no CUDA-capable device is detected"
    if kind == "cuda":
        return None
    if not any(
        _count(value) >= 1
        for name, value in node.resources.items()
        if name.startswith(("nvidia.com/gpu", "nvidia.com/mig-"))
    ):
        return "GPU resources are not discovered by the node, retrying after 5 seconds"
    return None


def _count(value: str) -> int:
    return int(value) if value.isdigit() else 0


def gpu_access(pod: Obj, node: NodeGpuState) -> PodOutcome | None:
    """A container run by an NVIDIA handler needs a loaded driver, else the runtime hook fails to start it."""
    if pod_handler(pod, node) not in NVIDIA_HANDLERS or node.driver_works():
        return None
    reason = "driver not loaded" if node.driver_version is None else "no supported GPU found"
    message = (
        "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
        "runc create failed: unable to start container process: error during container init: error "
        "running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'\n"
        f"nvidia-container-cli: initialization error: nvml error: {reason}: unknown"
    )
    init_count = len(images.init_containers(pod))
    return PodOutcome("Running", False, init_count, "RunContainerError", message, True)


def has_nvml(pod: Obj, node: NodeGpuState) -> bool:
    """Whether the main container sees NVML and GPUs (NVIDIA handler, working driver, GPUs present)."""
    return pod_handler(pod, node) in NVIDIA_HANDLERS and node.driver_works() and bool(node.gpus)
