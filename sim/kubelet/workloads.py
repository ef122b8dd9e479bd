"""Workload images that run to completion on a GPU node: the CUDA ``vectorAdd`` sample.

``nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0`` (and the other ``vectoradd-*`` tags) is the GPU
Operator's and the device plugin's test pod: it adds two vectors of 50,000 floats on the GPU, prints what
the sample prints (NVIDIA/cuda-samples Samples/0_Introduction/vectorAdd/vectorAdd.cu) and exits 0, or exits
1 with the CUDA error of the first call that fails. On a simulated node it fares as it would on a real one:

- run by an NVIDIA runtime handler on a node whose driver does not work: the toolkit's prestart hook fails
  and the container never starts (``RunContainerError``, ``checks.gpu_access``);
- run by ``runc`` (no ``runtimeClassName: nvidia`` and containerd's default is runc): no driver library is
  mounted into the container, so ``cudaMalloc`` fails with ``CUDA driver version is insufficient for CUDA
  runtime version`` and it exits 1;
- an NVIDIA handler and a working driver but no GPU: ``no CUDA-capable device is detected``, exit 1;
- otherwise ``Test PASSED``, exit 0.

Where the pod stays Pending because no node advertises ``nvidia.com/gpu`` is the scheduler's business
(``gpuplan.sim.controllers.scheduler``). Pure; dispatched by ``gpuplan.sim.kubelet.rules``.
"""

from __future__ import annotations

from gpuplan.sim.kubelet import checks, images
from gpuplan.sim.kubelet.images import Obj
from gpuplan.sim.kubelet.outcomes import PodContext, PodOutcome, exited
from gpuplan.sim.kubelet.state import NVIDIA_HANDLERS, NodeGpuState

VECTORADD_HEADER = "[Vector addition of 50000 elements]"
VECTORADD_PASSED = (
    VECTORADD_HEADER,
    "Copy input data from the host memory to the CUDA device",
    "CUDA kernel launch with 196 blocks of 256 threads",
    "Copy output data from the CUDA device to the host memory",
    "Test PASSED",
    "Done",
)
NO_DRIVER_IN_CONTAINER = "CUDA driver version is insufficient for CUDA runtime version"
NO_DEVICE = "no CUDA-capable device is detected"


def vectoradd(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """One run of the vectorAdd sample on ``node``."""
    blocked = checks.gpu_access(pod, node)
    if blocked is not None:
        return blocked
    init_count = len(images.init_containers(pod))
    if checks.pod_handler(pod, node) not in NVIDIA_HANDLERS:
        return exited(init_count, 1, _allocation_failed(NO_DRIVER_IN_CONTAINER))
    if not node.gpus:
        return exited(init_count, 1, _allocation_failed(NO_DEVICE))
    return exited(init_count, 0, VECTORADD_PASSED)


def _allocation_failed(error: str) -> tuple[str, ...]:
    return (VECTORADD_HEADER, f"Failed to allocate device vector A (error code {error})!")
