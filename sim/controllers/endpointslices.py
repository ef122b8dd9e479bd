"""The EndpointSlices of one Service, as kube-controller-manager's endpointslice controller reconciles them.

Pure: ``reconcile(service, pods, existing, zones)`` says which slices to create, update and delete; the
controller (:mod:`gpuplan.sim.controllers.endpoints`) writes them. The rules follow pkg/controller/
endpointslice and staging/src/k8s.io/endpointslice (reconciler.go, utils.go):

- one endpoint per selected pod with an IP that is not terminal (terminating pods included):
  ``addresses`` [the pod IP], ``conditions`` {``ready``: Ready and not terminating, ``serving``: Ready,
  ``terminating``: deletionTimestamp set; ``publishNotReadyAddresses`` makes ready and serving true},
  ``nodeName``, ``targetRef`` (Pod), ``zone`` from the node's ``topology.kubernetes.io/zone`` label,
  ``hostname`` when the pod's subdomain is the Service;
- ports per pod from the Service ports (``name``, ``port`` resolved from ``targetPort``, ``protocol``,
  ``appProtocol``); pods with the same ports share slices of at most 100 endpoints
  (``--max-endpoints-per-slice``), existing slices are kept and filled before new ones are made;
- a new slice: ``generateName`` ``<service>-``, addressType IPv4, the controller ownerReference to the
  Service, the Service's labels plus ``kubernetes.io/service-name`` and
  ``endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io``;
- a Service without endpoints keeps one placeholder slice with no ports and no endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuplan.sim.controllers import service_pods as sp

Obj = dict[str, Any]

MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpointslice-controller.k8s.io"
MAX_ENDPOINTS_PER_SLICE = 100
ZONE_LABEL = "topology.kubernetes.io/zone"
_RESERVED = (sp.SERVICE_NAME_LABEL, MANAGED_BY_LABEL)


@dataclass
class SlicePlan:
    """The writes that bring a Service's slices to what its pods say."""

    create: list[Obj] = field(default_factory=list)
    update: list[Obj] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)


def managed_by_controller(slice_obj: Obj) -> str | None:
    """The Service name of a slice this controller manages, else None."""
    labels = slice_obj.get("metadata", {}).get("labels") or {}
    if labels.get(MANAGED_BY_LABEL) != CONTROLLER_NAME:
        return None
    name = labels.get(sp.SERVICE_NAME_LABEL)
    return str(name) if name else None


def endpoint_ports(service: Obj, pod: Obj) -> list[Obj]:
    ports = []
    for service_port in (service.get("spec") or {}).get("ports") or []:
        number = sp.find_port(pod, service_port)
        if number is None:
            continue
        port: Obj = {
            "name": service_port.get("name", ""),
            "port": number,
            "protocol": service_port.get("protocol") or "TCP",
        }
        if service_port.get("appProtocol"):
            port["appProtocol"] = service_port["appProtocol"]
        ports.append(port)
    return ports


def endpoint(service: Obj, pod: Obj, zones: dict[str, str]) -> Obj:
    publish = sp.publishes_not_ready(service)
    ready = sp.is_ready(pod)
    terminating = sp.is_terminating(pod)
    spec = pod.get("spec") or {}
    found: Obj = {
        "addresses": [sp.pod_ip(pod)],
        "conditions": {
            "ready": publish or (ready and not terminating),
            "serving": publish or ready,
            "terminating": terminating,
        },
        "targetRef": sp.target_ref(pod),
    }
    if spec.get("hostname") and spec.get("subdomain") == service["metadata"]["name"]:
        found["hostname"] = spec["hostname"]
    if spec.get("nodeName"):
        found["nodeName"] = spec["nodeName"]
        if zones.get(spec["nodeName"]):
            found["zone"] = zones[spec["nodeName"]]
    return found


def labels_for(service: Obj) -> dict[str, str]:
    labels: dict[str, str] = sp.owned_labels(service, _RESERVED)
    labels[sp.SERVICE_NAME_LABEL] = service["metadata"]["name"]
    labels[MANAGED_BY_LABEL] = CONTROLLER_NAME
    return labels


