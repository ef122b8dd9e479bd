"""The pure pieces of a takeover: the ownership gpuplan takes of an adopted operand's fields, and the merge
patch that gives an operand back to the operator as it was."""

from __future__ import annotations

from gpuplan.planner.apply.takeover import merge_patch_between, taken_fields
from gpuplan.providers.snapshot import LiveObject, ObjectKey

KEY = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-device-plugin-daemonset")


def live_with(managed: list[dict[str, object]]) -> LiveObject:
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": KEY.name, "namespace": KEY.namespace, "managedFields": managed},
    }
    return LiveObject(KEY, manifest)


def entry(manager: str, fields: dict[str, object], **extra: str) -> dict[str, object]:
    return {"manager": manager, "operation": "Update", "apiVersion": "apps/v1", "fieldsV1": fields, **extra}


def test_every_manager_of_the_object_hands_its_fields_to_one_gpuplan_apply_entry() -> None:
    status = entry("kube-controller-manager", {"f:status": {"f:numberReady": {}}}, subresource="status")
    created = entry("gpu-operator", {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
    helm = entry("helm", {"f:metadata": {"f:labels": {"f:helm.sh/chart": {}}}, "f:spec": {"f:x": {}}})
    entries = taken_fields(live_with([status, created, helm]))
    assert entries[0] == status  # the status stays its controller's
    assert [(e["manager"], e["operation"]) for e in entries[1:]] == [("gpuplan", "Apply")]
    assert entries[1]["fieldsV1"] == {
        "f:metadata": {"f:labels": {"f:app": {}, "f:helm.sh/chart": {}}},
        "f:spec": {"f:x": {}},
    }


def test_the_merge_patch_back_removes_what_gpuplan_added_and_restores_what_it_changed() -> None:
    live = {"labels": {"app": "x", "gpuplan.io/stack": "lab"}, "nodeSelector": {"a": "1"}, "list": [1, 2]}
    target = {"labels": {"app": "x", "helm.sh/chart": "c"}, "nodeSelector": {"a": "2"}, "list": [1]}
    assert merge_patch_between(live, target) == {
        "labels": {"gpuplan.io/stack": None, "helm.sh/chart": "c"},
        "nodeSelector": {"a": "2"},
        "list": [1],
    }
