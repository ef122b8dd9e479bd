"""The DaemonSet controller and terminating pods (deletes are graceful): a terminating pod is neither current,
ready nor available, its node gets a replacement only once it is gone, and a rolling update counts it as
unavailable. The stand-in kubelet of ``stuck_env`` leaves terminating pods until the test removes them."""

from __future__ import annotations

from typing import Any

from gpuplan.sim.controllers.cache import Key


def key(pod: dict[str, Any]) -> Key:
    return (pod["metadata"]["namespace"], pod["metadata"]["name"])


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def test_a_terminating_pod_is_not_ready_and_not_replaced_until_it_is_gone(stuck_env: Any) -> None:
    stuck_env.add_node("n1")
    stuck_env.create_ds()
    stuck_env.settle()
    [old] = stuck_env.pods()
    assert stuck_env.ds_status()["numberReady"] == 1
    stuck_env.store.delete(stuck_env.pods_rt, "default", old["metadata"]["name"])
    stuck_env.settle()
    [still] = stuck_env.pods()
    assert terminating(still) and still["metadata"]["uid"] == old["metadata"]["uid"]
    status = stuck_env.ds_status()
    assert (
        status["desiredNumberScheduled"],
        status["currentNumberScheduled"],
        status["numberReady"],
        status.get("numberAvailable", 0),
        status["numberUnavailable"],
    ) == (1, 0, 0, 0, 1)
    stuck_env.loop.run_sync(lambda: stuck_env.kubelet.remove(key(old)))
    stuck_env.settle()
    [new] = stuck_env.pods()
    assert new["metadata"]["uid"] != old["metadata"]["uid"] and not terminating(new)
    assert stuck_env.ds_status()["numberReady"] == 1


def test_a_rolling_update_waits_for_the_terminating_pod(stuck_env: Any) -> None:
    for name in ("n1", "n2"):
        stuck_env.add_node(name)
    stuck_env.create_ds(strategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}})
    stuck_env.settle()
    stuck_env.patch_ds(
        "ds", {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}}}
    )
    stuck_env.settle()
    pods = stuck_env.pods()
    [going] = [p for p in pods if terminating(p)]
    assert len(pods) == 2, "no replacement beside the terminating pod, and the other node's pod is kept"
    stuck_env.loop.run_sync(lambda: stuck_env.kubelet.remove(key(going)))
    stuck_env.settle()
    by_node = stuck_env.pods_by_node()
    replaced = by_node[going["spec"]["nodeName"]]
    assert [p["spec"]["containers"][0]["image"] for p in replaced] == ["busybox:2"]
    other = [p for n, ps in by_node.items() if n != going["spec"]["nodeName"] for p in ps]
    assert [terminating(p) for p in other] == [True], "then the rollout moves on to the other node"
