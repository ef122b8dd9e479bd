"""The DaemonSet controller against the store: placement, pods as the real controller makes them, rolling
updates one node at a time, OnDelete, and the status counters at each stage."""

from __future__ import annotations

import re
import threading
from typing import Any

from gpuplan.sim.api.store import Event
from gpuplan.sim.controllers.daemonset import revision_hash

TEMPLATE_CHANGE = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}}}


def test_one_pod_per_matching_node_made_like_the_real_controller(ds_env: Any) -> None:
    """Two nodes match the nodeSelector, one does not: two pods, each pinned to its node."""
    for name, gpu in (("n1", "yes"), ("n2", "yes"), ("n3", "no")):
        ds_env.add_node(name, {"gpu": gpu})
    ds = ds_env.create_ds(
        spec={
            "nodeSelector": {"gpu": "yes"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
    )
    ds_env.settle()
    by_node = ds_env.pods_by_node()
    assert sorted(by_node) == ["n1", "n2"]
    pod = by_node["n1"][0]
    assert re.fullmatch(r"ds-[bcdfghjklmnpqrstvwxz2456789]{5}", pod["metadata"]["name"])
    assert pod["metadata"]["generateName"] == "ds-"
    assert pod["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "ds",
            "uid": ds["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    labels = pod["metadata"]["labels"]
    assert labels["app"] == "ds" and labels["pod-template-generation"] == "1"
    assert labels["controller-revision-hash"] == revision_hash(ds)
    assert pod["spec"]["nodeName"] == "n1"
    assert pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
    }
    keys = {(t.get("key"), t.get("effect")) for t in pod["spec"]["tolerations"]}
    assert ("nvidia.com/gpu", "NoSchedule") in keys
    for auto in ("not-ready", "unreachable"):
        assert (f"node.kubernetes.io/{auto}", "NoExecute") in keys
    for auto in ("disk-pressure", "memory-pressure", "pid-pressure", "unschedulable"):
        assert (f"node.kubernetes.io/{auto}", "NoSchedule") in keys
    status = ds_env.ds_status()
    assert status["desiredNumberScheduled"] == 2 and status["currentNumberScheduled"] == 2
    assert status["observedGeneration"] == 1 and status["numberMisscheduled"] == 0


def test_required_node_affinity_operators_and_match_fields(ds_env: Any) -> None:
    """In / NotIn / Exists / DoesNotExist on labels, matchFields on metadata.name; terms are ORed."""
    ds_env.add_node("a", {"zone": "z1", "gpu": "1"})
    ds_env.add_node("b", {"zone": "z2", "gpu": "1", "skip": "x"})
    ds_env.add_node("c", {"zone": "z3"})
    ds_env.add_node("d", {"zone": "z9"})
    terms = [
        {
            "matchExpressions": [
                {"key": "zone", "operator": "In", "values": ["z1", "z2"]},
                {"key": "gpu", "operator": "Exists"},
                {"key": "skip", "operator": "DoesNotExist"},
            ]
        },
        {"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["z1", "z2", "z9"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["d"]}]},
    ]
    ds_env.create_ds(
        spec={
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
                }
            }
        }
    )
    ds_env.settle()
    assert sorted(ds_env.pods_by_node()) == ["a", "c", "d"]


def test_taints_tolerations_and_cordoned_nodes(ds_env: Any) -> None:
    """Untolerated NoSchedule keeps new pods off; a toleration lets them on; cordoned nodes still get one."""
    gpu_taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ds_env.add_node("tainted", taints=[gpu_taint])
    ds_env.add_node("cordoned", unschedulable=True)
    ds_env.add_node("plain")
    ds_env.create_ds("plain-ds")
    ds_env.create_ds(
        "tolerant",
        spec={
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
            ]
        },
    )
    ds_env.settle()
    assert sorted(ds_env.pods_by_node("plain-ds")) == ["cordoned", "plain"]
    assert sorted(ds_env.pods_by_node("tolerant")) == ["cordoned", "plain", "tainted"]


def test_no_schedule_taint_keeps_a_running_pod_but_no_execute_evicts_it(ds_env: Any) -> None:
    ds_env.add_node("n1")
    ds_env.add_node("n2")
    ds_env.create_ds()
    ds_env.settle()
    ds_env.patch_node("n1", {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}})
    ds_env.patch_node("n2", {"spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}})
    ds_env.settle()
    assert sorted(ds_env.pods_by_node()) == ["n1"]
    status = ds_env.ds_status()
    # the NoSchedule node no longer counts as desired, and its pod as misscheduled, as in the real status
    assert status["desiredNumberScheduled"] == 0 and status["numberMisscheduled"] == 1


def test_nodes_joining_leaving_and_stopping_to_match(ds_env: Any) -> None:
    ds_env.add_node("n1", {"gpu": "yes"})
    ds_env.create_ds(spec={"nodeSelector": {"gpu": "yes"}})
    ds_env.settle()
    ds_env.add_node("n2", {"gpu": "yes"})
    ds_env.settle()
    assert sorted(ds_env.pods_by_node()) == ["n1", "n2"]
    ds_env.patch_node("n1", {"metadata": {"labels": {"gpu": None}}})
    ds_env.settle()
    assert sorted(ds_env.pods_by_node()) == ["n2"]
    ds_env.store.delete(ds_env.nodes_rt, None, "n2")
    ds_env.settle()
    assert ds_env.pods() == []
    assert ds_env.ds_status()["desiredNumberScheduled"] == 0


def test_deleted_and_failed_pods_are_replaced(ds_env: Any) -> None:
    ds_env.add_node("n1")
    ds_env.add_node("n2")
    ds_env.create_ds()
    ds_env.settle()
    first = ds_env.pods_by_node()
    ds_env.store.delete(ds_env.pods_rt, "default", first["n1"][0]["metadata"]["name"])
    failed = first["n2"][0]["metadata"]["name"]
    ds_env.store.patch(
        ds_env.pods_rt,
        "default",
        failed,
        {"status": {"phase": "Failed"}},
        "application/merge-patch+json",
        manager="kubelet",
        subresource="status",
    )
    ds_env.settle()
    now = ds_env.pods_by_node()
    assert len(now["n1"]) == 1 and len(now["n2"]) == 1
    assert now["n1"][0]["metadata"]["name"] != first["n1"][0]["metadata"]["name"]
    assert now["n2"][0]["metadata"]["name"] != failed


def test_status_counts_readiness_at_each_stage(manual_env: Any) -> None:
    for name in ("n1", "n2", "n3"):
        manual_env.add_node(name)
    manual_env.create_ds()
    manual_env.settle()
    status = manual_env.ds_status()
    assert (
        status["desiredNumberScheduled"],
        status["currentNumberScheduled"],
        status["numberReady"],
        status["numberUnavailable"],
        status["updatedNumberScheduled"],
    ) == (3, 3, 0, 3, 3)
    assert "numberAvailable" not in status, "omitempty when 0, as the real API serialises it"
    pods = manual_env.pods_by_node()
    manual_env.kubelet.set_ready(("default", pods["n1"][0]["metadata"]["name"]), True)
    manual_env.settle()
    status = manual_env.ds_status()
    assert (status["numberReady"], status["numberAvailable"], status["numberUnavailable"]) == (1, 1, 2)


def _ready_all(env: Any) -> None:
    for pod in env.pods():
        env.kubelet.set_ready(("default", pod["metadata"]["name"]), True)
    env.settle()


def test_rolling_update_replaces_one_node_at_a_time(manual_env: Any) -> None:
    """maxUnavailable 1: one old pod goes, and the next only once the new one is Ready."""
    for name in ("n1", "n2", "n3"):
        manual_env.add_node(name)
    ds = manual_env.create_ds(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}})
    manual_env.settle()
    _ready_all(manual_env)
    old_hash = revision_hash(ds)
    manual_env.patch_ds("ds", TEMPLATE_CHANGE)
    manual_env.settle()
    for step in range(1, 4):
        pods = manual_env.pods()
        new = [p for p in pods if p["metadata"]["labels"]["controller-revision-hash"] != old_hash]
        old = [p for p in pods if p["metadata"]["labels"]["controller-revision-hash"] == old_hash]
        assert (len(new), len(old)) == (step, 3 - step)
        status = manual_env.ds_status()
        assert status["observedGeneration"] == 2
        assert status["updatedNumberScheduled"] == step and status["numberUnavailable"] == 1
        unready = [p for p in new if p.get("status", {}).get("phase") != "Running"]
        assert len(unready) == 1 and unready[0]["metadata"]["labels"]["pod-template-generation"] == "2"
        manual_env.kubelet.set_ready(("default", unready[0]["metadata"]["name"]), True)
        manual_env.settle()
    status = manual_env.ds_status()
    assert status["updatedNumberScheduled"] == 3 and status["numberAvailable"] == 3


