"""The API server's defaults, removed by rule from an object the planner has no template for.

Part of :mod:`gpuplan.planner.diff.normalize` (``normalize`` calls :func:`strip_defaults`; see its module
doc). It removes exactly what a real kube-apiserver (and the simulator, ``gpuplan.sim.api.defaults``,
``admission`` and ``strategy``) adds to a written object, and nothing an author would set deliberately:

- the Go ``SetDefaults_*`` values, each only where it is the default the server would have filled in
  (``dnsPolicy: ClusterFirst``, ``terminationMessagePath``, probe timings, ``httpGet.path: /`` and
  ``scheme: HTTP`` of probes and lifecycle handlers, ``fieldRef.apiVersion: v1`` of env and downward API
  items, ``resourceFieldRef.divisor: "0"``, ``defaultMode: 420`` of configMap/secret/downwardAPI/projected
  volumes, ``serviceAccountToken.expirationSeconds: 3600``, ``emptyDir: {}`` of a volume that names no other
  source, ``hostPath.type: ""``, Service ``externalTrafficPolicy``/``internalTrafficPolicy: Cluster``,
  ``sessionAffinityConfig.clientIP.timeoutSeconds: 10800``, ``allocateLoadBalancerNodePorts: true``,
  ``Secret.type: Opaque`` (and ``stringData`` folded into base64 ``data``, as the server stores it), the
  Namespace's ``kubernetes.io/metadata.name`` label, PriorityClass ``preemptionPolicy``, a
  CustomResourceDefinition's ``conversion: {strategy: None}``);
- pod-only values (``enableServiceLinks: true``, ``hostPort`` copied from ``containerPort`` under
  ``hostNetwork``), stripped from Pods and kept in templates, where the server does not set them;
- ``imagePullPolicy`` where it equals the server's rule (``parsers.ParseImageName``: ``Always`` when the tag
  is ``latest``, or when there is neither tag nor digest; ``img:latest@sha256:...`` is tagged latest);
- values the server allocates (a Service's ``clusterIP``/``clusterIPs``, ``ipFamilies``, ``ipFamilyPolicy``,
  ``nodePort`` of each port, ``healthCheckNodePort``; a Namespace's ``kubernetes`` finalizer): dropped when no
  field manager owns them in ``metadata.managedFields`` (the server's strategy sets them after field
  management, so an allocated value has no owner, while one the author sent has). Without managedFields (an
  object as written) nothing counts as allocated except a cluster IP other than ``None``;
- a Pod's admission results: ``priority`` and ``preemptionPolicy`` (computed from the priority class), the
  300 s ``not-ready``/``unreachable`` NoExecute tolerations of DefaultTolerationSeconds, and what the
  ServiceAccount plugin adds (plugin/pkg/admission/serviceaccount): ``serviceAccountName: default`` and the
  projected ``kube-api-access-xxxxx`` volume with its mounts.

Pure functions over JSON values, changing the given (already copied) object in place.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from typing import Any

Obj = dict[str, Any]

TOKEN_VOLUME_PREFIX = "kube-api-access-"
WORKLOAD_KINDS = frozenset({"DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"})
POD_SPEC_DEFAULTS: dict[str, Any] = {
    "dnsPolicy": "ClusterFirst",
    "restartPolicy": "Always",
    "schedulerName": "default-scheduler",
    "terminationGracePeriodSeconds": 30,
    "securityContext": {},
}
CONTAINER_DEFAULTS: dict[str, Any] = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
    "resources": {},
}
PROBE_DEFAULTS: dict[str, Any] = {
    "timeoutSeconds": 1,
    "periodSeconds": 10,
    "successThreshold": 1,
    "failureThreshold": 3,
}
HTTP_GET_DEFAULTS: dict[str, Any] = {"path": "/", "scheme": "HTTP"}
DEFAULT_MODE = 420
TOKEN_EXPIRATION_SECONDS = 3600
CLIENT_IP_TIMEOUT_SECONDS = 10800
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
DEFAULT_TOLERATION_KEYS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
ALLOCATED_FIELDS = ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "healthCheckNodePort")
ANY_PORT = ("*", "*")  # every node port counts as owned (an object as written)
# The members of a VolumeSource besides emptyDir: a volume naming none of them was defaulted to emptyDir.
VOLUME_SOURCES = frozenset(
    {
        "hostPath",
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


def strip_defaults(obj: Obj, managed_fields: Any = None, *, from_server: bool = True) -> None:
    """Remove the server's defaults, allocations and admission results from ``obj`` in place.

    ``managed_fields``: the live object's ``metadata.managedFields`` (taken before server metadata is
    stripped); ``from_server``: False for an object as written (no server metadata), where nothing was
    allocated.
    """
    owned = _owned_spec_fields(managed_fields, from_server=from_server)
    kind = obj.get("kind")
    spec = obj.get("spec")
    if kind == "Secret":
        _strip_secret(obj)
    elif kind == "Namespace":
        _strip_namespace(obj, owned)
    elif kind == "PriorityClass":
        _drop_if(obj, "preemptionPolicy", "PreemptLowerPriority")
    elif kind == "CustomResourceDefinition" and isinstance(obj.get("spec"), dict):
        # SetDefaults_CustomResourceDefinitionSpec (apiextensions-apiserver pkg/apis/apiextensions/v1
        # defaults.go, v0.37.2); its singular and listKind defaults are names gpuplan spells out
        _drop_if(obj["spec"], "conversion", {"strategy": "None"})
    if not isinstance(spec, dict):
        return
    if kind in WORKLOAD_KINDS:
        _strip_workload(str(kind), spec)
        template_spec = _dig(spec, "template", "spec")
        if isinstance(template_spec, dict):
            strip_pod_spec(template_spec)
    elif kind == "Pod":
        strip_pod_spec(spec)
        _strip_pod_only(spec)
    elif kind == "Service":
        _strip_service(spec, owned)


def default_pull_policy(image: str) -> str:
    """The server's ``imagePullPolicy`` for ``image`` (``SetDefaults_Container`` with ``ParseImageName``)."""
    name, _, digest = image.partition("@")
    tag = name.rsplit("/", 1)[-1].partition(":")[2]
    if not tag and not digest and image:
        tag = "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


