"""providers.snapshot.node_facts: a Node reduced to what the planner reads, with what every node of a fleet
repeats (label keys and values, capacity, node info, the owners of each GPU label) held once for all."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.providers.snapshot import node_facts

GFD = "gpu-feature-discovery"


def node_json(name: str) -> str:
    """A Node as the API server sends it: each node decoded on its own, so no string is shared yet."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "8", "pool": "a"}
    managed = {
        "f:metadata": {"f:labels": {f"f:{key}": {} for key in labels if key.startswith("nvidia.com/")}}
    }
    node: dict[str, Any] = {
        "metadata": {
            "name": name,
            "labels": labels,
            "managedFields": [{"manager": GFD, "fieldsV1": managed}],
        },
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "8"},
            "nodeInfo": {"kernelVersion": "6.8.0-1015-nvidia", "containerRuntimeVersion": "containerd://1.7"},
        },
    }
    return json.dumps(node)


def test_nodes_hold_the_strings_and_label_owners_they_repeat_once() -> None:
    first, second = (node_facts(json.loads(node_json(name))) for name in ("gpu-1", "gpu-2"))
    assert first["labels"] == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "pool": "a",
    }
    assert first["labelManagers"] == {"nvidia.com/gpu.product": (GFD,), "nvidia.com/gpu.count": (GFD,)}
    for part in ("labels", "capacity", "allocatable", "nodeInfo", "labelManagers"):
        for (key, value), (other_key, other_value) in zip(first[part].items(), second[part].items()):
            assert key is other_key and value is other_value, (part, key)
