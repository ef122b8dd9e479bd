"""Store.patch: the four patch types end to end, server-side apply ownership and conflicts, dry run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import managed, patch, registry, store

PODS = registry.BUILTIN[2]
CONFIGMAPS = registry.BUILTIN[3]
DAEMONSETS = [rt for rt in registry.BUILTIN if rt.kind == "DaemonSet"][0]
IMAGE_PATH = '.spec.template.spec.containers[name="plugin"].image'


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def ds_body(image: str = "plugin:1", **spec_extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "ds", "namespace": "kube-system", "labels": {"app": "ds"}},
        "spec": {
            "selector": {"matchLabels": {"app": "ds"}},
            "template": {
                "metadata": {"labels": {"app": "ds"}},
                "spec": {
                    "containers": [{"name": "plugin", "image": image, "env": [{"name": "A", "value": "1"}]}]
                },
            },
            **spec_extra,
        },
    }


def image_of(obj: dict[str, Any]) -> str:
    image: str = obj["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def test_merge_patch(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}}, manager="m")
    out = s.patch(
        CONFIGMAPS, "default", "c", b'{"data": {"a": null, "c": "3"}}', patch.MERGE, manager="kubectl-patch"
    )
    assert out["data"] == {"b": "2", "c": "3"}


def test_json_patch_and_failed_test(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, manager="m")
    out = s.patch(
        CONFIGMAPS,
        "default",
        "c",
        [{"op": "replace", "path": "/data/a", "value": "9"}],
        patch.JSON_PATCH,
        manager="m",
    )
    assert out["data"] == {"a": "9"}
    with pytest.raises(store.ApiError) as err:
        s.patch(
            CONFIGMAPS,
            "default",
            "c",
            [{"op": "test", "path": "/data/a", "value": "1"}],
            patch.JSON_PATCH,
            manager="m",
        )
    assert err.value.code == 422
    assert s.get(CONFIGMAPS, "default", "c")["data"] == {"a": "9"}


def test_strategic_merge_patch_like_kubectl_set_image(s: store.Store) -> None:
    s.create(DAEMONSETS, ds_body(), manager="kubectl-client-side-apply")
    body = {"spec": {"template": {"spec": {"containers": [{"name": "plugin", "image": "plugin:2"}]}}}}
    out = s.patch(DAEMONSETS, "kube-system", "ds", json.dumps(body), patch.STRATEGIC, manager="kubectl-set")
    assert image_of(out) == "plugin:2"
    assert out["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    assert out["metadata"]["generation"] == 2
    assert managed.owners(out, IMAGE_PATH)[0][0] == "kubectl-set"


def test_patch_of_missing_object_is_404(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.patch(CONFIGMAPS, "default", "nope", {"data": {}}, patch.MERGE, manager="m")
    assert err.value.code == 404


def test_patch_with_stale_resource_version_is_409(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.patch(
            CONFIGMAPS,
            "default",
            "c",
            {"metadata": {"resourceVersion": "1"}, "data": {"a": "1"}},
            patch.MERGE,
            manager="m",
        )
    assert err.value.code == 409


def test_patch_of_status_subresource_touches_only_status(s: store.Store) -> None:
    s.create(DAEMONSETS, ds_body(), manager="m")
    out = s.patch(
        DAEMONSETS,
        "kube-system",
        "ds",
        {"status": {"numberReady": 4}, "spec": {"minReadySeconds": 9}},
        patch.MERGE,
        manager="kube-controller-manager",
        subresource="status",
    )
    assert out["status"]["numberReady"] == 4 and "minReadySeconds" not in out["spec"]
    entry = [e for e in out["metadata"]["managedFields"] if e["manager"] == "kube-controller-manager"][0]
    assert entry["subresource"] == "status"


def test_a_pod_status_write_does_not_compare_the_spec_it_keeps(
    s: store.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuplan.sim.api import validation

    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    s.create(PODS, pod, manager="m")

    def compared(spec: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("the spec was compared")

    monkeypatch.setattr(validation, "_pod_mutable_view", compared)
    out = s.patch(
        PODS,
        "default",
        "p",
        {"status": {"phase": "Running"}},
        patch.MERGE,
        manager="kubelet",
        subresource="status",
    )
    assert out["status"]["phase"] == "Running"


def test_strategic_merge_is_refused_for_custom_resources(s: store.Store) -> None:
    custom = registry.ResourceType(
        "nvidia.com", "v1", "ClusterPolicy", "clusterpolicies", "clusterpolicy", False
    )
    s.registry.register(custom)
    s.create(custom, {"metadata": {"name": "cp"}, "spec": {}}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.patch(custom, None, "cp", {"spec": {"a": 1}}, patch.STRATEGIC, manager="m")
    assert err.value.code == 415


def test_apply_creates_a_missing_object_with_an_apply_entry(s: store.Store) -> None:
    out = s.patch(DAEMONSETS, "kube-system", "ds", json.dumps(ds_body()), patch.APPLY, manager="gpuplan")
    assert out["metadata"]["generation"] == 1
    assert [(e["manager"], e["operation"]) for e in out["metadata"]["managedFields"]] == [
        ("gpuplan", "Apply")
    ]


def test_apply_accepts_yaml(s: store.Store) -> None:
    body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: '1'\n"
    out = s.patch(CONFIGMAPS, "default", "c", body, patch.APPLY, manager="gpuplan")
    assert out["data"] == {"a": "1"}


def test_apply_without_field_manager_is_422(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="")
    assert err.value.code == 422
    assert "fieldManager: Required value" in err.value.message


def test_apply_conflict_with_another_manager(s: store.Store) -> None:
    s.create(DAEMONSETS, ds_body(), manager="kubectl-client-side-apply")
    with pytest.raises(store.ApiError) as err:
        s.patch(DAEMONSETS, "kube-system", "ds", ds_body(image="plugin:2"), patch.APPLY, manager="gpuplan")
    assert err.value.code == 409 and err.value.reason == "Conflict"
    assert err.value.message == (
        'Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using '
        'apps/v1: .spec.template.spec.containers[name="plugin"].image'
    )
    # NewApplyConflict: the details hold the causes only (no name, group or kind)
    assert err.value.status()["details"] == {
        "causes": [
            {
                "reason": "FieldManagerConflict",
                "message": 'conflict with "kubectl-client-side-apply" using apps/v1',
                "field": IMAGE_PATH,
            }
        ]
    }
    assert image_of(s.get(DAEMONSETS, "kube-system", "ds")) == "plugin:1"


def test_an_applier_in_conflict_is_named_without_an_api_version(s: store.Store) -> None:
    """printManager (managedfields/internal/conflict.go) adds `using <apiVersion>` for Update managers
    only; several managers are listed in the order of their identifiers (the applier's sorts first)."""
    s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="helm")
    live = s.get(DAEMONSETS, "kube-system", "ds")
    live["metadata"]["labels"] = {"app": "edited"}
    s.update(DAEMONSETS, live, namespace="kube-system", name="ds", manager="helm")
    changed = ds_body(image="plugin:2")
    changed["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(store.ApiError) as err:
        s.patch(DAEMONSETS, "kube-system", "ds", changed, patch.APPLY, manager="gpuplan")
    assert err.value.message == (
        'Apply failed with 2 conflicts: conflicts with "helm":\n'
        f"- {IMAGE_PATH}\n"
        'conflicts with "helm" using apps/v1:\n'
        "- .metadata.labels.app"
    )
    causes = err.value.status()["details"]["causes"]
    assert sorted((c["message"], c["field"]) for c in causes) == [
        ('conflict with "helm"', IMAGE_PATH),
        ('conflict with "helm" using apps/v1', ".metadata.labels.app"),
    ]


def test_apply_conflicts_are_counted_and_grouped(s: store.Store) -> None:
    s.create(DAEMONSETS, ds_body(), manager="kubectl-client-side-apply")
    changed = ds_body(image="plugin:2")
    changed["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(store.ApiError) as err:
        s.patch(DAEMONSETS, "kube-system", "ds", changed, patch.APPLY, manager="gpuplan")
    assert err.value.message.startswith(
        'Apply failed with 2 conflicts: conflicts with "kubectl-client-side-apply" using apps/v1:\n- '
    )


def test_apply_with_same_values_shares_ownership(s: store.Store) -> None:
    s.create(DAEMONSETS, ds_body(), manager="kubectl-client-side-apply")
    out = s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="gpuplan")
    assert {o[0] for o in managed.owners(out, IMAGE_PATH)} == {"gpuplan", "kubectl-client-side-apply"}


def test_forced_apply_takes_ownership(s: store.Store) -> None:
    s.create(DAEMONSETS, ds_body(), manager="kubectl-client-side-apply")
    out = s.patch(
        DAEMONSETS, "kube-system", "ds", ds_body(image="plugin:2"), patch.APPLY, manager="gpuplan", force=True
    )
    assert image_of(out) == "plugin:2"
    assert [o[:2] for o in managed.owners(out, IMAGE_PATH)] == [("gpuplan", "Apply")]


def test_update_by_another_manager_is_attributed_then_conflicts_with_apply(s: store.Store) -> None:
    s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="gpuplan")
    live = s.get(DAEMONSETS, "kube-system", "ds")
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "plugin:hotfix"
    edited = s.update(DAEMONSETS, live, namespace="kube-system", name="ds", manager="kubectl-edit")
    assert [o[:2] for o in managed.owners(edited, IMAGE_PATH)] == [("kubectl-edit", "Update")]
    with pytest.raises(store.ApiError) as err:
        s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="gpuplan")
    assert 'conflict with "kubectl-edit"' in err.value.message


