"""A component that rolls out two DaemonSets (the device plugin and its MPS control daemon): the waiter
judges both rollouts, and the component is healthy only once each is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health.wait import PoolProgress, Progress, WaitOptions, wait
from gpuplan.providers.kubernetes_live import Listing
from gpuplan.providers.snapshot import LiveObject, ObjectKey
from tests.planner.test_health_wait import ALLOCATABLE, Scripted, ds, node, pod

MPS = "nvidia-device-plugin-mps-control-daemon"


def rollout(name: str) -> HealthCheck:
    return HealthCheck("rollout", {"daemonset": name, "namespace": "gpu-operator", "timeoutSeconds": 5})


def named(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        **manifest,
        "metadata": {**manifest["metadata"], "name": name, "uid": name, "labels": labels},
        "spec": {**manifest["spec"], "selector": {"matchLabels": labels}},
    }


@dataclass
class TwoDaemonSets(Scripted):
    """Scripted with one DaemonSet per name and pods listed by their app label."""

    named_daemonsets: dict[str, dict[str, Any]] = field(default_factory=dict)

    def read(self, key: ObjectKey) -> LiveObject | None:
        found = self.named_daemonsets.get(key.name)
        return LiveObject.from_manifest(found) if found else None

    def list_objects(self, api_version: str, kind: str, **selectors: Any) -> Listing:
        app = str(selectors["label_selector"]).removeprefix("app=")
        pods = [p for p in self.pods if p["metadata"]["labels"]["app"] == app]
        return Listing(tuple(LiveObject.from_manifest(p) for p in pods), str(self.version))


def plugin_pod(app: str, ready: bool) -> dict[str, Any]:
    found = pod(ready)
    found["metadata"] = {**found["metadata"], "name": f"{app}-1", "labels": {"app": app}}
    found["metadata"]["ownerReferences"] = [{"uid": app}]
    return found


def test_the_second_rollout_keeps_the_component_waiting() -> None:
    plugin = "nvidia-device-plugin-daemonset"
    cluster = TwoDaemonSets(
        None,
        [plugin_pod(plugin, True), plugin_pod(MPS, False)],
        [node("1")],
        named_daemonsets={plugin: named(ds(1), plugin), MPS: named(ds(0), MPS)},
    )
    status = wait(
        [rollout(plugin), rollout(MPS), ALLOCATABLE], cluster, options=WaitOptions(clock=cluster.clock)
    )
    assert (status.state, status.reason) == ("failed", "Timeout")
    assert MPS in status.message


def test_both_rollouts_done_passes() -> None:
    plugin = "nvidia-device-plugin-daemonset"
    cluster = TwoDaemonSets(
        None,
        [plugin_pod(plugin, True), plugin_pod(MPS, True)],
        [node("1")],
        named_daemonsets={plugin: named(ds(1), plugin), MPS: named(ds(1), MPS)},
    )
    status = wait(
        [rollout(plugin), rollout(MPS), ALLOCATABLE], cluster, options=WaitOptions(clock=cluster.clock)
    )
    assert status.state == "passed"


def test_a_component_gated_per_node_pool_reports_each_pool_s_part() -> None:
    plugin, training = "nvidia-device-plugin-daemonset", "nvidia-device-plugin-daemonset-training"
    pooled = HealthCheck(
        "rollout",
        {
            "daemonset": training,
            "namespace": "gpu-operator",
            "timeoutSeconds": 5,
            "pool": "training",
            "poolSelector": {"pool": "training"},
        },
    )
    cluster = TwoDaemonSets(
        None,
        [plugin_pod(plugin, True), plugin_pod(training, False)],
        [node("1")],
        named_daemonsets={plugin: named(ds(1), plugin), training: named(ds(0), training)},
    )
    rounds: list[Progress] = []
    status = wait(
        [rollout(plugin), pooled],
        cluster,
        on_progress=rounds.append,
        options=WaitOptions(clock=cluster.clock),
    )
    assert status.state == "failed" and training in status.message
    assert rounds[0].pools == (
        PoolProgress(None, "rollout", "passed", 1, 1),
        PoolProgress("training", "rollout", "progressing", 0, 1),
    )
    assert (rounds[0].gate, rounds[0].ready, rounds[0].desired) == ("rollout", 0, 1), "the pool that waits"


def test_a_component_of_one_pool_reports_no_pools() -> None:
    plugin = "nvidia-device-plugin-daemonset"
    cluster = TwoDaemonSets(
        None, [plugin_pod(plugin, True)], [node("1")], named_daemonsets={plugin: named(ds(1), plugin)}
    )
    rounds: list[Progress] = []
    assert (
        wait(
            [rollout(plugin)], cluster, on_progress=rounds.append, options=WaitOptions(clock=cluster.clock)
        ).state
        == "passed"
    )
    assert [r.pools for r in rounds] == [()]
