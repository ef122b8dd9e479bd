"""The drift report holds only what the matrix needs of each pod: folding a fleet's pods page by page (as
`drift report` lists them) grows the memory held by far less than the pods themselves grow."""

from __future__ import annotations

import copy
import tracemalloc
from collections.abc import Iterator
from typing import Any

from gpuplan.planner.drift import pods as drift_pods

NOW = 1_800_000_000.0
COMPONENTS = ("devicePlugin", "gfd", "dcgmExporter", "validator")
PAGE = 100
"""Smaller than the real 500 so that both fleets below span several pages quickly."""


def served_pod(component: str, node: str, index: int) -> dict[str, Any]:
    """A stack pod the way the API server serves it: managedFields, volumes, env, five conditions."""
    name = f"{component.lower()}-{node}-{index:05d}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "gpu-operator",
            "uid": f"uid-{name}",
            "resourceVersion": "12345",
            "labels": {
                "gpuplan.io/component": component,
                "gpuplan.io/stack": "bench",
                "pod-template-generation": "1",
                "controller-revision-hash": "6d4c9b7f8",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": component,
                    "uid": f"ds-{component}",
                    "controller": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "fieldsV1": {f"f:field{i}": {} for i in range(40)},
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "subresource": "status",
                    "fieldsV1": {f"f:status{i}": {} for i in range(40)},
                },
            ],
        },
        "spec": {
            "nodeName": node,
            "serviceAccountName": component,
            "containers": [
                {
                    "name": component,
                    "image": f"nvcr.io/nvidia/{component}:v1.0.0",
                    "env": [{"name": f"ENV_{i}", "value": f"value-{i}"} for i in range(12)],
                    "volumeMounts": [{"name": f"v{i}", "mountPath": f"/host/path/{i}"} for i in range(6)],
                    "resources": {"limits": {"cpu": "1", "memory": "512Mi"}},
                }
            ],
            "volumes": [{"name": f"v{i}", "hostPath": {"path": f"/host/path/{i}"}} for i in range(6)],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "hostIP": "192.168.0.1",
            "conditions": [
                {"type": kind, "status": "True", "lastTransitionTime": "2026-11-29T18:00:00Z"}
                for kind in (
                    "PodReadyToStartContainers",
                    "Initialized",
                    "Ready",
                    "ContainersReady",
                    "PodScheduled",
                )
            ],
            "containerStatuses": [
                {
                    "name": component,
                    "ready": True,
                    "restartCount": 0,
                    "image": f"nvcr.io/nvidia/{component}:v1.0.0",
                    "imageID": "sha256:" + "a" * 64,
                    "containerID": "containerd://" + "b" * 64,
                    "state": {"running": {"startedAt": "2026-11-29T18:00:00Z"}},
                }
            ],
        },
    }


def pages(nodes: int) -> Iterator[list[dict[str, Any]]]:
    """The fleet's stack pods, a list page at a time (each page built when asked, as it arrives)."""
    names = [(component, f"node-{n:05d}") for n in range(nodes) for component in COMPONENTS]
    for start in range(0, len(names), PAGE):
        yield [
            served_pod(component, node, index)
            for index, (component, node) in enumerate(names[start : start + PAGE], start)
        ]


def folded_peak(nodes: int) -> int:
    """Peak memory while the pods are listed and folded (the folded facts kept, as the report keeps them)."""
    tracemalloc.start()
    try:
        held = []
        for page in pages(nodes):
            held.extend(drift_pods.pod_facts(pod, now=NOW) for pod in page)
            del page
        assert len(held) == nodes * len(COMPONENTS) and all(held)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def whole_size(nodes: int) -> int:
    """Memory the same pods take when held whole."""
    tracemalloc.start()
    try:
        kept = [copy.deepcopy(pod) for page in pages(nodes) for pod in page]
        size = tracemalloc.get_traced_memory()[0]
        assert len(kept) == nodes * len(COMPONENTS)
        return size
    finally:
        tracemalloc.stop()


def test_folding_a_fleet_s_pods_grows_memory_by_far_less_than_the_pods_grow() -> None:
    small, large = 50, 400  # 2 and 16 pages
    per_node = whole_size(small) / small
    pods_growth = int(per_node * (large - small))
    folded_growth = folded_peak(large) - folded_peak(small)
    assert pods_growth > 0
    # Whole pods here are ~25 KB each; the earlier compacted dicts still grew by about 1/7 of that, the folded
    # facts by about 1/60: 1/20 tells the two apart with room for the allocator's noise.
    assert folded_growth < pods_growth / 20, (
        f"folded memory grew {folded_growth} bytes for {pods_growth} bytes more pods"
    )