def test_apply_removes_fields_the_manager_stopped_applying(s: store.Store) -> None:
    s.patch(DAEMONSETS, "kube-system", "ds", ds_body(minReadySeconds=5), patch.APPLY, manager="gpuplan")
    out = s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="gpuplan")
    assert "minReadySeconds" not in out["spec"]


def test_apply_removes_a_keyed_list_item_the_manager_stopped_applying_whole(s: store.Store) -> None:
    """An env entry (listMapKey name) gpuplan no longer applies goes away whole; it once kept a nameless
    {"value": ...} because the key field was removed before the item's other fields were looked up."""
    body = ds_body()
    containers = body["spec"]["template"]["spec"]["containers"]
    containers[0]["env"].append({"name": "B", "value": "2"})
    containers.append({"name": "sidecar", "image": "side:1", "env": [{"name": "C", "value": "3"}]})
    s.patch(DAEMONSETS, "kube-system", "ds", body, patch.APPLY, manager="gpuplan")
    out = s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="gpuplan")
    [container] = out["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "plugin" and container["env"] == [{"name": "A", "value": "1"}]


def test_apply_keeps_fields_another_manager_also_owns(s: store.Store) -> None:
    s.patch(
        CONFIGMAPS,
        "default",
        "c",
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1", "b": "2"}},
        patch.APPLY,
        manager="first",
    )
    s.patch(
        CONFIGMAPS,
        "default",
        "c",
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"b": "2"}},
        patch.APPLY,
        manager="second",
    )
    out = s.patch(
        CONFIGMAPS,
        "default",
        "c",
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}},
        patch.APPLY,
        manager="first",
    )
    assert out["data"] == {"a": "1", "b": "2"}


