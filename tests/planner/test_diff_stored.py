"""The diff compares objects as a real API server stores them, so a plan converges on a real cluster.

A kube-apiserver decodes a built-in object into Go structs and encodes it back: an empty string field tagged
``omitempty`` is dropped (``{name: X, value: ""}`` is stored as ``{name: X}``, k8s.io/api core/v1 types.go
EnvVar) and every quantity is rewritten in canonical form (``0.1`` -> ``100m``, ``2e9`` -> ``2G``, ``1.5Gi``
-> ``1536Mi``; resource lists rounded up to 1m, pkg/apis/core/v1 defaults.go SetDefaults_ResourceList).
``stored`` below is that round trip, written out for the fields these tests touch.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuplan.planner.diff import fields as diff
from gpuplan.planner.diff import normalize
from gpuplan.planner.spec import model as spec

HEADER = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
SHARING_AND_DRIVER = """\
  devicePlugin:
    config: {timeSlicing: {replicas: 4}}
    resources: {limits: {cpu: "0.5", memory: 2e9}, requests: {cpu: .1, memory: 1.5Gi}}
"""
CANONICAL = {"0.5": "500m", "2e9": "2G", "0.1": "100m", ".1": "100m", "1.5Gi": "1536Mi", "0.1m": "1m"}


def rendered(body: str) -> dict[str, dict[str, Any]]:
    loaded = spec.parse_spec(HEADER + body, filename="gpustack.yaml")
    return {str(o.address): copy.deepcopy(dict(o.manifest)) for o in loaded.desired_objects()}


def stored(obj: Any, field: str | None = None) -> Any:
    """What the server stores for ``obj`` as far as these tests go: no empty env value, canonical
    quantities, server metadata."""
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if field == "env-item" and key == "value" and value == "":
                continue
            if field in ("limits", "requests") and isinstance(value, str):
                out[key] = CANONICAL.get(value, value)
            else:
                out[key] = stored(value, "env-item" if field == "env" else key)
        return out
    if isinstance(obj, list):
        return [stored(item, field) for item in obj]
    return obj


def with_server_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    live = stored(obj)
    live["metadata"] = {**live["metadata"], "uid": "u-1", "resourceVersion": "7", "generation": 1}
    return live


def old_record(obj: Any, field: str | None = None) -> Any:
    """A record of gpuplan before it left empty values out: every variable without a value had `value: ""`."""
    if isinstance(obj, dict):
        out = {key: old_record(value, key) for key, value in obj.items()}
        if field == "env-item" and "valueFrom" not in out and "value" not in out:
            out["value"] = ""
        return out
    if isinstance(obj, list):
        return [old_record(item, "env-item" if field == "env" else field) for item in obj]
    return obj


@pytest.mark.parametrize("address", sorted(a for a in rendered(SHARING_AND_DRIVER) if "/DaemonSet/" in a))
def test_an_object_recorded_with_empty_values_is_unchanged_against_the_stored_object(address: str) -> None:
    """A state record written by an older gpuplan (`value: ""`) against the live object (no value) and the
    desired one (no value, spelled quantities): no intent, no drift, nothing to apply."""
    desired = rendered(SHARING_AND_DRIVER)[address]
    recorded = old_record(desired)
    live = with_server_metadata(desired)
    assert diff.three_way(desired, recorded, live) == diff.ThreeWay((), (), ())


def test_a_record_written_with_empty_values_and_a_new_rendering_are_one_intent() -> None:
    objects = rendered(SHARING_AND_DRIVER)
    plugin = next(
        obj for address, obj in objects.items() if "DaemonSet" in address and "device-plugin" in address
    )
    assert diff.diff(old_record(plugin), plugin) == ()


def test_a_variable_set_to_a_value_outside_gpuplan_is_still_drift() -> None:
    desired = rendered(SHARING_AND_DRIVER)
    address = next(a for a in desired if a.startswith("driver/DaemonSet/"))
    live = with_server_metadata(desired[address])
    manager = live["spec"]["template"]["spec"]["initContainers"][0]
    for item in manager["env"]:
        if item["name"] == "DRAIN_POD_SELECTOR_LABEL":
            item["value"] = "app=batch"
    result = diff.three_way(desired[address], old_record(desired[address]), live)
    path = (
        "spec.template.spec.initContainers[name=k8s-driver-manager].env[name=DRAIN_POD_SELECTOR_LABEL].value"
    )
    assert [(c.path, c.before, c.after) for c in result.drift] == [(path, None, "app=batch")]
    assert [(c.path, c.before, c.after) for c in result.live_vs_desired] == [(path, "app=batch", None)]


def test_quantities_spelled_otherwise_by_the_server_are_no_change() -> None:
    """desired 0.5 / 2e9 / .1 / 1.5Gi, stored 500m / 2G / 100m / 1536Mi, and a record written from the
    server's answer (an adopted object) with the stored spellings: no change either way."""
    desired = rendered(SHARING_AND_DRIVER)
    address = next(a for a in desired if a.startswith("devicePlugin/DaemonSet/"))
    live = with_server_metadata(desired[address])
    resources = live["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {
        "limits": {"cpu": "500m", "memory": "2G"},
        "requests": {"cpu": "100m", "memory": "1536Mi"},
    }
    assert diff.three_way(desired[address], copy.deepcopy(desired[address]), live) == diff.ThreeWay(
        (), (), ()
    )
    assert diff.three_way(desired[address], stored(desired[address]), live) == diff.ThreeWay((), (), ())


