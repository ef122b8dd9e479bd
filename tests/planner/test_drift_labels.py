"""Node labels gpuplan set that another manager changed (planner.drift.labels), on reduced nodes."""

from __future__ import annotations

from typing import Any

from gpuplan.modules.node_labels import FIELD_MANAGER, NodeLabels
from gpuplan.planner.drift import labels

WANTED = NodeLabels(
    selector={"nvidia.com/mig.capable": "true"},
    labels={"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/gpu.deploy.mig-manager": "true"},
)
DAEMONSET = {
    "kind": "DaemonSet",
    "metadata": {"labels": {"gpuplan.io/component": "migManager"}, "annotations": WANTED.annotations()},
}


def node(name: str, config: str | None, managers: list[str], *, capable: str = "true") -> dict[str, Any]:
    found = {"nvidia.com/mig.capable": capable, "nvidia.com/gpu.deploy.mig-manager": "true"}
    owners = {"nvidia.com/gpu.deploy.mig-manager": [FIELD_MANAGER]}
    if config is not None:
        found["nvidia.com/mig.config"] = config
        owners["nvidia.com/mig.config"] = managers
    return {"name": name, "labels": found, "labelManagers": owners}


def test_only_a_value_another_manager_wrote_is_an_edit() -> None:
    nodes = [
        node("edited", "all-disabled", ["kubectl-label"]),
        node("in-sync", "all-1g.10gb", [FIELD_MANAGER]),
        node("being-applied", "all-2g.20gb", [FIELD_MANAGER]),  # gpuplan's own value of an earlier apply
        node("joined", None, []),  # not labelled yet: the plan labels it, nobody changed it
        node("not-capable", "all-disabled", ["kubectl-label"], capable="false"),  # not selected
    ]
    assert labels.edits([DAEMONSET], nodes) == [
        labels.LabelEdit(
            "migManager", "edited", "nvidia.com/mig.config", "all-1g.10gb", "all-disabled", ("kubectl-label",)
        )
    ]


def test_a_daemonset_asking_for_no_labels_finds_none() -> None:
    plain = {"kind": "DaemonSet", "metadata": {"labels": {"gpuplan.io/component": "gfd"}}}
    assert labels.edits([plain], [node("edited", "all-disabled", ["kubectl-label"])]) == []