# --------------------------------------------------------------------------------------------- helpers


def _drop_if(mapping: Obj, key: str, default: Any) -> None:
    if key in mapping and mapping[key] == default:
        del mapping[key]


def _drop_empty(mapping: Obj, key: str) -> None:
    if mapping.get(key) == {}:
        del mapping[key]


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _dicts(value: Any) -> Iterator[Obj]:
    """The object items of a list (malformed items are skipped)."""
    return (item for item in value or () if isinstance(item, dict)) if isinstance(value, list) else iter(())


# ---------------------------------------------------------------------------------------- workloads, pods


def _strip_workload(kind: str, spec: Obj) -> None:
    _drop_if(spec, "revisionHistoryLimit", 10)
    strategy_key = "updateStrategy" if kind in ("DaemonSet", "StatefulSet") else "strategy"
    strategy = spec.get(strategy_key)
    if kind == "DaemonSet" and isinstance(strategy, dict) and strategy.get("type") == "RollingUpdate":
        rolling = strategy.get("rollingUpdate")
        if isinstance(rolling, dict):
            _drop_if(rolling, "maxSurge", 0)
            _drop_if(rolling, "maxUnavailable", 1)
            _drop_empty(strategy, "rollingUpdate")
        if strategy == {"type": "RollingUpdate"}:
            del spec[strategy_key]
    if kind == "Deployment":
        _drop_if(spec, "progressDeadlineSeconds", 600)
        _drop_if(spec, "replicas", 1)
        _drop_if(
            spec,
            "strategy",
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
        )


def strip_pod_spec(pod: Obj) -> None:
    """SetDefaults_PodSpec and below: what pods and pod templates alike get."""
    for key, default in POD_SPEC_DEFAULTS.items():
        _drop_if(pod, key, default)
    if "serviceAccount" in pod and pod["serviceAccount"] == pod.get("serviceAccountName"):
        del pod["serviceAccount"]  # the deprecated alias the server copies from serviceAccountName
    for group in ("initContainers", "containers"):
        for container in _dicts(pod.get(group)):
            _strip_container(container)
    for volume in _dicts(pod.get("volumes")):
        _strip_volume(volume)