def test_a_changed_quantity_shows_each_side_as_written() -> None:
    before = {"apiVersion": "v1", "kind": "Pod", "spec": {"overhead": {"cpu": "100m", "memory": "1Gi"}}}
    after = {"apiVersion": "v1", "kind": "Pod", "spec": {"overhead": {"cpu": "0.2", "memory": "1024Mi"}}}
    assert [(c.path, c.before, c.after) for c in diff.diff(before, after)] == [
        ("spec.overhead.cpu", "100m", "0.2")
    ]


@pytest.mark.parametrize(
    ("field", "first", "second", "same"),
    [
        ("limits", "0.1m", "1m", True),  # a resource list is rounded up to 1m
        ("requests", "1n", "1m", True),
        ("requests", "1.5Gi", "1610612736", True),
        ("requests", "1E", "1e18", True),
        ("requests", "1", "1001m", False),
        ("podFixed", "1e3", "1k", True),  # RuntimeClass overhead: canonical, not rounded
        ("podFixed", "0.1m", "1m", False),
        ("sizeLimit", "1Gi", "1073741824", True),
        ("divisor", "1000m", "1", True),
        ("replicas", "1", "1.0", False),  # not a quantity field
    ],
)
def test_quantity_fields_compare_by_stored_value(field: str, first: str, second: str, same: bool) -> None:
    def obj(value: str) -> dict[str, Any]:
        leaf: dict[str, Any] = {"cpu": value} if field in ("limits", "requests", "podFixed") else value  # type: ignore[assignment]
        return {"apiVersion": "v1", "kind": "X", "spec": {"a": {field: leaf}}}

    assert (diff.diff(obj(first), obj(second)) == ()) is same


def test_empty_strings_count_where_the_server_keeps_them() -> None:
    """A map entry ("" is a value), a claim's storageClassName (a *string: "" is no class), and a custom
    resource (stored as written) keep their empty strings; a built-in struct field does not."""
    label = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"labels": {"a": ""}}, "data": {"k": ""}}
    assert [c.path for c in diff.diff(label, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})] == [
        "data",
        "metadata.labels",
    ]
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "spec": {"storageClassName": ""}}
    assert [c.path for c in diff.diff(claim, {**claim, "spec": {}})] == ["spec.storageClassName"]
    custom = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "spec": {"driver": {"repository": ""}}}
    assert [c.path for c in diff.diff(custom, {**custom, "spec": {"driver": {}}})] == [
        "spec.driver.repository"
    ]
    toleration = {"apiVersion": "apps/v1", "kind": "DaemonSet", "spec": {"t": {"value": "", "key": "k"}}}
    assert diff.diff(toleration, {**toleration, "spec": {"t": {"key": "k"}}}) == ()


def test_an_adopted_crd_is_not_rewritten_for_the_conversion_the_server_defaulted() -> None:
    """A record written from the server's answer (adoption, a delete) drops `conversion: {strategy: None}`,
    so the plan does not remove a field the server puts back; another strategy is the author's."""
    desired = rendered("")
    address = next(a for a in desired if "/CustomResourceDefinition/" in a)
    live = with_server_metadata(desired[address])
    live["spec"]["conversion"] = {"strategy": "None"}
    recorded = normalize.normalize(live)
    assert "conversion" not in recorded["spec"]
    assert diff.three_way(desired[address], recorded, live).live_vs_desired == ()
    live["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"]}}
    assert normalize.normalize(live)["spec"]["conversion"]["strategy"] == "Webhook"
