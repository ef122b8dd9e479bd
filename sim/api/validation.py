"""The per-kind write rules of a real API server: what it refuses, and what it sets (pure functions).

Each check returns ``[{"reason": "FieldValueRequired"|"FieldValueInvalid"|"FieldValueForbidden", "message":
..., "field": ...}]`` with the apiserver's wording; ``sim.api.store`` turns a non-empty list into a 422
Invalid ``ApiError`` (``invalid_message`` builds the Status message). ``unknown_fields`` serves
``fieldValidation=Strict`` (400 BadRequest "strict decoding error").

Covered: object names (RFC 1123 subdomain, or label for namespaces), name or generateName required,
DaemonSet selector (required, must match the template labels, immutable), pod spec (containers required,
immutable except container images and a few fields), ConfigMap/Secret ``immutable: true``, PriorityClass
(``system-`` names reserved for the built-in classes, user values at most 1,000,000,000, value and
preemptionPolicy immutable: ``validate_create`` and ``validate_update``), the CustomResourceDefinition
fields the store needs to register the kinds, and a PodDisruptionBudget (``validation_policy``).

What the server adds to a written object is elsewhere: ``sim.api.defaults`` (the types' defaults, Secret
``stringData`` folding), ``sim.api.admission`` and ``sim.api.strategy`` (status on create, allocations).
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

from gpuplan.sim.api import (
    registry,
    selectors,
    validation_batch,
    validation_coordination,
    validation_policy,
)

Cause = dict[str, str]

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
POD_UPDATE_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)
IMMUTABLE_SET_MESSAGE = "field is immutable when `immutable` is set"

_LABEL_NAMED = frozenset({"Namespace", "Service"})


def required(field: str, detail: str = "") -> Cause:
    return {
        "reason": "FieldValueRequired",
        "message": "Required value" + (f": {detail}" if detail else ""),
        "field": field,
    }


def invalid(field: str, value: Any, detail: str) -> Cause:
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {_render(value)}: {detail}",
        "field": field,
    }


def forbidden(field: str, detail: str) -> Cause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}


def _render(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def invalid_message(rt: registry.ResourceType, name: str, causes: list[Cause]) -> str:
    """``DaemonSet.apps "x" is invalid: spec.selector: Invalid value: ...`` (several causes in [..])."""
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    parts = [f"{c['field']}: {c['message']}" for c in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    return f'{kind} "{name}" is invalid: {joined}'


def validate_name(rt: registry.ResourceType, name: str) -> list[Cause]:
    if rt.group == registry.RBAC:  # ValidateRBACName is path.IsValidPathSegmentName: "system:..." is fine
        return _path_segment_name(name)
    if rt.kind in _LABEL_NAMED:
        if len(name) > 63 or not _LABEL.fullmatch(name):
            return [invalid("metadata.name", name, LABEL_MESSAGE)]
    elif not _is_subdomain(name):
        return [invalid("metadata.name", name, SUBDOMAIN_MESSAGE)]
    return []


def _path_segment_name(name: str) -> list[Cause]:
    if name in (".", ".."):
        return [invalid("metadata.name", name, f"may not be '{name}'")]
    for bad in ("/", "%"):
        if bad in name:
            return [invalid("metadata.name", name, f"may not contain '{bad}'")]
    return []


@functools.lru_cache(maxsize=16384)
def _is_subdomain(name: str) -> bool:
    """Every write validates its object's name again; a stored object's name is checked once."""
    return len(name) <= 253 and _SUBDOMAIN.fullmatch(name) is not None


def _endpoint_slice(obj: dict[str, Any]) -> list[Cause]:
    from gpuplan.sim.api import validation_endpointslice  # it builds on this module's helpers

    return validation_endpointslice.validate(obj)


def validate_object(rt: registry.ResourceType, obj: dict[str, Any]) -> list[Cause]:
    """Checks that hold for every write of the object (create and update)."""
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if not name:
        return [required("metadata.name", "name or generateName is required")]
    causes = validate_name(rt, name) + validate_labels(meta, "metadata")
    checker = _KIND_CHECKS.get((rt.group, rt.kind))
    if checker is not None:
        causes += checker(obj)
    return causes


_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
QUALIFIED_NAME_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
    "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex "
    "used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


@functools.lru_cache(maxsize=8192)
def qualified_name_problem(key: str) -> str | None:
    """Why ``key`` is not a qualified name (a label key), or None."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _SUBDOMAIN.fullmatch(prefix)):
        return "prefix part " + SUBDOMAIN_MESSAGE
    if not name or len(name) > 63 or not _QUALIFIED_NAME.fullmatch(name):
        return QUALIFIED_NAME_MESSAGE
    return None


