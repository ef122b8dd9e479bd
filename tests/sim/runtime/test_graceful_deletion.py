"""A deleted pod terminates as on a real cluster: Terminating first, then removed by its kubelet within a
pass; the DaemonSet controller replaces it only once it is gone and never counts it as ready; on a NotReady
node it stays Terminating until the node is back; ``kubectl get pods`` shows it."""

from __future__ import annotations

from typing import Any

from gpuplan.sim.cluster import Simulator
from gpuplan.sim.testing import Kubectl, SimFactory

PLUGIN_DS = "nvidia-device-plugin-daemonset"


def plugin_pods(sim: Simulator) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = sim.store.list(
        sim.store.registry.for_kind("v1", "Pod"), namespace="kube-system"
    ).items
    return pods


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def plugin_status(sim: Simulator) -> dict[str, Any]:
    ds = sim.store.get(sim.store.registry.for_kind("apps/v1", "DaemonSet"), "kube-system", PLUGIN_DS)
    return dict(ds.get("status") or {})


def test_the_kubelet_removes_a_deleted_pod_and_then_the_daemonset_replaces_it(
    sim_factory: SimFactory,
) -> None:
    sim = sim_factory("lab", serve=False)
    assert sim.wait_idle(10)
    pods_rt = sim.store.registry.for_kind("v1", "Pod")
    [old] = plugin_pods(sim)
    watch = sim.store.watch(
        pods_rt, namespace="kube-system", resource_version=str(sim.store.resource_version)
    )
    marked = sim.store.delete(pods_rt, "kube-system", old["metadata"]["name"])
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 30
    assert sim.wait_for(
        lambda: (
            len(plugin_pods(sim)) == 1
            and ready(plugin_pods(sim)[0])
            and plugin_pods(sim)[0]["metadata"]["uid"] != old["metadata"]["uid"]
        ),
        10,
    )
    seen: list[tuple[str, str, bool]] = []
    while (event := watch.next(0.5)) is not None:
        meta = event["object"]["metadata"]
        seen.append((event["type"], meta["name"], bool(meta.get("deletionTimestamp"))))
    watch.close()
    name = old["metadata"]["name"]
    old_events = [e for e in seen if e[1] == name]
    assert old_events[0] == ("MODIFIED", name, True)
    assert old_events[-1][0] == "DELETED"
    deleted_at = seen.index(old_events[-1])
    assert [e for e in seen[:deleted_at] if e[0] == "ADDED"] == [], (
        "the replacement came after the old pod went"
    )
    assert any(e[0] == "ADDED" for e in seen[deleted_at:])
    events = sim.store.list(sim.store.registry.for_kind("v1", "Event"), namespace="kube-system").items
    killing = [
        (e["reason"], e["message"], e["involvedObject"].get("fieldPath"), e["source"].get("host"))
        for e in events
        if e["involvedObject"]["name"] == name and e["reason"] == "Killing"
    ]
    container = old["spec"]["containers"][0]["name"]
    assert killing == [
        ("Killing", f"Stopping container {container}", f"spec.containers{{{container}}}", "lab-node")
    ]
    # the device plugin's capacity went with the old pod and came back with the new one
    node = sim.store.get(sim.store.registry.for_kind("v1", "Node"), None, "lab-node")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "1"


def test_a_pod_on_a_not_ready_node_stays_terminating_until_the_node_is_back(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab", serve=False)
    assert sim.wait_idle(10)
    pods_rt = sim.store.registry.for_kind("v1", "Pod")
    [old] = plugin_pods(sim)
    sim.set_node_ready("lab-node", False)
    sim.store.delete(pods_rt, "kube-system", old["metadata"]["name"])
    assert sim.wait_idle(10)
    [still] = plugin_pods(sim)
    assert still["metadata"]["uid"] == old["metadata"]["uid"] and still["metadata"]["deletionTimestamp"]
    status = plugin_status(sim)
    assert (status.get("currentNumberScheduled"), status.get("numberReady")) == (0, 0), (
        "a terminating pod is neither current nor ready"
    )
    sim.set_node_ready("lab-node", True)
    assert sim.wait_for(
        lambda: (
            [p["metadata"]["uid"] != old["metadata"]["uid"] and ready(p) for p in plugin_pods(sim)] == [True]
        ),
        10,
    )
    assert sim.wait_for(lambda: plugin_status(sim).get("numberReady") == 1, 10)


def test_grace_period_zero_removes_the_pod_at_once(sim_factory: SimFactory) -> None:
    sim = sim_factory("lab", serve=False)
    assert sim.wait_idle(10)
    pods_rt = sim.store.registry.for_kind("v1", "Pod")
    [old] = plugin_pods(sim)
    sim.set_node_ready("lab-node", False)  # no kubelet to finish it: only the grace period 0 can
    gone = sim.store.delete(pods_rt, "kube-system", old["metadata"]["name"], grace_period_seconds=0)
    assert "deletionTimestamp" not in gone["metadata"]
    assert [p["metadata"]["uid"] for p in plugin_pods(sim)] != [old["metadata"]["uid"]]


def test_kubectl_shows_terminating_and_force_removes(lab_sim: Simulator, kubectl: Kubectl) -> None:
    [pod] = plugin_pods(lab_sim)
    name = pod["metadata"]["name"]
    lab_sim.set_node_ready("lab-node", False)
    kubectl("delete", "pod", "-n", "kube-system", name, "--wait=false")
    table = kubectl("get", "pods", "-n", "kube-system", "--no-headers").stdout.split()
    assert (table[0], table[2]) == (name, "Terminating"), table
    kubectl("delete", "pod", "-n", "kube-system", name, "--grace-period=0", "--force")
    names = kubectl("get", "pods", "-n", "kube-system", "-o", "name").stdout.split()
    assert f"pod/{name}" not in names
