"""The node labels a component asks gpuplan to set, carried on its DaemonSet (read by the planner).

A module puts three annotations on its DaemonSet, each a list of ``label=value`` joined by commas (the form
of a label selector, readable in a plan's diff): ``gpuplan.io/node-labels``, the labels to set on every node
that carries all of ``gpuplan.io/node-selector``'s, and ``gpuplan.io/node-labels-on-change``, those to set
with them on a node whose labels differ (a state the component resets when its input changes).
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
FIELD_MANAGER = "gpuplan-node-labels"
"""The field manager gpuplan writes these labels as (another manager owning one means someone changed it)."""


@dataclass(frozen=True)
class NodeLabels:
    """What one DaemonSet's annotations ask for."""

    selector: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    on_change: Mapping[str, str] = field(default_factory=dict)

    def annotations(self) -> dict[str, str]:
        written = {
            ANNOTATION: self.labels,
            SELECTOR_ANNOTATION: self.selector,
            ON_CHANGE_ANNOTATION: self.on_change,
        }
        return {key: _joined(values) for key, values in written.items() if values}

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector.items())

    def differs(self, labels: Mapping[str, str]) -> bool:
        return any(labels.get(key) != value for key, value in self.labels.items())


def of(manifest: Mapping[str, Any] | None) -> NodeLabels:
    """What ``manifest`` (a DaemonSet) asks for; no labels for any other object."""
    if not manifest or manifest.get("kind") != "DaemonSet":
        return NodeLabels()
    annotations = (manifest.get("metadata") or {}).get("annotations") or {}
    return NodeLabels(
        _split(annotations.get(SELECTOR_ANNOTATION)),
        _split(annotations.get(ANNOTATION)),
        _split(annotations.get(ON_CHANGE_ANNOTATION)),
    )


def _joined(values: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(values.items()))


def _split(text: Any) -> dict[str, str]:
    """``a=1,b=2`` -> ``{"a": "1", "b": "2"}`` (label keys and values hold neither ``,`` nor ``=``)."""
    pairs = (item.split("=", 1) for item in str(text or "").split(",") if "=" in item)
    return {key.strip(): value.strip() for key, value in pairs}
