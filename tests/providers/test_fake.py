"""FakeKubernetes behaves like the real provider's read side, for other layers' unit tests."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.errors import ClusterUnreachableError
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ClusterReader, ObjectKey

KINDS = [("apps/v1", "DaemonSet"), ("v1", "ServiceAccount"), ("monitoring.coreos.com/v1", "ServiceMonitor")]


def ds(name: str, namespace: str, image: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}},
    }


def lab_node() -> dict[str, Any]:
    return {
        "metadata": {"name": "lab-node", "labels": {"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-3060"}},
        "status": {
            "capacity": {"nvidia.com/gpu": "1"},
            "nodeInfo": {"kernelVersion": "6.8.0-101-generic"},
            "runtimeHandlers": [{"name": "nvidia"}],
        },
    }


@pytest.fixture
def cluster() -> FakeKubernetes:
    return FakeKubernetes(
        [
            ds("nvidia-device-plugin-daemonset", "kube-system", "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"),
            ds(
                "nvidia-dcgm-exporter",
                "gpu-operator",
                "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0",
                {"gpuplan.io/stack": "lab"},
            ),
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": "nvidia-dcgm-exporter",
                    "namespace": "gpu-operator",
                    "labels": {"gpuplan.io/stack": "x"},
                },
            },
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpu-operator"}},
        ],
        nodes=[lab_node()],
        served=[("apps/v1", "DaemonSet"), ("v1", "ServiceAccount"), ("v1", "Namespace")],
    )


def test_refresh_selects_by_stack_and_classifies_foreign(cluster: FakeKubernetes) -> None:
    reader: ClusterReader = cluster
    snapshot = reader.refresh(stack="lab", namespace="gpu-operator", kinds=KINDS)
    assert list(snapshot.managed) == [
        ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")
    ]
    assert [(f.key.namespace, f.components, f.owner) for f in snapshot.foreign] == [
        ("kube-system", ("devicePlugin",), "manual")
    ]
    assert snapshot.unserved == (("monitoring.coreos.com/v1", "ServiceMonitor"),)
    assert snapshot.namespace is not None and snapshot.nodes[0]["name"] == "lab-node"
    assert snapshot.nodes[0]["runtimeHandlers"] == [{"name": "nvidia"}]
    assert cluster.calls[0][0] == "refresh" and cluster.request_count == 1


def test_put_keeps_uid_and_bumps_resource_version_and_generation_like_a_server(
    cluster: FakeKubernetes,
) -> None:
    key = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")
    before = cluster.read(key)
    assert before is not None and before.generation == 1
    relabelled = dict(
        before.manifest, metadata={**before.metadata, "labels": {"gpuplan.io/stack": "lab", "x": "y"}}
    )
    after_label = cluster.put(relabelled)
    assert after_label.uid == before.uid and after_label.generation == 1
    assert int(after_label.resource_version or 0) > int(before.resource_version or 0)
    changed = dict(
        after_label.manifest,
        spec={
            "template": {
                "spec": {"containers": [{"name": "main", "image": "nvcr.io/nvidia/k8s/dcgm-exporter:4.7.0"}]}
            }
        },
    )
    stored = cluster.put(changed)
    assert stored.generation == 2
    snapshot = cluster.refresh(stack="lab", namespace="gpu-operator", kinds=KINDS)
    assert snapshot.resource_versions()[key.ref] == stored.resource_version
    seen = snapshot.content_fingerprints()[key.ref]
    assert (seen.uid, snapshot.resource_versions()[key.ref], seen.generation) == (
        before.uid,
        stored.resource_version,
        2,
    )


def test_returned_objects_are_copies(cluster: FakeKubernetes) -> None:
    key = ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")
    live = cluster.read(key)
    assert live is not None
    live.manifest["metadata"]["name"] = "changed"
    again = cluster.read(key)
    assert (
        again is not None
        and again.key.name == "nvidia-dcgm-exporter"
        and again.manifest["metadata"]["name"] == "nvidia-dcgm-exporter"
    )


def test_read_absent_unserved_and_injected_failures(cluster: FakeKubernetes) -> None:
    assert cluster.read(ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "absent")) is None
    cluster.remove(ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter"))
    assert cluster.read(ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter")) is None
    cluster.fail_next("refresh", ClusterUnreachableError("cannot reach the cluster"))
    with pytest.raises(ClusterUnreachableError):
        cluster.refresh(stack="lab", namespace="gpu-operator", kinds=KINDS)
    assert cluster.refresh(stack="lab", namespace="gpu-operator", kinds=KINDS).managed == {}
