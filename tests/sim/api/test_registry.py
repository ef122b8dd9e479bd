"""Registry: the built-in kinds with real names, discovery groups, CRD-defined kinds."""

from __future__ import annotations

import pytest

from gpuplan.sim.api import registry

REG = registry.Registry.builtin()


@pytest.mark.parametrize(
    "group, plural, kind, namespaced, short",
    [
        ("", "namespaces", "Namespace", False, ("ns",)),
        ("", "nodes", "Node", False, ("no",)),
        ("", "pods", "Pod", True, ("po",)),
        ("", "configmaps", "ConfigMap", True, ("cm",)),
        ("", "secrets", "Secret", True, ()),
        ("", "services", "Service", True, ("svc",)),
        ("", "serviceaccounts", "ServiceAccount", True, ("sa",)),
        ("", "events", "Event", True, ("ev",)),
        ("apps", "daemonsets", "DaemonSet", True, ("ds",)),
        ("coordination.k8s.io", "leases", "Lease", True, ()),
        ("rbac.authorization.k8s.io", "clusterrolebindings", "ClusterRoleBinding", False, ()),
        ("node.k8s.io", "runtimeclasses", "RuntimeClass", False, ()),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            False,
            ("crd", "crds"),
        ),
    ],
)
def test_builtin_kinds(group: str, plural: str, kind: str, namespaced: bool, short: tuple[str, ...]) -> None:
    rt = REG.get(group, "v1", plural)
    assert rt is not None
    assert (rt.kind, rt.namespaced, rt.short_names) == (kind, namespaced, short)
    assert REG.for_kind(rt.api_version, kind) is rt


def test_names_and_properties() -> None:
    ds = REG.for_kind("apps/v1", "DaemonSet")
    pods = REG.get("", "v1", "pods")
    assert ds is not None and pods is not None
    assert (ds.api_version, ds.list_kind, ds.group_resource, ds.singular) == (
        "apps/v1",
        "DaemonSetList",
        "daemonsets.apps",
        "daemonset",
    )
    assert (pods.api_version, pods.group_resource) == ("v1", "pods")
    assert "all" in pods.categories and "all" in ds.categories
    assert {"status", "eviction", "proxy"} <= set(pods.subresources)
    assert "status" in ds.subresources


def test_find_by_short_name_singular_and_kind() -> None:
    assert [rt.plural for rt in REG.find("ds")] == ["daemonsets"]
    assert [rt.plural for rt in REG.find("Node")] == ["nodes"]
    assert [rt.plural for rt in REG.find("configmap")] == ["configmaps"]


def test_groups_core_first_and_policy_present() -> None:
    groups = REG.groups()
    assert groups[0] == ("", ["v1"])
    assert ("policy", ["v1"]) in groups
    assert groups[1] == ("apps", ["v1"])
    assert [g for g, _ in groups].count("rbac.authorization.k8s.io") == 1


def test_kinds_without_spec_are_marked() -> None:
    assert REG.get("", "v1", "configmaps").tracks_generation is False  # type: ignore[union-attr]
    assert REG.get("apps", "v1", "daemonsets").tracks_generation is True  # type: ignore[union-attr]


CRD = {
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {
            "plural": "widgets",
            "singular": "widget",
            "kind": "Widget",
            "shortNames": ["wd"],
            "categories": ["all"],
        },
        "versions": [
            {"name": "v1beta1", "served": True, "storage": False},
            {"name": "v1", "served": True, "storage": True, "subresources": {"status": {}}},
            {"name": "v0", "served": False, "storage": False},
        ],
    },
}


def test_from_crd_serves_each_served_version() -> None:
    types = registry.from_crd(CRD)
    assert [t.version for t in types] == ["v1beta1", "v1"]
    v1 = types[1]
    assert (
        v1.group,
        v1.kind,
        v1.plural,
        v1.singular,
        v1.namespaced,
        v1.short_names,
        v1.categories,
        v1.subresources,
    ) == ("example.com", "Widget", "widgets", "widget", True, ("wd",), ("all",), ("status",))
    assert types[0].subresources == ()


def test_register_and_unregister_and_version_preference() -> None:
    reg = registry.Registry.builtin()
    for rt in registry.from_crd(CRD):
        reg.register(rt)
    assert ("example.com", ["v1", "v1beta1"]) in reg.groups()
    assert [rt.kind for rt in reg.resources("example.com", "v1")] == ["Widget"]
    for rt in registry.from_crd(CRD):
        reg.unregister(rt)
    assert reg.get("example.com", "v1", "widgets") is None
    assert "example.com" not in [g for g, _ in reg.groups()]
