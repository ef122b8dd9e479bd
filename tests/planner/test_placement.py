"""The nodes a DaemonSet runs on: one rule for the plan and the health gates, the DaemonSet controller's.

The plan's nodes (refresh.scheduled_nodes) once skipped every ``node.kubernetes.io/*`` taint while the gates
(health.nodes.targeted_nodes) skipped a fixed list of keys whatever their effect, so a node with an
``out-of-service`` taint was in the plan and not in the gate, and a NotReady node's ``not-ready:NoSchedule``
taint was ignored by both although the DaemonSet controller keeps new pods off it. Both ask
planner.placement now; it is held to the simulator's DaemonSet controller, case by case.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.planner import placement
from gpuplan.planner.health.gates import Observation
from gpuplan.planner.health.nodes import targeted_nodes
from gpuplan.planner.observe.refresh import as_node_object, scheduled_nodes
from gpuplan.sim.controllers import scheduling

GPU = {"nvidia.com/gpu.present": "true"}


def node(
    name: str, *, labels: dict[str, str] | None = None, taints: tuple[dict[str, str], ...] = ()
) -> dict[str, Any]:
    """A node as the provider's snapshot keeps it (name, labels, taints)."""
    return {
        "name": name,
        "labels": {"kubernetes.io/hostname": name, **(labels if labels is not None else GPU)},
        "taints": list(taints),
    }


def daemonset(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "ds", "namespace": "gpu-operator"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}], **pod_spec}}},
    }


GPU_DS = {
    "nodeSelector": GPU,
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}
NODES = [
    node("plain"),
    node("cpu", labels={}),
    node("gpu-tainted", taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},)),
    node(
        "out-of-service",
        taints=(
            {"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown", "effect": "NoExecute"},
        ),
    ),
    node(
        "not-ready",
        taints=(
            {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        ),
    ),
    node("unreachable", taints=({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},)),
    node("cordoned", taints=({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},)),
    node(
        "pressure",
        taints=(
            {"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"},
            {"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"},
        ),
    ),
    node("no-network", taints=({"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"},)),
    node("soft", taints=({"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"},)),
    node("dedicated", taints=({"key": "dedicated", "value": "ml", "effect": "NoSchedule"},)),
]
POD_SPECS = [
    GPU_DS,
    {},
    {"hostNetwork": True},
    {"tolerations": [{"operator": "Exists"}]},
    {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml"}]},
    {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "other", "effect": "NoSchedule"}]},
    {"nodeName": "plain"},
    {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["plain", "cpu"]}
                            ]
                        },
                        {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "DoesNotExist"}]},
                    ]
                }
            }
        }
    },
    {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}
        }
    },
]


def test_the_plan_and_the_gate_name_the_same_nodes() -> None:
    ds = daemonset(GPU_DS)
    planned = scheduled_nodes(ds, NODES)
    gated = [
        n["metadata"]["name"]
        for n in targeted_nodes(
            Observation(daemonset=ds, nodes=tuple(as_node_object(n) for n in NODES), node_selector=GPU)
        )
    ]
    assert planned == gated == ["plain", "gpu-tainted", "unreachable", "cordoned", "pressure", "soft"]


@pytest.mark.parametrize("pod_spec", POD_SPECS, ids=[str(i) for i in range(len(POD_SPECS))])
def test_placement_is_the_daemonset_controllers(pod_spec: dict[str, Any]) -> None:
    """Held to the simulator's DaemonSet controller (which mirrors NodeShouldRunDaemonPod) on every node."""
    for each in NODES:
        obj = as_node_object(each)
        assert placement.runs_on(pod_spec, obj) == scheduling.placement(pod_spec, obj).should_run, each[
            "name"
        ]


@pytest.mark.parametrize(
    ("pod_spec", "labels", "taints", "why"),
    [
        ({}, GPU, (), None),
        ({"nodeName": "other"}, GPU, (), "its template names node other"),
        (
            {"nodeSelector": {"nvidia.com/gpu.present": "true"}},
            {"nvidia.com/gpu.present": "false"},
            (),
            "its nodeSelector asks for label nvidia.com/gpu.present=true, which is false there",
        ),
        (
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "pool", "operator": "Exists"}]}
                            ]
                        }
                    }
                }
            },
            GPU,
            (),
            "its required node affinity does not match the node's labels",
        ),
        ({}, GPU, ({"key": "a", "effect": "PreferNoSchedule"},), None),
        (
            {},
            GPU,
            ({"key": "a", "value": "b", "effect": "NoExecute"},),
            "the node's taint a=b:NoExecute is not tolerated",
        ),
        ({}, GPU, ({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},), None),
    ],
)
def test_why_a_daemonset_places_no_pod_on_a_node_agrees_with_runs_on(
    pod_spec: dict[str, Any], labels: dict[str, str], taints: tuple[dict[str, str], ...], why: str | None
) -> None:
    live = as_node_object(node("n1", labels=labels, taints=taints))
    found = placement.unplaced_because(pod_spec, live)
    assert (found[0] if found else None) == why
    assert placement.runs_on(pod_spec, live) is (why is None)
