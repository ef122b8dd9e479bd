"""The NVIDIA driver container (``nvcr.io/nvidia/driver:<version>-<os>``) and its k8s-driver-manager init.

What happens on a node, in start order (facts §2.4, §3.1, §9.1, §10.1):

* ``k8s-driver-manager uninstall_driver`` (init): on a node whose host already runs a driver it labels the
  node ``nvidia.com/gpu.deploy.driver=pre-installed`` and exits non-zero, so the pod sits in
  ``Init:CrashLoopBackOff`` until the label takes the node out of its DaemonSet and the pod is removed. If
  another containerised driver is still loaded it cannot unload it: "driver is in use", Init:CrashLoopBackOff.
* The image tag must exist: ``<version>-<os tag>`` for a published OS flavour (ubuntu20.04/22.04/24.04,
  rhel8/9/10, rhcos4.x), or a precompiled ``<branch>-<kernel>-<os tag>``. An unknown tag is
  ``ErrImagePull`` (first attempt) then ``ImagePullBackOff``, as the kubelet alternates them.
* A tag for a *different* published OS than the node's pulls fine and then fails where the real container
  fails: it cannot find kernel headers for the node's kernel in that distribution's repositories ("Could not
  resolve Linux kernel version") and crash-loops. We chose this over a pull error because such tags do exist
  on nvcr.io (the operator builds the tag from the node's OS, so only a hand-written tag gets here).
* The driver must support the GPU (catalog ``driver_support_error``: 595 on V100 fails, Blackwell needs
  >= 570.133.20): the kernel module refuses the GPU with the ``NVRM:`` message and modprobe fails; Blackwell
  needs the open kernel modules, pre-Turing GPUs the proprietary ones.
* Otherwise the driver installs and the pod gets Ready; its effect sets the node's container driver, which
  NVML (and so GFD, DCGM and the validator) then report. Removal unloads it again.
"""

from __future__ import annotations

import re

from gpuplan.sim.catalog import driver_support_error
from gpuplan.sim.kubelet import checks, images
from gpuplan.sim.kubelet.images import Obj, env_value, main_container, parse_image
from gpuplan.sim.kubelet.outcomes import NodeEffect, PodContext, PodOutcome, crash_loop, running
from gpuplan.sim.kubelet.state import NodeGpuState

MANAGER = "driver-manager"  # the k8s-driver-manager binary; its client-go user agent names the field manager
PRE_INSTALLED_LABEL = "nvidia.com/gpu.deploy.driver"
_TAG = re.compile(
    r"^(?P<version>\d+(?:\.\d+)*)(?:-(?P<kernel>\d+\.\d+\.\d+-.+))?-(?P<os>[a-z]+\d+(?:\.\d+)?)$"
)
_PUBLISHED_OS = re.compile(r"^(ubuntu(20\.04|22\.04|24\.04)|rhel(8|9|10)|rhcos4\.\d+)$")
# Precompiled images carry only the branch; the release inside is the branch's newest [assumed figures].
PRECOMPILED_RELEASES = {
    "535": "535.274.02",
    "550": "550.163.01",
    "570": "570.195.03",
    "575": "575.57.08",
    "580": "580.105.08",
    "590": "590.48.01",
    "595": "595.91.07",
    "610": "610.57.04",
}
IN_USE = "Could not unload NVIDIA driver kernel modules, driver is in use"


def driver_version_of(pod: Obj) -> str | None:
    """The driver release the pod's image installs, or None when its tag names no release we know."""
    container = main_container(pod)
    match = _TAG.match(parse_image(container.get("image", "")).tag) if container else None
    if match is None:
        return None
    version = match.group("version")
    return PRECOMPILED_RELEASES.get(version) if match.group("kernel") else version


