"""Classification of foreign NVIDIA component objects: by image (and command), and by owner."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.providers import foreign
from gpuplan.providers.snapshot import LiveObject

OPERATOR_OWNER = [
    {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "name": "cluster-policy",
        "uid": "c0ffee",
        "controller": True,
        "blockOwnerDeletion": True,
    }
]


def ds(
    name: str,
    containers: list[dict[str, Any]],
    *,
    namespace: str = "gpu-operator",
    init: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
) -> LiveObject:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": labels or {},
        "annotations": annotations or {},
    }
    if owners:
        metadata["ownerReferences"] = owners
    return LiveObject.from_manifest(
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": metadata,
            "spec": {"template": {"spec": {"containers": containers, "initContainers": init or []}}},
        }
    )


VALIDATION_INIT = [
    {
        "name": "toolkit-validation",
        "image": "nvcr.io/nvidia/gpu-operator:v26.7.0",
        "command": ["sh", "-c"],
        "args": ["nvidia-validator"],
    }
]


@pytest.mark.parametrize(
    "image,extra,component",
    [
        ("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", {}, "devicePlugin"),
        ("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", {"command": ["gpu-feature-discovery"]}, "gfd"),
        ("nvcr.io/nvidia/k8s-device-plugin:v0.17.0", {"command": ["/usr/bin/gpu-feature-discovery"]}, "gfd"),
        ("nvcr.io/nvidia/gpu-feature-discovery:v0.8.2", {}, "gfd"),
        ("nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless", {}, "dcgmExporter"),
        ("nvcr.io/nvidia/k8s/container-toolkit:v1.20.0", {}, "toolkit"),
        ("nvcr.io/nvidia/driver:595.91.07-ubuntu24.04", {}, "driver"),
        ("nvcr.io/nvidia/cloud-native/gpu-operator-validator:v24.9.2", {}, "validator"),
        ("registry.example.com:5000/mirror/nvidia/k8s-device-plugin@sha256:abc", {}, "devicePlugin"),
        ("nvcr.io/nvidia/k8s-device-plugin:v0.20.1", {"args": ["config-manager"]}, None),
        ("nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04", {}, None),
        ("docker.io/library/driver:1.0", {}, None),
        ("registry.k8s.io/kube-proxy:v1.34.0", {}, None),
    ],
)
def test_container_component_by_image(image: str, extra: dict[str, Any], component: str | None) -> None:
    assert foreign.container_component({"name": "main", "image": image, **extra}) == component


def test_hand_deployed_device_plugin_is_foreign_and_manual() -> None:
    lab = ds(
        "nvidia-device-plugin-daemonset",
        [{"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"}],
        namespace="kube-system",
    )
    [found] = foreign.foreign_daemonsets([lab], stack="lab")
    assert (found.components, found.owner, found.owner_name) == (("devicePlugin",), "manual", None)
    assert found.describe_owner() == "no tool (deployed by hand)"


def test_gpu_operator_daemonsets_are_owned_by_the_cluster_policy() -> None:
    plugin = ds(
        "nvidia-device-plugin-daemonset",
        [
            {"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"},
            {
                "name": "config-manager",
                "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
                "command": ["config-manager"],
            },
        ],
        init=VALIDATION_INIT,
        owners=OPERATOR_OWNER,
    )
    validator = ds(
        "nvidia-operator-validator",
        [
            {
                "name": "nvidia-operator-validator",
                "image": "nvcr.io/nvidia/gpu-operator:v26.7.0",
                "command": ["sh", "-c"],
                "args": ["echo all validations are successful; sleep infinity"],
            }
        ],
        init=VALIDATION_INIT,
        owners=OPERATOR_OWNER,
        labels={"app": "nvidia-operator-validator"},
    )
    found = foreign.foreign_daemonsets([plugin, validator], stack="lab")
    assert [(f.key.name, f.components, f.owner, f.owner_name) for f in found] == [
        ("nvidia-device-plugin-daemonset", ("devicePlugin",), "gpu-operator", "cluster-policy"),
        ("nvidia-operator-validator", ("validator",), "gpu-operator", "cluster-policy"),
    ]
    assert found[0].describe_owner() == "the GPU Operator (ClusterPolicy cluster-policy)"


def test_a_validation_init_container_does_not_make_an_operand_a_validator() -> None:
    exporter = ds(
        "nvidia-dcgm-exporter",
        [
            {
                "name": "nvidia-dcgm-exporter",
                "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
            }
        ],
        init=VALIDATION_INIT,
        owners=OPERATOR_OWNER,
    )
    assert foreign.daemonset_components(exporter.manifest) == ("dcgmExporter",)


def test_helm_release_and_other_stacks_and_own_stack() -> None:
    helm = ds(
        "nvdp-nvidia-device-plugin",
        [{"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0"}],
        namespace="nvidia-device-plugin",
        labels={"app.kubernetes.io/managed-by": "Helm"},
        annotations={"meta.helm.sh/release-name": "nvdp", "meta.helm.sh/release-namespace": "nvidia"},
    )
    other = ds(
        "nvidia-dcgm-exporter",
        [{"name": "e", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0"}],
        labels={"gpuplan.io/stack": "prod"},
    )
    mine = ds(
        "nvidia-dcgm-exporter",
        [{"name": "e", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0"}],
        namespace="gpu-ops",
        labels={"gpuplan.io/stack": "lab"},
    )
    unrelated = ds("kube-proxy", [{"name": "kube-proxy", "image": "registry.k8s.io/kube-proxy:v1.34.0"}])
    found = foreign.foreign_daemonsets([helm, other, mine, unrelated], stack="lab")
    assert [(f.owner, f.owner_name, f.describe_owner()) for f in found] == [
        ("helm", "nvdp", "Helm release nvdp"),
        ("gpuplan", "prod", "gpuplan stack prod"),
    ]


def test_cluster_policy_components_follow_enabled_flags() -> None:
    policy = LiveObject.from_manifest(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {
                "driver": {"enabled": False},
                "gfd": {"enabled": True},
                "dcgmExporter": {"enabled": False},
                "validator": {},
            },
        }
    )
    [found] = foreign.foreign_cluster_policies([policy])
    assert found.components == ("toolkit", "devicePlugin", "gfd", "validator")
    assert found.owner == "gpu-operator" and found.owner_name == "cluster-policy"
