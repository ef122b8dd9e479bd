"""managedFields: the FieldsV1 encoding, Update and Apply ownership, owners() attribution."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.sim.api import managed

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"


def ds(image: str = "plugin:1", env_value: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": "ds",
            "namespace": "kube-system",
            "uid": "u",
            "resourceVersion": "3",
            "labels": {"app": "ds"},
            "finalizers": ["x"],
        },
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "plugin",
                            "image": image,
                            "args": ["--a", "--b"],
                            "env": [{"name": "MODE", "value": env_value}],
                            "ports": [{"containerPort": 9400}],
                            "volumeMounts": [{"name": "dp", "mountPath": "/dp"}],
                        }
                    ],
                    "tolerations": [{"operator": "Exists"}],
                }
            }
        },
        "status": {"numberReady": 1},
    }


def test_fields_v1_uses_the_real_encoding() -> None:
    fields = managed.encode(set(managed.leaves(ds(), "main")))
    container = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"plugin"}']
    assert container["."] == {}
    assert container["f:env"] == {'k:{"name":"MODE"}': {".": {}, "f:name": {}, "f:value": {}}}
    assert container["f:ports"] == {
        'k:{"containerPort":9400,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}
    }
    assert container["f:volumeMounts"] == {
        'k:{"mountPath":"/dp"}': {".": {}, "f:mountPath": {}, "f:name": {}}
    }
    assert container["f:args"] == {}
    assert fields["f:spec"]["f:template"]["f:spec"]["f:tolerations"] == {}
    assert fields["f:metadata"] == {"f:finalizers": {'v:"x"': {}}, "f:labels": {"f:app": {}}}
    assert "f:status" not in fields


def test_decode_inverts_encode() -> None:
    paths = set(managed.leaves(ds()))
    assert managed.decode(managed.encode(paths)) == paths


def test_create_owns_every_set_field() -> None:
    entries = managed.record_update(
        None, ds(), [], manager="kubectl-create", api_version="apps/v1", time=T0, part="main"
    )
    assert len(entries) == 1
    entry = entries[0]
    assert {k: entry[k] for k in ("manager", "operation", "apiVersion", "time", "fieldsType")} == {
        "manager": "kubectl-create",
        "operation": "Update",
        "apiVersion": "apps/v1",
        "time": T0,
        "fieldsType": "FieldsV1",
    }
    assert managed.decode(entry["fieldsV1"]) == set(managed.leaves(ds(), "main", maps=True))


def test_create_entry_matches_what_kubectl_create_gets() -> None:
    """As a real server records `kubectl create cm` and a DaemonSet: added maps carry ".", the label
    selector is atomic, value structs (spec, template) do not."""
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "redis-conf"},
        "data": {"redis.conf": "bind 0.0.0.0"},
    }
    entry = managed.record_update(None, cm, [], manager="kubectl-create", api_version="v1", time=T0)[0]
    assert entry["fieldsV1"] == {"f:data": {".": {}, "f:redis.conf": {}}}
    daemonset = {
        "metadata": {"name": "ds", "labels": {"app": "ds"}},
        "spec": {
            "selector": {"matchLabels": {"app": "ds"}},
            "template": {"metadata": {"labels": {"app": "ds"}}, "spec": {"nodeSelector": {"gpu": "true"}}},
        },
    }
    fields = managed.record_update(
        None, daemonset, [], manager="kubectl-create", api_version="apps/v1", time=T0, part="main"
    )[0]["fieldsV1"]
    assert fields == {
        "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
        "f:spec": {
            "f:selector": {},
            "f:template": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:nodeSelector": {".": {}, "f:gpu": {}}},
            },
        },
    }


def test_update_by_another_manager_takes_only_changed_fields() -> None:
    created = managed.record_update(
        None, ds(), [], manager="kubectl-client-side-apply", api_version="apps/v1", time=T0, part="main"
    )
    edited = managed.record_update(
        ds(),
        ds(image="plugin:2"),
        created,
        manager="kubectl-edit",
        api_version="apps/v1",
        time=T1,
        part="main",
    )
    by_manager = {e["manager"]: managed.decode(e["fieldsV1"]) for e in edited}
    image = ("f:spec", "f:template", "f:spec", "f:containers", 'k:{"name":"plugin"}', "f:image")
    assert by_manager["kubectl-edit"] == {image}
    assert image not in by_manager["kubectl-client-side-apply"]
    obj = {"metadata": {"managedFields": edited}}
    assert managed.owners(obj, '.spec.template.spec.containers[name="plugin"].image') == [
        ("kubectl-edit", "Update", T1)
    ]
    assert managed.owners(obj, ".metadata.labels.app") == [("kubectl-client-side-apply", "Update", T0)]


def test_status_writes_are_recorded_with_subresource() -> None:
    before = ds()
    after = {**before, "status": {"numberReady": 2}}
    entries = managed.record_update(
        before,
        after,
        [],
        manager="kube-controller-manager",
        api_version="apps/v1",
        time=T1,
        subresource="status",
        part="status",
    )
    assert entries[0]["subresource"] == "status"
    assert entries[0]["fieldsV1"] == {"f:status": {"f:numberReady": {}}}


def test_removed_fields_leave_every_set() -> None:
    created = managed.record_update(None, ds(), [], manager="a", api_version="apps/v1", time=T0)
    without_labels = ds()
    del without_labels["metadata"]["labels"]
    entries = managed.record_update(
        ds(), without_labels, created, manager="b", api_version="apps/v1", time=T1
    )
    assert [e["manager"] for e in entries] == ["a"]
    assert ("f:metadata", "f:labels", "f:app") not in managed.decode(entries[0]["fieldsV1"])


def test_entries_are_ordered_apply_first_then_by_time() -> None:
    entries = managed.record_update(None, ds(), [], manager="z-first", api_version="apps/v1", time=T0)
    entries = managed.record_apply(
        ds(),
        ds(image="p:3"),
        entries,
        applied={("f:spec", "f:replicas")},
        manager="gpuplan",
        api_version="apps/v1",
        time=T2,
    )
    entries = managed.record_update(
        ds(image="p:3"), ds(image="p:4"), entries, manager="a-second", api_version="apps/v1", time=T1
    )
    assert [(e["manager"], e["operation"]) for e in entries] == [
        ("gpuplan", "Apply"),
        ("z-first", "Update"),
        ("a-second", "Update"),
    ]


def test_conflicts_only_for_differing_values_owned_by_others() -> None:
    live = ds()
    live["metadata"]["managedFields"] = managed.record_update(
        None, live, [], manager="kubectl-client-side-apply", api_version="apps/v1", time=T0, part="main"
    )
    same = managed.leaves({"spec": ds()["spec"]}, "main")
    assert (
        managed.conflicts(live, same, live["metadata"]["managedFields"], manager="gpuplan", part="main") == []
    )
    different = managed.leaves({"spec": ds(image="plugin:2")["spec"]}, "main")
    found = managed.conflicts(
        live, different, live["metadata"]["managedFields"], manager="gpuplan", part="main"
    )
    assert [(e["manager"], managed.format_path(p)) for e, p in found] == [
        ("kubectl-client-side-apply", '.spec.template.spec.containers[name="plugin"].image')
    ]


def test_reapplying_the_same_fields_keeps_the_entry_unchanged() -> None:
    applied = set(managed.leaves({"spec": ds()["spec"]}))
    first = managed.record_apply(
        None, ds(), [], applied=applied, manager="gpuplan", api_version="apps/v1", time=T0
    )
    second = managed.record_apply(
        ds(), ds(), first, applied=applied, manager="gpuplan", api_version="apps/v1", time=T1
    )
    assert second == first


def test_path_notation_round_trips() -> None:
    for text in (
        '.spec.template.spec.containers[name="x"].image',
        '.spec.containers[name="x"].ports[containerPort=80,protocol="TCP"].name',
        '.metadata.finalizers[="kubernetes"]',
        ".spec.args[2]",
    ):
        assert managed.format_path(managed.parse_path(text)) == text
    assert managed.parse_path("spec.replicas") == ("f:spec", "f:replicas")


def test_owners_of_a_map_include_owners_of_its_fields() -> None:
    created = managed.record_update(None, ds(), [], manager="a", api_version="apps/v1", time=T0)
    relabelled = ds()
    relabelled["metadata"]["labels"]["tier"] = "gpu"
    entries = managed.record_update(ds(), relabelled, created, manager="b", api_version="apps/v1", time=T1)
    assert [o[0] for o in managed.owners({"metadata": {"managedFields": entries}}, ".metadata.labels")] == [
        "b",
        "a",
    ]


def test_owners_of_a_label_key_with_dots() -> None:
    node = {"metadata": {"name": "n", "labels": {"kubernetes.io/hostname": "n"}}}
    created = managed.record_update(None, node, [], manager="kubelet", api_version="v1", time=T0)
    labelled = {
        "metadata": {
            "name": "n",
            "labels": {"kubernetes.io/hostname": "n", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        }
    }
    entries = managed.record_update(
        node, labelled, created, manager="gpu-feature-discovery", api_version="v1", time=T1
    )
    obj = {"metadata": {"managedFields": entries}}
    assert managed.owners(obj, managed.fields("metadata", "labels", "nvidia.com/gpu.product")) == [
        ("gpu-feature-discovery", "Update", T1)
    ]
    assert managed.owners(obj, managed.fields("metadata", "labels", "kubernetes.io/hostname")) == [
        ("kubelet", "Update", T0)
    ]


def test_owner_of_an_atomic_value_owns_what_is_inside_it() -> None:
    obj = ds()
    obj["metadata"]["managedFields"] = managed.record_update(
        None, ds(), [], manager="helm", api_version="apps/v1", time=T0, part="main"
    )
    inside_args = '.spec.template.spec.containers[name="plugin"].args[1]'
    assert managed.owners(obj, inside_args) == [("helm", "Update", T0)]
    inside_selector = ".spec.template.spec.tolerations[0].operator"
    assert managed.owners(obj, inside_selector) == [("helm", "Update", T0)]


def test_keyed_item_elements_keep_the_value_type_once_cached() -> None:
    """item_element caches encodings; equal keys of other JSON types (1, 1.0, True) must not share one."""
    from gpuplan.sim.api.managed import item_element

    assert [item_element(("name",), {"name": v}) for v in (1, True, 1.0, 1)] == [
        'k:{"name":1}',
        'k:{"name":true}',
        'k:{"name":1.0}',
        'k:{"name":1}',
    ]
    assert item_element(("name",), {"name": {"b": [1]}}) == 'k:{"name":{"b":[1]}}'
    assert (
        item_element(("containerPort", "protocol"), {"containerPort": 80})
        == 'k:{"containerPort":80,"protocol":"TCP"}'
    )


def test_leaves_name_every_field_the_same_once_the_field_table_is_full() -> None:
    """Field elements come from a bounded table of names: a map with more keys than it keeps (labels, a
    ConfigMap's data) still gets every leaf, and the table stays bounded."""
    data = {f"key-{index}": str(index) for index in range(managed.FIELD_NAMES_KEPT + 10)}
    obj = {"metadata": {"name": "c", "labels": {"a": "1"}}, "data": data, "spec": {"ports": [{"port": 1}]}}
    for _ in range(2):
        found = managed.leaves(obj)
        assert len(found) == len(data) + 3
        assert found[("f:data", "f:key-7")] == "7"
        assert found[("f:metadata", "f:labels", "f:a")] == "1"
        assert found[("f:spec", "f:ports", 'k:{"port":1,"protocol":"TCP"}', "f:port")] == 1
    assert len(managed._FIELDS) <= managed.FIELD_NAMES_KEPT


def test_an_update_that_keeps_its_fields_gets_the_new_time_and_the_same_set() -> None:
    """A manager rewriting the values it owns (a kubelet's status) keeps its set, re-stamped with the time."""
    from gpuplan.sim.api.managed import decode, encode, record_update

    first = {"status": {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}}
    second = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    mf = record_update(
        None, first, [], manager="kubelet", api_version="v1", time="t1", subresource="status", part="status"
    )
    again = record_update(
        first, second, mf, manager="kubelet", api_version="v1", time="t2", subresource="status", part="status"
    )
    assert [e["time"] for e in again] == ["t2"]
    assert again[0]["fieldsV1"] == encode(decode(mf[0]["fieldsV1"]))
    assert ("f:status", "f:conditions", 'k:{"type":"Ready"}', "f:status") in decode(again[0]["fieldsV1"])
    grown = record_update(
        second,
        {"status": {**second["status"], "podIP": "10.0.0.1"}},
        again,
        manager="kubelet",
        api_version="v1",
        time="t3",
        subresource="status",
        part="status",
    )
    assert ("f:status", "f:podIP") in decode(grown[0]["fieldsV1"]) and grown[0]["time"] == "t3"


def test_leaves_apart_from_another_version_leave_out_the_parts_both_hold_by_one_instance() -> None:
    before = ds()
    before["status"] = {"numberReady": 1, "conditions": [{"type": "A", "status": "True"}]}
    after = {**before, "status": {**before["status"], "numberReady": 2}}  # spec and conditions shared
    assert managed.leaves(after, maps=True, apart_from=before) == {("f:status", "f:numberReady"): 2}
    assert managed.leaves(before, maps=True, apart_from=after) == {("f:status", "f:numberReady"): 1}
    # equal but not the same instance: walked, as without apart_from
    copied = {**after, "spec": json.loads(json.dumps(after["spec"]))}
    spec_leaves = {path for path in managed.leaves(after, maps=True) if path[0] == "f:spec"}
    assert spec_leaves and spec_leaves <= managed.leaves(copied, maps=True, apart_from=before).keys()


def test_without_takes_a_gone_path_and_what_is_under_it_and_nothing_shorter() -> None:
    paths = {("a",), ("a", "b"), ("c",), ("c", "d"), ("c", "d", "e"), ("c", "x")}
    assert managed._without(paths, {("c", "d")}) == {("a",), ("a", "b"), ("c",), ("c", "x")}
    assert managed._without(paths, {("c", "d"), ("a",)}) == {("c",), ("c", "x")}
    assert managed._without(paths, set()) == paths
