"""Resource arithmetic as kube-scheduler does it: quantities, a pod's effective requests, a node's free room.

A pod's request for a resource is the larger of the sum over its containers and the largest single init
container (init containers run one at a time), plus the RuntimeClass's ``spec.overhead``
(``resource.PodRequests`` in k8s.io/component-helpers). CPU is counted in millicores, everything else in
whole units (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, ``nvidia.com/gpu.shared`` ...). A node's room is
its ``status.allocatable`` minus the requests of the pods bound to it that are not terminal (Succeeded or
Failed pods hold nothing; a terminating pod still does until it is gone).

For scoring, a container that requests no CPU or memory counts as 100m CPU and 200Mi memory
(``schedutil.DefaultMilliCPURequest`` / ``DefaultMemoryRequest``), as the LeastAllocated score counts it.

Pure; used by ``gpuplan.sim.controllers.scheduler``. Quantities are parsed by ``sim.api.quantity``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from math import ceil
from typing import Any

from gpuplan.sim.api.quantity import value_of

Obj = dict[str, Any]

DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024
TERMINAL_PHASES = ("Succeeded", "Failed")


def quantity(text: Any) -> Decimal:
    """The number a quantity (``500m``, ``1Gi``, ``2``) stands for, as the API server parses it; 0 for what
    is not one."""
    return value_of(text)


def amount(name: str, text: Any) -> int:
    """The scheduler's integer for a resource: millicores for cpu, the rounded-up value for the rest."""
    value = quantity(text) * (1000 if name == "cpu" else 1)
    return int(ceil(value))


def pod_requests(pod: Obj) -> dict[str, int]:
    """The pod's effective requests, resource by resource (zero requests left out)."""
    spec = pod.get("spec") or {}
    total = _sum(_container_requests(c) for c in spec.get("containers") or [])
    for init in spec.get("initContainers") or []:
        for name, value in _container_requests(init).items():
            total[name] = max(total.get(name, 0), value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0) + amount(name, value)
    return {name: value for name, value in total.items() if value > 0}


def scoring_requests(pod: Obj) -> dict[str, int]:
    """CPU and memory as the LeastAllocated score counts them (containers without requests count the
    defaults)."""
    cpu = memory = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        requests = _container_requests(container)
        cpu += requests.get("cpu") or DEFAULT_MILLI_CPU
        memory += requests.get("memory") or DEFAULT_MEMORY
    return {"cpu": cpu, "memory": memory}


def allocatable(node: Obj) -> dict[str, int]:
    return {
        name: amount(name, value)
        for name, value in ((node.get("status") or {}).get("allocatable") or {}).items()
    }


def holds_resources(pod: Obj) -> bool:
    """A bound pod's requests count on its node until it is terminal."""
    return (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES


def requested_on(pods: Iterable[Obj], *, scoring: bool = False) -> dict[str, int]:
    """What the pods holding resources request together, plus their count as ``pods``."""
    holding = [p for p in pods if holds_resources(p)]
    total = _sum((scoring_requests(p) if scoring else pod_requests(p)) for p in holding)
    total["pods"] = len(holding)
    return total


def _container_requests(container: Obj) -> dict[str, int]:
    requests = (container.get("resources") or {}).get("requests") or {}
    return {name: amount(name, value) for name, value in requests.items()}


def _sum(parts: Iterable[Mapping[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for part in parts:
        for name, value in part.items():
            total[name] = total.get(name, 0) + value
    return total
