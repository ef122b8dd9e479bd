"""Patch bodies: JSON merge patch, JSON patch, strategic merge patch and the apply merge, as pure
functions."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.sim.api import patch


def pod_spec() -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {
                    "name": "plugin",
                    "image": "plugin:1",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                    "ports": [{"containerPort": 9400, "name": "metrics"}],
                    "volumeMounts": [{"name": "dp", "mountPath": "/var/lib/kubelet/device-plugins"}],
                },
                {"name": "sidecar", "image": "side:1"},
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
            "volumes": [{"name": "dp", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
        },
        "metadata": {"name": "p", "finalizers": ["a"]},
    }


def test_merge_patch_merges_maps_and_deletes_nulls() -> None:
    result = patch.merge_patch({"a": {"b": 1, "c": 2}, "d": [1, 2]}, {"a": {"b": None, "e": 3}, "d": [3]})
    assert result == {"a": {"c": 2, "e": 3}, "d": [3]}


def test_merge_patch_replaces_non_objects() -> None:
    assert patch.merge_patch({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}


def test_json_patch_operations() -> None:
    doc = {"a": {"b": [1, 2]}, "c": "x"}
    ops = [
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "replace", "path": "/c", "value": "y"},
        {"op": "copy", "from": "/c", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e~1f"},
        {"op": "remove", "path": "/a/b/1"},
        {"op": "test", "path": "/e~1f", "value": "y"},
    ]
    assert patch.json_patch(doc, ops) == {"a": {"b": [0, 2, 3]}, "c": "y", "e/f": "y"}
    assert doc == {"a": {"b": [1, 2]}, "c": "x"}


def test_json_patch_failed_test_is_422() -> None:
    with pytest.raises(patch.PatchError) as err:
        patch.json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
    assert err.value.code == 422 and str(err.value) == "testing value /a failed: test failed"


def test_json_patch_missing_path_is_422() -> None:
    with pytest.raises(patch.PatchError) as err:
        patch.json_patch({"a": 1}, [{"op": "replace", "path": "/b", "value": 2}])
    assert err.value.code == 422


def test_json_patch_unknown_op_is_400() -> None:
    with pytest.raises(patch.PatchError) as err:
        patch.json_patch({}, [{"op": "frobnicate", "path": "/a"}])
    assert err.value.code == 400


def test_strategic_merge_keys_containers_by_name() -> None:
    result = patch.strategic_merge_patch(
        pod_spec(), {"spec": {"containers": [{"name": "plugin", "image": "plugin:2"}]}}
    )
    assert result is not None
    containers = result["spec"]["containers"]
    assert [c["name"] for c in containers] == ["plugin", "sidecar"]
    assert containers[0]["image"] == "plugin:2" and containers[0]["env"][0]["name"] == "A"


def test_strategic_merge_env_by_name_and_new_items_appended() -> None:
    body = {
        "spec": {
            "containers": [
                {"name": "plugin", "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]}
            ]
        }
    }
    result = patch.strategic_merge_patch(pod_spec(), body)
    assert result is not None
    assert result["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "B", "value": "20"},
        {"name": "C", "value": "3"},
    ]


def test_strategic_merge_ports_by_container_port_and_mounts_by_path() -> None:
    body = {
        "spec": {
            "containers": [
                {
                    "name": "plugin",
                    "ports": [{"containerPort": 9400, "protocol": "TCP"}],
                    "volumeMounts": [{"mountPath": "/run/nvidia", "name": "run"}],
                }
            ]
        }
    }
    result = patch.strategic_merge_patch(pod_spec(), body)
    assert result is not None
    plugin = result["spec"]["containers"][0]
    assert plugin["ports"] == [{"containerPort": 9400, "name": "metrics", "protocol": "TCP"}]
    assert [m["mountPath"] for m in plugin["volumeMounts"]] == [
        "/var/lib/kubelet/device-plugins",
        "/run/nvidia",
    ]


def test_strategic_merge_tolerations_are_replaced() -> None:
    body = {"spec": {"tolerations": [{"key": "other", "operator": "Exists"}]}}
    result = patch.strategic_merge_patch(pod_spec(), body)
    assert result is not None and result["spec"]["tolerations"] == [{"key": "other", "operator": "Exists"}]


def test_strategic_merge_delete_directive_removes_item() -> None:
    body = {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}
    result = patch.strategic_merge_patch(pod_spec(), body)
    assert result is not None and [c["name"] for c in result["spec"]["containers"]] == ["plugin"]


def test_strategic_merge_replace_directive_on_list_and_map() -> None:
    body = {
        "spec": {
            "volumes": [{"name": "only", "emptyDir": {}}, {"$patch": "replace"}],
            "nodeSelector": {"$patch": "replace", "zone": "a"},
        }
    }
    result = patch.strategic_merge_patch(pod_spec(), body)
    assert result is not None
    assert result["spec"]["volumes"] == [{"name": "only", "emptyDir": {}}]
    assert result["spec"]["nodeSelector"] == {"zone": "a"}


def test_strategic_merge_null_deletes_field() -> None:
    result = patch.strategic_merge_patch(pod_spec(), {"spec": {"nodeSelector": None}})
    assert result is not None and "nodeSelector" not in result["spec"]


def test_strategic_merge_finalizers_merge_as_set() -> None:
    result = patch.strategic_merge_patch(pod_spec(), {"metadata": {"finalizers": ["b", "a"]}})
    assert result is not None and result["metadata"]["finalizers"] == ["a", "b"]


def test_strategic_merge_delete_from_primitive_list() -> None:
    result = patch.strategic_merge_patch(
        pod_spec(), {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}
    )
    assert result is not None and result["metadata"]["finalizers"] == []


def test_strategic_merge_set_element_order_as_kubectl_sends_it() -> None:
    body = {
        "spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "plugin"}],
            "containers": [{"name": "plugin", "image": "plugin:3"}],
        }
    }
    result = patch.strategic_merge_patch(pod_spec(), body)
    assert result is not None
    assert [c["name"] for c in result["spec"]["containers"]] == ["sidecar", "plugin"]
    assert not any(k.startswith("$") for k in result["spec"])


def test_strategic_merge_retain_keys() -> None:
    original = {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}}
    result = patch.strategic_merge_patch(
        original, {"strategy": {"$retainKeys": ["type"], "type": "OnDelete"}}
    )
    assert result == {"strategy": {"type": "OnDelete"}}


def test_decode_refuses_strategic_merge_for_custom_resources() -> None:
    with pytest.raises(patch.PatchError) as err:
        patch.decode(b"{}", patch.STRATEGIC, strategic_ok=False)
    assert err.value.code == 415 and err.value.reason == "UnsupportedMediaType"


def test_decode_reads_yaml_for_apply_and_rejects_bad_json() -> None:
    assert patch.decode("a: 1\nb: [x]\n", patch.APPLY) == {"a": 1, "b": ["x"]}
    with pytest.raises(patch.PatchError) as err:
        patch.decode(b"{not json", patch.MERGE)
    assert err.value.code == 400


def test_decode_requires_a_list_for_json_patch() -> None:
    with pytest.raises(patch.PatchError) as err:
        patch.decode({"op": "add"}, patch.JSON_PATCH)
    assert err.value.code == 400


def test_apply_merge_merges_keyed_items_and_keeps_status() -> None:
    live = {**pod_spec(), "status": {"phase": "Running"}}
    applied = {
        "spec": {"containers": [{"name": "plugin", "image": "plugin:9"}, {"name": "new", "image": "n"}]},
        "status": {"phase": "Failed"},
    }
    merged = patch.apply_merge(live, applied, "main")
    assert [c["name"] for c in merged["spec"]["containers"]] == ["plugin", "sidecar", "new"]
    assert merged["spec"]["containers"][0]["image"] == "plugin:9"
    assert merged["spec"]["containers"][0]["env"] == live["spec"]["containers"][0]["env"]
    assert merged["status"] == {"phase": "Running"}


def test_remove_paths_drops_fields_and_items() -> None:
    doc = pod_spec()
    patch.remove_paths(
        doc,
        [
            ("f:spec", "f:containers", 'k:{"name":"sidecar"}'),
            ("f:spec", "f:nodeSelector"),
            ("f:metadata", "f:finalizers", 'v:"a"'),
        ],
    )
    assert [c["name"] for c in doc["spec"]["containers"]] == ["plugin"]
    assert "nodeSelector" not in doc["spec"]
    assert "finalizers" not in doc["metadata"]  # an emptied list is omitted, as the API types marshal it
