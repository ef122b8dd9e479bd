"""Node labels gpuplan set for a component that someone else changed since (pure).

Called by :mod:`gpuplan.planner.drift.report`. A live DaemonSet of the stack asks for node labels with its
annotations (:mod:`gpuplan.modules.node_labels`; the mig-manager's ``nvidia.com/mig.config``), and apply
writes them as the field manager :data:`~gpuplan.modules.node_labels.FIELD_MANAGER`. A selected node whose
label has another value, owned by another manager (``kubectl label --overwrite`` is ``kubectl-label``), was
changed outside gpuplan: the plan relabels it (``UPDATE_BECAUSE_NODE_LABELS``), the report names who did it.
A value gpuplan itself wrote (an apply under way) or a label not set yet (a node that joined) is not an edit.

The managers come from the refresh's node list, already reduced to each ``nvidia.com/*`` label's owners while
its pages arrived (:func:`gpuplan.providers.snapshot.label_managers`): no request more, nothing more held.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.modules import node_labels
from gpuplan.modules.common import COMPONENT_LABEL


@dataclass(frozen=True)
class LabelEdit:
    component: str
    node: str
    label: str
    wanted: str
    found: str
    managers: tuple[str, ...]


def edits(daemonsets: Iterable[Mapping[str, Any]], nodes: Iterable[Mapping[str, Any]]) -> list[LabelEdit]:
    """The labels ``daemonsets`` (live, the stack's) ask for that another manager changed on ``nodes``
    (the snapshot's reduced nodes), by node and label."""
    asked = [(_component(ds), node_labels.of(ds)) for ds in daemonsets]
    asked = [(component, wanted) for component, wanted in asked if wanted.labels]
    found: list[LabelEdit] = []
    for node in nodes:
        labels: Mapping[str, str] = node.get("labels") or {}
        owners: Mapping[str, Sequence[str]] = node.get("labelManagers") or {}
        for component, wanted in asked:
            if not wanted.selects(labels):
                continue
            for label, value in sorted(wanted.labels.items()):
                others = tuple(m for m in owners.get(label, ()) if m != node_labels.FIELD_MANAGER)
                if label in labels and labels[label] != value and others:
                    name = str(node.get("name"))
                    found.append(LabelEdit(component, name, label, value, labels[label], others))
    return sorted(found, key=lambda edit: (edit.node, edit.label))


def _component(daemonset: Mapping[str, Any]) -> str:
    return str(((daemonset.get("metadata") or {}).get("labels") or {}).get(COMPONENT_LABEL))
