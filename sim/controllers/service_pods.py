"""What the endpoints and endpointslice controllers read from a Service and the pods it selects (pure).

The rules of kube-controller-manager's shared helpers, which both controllers apply to every selected pod:

- ``should_be_in_endpoints``: ``endpointutil.ShouldPodBeInEndpoints`` (pkg/controller/util/endpoint/
  controller_utils.go): a terminal pod (Succeeded/Failed) or one without an IP is left out, and so is a
  terminating pod unless the caller includes terminating pods (the endpointslice controller always does; the
  endpoints controller only for ``publishNotReadyAddresses``).
- ``find_port``: ``podutil.FindPort`` (pkg/api/v1/pod/util.go): a numeric ``targetPort`` is the port itself;
  a named one is the container port of that name and the Service port's protocol, or no port for that pod.
- ``is_ready``: ``podutil.IsPodReady``: the pod's Ready condition is True.
- ``trigger_time``: ``getPodTriggerTime`` (pkg/controller/util/endpoint/trigger_time_tracker.go): the
  lastTransitionTime of the pod's Ready condition; a Service's trigger time is its creationTimestamp.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
HEADLESS_LABEL = "service.kubernetes.io/headless"
TRIGGER_TIME_ANNOTATION = "endpoints.kubernetes.io/last-change-trigger-time"


def selector_of(service: Obj) -> dict[str, str] | None:
    """The Service's selector, or None when it has none (the controllers then leave its endpoints alone;
    an empty map does not survive the apiserver's storage, so it counts as none)."""
    selector = (service.get("spec") or {}).get("selector")
    return dict(selector) if selector else None


def selects(selector: dict[str, str], pod: Obj | None) -> bool:
    if pod is None:
        return False
    labels = pod.get("metadata", {}).get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.items())


def is_headless(service: Obj) -> bool:
    return (service.get("spec") or {}).get("clusterIP") == "None"


def publishes_not_ready(service: Obj) -> bool:
    return bool((service.get("spec") or {}).get("publishNotReadyAddresses"))


def is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def is_terminating(pod: Obj) -> bool:
    return bool(pod.get("metadata", {}).get("deletionTimestamp"))


def pod_ip(pod: Obj) -> str:
    status = pod.get("status") or {}
    ips = [entry.get("ip") for entry in status.get("podIPs") or [] if entry.get("ip")]
    return str(status.get("podIP") or (ips[0] if ips else ""))


def should_be_in_endpoints(pod: Obj, *, include_terminating: bool) -> bool:
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    if not pod_ip(pod):
        return False
    return include_terminating or not is_terminating(pod)


def find_port(pod: Obj, service_port: Obj) -> int | None:
    target = service_port.get("targetPort", service_port.get("port"))
    if isinstance(target, int):
        return target
    if isinstance(target, str) and target.isdigit():
        return int(target)
    protocol = service_port.get("protocol") or "TCP"
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == target and (port.get("protocol") or "TCP") == protocol:
                return int(port["containerPort"])
    return None


def target_ref(pod: Obj) -> Obj:
    meta = pod["metadata"]
    return {"kind": "Pod", "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid", "")}


def trigger_time(pod: Obj) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("lastTransitionTime") or "")
    return ""


def owned_labels(service: Obj, reserved: tuple[str, ...]) -> dict[str, str]:
    """The Service's labels (the reserved keys left out) with the headless label of a headless Service, as
    both controllers label what they write."""
    labels = {
        key: value
        for key, value in (service.get("metadata", {}).get("labels") or {}).items()
        if key not in reserved and key != HEADLESS_LABEL
    }
    if is_headless(service):
        labels[HEADLESS_LABEL] = ""
    return labels
