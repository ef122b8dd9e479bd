"""The API server's defaulting of request objects: the Go types' ``SetDefaults_*`` functions, as pure
functions.

A real kube-apiserver defaults every object it decodes from a request body (create, update, patch, apply),
before field management, admission and validation. Two consequences clients can observe, reproduced here:

- ``managedFields`` of an Update operation (``kubectl create``, ``replace``, a non-apply patch) list the
  defaulted fields the write introduced (``f:dnsPolicy``, ``f:terminationMessagePath``, ``f:updateStrategy``
  ...) under that manager, as dumps of real objects show; a server-side apply owns exactly the applied fields.
- Defaulting is idempotent and runs on old and new alike, so re-sending a manifest without its defaults
  changes nothing: no new resourceVersion, no generation bump.

Kinds covered (those gpuplan writes and reads): DaemonSet and Deployment (with their pod templates), Pod,
Service, Secret, Namespace, PriorityClass. ServiceAccount, ConfigMap, RBAC objects and RuntimeClass have no
defaults. The deprecated ``serviceAccount`` alias of ``serviceAccountName`` is kept equal to it, as the v1
conversion does.

Not defaulting, and so elsewhere: admission plugins (Priority, DefaultTolerationSeconds) in
``sim.api.admission``; what registry strategies and allocators set (status on create, namespace
finalizers, cluster IPs, node ports, IP families) in ``sim.api.strategy``. Neither is owned by the writer.

Caller: ``sim.api.writes`` (the store's write pipeline), never on the status subresource.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

from gpuplan.sim.api import roundtrip
from gpuplan.sim.api.registry import ResourceType

Obj = dict[str, Any]

TERMINATION_MESSAGE_PATH = "/dev/termination-log"
TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
DEFAULT_MODE = 0o644  # 420: configMap, secret, downwardAPI and projected volumes
TOKEN_EXPIRATION_SECONDS = 3600
PROBE_DEFAULTS = (
    ("timeoutSeconds", 1),
    ("periodSeconds", 10),
    ("successThreshold", 1),
    ("failureThreshold", 3),
)
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
CLIENT_IP_TIMEOUT_SECONDS = 10800
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# The members of a VolumeSource: a volume naming none of them gets an emptyDir (SetDefaults_Volume).
VOLUME_SOURCES = frozenset(
    {
        "hostPath",
        "emptyDir",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "secret",
        "nfs",
        "iscsi",
        "glusterfs",
        "persistentVolumeClaim",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "downwardAPI",
        "fc",
        "azureFile",
        "configMap",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "projected",
        "portworxVolume",
        "scaleIO",
        "storageos",
        "csi",
        "ephemeral",
        "image",
    }
)


def default_object(rt: ResourceType, obj: Obj) -> None:
    """Fill in the server's defaults for ``obj`` of kind ``rt`` in place, then leave what the Go type's
    encoding leaves (``roundtrip``: omitempty zeros out, canonical quantities), as the server encodes what it
    defaulted."""
    defaulter = _BY_KIND.get((rt.group, rt.kind))
    if defaulter is not None:
        defaulter(obj)
    roundtrip.encode_object(rt, obj)


# ------------------------------------------------------------------------------------------ small helpers


def _unset(mapping: Obj, key: str) -> bool:
    """Go's zero value: absent, null, or an empty string (string fields are not pointers)."""
    return mapping.get(key) in (None, "")


def _default(mapping: Obj, key: str, value: Any) -> None:
    if _unset(mapping, key):
        mapping[key] = value


def _child(mapping: Obj, key: str) -> Obj | None:
    """``mapping[key]`` when it is an object (created when absent or null); None for a malformed value."""
    if mapping.get(key) is None:
        mapping[key] = {}
    found = mapping[key]
    return found if isinstance(found, dict) else None


def _present(mapping: Any, key: str) -> Obj | None:
    """``mapping[key]`` when it is an object, without creating it."""
    found = mapping.get(key) if isinstance(mapping, dict) else None
    return found if isinstance(found, dict) else None


