"""Placement predicates of the DaemonSet controller, as pure functions."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.sim.controllers import scheduling


def node(
    name: str = "n", labels: dict[str, str] | None = None, taints: list[dict[str, Any]] | None = None
) -> Any:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": taints or []}}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "k", "operator": "Exists"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"operator": "Exists"}, {"key": "any", "effect": "NoExecute"}, True),
        (
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            True,
        ),
        (
            {"key": "k", "value": "w", "effect": "NoSchedule"},
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            False,
        ),
        (
            {"key": "k", "operator": "Exists", "effect": "NoExecute"},
            {"key": "k", "effect": "NoSchedule"},
            False,
        ),
        ({"key": "other", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
    ],
)
def test_tolerates(toleration: dict[str, Any], taint: dict[str, Any], expected: bool) -> None:
    assert scheduling.tolerates(toleration, taint) is expected


def test_placement_of_taint_effects() -> None:
    spec: dict[str, Any] = {}
    assert scheduling.placement(spec, node()) == (True, True)
    assert scheduling.placement(spec, node(taints=[{"key": "x", "effect": "NoSchedule"}])) == (False, True)
    assert scheduling.placement(spec, node(taints=[{"key": "x", "effect": "NoExecute"}])) == (False, False)
    assert scheduling.placement(spec, node(taints=[{"key": "x", "effect": "PreferNoSchedule"}])) == (
        True,
        True,
    )
    # the automatic DaemonSet tolerations cover a NotReady / cordoned node's taints
    auto = [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
    ]
    assert scheduling.placement(spec, node(taints=auto)) == (True, True)


def test_template_node_name_and_empty_affinity_term() -> None:
    assert scheduling.placement({"nodeName": "other"}, node("n")) == (False, False)
    empty_term = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}}
    }
    assert scheduling.placement({"affinity": empty_term}, node()) == (False, False)


def test_gt_lt_operators() -> None:
    def spec(op: str, value: str) -> dict[str, Any]:
        term = {"matchExpressions": [{"key": "gpus", "operator": op, "values": [value]}]}
        return {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            }
        }

    eight = node(labels={"gpus": "8"})
    assert scheduling.placement(spec("Gt", "4"), eight).should_run
    assert not scheduling.placement(spec("Lt", "4"), eight).should_run


def test_pin_to_node_keeps_preferred_terms() -> None:
    preferred = [{"weight": 1, "preference": {"matchExpressions": [{"key": "a", "operator": "Exists"}]}}]
    spec = {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": preferred,
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": []}]
                },
            }
        }
    }
    pinned = scheduling.pin_to_node(spec, "n7")["nodeAffinity"]
    assert pinned["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert pinned["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n7"]}]}
    ]


def test_daemon_tolerations_do_not_duplicate() -> None:
    spec = {
        "hostNetwork": True,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
    }
    tolerations = scheduling.daemon_tolerations(spec)
    keys = [(t["key"], t["effect"]) for t in tolerations]
    assert len(keys) == len(set(keys)) == 7
    assert ("node.kubernetes.io/network-unavailable", "NoSchedule") in keys
