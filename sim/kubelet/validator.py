"""The operator validator (``nvcr.io/nvidia/gpu-operator`` running ``nvidia-validator``, facts §2.3, §3.3,
§8).

Its init containers check the stack in order, ``driver-validation`` -> ``toolkit-validation`` ->
``cuda-validation`` -> ``plugin-validation``; ``kubectl get pods`` shows ``Init:n/4`` as each passes (the
checks themselves live in ``checks.validation_problem``: a working driver; ``nvidia-smi`` inside a container
the NVIDIA runtime started; a CUDA workload on a GPU; ``nvidia.com/gpu`` capacity >= 1 on the node). A check
with ``WITH_WAIT=true`` (driver) keeps waiting; the others exit non-zero and crash-loop until they pass,
except plugin validation, which retries internally for minutes before it gives up. The main container only
prints "all validations are successful" and sleeps, so the pod is Ready exactly when all four passed.
"""

from __future__ import annotations

from gpuplan.sim.kubelet import images
from gpuplan.sim.kubelet.images import Obj
from gpuplan.sim.kubelet.outcomes import PodContext, PodOutcome, running
from gpuplan.sim.kubelet.state import NodeGpuState

SUCCESS = "all validations are successful"


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """The validator's main container runs once every init container passed."""
    return running(len(images.init_containers(pod)), message=SUCCESS)