def validate_labels(meta: dict[str, Any], field: str) -> list[Cause]:
    """Label keys are qualified names and values valid label values; annotation keys qualified names."""
    causes = []
    for key, value in (meta.get("labels") or {}).items():
        problem = qualified_name_problem(key)
        if problem:
            causes.append(invalid(f"{field}.labels", key, problem))
        elif not is_label_value(value):
            causes.append(invalid(f"{field}.labels", value, LABEL_VALUE_MESSAGE))
    for key in meta.get("annotations") or {}:
        problem = qualified_name_problem(key)
        if problem:
            causes.append(invalid(f"{field}.annotations", key, problem))
    return causes


def is_label_value(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def _daemonset(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    selector = spec.get("selector")
    if not selector:
        return [required("spec.selector")]
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    causes: list[Cause] = []
    try:
        matches = selectors.from_label_selector(selector).matches_labels(labels)
    except selectors.SelectorError as exc:
        return [invalid("spec.selector", selector, str(exc))]
    if not (selector.get("matchLabels") or selector.get("matchExpressions")):
        causes.append(invalid("spec.selector", selector, "empty selector is invalid for daemonset"))
    elif not matches:
        causes.append(
            invalid("spec.template.metadata.labels", labels, "`selector` does not match template `labels`")
        )
    causes += validate_labels(template.get("metadata") or {}, "spec.template.metadata")
    return causes + _pod_spec(template.get("spec") or {}, "spec.template.spec")


def _pod(obj: dict[str, Any]) -> list[Cause]:
    return _pod_spec(obj.get("spec") or {}, "spec")


def _pod_spec(spec: dict[str, Any], field: str) -> list[Cause]:
    containers = spec.get("containers")
    if not containers:
        return [required(f"{field}.containers")]
    causes = []
    for list_name in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(list_name) or []):
            where = f"{field}.{list_name}[{i}]"
            if not container.get("name"):
                causes.append(required(f"{where}.name"))
            if not container.get("image"):
                causes.append(required(f"{where}.image"))
    return causes


def _crd(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec") or {}
    names = spec.get("names") or {}
    causes = [required(f"spec.{f}") for f in ("group", "scope") if not spec.get(f)]
    causes += [required(f"spec.names.{f}") for f in ("plural", "kind") if not names.get(f)]
    if spec.get("scope") and spec["scope"] not in ("Namespaced", "Cluster"):
        causes.append(
            {
                "reason": "FieldValueNotSupported",
                "field": "spec.scope",
                "message": f"Unsupported value: {_render(spec['scope'])}: supported values: "
                '"Cluster", "Namespaced"',
            }
        )
    if not spec.get("versions"):
        causes.append(required("spec.versions", "must have exactly one version marked as storage version"))
    expected = f"{names.get('plural')}.{spec.get('group')}"
    name = (obj.get("metadata") or {}).get("name")
    if not causes and name != expected:
        causes.append(invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    return causes


HIGHEST_USER_DEFINABLE_PRIORITY = 1000000000
SYSTEM_PRIORITY_CLASS_PREFIX = "system-"
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
# scheduling.SystemPriorityClasses(): the only classes a "system-" name may have (neither is globalDefault);
# ``sim.api.admission.SYSTEM_PRIORITY_CLASSES`` builds the stored objects from it.
SYSTEM_PRIORITY_VALUES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}


def _preemption_policy(obj: dict[str, Any]) -> list[Cause]:
    if "preemptionPolicy" not in obj:
        return []
    policy = obj["preemptionPolicy"]
    if not policy:
        return [required("preemptionPolicy")]
    if policy not in PREEMPTION_POLICIES:
        return [
            {
                "reason": "FieldValueNotSupported",
                "field": "preemptionPolicy",
                "message": f"Unsupported value: {_render(policy)}: supported values: "
                + ", ".join(_render(p) for p in PREEMPTION_POLICIES),
            }
        ]
    return []


def _priority_class_create(obj: dict[str, Any]) -> list[Cause]:
    """ValidatePriorityClass: ``system-`` names are the built-in classes exactly; user values are capped."""
    name = (obj.get("metadata") or {}).get("name") or ""
    value, global_default = obj.get("value", 0), obj.get("globalDefault") is True
    causes: list[Cause] = []
    if name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        problem = _system_priority_class_problem(name, value, global_default)
        if problem:
            causes.append(
                forbidden(
                    "metadata.name",
                    f"priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}'"
                    f" prefix are reserved for system use only. error: {problem}",
                )
            )
    elif isinstance(value, int) and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        causes.append(
            forbidden(
                "value",
                f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}",
            )
        )
    return causes + _preemption_policy(obj)


def _system_priority_class_problem(name: str, value: Any, global_default: bool) -> str | None:
    """scheduling.IsKnownSystemPriorityClass's error, or None for a built-in class as the server stores it."""
    known = SYSTEM_PRIORITY_VALUES.get(name)
    if known is None:
        return f"{name} is not a known system priority class"
    if known != value:
        return f"value of {name} PriorityClass must be {known}"
    if global_default:
        return f"globalDefault of {name} PriorityClass must be false"
    return None


def _priority_class_update(old: dict[str, Any], new: dict[str, Any]) -> list[Cause]:
    """ValidatePriorityClassUpdate: value and preemptionPolicy are immutable."""
    causes = []
    if new.get("value", 0) != old.get("value", 0):
        causes.append(forbidden("value", "may not be changed in an update."))
    if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
        causes.append(invalid("preemptionPolicy", new.get("preemptionPolicy"), "field is immutable"))
    return causes + _preemption_policy(new)


def validate_create(rt: registry.ResourceType, obj: dict[str, Any]) -> list[Cause]:
    """``validate_object`` plus the checks a kind's strategy runs on create only (PriorityClass names and
    values: an update checks immutability instead, as ``ValidatePriorityClassUpdate`` does)."""
    causes = validate_object(rt, obj)
    if not causes and (rt.group, rt.kind) == ("scheduling.k8s.io", "PriorityClass"):
        causes = _priority_class_create(obj)
    return causes


_KIND_CHECKS = {
    ("apps", "DaemonSet"): _daemonset,
    ("batch", "Job"): validation_batch.job,
    ("batch", "CronJob"): validation_batch.cronjob,
    ("", "Pod"): _pod,
    ("apiextensions.k8s.io", "CustomResourceDefinition"): _crd,
    ("discovery.k8s.io", "EndpointSlice"): _endpoint_slice,
    ("", "Secret"): validation_coordination.secret,
    ("coordination.k8s.io", "Lease"): validation_coordination.lease,
    ("policy", "PodDisruptionBudget"): validation_policy.validate,
}


def validate_update(rt: registry.ResourceType, old: dict[str, Any], new: dict[str, Any]) -> list[Cause]:
    """Immutable fields: DaemonSet selector, pod spec and QoS class, immutable ConfigMaps/Secrets, CRD group
    and names, an EndpointSlice's addressType."""
    kind = (rt.group, rt.kind)
    if kind == ("discovery.k8s.io", "EndpointSlice"):
        from gpuplan.sim.api import validation_endpointslice  # it builds on this module's helpers

        return validation_endpointslice.validate_update(old, new)
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if kind == ("apps", "DaemonSet") and old_spec.get("selector") != new_spec.get("selector"):
        return [invalid("spec.selector", new_spec.get("selector"), "field is immutable")]
    if (
        kind == ("", "Pod")
        and old_spec is not new_spec  # a status write keeps the stored spec
        and _pod_mutable_view(old_spec) != _pod_mutable_view(new_spec)
    ):
        return [forbidden("spec", POD_UPDATE_MESSAGE)]
    if kind == ("", "Pod"):
        # ValidatePodStatusUpdate (pkg/apis/core/validation/validation.go): the class set at create stays
        old_qos, new_qos = (
            (old.get("status") or {}).get("qosClass"),
            (new.get("status") or {}).get("qosClass"),
        )
        if old_qos != new_qos:
            return [invalid("status.qosClass", new_qos, "field is immutable")]
    if kind in (("", "ConfigMap"), ("", "Secret")) and old.get("immutable") is True:
        causes = [
            forbidden(f, IMMUTABLE_SET_MESSAGE) for f in ("data", "binaryData") if old.get(f) != new.get(f)
        ]
        if new.get("immutable") is not True:
            causes.append(forbidden("immutable", IMMUTABLE_SET_MESSAGE))
        return causes
    if kind == ("scheduling.k8s.io", "PriorityClass"):
        return _priority_class_update(old, new)
    if kind == ("apiextensions.k8s.io", "CustomResourceDefinition"):
        for field in ("group", "scope"):
            if old_spec.get(field) != new_spec.get(field):
                return [invalid(f"spec.{field}", new_spec.get(field), "field is immutable")]
    return []


def _pod_mutable_view(spec: dict[str, Any]) -> dict[str, Any]:
    """The pod spec with the fields an update may change blanked out."""
    view = {
        k: v
        for k, v in spec.items()
        if k not in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
    }
    for list_name in ("containers", "initContainers"):
        if list_name in view:
            view[list_name] = [{k: v for k, v in c.items() if k != "image"} for c in view[list_name]]
    return view


# Top-level fields each built-in kind's Go type has; custom resources are schema-less here, so only their
# metadata is checked.
_COMMON_TOP = frozenset({"apiVersion", "kind", "metadata"})
TOP_LEVEL_FIELDS: dict[str, frozenset[str]] = {
    "PriorityClass": frozenset({"value", "globalDefault", "description", "preemptionPolicy"}),
    "ConfigMap": frozenset({"data", "binaryData", "immutable"}),
    "Secret": frozenset({"data", "stringData", "type", "immutable"}),
    "ServiceAccount": frozenset({"secrets", "imagePullSecrets", "automountServiceAccountToken"}),
    "Event": frozenset(
        {
            "involvedObject",
            "reason",
            "message",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "count",
            "type",
            "eventTime",
            "series",
            "action",
            "related",
            "reportingComponent",
            "reportingInstance",
        }
    ),
    "Endpoints": frozenset({"subsets"}),
    "Role": frozenset({"rules"}),
    "ClusterRole": frozenset({"rules", "aggregationRule"}),
    "RoleBinding": frozenset({"subjects", "roleRef"}),
    "ClusterRoleBinding": frozenset({"subjects", "roleRef"}),
    "RuntimeClass": frozenset({"handler", "overhead", "scheduling"}),
}
METADATA_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


def unknown_fields(rt: registry.ResourceType, obj: dict[str, Any], builtin: bool) -> list[str]:
    """Fields a strict decoder of the kind's Go type would not know (top level and metadata)."""
    unknown = []
    if builtin:
        known = _COMMON_TOP | TOP_LEVEL_FIELDS.get(rt.kind, frozenset({"spec", "status"}))
        unknown += [k for k in obj if k not in known]
    unknown += [f"metadata.{k}" for k in (obj.get("metadata") or {}) if k not in METADATA_FIELDS]
    return unknown


def strict_message(unknown: list[str]) -> str:
    return "strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in unknown)
