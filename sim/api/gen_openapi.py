"""Generate ``openapi_data/schemas.json.gz``: OpenAPI v3 component schemas for the kinds the simulator serves.

Run ``python -m gpuplan.sim.api.gen_openapi`` after changing the built-in kinds (registry.BUILTIN). It reads
the JSON schemas that the kubernetes-validate package ships for Kubernetes v1.37 (a test dependency only,
hence the committed output) and writes, gzip-compressed, only the definitions that the served kinds reach
through ``$ref``, converted to the OpenAPI v3 dialect a real apiserver serves: refs point to
``#/components/schemas/``, ``type: [string, null]`` becomes ``type: string``; descriptions are kept, as a real
server serves them, for ``kubectl explain``. :mod:`gpuplan.sim.api.openapi` reads the file.
"""

from __future__ import annotations

import gzip
import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.sim.api.registry import Registry

SCHEMA_VERSION = "v1.37.0-local"
_REF_PREFIX = "#/$defs/"
OUTPUT = Path(__file__).parent / "openapi_data" / "schemas.json.gz"
# Kinds that appear in request or response bodies of the served resources without being resources
# themselves: pods/eviction takes a policy/v1 Eviction, DELETE takes DeleteOptions, errors are Status.
_EXTRA_ROOTS = (
    "io.k8s.api.policy.v1.Eviction",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
)
# Keys whose value is a single sub-schema or a list / map of sub-schemas; everything else is a keyword.
_SCHEMA_LISTS = ("allOf", "oneOf", "anyOf")


def load_definitions() -> dict[str, Any]:
    """The kubernetes-validate ``_definitions.json`` of :data:`SCHEMA_VERSION`."""
    root = resources.files("kubernetes_validate") / "kubernetes-json-schema" / SCHEMA_VERSION
    definitions: dict[str, Any] = json.loads((root / "_definitions.json").read_text())["$defs"]
    return definitions


def convert(schema: Any) -> Any:
    """One JSON-schema node in OpenAPI v3 form (structure-aware: property names are never keywords)."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("$schema", "$id"):
            continue
        if key == "$ref":
            out[key] = "#/components/schemas/" + str(value).removeprefix(_REF_PREFIX)
        elif key == "type" and isinstance(value, list):
            kinds = [kind for kind in value if kind != "null"]
            if kinds:
                out[key] = kinds[0]
        elif key == "properties":
            out[key] = {name: convert(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = convert(value)
        elif key in _SCHEMA_LISTS:
            out[key] = [convert(sub) for sub in value]
        else:
            out[key] = value
    return out


def _strip_type_enums(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    # kubernetes-validate pins apiVersion and kind with an enum; a real apiserver's schema does not, and
    # the pin would wrongly reject the same object under another served version.
    for field in ("apiVersion", "kind"):
        prop = schema.get("properties", {}).get(field)
        if isinstance(prop, dict):
            prop.pop("enum", None)
    if name == "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
        return {"type": "string", "format": "int-or-string", "x-kubernetes-int-or-string": True}
    if name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
        return {"type": "string", "format": "quantity"}
    return schema


def _references(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                found.add(value.removeprefix("#/components/schemas/"))
            else:
                found |= _references(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= _references(item)
    return found


def _gvk_roots(definitions: dict[str, Any], registry: Registry) -> dict[str, str]:
    """Definition name of every served built-in kind, keyed ``group/version/Kind``."""
    wanted = {(rt.group, rt.version, rt.kind) for rt in registry.all()}
    roots: dict[str, str] = {}
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            key = (gvk.get("group", ""), gvk.get("version", ""), gvk.get("kind", ""))
            if key in wanted and not name.startswith("io.k8s.api.events."):
                roots["/".join(key)] = name
    return roots


def build(definitions: dict[str, Any], registry: Registry) -> dict[str, Any]:
    """``{"kinds": {"group/version/Kind": definition name}, "schemas": {name: converted schema}}``."""
    kinds = _gvk_roots(definitions, registry)
    pending = list(kinds.values()) + list(_EXTRA_ROOTS)
    schemas: dict[str, Any] = {}
    while pending:
        name = pending.pop()
        if name in schemas:
            continue
        schemas[name] = _strip_type_enums(name, convert(definitions[name]))
        pending.extend(_references(schemas[name]) - set(schemas))
    return {
        "source": f"kubernetes-validate {SCHEMA_VERSION}",
        "kinds": dict(sorted(kinds.items())),
        "schemas": dict(sorted(schemas.items())),
    }


def main() -> int:
    data = build(load_definitions(), Registry.builtin())
    payload = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    # mtime=0 keeps the output byte-identical across runs, so a regenerated file shows no spurious diff.
    OUTPUT.write_bytes(gzip.compress(payload, compresslevel=9, mtime=0))
    print(
        f"wrote {OUTPUT} ({len(data['kinds'])} kinds, {len(data['schemas'])} schemas, "
        f"{OUTPUT.stat().st_size} bytes)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
