"""delete: the returned object, preconditions, propagation through ownerReferences, finalizers, namespaces."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import registry, store

NAMESPACES = registry.BUILTIN[0]
PODS = registry.BUILTIN[2]
CONFIGMAPS = registry.BUILTIN[3]
DAEMONSETS = [rt for rt in registry.BUILTIN if rt.kind == "DaemonSet"][0]


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def make_daemonset(s: store.Store, name: str = "ds", namespace: str = "default") -> dict[str, Any]:
    body = {
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            },
        },
    }
    return s.create(DAEMONSETS, body, namespace=namespace, manager="m")


def make_pod(
    s: store.Store, name: str, owner: dict[str, Any] | None, namespace: str = "default"
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return s.create(
        PODS,
        {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        namespace=namespace,
        manager="m",
    )


def pod_names(s: store.Store) -> list[str]:
    return [p["metadata"]["name"] for p in s.list(PODS).items]


def test_delete_returns_the_deleted_object(s: store.Store) -> None:
    created = s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, manager="m")
    deleted = s.delete(CONFIGMAPS, "default", "c")
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"] and deleted["data"] == {"a": "1"}
    with pytest.raises(store.ApiError) as err:
        s.get(CONFIGMAPS, "default", "c")
    assert err.value.code == 404


def test_delete_missing_is_404(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.delete(CONFIGMAPS, "default", "nope")
    assert err.value.code == 404


def test_uid_precondition_mismatch_is_409(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.delete(CONFIGMAPS, "default", "c", preconditions={"uid": "other"})
    assert err.value.code == 409
    assert err.value.message.startswith(
        'Operation cannot be fulfilled on configmaps "c": Precondition failed: UID in precondition: other'
    )


def test_resource_version_precondition(s: store.Store) -> None:
    created = s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.delete(CONFIGMAPS, "default", "c", preconditions={"resourceVersion": "1"})
    assert err.value.code == 409
    s.delete(
        CONFIGMAPS,
        "default",
        "c",
        preconditions={
            "resourceVersion": created["metadata"]["resourceVersion"],
            "uid": created["metadata"]["uid"],
        },
    )


def test_background_deletes_dependents_after_the_owner(s: store.Store) -> None:
    ds = make_daemonset(s)
    make_pod(s, "ds-a", ds)
    make_pod(s, "ds-b", ds)
    make_pod(s, "standalone", None)
    with (
        s.watch(PODS, resource_version=str(s.resource_version)) as pods_watch,
        s.watch(DAEMONSETS, resource_version=str(s.resource_version)) as ds_watch,
    ):
        s.delete(DAEMONSETS, "default", "ds")
        ds_event, pod_event = ds_watch.next(timeout=5), pods_watch.next(timeout=5)
        assert ds_event is not None and pod_event is not None
        assert int(ds_event["object"]["metadata"]["resourceVersion"]) < int(
            pod_event["object"]["metadata"]["resourceVersion"]
        )
    assert pod_names(s) == ["standalone"]


def test_foreground_deletes_dependents_before_the_owner(s: store.Store) -> None:
    ds = make_daemonset(s)
    make_pod(s, "ds-a", ds)
    with (
        s.watch(PODS, resource_version=str(s.resource_version)) as pods_watch,
        s.watch(DAEMONSETS, resource_version=str(s.resource_version)) as ds_watch,
    ):
        s.delete(DAEMONSETS, "default", "ds", propagation="Foreground")
        ds_event, pod_event = ds_watch.next(timeout=5), pods_watch.next(timeout=5)
        assert ds_event is not None and pod_event is not None
        assert int(pod_event["object"]["metadata"]["resourceVersion"]) < int(
            ds_event["object"]["metadata"]["resourceVersion"]
        )
    assert pod_names(s) == []


def test_orphan_keeps_dependents_without_the_owner_reference(s: store.Store) -> None:
    ds = make_daemonset(s)
    make_pod(s, "ds-a", ds)
    s.delete(DAEMONSETS, "default", "ds", propagation="Orphan")
    orphan = s.get(PODS, "default", "ds-a")
    assert "ownerReferences" not in orphan["metadata"]
    assert all(
        "f:ownerReferences" not in e["fieldsV1"].get("f:metadata", {})
        for e in orphan["metadata"]["managedFields"]
    )


def test_cascade_is_recursive(s: store.Store) -> None:
    owner = s.create(CONFIGMAPS, {"metadata": {"name": "root"}}, manager="m")
    middle = make_pod(s, "middle", owner)
    make_pod(s, "leaf", middle)
    s.delete(CONFIGMAPS, "default", "root")
    assert pod_names(s) == []


def test_unknown_propagation_policy_is_400(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}}, manager="m")
    with pytest.raises(store.ApiError) as err:
        s.delete(CONFIGMAPS, "default", "c", propagation="Sideways")
    assert err.value.code == 400


def test_finalizers_hold_deletion_until_removed(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c", "finalizers": ["example.com/hold"]}}, manager="m")
    marked = s.delete(CONFIGMAPS, "default", "c")
    assert marked["metadata"]["deletionTimestamp"]
    still = s.get(CONFIGMAPS, "default", "c")
    assert still["metadata"]["deletionTimestamp"] == marked["metadata"]["deletionTimestamp"]
    still["metadata"]["finalizers"] = []
    s.update(CONFIGMAPS, still, namespace="default", name="c", manager="m")
    with pytest.raises(store.ApiError) as err:
        s.get(CONFIGMAPS, "default", "c")
    assert err.value.code == 404


def test_namespace_deletion_deletes_its_objects(s: store.Store) -> None:
    s.create(NAMESPACES, {"metadata": {"name": "gpu-operator"}}, manager="m")
    make_daemonset(s, "driver", "gpu-operator")
    s.create(CONFIGMAPS, {"metadata": {"name": "cfg"}}, namespace="gpu-operator", manager="m")
    s.create(CONFIGMAPS, {"metadata": {"name": "keep"}}, manager="m")
    s.delete(NAMESPACES, None, "gpu-operator")
    assert [c["metadata"]["name"] for c in s.list(CONFIGMAPS).items] == ["keep"]
    assert s.list(DAEMONSETS).items == []
    with pytest.raises(store.ApiError):
        s.create(CONFIGMAPS, {"metadata": {"name": "late"}}, namespace="gpu-operator", manager="m")


def test_delete_collection_by_selector(s: store.Store) -> None:
    for n in range(4):
        s.create(CONFIGMAPS, {"metadata": {"name": f"c{n}", "labels": {"odd": str(n % 2)}}}, manager="m")
    deleted = s.delete_collection(CONFIGMAPS, namespace="default", label_selector="odd=1")
    assert [d["metadata"]["name"] for d in deleted] == ["c1", "c3"]
    assert [c["metadata"]["name"] for c in s.list(CONFIGMAPS).items] == ["c0", "c2"]


def test_evict_deletes_the_pod_and_answers_success(s: store.Store) -> None:
    make_pod(s, "p", None)
    assert s.evict("default", "p")["status"] == "Success"
    assert pod_names(s) == []


def test_bind_sets_node_once(s: store.Store) -> None:
    make_pod(s, "p", None)
    bound = s.bind("default", "p", "node-1")
    assert bound["spec"]["nodeName"] == "node-1"
    assert [p["metadata"]["name"] for p in s.list(PODS, field_selector="spec.nodeName=node-1").items] == ["p"]
    with pytest.raises(store.ApiError) as err:
        s.bind("default", "p", "node-2")
    assert err.value.code == 409 and 'already assigned to node "node-1"' in err.value.message


def test_dependents_go_when_the_owners_last_finalizer_is_removed(s: store.Store) -> None:
    owner = s.create(
        CONFIGMAPS, {"metadata": {"name": "owner", "finalizers": ["example.com/hold"]}}, manager="m"
    )
    make_pod(s, "dependent", owner)
    s.delete(CONFIGMAPS, "default", "owner")
    assert pod_names(s) == ["dependent"]
    s.patch(
        CONFIGMAPS,
        "default",
        "owner",
        {"metadata": {"finalizers": None}},
        "application/merge-patch+json",
        manager="m",
    )
    assert pod_names(s) == []
