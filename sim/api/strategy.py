"""What the registry strategies and allocators of a real API server set on create and update.

Unlike defaults (``sim.api.defaults``), these run after field management, so no manager owns what they set:

- on create: a new pod's ``status`` (phase Pending and its QoS class), a DaemonSet's and a
  PodDisruptionBudget's zeroed status counters, a Deployment's empty status, a Namespace's ``status.phase:
  Active`` and ``kubernetes`` finalizer, a CRD's NamesAccepted and Established conditions, a Service's
  allocations (below) and empty load-balancer status;
  a custom resource of a kind with a status subresource loses any status it was sent with;
- generation: bumped by an update that changes anything outside metadata and status (``bumps_generation``),
  except for a PriorityClass, whose strategy sets 1 on create and never changes it;
- on update: a Namespace keeps its ``spec.finalizers``; a Service keeps its allocated values when the new
  object leaves them out (``patchAllocatedValues``);
- a DaemonSet's template generation, which apps/v1 carries as the ``deprecated.daemonset.template.generation``
  annotation: at least 1 on create, and on update the stored one, plus 1 when the template changed (a write
  cannot set it);
- Service allocation: a cluster IP from 10.96.0.0/12 unless headless or ExternalName (derived from the uid:
  stable, no allocator state), ``clusterIPs``, ``ipFamilies: [IPv4]`` and ``ipFamilyPolicy`` (SingleStack;
  RequireDualStack for a headless service without selector, as on a single-stack cluster), node ports for
  NodePort and LoadBalancer services and a health-check node port for a LoadBalancer with ``Local`` external
  traffic policy (30000-32767, derived from the uid, unique within the service; not checked across services).

Caller: ``sim.api.writes`` (the store's write pipeline), for writes of the main resource.
"""

from __future__ import annotations

import hashlib
from typing import Any

from gpuplan.sim.api import registry, validation_policy
from gpuplan.sim.api.defaults import NAMESPACE_NAME_LABEL, TEMPLATE_GENERATION
from gpuplan.sim.api.objects import copy_json, spec_part
from gpuplan.sim.api.registry import ResourceType

Obj = dict[str, Any]

NODE_PORT_RANGE = (30000, 32767)
DAEMONSET_ZERO_STATUS = (
    "currentNumberScheduled",
    "desiredNumberScheduled",
    "numberMisscheduled",
    "numberReady",
)


# Kinds whose strategy sets generation 1 on create and never bumps it (PrepareForUpdate leaves it alone).
_GENERATION_SET_ONCE = frozenset({("scheduling.k8s.io", "PriorityClass")})


def bumps_generation(rt: ResourceType, old: Obj, new: Obj) -> bool:
    """Whether an update from ``old`` to ``new`` increments ``metadata.generation``: a change outside
    metadata and status of a kind that tracks it, except where the strategy sets it once (PriorityClass)."""
    if not rt.tracks_generation or (rt.group, rt.kind) in _GENERATION_SET_ONCE:
        return False
    return spec_part(old) != spec_part(new)


def prepare_create(rt: ResourceType, obj: Obj, now: str) -> None:
    """Set what the kind's strategy sets on a new object, in place (``now``: RFC 3339 time)."""
    kind = (rt.group, rt.kind)
    if kind == ("", "Pod"):
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj.get("spec") or {})}
    elif kind == ("apps", "DaemonSet"):
        obj["status"] = dict.fromkeys(DAEMONSET_ZERO_STATUS, 0)
        _set_template_generation(obj, max(template_generation(obj), 1))
    elif kind == ("apps", "Deployment") or kind == ("batch", "CronJob"):
        obj["status"] = {}
    elif kind == ("policy", "PodDisruptionBudget"):
        # PrepareForCreate's empty PodDisruptionBudgetStatus, as it is stored: the four counts have no
        # omitempty (k8s.io/api policy/v1 types.go), so they read 0 until the disruption controller's sync
        obj["status"] = dict.fromkeys(validation_policy.STATUS_COUNTS, 0)
    elif kind == ("batch", "Job"):
        _prepare_job(obj)
    elif kind == ("", "Namespace"):
        _prepare_namespace(obj)
    elif kind == ("apiextensions.k8s.io", "CustomResourceDefinition"):
        obj["status"] = _crd_status(obj.get("spec") or {}, now)
    elif kind == ("", "Service"):
        allocate_service(obj, None)
        obj["status"] = {"loadBalancer": {}}
    elif "status" in rt.subresources and rt not in registry.BUILTIN:
        obj.pop("status", None)


