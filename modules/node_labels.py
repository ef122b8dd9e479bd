"""The node labels a component needs on its nodes, as the GPU Operator's node labeller writes them for its
operands (pure).

A module states them as :class:`NodeLabels`: the labels a node must carry to get them (``selector``, e.g.
GFD's ``nvidia.com/mig.capable=true``), the labels, the labels written with them on a node whose labels
differ (a state the component resets when its input changes: the mig-manager's
``nvidia.com/mig.config.state=pending``), and the labels set only where the node has no value for them
(``if_absent``): the ``nvidia.com/gpu.deploy.<operand>=true`` a DaemonSet of the GPU Operator's pod-template
shape selects, whose other values (``false``, ``paused-for-...``) belong to whoever set them, as the
operator's labeller honours them (``addGPUStateLabels``, NVIDIA/gpu-operator controllers/state_manager.go:
"If a required state label already exists on the node, honor the current value"). The planner turns them
into each node's wanted labels, per node pool (``gpuplan.planner.pools``), which the plan lists and apply
writes, records and rolls back.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
"""The GPU Operator's common label of a GPU node, which third-party charts select on."""
NFD_NVIDIA_PCI_LABEL = "feature.node.kubernetes.io/pci-10de.present"
"""NFD's label of a node with an NVIDIA PCI device (vendor id 10de)."""


@dataclass(frozen=True)
class NodeLabels:
    """What one component asks for on the nodes ``selector`` picks."""

    selector: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    on_change: Mapping[str, str] = field(default_factory=dict)
    if_absent: Mapping[str, str] = field(default_factory=dict)

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.selector.items())

    def written(self) -> dict[str, str]:
        """Every label these ask gpuplan to write (where absent or always)."""
        return {**self.if_absent, **self.labels}


def gpu_present() -> NodeLabels:
    """``nvidia.com/gpu.present=true`` on every node NFD labels with NVIDIA's PCI vendor id, as the operator's
    ``labelGPUNodes`` does (NVIDIA/gpu-operator controllers/state_manager.go: ``hasGPULabels`` on the NFD
    ``pci-10de`` labels sets ``commonGPULabelKey``; a node that loses them loses it). It is the operator's
    labeller's, not GFD's, and needs nothing to run first: NFD's label is there before any component."""
    return NodeLabels(selector={NFD_NVIDIA_PCI_LABEL: "true"}, labels={GPU_PRESENT_LABEL: "true"})