def _strip_pod_only(pod: Obj) -> None:
    """SetDefaults_Pod and the pod admission plugins: never in a template."""
    _drop_if(pod, "enableServiceLinks", True)
    pod.pop("priority", None)  # computed from the priority class; a different value is refused
    pod.pop("preemptionPolicy", None)
    if pod.get("hostNetwork") is True:
        for group in ("initContainers", "containers"):
            for port in (p for c in _dicts(pod.get(group)) for p in _dicts(c.get("ports"))):
                if "hostPort" in port and port["hostPort"] == port.get("containerPort"):
                    del port["hostPort"]
    tolerations = pod.get("tolerations")
    if isinstance(tolerations, list):
        kept = [t for t in tolerations if not _is_default_toleration(t)]
        if kept:
            pod["tolerations"] = kept
        else:
            del pod["tolerations"]
    _drop_if(pod, "serviceAccountName", "default")
    _strip_token_volume(pod)


def _strip_token_volume(pod: Obj) -> None:
    """The ServiceAccount plugin's projected ``kube-api-access-`` volume and the mounts of it."""
    names = {
        v["name"]
        for v in _dicts(pod.get("volumes"))
        if str(v.get("name", "")).startswith(TOKEN_VOLUME_PREFIX) and "projected" in v
    }
    if not names:
        return
    _keep(pod, "volumes", lambda volume: volume.get("name") not in names)
    for group in ("initContainers", "containers"):
        for container in _dicts(pod.get(group)):
            _keep(container, "volumeMounts", lambda mount: mount.get("name") not in names)


def _keep(mapping: Obj, key: str, wanted: Any) -> None:
    """Keep the dict items of the list ``mapping[key]`` that ``wanted`` accepts; drop the key when none."""
    kept = [item for item in mapping.get(key) or [] if not isinstance(item, dict) or wanted(item)]
    if kept:
        mapping[key] = kept
    else:
        mapping.pop(key, None)


