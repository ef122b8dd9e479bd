"""FakeKubernetes as the engine's provider: writes held to a resourceVersion, deletes that cascade, lists by
label and field selector, watches from a list's version, and the node operations of a driver rollout."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.errors import ConflictError, ProviderError
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.protocols import ANY_VERSION, DriftDetected
from gpuplan.providers.snapshot import ObjectKey

NS = "gpu-operator"
CM = ObjectKey("v1", "ConfigMap", NS, "settings")
DS = ObjectKey("apps/v1", "DaemonSet", NS, "plugin")


def config_map(data: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CM.name, "namespace": NS},
        "data": data,
    }


def daemonset(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DS.name, "namespace": NS, "labels": {"app": "plugin"}},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}},
    }


def pod(name: str, node: str, labels: dict[str, str], owner: str | None = None) -> dict[str, Any]:
    refs = [{"kind": "DaemonSet", "name": "plugin", "uid": owner}] if owner else []
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels, "ownerReferences": refs},
        "spec": {"nodeName": node},
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


def test_create_gives_identity_and_a_second_create_conflicts() -> None:
    cluster = FakeKubernetes()
    created = cluster.create(config_map({"a": "1"}))
    assert created.uid and created.resource_version and created.generation == 1
    with pytest.raises(ConflictError) as raised:
        cluster.create(config_map({"a": "2"}))
    assert isinstance(raised.value, DriftDetected) and raised.value.expected is None
    live = cluster.read(CM)
    assert live is not None and live.manifest["data"] == {"a": "1"}


def test_apply_at_the_read_version_writes_and_at_a_stale_one_raises_drift_and_writes_nothing() -> None:
    cluster = FakeKubernetes()
    first = cluster.apply(daemonset("plugin:1"), expected_rv=None)  # the plan saw it absent
    cluster.put({**first.manifest, "status": {"numberReady": 1}})  # the controller's status write
    status_moved = cluster.read(DS)
    assert status_moved is not None and status_moved.generation == 1
    with pytest.raises(DriftDetected) as raised:
        cluster.apply(daemonset("plugin:2"), expected_rv=first.resource_version)
    assert (raised.value.expected, raised.value.found) == (
        first.resource_version,
        status_moved.resource_version,
    )
    unchanged = cluster.read(DS)
    assert unchanged is not None and unchanged.manifest == status_moved.manifest

    second = cluster.apply(daemonset("plugin:2"), expected_rv=status_moved.resource_version)
    assert second.uid == first.uid and second.generation == 2
    assert second.manifest["status"] == {"numberReady": 1}  # apply leaves the status to the controller
    with pytest.raises(DriftDetected):
        cluster.apply(daemonset("plugin:3"), expected_rv=None)  # absent at plan time, there now
    assert cluster.apply(daemonset("plugin:2"), expected_rv=ANY_VERSION).generation == 2  # same spec


def test_apply_sets_what_gpuplan_sends_drops_what_it_stopped_sending_and_keeps_the_rest() -> None:
    cluster = FakeKubernetes(nodes=[node("n1", **{"kubernetes.io/hostname": "n1"})])
    state = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {"upgrade": "cordoned"}},
    }
    cluster.apply({**state, "metadata": {**state["metadata"], "annotations": {"initial": "true"}}})
    cluster.cordon("n1")  # another write, through another path: kept
    live = cluster.apply(state)
    assert live.labels == {"kubernetes.io/hostname": "n1", "upgrade": "cordoned"}  # the kubelet's label stays
    assert live.annotations == {} and live.manifest["spec"] == {"unschedulable": True}


def test_dry_run_answers_without_storing() -> None:
    cluster = FakeKubernetes()
    answer = cluster.create(config_map({"a": "1"}), dry_run=True)
    assert answer.manifest["data"] == {"a": "1"} and cluster.read(CM) is None


def test_delete_cascades_to_owned_objects_unless_orphaned_and_is_held_to_the_version() -> None:
    cluster = FakeKubernetes()
    owner = cluster.create(daemonset("plugin:1"))
    cluster.put(pod("plugin-a", "n1", {"app": "plugin"}, owner=owner.uid))
    moved = cluster.put({**owner.manifest, "status": {"numberReady": 1}})
    with pytest.raises(DriftDetected):
        cluster.delete(DS, expected_rv=owner.resource_version)
    gone = cluster.delete(DS, expected_rv=moved.resource_version)
    assert gone is not None and gone.uid == owner.uid
    assert cluster.read(DS) is None and len(cluster.list_pods()) == 0
    assert cluster.delete(DS) is None  # already gone: what the caller expected

    owner = cluster.create(daemonset("plugin:1"))
    cluster.put(pod("plugin-b", "n1", {"app": "plugin"}, owner=owner.uid))
    cluster.delete(DS, propagation="Orphan")
    assert [p.key.name for p in cluster.list_pods()] == ["plugin-b"]


def test_replace_recreates_the_object_as_a_new_one() -> None:
    cluster = FakeKubernetes()
    old = cluster.create(daemonset("plugin:1"))
    new = cluster.replace(daemonset("plugin:2"), expected_rv=old.resource_version)
    assert new.uid != old.uid and new.generation == 1
    assert new.manifest["spec"]["template"]["spec"]["containers"][0]["image"] == "plugin:2"
    cluster.wait_gone(DS, uid=old.uid, timeout=5)  # the old one is gone; the new one does not count
    with pytest.raises(ProviderError, match="still exists"):
        cluster.wait_gone(DS, uid=new.uid, timeout=5)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=plugin", ["a", "b", "c"]),
        ("app==plugin,tier=gpu", ["a", "b"]),
        ("app=plugin,tier!=gpu", ["c"]),
        ("tier in (gpu, cpu)", ["a", "b", "d"]),
        ("tier notin (gpu)", ["c", "d"]),
        ("tier", ["a", "b", "d"]),
        ("!tier", ["c"]),
        ("app=plugin,tier in (gpu,cpu),!missing", ["a", "b"]),
    ],
)
def test_label_selectors_equality_and_set_based(selector: str, expected: list[str]) -> None:
    cluster = FakeKubernetes()
    cluster.put(pod("a", "n1", {"app": "plugin", "tier": "gpu"}))
    cluster.put(pod("b", "n2", {"app": "plugin", "tier": "gpu"}))
    cluster.put(pod("c", "n1", {"app": "plugin"}))
    cluster.put(pod("d", "n2", {"app": "other", "tier": "cpu"}))
    assert [p.key.name for p in cluster.list_pods(label_selector=selector)] == expected


def test_field_selectors_the_engine_uses_and_an_unsupported_one_refused() -> None:
    cluster = FakeKubernetes(nodes=[node("n1"), node("n2")])
    cluster.put(pod("a", "n1", {}))
    cluster.put(pod("b", "n2", {}))
    assert [p.key.name for p in cluster.list_pods(field_selector="spec.nodeName=n2")] == ["b"]
    assert [p.key.name for p in cluster.list_pods(namespace="default")] == []
    listing = cluster.list_objects("v1", "Node", field_selector="metadata.name=n1")
    assert [n.key.name for n in listing] == ["n1"]
    with pytest.raises(ProviderError, match="field label not supported"):
        cluster.list_pods(field_selector="spec.hostname=n1")


def test_watch_yields_what_changed_after_the_list_and_returns_at_its_timeout() -> None:
    cluster = FakeKubernetes()
    cluster.put(pod("a", "n1", {"app": "plugin"}))
    listing = cluster.list_pods(label_selector="app=plugin")
    cluster.put(pod("b", "n1", {"app": "plugin"}))
    cluster.put(pod("other", "n1", {"app": "other"}))
    cluster.delete_pod(ObjectKey("v1", "Pod", NS, "a"))
    events = list(
        cluster.watch("v1", "Pod", label_selector="app=plugin", resource_version=listing.resource_version)
    )
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("ADDED", "b"), ("DELETED", "a")]
    assert events[-1].resource_version == cluster.list_pods().resource_version
    assert cluster.clock() == 0.0

    quiet = cluster.watch("v1", "Pod", resource_version=cluster.list_pods().resource_version, timeout=7)
    assert list(quiet) == [] and cluster.clock() == 7.0  # nothing happened for the watch's whole timeout


def test_cordon_evict_and_delete_pod() -> None:
    cluster = FakeKubernetes(nodes=[node("n1")])
    cordoned = cluster.cordon("n1")
    assert cordoned.manifest["spec"]["unschedulable"] is True
    assert cluster.cordon("n1").resource_version == cordoned.resource_version  # idempotent
    assert "unschedulable" not in cluster.cordon("n1", on=False).manifest["spec"]
    with pytest.raises(ProviderError):
        cluster.cordon("absent")

    train, infer = ObjectKey("v1", "Pod", NS, "train"), ObjectKey("v1", "Pod", NS, "infer")
    cluster.put(pod("train", "n1", {}))
    cluster.put(pod("infer", "n1", {}))
    cluster.block_eviction(train)
    assert cluster.evict(train) is False and cluster.read(train) is not None  # the budget said no
    assert cluster.evict(train) is True and cluster.read(train) is None
    assert cluster.evict(train) is True  # already gone
    assert cluster.delete_pod(infer) is True and cluster.delete_pod(infer) is False
