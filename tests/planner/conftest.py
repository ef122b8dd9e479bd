"""Fixtures of the planner tests: v1 Node objects as kubelet, NFD and (optionally) GFD label them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

# model -> (GFD product label, compute major, minor, family, MIG-capable)
GPUS: dict[str, tuple[str, int, int, str, bool]] = {
    "rtx-3060": ("NVIDIA-GeForce-RTX-3060", 8, 6, "ampere", False),
    "t4": ("Tesla-T4", 7, 5, "turing", False),
    "v100": ("Tesla-V100-SXM2-32GB", 7, 0, "volta", False),
    "a100-80gb": ("NVIDIA-A100-SXM4-80GB", 8, 0, "ampere", True),
    "l40s": ("NVIDIA-L40S", 8, 9, "ada-lovelace", False),
    "h100-80gb": ("NVIDIA-H100-80GB-HBM3", 9, 0, "hopper", True),
    "h200": ("NVIDIA-H200", 9, 0, "hopper", True),
    "b200": ("NVIDIA-B200", 10, 0, "blackwell", True),
    "rtx-pro-6000": ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 12, 0, "blackwell", True),
}

NodeFactory = Callable[..., dict[str, Any]]


def make_node(
    name: str = "gpu-0",
    *,
    gpu: str | None = "a100-80gb",
    gfd: bool = True,
    driver: str | None = None,
    count: int = 1,
    labels: dict[str, str] | None = None,
    allocatable: str | None = None,
    handlers: tuple[str, ...] = ("runc", "nvidia"),
) -> dict[str, Any]:
    """A Node as the API server returns it; GFD labels only with ``gfd=True`` (and a GPU)."""
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
        "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04",
        "feature.node.kubernetes.io/kernel-version.full": "6.8.0-101-generic",
    }
    if gpu is not None:
        node_labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
    if gpu is not None and gfd:
        product, major, minor, family, mig = GPUS[gpu]
        node_labels.update(
            {
                "nvidia.com/gpu.present": "true",  # a labelled node: gpuplan (or the operator) wrote it
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(count),
                "nvidia.com/gpu.family": family,
                "nvidia.com/gpu.compute.major": str(major),
                "nvidia.com/gpu.compute.minor": str(minor),
                "nvidia.com/mig.capable": str(mig).lower(),
            }
        )
        if driver:
            node_labels["nvidia.com/cuda.driver-version.full"] = driver
    node_labels.update(labels or {})
    status: dict[str, Any] = {
        "nodeInfo": {
            "containerRuntimeVersion": "containerd://2.1.3",
            "kernelVersion": "6.8.0-101-generic",
            "osImage": "Ubuntu 24.04.1 LTS",
        },
        "runtimeHandlers": [{"name": h, "features": {}} for h in handlers],
        "allocatable": {"cpu": "32", "memory": "256Gi"},
    }
    if allocatable is not None:
        status["allocatable"]["nvidia.com/gpu"] = allocatable
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": node_labels},
        "status": status,
    }


@pytest.fixture
def gpu_node() -> NodeFactory:
    return make_node
