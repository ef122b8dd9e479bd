"""The node labels a component needs on its nodes, as the GPU Operator's node labeller writes them for its
operands (pure).

A module states them as :class:`NodeLabels`: the labels a node must carry to get them (``selector``, e.g.
GFD's ``nvidia.com/mig.capable=true``), the labels, and the labels written with them on a node whose labels
differ (a state the component resets when its input changes: the mig-manager's
``nvidia.com/mig.config.state=pending``). The planner turns them into each node's wanted labels, per node
pool (``gpuplan.planner.pools``), which the plan lists and apply writes, records and rolls back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class NodeLabels:
    """What one component asks for on the nodes ``selector`` picks."""

    selector: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    on_change: Mapping[str, str] = field(default_factory=dict)

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector.items())
