"""Labels gpuplan sets on nodes for a component, as the GPU Operator's node labeller does for its operands.

A module asks for them with annotations on its DaemonSet (``modules.node_labels``: a node selector, the
labels, and the labels to set with them on a node whose labels differ).
``modules.mig_manager`` labels the MIG-capable nodes (``nvidia.com/mig.capable=true``, GFD's) with
``nvidia.com/gpu.deploy.mig-manager=true``, which its DaemonSet selects, and ``nvidia.com/mig.config``, which
its mig-manager applies.

Before the gates of a component with such a DaemonSet change are judged (its dependencies' gates passed, so
GFD has labelled the nodes), and after undoing one (the before-object's labels), :func:`label_nodes`
server-side-applies them to each selected node whose labels differ, as the field manager
``gpuplan-node-labels``: the driver rollout's labels, applied as ``gpuplan``, are another manager's and stay.
A node that stops matching keeps them (as the operator leaves its own); so does one whose selector label
goes for a while (GFD's labels while GFD is paused).

The labels to set only where absent (the GPU Operator's ``nvidia.com/gpu.deploy.<operand>=true`` a DaemonSet
of the operator's shape selects) are a merge patch, as the operator's labeller writes them: each
DaemonSet asks for its own, and one field manager's server-side apply of one DaemonSet's labels would
remove those it applied for another.

Per-pool labels (a value per node group) can grow from here: one selector and labels per pool. One node
list per labelled DaemonSet change, one write per node that differs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from gpuplan.modules import node_labels
from gpuplan.providers.protocols import NodeLabeller, Reader, Writer

FIELD_MANAGER = node_labels.FIELD_MANAGER


class NodeClient(Reader, Writer, NodeLabeller, Protocol):
    """What labelling needs: the node list, server-side apply and merge patches."""


def label_nodes(
    client: NodeClient, manifest: Mapping[str, Any] | None, report: Callable[[str], None] | None = None
) -> tuple[str, ...]:
    """Set the labels ``manifest`` asks for on its nodes; the names of the nodes written."""
    wanted = node_labels.of(manifest)
    if not wanted.labels and not wanted.if_absent:
        return ()
    written = []
    selector = ",".join(f"{k}={v}" for k, v in sorted(wanted.selector.items()))
    for live in client.list_nodes(label_selector=selector or None):
        if not wanted.lacks(live.labels):
            continue
        name = live.key.name
        labels = {**wanted.on_change, **wanted.labels} if wanted.differs(live.labels) else {}
        if labels:
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
            client.apply(body, field_manager=FIELD_MANAGER)
        absent = wanted.absent(live.labels)
        if absent:
            client.label_node(name, absent)
        written.append(name)
        if report is not None:
            shown = {**labels, **absent}
            report(f"{name}: labelled {', '.join(f'{k}={v}' for k, v in sorted(shown.items()))}")
    return tuple(written)
