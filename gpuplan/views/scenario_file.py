"""A cluster's shape as a scenario file (design §6): what ``gpuplan sim snapshot`` writes.

The text is YAML that ``gpuplan.sim.scenario.parse_scenario`` accepts (tested), with comments where the
cluster could not say something the format needs: a GPU model the simulator's catalog has no key for (the
node is written without ``gpu`` and keeps its NFD label), and the host toolkit's version, which no node
reports (``unknown``: the simulator only needs to know a host toolkit is there).
"""

from __future__ import annotations

from typing import Any

import yaml

from gpuplan.planner.observe.shape import ClusterShape, NodeGroup

UNKNOWN_TOOLKIT = "unknown"


def render(shape: ClusterShape) -> str:
    groups = len(shape.groups)
    lines = [
        "# A snapshot of a cluster's shape (gpuplan sim snapshot): its nodes, folded into groups of alike",
        "# ones, and the NVIDIA objects in it, without status, server-set fields or any Secret's data.",
        "# Start it with: gpuplan sim start --scenario THIS_FILE --kubeconfig ./sim.kubeconfig",
        f"# {shape.node_count} node(s) in {groups} entries; {len(shape.objects)} object(s).",
        "# toolkit: unknown = a host container toolkit is there (the nvidia runtime handler); nodes do not",
        "# report its version.",
        _dump({"description": f"snapshot of a cluster of {shape.node_count} nodes"}),
        "nodes:",
    ]
    for group in shape.groups:
        if group.shape.note:
            lines.append(f"  # {group.shape.note}:")
            lines.append(
                "  # written without gpu; set gpu: {model: KEY, count: N} with a catalog key (design §6)"
            )
        lines.append(_indent(_dump([node_entry(group)])))
    lines.append(_dump({"objects": list(shape.objects)}) if shape.objects else "objects: []")
    return "\n".join(lines) + "\n"


def node_entry(group: NodeGroup) -> dict[str, Any]:
    """One ``nodes[]`` entry; keys the simulator defaults the same way are left out."""
    shape = group.shape
    entry: dict[str, Any] = {"name": group.name} if group.name else {"namePrefix": group.prefix}
    if group.prefix:
        entry["count"] = group.count
    if shape.gpu_model:
        entry["gpu"] = {"model": shape.gpu_model, "count": shape.gpu_count}
    optional = {
        "os": shape.os,
        "kernel": shape.kernel,
        "driver": shape.driver,
        "toolkit": UNKNOWN_TOOLKIT if shape.toolkit else None,
        "containerRuntime": shape.container_runtime,
        "machine": shape.machine,
        "instanceType": shape.instance_type,
    }
    entry.update({key: value for key, value in optional.items() if value})
    if shape.labels:
        entry["labels"] = dict(shape.labels)
    if shape.taints:
        entry["taints"] = [dict(taint) for taint in shape.taints]
    if shape.unschedulable:
        entry["unschedulable"] = True
    if not shape.nfd:
        entry["nfd"] = False
    if shape.capacity:
        entry["capacity"] = dict(shape.capacity)
    if shape.allocatable:
        entry["allocatable"] = dict(shape.allocatable)
    return entry


def _dump(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, width=110).rstrip("\n")


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" if line else line for line in text.splitlines())
