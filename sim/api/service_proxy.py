"""The service proxy: which pod and port ``/services/[scheme:]NAME[:PORT]/proxy/PATH`` reaches.

As the apiserver's ``ResourceLocation`` of the Service registry (pkg/registry/core/service/storage/
storage.go): a port *number* is first turned into the name of the Service port that has it (503 ``no
service port N found for service "NAME"`` when none does); then the Endpoints named as the Service are read
(404 when there are none) and a subset with ready ``addresses`` and a port of that name is looked for; an
address is used only if it is a pod that still exists with that IP (``isValidAddress``). The apiserver
starts at a random subset and address; so does this, from its own seeded random. Nothing ready: 503 ``no
endpoints available for service "NAME"``. The caller then asks the pod-proxy function for that pod and port.

Called by :class:`gpuplan.sim.api.server.ApiServer` for a proxy route on ``services``; reads the store only.
"""

from __future__ import annotations

import random
from typing import Any

from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.api.store import Store

Obj = dict[str, Any]

_random = random.Random(0)


def _unavailable(message: str) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message)


def _kind(store: Store, api_version: str, kind: str) -> ResourceType:
    rt = store.registry.for_kind(api_version, kind)
    assert rt is not None, f"{kind} is a built-in kind"
    return rt


def port_name(store: Store, service_rt: ResourceType, namespace: str, name: str, port: str) -> str:
    """The Service port name a request means: a number is looked up among the Service's ports."""
    if not port.isdigit():
        return port
    service = store.get(service_rt, namespace, name)
    for service_port in (service.get("spec") or {}).get("ports") or []:
        if service_port.get("port") == int(port):
            return str(service_port.get("name") or "")
    raise _unavailable(f'no service port {port} found for service "{name}"')


def locate(store: Store, service_rt: ResourceType, namespace: str, name: str, port: str) -> tuple[Obj, int]:
    """The pod and container port a service-proxy request goes to; ApiError 404/503 as the apiserver."""
    wanted = port_name(store, service_rt, namespace, name, port)
    endpoints = store.get(_kind(store, "v1", "Endpoints"), namespace, name)
    subsets = endpoints.get("subsets") or []
    start = _random.randrange(len(subsets)) if subsets else 0
    for offset in range(len(subsets)):
        subset = subsets[(start + offset) % len(subsets)]
        addresses = subset.get("addresses") or []
        for subset_port in subset.get("ports") or []:
            if (subset_port.get("name") or "") != wanted or not addresses:
                continue
            pod = _valid_pod(store, namespace, addresses)
            if pod is not None:
                return pod, int(subset_port["port"])
    raise _unavailable(f'no endpoints available for service "{name}"')


def _valid_pod(store: Store, namespace: str, addresses: list[Obj]) -> Obj | None:
    """isValidAddress: the address names a pod (targetRef) that exists and has that IP."""
    pods_rt = _kind(store, "v1", "Pod")
    first = _random.randrange(len(addresses))
    for offset in range(len(addresses)):
        address = addresses[(first + offset) % len(addresses)]
        ref = address.get("targetRef") or {}
        if ref.get("kind") != "Pod" or not ref.get("name"):
            continue
        try:
            pod = store.get(pods_rt, ref.get("namespace") or namespace, ref["name"])
        except ApiError:
            continue
        ips = {(pod.get("status") or {}).get("podIP")} | {
            entry.get("ip") for entry in (pod.get("status") or {}).get("podIPs") or []
        }
        if address.get("ip") in ips:
            return pod
    return None
