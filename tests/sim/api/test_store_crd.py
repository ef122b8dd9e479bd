"""CustomResourceDefinitions: creating one serves its kinds at once; deleting it removes them and their
objects."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import registry, store

CRDS = [rt for rt in registry.BUILTIN if rt.kind == "CustomResourceDefinition"][0]

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


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def cluster_policy() -> dict[str, Any]:
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {"driver": {"enabled": True}},
        "status": {"state": "ready"},
    }


def test_crd_creation_registers_the_kind(s: store.Store) -> None:
    created = s.create(CRDS, CLUSTER_POLICY_CRD, manager="kubectl-create")
    conditions = {c["type"]: c["status"] for c in created["status"]["conditions"]}
    assert conditions == {"NamesAccepted": "True", "Established": "True"}
    rt = s.registry.get("nvidia.com", "v1", "clusterpolicies")
    assert rt is not None and not rt.namespaced and rt.subresources == ("status",)
    policy = s.create(rt, cluster_policy(), manager="helm")
    assert policy["metadata"]["generation"] == 1
    assert "status" not in policy  # the status subresource: create ignores status
    assert s.get(rt, None, "cluster-policy")["spec"] == {"driver": {"enabled": True}}


def test_crd_name_must_match_plural_and_group(s: store.Store) -> None:
    body = {**CLUSTER_POLICY_CRD, "metadata": {"name": "policies.nvidia.com"}}
    with pytest.raises(store.ApiError) as err:
        s.create(CRDS, body, manager="m")
    assert err.value.code == 422 and 'must be spec.names.plural+"."+spec.group' in err.value.message


def test_crd_deletion_removes_kind_and_objects(s: store.Store) -> None:
    s.create(CRDS, CLUSTER_POLICY_CRD, manager="m")
    rt = s.registry.get("nvidia.com", "v1", "clusterpolicies")
    assert rt is not None
    s.create(rt, cluster_policy(), manager="m")
    with s.watch(rt, resource_version=str(s.resource_version)) as w:
        s.delete(CRDS, None, "clusterpolicies.nvidia.com")
        event = w.next(timeout=5)
        assert event is not None and event["type"] == "DELETED"
        assert w.next(timeout=0.01) is None and w.closed
    assert s.registry.get("nvidia.com", "v1", "clusterpolicies") is None
    with pytest.raises(store.ApiError) as err:
        s.create(rt, cluster_policy(), manager="m")
    assert err.value.code == 404


def test_recreated_crd_starts_empty(s: store.Store) -> None:
    s.create(CRDS, CLUSTER_POLICY_CRD, manager="m")
    rt = s.registry.get("nvidia.com", "v1", "clusterpolicies")
    assert rt is not None
    s.create(rt, cluster_policy(), manager="m")
    s.delete(CRDS, None, "clusterpolicies.nvidia.com")
    s.create(CRDS, CLUSTER_POLICY_CRD, manager="m")
    assert s.list(rt).items == []


def test_namespaced_custom_kind_with_two_versions(s: store.Store) -> None:
    crd = {
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [
                {"name": "v1", "served": True, "storage": True},
                {"name": "v1beta1", "served": True, "storage": False},
            ],
        },
    }
    s.create(CRDS, crd, manager="m")
    v1, beta = (
        s.registry.get("example.com", "v1", "widgets"),
        s.registry.get("example.com", "v1beta1", "widgets"),
    )
    assert v1 is not None and beta is not None and v1.short_names == ("wd",)
    s.create(v1, {"metadata": {"name": "w"}, "spec": {"size": 1}}, namespace="default", manager="m")
    seen = s.get(beta, "default", "w")
    assert seen["apiVersion"] == "example.com/v1beta1" and seen["spec"] == {"size": 1}
    assert [w["apiVersion"] for w in s.list(beta).items] == ["example.com/v1beta1"]


def test_dry_run_crd_creation_registers_nothing(s: store.Store) -> None:
    s.create(CRDS, CLUSTER_POLICY_CRD, manager="m", dry_run=True)
    assert s.registry.get("nvidia.com", "v1", "clusterpolicies") is None


def test_crd_update_serves_new_versions_and_drops_old_ones(s: store.Store) -> None:
    s.create(CRDS, CLUSTER_POLICY_CRD, manager="m")
    updated = s.get(CRDS, None, "clusterpolicies.nvidia.com")
    updated["spec"]["versions"] = [{"name": "v2", "served": True, "storage": True}]
    updated["spec"]["names"]["shortNames"] = ["cp"]
    s.update(CRDS, updated, namespace=None, name="clusterpolicies.nvidia.com", manager="m")
    assert s.registry.get("nvidia.com", "v1", "clusterpolicies") is None
    v2 = s.registry.get("nvidia.com", "v2", "clusterpolicies")
    assert v2 is not None and v2.short_names == ("cp",)
