"""A custom resource's OpenAPI v3 document and field check come from its CRD's ``openAPIV3Schema``."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.sim.api import openapi, registry

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "properties": {
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "opaque": {"type": "object"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "template": {"type": "object", "x-kubernetes-embedded-resource": True, "properties": {}},
            },
        }
    },
}


def crd(schema: dict[str, Any] | None) -> dict[str, Any]:
    version: dict[str, Any] = {"name": "v1", "served": True, "storage": True}
    if schema is not None:
        version["schema"] = {"openAPIV3Schema": schema}
    return {
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [version],
        }
    }


def test_the_published_schema_is_the_crds_with_the_standard_fields() -> None:
    [rt] = registry.from_crd(crd(SCHEMA))
    schema = openapi.custom_schema(rt)
    assert schema["x-kubernetes-group-version-kind"] == [
        {"group": "example.com", "version": "v1", "kind": "Widget"}
    ]
    assert schema["properties"]["spec"] == SCHEMA["properties"]["spec"]
    assert schema["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    body = openapi.OpenApiDocuments(registry.Registry((rt,)), "v1.37.0").document("apis/example.com/v1")
    assert body is not None
    document = json.loads(body)
    assert document["components"]["schemas"]["com.example.v1.Widget"] == schema


def test_unknown_fields_are_found_and_pruned_structurally() -> None:
    [rt] = registry.from_crd(crd(SCHEMA))
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "labels": {"a": "b"}, "bogus": 1},
        "spec": {
            "labels": {"any": "key"},
            "opaque": {"dropped": True},
            "free": {"kept": {"deep": 1}},
            "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "extra": 1},
            "typo": 1,
        },
    }
    found = openapi.unknown_fields(rt, obj, prune=True)
    assert sorted(found) == ["metadata.bogus", "spec.opaque.dropped", "spec.template.extra", "spec.typo"]
    assert obj["spec"] == {
        "labels": {"any": "key"},
        "opaque": {},
        "free": {"kept": {"deep": 1}},
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}},
    }


def test_a_version_without_a_schema_stays_permissive() -> None:
    [rt] = registry.from_crd(crd(None))
    assert openapi.unknown_fields(rt, {"spec": {"anything": 1}}) == []
    assert openapi.custom_schema(rt)["x-kubernetes-preserve-unknown-fields"] is True