def prepare_update(rt: ResourceType, old: Obj, new: Obj) -> None:
    """Keep what an update of the main resource may not change or need not resend, in place."""
    kind = (rt.group, rt.kind)
    if kind == ("", "Namespace"):
        finalizers = (old.get("spec") or {}).get("finalizers")
        spec = {k: v for k, v in (new.get("spec") or {}).items() if k != "finalizers"}
        new["spec"] = {**spec, **({"finalizers": finalizers} if finalizers is not None else {})}
    elif kind == ("", "Service"):
        allocate_service(new, old)
    elif kind == ("batch", "Job"):
        # selector and template are immutable; an update that leaves the generated ones out keeps them
        old_spec, new_spec = old.get("spec") or {}, new.get("spec")
        if isinstance(new_spec, dict) and "selector" not in new_spec and "selector" in old_spec:
            new_spec["selector"] = old_spec["selector"]
            new_spec["template"] = old_spec.get("template", new_spec.get("template"))


def prepare_status_update(rt: ResourceType, old: Obj, new: Obj) -> None:
    """What a status write's strategy fills in from the stored object: a pod's QoS class, which a status
    written without one keeps (``podStatusStrategy.PrepareForUpdate``, pkg/registry/core/pod/strategy.go:
    old kubelets dropped the field)."""
    if (rt.group, rt.kind) != ("", "Pod"):
        return
    stored = (old.get("status") or {}).get("qosClass")
    status = new.get("status")
    if stored and isinstance(status, dict) and not status.get("qosClass"):
        new["status"] = {**status, "qosClass": stored}


def after_field_management(rt: ResourceType, old: Obj, new: Obj) -> None:
    """What an update's strategy sets that the field manager never sees, in place: the Update manager
    compares the decoded request with the stored object before PrepareForUpdate runs, so a DaemonSet's
    template generation there is the request's (its annotation, else 0), and the value the strategy then
    sets is nobody's change."""
    if (rt.group, rt.kind) == ("apps", "DaemonSet") and isinstance(new.get("metadata"), dict):
        changed = (old.get("spec") or {}).get("template") != (new.get("spec") or {}).get("template")
        _set_template_generation(new, template_generation(old) + (1 if changed else 0))


def template_generation(daemonset: Obj) -> int:
    """A DaemonSet's template generation: its annotation as the apps/v1 conversion reads it
    (pkg/apis/apps/v1/conversion.go), 0 when absent (or not a number, which the real server refuses)."""
    annotations = (daemonset.get("metadata") or {}).get("annotations") or {}
    try:
        return int(annotations.get(TEMPLATE_GENERATION, 0))
    except (TypeError, ValueError):
        return 0


def _set_template_generation(daemonset: Obj, generation: int) -> None:
    """pkg/registry/apps/daemonset/strategy.go: PrepareForCreate sets TemplateGeneration to at least 1,
    PrepareForUpdate keeps the stored one and adds 1 when the template changed; the conversion back to
    apps/v1 writes it into the annotation."""
    meta = daemonset["metadata"]
    meta["annotations"] = {**(meta.get("annotations") or {}), TEMPLATE_GENERATION: str(generation)}


def _prepare_job(job: Obj) -> None:
    """The job strategy's PrepareForCreate: an empty status and, unless ``manualSelector``, the generated
    selector on the controller uid, whose labels the pod template gets (generateSelector)."""
    job["status"] = {}
    spec, meta = job.get("spec"), job["metadata"]
    if not isinstance(spec, dict) or spec.get("manualSelector") is True:
        return
    labels = {
        "batch.kubernetes.io/controller-uid": meta["uid"],
        "batch.kubernetes.io/job-name": meta["name"],
        "controller-uid": meta["uid"],
        "job-name": meta["name"],
    }
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    template_meta["labels"] = {**(template_meta.get("labels") or {}), **labels}
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": meta["uid"]}}


def qos_class(spec: Obj) -> str:
    """The pod's QoS class from its containers' cpu/memory requests and limits, as the apiserver sets it."""
    containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    guaranteed, any_set = True, False
    for container in containers:
        resources = container.get("resources") or {}
        limits = {k: v for k, v in (resources.get("limits") or {}).items() if k in ("cpu", "memory")}
        requests = {k: v for k, v in (resources.get("requests") or {}).items() if k in ("cpu", "memory")}
        any_set = any_set or bool(limits or requests)
        if set(limits) != {"cpu", "memory"} or any(requests.get(k, limits[k]) != limits[k] for k in limits):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _prepare_namespace(obj: Obj) -> None:
    """Phase Active; the ``kubernetes`` finalizer added to any the client sent; the name label also for a
    generated name (defaulting could not set it before the name existed)."""
    found = obj.get("spec")
    spec: Obj = found if isinstance(found, dict) else {}
    finalizers = list(spec.get("finalizers") or [])
    obj["spec"] = {**spec, "finalizers": finalizers + ([] if "kubernetes" in finalizers else ["kubernetes"])}
    obj["status"] = {"phase": "Active"}
    meta = obj["metadata"]
    meta.setdefault("labels", {}).setdefault(NAMESPACE_NAME_LABEL, meta["name"])


