"""What a pod does on a simulated GPU node: the kubelet rules, one entry point per question.

:func:`evaluate` answers "how does this pod fare on this node now" (a :class:`PodOutcome` with the effect it
has on the node while in that outcome); :func:`removal_effect` answers "what disappears with it". The pod
goes through what a kubelet does, in order: pull its images (scenario image faults), set up its sandbox
(runtime handler, ConfigMap volumes), run its init containers, then its main container, whose behaviour
depends on the NVIDIA component it runs (``images.identify``): ``driver``, ``toolkit``, ``device_plugin``,
``gfd``, ``dcgm``, ``validator``, ``mps`` (the MPS control daemon), the workload images (``workloads``: the
CUDA vectoradd sample runs to completion); any other image just runs.

Pure and fast: no I/O, no clock (``ctx.now``), no randomness. Called by the per-node kubelet runtime
(``gpuplan.sim.kubelet.runtime``), which applies effects with ``NodeEffect.manager`` as field manager.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuplan.sim.kubelet import (
    checks,
    dcgm,
    device_plugin,
    driver,
    gfd,
    images,
    mig_manager,
    mps,
    plugin_config,
    toolkit,
    validator,
    workloads,
)
from gpuplan.sim.kubelet.images import Obj, Role
from gpuplan.sim.kubelet.outcomes import LEAVE, NodeEffect, PodContext, PodOutcome, running
from gpuplan.sim.kubelet.state import NodeGpuState

__all__ = ["LEAVE", "NodeEffect", "PodContext", "PodOutcome", "evaluate", "removal_effect"]

Rule = Callable[[Obj, NodeGpuState, PodContext], PodOutcome]
Removal = Callable[[Obj, NodeGpuState, PodContext], "NodeEffect | None"]

_INIT_HOOKS: dict[str, checks.InitHook] = {
    "driver-manager": driver.manager_init,
    "config-manager": plugin_config.manager_init,
}


def _other(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    return running(len(images.init_containers(pod)))


_MAIN: dict[Role, Rule] = {
    Role.DRIVER: driver.evaluate,
    Role.TOOLKIT: toolkit.evaluate,
    Role.DEVICE_PLUGIN: device_plugin.evaluate,
    Role.GFD: gfd.evaluate,
    Role.DCGM_EXPORTER: dcgm.evaluate,
    Role.DCGM: dcgm.evaluate_hostengine,
    Role.VALIDATOR: validator.evaluate,
    Role.MIG_MANAGER: mig_manager.evaluate,
    Role.MPS_CONTROL_DAEMON: mps.evaluate,
    Role.VECTORADD: workloads.vectoradd,
    Role.GPUPLAN: _other,  # its process runs for real (``processes``); the rules only get it started
    Role.OTHER: _other,
}
_REMOVAL: dict[Role, Removal] = {
    Role.DRIVER: driver.removal_effect,
    Role.TOOLKIT: toolkit.removal_effect,
    Role.DEVICE_PLUGIN: device_plugin.removal_effect,
    Role.GFD: gfd.removal_effect,
}


def evaluate(pod: Obj, node: NodeGpuState, ctx: PodContext) -> PodOutcome:
    """How ``pod`` fares on ``node`` now, and its effect on the node while it is so."""
    return (
        checks.image_fault(pod, ctx)
        or checks.sandbox(pod, node, ctx)
        or checks.init_containers(pod, node, ctx, _INIT_HOOKS)
        or _MAIN[images.identify(pod)](pod, node, ctx)
    )


def removal_effect(pod: Obj, node: NodeGpuState, ctx: PodContext) -> NodeEffect | None:
    """What goes away with ``pod`` (device-plugin resources to "0", GFD labels, runtime handlers, driver)."""
    removal = _REMOVAL.get(images.identify(pod))
    return removal(pod, node, ctx) if removal else None
