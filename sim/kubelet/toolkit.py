"""The NVIDIA container toolkit (``nvcr.io/nvidia/k8s/container-toolkit``, facts §3.2).

Its ``driver-validation`` init container (``nvidia-validator``, ``WITH_WAIT=true``) holds it at ``Init:0/1``
until a working driver is loaded on the node (host or container). Then it installs the runtime into
``/usr/local/nvidia``, writes the containerd drop-in config with the ``nvidia``, ``nvidia-cdi`` and
``nvidia-legacy`` handlers and restarts containerd: the kubelet then reports those runtime handlers on the
node. When the pod goes away the toolkit removes its config again, and only a host toolkit's ``nvidia``
handler remains.
"""

from __future__ import annotations

from gpuplan.sim.kubelet import images
from gpuplan.sim.kubelet.images import Obj
from gpuplan.sim.kubelet.outcomes import NodeEffect, PodContext, PodOutcome, running, running_unready
from gpuplan.sim.kubelet.state import NVIDIA_HANDLERS, NodeGpuState


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """The toolkit container after ``driver-validation``: Ready once it configured the runtime."""
    init_count = len(images.init_containers(pod))
    if not node.driver_works():
        # Without the init container the entrypoint itself loops on the driver-ready marker.
        return running_unready(init_count, "waiting for the driver validations to be ready...")
    handlers = dict.fromkeys(NVIDIA_HANDLERS, True)
    return running(
        init_count,
        NodeEffect(runtime_handlers=handlers),
        message="Waiting for signal (containerd configured with the nvidia runtime)",
    )


def removal_effect(pod: Obj, node: NodeGpuState, ctx: PodContext) -> NodeEffect | None:
    """The toolkit's cleanup drops its handlers; a host toolkit keeps providing ``nvidia``."""
    handlers = {
        handler: False for handler in NVIDIA_HANDLERS if not (handler == "nvidia" and node.host_toolkit)
    }
    return NodeEffect(runtime_handlers=handlers)