def _is_default_toleration(toleration: Any) -> bool:
    return (
        isinstance(toleration, dict)
        and toleration.get("key") in DEFAULT_TOLERATION_KEYS
        and toleration
        == {"key": toleration["key"], "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    )


def _strip_container(container: Obj) -> None:
    for key, default in CONTAINER_DEFAULTS.items():
        _drop_if(container, key, default)
    _drop_if(container, "imagePullPolicy", default_pull_policy(str(container.get("image") or "")))
    for port in _dicts(container.get("ports")):
        _drop_if(port, "protocol", "TCP")
    for env in _dicts(container.get("env")):
        source = env.get("valueFrom")
        if isinstance(source, dict):
            _strip_object_field(source)
    for probe_key in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(probe_key)
        if isinstance(probe, dict):
            for key, default in PROBE_DEFAULTS.items():
                _drop_if(probe, key, default)
            _strip_http_get(probe)
    lifecycle = container.get("lifecycle")
    if isinstance(lifecycle, dict):
        for hook in ("postStart", "preStop"):
            handler = lifecycle.get(hook)
            if isinstance(handler, dict):
                _strip_http_get(handler)


def _strip_http_get(handler: Obj) -> None:
    action = handler.get("httpGet")
    if isinstance(action, dict):
        for key, default in HTTP_GET_DEFAULTS.items():
            _drop_if(action, key, default)


def _strip_object_field(source: Obj) -> None:
    """An env ``valueFrom`` or a downward API item: fieldRef apiVersion v1, resourceFieldRef divisor "0"."""
    field_ref = source.get("fieldRef")
    if isinstance(field_ref, dict):
        _drop_if(field_ref, "apiVersion", "v1")
    resource_ref = source.get("resourceFieldRef")
    if isinstance(resource_ref, dict):
        _drop_if(resource_ref, "divisor", "0")


def _strip_volume(volume: Obj) -> None:
    if volume.get("emptyDir") == {} and not any(volume.get(source) is not None for source in VOLUME_SOURCES):
        del volume["emptyDir"]  # SetDefaults_Volume's choice for a volume that names no source
    host_path = volume.get("hostPath")
    if isinstance(host_path, dict):
        _drop_if(host_path, "type", "")
    for source_name in ("configMap", "secret", "downwardAPI", "projected"):
        source = volume.get(source_name)
        if isinstance(source, dict):
            _drop_if(source, "defaultMode", DEFAULT_MODE)
    for item in _dicts(_dig(volume, "downwardAPI", "items")):
        _strip_object_field(item)
    for projection in _dicts(_dig(volume, "projected", "sources")):
        token = projection.get("serviceAccountToken")
        if isinstance(token, dict):
            _drop_if(token, "expirationSeconds", TOKEN_EXPIRATION_SECONDS)
        for item in _dicts(_dig(projection, "downwardAPI", "items")):
            _strip_object_field(item)


# ----------------------------------------------------------------------------------- services and others


def _strip_service(spec: Obj, owned: _Owned | None) -> None:
    _strip_allocations(spec, owned)
    for key, default in (
        ("sessionAffinity", "None"),
        ("type", "ClusterIP"),
        ("internalTrafficPolicy", "Cluster"),
        ("externalTrafficPolicy", "Cluster"),
        ("allocateLoadBalancerNodePorts", True),
    ):
        _drop_if(spec, key, default)
    config = spec.get("sessionAffinityConfig")
    client_ip = config.get("clientIP") if isinstance(config, dict) else None
    if isinstance(config, dict) and isinstance(client_ip, dict):
        _drop_if(client_ip, "timeoutSeconds", CLIENT_IP_TIMEOUT_SECONDS)
        _drop_empty(config, "clientIP")
        _drop_empty(spec, "sessionAffinityConfig")
    for port in _dicts(spec.get("ports")):
        _drop_if(port, "protocol", "TCP")
        if port.get("targetPort") == port.get("port"):
            port.pop("targetPort", None)


def _strip_allocations(spec: Obj, owned: _Owned | None) -> None:
    """Drop what the Service strategy allocated: values no field manager owns (see the module doc)."""
    if owned is None:  # no ownership to go by: what a single-stack allocation gives
        if spec.get("clusterIP") != "None":
            spec.pop("clusterIP", None)
        if spec.get("clusterIPs") != ["None"]:
            spec.pop("clusterIPs", None)
        _drop_if(spec, "ipFamilies", ["IPv4"])
        _drop_if(spec, "ipFamilyPolicy", "SingleStack")
        return
    for field in ALLOCATED_FIELDS:
        if field not in owned.fields:
            spec.pop(field, None)
    if ANY_PORT in owned.node_ports:
        return
    for port in _dicts(spec.get("ports")):
        if "nodePort" in port and (port.get("port"), port.get("protocol", "TCP")) not in owned.node_ports:
            del port["nodePort"]


def _strip_secret(secret: Obj) -> None:
    """``stringData`` is stored base64-encoded in ``data`` (the v1 conversion); ``type: Opaque`` defaulted."""
    _drop_if(secret, "type", "Opaque")
    string_data = secret.pop("stringData", None)
    if isinstance(string_data, dict) and string_data:
        found = secret.get("data")
        data: Obj = found if isinstance(found, dict) else {}
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        secret["data"] = data


def _strip_namespace(namespace: Obj, owned: _Owned | None) -> None:
    metadata = namespace.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    if isinstance(metadata, dict) and isinstance(labels, dict):
        _drop_if(labels, NAMESPACE_NAME_LABEL, metadata.get("name"))
        _drop_empty(metadata, "labels")
    spec = namespace.get("spec")
    if (
        isinstance(spec, dict)
        and spec.get("finalizers") == ["kubernetes"]
        and (owned is None or "finalizers" not in owned.fields)
    ):
        del spec["finalizers"]
        _drop_empty(namespace, "spec")


# --------------------------------------------------------------------------------------- field ownership


class _Owned:
    """The ``spec`` fields some manager owns: top-level names, and (port, protocol) of owned node ports."""

    def __init__(self) -> None:
        self.fields: set[str] = set()
        self.node_ports: set[tuple[Any, Any]] = set()


def _owned_spec_fields(managed_fields: Any, *, from_server: bool) -> _Owned | None:
    """What the managedFields entries own under ``spec``: everything for an object as written (nothing in
    it was allocated), None for a server's object read without managedFields."""
    owned = _Owned()
    if not from_server:
        owned.fields.update(ALLOCATED_FIELDS)
        owned.node_ports.add(ANY_PORT)
        return owned
    if not isinstance(managed_fields, list) or not managed_fields:
        return None
    for entry in _dicts(managed_fields):
        spec = _dig(entry, "fieldsV1", "f:spec")
        if not isinstance(spec, dict):
            continue
        owned.fields.update(key[2:] for key in spec if key.startswith("f:"))
        ports = spec.get("f:ports")
        for item_key, item in ports.items() if isinstance(ports, dict) else ():
            if item_key.startswith("k:") and isinstance(item, dict) and "f:nodePort" in item:
                try:
                    identity = json.loads(item_key[2:])
                except ValueError:
                    continue
                if isinstance(identity, dict):
                    owned.node_ports.add((identity.get("port"), identity.get("protocol", "TCP")))
    return owned
