"""The fake's opt-in DaemonSet controller: one Ready pod per targeted node, the status the health gates read,
RollingUpdate and OnDelete template changes, pods that cannot start, and garbage collection."""

from __future__ import annotations

from typing import Any

from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.fake_daemonsets import DaemonSetController
from gpuplan.providers.snapshot import ObjectKey

NS = "gpu-operator"
DS = ObjectKey("apps/v1", "DaemonSet", NS, "plugin")


def daemonset(image: str, *, on_delete: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DS.name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": "plugin"}},
            "updateStrategy": {"type": "OnDelete" if on_delete else "RollingUpdate"},
            "template": {
                "metadata": {"labels": {"app": "plugin"}},
                "spec": {
                    "nodeSelector": {"gpu": "true"},
                    "containers": [{"name": "main", "image": image}],
                },
            },
        },
    }


def cluster(**controller: Any) -> FakeKubernetes:
    nodes = [
        {"metadata": {"name": name, "labels": {"gpu": gpu}}, "spec": {}}
        for name, gpu in (("gpu-1", "true"), ("gpu-2", "true"), ("cpu-1", "false"))
    ]
    return FakeKubernetes(nodes=nodes, controller=DaemonSetController(**controller))


def images_by_node(fake: FakeKubernetes) -> dict[str, str]:
    return {
        p.manifest["spec"]["nodeName"]: p.manifest["spec"]["containers"][0]["image"]
        for p in fake.list_pods(label_selector="app=plugin")
    }


def test_one_ready_pod_per_targeted_node_and_the_status_the_controller_writes() -> None:
    fake = cluster()
    created = fake.create(daemonset("plugin:1"))
    pods = fake.list_pods(namespace=NS, label_selector="app=plugin")
    assert sorted(p.manifest["spec"]["nodeName"] for p in pods) == ["gpu-1", "gpu-2"]
    for p in pods:
        assert p.labels["pod-template-generation"] == "1" and p.labels["controller-revision-hash"]
        assert p.metadata["ownerReferences"][0]["uid"] == created.uid
        assert p.manifest["status"]["conditions"] == [{"type": "Ready", "status": "True"}]
    live = fake.read(DS)
    assert live is not None and live.generation == 1  # a status write is no new generation
    assert live.manifest["status"] == {
        "currentNumberScheduled": 2,
        "desiredNumberScheduled": 2,
        "numberMisscheduled": 0,
        "numberReady": 2,
        "numberAvailable": 2,
        "numberUnavailable": 0,
        "updatedNumberScheduled": 2,
        "observedGeneration": 1,
    }


def test_rolling_update_replaces_the_pods_and_on_delete_waits_for_their_deletion() -> None:
    fake = cluster()
    fake.create(daemonset("plugin:1"))
    fake.apply(daemonset("plugin:2"))
    assert images_by_node(fake) == {"gpu-1": "plugin:2", "gpu-2": "plugin:2"}

    fake.apply(daemonset("plugin:3", on_delete=True))
    assert images_by_node(fake) == {"gpu-1": "plugin:2", "gpu-2": "plugin:2"}
    live = fake.read(DS)
    assert live is not None and live.manifest["status"]["updatedNumberScheduled"] == 0
    [old] = fake.list_pods(field_selector="spec.nodeName=gpu-1")
    assert fake.delete_pod(old.key)
    assert images_by_node(fake) == {"gpu-1": "plugin:3", "gpu-2": "plugin:2"}
    [new] = fake.list_pods(field_selector="spec.nodeName=gpu-1")
    assert new.key != old.key and new.uid != old.uid


def test_a_template_that_cannot_start_gives_pods_that_are_not_ready_with_the_reason() -> None:
    fake = cluster(failing=lambda spec: "CrashLoopBackOff" if "broken" in str(spec) else None)
    fake.create(daemonset("plugin:broken"))
    for p in fake.list_pods(label_selector="app=plugin"):
        status = p.manifest["status"]
        assert status["conditions"] == [{"type": "Ready", "status": "False"}]
        assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "CrashLoopBackOff"}}
    live = fake.read(DS)
    assert live is not None and live.manifest["status"]["numberReady"] == 0


def test_pods_follow_the_nodes_and_go_with_their_daemonset() -> None:
    fake = cluster()
    fake.create(daemonset("plugin:1"))
    fake.put_node({"metadata": {"name": "gpu-2", "labels": {"gpu": "false"}}, "spec": {}})
    fake.reconcile()  # a node's change is no write of the engine's: the test runs the controller
    assert images_by_node(fake) == {"gpu-1": "plugin:1"}
    fake.delete(DS)
    assert len(fake.list_pods()) == 0


def test_without_a_controller_nothing_happens_until_a_test_reconciles() -> None:
    fake = FakeKubernetes(nodes=[{"metadata": {"name": "gpu-1", "labels": {"gpu": "true"}}}])
    fake.create(daemonset("plugin:1"))
    assert len(fake.list_pods()) == 0
    fake.reconcile()
    assert images_by_node(fake) == {"gpu-1": "plugin:1"}