def new_slice(service: Obj, ports: list[Obj] | None) -> Obj:
    meta = service["metadata"]
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta["namespace"],
            "labels": labels_for(service),
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "addressType": "IPv4",
        "endpoints": None,
        "ports": ports or None,
    }


def desired_endpoints(
    service: Obj, pods: list[Obj], zones: dict[str, str]
) -> dict[str, tuple[list[Obj] | None, list[Obj]]]:
    """(ports, endpoints) grouped by the port list (the key is its canonical text), pods in name order."""
    groups: dict[str, tuple[list[Obj] | None, list[Obj]]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if not sp.should_be_in_endpoints(pod, include_terminating=True):
            continue
        ports = endpoint_ports(service, pod) or None
        groups.setdefault(_ports_key(ports), (ports, []))[1].append(endpoint(service, pod, zones))
    return groups


def _ports_key(ports: list[Obj] | None) -> str:
    return repr(sorted(sorted(p.items()) for p in ports or []))


def _pod_of(found: Obj) -> str:
    return str((found.get("targetRef") or {}).get("uid") or found["addresses"][0])


def reconcile(service: Obj, pods: list[Obj], existing: list[Obj], zones: dict[str, str]) -> SlicePlan:
    plan = SlicePlan()
    groups = desired_endpoints(service, pods, zones)
    by_key: dict[str, list[Obj]] = {}
    for slice_obj in sorted(existing, key=lambda s: s["metadata"]["name"]):
        by_key.setdefault(_ports_key(slice_obj.get("ports")), []).append(slice_obj)
    labels = labels_for(service)
    for key, slices in by_key.items():
        if key not in groups:
            plan.delete.extend(slices)
    for key, (ports, found) in groups.items():
        _reconcile_group(service, ports, found, by_key.get(key, []), labels, plan)
    if len(plan.delete) == len(existing) and not plan.create:
        _keep_placeholder(service, plan)
    return plan


def _reconcile_group(
    service: Obj,
    ports: list[Obj] | None,
    wanted: list[Obj],
    slices: list[Obj],
    labels: dict[str, str],
    plan: SlicePlan,
) -> None:
    """reconcileByPortMapping: endpoints stay in the slice that has them; the rest fill slices with room,
    then new slices."""
    pending = {_pod_of(found): found for found in wanted}
    kept: list[tuple[Obj, list[Obj]]] = []
    for slice_obj in slices:
        current = slice_obj.get("endpoints") or []
        still = [pending.pop(_pod_of(e)) for e in current if _pod_of(e) in pending]
        if not still:
            plan.delete.append(slice_obj)
            continue
        kept.append((slice_obj, still))
    rest = list(pending.values())
    for slice_obj, still in kept:
        room = MAX_ENDPOINTS_PER_SLICE - len(still)
        if room > 0 and rest:
            still, rest = still + rest[:room], rest[room:]
        if still != (slice_obj.get("endpoints") or []) or slice_obj["metadata"].get("labels") != labels:
            updated = {**slice_obj, "endpoints": still}
            updated["metadata"] = {**slice_obj["metadata"], "labels": labels}
            plan.update.append(updated)
    for start in range(0, len(rest), MAX_ENDPOINTS_PER_SLICE):
        created = new_slice(service, ports)
        created["endpoints"] = rest[start : start + MAX_ENDPOINTS_PER_SLICE]
        plan.create.append(created)


def _is_placeholder(slice_obj: Obj) -> bool:
    return not slice_obj.get("ports") and not slice_obj.get("endpoints")


def _keep_placeholder(service: Obj, plan: SlicePlan) -> None:
    """When no slice would be left, a placeholder stays (an existing one is kept, not recreated)."""
    if len(plan.delete) == 1 and _is_placeholder(plan.delete[0]):
        kept = plan.delete.pop()
        if kept["metadata"].get("labels") != labels_for(service):
            updated = {**kept, "metadata": {**kept["metadata"], "labels": labels_for(service)}}
            plan.update.append(updated)
        return
    plan.create.append(new_slice(service, None))