def _crd_status(spec: Obj, now: str) -> Obj:
    return {
        "acceptedNames": copy_json(spec.get("names") or {}),
        "storedVersions": [v["name"] for v in spec.get("versions", []) if v.get("storage")],
        "conditions": [
            _true_condition("NamesAccepted", "NoConflicts", "no conflicts found", now),
            _true_condition(
                "Established", "InitialNamesAccepted", "the initial names have been accepted", now
            ),
        ],
    }


def _true_condition(kind: str, reason: str, message: str, now: str) -> dict[str, str]:
    return {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": now}


# ----------------------------------------------------------------------------------------- services


def allocate_service(obj: Obj, old: Obj | None) -> None:
    """Cluster IPs, IP families and node ports of a Service, kept from ``old`` where the update omits them."""
    spec = obj.setdefault("spec", {})
    old_spec = (old or {}).get("spec") or {}
    kind = spec.get("type") or "ClusterIP"
    uid = obj["metadata"].get("uid") or ""
    if kind == "ExternalName":
        return
    if old is not None and (old_spec.get("type") or "ClusterIP") != "ExternalName":
        for field in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
            if not spec.get(field) and old_spec.get(field):
                spec[field] = old_spec[field]
    if not spec.get("clusterIP"):
        spec["clusterIP"] = cluster_ip(uid)
    if not spec.get("clusterIPs"):
        spec["clusterIPs"] = [spec["clusterIP"]]
    headless_without_selector = spec["clusterIP"] == "None" and not spec.get("selector")
    if not spec.get("ipFamilyPolicy"):
        spec["ipFamilyPolicy"] = "RequireDualStack" if headless_without_selector else "SingleStack"
    if not spec.get("ipFamilies"):
        spec["ipFamilies"] = ["IPv4"]
    if kind in ("NodePort", "LoadBalancer") and spec.get("allocateLoadBalancerNodePorts") is not False:
        _allocate_node_ports(spec, old_spec, uid)
    if (
        kind == "LoadBalancer"
        and spec.get("externalTrafficPolicy") == "Local"
        and not spec.get("healthCheckNodePort")
    ):
        spec["healthCheckNodePort"] = old_spec.get("healthCheckNodePort") or _free_port(
            uid, "health", _used_node_ports(spec)
        )


def cluster_ip(uid: str) -> str:
    """An address of 10.96.0.0/12 derived from the uid (stable for the object, no allocator)."""
    n = int(uid.replace("-", "")[:8] or "0", 16) % (1 << 20)
    return f"10.{96 + (n >> 16)}.{(n >> 8) & 255}.{n & 255 or 1}"


def _allocate_node_ports(spec: Obj, old_spec: Obj, uid: str) -> None:
    ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    old_by_name = {
        p.get("name") or "": p.get("nodePort")
        for p in old_spec.get("ports") or []
        if isinstance(p, dict) and p.get("nodePort")
    }
    for index, port in enumerate(ports):
        if port.get("nodePort"):
            continue
        used = _used_node_ports(spec)
        kept = old_by_name.get(port.get("name") or "")
        port["nodePort"] = kept if kept and kept not in used else _free_port(uid, str(index), used)


def _used_node_ports(spec: Obj) -> set[int]:
    used = {p["nodePort"] for p in spec.get("ports") or [] if isinstance(p, dict) and p.get("nodePort")}
    return used | ({spec["healthCheckNodePort"]} if spec.get("healthCheckNodePort") else set())


def _free_port(uid: str, salt: str, used: set[int]) -> int:
    low, high = NODE_PORT_RANGE
    size = high - low + 1
    start = int(hashlib.sha256(f"{uid}/{salt}".encode()).hexdigest()[:8], 16) % size
    for step in range(size):
        candidate = low + (start + step) % size
        if candidate not in used:
            return candidate
    raise ValueError("no free node port")  # unreachable: a service has far fewer ports than the range
