"""OpenAPI v3 documents for ``kubectl apply`` validation, and the server-side strict field check.

Called by :mod:`gpuplan.sim.api.server` for ``GET /openapi/v3`` (the index of group versions, each with a
``serverRelativeURL`` carrying a content hash), ``GET /openapi/v3/<api/v1|apis/g/v>`` (one group-version
document), and before writes that carry ``fieldValidation=Strict|Warn``.

Why kubectl needs this: ``kubectl apply`` (default ``--validate=strict``) asks the group-version document
whether the PATCH operation of the object's kind accepts a ``fieldValidation`` query parameter. If it does,
kubectl leaves validation to the server and sends ``fieldValidation=Strict``; so every served kind gets
paths whose operations carry ``x-kubernetes-group-version-kind`` and that parameter, and the server rejects
unknown fields with the apiserver's message (:func:`unknown_fields`). Client-side apply also builds its
strategic merge patch from ``components.schemas`` (patch strategies and merge keys), and ``kubectl explain``
reads the schemas and their descriptions, which is why built-in kinds get their real schemas (generated into
``openapi_data/`` by :mod:`gpuplan.sim.api.gen_openapi`). A custom resource gets, per served version, the
``openAPIV3Schema`` of its CustomResourceDefinition as the apiextensions-apiserver publishes it (its
``apiVersion``, ``kind`` and ``metadata`` replaced by the standard ones, ``metadata`` a reference to
ObjectMeta, the group-version-kind added; staging/src/k8s.io/apiextensions-apiserver/pkg/controller/openapi/
builder), and its unknown fields are refused or pruned as a structural schema prunes them: an object node
knows its ``properties``, an ``additionalProperties`` schema takes any key, ``x-kubernetes-preserve-unknown-
fields`` keeps everything below, ``x-kubernetes-embedded-resource`` adds apiVersion, kind and metadata. A
version without a schema stays permissive. ``/openapi/v2`` is answered 404 by the server: kubectl then relies
on v3.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import threading
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from gpuplan.sim.api.registry import Registry, ResourceType

_SCHEMA_PREFIX = "#/components/schemas/"
_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_PATCH = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
_STATUS = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
_DELETE_OPTIONS = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"
_PATCH_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)
_WRITE_PARAMETERS = [
    {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": True}},
]
# The descriptions the apiextensions-apiserver gives the standard fields of every custom resource.
_API_VERSION_DOC = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should convert "
    "recognized schemas to the latest internal value, and may reject unrecognized values. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
_KIND_DOC = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer this "
    "from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
_METADATA_DOC = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
_STANDARD = ("apiVersion", "kind", "metadata")
_PATCH_PARAMETERS = _WRITE_PARAMETERS + [
    {"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": True}}
]


@functools.cache
def builtin_data() -> dict[str, Any]:
    """The generated schema data: ``{"kinds": {"group/version/Kind": name}, "schemas": {name: schema}}``."""
    raw = (resources.files("gpuplan.sim.api.openapi_data") / "schemas.json.gz").read_bytes()
    data: dict[str, Any] = json.loads(gzip.decompress(raw))
    data["schemas"][_PATCH] = {"type": "object"}
    return data


def group_version_path(rt: ResourceType) -> str:
    """``api/v1`` or ``apis/apps/v1``: the key of a group version in the /openapi/v3 index."""
    return f"apis/{rt.group}/{rt.version}" if rt.group else f"api/{rt.version}"


def custom_schema_name(rt: ResourceType) -> str:
    """``com.nvidia.v1.ClusterPolicy`` for nvidia.com/v1 ClusterPolicy: a real server reverses the group."""
    return ".".join([*reversed(rt.group.split(".")), rt.version, rt.kind])


def _gvk(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _SCHEMA_PREFIX + name}


def _closure(names: Iterable[str], schemas: Mapping[str, Any]) -> dict[str, Any]:
    """The named schemas and every schema they reach through ``$ref``."""
    found: dict[str, Any] = {}
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in found or name not in schemas:
            continue
        found[name] = schemas[name]
        pending.extend(_refs_in(found[name]))
    return found


def _refs_in(node: Any) -> list[str]:
    if isinstance(node, dict):
        refs = [str(node["$ref"]).removeprefix(_SCHEMA_PREFIX)] if "$ref" in node else []
        return refs + [ref for value in node.values() for ref in _refs_in(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _refs_in(value)]
    return []


class OpenApiDocuments:
    """Builds and caches the /openapi/v3 index and documents for the registry's current kinds.

    Documents are cached per group version and rebuilt when the kinds of that group version change (a CRD
    created or deleted), so the hash in the index changes exactly when the document does. Thread-safe.
    """

    def __init__(self, registry: Registry, server_version: str) -> None:
        self._registry = registry
        self._version = server_version
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple[ResourceType, ...], bytes, str]] = {}

    def _kinds_by_group_version(self) -> dict[str, tuple[ResourceType, ...]]:
        grouped: dict[str, list[ResourceType]] = {}
        for rt in sorted(self._registry.all(), key=lambda r: (r.group, r.version, r.plural)):
            grouped.setdefault(group_version_path(rt), []).append(rt)
        return {path: tuple(kinds) for path, kinds in grouped.items()}

    def _entry(self, path: str, kinds: tuple[ResourceType, ...]) -> tuple[bytes, str]:
        with self._lock:
            cached = self._cache.get(path)
            if cached is not None and cached[0] == kinds:
                return cached[1], cached[2]
        body = json.dumps(self._document(kinds), separators=(",", ":")).encode()
        digest = hashlib.sha512(body).hexdigest().upper()
        with self._lock:
            self._cache[path] = (kinds, body, digest)
        return body, digest

    def index(self) -> dict[str, Any]:
        """The ``GET /openapi/v3`` answer."""
        paths = {}
        for path, kinds in self._kinds_by_group_version().items():
            _, digest = self._entry(path, kinds)
            paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
        return {"paths": paths}

    def document(self, path: str) -> bytes | None:
        """The serialised document of one group version (``api/v1``, ``apis/apps/v1``), or None."""
        kinds = self._kinds_by_group_version().get(path.strip("/"))
        if kinds is None:
            return None
        return self._entry(path.strip("/"), kinds)[0]

    def _document(self, kinds: tuple[ResourceType, ...]) -> dict[str, Any]:
        data = builtin_data()
        roots = [_PATCH, _STATUS, _DELETE_OPTIONS, _OBJECT_META]
        custom: dict[str, Any] = {}
        paths: dict[str, Any] = {}
        for rt in kinds:
            builtin = data["kinds"].get(f"{rt.group}/{rt.version}/{rt.kind}")
            if builtin:
                roots.append(builtin)
                schema_name = builtin
            else:
                schema_name = custom_schema_name(rt)
                custom[schema_name] = custom_schema(rt)
            paths.update(_paths(rt, schema_name, strategic=bool(builtin)))
        schemas = _closure(roots, data["schemas"])
        schemas.update(custom)
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": self._version},
            "paths": paths,
            "components": {"schemas": dict(sorted(schemas.items()))},
        }


def _standard_properties() -> dict[str, Any]:
    return {
        "apiVersion": {"type": "string", "description": _API_VERSION_DOC},
        "kind": {"type": "string", "description": _KIND_DOC},
        "metadata": {"allOf": [_ref(_OBJECT_META)], "description": _METADATA_DOC},
    }


@functools.lru_cache(maxsize=256)
def _parsed(schema_text: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(schema_text)
    return parsed


def custom_schema(rt: ResourceType) -> dict[str, Any]:
    """The published schema of a custom resource version: its CRD's, or a permissive one without it."""
    if not rt.schema:
        return _permissive_schema(rt)
    schema = dict(_parsed(rt.schema))
    schema["properties"] = {**(schema.get("properties") or {}), **_standard_properties()}
    schema.setdefault("type", "object")
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return schema


