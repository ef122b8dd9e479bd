"""Normalisation of Kubernetes objects, so that diffs compare owned fields only (design §5).

Called by :mod:`gpuplan.planner.diff.fields` (``owned_view``, ``diff``, ``three_way``) and by whoever records
an applied object in state (:func:`normalize`). Pure functions of JSON values: no I/O, and no third-party
imports (deepdiff stays in ``planner.diff.fields``).

What the API server gives back is never what gpuplan sent: it adds ``status`` and server-set metadata, fills
in defaults (``dnsPolicy: ClusterFirst``, ``terminationMessagePath``, ``protocol: TCP`` ...), drops empty maps
and lists (Go's ``omitempty``), rewrites quantities (``0.5`` -> ``500m``) and may reorder lists. Five tools
take that noise away:

- :func:`strip_server_fields`: ``status``, server-set metadata and the annotations servers and kubectl add.
- :func:`restrict`: the live object cut to the shape of a template (the desired or the recorded manifest).
  This is server-side apply's notion of ownership: gpuplan owns the fields it sends, so a field another
  manager added (a label, an env var, a sidecar) is that manager's business, while a change to one of
  gpuplan's fields is drift. Defaulted fields vanish here because the template leaves them out.
- :func:`strip_defaults` (:mod:`gpuplan.planner.diff.defaults`): the same defaults, allocations and
  admission results removed by rule, for views without a template (an object to be deleted or adopted, a
  record written from a server answer); exactly what a real API server (and the simulator) adds.
- :func:`canonical`: keyed lists (containers by name, volumeMounts by mountPath, ports by port ...) become
  mappings keyed by :class:`ItemKey`, and empty values are pruned, so reordering and ``omitempty`` are not
  changes and paths read ``containers[name=x].image``. Ordered lists (tolerations, args, command, RBAC
  rules) stay lists and are compared whole, as server-side apply treats them as atomic. An empty string
  field of a built-in kind is pruned too: Go's ``omitempty`` stores ``{name: X, value: ""}`` as ``{name: X}``.
- :func:`same_spelling`: a quantity the server stores in its canonical form (``0.1`` as ``100m``, ``2e9`` as
  ``2G``) is the same value however it is spelled, on either side of a diff.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from gpuplan.modules.quantity import MILLI, quantity_value
from gpuplan.planner.diff.defaults import strip_defaults as strip_defaults

# metadata the server sets on every object; never part of what gpuplan renders
SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
# annotations added by the server's controllers or by kubectl, not by the object's author
SERVER_ANNOTATIONS = (
    "kubectl.kubernetes.io/last-applied-configuration",
    "deprecated.daemonset.template.generation",
    "deployment.kubernetes.io/revision",
)

# list field -> the fields that identify an item (the lists' patchMergeKey / listMapKeys in the API)
MERGE_KEYS: dict[str, tuple[str, ...]] = {
    "containers": ("name",),
    "initContainers": ("name",),
    "ephemeralContainers": ("name",),
    "env": ("name",),
    "volumes": ("name",),
    "volumeMounts": ("mountPath",),
    "volumeDevices": ("devicePath",),
    "imagePullSecrets": ("name",),
    "hostAliases": ("ip",),
    "readinessGates": ("conditionType",),
    "ownerReferences": ("uid",),
    "conditions": ("type",),
    "resourceClaims": ("name",),
}
# Go map-typed fields: an empty map is omitted by the server, so {} and absent are the same value
MAP_FIELDS = frozenset(
    {
        "labels",
        "annotations",
        "nodeSelector",
        "data",
        "binaryData",
        "stringData",
        "matchLabels",
        "limits",
        "requests",
        "selector",
        "parameters",
    }
)
# The API groups whose objects the server decodes into Go structs (const GroupName of pkg/apis/*/register.go,
# v1.37.2, and kube-aggregator's): a string field that is empty is not stored (``omitempty``), so a rendered
# ``value: ""`` reads back as no value. Not apiextensions.k8s.io, whose schemas hold JSON (a ``default: ""``
# is kept), nor custom resources, stored as written.
TYPED_GROUPS = frozenset(
    {
        "",
        "admissionregistration.k8s.io",
        "apiregistration.k8s.io",
        "apps",
        "autoscaling",
        "batch",
        "certificates.k8s.io",
        "coordination.k8s.io",
        "discovery.k8s.io",
        "events.k8s.io",
        "flowcontrol.apiserver.k8s.io",
        "internal.apiserver.k8s.io",
        "networking.k8s.io",
        "node.k8s.io",
        "policy",
        "rbac.authorization.k8s.io",
        "resource.k8s.io",
        "scheduling.k8s.io",
        "storage.k8s.io",
        "storagemigration.k8s.io",
    }
)
# *string fields where "" is a value of its own: a claim's storageClassName "" asks for no class, absent for
# the default one (k8s.io/api core/v1 types.go, PersistentVolumeClaimSpec)
KEEPS_EMPTY = frozenset({"storageClassName"})
# Where the server stores quantities in canonical form (``0.1`` -> ``100m``): the maps of quantities (a
# ResourceList, and a RuntimeClass's overhead.podFixed) and the single quantity fields (an emptyDir's
# sizeLimit, a resourceFieldRef's divisor). SetDefaults_ResourceList (pkg/apis/core/v1/defaults.go, v1.37.2)
# also rounds a ResourceList's values up to 1m: the resources of containers and the pod overhead.
RESOURCE_LISTS = frozenset({"limits", "requests", "overhead", "capacity", "allocatable"})
QUANTITY_MAPS = RESOURCE_LISTS | {"podFixed"}
QUANTITY_FIELDS = frozenset({"sizeLimit", "divisor"})


class ItemKey(str):
    """A keyed list item's identity, rendered ``[name=x]``; ``fields`` holds (field, value) pairs."""

    fields: tuple[tuple[str, Any], ...]

    def __new__(cls, fields: Sequence[tuple[str, Any]]) -> ItemKey:
        rendered = "[" + ",".join(f"{name}={_render_key_value(value)}" for name, value in fields) + "]"
        key = super().__new__(cls, rendered)
        key.fields = tuple(fields)
        return key

    def __reduce__(self) -> tuple[Any, ...]:  # deepcopy and pickle rebuild from the fields, not the text
        return (ItemKey, (self.fields,))


