"""The node labels a component asks gpuplan to set, carried on its DaemonSet (read by the planner).

A module puts the annotation ``gpuplan.io/node-labels`` on its DaemonSet: JSON ``{"selector": {...},
"labels": {...}, "onChange": {...}}``, the labels to set on every node carrying all of the selector's labels,
and those to set with them on a node whose labels differ (a state the component resets when its input
changes). ``gpuplan.planner.apply.node_labels`` writes them; ``gpuplan.planner.driver.evictions`` reads
which nodes a change relabels. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ANNOTATION = "gpuplan.io/node-labels"


@dataclass(frozen=True)
class NodeLabels:
    """What one DaemonSet's annotation asks for."""

    selector: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    on_change: Mapping[str, str] = field(default_factory=dict)

    def annotation(self) -> str:
        document = {
            "selector": dict(self.selector),
            "labels": dict(self.labels),
            "onChange": dict(self.on_change),
        }
        return json.dumps({k: v for k, v in document.items() if v})

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector.items())

    def differs(self, labels: Mapping[str, str]) -> bool:
        return any(labels.get(key) != value for key, value in self.labels.items())


def of(manifest: Mapping[str, Any] | None) -> NodeLabels:
    """What ``manifest`` (a DaemonSet) asks for; no labels for any other object."""
    if not manifest or manifest.get("kind") != "DaemonSet":
        return NodeLabels()
    text = ((manifest.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if not text:
        return NodeLabels()
    document = json.loads(text)

    def strings(key: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in (document.get(key) or {}).items()}

    return NodeLabels(strings("selector"), strings("labels"), strings("onChange"))
