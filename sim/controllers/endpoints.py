"""The endpoints and endpointslice controllers: a Service's Endpoints and EndpointSlices from its pods.

As kube-controller-manager's (pkg/controller/endpoint/endpoints_controller.go and pkg/controller/
endpointslice): for every Service with a selector, the pods of its namespace that the selector matches give

- the Endpoints named as the Service: ``subsets`` of ``addresses`` (ready pods; every pod with
  ``publishNotReadyAddresses``) and ``notReadyAddresses``, each ``{ip, nodeName, targetRef}``, with the ports
  resolved from the Service's ``targetPort`` (``podutil.FindPort``), addresses grouped by their port set as
  ``RepackSubsets`` does (addresses sorted by IP); labels: the Service's, ``service.kubernetes.io/headless``
  for a headless Service, ``endpoints.kubernetes.io/managed-by: endpoint-controller``; annotation
  ``endpoints.kubernetes.io/last-change-trigger-time`` (the oldest change since the last sync: a pod's Ready
  transition, a Service's creation); at most 1000 addresses, then ``endpoints.kubernetes.io/over-capacity:
  truncated``. Terminating pods are left out (unless ``publishNotReadyAddresses``);
- the EndpointSlices (:mod:`gpuplan.sim.controllers.endpointslices`).

A Service without a selector is left alone (its Endpoints are the user's; the EndpointSliceMirroring
controller is not simulated). A deleted Service's Endpoints are deleted; its slices go with it through their
ownerReference. A write is made only when the content differs, so a resync writes nothing. Slices or
Endpoints that someone else changes or deletes are put back.

A handler of the loop (``gpuplan.sim.controllers.loop``), writing as ``kube-controller-manager``; reads the
loop's cache (services, pods, nodes, endpoints, endpointslices).
"""

from __future__ import annotations

import logging
from typing import Any

from gpuplan.sim.api import store as store_mod
from gpuplan.sim.controllers import endpointslices as slices
from gpuplan.sim.controllers import service_pods as sp
from gpuplan.sim.controllers.cache import Change, Key, key_of, resource_type, rv_of
from gpuplan.sim.controllers.loop import Loop

log = logging.getLogger(__name__)

Obj = dict[str, Any]

MANAGER = "kube-controller-manager"
MANAGED_BY_LABEL = "endpoints.kubernetes.io/managed-by"
CONTROLLER_NAME = "endpoint-controller"
OVER_CAPACITY_ANNOTATION = "endpoints.kubernetes.io/over-capacity"
MAX_CAPACITY = 1000


def endpoint_address(service: Obj, pod: Obj) -> Obj:
    address: Obj = {"ip": sp.pod_ip(pod), "targetRef": sp.target_ref(pod)}
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        address["nodeName"] = spec["nodeName"]
    if spec.get("hostname") and spec.get("subdomain") == service["metadata"]["name"]:
        address["hostname"] = spec["hostname"]
    return address


def endpoint_port(service_port: Obj, number: int) -> Obj:
    port: Obj = {"port": number, "protocol": service_port.get("protocol") or "TCP"}
    if service_port.get("name"):
        port["name"] = service_port["name"]
    if service_port.get("appProtocol"):
        port["appProtocol"] = service_port["appProtocol"]
    return port


def subsets(service: Obj, pods: list[Obj]) -> tuple[list[Obj], bool]:
    """The Service's subsets from its pods, and whether they were truncated to MAX_CAPACITY addresses."""
    publish = sp.publishes_not_ready(service)
    service_ports = (service.get("spec") or {}).get("ports") or []
    groups: dict[str, tuple[list[Obj], list[Obj], list[Obj]]] = {}
    for pod in pods:
        if not sp.should_be_in_endpoints(pod, include_terminating=publish):
            continue
        ports = [
            endpoint_port(service_port, number)
            for service_port in service_ports
            if (number := sp.find_port(pod, service_port)) is not None
        ]
        if not ports and (service_ports or not sp.is_headless(service)):
            continue
        ports.sort(key=lambda p: (p.get("name", ""), p["port"], p["protocol"]))
        ready, not_ready = groups.setdefault(repr(ports), (ports, [], []))[1:]
        (ready if publish or sp.is_ready(pod) else not_ready).append(endpoint_address(service, pod))
    return _capped([_subset(*group) for _, group in sorted(groups.items())])


def _subset(ports: list[Obj], ready: list[Obj], not_ready: list[Obj]) -> Obj:
    subset: Obj = {}
    if ready:
        subset["addresses"] = sorted(ready, key=_address_order)
    if not_ready:
        subset["notReadyAddresses"] = sorted(not_ready, key=_address_order)
    if ports:
        subset["ports"] = ports
    return subset


