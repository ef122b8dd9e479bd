"""refresh() against a scripted API (no network): which requests it makes, pagination, classification.

The integration tests against the simulated cluster (test_kubernetes_sim.py) check the same against a real
HTTP API server; these pin the request plan itself.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from gpuplan.errors import AccessDeniedError
from gpuplan.providers.kubernetes import PAGE_SIZE, KubernetesProvider
from gpuplan.providers.snapshot import ObjectKey

STACK = "lab"
KINDS = [
    ("apps/v1", "DaemonSet"),
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
]


def discovery(
    group_version: str, *kinds: tuple[str, str, bool]
) -> tuple[int, dict[str, Any], dict[str, str]]:
    return (
        200,
        {
            "kind": "APIResourceList",
            "groupVersion": group_version,
            "resources": [
                {"name": plural, "kind": kind, "namespaced": namespaced, "verbs": ["get", "list"]}
                for kind, plural, namespaced in kinds
            ],
        },
        {},
    )


def node(i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"gpu-{i:04d}",
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
            "resourceVersion": str(1000 + i),
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": "8"},
            "nodeInfo": {"kernelVersion": "6.8.0-101-generic", "containerRuntimeVersion": "containerd://2.1"},
            "runtimeHandlers": [{"name": "nvidia"}],
            "images": [{"names": ["big"], "sizeBytes": 1}],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "lastHeartbeatTime": "2026-11-29T10:00:00Z",
                }
            ],
        },
    }


def node_pages(count: int, expire_once: list[bool] | None = None) -> Any:
    def answer(query: dict[str, list[str]]) -> tuple[int, dict[str, Any], dict[str, str]]:
        assert query["limit"] == [str(PAGE_SIZE)]
        start = int(query.get("continue", ["0"])[0])
        if start and expire_once:
            expire_once.pop()
            return (
                410,
                {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": "The provided continue parameter is too old",
                },
                {},
            )
        end = min(start + PAGE_SIZE, count)
        metadata = {"resourceVersion": "5000", **({"continue": str(end)} if end < count else {})}
        return (
            200,
            {"kind": "NodeList", "metadata": metadata, "items": [node(i) for i in range(start, end)]},
            {},
        )

    return answer


def daemonset(
    name: str, namespace: str, image: str, labels: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels or {},
            "resourceVersion": "11",
            **extra,
        },
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": image}]}}},
    }


def routes(
    node_count: int, *, cluster_policy: bool = False, expire_once: list[bool] | None = None
) -> dict[str, list[Any]]:
    mine = daemonset(
        "nvidia-dcgm-exporter",
        "gpu-operator",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
        {"gpuplan.io/stack": STACK},
    )
    hand = daemonset(
        "nvidia-device-plugin-daemonset", "kube-system", "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
    )
    other = daemonset("kube-proxy", "kube-system", "registry.k8s.io/kube-proxy:v1.34.0")
    table: dict[str, list[Any]] = {
        "/version": [(200, {"major": "1", "minor": "34", "gitVersion": "v1.34.1"}, {})],
        "/api/v1": [
            discovery(
                "v1",
                ("ServiceAccount", "serviceaccounts", True),
                ("Node", "nodes", False),
                ("Namespace", "namespaces", False),
            )
        ],
        "/apis/apps/v1": [discovery("apps/v1", ("DaemonSet", "daemonsets", True))],
        "/apis/rbac.authorization.k8s.io/v1": [
            discovery("rbac.authorization.k8s.io/v1", ("ClusterRole", "clusterroles", False))
        ],
        "/apis/apps/v1/daemonsets": [(200, {"metadata": {}, "items": [mine, hand, other]}, {})],
        "/api/v1/serviceaccounts": [
            (
                200,
                {
                    "metadata": {},
                    "items": [
                        {
                            "metadata": {
                                "name": "nvidia-dcgm-exporter",
                                "namespace": "gpu-operator",
                                "resourceVersion": "12",
                                "labels": {"gpuplan.io/stack": STACK},
                            }
                        }
                    ],
                },
                {},
            )
        ],
        "/apis/rbac.authorization.k8s.io/v1/clusterroles": [(200, {"metadata": {}, "items": []}, {})],
        "/api/v1/nodes": [node_pages(node_count, expire_once)],
        "/api/v1/namespaces/gpu-operator": [
            (200, {"metadata": {"name": "gpu-operator", "resourceVersion": "3"}}, {})
        ],
    }
    if cluster_policy:
        table["/apis/nvidia.com/v1"] = [
            discovery("nvidia.com/v1", ("ClusterPolicy", "clusterpolicies", False))
        ]
        table["/apis/nvidia.com/v1/clusterpolicies"] = [
            (
                200,
                {
                    "metadata": {},
                    "items": [
                        {
                            "apiVersion": "nvidia.com/v1",
                            "kind": "ClusterPolicy",
                            "metadata": {"name": "cluster-policy", "resourceVersion": "99"},
                            "spec": {"driver": {"enabled": False}, "toolkit": {"enabled": False}},
                        }
                    ],
                },
                {},
            )
        ]
    return table


def test_refresh_reads_managed_foreign_nodes_with_a_fixed_request_plan(scripted: Any) -> None:
    client = scripted(routes(3))
    snapshot = KubernetesProvider(api_client=client).refresh(
        stack=STACK, namespace="gpu-operator", kinds=KINDS
    )
    assert snapshot.server_version == "v1.34.1"
    assert set(snapshot.managed) == {
        ObjectKey("apps/v1", "DaemonSet", "gpu-operator", "nvidia-dcgm-exporter"),
        ObjectKey("v1", "ServiceAccount", "gpu-operator", "nvidia-dcgm-exporter"),
    }
    assert snapshot.unserved == (("monitoring.coreos.com/v1", "ServiceMonitor"),)
    [hand] = snapshot.foreign
    assert (hand.key.namespace, hand.components, hand.owner) == ("kube-system", ("devicePlugin",), "manual")
    assert snapshot.namespace is not None and snapshot.namespace.key.name == "gpu-operator"
    assert [n["name"] for n in snapshot.nodes] == ["gpu-0000", "gpu-0001", "gpu-0002"]
    facts = snapshot.nodes[0]
    assert facts["allocatable"] == {"nvidia.com/gpu": "8"} and facts["runtimeHandlers"] == [
        {"name": "nvidia"}
    ]
    assert "images" not in facts and facts["conditions"][0] == {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": None,
    }
    paths = [path for path, _ in client.requests]
    # pods are never listed; DaemonSets once (managed ones come from the same answer); lists carry the
    # selector
    assert not any("pods" in path for path in paths)
    assert paths.count("/apis/apps/v1/daemonsets") == 1
    selectors = {path: query.get("labelSelector") for path, query in client.requests}
    assert selectors["/api/v1/serviceaccounts"] == ["gpuplan.io/stack=lab"]
    assert selectors["/apis/apps/v1/daemonsets"] is None
    assert snapshot.requests == len(client.requests)
    # the saved-plan binding covers managed and foreign objects, not nodes
    assert snapshot.resource_versions() == {
        "apps/v1/DaemonSet/gpu-operator/nvidia-dcgm-exporter": "11",
        "apps/v1/DaemonSet/kube-system/nvidia-device-plugin-daemonset": "11",
        "v1/ServiceAccount/gpu-operator/nvidia-dcgm-exporter": "12",
    }


def test_request_count_does_not_grow_with_nodes_except_one_page_per_500(scripted: Any) -> None:
    counts = {}
    for nodes in (3, 500, 501, 1200):
        client = scripted(routes(nodes))
        snapshot = KubernetesProvider(api_client=client).refresh(
            stack=STACK, namespace="gpu-operator", kinds=KINDS
        )
        assert len(snapshot.nodes) == nodes and len({n["name"] for n in snapshot.nodes}) == nodes
        counts[nodes] = snapshot.requests
    assert counts[3] == counts[500]
    assert counts[501] == counts[3] + 1 and counts[1200] == counts[3] + 2


def test_cluster_policy_is_foreign_with_the_components_it_enables(scripted: Any) -> None:
    snapshot = KubernetesProvider(api_client=scripted(routes(1, cluster_policy=True))).refresh(
        stack=STACK, namespace="gpu-operator", kinds=KINDS
    )
    policy = next(f for f in snapshot.foreign if f.key.kind == "ClusterPolicy")
    assert policy.owner == "gpu-operator" and policy.owner_name == "cluster-policy"
    assert policy.components == ("devicePlugin", "gfd", "dcgmExporter", "validator")


def test_an_expired_continue_token_restarts_the_node_list(scripted: Any) -> None:
    client = scripted(routes(1100, expire_once=[True]))
    snapshot = KubernetesProvider(api_client=client).refresh(
        stack=STACK, namespace="gpu-operator", kinds=KINDS
    )
    assert len(snapshot.nodes) == 1100 and len({n["name"] for n in snapshot.nodes}) == 1100
    node_requests = [q.get("continue") for path, q in client.requests if path == "/api/v1/nodes"]
    assert node_requests == [None, ["500"], None, ["500"], ["1000"]]


NFD_GROUP = "/apis/nfd.k8s-sigs.io/v1alpha1"


def node_feature_pages(count: int) -> Any:
    """NodeFeatures of ``count`` nodes in pages of PAGE_SIZE: 8 V100s and an NVSwitch-less host bridge."""

    def answer(query: dict[str, list[str]]) -> tuple[int, dict[str, Any], dict[str, str]]:
        assert query["labelSelector"] == ["nfd.node.kubernetes.io/node-name"]
        start = int(query.get("continue", ["0"])[0])
        end = min(start + PAGE_SIZE, count)
        items = [
            {
                "metadata": {
                    "name": f"gpu-{i:04d}",
                    "namespace": "node-feature-discovery",
                    "labels": {"nfd.node.kubernetes.io/node-name": f"gpu-{i:04d}"},
                },
                "spec": {
                    "features": {
                        "instances": {
                            "pci.device": {
                                "elements": [
                                    {"attributes": {"class": "0600", "vendor": "8086", "device": "1237"}},
                                    *[{"attributes": {"class": "0302", "vendor": "10de", "device": "1db5"}}]
                                    * 8,
                                ]
                            }
                        }
                    }
                },
            }
            for i in range(start, end)
        ]
        metadata = {"continue": str(end)} if end < count else {}
        return 200, {"kind": "NodeFeatureList", "metadata": metadata, "items": items}, {}

    return answer


def with_nfd(table: dict[str, list[Any]], list_answer: Any) -> dict[str, list[Any]]:
    table[NFD_GROUP] = [discovery("nfd.k8s-sigs.io/v1alpha1", ("NodeFeature", "nodefeatures", True))]
    table[f"{NFD_GROUP}/nodefeatures"] = [list_answer]
    return table


def test_node_features_are_one_selected_list_of_every_namespace_flat_in_nodes(scripted: Any) -> None:
    counts = {}
    for nodes in (3, 500):
        client = scripted(with_nfd(routes(nodes), node_feature_pages(nodes)))
        snapshot = KubernetesProvider(api_client=client).refresh(
            stack=STACK, namespace="gpu-operator", kinds=KINDS
        )
        assert snapshot.node_features.status == "read" and len(snapshot.node_features.devices) == nodes
        assert [d.device for d in snapshot.node_features.devices["gpu-0000"]] == ["1db5"] * 8
        paths = [path for path, _ in client.requests]
        assert paths.count(f"{NFD_GROUP}/nodefeatures") == 1
        counts[nodes] = snapshot.requests
    assert counts[3] == counts[500]


def test_no_nfd_crd_is_no_nfd_source(scripted: Any) -> None:
    snapshot = KubernetesProvider(api_client=scripted(routes(1))).refresh(
        stack=STACK, namespace="gpu-operator", kinds=KINDS
    )
    assert snapshot.node_features.status == "not-served" and snapshot.node_features.devices == {}


def test_forbidden_node_features_are_recorded_for_a_warning(scripted: Any) -> None:
    denied = (
        403,
        {
            "kind": "Status",
            "status": "Failure",
            "reason": "Forbidden",
            "code": 403,
            "message": 'nodefeatures.nfd.k8s-sigs.io is forbidden: User "ci" cannot list resource',
        },
        {},
    )
    snapshot = KubernetesProvider(api_client=scripted(with_nfd(routes(1), denied))).refresh(
        stack=STACK, namespace="gpu-operator", kinds=KINDS
    )
    assert snapshot.node_features.status == "forbidden" and snapshot.node_features.detail


FORBIDDEN = (
    403,
    {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403, "message": "forbidden"},
    {},
)


def test_the_node_list_and_the_node_feature_list_are_read_at_once(scripted: Any) -> None:
    """Each list's first page is answered only once the other list has been asked for: read one after the
    other, the first would wait in vain."""
    asked = {"nodes": threading.Event(), "features": threading.Event()}

    def once_both_asked(mine: str, other: str, answer: Any) -> Any:
        def wait_then_answer(query: dict[str, list[str]]) -> Any:
            asked[mine].set()
            assert asked[other].wait(30), f"{other} was not asked for while {mine} was read"
            return answer(query)

        return wait_then_answer

    table = with_nfd(routes(3), once_both_asked("features", "nodes", node_feature_pages(3)))
    table["/api/v1/nodes"] = [once_both_asked("nodes", "features", node_pages(3))]
    client = scripted(table)
    snapshot = KubernetesProvider(api_client=client).refresh(
        stack=STACK, namespace="gpu-operator", kinds=KINDS
    )
    assert len(snapshot.nodes) == 3 and len(snapshot.node_features.devices) == 3
    assert snapshot.requests == len(client.requests), "the threads' requests are counted"


def test_a_node_list_that_fails_fails_the_refresh(scripted: Any) -> None:
    table = routes(3)
    table["/api/v1/nodes"] = [FORBIDDEN]
    with pytest.raises(AccessDeniedError, match="list nodes"):
        KubernetesProvider(api_client=scripted(table)).refresh(
            stack=STACK, namespace="gpu-operator", kinds=KINDS
        )


def test_a_refresh_that_fails_returns_once_its_lists_are_done(scripted: Any) -> None:
    """The node list answers only once the DaemonSet list has failed: the refresh raises after it."""
    failed, release = threading.Event(), threading.Event()

    def held_nodes(query: dict[str, list[str]]) -> Any:
        assert release.wait(30)
        return node_pages(3)(query)

    def failing_daemonsets(query: dict[str, list[str]]) -> Any:
        failed.set()
        return FORBIDDEN

    def release_once_failed() -> None:
        failed.wait(30)
        release.set()

    table = routes(3)
    table["/api/v1/nodes"] = [held_nodes]
    table["/apis/apps/v1/daemonsets"] = [failing_daemonsets]
    threading.Thread(target=release_once_failed, daemon=True).start()
    with pytest.raises(AccessDeniedError, match="DaemonSet"):
        KubernetesProvider(api_client=scripted(table)).refresh(
            stack=STACK, namespace="gpu-operator", kinds=KINDS
        )
    assert release.is_set()
    assert not [t for t in threading.enumerate() if t.name.startswith("gpuplan-refresh")]
