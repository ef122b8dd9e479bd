"""The node labels a component asks gpuplan to set, carried on its DaemonSet (read by the planner).

A module puts up to four annotations on its DaemonSet, each a list of ``label=value`` joined by commas (the
form of a label selector, readable in a plan's diff): ``gpuplan.io/node-labels``, the labels to set on every
node that carries all of ``gpuplan.io/node-selector``'s, ``gpuplan.io/node-labels-on-change``, those to set
with them on a node whose labels differ (a state the component resets when its input changes), and
``gpuplan.io/node-labels-if-absent``, those to set only where the node has no value for them: the
``nvidia.com/gpu.deploy.<operand>=true`` labels of the GPU Operator's pod templates, whose other values
(``false``, ``paused-for-...``) belong to whoever set them, as the operator's node labeller honours them
(``addGPUStateLabels``, NVIDIA/gpu-operator controllers/state_manager.go: "If a required state label
already exists on the node, honor the current value").
``gpuplan.planner.apply.node_labels`` writes them; ``gpuplan.planner.driver.evictions`` and the plan read
which nodes a change relabels. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ANNOTATION = "gpuplan.io/node-labels"
SELECTOR_ANNOTATION = "gpuplan.io/node-selector"
ON_CHANGE_ANNOTATION = "gpuplan.io/node-labels-on-change"
IF_ABSENT_ANNOTATION = "gpuplan.io/node-labels-if-absent"
FIELD_MANAGER = "gpuplan-node-labels"
"""The field manager gpuplan writes these labels as (another manager owning one means someone changed it)."""


@dataclass(frozen=True)
class NodeLabels:
    """What one DaemonSet's annotations ask for."""

    selector: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    on_change: Mapping[str, str] = field(default_factory=dict)
    if_absent: Mapping[str, str] = field(default_factory=dict)

    def annotations(self) -> dict[str, str]:
        written = {
            ANNOTATION: self.labels,
            SELECTOR_ANNOTATION: self.selector,
            ON_CHANGE_ANNOTATION: self.on_change,
            IF_ABSENT_ANNOTATION: self.if_absent,
        }
        return {key: _joined(values) for key, values in written.items() if values}

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector.items())

    def differs(self, labels: Mapping[str, str]) -> bool:
        return any(labels.get(key) != value for key, value in self.labels.items())

    def absent(self, labels: Mapping[str, str]) -> dict[str, str]:
        """The ``if_absent`` labels a node with ``labels`` has no value for."""
        return {key: value for key, value in self.if_absent.items() if key not in labels}

    def lacks(self, labels: Mapping[str, str]) -> bool:
        """Whether a selected node with ``labels`` needs a write."""
        return self.differs(labels) or bool(self.absent(labels))

    def with_absent(self, labels: Mapping[str, str]) -> Mapping[str, str]:
        """``labels`` with the ``if_absent`` labels apply writes on a selected node: where its pods will
        run once labelled (a node not selected, or one with a value of its own, is as it is)."""
        absent = self.absent(labels) if self.selects(labels) else {}
        return {**labels, **absent} if absent else labels


def of(manifest: Mapping[str, Any] | None) -> NodeLabels:
    """What ``manifest`` (a DaemonSet) asks for; no labels for any other object."""
    if not manifest or manifest.get("kind") != "DaemonSet":
        return NodeLabels()
    annotations = (manifest.get("metadata") or {}).get("annotations") or {}
    return NodeLabels(
        _split(annotations.get(SELECTOR_ANNOTATION)),
        _split(annotations.get(ANNOTATION)),
        _split(annotations.get(ON_CHANGE_ANNOTATION)),
        _split(annotations.get(IF_ABSENT_ANNOTATION)),
    )


def _joined(values: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(values.items()))


def _split(text: Any) -> dict[str, str]:
    """``a=1,b=2`` -> ``{"a": "1", "b": "2"}`` (label keys and values hold neither ``,`` nor ``=``)."""
    pairs = (item.split("=", 1) for item in str(text or "").split(",") if "=" in item)
    return {key.strip(): value.strip() for key, value in pairs}