def test_reapplying_the_same_configuration_is_a_noop(s: store.Store) -> None:
    first = s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="gpuplan")
    again = s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="gpuplan")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]


def test_apply_keyed_list_merges_items_from_two_managers(s: store.Store) -> None:
    s.patch(DAEMONSETS, "kube-system", "ds", ds_body(), patch.APPLY, manager="gpuplan")
    sidecar = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "ds"},
        "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "side:1"}]}}},
    }
    out = s.patch(DAEMONSETS, "kube-system", "ds", sidecar, patch.APPLY, manager="other")
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["plugin", "sidecar"]


@pytest.mark.parametrize(
    "patch_type, body",
    [
        (patch.MERGE, {"spec": {"template": {"spec": {"containers": [{"name": "plugin", "image": "x:9"}]}}}}),
        (
            patch.STRATEGIC,
            {"spec": {"template": {"spec": {"containers": [{"name": "plugin", "image": "x:9"}]}}}},
        ),
        (
            patch.JSON_PATCH,
            [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "x:9"}],
        ),
        (patch.APPLY, ds_body(image="x:9")),
    ],
)
def test_dry_run_patch_answers_without_storing(s: store.Store, patch_type: str, body: Any) -> None:
    s.create(DAEMONSETS, ds_body(), manager="gpuplan")
    rv = s.resource_version
    out = s.patch(
        DAEMONSETS, "kube-system", "ds", body, patch_type, manager="gpuplan", dry_run=True, force=True
    )
    assert image_of(out) == "x:9"
    assert s.resource_version == rv
    assert image_of(s.get(DAEMONSETS, "kube-system", "ds")) == "plugin:1"


def test_dry_run_create_update_delete_store_nothing(s: store.Store) -> None:
    with s.watch(CONFIGMAPS, resource_version=str(s.resource_version)) as w:
        rv = s.resource_version
        answer = s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m", dry_run=True)
        assert answer["metadata"]["uid"] and s.list(CONFIGMAPS).items == []
        with pytest.raises(store.ApiError):
            s.create(CONFIGMAPS, {"metadata": {"name": "Bad"}}, manager="m", dry_run=True)
        s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m")
        rv = s.resource_version
        assert s.update(
            CONFIGMAPS,
            {"metadata": {"name": "c"}, "data": {"a": "1"}},
            namespace="default",
            name="c",
            manager="m",
            dry_run=True,
        )["data"] == {"a": "1"}
        assert s.delete(CONFIGMAPS, "default", "c", dry_run=True)["metadata"]["name"] == "c"
        assert s.resource_version == rv
        assert "data" not in s.get(CONFIGMAPS, "default", "c")
        first = w.next(timeout=5)
        assert first is not None and first["type"] == "ADDED"
        assert w.next(timeout=0.01) is None
