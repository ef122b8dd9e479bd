"""The provider against the simulator's real HTTP API server (TLS, bearer token, pagination, faults).

A bare Store behind the ApiServer, filled with the objects each test needs: no controllers or kubelets, so
these tests are fast and exact. The full simulated cluster (scenarios lab, fleet-N) is test_kubernetes_sim.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.errors import ClusterUnreachableError, TransientProviderError
from gpuplan.providers.k8s_errors import RetryPolicy
from gpuplan.providers.kubernetes import KubernetesProvider
from gpuplan.providers.snapshot import ObjectKey

KINDS = [
    ("apps/v1", "DaemonSet"),
    ("v1", "ServiceAccount"),
    ("v1", "Service"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("node.k8s.io/v1", "RuntimeClass"),
]
OWNER = [
    {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "name": "cluster-policy",
        "uid": "c0ffee",
        "controller": True,
        "blockOwnerDeletion": True,
    }
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


def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def daemonset(
    name: str,
    ns: str,
    image: str,
    *,
    labels: dict[str, str] | None = None,
    owners: list[dict[str, Any]] | None = None,
    command: list[str] | None = None,
) -> dict[str, Any]:
    app = {"app": name}
    container: dict[str, Any] = {"name": name, "image": image}
    if command:
        container["command"] = command
    metadata: dict[str, Any] = {"name": name, "namespace": ns, "labels": {**app, **(labels or {})}}
    if owners:
        metadata["ownerReferences"] = owners
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata,
        "spec": {
            "selector": {"matchLabels": app},
            "template": {"metadata": {"labels": app}, "spec": {"containers": [container]}},
        },
    }


def node(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"gpu-{i:04d}", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}},
    }


def lab_objects(stand: Any, nodes: int = 1) -> None:
    stand.create(
        namespace("gpu-operator")
    )  # kube-system and default exist from the start, as on a real server
    stand.create(
        daemonset("nvidia-device-plugin-daemonset", "kube-system", "nvcr.io/nvidia/k8s-device-plugin:v0.20.1")
    )
    stand.create(
        daemonset(
            "nvidia-dcgm-exporter",
            "gpu-operator",
            "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
            labels={"gpuplan.io/stack": "lab"},
        ),
        manager="gpuplan",
    )
    stand.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": "nvidia-dcgm-exporter",
                "namespace": "gpu-operator",
                "labels": {"gpuplan.io/stack": "lab"},
            },
        },
        manager="gpuplan",
    )
    stand.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "unlabelled", "namespace": "gpu-operator"},
        }
    )
    for i in range(nodes):
        stand.create(node(i), manager="kubelet")


def refresh(stand: Any, **kwargs: Any) -> Any:
    with KubernetesProvider(kubeconfig=stand.kubeconfig, **kwargs) as provider:
        return provider.refresh(stack="lab", namespace="gpu-operator", kinds=KINDS)


def test_refresh_over_https_finds_managed_foreign_and_nodes(api_stand: Any) -> None:
    stand = api_stand()
    lab_objects(stand, nodes=2)
    snapshot = refresh(stand)
    assert sorted(key.ref for key in snapshot.managed) == [
        "apps/v1/DaemonSet/gpu-operator/nvidia-dcgm-exporter",
        "v1/ServiceAccount/gpu-operator/nvidia-dcgm-exporter",
    ]
    [hand] = snapshot.foreign
    assert hand.key.ref == "apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset"
    assert (hand.components, hand.owner) == (("devicePlugin",), "manual")
    assert [n["name"] for n in snapshot.nodes] == ["gpu-0000", "gpu-0001"]
    assert snapshot.namespace is not None and snapshot.namespace.uid
    live = snapshot.managed[ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")]
    assert live.managed_fields and live.managed_fields[0]["manager"] == "gpuplan"
    assert snapshot.resource_versions()[live.key.ref] == live.resource_version


def test_request_count_is_the_same_for_50_and_500_nodes_and_one_more_page_at_501(api_stand: Any) -> None:
    counts = {}
    for nodes in (50, 500, 501):
        stand = api_stand()
        lab_objects(stand, nodes=nodes)
        snapshot = refresh(stand)
        assert len(snapshot.nodes) == nodes
        counts[nodes] = snapshot.requests
        stand.stop()
    assert counts[50] == counts[500]
    assert counts[501] == counts[500] + 1


def test_gpu_operator_cluster_policy_and_its_daemonsets_are_foreign(api_stand: Any) -> None:
    stand = api_stand()
    lab_objects(stand)
    stand.create(CLUSTER_POLICY_CRD)
    stand.create(
        {
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {"driver": {"enabled": False}, "toolkit": {"enabled": False}},
        },
        manager="helm",
    )
    stand.create(
        daemonset(
            "gpu-feature-discovery",
            "gpu-operator",
            "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
            owners=OWNER,
            command=["gpu-feature-discovery"],
        ),
        manager="gpu-operator",
    )
    stand.create(
        daemonset(
            "nvidia-dcgm-exporter-op", "gpu-operator", "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0", owners=OWNER
        ),
        manager="gpu-operator",
    )
    snapshot = refresh(stand)
    found = {f.key.ref: (f.components, f.owner, f.owner_name) for f in snapshot.foreign}
    assert found == {
        "nvidia.com/v1/ClusterPolicy/cluster-policy": (
            ("devicePlugin", "gfd", "dcgmExporter", "validator"),
            "gpu-operator",
            "cluster-policy",
        ),
        "apps/v1/DaemonSet/gpu-operator/gpu-feature-discovery": (("gfd",), "gpu-operator", "cluster-policy"),
        "apps/v1/DaemonSet/gpu-operator/nvidia-dcgm-exporter-op": (
            ("dcgmExporter",),
            "gpu-operator",
            "cluster-policy",
        ),
        "apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset": (("devicePlugin",), "manual", None),
    }


def test_429_faults_are_retried_with_the_servers_retry_after(api_stand: Any) -> None:
    from gpuplan.sim.api.faults import ApiFaults

    clean = api_stand()
    lab_objects(clean, nodes=3)
    expected = refresh(clean)
    faults = ApiFaults(error_rate=0.4, codes=[429], retry_after_seconds=3, seed=11)
    flaky = api_stand(faults)
    lab_objects(flaky, nodes=3)
    waits: list[float] = []
    snapshot = refresh(flaky, sleep=waits.append, retry=RetryPolicy(attempts=10))
    assert waits and set(waits) == {3.0}
    assert snapshot.requests == expected.requests + len(waits)
    assert sorted(k.ref for k in snapshot.managed) == sorted(k.ref for k in expected.managed)
    assert [n["name"] for n in snapshot.nodes] == [n["name"] for n in expected.nodes]
    faults.update(error_rate=1.0)
    with pytest.raises(TransientProviderError) as caught:
        refresh(flaky, sleep=waits.append, retry=RetryPolicy(attempts=2))
    assert caught.value.retry_after == 3.0 and "429" in caught.value.summary


def test_a_stopped_server_is_unreachable(api_stand: Any) -> None:
    stand = api_stand()
    lab_objects(stand)
    url = stand.server.url
    stand.stop()
    with pytest.raises(ClusterUnreachableError) as caught:
        refresh(stand, sleep=lambda _: None)
    text = caught.value.render()
    assert url in text and stand.kubeconfig in text and "gpuplan sim start" in text
    assert "Traceback" not in text


def test_read_one_object_and_absent_ones(api_stand: Any) -> None:
    stand = api_stand()
    lab_objects(stand)
    with KubernetesProvider(kubeconfig=stand.kubeconfig) as provider:
        live = provider.read(
            ObjectKey("apps/v1", "DaemonSet", "kube-system", "nvidia-device-plugin-daemonset")
        )
        assert live is not None and live.manifest["kind"] == "DaemonSet" and live.generation == 1
        assert provider.read(ObjectKey("apps/v1", "DaemonSet", "kube-system", "absent")) is None
        assert provider.read(ObjectKey("nvidia.com/v1", "ClusterPolicy", None, "cluster-policy")) is None
