"""The human plan under a disruptive driver change: the GPU pods evicted per node, capped per node, the nodes
without any, the note on the nodes not read, and nothing for a plan that never read them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuplan.views import plan_human

DRIVER = "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset"


def document(change: dict[str, Any]) -> dict[str, Any]:
    """A plan document with one driver change (the keys plan_human reads)."""
    return {
        "stack": "lab",
        "namespace": "gpu-operator",
        "namespace_exists": True,
        "nodes_total": 3,
        "gpu_nodes": 3,
        "state_lineage": "l",
        "state_serial": 2,
        "api_requests": 14,
        "changes": [change],
        "components": {"driver": {"owner": "gpuplan", "status": "changes", "detail": "1 to update"}},
        "summary": {"update": 1},
    }


def driver_change(**extra: Any) -> dict[str, Any]:
    change = {
        "address": DRIVER,
        "component": "driver",
        "action": "update",
        "reason_text": "the configuration changed",
        "nodes": ["gpu-0", "gpu-1", "gpu-2"],
        "disruptive": True,
        "disruption": (
            "the driver restarts on 3 nodes, node by node: all GPU pods on 3 nodes are evicted first"
        ),
    }
    change.update(extra)
    return change


def render(doc: dict[str, Any]) -> str:
    """The plan unwrapped: these tests are about which lines there are, not where long ones break."""
    return plan_human.render(doc, width=10_000)


def lines_after_disruption(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "! disruptive:" in line)
    return [line for line in lines[start + 1 :] if line.startswith("        ")]


def test_each_node_with_gpu_pods_gets_one_line_under_the_disruption() -> None:
    many = [f"ml/worker-{i}" for i in range(plan_human.POD_NAMES_SHOWN + 2)]
    change = driver_change(
        gpu_pods={"gpu-2": many, "gpu-0": ["default/train"], "gpu-1": []},
        gpu_pods_note="and 4 more nodes: not read, ...",
    )
    shown = lines_after_disruption(render(document(change)))
    assert shown == [
        f"        evicts on gpu-2: {', '.join(many[: plan_human.POD_NAMES_SHOWN])} and 2 more",
        "        evicts on gpu-0: default/train",
        "        no GPU pods on gpu-1",
        "        and 4 more nodes: not read, ...",
    ]


@pytest.mark.parametrize("action", ["delete", "replace"])
def test_a_delete_or_replace_names_the_pods_without_saying_it_evicts_them(action: str) -> None:
    change = driver_change(action=action, gpu_pods={"gpu-0": ["default/train"]})
    doc = document(change)
    doc["summary"] = {action: 1}
    assert lines_after_disruption(render(doc)) == ["        GPU pods on gpu-0: default/train"]


def test_a_plan_that_never_read_the_pods_shows_only_the_disruption() -> None:
    """A saved plan of an older gpuplan has no gpu_pods key; make_plan alone leaves it null."""
    for change in (driver_change(), driver_change(gpu_pods=None)):
        text = render(document(copy.deepcopy(change)))
        assert "! disruptive: the driver restarts on 3 nodes" in text
        assert lines_after_disruption(text) == []


def test_pods_that_could_not_be_read_show_the_reason_under_the_disruption() -> None:
    note = "the GPU pods could not be read (pods is forbidden); apply names them before it starts"
    text = render(document(driver_change(gpu_pods=None, gpu_pods_note=note)))
    assert lines_after_disruption(text) == [f"        {note}"]
