"""The deploy labels a DaemonSet of the operator's pod-template shape asks for: set only where a node has no
value for them (the operator's labeller honours a value someone set: false, paused-for-...), through the
walker's labelling (planner.apply.node_labels) and counted by the plan's node lists."""

from __future__ import annotations

from typing import Any

from gpuplan.modules import node_labels
from gpuplan.modules.node_labels import NodeLabels
from gpuplan.planner.apply.node_labels import label_nodes
from gpuplan.planner.observe.refresh import scheduled_nodes
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ObjectKey

GPU = {"feature.node.kubernetes.io/pci-10de.present": "true"}
DEPLOY = "nvidia.com/gpu.deploy.device-plugin"
WANTED = NodeLabels(selector=GPU, if_absent={DEPLOY: "true"})


def daemonset() -> dict[str, Any]:
    return {
        "kind": "DaemonSet",
        "metadata": {"name": "nvidia-device-plugin-daemonset", "annotations": WANTED.annotations()},
        "spec": {"template": {"spec": {"nodeSelector": {DEPLOY: "true"}}}},
    }


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_the_if_absent_labels_travel_in_the_daemonsets_annotations() -> None:
    assert node_labels.of(daemonset()) == WANTED
    assert WANTED.lacks({**GPU}) and not WANTED.lacks({**GPU, DEPLOY: "paused-for-driver-upgrade"})


def test_only_a_node_without_a_value_is_labelled() -> None:
    fake = FakeKubernetes(
        nodes=[
            node("joined", **GPU),
            node("paused", **GPU, **{DEPLOY: "paused-for-driver-upgrade"}),
            node("off", **GPU, **{DEPLOY: "false"}),
            node("cpu-only"),
        ]
    )
    assert label_nodes(fake, daemonset()) == ("joined",)

    def label(name: str) -> str | None:
        live = fake.read(ObjectKey("v1", "Node", None, name))
        assert live is not None
        return live.labels.get(DEPLOY)

    assert [label(n) for n in ("joined", "paused", "off", "cpu-only")] == [
        "true",
        "paused-for-driver-upgrade",
        "false",
        None,
    ]
    assert label_nodes(fake, daemonset()) == ()  # labelled once


def test_the_plan_counts_the_nodes_apply_labels_before_the_gate() -> None:
    nodes = [
        {"name": "joined", "labels": dict(GPU)},
        {"name": "paused", "labels": {**GPU, DEPLOY: "paused-for-driver-upgrade"}},
        {"name": "cpu-only", "labels": {}},
    ]
    assert scheduled_nodes(daemonset(), nodes) == ["joined"]
