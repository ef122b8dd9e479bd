"""A removed node pool's driver DaemonSet hands its nodes back to the stack's: the plan says the driver
restarts there node by node, and apply deletes it before the stack's update lands on those nodes."""

from __future__ import annotations

from typing import Any

from gpuplan.planner.apply.steps import ordered
from gpuplan.planner.plan.decide import hands_back, with_disruption, with_hand_back
from gpuplan.planner.plan.model import Change, Reason

NS = "gpu-operator"


def daemonset(name: str, excluded: list[str] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "driver", "image": "driver:580"}]}
    if excluded:
        term = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": excluded}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [term]}]
                }
            }
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"template": {"spec": spec}},
    }


def change(name: str, action: str, before: Any, after: Any, nodes: tuple[str, ...]) -> Change:
    reason = Reason.DELETE_BECAUSE_NOT_IN_CONFIG if action == "delete" else Reason.UPDATE_BECAUSE_SPEC_CHANGED
    return with_disruption(
        Change(
            address=f"driver/DaemonSet/{NS}/{name}",
            component="driver",
            kind="DaemonSet",
            object=f"apps/v1/DaemonSet/{NS}/{name}",
            action=action,
            reason=reason,
            reason_text="",
            before=before,
            after=after,
            nodes=nodes,
        )
    )


STACK = change(
    "nvidia-driver-daemonset",
    "update",
    daemonset("nvidia-driver-daemonset", ["gpu-node-1"]),
    daemonset("nvidia-driver-daemonset", None),
    ("gpu-node-1", "gpu-node-2"),
)
POOL = change("nvidia-driver-daemonset-old", "delete", daemonset("x", None), None, ("gpu-node-1",))


def test_a_removed_pools_driver_is_deleted_node_by_node_before_the_stacks_update() -> None:
    changes = with_hand_back([STACK, POOL])
    assert hands_back(changes[1], changes)
    assert changes[1].disruptive
    assert changes[1].disruption.startswith(
        "the driver restarts on 1 node (gpu-node-1), node by node, as nvidia-driver-daemonset takes it back"
    )
    assert "at once" not in changes[1].disruption
    assert [c.action for c in ordered(changes)] == ["delete", "update"]


def test_without_an_update_that_takes_the_nodes_a_driver_delete_stays_last_and_at_once() -> None:
    kept = change(
        "nvidia-driver-daemonset",
        "update",
        daemonset("nvidia-driver-daemonset", ["gpu-node-1"]),
        {
            **daemonset("nvidia-driver-daemonset", ["gpu-node-1"]),
            "metadata": {"name": "nvidia-driver-daemonset", "namespace": NS, "labels": {"a": "b"}},
        },
        ("gpu-node-2",),
    )
    changes = with_hand_back([kept, POOL])
    assert not hands_back(changes[1], changes)
    assert "at once" in changes[1].disruption
    assert [c.action for c in ordered(changes)] == ["update", "delete"]