def test_rolling_update_never_has_more_unavailable_than_allowed(ds_env: Any) -> None:
    """Watched through store events: with maxUnavailable 1 no moment has two nodes without a Ready pod;
    with 50% of 3 nodes (rounded up to 2) two nodes do go at once."""
    for name in ("n1", "n2", "n3"):
        ds_env.add_node(name)
    ds_env.create_ds("one", strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}})
    ds_env.create_ds("half", strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "50%"}})
    ds_env.settle()
    worst: dict[str, int] = {"one": 0, "half": 0}
    ready: dict[str, dict[str, bool]] = {"one": {}, "half": {}}
    lock = threading.Lock()

    def watch(event: Event) -> None:
        if event.rt.kind != "Pod":
            return
        app = event.object["metadata"]["labels"].get("app")
        if app not in ready:
            return
        with lock:
            pods = ready[app]
            name = event.object["metadata"]["name"]
            if event.type == "DELETED":
                pods.pop(name, None)
            else:
                pods[name] = any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in event.object.get("status", {}).get("conditions") or []
                )
            worst[app] = max(worst[app], 3 - sum(pods.values()))

    for app in ready:
        ready[app] = {p["metadata"]["name"]: True for p in ds_env.pods(app)}
    ds_env.subscribe(watch)
    ds_env.patch_ds("one", TEMPLATE_CHANGE)
    ds_env.patch_ds("half", TEMPLATE_CHANGE)
    ds_env.settle()
    for app in ("one", "half"):
        status = ds_env.ds_status(app)
        assert status["updatedNumberScheduled"] == 3 and status["numberAvailable"] == 3, app
    assert worst == {"one": 1, "half": 2}


