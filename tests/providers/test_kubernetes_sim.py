"""The provider against the full simulated cluster (design §6): scenarios lab and fleet-N, faults, shutdown.

The fixtures come from gpuplan.sim.testing (imported here, so this module does not depend on whether
tests/conftest.py loads that plugin).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuplan.errors import ClusterUnreachableError
from gpuplan.providers.k8s_errors import RetryPolicy
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.providers.snapshot import ClusterSnapshot, ObjectKey
from gpuplan.sim.testing import lab_sim, sim_factory  # noqa: F401  (fixtures)

KINDS = [
    ("apps/v1", "DaemonSet"),
    ("v1", "ServiceAccount"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("node.k8s.io/v1", "RuntimeClass"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
]
CLUSTER_POLICY_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterpolicies.nvidia.com"},
    "spec": {
        "group": "nvidia.com",
        "scope": "Cluster",
        "names": {
            "plural": "clusterpolicies",
            "singular": "clusterpolicy",
            "kind": "ClusterPolicy",
            "listKind": "ClusterPolicyList",
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                },
            }
        ],
    },
}


def refresh(sim: Any, tmp_path: Path, **kwargs: Any) -> ClusterSnapshot:
    kubeconfig = sim.write_kubeconfig(tmp_path / f"kubeconfig-{sim.scenario_name}")
    with KubernetesProvider(kubeconfig=str(kubeconfig), **kwargs) as provider:
        return provider.refresh(stack="lab", namespace="gpu-operator", kinds=KINDS)


def create(sim: Any, obj: dict[str, Any], manager: str = "kubectl-client-side-apply") -> dict[str, Any]:
    rt = sim.store.registry.for_kind(obj["apiVersion"], obj["kind"])
    created: dict[str, Any] = sim.store.create(
        rt, obj, namespace=obj["metadata"].get("namespace"), manager=manager
    )
    return created


def operand(name: str, image: str, owner_uid: str, command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image, **({"command": command} if command else {})}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": name,
            "namespace": "gpu-operator",
            "labels": {"app": name},
            "ownerReferences": [
                {
                    "apiVersion": "nvidia.com/v1",
                    "kind": "ClusterPolicy",
                    "name": "cluster-policy",
                    "uid": owner_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.deploy.gpu-feature-discovery": "true"},
                    "containers": [container],
                },
            },
        },
    }


def test_lab_hand_deployed_device_plugin_is_foreign(lab_sim: Any, tmp_path: Path) -> None:  # noqa: F811
    snapshot = refresh(lab_sim, tmp_path)
    [plugin] = snapshot.foreign
    assert plugin.key == ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
    assert (plugin.components, plugin.owner) == (("devicePlugin",), "manual")
    assert snapshot.managed == {} and snapshot.namespace is None
    assert ("monitoring.coreos.com/v1", "ServiceMonitor") in snapshot.unserved
    [node] = snapshot.nodes
    assert node["name"] == "lab-node" and node["capacity"]["nvidia.com/gpu"] == "1"
    assert "nvidia" in {handler["name"] for handler in node["runtimeHandlers"]}
    assert snapshot.server_version.startswith("v1.")


def test_managed_objects_are_found_by_the_stack_label(lab_sim: Any, tmp_path: Path) -> None:  # noqa: F811
    create(
        lab_sim,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "gpu-operator", "labels": {"gpuplan.io/stack": "lab"}},
        },
    )
    labels = {"gpuplan.io/stack": "lab", "app.kubernetes.io/managed-by": "gpuplan"}
    create(
        lab_sim,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator", "labels": labels},
        },
        manager="gpuplan",
    )
    create(
        lab_sim,
        {
            "apiVersion": "node.k8s.io/v1",
            "kind": "RuntimeClass",
            "handler": "nvidia",
            "metadata": {"name": "nvidia", "labels": labels},
        },
        manager="gpuplan",
    )
    create(
        lab_sim,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": "someone-elses",
                "namespace": "gpu-operator",
                "labels": {"gpuplan.io/stack": "prod"},
            },
        },
    )
    snapshot = refresh(lab_sim, tmp_path)
    assert sorted(key.ref for key in snapshot.managed) == [
        "node.k8s.io/v1/RuntimeClass/nvidia",
        "v1/ServiceAccount/gpu-operator/nvidia-dcgm-exporter",
    ]
    assert snapshot.namespace is not None and snapshot.namespace.labels["gpuplan.io/stack"] == "lab"


def test_request_count_is_identical_for_fleet_50_and_fleet_500(
    sim_factory: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    small = refresh(sim_factory("fleet-50"), tmp_path)
    large = refresh(sim_factory("fleet-500"), tmp_path)
    assert (len(small.nodes), len(large.nodes)) == (50, 500)
    assert small.requests == large.requests


def test_gpu_operator_cluster_policy_and_daemonsets_are_foreign(
    sim_factory: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    sim = sim_factory(
        {
            "nodes": [
                {
                    "name": "gpu-a",
                    "gpu": {"model": "a100-80gb", "count": 8},
                    "os": "ubuntu22.04",
                    "kernel": "5.15.0-139-generic",
                }
            ],
            "objects": [
                CLUSTER_POLICY_CRD,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
                {
                    "apiVersion": "nvidia.com/v1",
                    "kind": "ClusterPolicy",
                    "metadata": {"name": "cluster-policy"},
                    "spec": {"driver": {"enabled": True}, "dcgmExporter": {"enabled": False}},
                },
            ],
        }
    )
    policy_uid = sim.store.get(
        sim.store.registry.for_kind("nvidia.com/v1", "ClusterPolicy"), None, "cluster-policy"
    )["metadata"]["uid"]
    create(
        sim,
        operand(
            "gpu-feature-discovery",
            "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
            policy_uid,
            ["gpu-feature-discovery"],
        ),
        manager="gpu-operator",
    )
    create(
        sim,
        operand("nvidia-driver-daemonset", "nvcr.io/nvidia/driver:595.91.07-ubuntu22.04", policy_uid),
        manager="gpu-operator",
    )
    snapshot = refresh(sim, tmp_path)
    found = {f.key.ref: (f.components, f.owner, f.owner_name) for f in snapshot.foreign}
    assert found == {
        "nvidia.com/v1/ClusterPolicy/cluster-policy": (
            ("driver", "toolkit", "devicePlugin", "gfd", "validator"),
            "gpu-operator",
            "cluster-policy",
        ),
        "apps/v1/DaemonSet/gpu-operator/gpu-feature-discovery": (("gfd",), "gpu-operator", "cluster-policy"),
        "apps/v1/DaemonSet/gpu-operator/nvidia-driver-daemonset": (
            ("driver",),
            "gpu-operator",
            "cluster-policy",
        ),
    }


def test_429_faults_are_retried(lab_sim: Any, tmp_path: Path) -> None:  # noqa: F811
    expected = refresh(lab_sim, tmp_path)
    lab_sim.set_api_faults(error_rate=0.5, codes=[429], retry_after_seconds=2, seed=3)
    waits: list[float] = []
    snapshot = refresh(lab_sim, tmp_path, sleep=waits.append, retry=RetryPolicy(attempts=10))
    assert waits and set(waits) == {2.0}
    assert snapshot.requests == expected.requests + len(waits)
    assert [f.key for f in snapshot.foreign] == [f.key for f in expected.foreign]
    assert [n["name"] for n in snapshot.nodes] == ["lab-node"]


def test_a_stopped_simulator_is_unreachable(sim_factory: Any, tmp_path: Path) -> None:  # noqa: F811
    sim = sim_factory("lab")
    kubeconfig = sim.write_kubeconfig(tmp_path / "kubeconfig")
    sim.stop()
    with pytest.raises(ClusterUnreachableError) as caught:
        with KubernetesProvider(kubeconfig=str(kubeconfig), sleep=lambda _: None) as provider:
            provider.refresh(stack="lab", namespace="gpu-operator", kinds=KINDS)
    assert str(kubeconfig) in caught.value.render() and "gpuplan sim start" in caught.value.hint


def test_read_many_lists_a_kind_once_per_namespace(lab_sim: Any, tmp_path: Path) -> None:  # noqa: F811
    configmaps = lab_sim.store.registry.for_kind("v1", "ConfigMap")
    for name in ("a", "b", "c"):
        lab_sim.store.create(
            configmaps, {"metadata": {"name": name}, "data": {"k": name}}, namespace="default", manager="test"
        )
    kubeconfig = lab_sim.write_kubeconfig(tmp_path / "kubeconfig")
    wanted = [ObjectKey("v1", "ConfigMap", "default", name) for name in ("a", "c", "missing")]
    lone = ObjectKey("v1", "Namespace", None, "kube-system")
    with KubernetesProvider(kubeconfig=str(kubeconfig)) as provider:
        provider.read(ObjectKey("v1", "Namespace", None, "default"))  # discovery of v1, out of the count
        before = provider.request_count
        found = provider.read_many([*wanted, lone])
        assert provider.request_count - before == 2, "one list of the ConfigMaps, one GET of the Namespace"
    assert sorted(found) == sorted([wanted[0], wanted[1], lone])
    assert found[wanted[1]].manifest["data"] == {"k": "c"} and found[lone].manifest["kind"] == "Namespace"
