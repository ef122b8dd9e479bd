"""The driver's node-by-node rollout on the shared in-memory fake (providers/fake.py), whose DaemonSet
controller recreates a deleted driver pod from the current template: the order of the steps on each node
as the cluster saw them, read back from the fake's request log. The rollout's policies, failures and
restores are tested on the hand-made cluster of test_driver_rollout.py."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.modules.driver import UpgradePolicy
from gpuplan.planner.driver.gate import UpgradeCheck
from gpuplan.planner.driver.rollout import STATE_LABEL, NodeProgress, roll_driver
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.fake_daemonsets import DaemonSetController
from gpuplan.providers.snapshot import ObjectKey

NS = "gpu-operator"
DS = ObjectKey("apps/v1", "DaemonSet", NS, "nvidia-driver-daemonset")
NODES = ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
OPERATIONS = ("cordon", "evict", "delete_pod")


def driver(version: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DS.name, "namespace": NS, "labels": {"gpuplan.io/stack": "up"}},
        "spec": {
            "selector": {"matchLabels": {"app": DS.name}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": DS.name, "gpuplan.io/stack": "up"}},
                "spec": {
                    "containers": [
                        {"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{version}-ubuntu24.04"}
                    ]
                },
            },
        },
    }


def training_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "ownerReferences": [{"kind": "Job", "name": name, "uid": f"job-{name}", "controller": True}],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


@pytest.fixture
def cluster() -> FakeKubernetes:
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    nodes = [{"metadata": {"name": name, "labels": {}}, "spec": {}, "status": ready} for name in NODES]
    fake = FakeKubernetes(nodes=nodes, controller=DaemonSetController())
    fake.create(driver("580.105.08"))
    fake.put(training_pod("train-1", "gpu-node-1"))
    fake.put(training_pod("train-3", "gpu-node-3"))
    return fake


def driver_pods(cluster: FakeKubernetes) -> dict[str, tuple[str, str]]:
    """node -> (pod name, pod-template-generation) of the driver pods."""
    return {
        p.manifest["spec"]["nodeName"]: (p.key.name, p.labels["pod-template-generation"])
        for p in cluster.list_pods(namespace=NS, label_selector=f"app={DS.name}")
    }


def test_each_node_is_cordoned_cleared_restarted_and_uncordoned_before_the_next(
    cluster: FakeKubernetes,
) -> None:
    before = driver_pods(cluster)
    cluster.apply(driver("595.91.07"))  # the new template; OnDelete: no pod changes by itself
    assert driver_pods(cluster) == before
    progress: list[NodeProgress] = []
    start = len(cluster.calls)

    result = roll_driver(
        cluster,
        daemonset=DS,
        nodes=NODES,
        policy=UpgradePolicy.model_validate({}),
        gate=UpgradeCheck(DS, expected_version=None, validator_selector=None, timeout_seconds=60),
        hooks=progress.append,
        clock=cluster.clock,
        sleep=lambda seconds: None,
    )

    assert result.ok, result.message
    assert result.upgraded == result.restarted == tuple(NODES)
    assert result.evicted == ("default/train-1", "default/train-3")
    steps = [_step(method, argument) for method, argument in cluster.calls[start:] if method in OPERATIONS]
    expected: list[tuple[str, str]] = []
    for node in NODES:
        expected.append(("cordon", node))
        expected += [("evict", f"train-{node[-1]}")] if node != "gpu-node-2" else []
        expected += [("delete_pod", before[node][0]), ("uncordon", node)]
    assert steps == expected
    assert {node: generation for node, (_, generation) in driver_pods(cluster).items()} == dict.fromkeys(
        NODES, "2"
    )
    nodes = cluster.list_nodes()
    assert [n.labels[STATE_LABEL] for n in nodes] == ["upgrade-done"] * 3
    assert not any(n.manifest["spec"].get("unschedulable") for n in nodes)
    assert [p.key.name for p in cluster.list_pods(namespace="default")] == []
    assert [p.index for p in progress if p.state == "upgrade-done"] == [1, 2, 3]


def _step(method: str, argument: Any) -> tuple[str, str]:
    """A node operation from the fake's log: (cordon|uncordon, node) or (evict|delete_pod, pod)."""
    if isinstance(argument, ObjectKey):
        return method, argument.name
    node, on = argument
    return ("cordon" if on else "uncordon"), str(node)