def test_on_delete_replaces_only_deleted_pods(ds_env: Any) -> None:
    ds_env.add_node("n1")
    ds_env.add_node("n2")
    ds = ds_env.create_ds(strategy={"type": "OnDelete"})
    ds_env.settle()
    before = {n: p[0]["metadata"]["name"] for n, p in ds_env.pods_by_node().items()}
    ds_env.patch_ds("ds", TEMPLATE_CHANGE)
    ds_env.settle()
    assert {n: p[0]["metadata"]["name"] for n, p in ds_env.pods_by_node().items()} == before
    assert "updatedNumberScheduled" not in ds_env.ds_status()
    ds_env.store.delete(ds_env.pods_rt, "default", before["n1"])
    ds_env.settle()
    after = ds_env.pods_by_node()
    assert after["n2"][0]["metadata"]["name"] == before["n2"]
    replaced = after["n1"][0]
    assert replaced["metadata"]["labels"]["controller-revision-hash"] != revision_hash(ds)
    assert replaced["spec"]["containers"][0]["image"] == "busybox:2"
    assert ds_env.ds_status()["updatedNumberScheduled"] == 1


def test_deleting_the_daemonset_takes_its_pods(ds_env: Any) -> None:
    ds_env.add_node("n1")
    ds_env.create_ds()
    ds_env.settle()
    assert ds_env.pods()
    ds_env.store.delete(ds_env.ds_rt, "default", "ds")
    ds_env.settle()
    assert ds_env.pods() == []


def test_pods_carry_the_template_generation_not_the_object_generation(ds_env: Any) -> None:
    """A spec change outside the template bumps metadata.generation only: the pods stay current, and new
    pods are labelled with the template generation (the DaemonSet's annotation), as the real controller
    labels them (util.GetTemplateGeneration)."""
    ds_env.add_node("n1")
    ds_env.create_ds()
    ds_env.settle()
    first = ds_env.pods()[0]["metadata"]["name"]
    ds_env.patch_ds("ds", {"spec": {"revisionHistoryLimit": 5}})
    ds_env.settle()
    ds = ds_env.store.get(ds_env.ds_rt, "default", "ds")
    assert ds["metadata"]["generation"] == 2
    assert ds["metadata"]["annotations"]["deprecated.daemonset.template.generation"] == "1"
    assert [p["metadata"]["name"] for p in ds_env.pods()] == [first]
    ds_env.store.delete(ds_env.pods_rt, "default", first, grace_period_seconds=0)
    ds_env.settle()
    (replacement,) = ds_env.pods()
    assert replacement["metadata"]["labels"]["pod-template-generation"] == "1"
    assert ds_env.ds_status()["observedGeneration"] == 2


def test_an_unavailable_old_pod_counts_against_max_unavailable(manual_env: Any) -> None:
    """update.go rollingUpdate: an old pod that is not available is replaced at once and counted as
    unavailable, so with maxUnavailable 1 no available old pod goes beside it."""
    for name in ("n1", "n2", "n3"):
        manual_env.add_node(name)
    ds = manual_env.create_ds(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}})
    manual_env.settle()
    _ready_all(manual_env)
    unready = manual_env.pods_by_node()["n1"][0]["metadata"]["name"]
    manual_env.kubelet.set_ready(("default", unready), False)
    manual_env.settle()
    old_hash = revision_hash(ds)
    manual_env.patch_ds("ds", TEMPLATE_CHANGE)
    manual_env.settle()
    hashes = {
        node: pods[0]["metadata"]["labels"]["controller-revision-hash"] == old_hash
        for node, pods in manual_env.pods_by_node().items()
    }
    assert hashes == {"n1": False, "n2": True, "n3": True}


def test_a_rollout_step_waits_the_scenarios_step_delay(paced_env: Any) -> None:
    """timing.daemonSetRolloutStepSeconds: each step of a rolling update (the old pods maxUnavailable lets
    go) is taken that long after it became possible, then recomputed; creating pods is not delayed."""
    env = paced_env
    for name in ("n1", "n2", "n3"):
        env.add_node(name)
    ds = env.create_ds(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}})
    env.settle(horizon=0)
    assert len(env.pods()) == 3
    old_hash = revision_hash(ds)

    def replaced(after: float = 0.0) -> int:
        env.advance(after)
        env.settle(horizon=0)
        pods = env.pods()
        assert len(pods) == 3
        return sum(p["metadata"]["labels"]["controller-revision-hash"] != old_hash for p in pods)

    env.patch_ds("ds", TEMPLATE_CHANGE)
    assert replaced() == 0
    assert replaced(after=29.9) == 0
    assert replaced(after=0.1) == 1  # the new pod is created and Ready at once: the next step waits again
    assert replaced(after=29.9) == 1
    assert replaced(after=0.1) == 2
    assert replaced(after=30) == 3
