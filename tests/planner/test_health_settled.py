"""Effects that will not come: a node's capacity or GFD label missing while the component's pod there has
long been Running and Ready fails its gate at once, with the pod and where its reason is; the same miss on
a pod that turned Ready a moment ago, or with no pod of the current template there, is still progressing."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.modules.base import HealthCheck
from gpuplan.planner.health.causes import SETTLE_SECONDS
from gpuplan.planner.health.gates import Observation, evaluate, parse_time

READY_AT = "2026-01-01T00:00:00Z"
ALLOCATABLE = HealthCheck("allocatable", {"resource": "nvidia.com/gpu", "perGpu": 1})
LABELS = HealthCheck("gfd-labels", {"labels": ["nvidia.com/gpu.product", "nvidia.com/gpu.count"]})


def since_ready(seconds: float) -> float:
    moment = parse_time(READY_AT)
    assert moment is not None
    return moment + seconds


def daemonset(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "gpu-operator", "uid": "ds", "generation": 2},
        "spec": {"template": {"spec": {}}},
        "status": {"desiredNumberScheduled": 1, "numberAvailable": 1, "updatedNumberScheduled": 1},
    }


def pod(name: str, *, generation: int = 2, phase: str = "Running", ready: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": name,
            "labels": {"pod-template-generation": str(generation)},
            "ownerReferences": [{"uid": "ds"}],
        },
        "spec": {"nodeName": "lab-node"},
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": READY_AT}
            ],
        },
    }


def node(labels: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "lab-node", "labels": {"nvidia.com/gpu.deploy.operands": "true", **labels}},
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


COUNTED = {"nvidia.com/gpu.product": "NVIDIA-L40S", "nvidia.com/gpu.count": "2"}


def observe(name: str, the_node: dict[str, Any], pods: list[dict[str, Any]], after: float) -> Observation:
    return Observation(
        daemonset=daemonset(name),
        pods=tuple(pods),
        nodes=(the_node,),
        now=since_ready(after),
        node_selector={},
    )


@pytest.mark.parametrize(
    ("allocatable", "problem"),
    [
        ({}, "lab-node: allocatable nvidia.com/gpu is 0, expected 2"),  # no capacity at all
        (
            {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "8"},
            "lab-node: allocatable nvidia.com/gpu is 0, expected 2",
        ),
        ({"nvidia.com/gpu": "1"}, "lab-node: allocatable nvidia.com/gpu is 1, expected 2"),  # the wrong count
    ],
)
def test_capacity_a_settled_device_plugin_does_not_advertise_fails_at_once(
    allocatable: dict[str, str], problem: str
) -> None:
    status = evaluate(
        ALLOCATABLE, observe("plugin", node(COUNTED, allocatable), [pod("plugin-x")], SETTLE_SECONDS + 5)
    )
    assert status.state == "failed" and status.reason == "CapacityNotAdvertised" and status.node == "lab-node"
    assert status.message.startswith(problem)
    assert (
        f"plugin-x has been Ready there for {SETTLE_SECONDS + 5:.0f}s without the kubelet reporting it"
        in status.message
    )
    assert "its log on lab-node says why" in status.message


@pytest.mark.parametrize(
    ("pods", "after"),
    [
        ([pod("plugin-x")], SETTLE_SECONDS - 1),  # Ready a moment ago: the kubelet's next update may bring it
        ([pod("plugin-x", ready=False)], 600.0),
        ([pod("plugin-x", phase="Pending")], 600.0),
        ([pod("plugin-x", generation=1)], 600.0),  # the old template's pod, about to be replaced
        ([], 600.0),
    ],
)
def test_missing_capacity_is_still_progressing_without_a_settled_pod_of_the_current_template(
    pods: list[dict[str, Any]], after: float
) -> None:
    status = evaluate(ALLOCATABLE, observe("plugin", node(COUNTED, {"nvidia.com/gpu": "1"}), pods, after))
    assert status.state == "progressing" and status.reason is None, status


def test_the_right_capacity_passes_whatever_the_plugin_pod() -> None:
    status = evaluate(
        ALLOCATABLE, observe("plugin", node(COUNTED, {"nvidia.com/gpu": "2"}), [pod("plugin-x")], 600.0)
    )
    assert status.state == "passed"


def test_a_label_a_settled_gfd_did_not_write_fails_at_once() -> None:
    labels = {"nvidia.com/gfd.timestamp": "1767225600"}  # GFD runs, with nothing to say about GPUs
    status = evaluate(LABELS, observe("gfd", node(labels, {}), [pod("gfd-x")], SETTLE_SECONDS + 1))
    assert status.state == "failed" and status.reason == "LabelNotWritten"
    assert status.message.startswith(
        "lab-node: label nvidia.com/gpu.product missing (and nvidia.com/gpu.count)"
    )
    assert (
        f"gfd-x has been Ready there for {SETTLE_SECONDS + 1:.0f}s without writing it "
        "(GFD labels a node as it starts)" in status.message
    )


def test_a_label_of_a_gfd_that_just_started_is_still_to_come() -> None:
    status = evaluate(LABELS, observe("gfd", node({}, {}), [pod("gfd-x")], 3.0))
    assert status.state == "progressing" and status.reason is None


def test_a_label_that_disagrees_is_not_judged_by_the_settled_pod() -> None:
    """Every label is there: what is wrong is for the other rules (the driver label's two rounds)."""
    wrong = {**COUNTED, "nvidia.com/gpu.count": "0"}
    status = evaluate(LABELS, observe("gfd", node(wrong, {}), [pod("gfd-x")], 600.0))
    assert status.state == "progressing" and status.reason is None


@pytest.mark.parametrize("check", [ALLOCATABLE, LABELS])
def test_another_components_effect_waits_however_long_this_components_pod_has_been_ready(
    check: HealthCheck,
) -> None:
    # mig-manager's pod was Ready long before its reconfiguration paused the device plugin and GFD
    waiting = HealthCheck(check.kind, {**check.params, "settled": False})
    observed = observe("mig-manager", node({}, {}), [pod("mig-manager-x")], 600.0)
    assert evaluate(check, observed).state == "failed"
    status = evaluate(waiting, observed)
    assert status.state == "progressing" and status.reason is None, status
