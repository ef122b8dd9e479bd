"""Three-way diffs (intent, drift, live vs desired) and drift attribution from managedFields.

live-device-plugin-drifted.yaml is the applied DaemonSet after `kubectl set image` and `kubectl edit`, with
the managedFields a real API server writes for them (ownership of the changed fields moves to the editor).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.planner.diff import fields as diff

DATA = Path(__file__).parent / "test_diff_data"
IMAGE = "spec.template.spec.containers[name=nvidia-device-plugin].image"
TOLERATIONS = "spec.template.spec.tolerations"


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / name).read_text())
    return loaded


@pytest.fixture
def desired() -> dict[str, Any]:
    return load("desired-device-plugin.yaml")


def test_nothing_changed_is_a_noop(desired: dict[str, Any]) -> None:
    result = diff.three_way(desired, copy.deepcopy(desired), load("live-device-plugin.yaml"))
    assert result == diff.ThreeWay((), (), ())
    assert result.is_noop


def test_intent_only_when_the_spec_changed(desired: dict[str, Any]) -> None:
    recorded = copy.deepcopy(desired)
    desired["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.21.0"
    result = diff.three_way(desired, recorded, load("live-device-plugin.yaml"))
    assert result.drift == ()
    assert [(c.path, c.after) for c in result.intent] == [(IMAGE, "nvcr.io/nvidia/k8s-device-plugin:v0.21.0")]
    assert [(c.path, c.before, c.after) for c in result.live_vs_desired] == [
        (IMAGE, "nvcr.io/nvidia/k8s-device-plugin:v0.20.1", "nvcr.io/nvidia/k8s-device-plugin:v0.21.0")
    ]


def test_drift_only_when_someone_edited_the_live_object(desired: dict[str, Any]) -> None:
    result = diff.three_way(desired, copy.deepcopy(desired), load("live-device-plugin-drifted.yaml"))
    assert result.intent == ()
    drift = {c.path: c for c in result.drift}
    assert set(drift) == {IMAGE, TOLERATIONS}
    assert drift[IMAGE].before.endswith(":v0.20.1") and drift[IMAGE].after.endswith(":v0.17.0")
    assert drift[IMAGE].managers == ("kubectl-set",)
    assert drift[TOLERATIONS].after == [{"operator": "Exists"}]
    assert drift[TOLERATIONS].managers == ("kubectl-edit",)
    # apply must undo exactly the drift
    assert [(c.path, c.before, c.after) for c in result.live_vs_desired] == [
        (c.path, c.after, c.before) for c in result.drift
    ]


def test_intent_and_drift_together(desired: dict[str, Any]) -> None:
    recorded = copy.deepcopy(desired)
    desired["spec"]["template"]["spec"]["priorityClassName"] = "gpu-critical"
    result = diff.three_way(desired, recorded, load("live-device-plugin-drifted.yaml"))
    assert [c.path for c in result.intent] == ["spec.template.spec.priorityClassName"]
    assert {c.path for c in result.drift} == {IMAGE, TOLERATIONS}
    assert {c.path for c in result.live_vs_desired} == {
        IMAGE,
        TOLERATIONS,
        "spec.template.spec.priorityClassName",
    }


def test_the_user_reverting_the_drift_in_the_spec_leaves_nothing_to_apply(desired: dict[str, Any]) -> None:
    """Drift the spec now agrees with: shown as drift and intent, but apply has nothing to do."""
    recorded = copy.deepcopy(desired)
    desired["spec"]["template"]["spec"]["containers"][0]["image"] = "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"
    desired["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    result = diff.three_way(desired, recorded, load("live-device-plugin-drifted.yaml"))
    assert {c.path for c in result.intent} == {IMAGE, TOLERATIONS}
    assert {c.path for c in result.drift} == {IMAGE, TOLERATIONS}
    assert result.live_vs_desired == ()


def test_field_dropped_from_the_spec_is_removed_by_apply(desired: dict[str, Any]) -> None:
    """A field gpuplan owned and no longer renders: the live view must still show it, or apply forgets it."""
    recorded = copy.deepcopy(desired)
    del desired["spec"]["template"]["spec"]["runtimeClassName"]
    result = diff.three_way(desired, recorded, load("live-device-plugin.yaml"))
    assert [(c.path, c.op) for c in result.intent] == [("spec.template.spec.runtimeClassName", "remove")]
    assert [(c.path, c.before, c.after) for c in result.live_vs_desired] == [
        ("spec.template.spec.runtimeClassName", "nvidia", None)
    ]


def test_create_delete_and_deleted_outside(desired: dict[str, Any]) -> None:
    live = load("live-device-plugin.yaml")
    create = diff.three_way(desired, None, None)
    assert {c.path for c in create.live_vs_desired} == {"apiVersion", "kind", "metadata", "spec"}
    assert create.drift == ()
    delete = diff.three_way(None, copy.deepcopy(desired), live)
    assert {c.op for c in delete.live_vs_desired} == {"remove"} and delete.drift == ()
    gone = diff.three_way(desired, copy.deepcopy(desired), None)
    assert {(c.path, c.op) for c in gone.drift} == {
        (k, "remove") for k in ("apiVersion", "kind", "metadata", "spec")
    }
    assert {c.path for c in gone.live_vs_desired} == {"apiVersion", "kind", "metadata", "spec"}


def test_other_managers_fields_are_not_drift(desired: dict[str, Any]) -> None:
    """A label or env var another manager added is theirs (server-side apply would not remove it either)."""
    live = load("live-device-plugin.yaml")
    live["metadata"]["labels"]["team"] = "ml"
    live["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "EXTRA", "value": "1"})
    result = diff.three_way(desired, copy.deepcopy(desired), live)
    assert result == diff.ThreeWay((), (), ())


# --------------------------------------------------------------------------------------------- attribution


def test_attribute_reads_fieldsv1_newest_first() -> None:
    live = load("live-device-plugin-drifted.yaml")
    owners = diff.attribute(
        live,
        [
            IMAGE,
            TOLERATIONS,
            'metadata.labels["gpuplan.io/stack"]',
            "spec.template.spec.containers[name=nvidia-device-plugin].env[name=NODE_NAME].valueFrom.fieldRef.fieldPath",
            "spec.template.spec.volumes[name=device-plugin]",
            "spec.selector.matchLabels.app",
            "spec.template.spec.hostNetwork",
        ],
    )
    assert owners[IMAGE] == ["kubectl-set"]
    assert owners[TOLERATIONS] == ["kubectl-edit"]
    assert owners['metadata.labels["gpuplan.io/stack"]'] == ["gpuplan"]
    # f:fieldRef: {} is a leaf: gpuplan owns the whole fieldRef and so every field below it
    assert owners[
        "spec.template.spec.containers[name=nvidia-device-plugin].env[name=NODE_NAME]"
        ".valueFrom.fieldRef.fieldPath"
    ] == ["gpuplan"]
    assert owners["spec.template.spec.volumes[name=device-plugin]"] == ["gpuplan"]
    assert owners["spec.selector.matchLabels.app"] == ["gpuplan"]  # f:selector: {} (atomic)
    assert owners["spec.template.spec.hostNetwork"] == []


def test_attribute_lists_co_owners_newest_first_and_skips_status() -> None:
    live = load("live-device-plugin.yaml")
    live["metadata"]["managedFields"].insert(
        0,
        {
            "manager": "helm",
            "operation": "Update",
            "apiVersion": "apps/v1",
            "time": "2026-11-29T12:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:spec": {
                    "f:template": {
                        "f:spec": {
                            "f:containers": {'k:{"name":"nvidia-device-plugin"}': {".": {}, "f:image": {}}}
                        }
                    }
                }
            },
        },
    )
    owners = diff.attribute(live, [IMAGE, "status.numberReady"])
    assert owners[IMAGE] == ["helm", "gpuplan"]
    assert owners["status.numberReady"] == []  # the status entry is a subresource write


def test_attribute_matches_multi_field_keys() -> None:
    """Container ports are listMapKeys (containerPort, protocol): k:{"containerPort":53,"protocol":"UDP"}."""
    live = {
        "metadata": {
            "managedFields": [
                {
                    "manager": "gpuplan",
                    "operation": "Apply",
                    "time": "2026-11-29T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:spec": {
                            "f:containers": {
                                'k:{"name":"dns"}': {
                                    "f:ports": {
                                        'k:{"containerPort":53,"protocol":"UDP"}': {".": {}, "f:name": {}}
                                    }
                                }
                            }
                        }
                    },
                }
            ]
        }
    }
    owners = diff.attribute(
        live,
        [
            "spec.containers[name=dns].ports[containerPort=53].name",
            "spec.containers[name=dns].ports[containerPort=54].name",
        ],
    )
    assert owners == {
        "spec.containers[name=dns].ports[containerPort=53].name": ["gpuplan"],
        "spec.containers[name=dns].ports[containerPort=54].name": [],
    }


def test_attribute_reads_set_items_by_value_and_list_items_by_index() -> None:
    """``v:<json>`` names an item of a set-like list by its value; ``i:<n>`` an item by position."""
    live = {
        "metadata": {
            "finalizers": ["gpuplan.io/cleanup", "kubernetes.io/pvc-protection"],
            "managedFields": [
                {
                    "manager": "gpuplan",
                    "operation": "Apply",
                    "time": "2026-11-29T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:finalizers": {'v:"gpuplan.io/cleanup"': {}}}},
                },
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "time": "2026-11-29T10:01:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:finalizers": {".": {}, 'v:"kubernetes.io/pvc-protection"': {}}},
                        "f:spec": {"f:rules": {"i:1": {"f:verbs": {}}}},
                    },
                },
            ],
        }
    }
    owners = diff.attribute(
        live,
        [
            "metadata.finalizers[0]",
            "metadata.finalizers[1]",
            "metadata.finalizers",
            "spec.rules[1].verbs",
            "spec.rules[0]",
        ],
    )
    assert owners == {
        "metadata.finalizers[0]": ["gpuplan"],
        "metadata.finalizers[1]": ["kube-controller-manager"],
        "metadata.finalizers": ["kube-controller-manager", "gpuplan"],
        "spec.rules[1].verbs": ["kube-controller-manager"],
        "spec.rules[0]": [],
    }


def test_attribute_without_managed_fields_is_empty() -> None:
    assert diff.attribute({"metadata": {}}, [IMAGE]) == {IMAGE: []}
