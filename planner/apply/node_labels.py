"""Labels gpuplan sets on nodes for a component, as the GPU Operator's node labeller does for its operands.

A module asks for them with the DaemonSet annotation ``gpuplan.io/node-labels``: JSON
``{"selector": {label: value, ...}, "labels": {label: value, ...}, "onChange": {label: value, ...}}``, the
labels to set on every node that carries all of the selector's, and those to set with them on a node whose
labels differ (a state the component resets when its input changes). ``modules.mig_manager`` labels the
MIG-capable nodes (``nvidia.com/mig.capable=true``, GFD's) with ``nvidia.com/gpu.deploy.mig-manager=true``,
which its DaemonSet selects, and ``nvidia.com/mig.config``, which its mig-manager applies.

Before the gates of a component with such a DaemonSet change are judged (its dependencies' gates passed, so
GFD has labelled the nodes), and after undoing one (the before-object's labels), :func:`label_nodes`
server-side-applies them to each selected node whose labels differ, as the field manager
``gpuplan-node-labels``: the driver rollout's labels, applied as ``gpuplan``, are another manager's and stay.
A node that stops matching keeps them (as the operator leaves its own); so does one whose selector label
goes for a while (GFD's labels while GFD is paused).

Per-pool labels (a value per node group) can grow from here: one selector and labels per pool. One node
list per labelled DaemonSet change, one write per node that differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplan.modules.mig_manager import NODE_LABELS_ANNOTATION
from gpuplan.providers.protocols import Reader, Writer

FIELD_MANAGER = "gpuplan-node-labels"


class NodeClient(Reader, Writer, Protocol):
    """What labelling needs: the node list and server-side apply."""


@dataclass(frozen=True)
class NodeLabels:
    """What one DaemonSet's annotation asks for (see the module docstring)."""

    selector: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    on_change: Mapping[str, str] = field(default_factory=dict)


def wanted_labels(manifest: Mapping[str, Any] | None) -> NodeLabels:
    """What ``manifest`` (a DaemonSet) asks for; no labels for any other object."""
    if not manifest or manifest.get("kind") != "DaemonSet":
        return NodeLabels()
    text = ((manifest.get("metadata") or {}).get("annotations") or {}).get(NODE_LABELS_ANNOTATION)
    if not text:
        return NodeLabels()
    document = json.loads(text)

    def strings(key: str) -> dict[str, str]:
        return {str(k): str(v) for k, v in (document.get(key) or {}).items()}

    return NodeLabels(strings("selector"), strings("labels"), strings("onChange"))


def label_nodes(
    client: NodeClient, manifest: Mapping[str, Any] | None, report: Callable[[str], None] | None = None
) -> tuple[str, ...]:
    """Set the labels ``manifest`` asks for on its nodes; the names of the nodes written."""
    wanted = wanted_labels(manifest)
    if not wanted.labels:
        return ()
    written = []
    selector = ",".join(f"{k}={v}" for k, v in sorted(wanted.selector.items()))
    for live in client.list_nodes(label_selector=selector or None):
        if all(live.labels.get(key) == value for key, value in wanted.labels.items()):
            continue
        name = live.key.name
        labels = {**wanted.on_change, **wanted.labels}
        body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
        client.apply(body, field_manager=FIELD_MANAGER)
        written.append(name)
        if report is not None:
            report(f"{name}: labelled {', '.join(f'{k}={v}' for k, v in sorted(labels.items()))}")
    return tuple(written)