def _address_order(address: Obj) -> tuple[str, str]:
    return (address["ip"], address["targetRef"].get("uid", ""))


def _capped(found: list[Obj]) -> tuple[list[Obj], bool]:
    """truncateEndpoints: at most MAX_CAPACITY addresses, ready ones kept first."""
    total = sum(len(s.get("addresses", [])) + len(s.get("notReadyAddresses", [])) for s in found)
    if total <= MAX_CAPACITY:
        return found, False
    room = MAX_CAPACITY
    for field in ("addresses", "notReadyAddresses"):
        for subset in found:
            kept = subset.get(field, [])[:room]
            room -= len(kept)
            if field in subset:
                subset[field] = kept
                if not kept:
                    del subset[field]
    return [s for s in found if s.get("addresses") or s.get("notReadyAddresses")], True


def endpoints_labels(service: Obj) -> dict[str, str]:
    labels: dict[str, str] = sp.owned_labels(service, (MANAGED_BY_LABEL,))
    labels[MANAGED_BY_LABEL] = CONTROLLER_NAME
    return labels


class EndpointsController:
    """Keeps every selecting Service's Endpoints and EndpointSlices in line with its pods."""

    def __init__(self, loop: Loop) -> None:
        self.loop = loop
        self.store = loop.store
        reg = loop.store.registry
        self._endpoints_rt = resource_type(reg, "v1", "Endpoints")
        self._slices_rt = resource_type(reg, "discovery.k8s.io/v1", "EndpointSlice")
        self._dirty: set[Key] = set()
        self._members: dict[Key, set[Key]] = {}  # service -> the pods its selector matches
        self._by_namespace: dict[str, set[Key]] = {}  # namespace -> its Services with a selector
        self._triggers: dict[Key, list[str]] = {}
        self._written: dict[tuple[str, Key], int] = {}  # our own writes' resourceVersions

    # -- events --------------------------------------------------------------------------------------
    def on_change(self, change: Change) -> None:
        if change.kind == "services":
            self._note_service(change)
        elif change.kind == "pods":
            self._note_pod(change)
        elif change.kind in ("endpoints", "endpointslices") and not self._own(change):
            self._note_output(change)

    def _note_service(self, change: Change) -> None:
        key = change.key
        self._dirty.add(key)
        service = change.new
        selector = sp.selector_of(service) if service is not None else None
        if selector is None:
            self._members.pop(key, None)
            self._by_namespace.get(key[0], set()).discard(key)
            return
        assert service is not None
        self._by_namespace.setdefault(key[0], set()).add(key)
        self._members[key] = {
            pod_key
            for pod_key, pod in self.loop.cache.pods.items()
            if pod_key[0] == key[0] and sp.selects(selector, pod)
        }
        created = service["metadata"].get("creationTimestamp")
        if created:
            self._triggers.setdefault(key, []).append(created)

    def _note_pod(self, change: Change) -> None:
        for service_key in self._by_namespace.get(change.key[0], ()):
            service = self.loop.cache.services.get(service_key)
            selector = sp.selector_of(service) if service is not None else None
            if selector is None:
                continue
            members = self._members.setdefault(service_key, set())
            if sp.selects(selector, change.new):
                members.add(change.key)
            elif change.key in members:
                members.discard(change.key)
            elif not sp.selects(selector, change.old):
                continue
            self._dirty.add(service_key)
            if change.new is not None and sp.trigger_time(change.new):
                self._triggers.setdefault(service_key, []).append(sp.trigger_time(change.new))

    def _own(self, change: Change) -> bool:
        return change.new is not None and self._written.get((change.kind, change.key)) == rv_of(change.new)

    def _note_output(self, change: Change) -> None:
        obj = change.new if change.new is not None else change.old
        assert obj is not None
        if change.kind == "endpoints":
            owner: str | None = obj["metadata"]["name"]
        else:
            owner = slices.managed_by_controller(obj)
        if owner is not None and (change.key[0], owner) in self.loop.cache.services:
            self._dirty.add((change.key[0], owner))

    def flush(self) -> bool:
        if not self._dirty:
            return False
        dirty, self._dirty = sorted(self._dirty), set()
        for key in dirty:
            self.sync(key)
        return True

    # -- one Service ---------------------------------------------------------------------------------
    def sync(self, key: Key) -> None:
        triggers = self._triggers.pop(key, [])
        service = self.loop.cache.services.get(key)
        if service is None:
            self._delete_endpoints(key)
            return
        if sp.selector_of(service) is None or service["metadata"].get("deletionTimestamp"):
            return
        pods = [
            self.loop.cache.pods[k] for k in sorted(self._members.get(key, ())) if k in self.loop.cache.pods
        ]
        trigger = min(triggers) if triggers else ""
        self._sync_endpoints(service, pods, trigger)
        self._sync_slices(service, pods, trigger)

    def _sync_endpoints(self, service: Obj, pods: list[Obj], trigger: str) -> None:
        key = key_of(service)
        found, truncated = subsets(service, pods)
        labels = endpoints_labels(service)
        current = self.loop.cache.objects["endpoints"].get(key)
        annotations = dict((current or {}).get("metadata", {}).get("annotations") or {})
        over = annotations.get(OVER_CAPACITY_ANNOTATION)
        if (
            current is not None
            and (current.get("subsets") or []) == found
            and (current["metadata"].get("labels") or {}) == labels
            and (over == "truncated") == truncated
        ):
            return
        _set(annotations, sp.TRIGGER_TIME_ANNOTATION, trigger or None)
        _set(annotations, OVER_CAPACITY_ANNOTATION, "truncated" if truncated else None)
        meta: Obj = {"name": key[1], "namespace": key[0], "labels": labels}
        if annotations:
            meta["annotations"] = annotations
        obj: Obj = {"apiVersion": "v1", "kind": "Endpoints", "metadata": meta}
        if found:
            obj["subsets"] = found
        if current is None:
            self._write(
                "endpoints",
                lambda: self.store.create(self._endpoints_rt, obj, namespace=key[0], manager=MANAGER),
            )
        else:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            self._write(
                "endpoints",
                lambda: self.store.update(
                    self._endpoints_rt, obj, namespace=key[0], name=key[1], manager=MANAGER
                ),
            )

    def _sync_slices(self, service: Obj, pods: list[Obj], trigger: str) -> None:
        namespace, name = key_of(service)
        existing = [
            s
            for k, s in self.loop.cache.objects["endpointslices"].items()
            if k[0] == namespace and slices.managed_by_controller(s) == name
        ]
        zones = {
            node["metadata"]["name"]: (node["metadata"].get("labels") or {}).get(slices.ZONE_LABEL, "")
            for node in self.loop.cache.nodes.values()
        }
        plan = slices.reconcile(service, pods, existing, zones)
        for obj in plan.delete:
            self._delete_slice(obj)
        for obj in plan.update + plan.create:
            annotations = dict(obj["metadata"].get("annotations") or {})
            _set(annotations, sp.TRIGGER_TIME_ANNOTATION, trigger or None)
            obj["metadata"] = {**obj["metadata"], "annotations": annotations}
            if not annotations:
                del obj["metadata"]["annotations"]
        for obj in plan.update:
            meta = obj["metadata"]
            meta.pop("managedFields", None)
            self._write(
                "endpointslices",
                lambda obj=obj, meta=meta: self.store.update(
                    self._slices_rt, obj, namespace=namespace, name=meta["name"], manager=MANAGER
                ),
            )
        for obj in plan.create:
            self._write(
                "endpointslices",
                lambda obj=obj: self.store.create(self._slices_rt, obj, namespace=namespace, manager=MANAGER),
            )

    def _write(self, kind: str, write: Any) -> None:
        """One write, its result seen by the cache at once; a refusal is logged and retried on the next
        change (the real controller's work queue retries with back-off)."""
        try:
            written: Obj = write()
        except store_mod.ApiError as exc:
            log.info("endpoints controller: %s write refused: %s", kind, exc)
            return
        self._written[(kind, key_of(written))] = rv_of(written)
        self.loop.observe(kind, written)

    def _delete_endpoints(self, key: Key) -> None:
        if key not in self.loop.cache.objects["endpoints"]:
            return
        self._delete(self._endpoints_rt, "endpoints", self.loop.cache.objects["endpoints"][key])

    def _delete_slice(self, obj: Obj) -> None:
        self._delete(self._slices_rt, "endpointslices", obj)

    def _delete(self, rt: Any, kind: str, obj: Obj) -> None:
        meta = obj["metadata"]
        try:
            self.store.delete(rt, meta["namespace"], meta["name"])
        except store_mod.ApiError as exc:
            if exc.code != 404:
                log.info("endpoints controller: %s %s not deleted: %s", kind, meta["name"], exc)
                return
        self._written.pop((kind, key_of(obj)), None)
        self.loop.observe(kind, obj, deleted=True)


def _set(mapping: dict[str, str], key: str, value: str | None) -> None:
    if value is None:
        mapping.pop(key, None)
    else:
        mapping[key] = value
