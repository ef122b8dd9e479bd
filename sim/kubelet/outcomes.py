"""The values the kubelet rules return: a pod's outcome on a node and the effect it has on the node.

Defined apart from ``rules`` so that every per-component module (driver, toolkit, ...) can build them without
importing the dispatcher. ``gpuplan.sim.kubelet.rules`` re-exports all of them; import from there.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
LEAVE = Ellipsis  # NodeEffect.container_driver: leave the node's container driver as it is


@dataclass(frozen=True)
class PodContext:
    """What a rule may know besides the pod and the node.

    ``now`` is in seconds and should be Unix time: GFD's ``nvidia.com/gfd.timestamp`` and the DCGM values use
    it. ``config_lookup(namespace, name)`` returns the ConfigMap object or None.
    """

    image_faults: Mapping[str, str] = field(default_factory=dict)
    config_lookup: Callable[[str, str], Obj | None] = lambda namespace, name: None
    now: float = 0.0


@dataclass(frozen=True)
class NodeEffect:
    """What a pod does to its node while it is in an outcome (or, from ``removal_effect``, when it goes).

    ``labels`` / ``resources``: a None value removes the key. ``resources`` are written to both capacity and
    allocatable. ``container_driver``: a version, None (no container driver) or ``...`` (leave unchanged).
    ``manager`` is the field manager the runtime writes the node with.
    """

    labels: Mapping[str, str | None] = field(default_factory=dict)
    resources: Mapping[str, str | None] = field(default_factory=dict)
    runtime_handlers: Mapping[str, bool] = field(default_factory=dict)
    container_driver: str | None | types.EllipsisType = LEAVE
    manager: str = "kubelet"


@dataclass(frozen=True)
class PodOutcome:
    """How a pod's containers fare on its node right now.

    ``init_done`` counts finished init containers (``kubectl get pods`` shows ``Init:init_done/total`` while
    it is below the pod's init-container count). ``waiting_reason`` is the reason of the container that is
    waiting (an init container's while ``init_done`` < total, else the main container's); ``message`` is what
    that container says or logs. ``crash_looping``: its restartCount keeps growing.

    ``exit_code``: the main container's run ended with that code (a run-to-completion image); ``log`` is what
    that run wrote. ``gpuplan.sim.kubelet.completion.settle`` turns such an outcome into what the pod's
    restartPolicy makes of it (terminated and Succeeded/Failed, or restarted after a back-off).
    """

    phase: str
    ready: bool
    init_done: int
    waiting_reason: str | None = None
    message: str | None = None
    crash_looping: bool = False
    effect: NodeEffect | None = None
    exit_code: int | None = None
    log: tuple[str, ...] = ()


def exited(pod_init_count: int, code: int, log: tuple[str, ...] = ()) -> PodOutcome:
    """All init containers done, the main container ran to its end with ``code``, writing ``log``."""
    return PodOutcome("Running", False, pod_init_count, None, None, False, None, code, log)


def running(pod_init_count: int, effect: NodeEffect | None = None, message: str | None = None) -> PodOutcome:
    """All init containers done, main container Running and Ready."""
    return PodOutcome("Running", True, pod_init_count, None, message, False, effect)


def running_unready(pod_init_count: int, message: str, effect: NodeEffect | None = None) -> PodOutcome:
    """The main container runs but is not (yet) Ready."""
    return PodOutcome("Running", False, pod_init_count, None, message, False, effect)


def crash_loop(
    init_done: int,
    init_count: int,
    message: str,
    effect: NodeEffect | None = None,
    reason: str = "CrashLoopBackOff",
) -> PodOutcome:
    """A container that keeps exiting: an init container (Pending) while init_done < init_count."""
    phase = "Pending" if init_done < init_count else "Running"
    return PodOutcome(phase, False, init_done, reason, message, True, effect)


def init_waiting(init_done: int, message: str, effect: NodeEffect | None = None) -> PodOutcome:
    """Init container ``init_done`` runs and waits for something (``Init:init_done/total``)."""
    return PodOutcome("Pending", False, init_done, "PodInitializing", message, False, effect)


def creating(message: str) -> PodOutcome:
    """The pod sandbox or a volume cannot be set up: stuck in ContainerCreating."""
    return PodOutcome("Pending", False, 0, "ContainerCreating", message, False, None)