def manager_init(container: Obj, pod: Obj, node: NodeGpuState, ctx: PodContext) -> checks.Blocked | None:
    """``k8s-driver-manager uninstall_driver``: pre-installed detection and unloading the old driver."""
    if node.host_driver:
        message = (
            f"NVIDIA GPU driver {node.host_driver} is already pre-installed on the node (nvidia-smi found "
            "on the host); disabling the containerized driver: labeling node "
            f"{node.node.name} {PRE_INSTALLED_LABEL}=pre-installed"
        )
        effect = NodeEffect(labels={PRE_INSTALLED_LABEL: "pre-installed"}, manager=MANAGER)
        return checks.Blocked(message, crashes=True, effect=effect)
    if node.container_driver not in (None, driver_version_of(pod)):
        return checks.Blocked(IN_USE, crashes=True)
    return None


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """The driver container after its init containers finished."""
    init_count = len(images.init_containers(pod))
    container = main_container(pod) or {}
    image = str(container.get("image", ""))
    match = _TAG.match(parse_image(image).tag)
    if match is None or not _PUBLISHED_OS.match(match.group("os")) or driver_version_of(pod) is None:
        return _pull_failure(pod, container, image, init_count)
    version = driver_version_of(pod) or ""
    problem = _install_problem(pod, node, container, match, version)
    if problem is not None:
        return crash_loop(init_count, init_count, problem)
    return running(
        init_count,
        NodeEffect(container_driver=version),
        message=f"Done, now waiting for signal (NVIDIA driver {version} loaded)",
    )


def _install_problem(
    pod: Obj, node: NodeGpuState, container: Obj, match: re.Match[str], version: str
) -> str | None:
    if node.host_driver or node.container_driver not in (None, version):
        return IN_USE
    if match.group("os") != node.node.driver_os_tag:
        return (
            f"Installing NVIDIA driver kernel modules for kernel {node.node.kernel}...\nResolving Linux "
            f"kernel version...\nCould not resolve Linux kernel version (image is built for "
            f"{match.group('os')}, the node runs {node.node.os})"
        )
    kernel = match.group("kernel")
    if kernel and kernel != node.node.kernel:
        return f"modprobe: FATAL: Module nvidia not found in directory /lib/modules/{node.node.kernel}"
    model = node.model
    if model is None:
        return "NVRM: No NVIDIA devices probed.\nmodprobe: ERROR: could not insert 'nvidia': No such device"
    unsupported = driver_support_error(model, version)
    if unsupported:
        return f"{unsupported}\nmodprobe: ERROR: could not insert 'nvidia': No such device"
    return _module_type_problem(container, pod, node, model.cc_major, model.cc_minor)


def _module_type_problem(container: Obj, pod: Obj, node: NodeGpuState, major: int, minor: int) -> str | None:
    """Blackwell runs only the open kernel modules; pre-Turing GPUs only the proprietary ones (facts
    §10.1)."""
    module_type = env_value(container, "KERNEL_MODULE_TYPE") or "auto"
    if env_value(container, "OPEN_KERNEL_MODULES_ENABLED") == "true":
        module_type = "open"
    model_name = node.model.name if node.model else "GPU"
    if module_type == "proprietary" and major >= 10:
        return (
            f"NVRM: The NVIDIA {model_name} GPU installed in this system requires use of the NVIDIA open "
            "kernel modules.\nmodprobe: ERROR: could not insert 'nvidia': No such device"
        )
    if module_type == "open" and (major, minor) < (7, 5):
        return (
            f"NVRM: The NVIDIA {model_name} GPU installed in this system is not supported by open nvidia.ko "
            "because it does not include the required GPU System Processor (GSP).\n"
            "modprobe: ERROR: could not insert 'nvidia': No such device"
        )
    return None


def _pull_failure(pod: Obj, container: Obj, image: str, init_count: int) -> PodOutcome:
    """ErrImagePull on the first attempt, ImagePullBackOff while the kubelet backs off (they alternate)."""
    name = container.get("name", "")
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    waiting = [
        ((status.get("state") or {}).get("waiting") or {}).get("reason")
        for status in statuses
        if status.get("name") == name
    ]
    failure = (
        "ImagePullBackOff"
        if waiting and waiting[0] in ("ErrImagePull", "ImagePullBackOff")
        else "ErrImagePull"
    )
    return checks.image_failure(pod, name, image, failure, init_count, init_count)


def removal_effect(pod: Obj, node: NodeGpuState, ctx: PodContext) -> NodeEffect | None:
    """The driver container's preStop unloads its modules: the node has no container driver any more."""
    version = driver_version_of(pod)
    if version is None or node.container_driver != version:
        return None
    return NodeEffect(container_driver=None)