def _permissive_schema(rt: ResourceType) -> dict[str, Any]:
    return {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "x-kubernetes-group-version-kind": [_gvk(rt)],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": _ref(_OBJECT_META),
        },
    }


def _json_content(schema_name: str) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(schema_name)}}


def _operation(
    rt: ResourceType,
    action: str,
    schema_name: str,
    *,
    parameters: list[dict[str, Any]],
    request: dict[str, Any] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": f"{action}{rt.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
        "parameters": parameters,
        "responses": {"200": {"description": "OK", "content": _json_content(schema_name)}},
    }
    if request is not None:
        op["requestBody"] = {"content": request, "required": True}
    return op


def _paths(rt: ResourceType, schema_name: str, *, strategic: bool) -> dict[str, Any]:
    """The collection, item and status paths of one kind, as a real server lists them."""
    prefix = f"/apis/{rt.group}/{rt.version}" if rt.group else f"/api/{rt.version}"
    collection = (
        f"{prefix}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{prefix}/{rt.plural}"
    )
    patch_types = [t for t in _PATCH_TYPES if strategic or "strategic" not in t]
    patch_body = {media: {"schema": _ref(_PATCH)} for media in patch_types}
    item_ops = {
        "get": _operation(rt, "get", schema_name, parameters=[]),
        "put": _operation(
            rt, "put", schema_name, parameters=_WRITE_PARAMETERS, request=_json_content(schema_name)
        ),
        "patch": _operation(rt, "patch", schema_name, parameters=_PATCH_PARAMETERS, request=patch_body),
        "delete": _operation(
            rt,
            "delete",
            _STATUS,
            parameters=[{"name": "dryRun", "in": "query", "schema": {"type": "string"}}],
            request=_json_content(_DELETE_OPTIONS),
        ),
    }
    paths: dict[str, Any] = {
        collection: {
            "get": _operation(rt, "list", schema_name, parameters=[]),
            "post": _operation(
                rt, "post", schema_name, parameters=_WRITE_PARAMETERS, request=_json_content(schema_name)
            ),
        },
        f"{collection}/{{name}}": item_ops,
    }
    if "status" in rt.subresources:
        paths[f"{collection}/{{name}}/status"] = {key: item_ops[key] for key in ("get", "put", "patch")}
    if rt.namespaced:
        paths[f"{prefix}/{rt.plural}"] = {"get": _operation(rt, "list", schema_name, parameters=[])}
    return paths


# ---- server-side field validation
# ---------------------------------------------------------------------------


def _resolve(schema: Mapping[str, Any], schemas: Mapping[str, Any]) -> Mapping[str, Any]:
    while True:
        if "$ref" in schema:
            schema = schemas.get(str(schema["$ref"]).removeprefix(_SCHEMA_PREFIX), {})
        elif len(schema.get("allOf", [])) == 1 and not schema.get("properties"):
            schema = schema["allOf"][0]
        else:
            return schema


def _is_patch_directive(key: str) -> bool:
    # Strategic merge patch directives ($patch, $retainKeys, $setElementOrder/...,
    # $deleteFromPrimitiveList/...)
    return key.startswith("$")


def _known_properties(schema: Mapping[str, Any], structural: bool) -> Mapping[str, Any] | None:
    """The properties an object node declares; None when it takes any key. A built-in untyped object
    (RawExtension, JSON) takes anything; a structural (CRD) object without properties prunes every key."""
    properties = schema.get("properties")
    extra = schema.get("additionalProperties")
    if extra is True or (properties is None and not isinstance(extra, dict) and not structural):
        return None
    known = dict(properties or {})
    if structural and schema.get("x-kubernetes-embedded-resource"):
        known = {**_standard_properties(), **known}
    return known


def _walk(
    value: Any,
    schema: Mapping[str, Any],
    schemas: Mapping[str, Any],
    path: str,
    found: list[str],
    prune: bool,
    structural: bool = False,
) -> None:
    if "$ref" in schema or any("$ref" in sub for sub in schema.get("allOf") or []):
        structural = False  # a reference leads into the built-in schemas (ObjectMeta)
    schema = _resolve(schema, schemas)
    if schema.get("x-kubernetes-preserve-unknown-fields") or value is None:
        return
    if isinstance(value, dict):
        properties = _known_properties(schema, structural)
        if properties is None:
            return
        extra = schema.get("additionalProperties")
        unknown = []
        for key, sub in value.items():
            child = f"{path}.{key}" if path else key
            if _is_patch_directive(key):
                continue
            if key in properties:
                _walk(sub, properties[key], schemas, child, found, prune, structural)
            elif isinstance(extra, dict):
                _walk(sub, extra, schemas, child, found, prune, structural)
            else:
                found.append(child)
                unknown.append(key)
        if prune:
            for key in unknown:
                del value[key]
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            _walk(item, schema["items"], schemas, f"{path}[{index}]", found, prune, structural)


def unknown_fields(rt: ResourceType, obj: Any, *, prune: bool = False) -> list[str]:
    """Paths of fields the kind's schema does not declare (``spec.template.spec.containers[0].foo``).

    With ``prune`` they are also removed from ``obj`` in place, as the apiserver's decoder drops them when
    field validation is not Strict. A custom resource is checked against its CRD's schema, structurally.
    """
    data = builtin_data()
    name = data["kinds"].get(f"{rt.group}/{rt.version}/{rt.kind}")
    found: list[str] = []
    if name is not None:
        _walk(obj, data["schemas"][name], data["schemas"], "", found, prune)
    elif rt.schema:
        _walk(obj, custom_schema(rt), data["schemas"], "", found, prune, structural=True)
    return found


def strict_decoding_message(rt: ResourceType, fields: list[str]) -> str:
    """The apiserver's 400 message for unknown fields under ``fieldValidation=Strict``."""
    detail = ", ".join(f'unknown field "{field}"' for field in fields)
    return (
        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
        f"strict decoding error: {detail}"
    )
