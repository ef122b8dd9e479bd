"""A custom resource's columns in ``kubectl get``: the CRD's ``additionalPrinterColumns``, as the
apiextensions-apiserver's table convertor serves them, and its status written through ``/status``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.sim.api import table_custom, tables

pytestmark = pytest.mark.kubectl
KubectlFn = Any  # the conftest fixture: run(*args, check=True, input=None) -> CompletedProcess[str]

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Cluster",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
                "additionalPrinterColumns": [
                    {
                        "name": "Ready",
                        "type": "string",
                        "jsonPath": '.status.conditions[?(@.type=="Ready")].status',
                    },
                    {"name": "Count", "type": "integer", "jsonPath": ".status.count"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
            }
        ],
    },
}


def _apply(kubectl: KubectlFn, tmp_path: Path, name: str, obj: dict[str, Any]) -> None:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    kubectl("apply", "-f", str(path))


def test_kubectl_get_prints_the_crd_columns_and_a_status_patch_fills_them(
    kubectl: KubectlFn, tmp_path: Path
) -> None:
    _apply(kubectl, tmp_path, "crd.json", CRD)
    _apply(
        kubectl,
        tmp_path,
        "cr.json",
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
    )
    header, row = (line.split() for line in kubectl("get", "widgets").stdout.strip().splitlines())
    assert header == ["NAME", "READY", "COUNT", "AGE"]
    assert row[0] == "w" and len(row) == 2  # no status yet: the paths find nothing, kubectl prints blanks
    status = {
        "status": {
            "count": 3,
            "conditions": [{"type": "Drifted", "status": "False"}, {"type": "Ready", "status": "True"}],
        }
    }
    kubectl("patch", "widget", "w", "--subresource=status", "--type=merge", "-p", json.dumps(status))
    header, row = (line.split() for line in kubectl("get", "widgets").stdout.strip().splitlines())
    assert row[:3] == ["w", "True", "3"]
    assert row[3].endswith("s")  # an age, not the timestamp


def test_a_version_without_columns_is_served_name_and_age() -> None:
    columns = table_custom.columns_of({"name": "v1"})
    table = tables.table("example.com", "widgets", [{"metadata": {"name": "w"}}], columns=columns)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Age"]


def test_cells_follow_the_column_types() -> None:
    columns = json.dumps(
        [
            {"name": "N", "type": "integer", "jsonPath": ".status.n"},
            {"name": "B", "type": "boolean", "jsonPath": ".status.b"},
            {"name": "S", "type": "string", "jsonPath": ".status.items[*].name"},
            {"name": "I", "type": "string", "jsonPath": ".status.items[1].name"},
            {"name": "D", "type": "date", "jsonPath": ".status.when"},
        ]
    )
    obj = {
        "metadata": {"name": "w"},
        "status": {"n": 2.0, "b": True, "items": [{"name": "a"}, {"name": "b"}], "when": "not a time"},
    }
    cells = tables.table("example.com", "widgets", [obj], columns=columns)["rows"][0]["cells"]
    assert cells == ["w", 2, True, "a", "b", "<invalid>"]