def _items(mapping: Any, key: str) -> list[Obj]:
    """The object items of the list ``mapping[key]`` (malformed items are validation's business)."""
    found = mapping.get(key) if isinstance(mapping, dict) else None
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


def _spec(obj: Obj) -> Obj | None:
    return _child(obj, "spec")


# ------------------------------------------------------------------------------------------------ workloads


def _daemonset(obj: Obj) -> None:
    """apps/v1 SetDefaults_DaemonSet: RollingUpdate 1/0, ten revisions kept; then the pod template."""
    spec = _spec(obj)
    if spec is None:
        return
    strategy = _child(spec, "updateStrategy")
    if strategy is not None:
        _default(strategy, "type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = _child(strategy, "rollingUpdate")
            if rolling is not None:
                _default(rolling, "maxUnavailable", 1)
                _default(rolling, "maxSurge", 0)
    _default(spec, "revisionHistoryLimit", 10)
    _template(spec)
    # The template generation the request decodes to (its annotation, else 0) is written back into the
    # annotation when the field manager converts the object to apps/v1, before the strategy sets the real
    # value: so an Update that creates a DaemonSet owns the annotation, as real managedFields show.
    meta = _child(obj, "metadata")
    annotations = _child(meta, "annotations") if meta is not None else None
    if annotations is not None:
        annotations.setdefault(TEMPLATE_GENERATION, "0")


def _deployment(obj: Obj) -> None:
    """apps/v1 SetDefaults_Deployment: one replica, RollingUpdate 25%/25%, ten revisions, 600 s deadline."""
    spec = _spec(obj)
    if spec is None:
        return
    _default(spec, "replicas", 1)
    strategy = _child(spec, "strategy")
    if strategy is not None:
        _default(strategy, "type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = _child(strategy, "rollingUpdate")
            if rolling is not None:
                _default(rolling, "maxUnavailable", "25%")
                _default(rolling, "maxSurge", "25%")
    _default(spec, "revisionHistoryLimit", 10)
    _default(spec, "progressDeadlineSeconds", 600)
    _template(spec)


def _template(workload_spec: Obj) -> None:
    # The template's metadata is left as sent: no "creationTimestamp: null" (a serialisation artefact).
    template = _present(workload_spec, "template")
    pod_spec = _present(template, "spec") if template is not None else None
    if pod_spec is not None:
        default_pod_spec(pod_spec)


# --------------------------------------------------------------------------------------------------- pods


def _pod(obj: Obj) -> None:
    """SetDefaults_Pod: the PodSpec defaults plus what only a Pod (not a template) gets."""
    spec = _spec(obj)
    if spec is None:
        return
    default_pod_spec(spec)
    _default(spec, "enableServiceLinks", True)
    containers = _items(spec, "initContainers") + _items(spec, "containers")
    if spec.get("hostNetwork") is True:
        for port in (p for c in containers for p in _items(c, "ports")):
            if not port.get("hostPort"):
                port["hostPort"] = port.get("containerPort")
    for container in containers:
        _requests_from_limits(container)


def _requests_from_limits(container: Obj) -> None:
    """A limit without a request makes the request equal to the limit (Pods only, not templates)."""
    resources = _present(container, "resources")
    limits = _present(resources, "limits") if resources is not None else None
    if resources is None or not limits:
        return
    requests = _child(resources, "requests")
    if requests is not None:
        for name, quantity in limits.items():
            requests.setdefault(name, quantity)


def default_pod_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec and everything below it, for pods and pod templates alike."""
    _default(spec, "dnsPolicy", "ClusterFirst")
    _default(spec, "restartPolicy", "Always")
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    _default(spec, "terminationGracePeriodSeconds", 30)
    _default(spec, "schedulerName", "default-scheduler")
    account = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if account:
        spec["serviceAccountName"] = spec["serviceAccount"] = account
    for container in _items(spec, "initContainers") + _items(spec, "containers"):
        default_container(container)
    for volume in _items(spec, "volumes"):
        _volume(volume)


def default_container(container: Obj) -> None:
    """SetDefaults_Container and its ports, env, probes and lifecycle handlers."""
    _default(container, "imagePullPolicy", pull_policy(container.get("image")))
    _default(container, "terminationMessagePath", TERMINATION_MESSAGE_PATH)
    _default(container, "terminationMessagePolicy", "File")
    if container.get("resources") is None:
        container["resources"] = {}  # a struct, not a pointer: always serialised
    for port in _items(container, "ports"):
        _default(port, "protocol", "TCP")
    for env in _items(container, "env"):
        source = _present(env, "valueFrom")
        if source is not None:
            _object_field(source)
    for probe_name in PROBES:
        probe = _present(container, probe_name)
        if probe is not None:
            for field, value in PROBE_DEFAULTS:
                _default(probe, field, value)
            _http_get(probe)
    lifecycle = _present(container, "lifecycle")
    for hook in ("postStart", "preStop"):
        handler = _present(lifecycle, hook) if lifecycle is not None else None
        if handler is not None:
            _http_get(handler)


def pull_policy(image: Any) -> str:
    """Always for an image tagged ``latest`` or not tagged at all, IfNotPresent otherwise.

    As ``parsers.ParseImageName``: the tag is what follows the last ':' of the last path component, before
    any ``@digest``; with neither tag nor digest the tag is ``latest``; a digest alone is not ``latest``.
    """
    text = image if isinstance(image, str) else ""
    name, _, digest = text.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.partition(":")[2]
    if not tag and not digest and text:
        tag = "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def _http_get(handler: Obj) -> None:
    action = _present(handler, "httpGet")
    if action is not None:
        _default(action, "path", "/")
        _default(action, "scheme", "HTTP")


def _object_field(source: Obj) -> None:
    """An env or downward API item: fieldRef apiVersion v1; a resourceFieldRef's divisor is serialised 0."""
    field_ref = _present(source, "fieldRef")
    if field_ref is not None:
        _default(field_ref, "apiVersion", "v1")
    resource_ref = _present(source, "resourceFieldRef")
    if resource_ref is not None and resource_ref.get("divisor") is None:
        resource_ref["divisor"] = "0"


def _volume(volume: Obj) -> None:
    if not any(volume[source] is not None for source in volume.keys() & VOLUME_SOURCES):
        volume["emptyDir"] = {}
    host_path = _present(volume, "hostPath")
    if host_path is not None and host_path.get("type") is None:
        host_path["type"] = ""  # HostPathUnset: a pointer the server always fills
    for source_name in ("configMap", "secret", "downwardAPI", "projected"):
        source = _present(volume, source_name)
        if source is not None and source.get("defaultMode") is None:
            source["defaultMode"] = DEFAULT_MODE
    for item in _items(_present(volume, "downwardAPI"), "items"):
        _object_field(item)
    for projection in _items(_present(volume, "projected"), "sources"):
        token = _present(projection, "serviceAccountToken")
        if token is not None:
            _default(token, "expirationSeconds", TOKEN_EXPIRATION_SECONDS)
        for item in _items(_present(projection, "downwardAPI"), "items"):
            _object_field(item)


# ------------------------------------------------------------------------------------ services and others


def _service(obj: Obj) -> None:
    """SetDefaults_Service. Cluster IPs, node ports and IP families are allocated, not defaulted: strategy."""
    spec = _spec(obj)
    if spec is None:
        return
    _default(spec, "sessionAffinity", "None")
    if spec["sessionAffinity"] == "None":
        spec.pop("sessionAffinityConfig", None)
    elif spec["sessionAffinity"] == "ClientIP":
        config = _child(spec, "sessionAffinityConfig")
        client_ip = _child(config, "clientIP") if config is not None else None
        if client_ip is not None:
            _default(client_ip, "timeoutSeconds", CLIENT_IP_TIMEOUT_SECONDS)
    _default(spec, "type", "ClusterIP")
    for port in _items(spec, "ports"):
        _default(port, "protocol", "TCP")
        if port.get("targetPort") in (None, 0, ""):
            port["targetPort"] = port.get("port")
    kind = spec["type"]
    if kind in ("NodePort", "LoadBalancer") or (kind == "ClusterIP" and spec.get("externalIPs")):
        _default(spec, "externalTrafficPolicy", "Cluster")
    if kind in ("ClusterIP", "NodePort", "LoadBalancer"):
        _default(spec, "internalTrafficPolicy", "Cluster")
    if kind == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is None:
        spec["allocateLoadBalancerNodePorts"] = True


def _secret(obj: Obj) -> None:
    """Type Opaque; ``stringData`` is write-only, folded into base64 ``data`` (the v1 conversion)."""
    _default(obj, "type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        found = obj.get("data")
        data: Obj = found if isinstance(found, dict) else {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        obj["data"] = data


def _namespace(obj: Obj) -> None:
    """SetDefaults_Namespace: the immutable name label, on every write. (Phase and finalizers: strategy.)"""
    meta = _child(obj, "metadata")
    name = meta.get("name") if meta is not None else None
    labels = _child(meta, "labels") if meta is not None and name else None
    if labels is not None:
        labels[NAMESPACE_NAME_LABEL] = name


def _priority_class(obj: Obj) -> None:
    """scheduling/v1 SetDefaults_PriorityClass: PreemptLowerPriority."""
    _default(obj, "preemptionPolicy", "PreemptLowerPriority")


def _endpoint_slice(obj: Obj) -> None:
    """SetDefaults_EndpointPort (pkg/apis/discovery/v1/defaults.go): a port's name "" and protocol TCP."""
    for port in _items(obj, "ports"):
        _default(port, "name", "")
        _default(port, "protocol", "TCP")


def _job(obj: Obj) -> None:
    """batch/v1 SetDefaults_Job: parallelism (and completions) 1, backoffLimit 6, NonIndexed, not
    suspended, TerminatingOrFailed replacement; the Job takes its template's labels when it has none."""
    spec = _spec(obj)
    if spec is None:
        return
    if _unset(spec, "completions") and _unset(spec, "parallelism"):
        spec["completions"] = 1
    _default(spec, "parallelism", 1)
    _default(spec, "backoffLimit", 2147483647 if not _unset(spec, "backoffLimitPerIndex") else 6)
    _default(spec, "completionMode", "NonIndexed")
    _default(spec, "suspend", False)
    _default(
        spec, "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    template_labels = ((_present(spec, "template") or {}).get("metadata") or {}).get("labels")
    meta = _child(obj, "metadata")
    if template_labels and meta is not None and not meta.get("labels"):
        meta["labels"] = dict(template_labels)
    _template(spec)


def _cronjob(obj: Obj) -> None:
    """batch/v1 SetDefaults_CronJob (Allow, not suspended, history 3 and 1) and its pod template's
    defaults."""
    spec = _spec(obj)
    if spec is None:
        return
    _default(spec, "concurrencyPolicy", "Allow")
    _default(spec, "suspend", False)
    _default(spec, "successfulJobsHistoryLimit", 3)
    _default(spec, "failedJobsHistoryLimit", 1)
    job_template = _present(spec, "jobTemplate")
    job_spec = _present(job_template, "spec") if job_template is not None else None
    if job_spec is not None:
        _template(job_spec)


_BY_KIND: dict[tuple[str, str], Callable[[Obj], None]] = {
    ("discovery.k8s.io", "EndpointSlice"): _endpoint_slice,
    ("batch", "Job"): _job,
    ("batch", "CronJob"): _cronjob,
    ("scheduling.k8s.io", "PriorityClass"): _priority_class,
    ("apps", "DaemonSet"): _daemonset,
    ("apps", "Deployment"): _deployment,
    ("", "Pod"): _pod,
    ("", "Service"): _service,
    ("", "Secret"): _secret,
    ("", "Namespace"): _namespace,
}