def _render_key_value(value: Any) -> str:
    text = str(value)
    if isinstance(value, str) and (not text or re.search(r'[\[\]",=\s]', text)):
        return json.dumps(value)
    return text


# ---------------------------------------------------------------------------------------------- server noise


def strip_server_fields(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy without ``status``, server-set metadata and server/kubectl annotations."""
    obj = copy.deepcopy(dict(manifest))
    obj.pop("status", None)
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        for name in SERVER_METADATA:
            metadata.pop(name, None)
        annotations = metadata.get("annotations")
        if isinstance(annotations, dict):
            for name in SERVER_ANNOTATIONS:
                annotations.pop(name, None)
            if not annotations:
                metadata.pop("annotations")
    template_metadata = _dig(obj, "spec", "template", "metadata")
    if isinstance(template_metadata, dict) and template_metadata.get("creationTimestamp", 0) is None:
        del template_metadata["creationTimestamp"]  # a Go zero time the server serialises as null
    return obj


def _dig(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


# -------------------------------------------------------------------------------------------- restriction


def restrict(live: Any, template: Any, *, field: str | None = None) -> Any:
    """``live`` cut to the shape of ``template``: only keys (and keyed-list items) the template has.

    Leaves (scalars) and ordered lists are taken from ``live`` whole; items of an ordered list are cut to
    the template's item at the same position, so a server default inside a toleration is not a change.
    A quantity the server rewrote (``1000m`` for ``1``) keeps the template's spelling.
    """
    if isinstance(template, Mapping) and isinstance(live, Mapping):
        out = {}
        for key, sub in template.items():
            if key not in live:
                continue
            if _same_quantity(live[key], sub, field if field in QUANTITY_MAPS else key):
                out[key] = copy.deepcopy(sub)
            else:
                out[key] = restrict(live[key], sub, field=key)
        return out
    if isinstance(template, list) and isinstance(live, list):
        keys = _item_keys(field, template, live)
        if keys is not None:
            by_key = {_key_of(item, keys): item for item in template}
            return [
                restrict(item, by_key[_key_of(item, keys)]) for item in live if _key_of(item, keys) in by_key
            ]
        return [
            restrict(item, template[i]) if i < len(template) else copy.deepcopy(item)
            for i, item in enumerate(live)
        ]
    return copy.deepcopy(live)


def union_shape(first: Any, second: Any, *, field: str | None = None) -> Any:
    """A template with every key of both: what gpuplan owned before and what it will own after."""
    if isinstance(first, Mapping) and isinstance(second, Mapping):
        merged = {key: copy.deepcopy(value) for key, value in first.items()}
        for key, value in second.items():
            merged[key] = union_shape(first[key], value, field=key) if key in first else copy.deepcopy(value)
        return merged
    if isinstance(first, list) and isinstance(second, list):
        keys = _item_keys(field, first, second)
        if keys is not None:
            items = {_key_of(item, keys): item for item in first}
            for item in second:
                key = _key_of(item, keys)
                items[key] = union_shape(items[key], item) if key in items else copy.deepcopy(item)
            return list(items.values())
    return copy.deepcopy(second)


# ------------------------------------------------------------------------------------------ quantities


def stored_quantity(text: Any, field: str | None) -> Decimal | None:
    """The value the server stores for the quantity ``text`` under ``field`` (see QUANTITY_MAPS); None when
    ``field`` holds no quantities or ``text`` is not one."""
    value: Decimal | None = None
    if field in RESOURCE_LISTS:
        value = quantity_value(text, step=MILLI)
    elif field in QUANTITY_MAPS or field in QUANTITY_FIELDS:
        value = quantity_value(text)
    return value


def _same_quantity(first: Any, second: Any, field: str | None) -> bool:
    a = stored_quantity(first, field)
    return a is not None and a == stored_quantity(second, field)


def same_spelling(before: Any, after: Any, *, field: str | None = None) -> Any:
    """``after`` with each quantity that stores the same value as ``before``'s at the same place spelled as
    in ``before`` (both :func:`canonical` forms), so ``0.1`` against ``100m`` is no change while a change
    shows each side as written."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out = {}
        for key, sub in after.items():
            if key not in before:
                out[key] = sub
            elif _same_quantity(before[key], sub, field if field in QUANTITY_MAPS else key):
                out[key] = before[key]
            else:
                out[key] = same_spelling(before[key], sub, field=key)
        return out
    return after


# -------------------------------------------------------------------------------------------- keyed lists


def _item_keys(field: str | None, *lists: Sequence[Any]) -> tuple[str, ...] | None:
    """The merge key of a list, or None when it is an ordered (atomic) list or the key is not usable.

    ``lists`` are the versions of one list being compared; the key must identify the items of each.
    """
    items = [item for one in lists for item in one]
    if not items or not all(isinstance(item, Mapping) for item in items):
        return None
    if field == "ports":
        primary = "containerPort" if any("containerPort" in item for item in items) else "port"
        candidates: tuple[tuple[str, ...], ...] = ((primary,), (primary, "protocol"))
    elif field in MERGE_KEYS:
        candidates = (MERGE_KEYS[field],)
    else:
        return None
    for keys in candidates:
        if all(keys[0] in item for item in items) and all(_unique(one, keys) for one in lists):
            return keys
    return None


def _unique(items: Sequence[Mapping[str, Any]], keys: tuple[str, ...]) -> bool:
    return len({_key_of(item, keys) for item in items}) == len(items)


def _key_of(item: Mapping[str, Any], keys: tuple[str, ...]) -> ItemKey:
    return ItemKey([(name, item.get(name)) for name in keys])


# --------------------------------------------------------------------------------------------- canonical


def canonical(value: Any, *, field: str | None = None, typed: bool | None = None) -> Any:
    """A comparable form: keyed lists as ``{ItemKey: item}``, empty values pruned (see module doc).

    ``typed``: whether ``value`` is (part of) an object the server decodes into Go structs, where an empty
    string field is the same value as an absent one; by default, read off the object's ``apiVersion``.
    """
    if typed is None:
        typed = _typed(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, sub in value.items():
            canon = canonical(sub, field=key, typed=typed)
            if not _is_empty(key, sub, canon) and not (typed and sub == "" and _omits_empty(field, key)):
                out[key] = canon
        return out
    if isinstance(value, list):
        keys = _item_keys(field, value)
        if keys is not None:
            return {_key_of(item, keys): canonical(item, typed=typed) for item in value}
        return [canonical(item, typed=typed) for item in value]
    return value


def _is_empty(key: str, original: Any, canon: Any) -> bool:
    if original is None:
        return True
    if isinstance(original, list):
        return not original
    return isinstance(original, Mapping) and not canon and key in MAP_FIELDS


def _typed(value: Any) -> bool:
    api_version = value.get("apiVersion") if isinstance(value, Mapping) else None
    return not isinstance(api_version, str) or api_version.rpartition("/")[0] in TYPED_GROUPS


def _omits_empty(field: str | None, key: str) -> bool:
    """Whether the server drops ``key: ""`` under ``field``: a Go string field tagged ``omitempty`` (and one
    without the tag decodes "" and absent alike), but never an entry of a map, a pointer or a JSON field."""
    return field not in MAP_FIELDS and key not in KEEPS_EMPTY


def plain(value: Any) -> Any:
    """The inverse of :func:`canonical`'s list keying: mappings keyed by ItemKey become lists again."""
    if isinstance(value, Mapping):
        if value and all(isinstance(key, ItemKey) for key in value):
            return [plain(item) for item in value.values()]
        return {str(key): plain(sub) for key, sub in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


# ----------------------------------------------------------------------------------------------- defaults


def normalize(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """A live object without server noise or server defaults: what its author most likely wrote."""
    metadata = manifest.get("metadata") or {}
    from_server = any(metadata.get(name) for name in ("uid", "resourceVersion", "creationTimestamp"))
    obj = strip_server_fields(manifest)
    strip_defaults(obj, metadata.get("managedFields"), from_server=from_server)
    result: dict[str, Any] = plain(canonical(obj))
    return result
