"""NodeFacts from v1 Node objects: GFD and NFD labels, status; unknown stays unknown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpuplan.planner.facts import NodeFacts, family_of, reported_driver

NodeFactory = Callable[..., dict[str, Any]]  # the gpu_node fixture of conftest.py


def test_gfd_labelled_node(gpu_node: NodeFactory) -> None:
    facts = NodeFacts.from_node(
        gpu_node("h100-a", gpu="h100-80gb", driver="580.105.08", count=8, allocatable="8")
    )
    assert facts.name == "h100-a" and facts.has_nvidia_gpu and facts.gpu_known
    assert (facts.gpu_product, facts.gpu_family, facts.cc) == ("NVIDIA-H100-80GB-HBM3", "hopper", (9, 0))
    assert (facts.gpu_count, facts.mig_capable, facts.mig_enabled) == (8, True, False)
    assert (facts.driver_version, facts.driver_version_source) == ("580.105.08", "gfd-label")
    assert facts.runtime_handlers == ("runc", "nvidia")
    assert (facts.container_runtime, facts.os_tag, facts.kernel) == (
        "containerd",
        "ubuntu24.04",
        "6.8.0-101-generic",
    )
    assert facts.allocatable_gpus == 8


def test_before_gfd_the_gpu_is_unknown_not_guessed(gpu_node: NodeFactory) -> None:
    facts = NodeFacts.from_node(gpu_node("lab-node", gpu="rtx-3060", gfd=False))
    assert facts.has_nvidia_gpu and not facts.gpu_known
    assert (facts.gpu_product, facts.gpu_family, facts.cc, facts.gpu_count) == (None, None, None, None)
    assert (facts.mig_capable, facts.mig_enabled, facts.driver_version, facts.driver_version_source) == (
        None,
        None,
        None,
        None,
    )
    assert facts.allocatable_gpus is None


def test_cpu_node_has_no_gpu(gpu_node: NodeFactory) -> None:
    assert not NodeFacts.from_node(gpu_node("cpu-0", gpu=None)).has_nvidia_gpu


def test_pre_installed_driver_label_and_mig_modes(gpu_node: NodeFactory) -> None:
    pre = NodeFacts.from_node(gpu_node(labels={"nvidia.com/gpu.deploy.driver": "pre-installed"}))
    assert pre.preinstalled_driver
    single = NodeFacts.from_node(
        gpu_node(labels={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"})
    )
    assert single.mig_enabled is True
    mixed = NodeFacts.from_node(gpu_node(labels={"nvidia.com/mig-1g.10gb.count": "7"}))
    assert mixed.mig_enabled is True
    configured = NodeFacts.from_node(gpu_node(labels={"nvidia.com/mig.config": "all-1g.10gb"}))
    assert configured.mig_enabled is True
    disabled = NodeFacts.from_node(gpu_node(labels={"nvidia.com/mig.config": "all-disabled"}))
    assert disabled.mig_enabled is False


@pytest.mark.parametrize(
    ("state", "containerized"),
    [("pod-restart-required", True), ("upgrade-failed", True), ("upgrade-done", False), (None, False)],
)
def test_a_node_a_driver_rollout_is_changing_runs_no_host_driver(
    gpu_node: NodeFactory, state: str | None, containerized: bool
) -> None:
    """Between cordon and uncordon its driver pod may be gone (a hand-back between two DaemonSets), and the
    driver GFD last reported there is the containerised one, not a host driver."""
    labels = {"nvidia.com/gpu-driver-upgrade-state": state} if state else {}
    assert NodeFacts.from_node(gpu_node(labels=labels)).containerized_driver is containerized


def test_family_from_compute_capability_when_the_label_is_missing(gpu_node: NodeFactory) -> None:
    node = gpu_node(gpu="t4")
    del node["metadata"]["labels"]["nvidia.com/gpu.family"]
    assert NodeFacts.from_node(node).gpu_family == "turing"
    assert [family_of(*cc) for cc in ((7, 0), (7, 5), (8, 0), (8, 9), (9, 0), (10, 0), (12, 0), (4, 0))] == [
        "volta",
        "turing",
        "ampere",
        "ada-lovelace",
        "hopper",
        "blackwell",
        "blackwell",
        "undefined",
    ]


def test_os_tag_uses_the_major_version_for_rhel(gpu_node: NodeFactory) -> None:
    node = gpu_node(
        labels={
            "feature.node.kubernetes.io/system-os_release.ID": "rhel",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "9.4",
        }
    )
    node["status"]["nodeInfo"]["containerRuntimeVersion"] = "cri-o://1.31.0"
    facts = NodeFacts.from_node(node)
    assert (facts.os_tag, facts.container_runtime) == ("rhel9", "crio")


def test_the_stack_platform_comes_from_the_gpu_nodes(gpu_node: NodeFactory) -> None:
    from gpuplan.planner.facts import Platform, stack_platform

    cpu = gpu_node(
        "cpu-0", gpu=None, labels={"feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04"}
    )
    rhel = gpu_node(
        "rhel-0",
        labels={
            "feature.node.kubernetes.io/system-os_release.ID": "rhel",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "9.4",
        },
    )
    rhel["status"]["nodeInfo"]["containerRuntimeVersion"] = "cri-o://1.31.0"
    nodes = [NodeFacts.from_node(n) for n in (cpu, rhel, gpu_node("ubuntu-0"))]
    # the first GPU node's OS; the CPU node does not count; containerd wins over cri-o
    assert stack_platform(nodes) == Platform("rhel9", "containerd")
    assert stack_platform(nodes[:2]) == Platform("rhel9", "crio")
    # no node known to have a GPU yet: every node counts
    assert stack_platform(nodes[:1]) == Platform("ubuntu22.04", "containerd")
    assert stack_platform([]) == Platform(None, None)


DRIVER = "nvidia.com/cuda.driver-version.full"


@pytest.mark.parametrize(
    "labels",
    [
        {DRIVER: "580.105.08", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        {DRIVER: "570.195.03", "feature.node.kubernetes.io/pci-10de.present": "true"},
        {DRIVER: "580.105.08"},  # a label left on a node without a GPU
        {"nvidia.com/gpu.product": "Tesla-T4"},  # GFD has not labelled the driver
        {},
    ],
)
def test_the_reported_driver_is_the_one_the_node_facts_have(labels: dict[str, str]) -> None:
    node = {"metadata": {"name": "n1", "labels": labels}, "status": {}}
    facts = NodeFacts.from_node(node)
    assert reported_driver(node) == (facts.driver_version if facts.has_nvidia_gpu else None)
