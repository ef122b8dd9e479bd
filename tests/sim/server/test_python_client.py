"""The official Python client, configured only from the kubeconfig the server writes: every verb,
selectors, pagination, conflicts, watch, dry run, errors, and the dynamic client's discovery."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes import config, watch
from kubernetes.client.rest import ApiException
from kubernetes.dynamic import DynamicClient
from server_kit import DAEMONSETS, NODES, PODS, TOKEN, daemonset, node, pod, put

from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.server import ApiServer, write_kubeconfig
from gpuplan.sim.api.store import Store


def _names(items: list[Any]) -> list[str]:
    return sorted(item.metadata.name for item in items)


def test_create_get_list_and_delete_a_config_map(client: Any) -> None:
    core = k8s.CoreV1Api(client)
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "cm1"}, "data": {"k": "v"}})
    assert created.metadata.uid and created.metadata.resource_version
    assert core.read_namespaced_config_map("cm1", "default").data == {"k": "v"}
    assert "cm1" in _names(core.list_namespaced_config_map("default").items)
    core.delete_namespaced_config_map("cm1", "default")
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_config_map("cm1", "default")
    assert caught.value.status == 404


def test_field_manager_of_the_python_client_comes_from_its_user_agent(client: Any) -> None:
    created = k8s.CoreV1Api(client).create_namespaced_config_map(
        "default", {"metadata": {"name": "ua"}, "data": {"a": "b"}}
    )
    assert [entry.manager for entry in created.metadata.managed_fields] == ["OpenAPI-Generator"]


def test_create_twice_is_409_already_exists(client: Any) -> None:
    core = k8s.CoreV1Api(client)
    core.create_namespace({"metadata": {"name": "twice"}})
    with pytest.raises(ApiException) as caught:
        core.create_namespace({"metadata": {"name": "twice"}})
    assert caught.value.status == 409 and '"reason":"AlreadyExists"' in caught.value.body


def test_replace_with_a_stale_resource_version_is_409_conflict(client: Any) -> None:
    apps = k8s.AppsV1Api(client)
    first = apps.create_namespaced_daemon_set("default", daemonset("dp"))
    first.spec.template.spec.containers[0].image = "nvcr.io/nvidia/k8s-device-plugin:v0.20.2"
    updated = apps.replace_namespaced_daemon_set("dp", "default", first)
    assert updated.metadata.generation == 2
    first.spec.template.spec.containers[0].image = "nvcr.io/nvidia/k8s-device-plugin:v0.19.0"
    with pytest.raises(ApiException) as caught:
        apps.replace_namespaced_daemon_set("dp", "default", first)  # first still carries the old RV
    assert caught.value.status == 409 and '"reason":"Conflict"' in caught.value.body


def test_patch_types_merge_json_strategic_and_apply(client: Any) -> None:
    apps = k8s.AppsV1Api(client)
    apps.create_namespaced_daemon_set("default", daemonset("dp"))
    merged = apps.patch_namespaced_daemon_set("dp", "default", {"metadata": {"labels": {"tier": "gpu"}}})
    assert merged.metadata.labels == {"tier": "gpu"}
    patched = apps.patch_namespaced_daemon_set(
        "dp",
        "default",
        [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "img:2"}],
        _content_type="application/json-patch+json",
    )
    assert patched.spec.template.spec.containers[0].image == "img:2"
    strategic = apps.patch_namespaced_daemon_set(
        "dp",
        "default",
        {"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "s:1"}]}}}},
        _content_type="application/strategic-merge-patch+json",
    )
    # Strategic merge: containers merge by name, so the existing one stays (a merge patch would replace it).
    assert sorted(c.name for c in strategic.spec.template.spec.containers) == ["ctr", "sidecar"]
    applied = apps.patch_namespaced_daemon_set(
        "dp",
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "dp", "namespace": "default", "annotations": {"owner": "gpuplan"}},
        },
        field_manager="gpuplan",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    # beside the server's template generation: created at 1, two template changes since
    assert applied.metadata.annotations == {
        "owner": "gpuplan",
        "deprecated.daemonset.template.generation": "3",
    }
    assert "gpuplan" in [m.manager for m in applied.metadata.managed_fields]


def test_label_and_field_selectors(store: Store, client: Any) -> None:
    for name, app, node_name in (
        ("a", "dcgm", "gpu-1"),
        ("b", "gfd", "gpu-1"),
        ("c", "dcgm", "gpu-2"),
        ("d", "other", "gpu-2"),
    ):
        put(store, PODS, pod(name, labels={"app": app}, node_name=node_name))
    core = k8s.CoreV1Api(client)
    assert _names(core.list_namespaced_pod("default", label_selector="app in (dcgm,gfd)").items) == [
        "a",
        "b",
        "c",
    ]
    assert _names(core.list_namespaced_pod("default", label_selector="app!=dcgm").items) == ["b", "d"]
    assert _names(core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-2").items) == ["c", "d"]
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("default", field_selector="spec.bogus=x")
    assert caught.value.status == 400


def test_pagination_follows_continue_without_skips_or_duplicates(store: Store, client: Any) -> None:
    for index in range(23):
        put(store, NODES, node(f"gpu-{index:02d}"))
    core = k8s.CoreV1Api(client)
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_node(limit=5, _continue=token)
        pages += 1
        seen.extend(item.metadata.name for item in page.items)
        token = page.metadata._continue
        if not token:
            break
        assert page.metadata.remaining_item_count == 23 - len(seen)
    assert pages == 5 and seen == sorted(f"gpu-{i:02d}" for i in range(23))


def test_watch_stream_from_a_resource_version(store: Store, client: Any) -> None:
    core = k8s.CoreV1Api(client)
    start = core.list_namespaced_pod("default").metadata.resource_version
    put(store, PODS, pod("w1"))
    store.delete(PODS, "default", "w1", grace_period_seconds=0)
    events = []
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=5
    ):
        events.append((event["type"], event["object"].metadata.name))
        if len(events) == 3:
            stream.stop()
    assert events[0] == ("ADDED", "w1") and events[-1] == ("DELETED", "w1")


def test_watch_with_an_expired_resource_version_raises_410(tmp_path: Path) -> None:
    small = Store(Registry.builtin(), event_log_size=2)
    server = ApiServer(small, token=TOKEN)
    server.start()
    api_client = config.new_client_from_config(
        config_file=str(write_kubeconfig(tmp_path / "kc", server.url, TOKEN, server.ca_pem))
    )
    try:
        for index in range(4):
            put(small, NODES, node(f"n{index}"))
        with pytest.raises(ApiException) as caught:
            for _ in watch.Watch().stream(
                k8s.CoreV1Api(api_client).list_node, resource_version="1", timeout_seconds=5
            ):
                pass
        assert caught.value.status == 410
    finally:
        api_client.close()
        api_client.rest_client.pool_manager.clear()
        server.stop()
        small.close()


def test_dry_run_stores_nothing(store: Store, client: Any) -> None:
    apps = k8s.AppsV1Api(client)
    before = store.resource_version
    answered = apps.create_namespaced_daemon_set("default", daemonset("dry"), dry_run="All")
    assert answered.metadata.name == "dry"
    assert store.list(DAEMONSETS).items == [] and store.resource_version == before


def test_delete_with_propagation_and_preconditions(store: Store, client: Any) -> None:
    apps = k8s.AppsV1Api(client)
    owner = apps.create_namespaced_daemon_set("default", daemonset("owner"))
    child = pod("owner-abc")
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "owner",
            "uid": owner.metadata.uid,
            "controller": True,
        }
    ]
    put(store, PODS, child)
    body = k8s.V1DeleteOptions(propagation_policy="Orphan")
    apps.delete_namespaced_daemon_set("owner", "default", body=body)
    orphan = store.get(PODS, "default", "owner-abc")
    assert not orphan["metadata"].get("ownerReferences")
    with pytest.raises(ApiException) as caught:
        k8s.CoreV1Api(client).delete_namespaced_pod(
            "owner-abc", "default", body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid="other"))
        )
    assert caught.value.status == 409


def test_eviction_through_the_client(store: Store, client: Any) -> None:
    put(store, PODS, pod("evictee"))
    eviction = k8s.V1Eviction(
        metadata=k8s.V1ObjectMeta(name="evictee", namespace="default"),
        delete_options=k8s.V1DeleteOptions(grace_period_seconds=0),
    )
    k8s.CoreV1Api(client).create_namespaced_pod_eviction("evictee", "default", eviction)
    assert store.list(PODS).items == []


def test_dynamic_client_discovers_and_serves_builtin_and_custom_kinds(client: Any) -> None:
    dynamic = DynamicClient(client)
    nodes = dynamic.resources.get(api_version="v1", kind="Node")
    assert not nodes.namespaced and nodes.short_names == ["no"]
    ds = dynamic.resources.get(api_version="apps/v1", kind="DaemonSet")
    ds.create(body=daemonset("dyn"), namespace="default")
    assert ds.get(name="dyn", namespace="default").metadata.name == "dyn"
    crds = dynamic.resources.get(api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition")
    crds.create(
        body={
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "clusterpolicies.nvidia.com"},
            "spec": {
                "group": "nvidia.com",
                "scope": "Cluster",
                "names": {
                    "kind": "ClusterPolicy",
                    "plural": "clusterpolicies",
                    "singular": "clusterpolicy",
                    "listKind": "ClusterPolicyList",
                },
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
    )
    dynamic.resources.invalidate_cache()
    policies = dynamic.resources.get(api_version="nvidia.com/v1", kind="ClusterPolicy")
    policies.create(
        body={
            "apiVersion": "nvidia.com/v1",
            "kind": "ClusterPolicy",
            "metadata": {"name": "cluster-policy"},
            "spec": {"driver": {"enabled": False}},
        }
    )
    assert [item.metadata.name for item in policies.get().items] == ["cluster-policy"]


def test_errors_carry_a_status_body(client: Any) -> None:
    with pytest.raises(ApiException) as caught:
        k8s.AppsV1Api(client).read_namespaced_daemon_set("absent", "default")
    assert caught.value.status == 404
    assert '"kind":"Status"' in caught.value.body and '"reason":"NotFound"' in caught.value.body


def test_pod_proxy_through_the_client_with_an_encoded_port(store: Store, client: Any) -> None:
    put(store, PODS, pod("exporter", port=9400))
    text = k8s.CoreV1Api(client).connect_get_namespaced_pod_proxy_with_path(
        "exporter:9400", "default", "metrics"
    )
    assert 'DCGM_FI_DEV_GPU_UTIL{gpu="0",pod="exporter"} 42' in text
