"""list: order, namespaces, selectors, limit/continue pagination with consistent snapshots."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import registry, store

NAMESPACES = registry.BUILTIN[0]
NODES = registry.BUILTIN[1]
PODS = registry.BUILTIN[2]
CONFIGMAPS = registry.BUILTIN[3]


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}}


def pod(name: str, node_name: str, phase_labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": phase_labels or {}},
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "image": "i"}]},
    }


def names(result: store.ListResult) -> list[str]:
    return [i["metadata"]["name"] for i in result.items]


def all_pages(s: store.Store, rt: registry.ResourceType, limit: int, **kw: Any) -> list[store.ListResult]:
    pages = [s.list(rt, limit=limit, **kw)]
    while pages[-1].continue_token:
        pages.append(s.list(rt, limit=limit, continue_token=pages[-1].continue_token, **kw))
    return pages


def test_items_sorted_by_namespace_then_name(s: store.Store) -> None:
    s.create(NAMESPACES, {"metadata": {"name": "a-ns"}}, manager="m")
    s.create(CONFIGMAPS, {"metadata": {"name": "zeta"}}, manager="m")
    s.create(CONFIGMAPS, {"metadata": {"name": "alpha"}}, manager="m")
    s.create(CONFIGMAPS, {"metadata": {"name": "mid"}}, namespace="a-ns", manager="m")
    result = s.list(CONFIGMAPS)
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in result.items] == [
        ("a-ns", "mid"),
        ("default", "alpha"),
        ("default", "zeta"),
    ]
    assert result.resource_version == str(s.resource_version)
    assert result.continue_token is None and result.remaining is None


def test_list_in_namespace(s: store.Store) -> None:
    s.create(NAMESPACES, {"metadata": {"name": "gpu-operator"}}, manager="m")
    s.create(CONFIGMAPS, {"metadata": {"name": "a"}}, manager="m")
    s.create(CONFIGMAPS, {"metadata": {"name": "b"}}, namespace="gpu-operator", manager="m")
    assert names(s.list(CONFIGMAPS, namespace="gpu-operator")) == ["b"]
    assert names(s.list(CONFIGMAPS, namespace="empty")) == []


def test_label_and_field_selectors(s: store.Store) -> None:
    for n in range(4):
        s.create(NODES, node(f"n{n}", {"gpu": "true"} if n % 2 else {}), manager="kubelet")
    assert names(s.list(NODES, label_selector="gpu=true")) == ["n1", "n3"]
    assert names(s.list(NODES, label_selector="!gpu")) == ["n0", "n2"]
    assert names(s.list(NODES, field_selector="metadata.name=n2")) == ["n2"]
    assert names(s.list(NODES, label_selector="gpu", field_selector="metadata.name!=n1")) == ["n3"]


def test_pods_by_node_name_use_the_index_and_follow_deletes(s: store.Store) -> None:
    for n in range(30):
        s.create(PODS, pod(f"p{n:02}", f"node-{n % 3}"), manager="m")
    assert names(s.list(PODS, field_selector="spec.nodeName=node-1")) == [f"p{n:02}" for n in range(1, 30, 3)]
    s.delete(PODS, "default", "p01", grace_period_seconds=0)
    assert "p01" not in names(s.list(PODS, field_selector="spec.nodeName=node-1"))
    assert names(s.list(PODS, field_selector="spec.nodeName=node-9")) == []


def test_bad_selectors_are_400(s: store.Store) -> None:
    for kw in ({"label_selector": "a in (b"}, {"field_selector": "spec.unknown=x"}):
        with pytest.raises(store.ApiError) as err:
            s.list(PODS, **kw)
        assert err.value.code == 400 and err.value.reason == "BadRequest"
    with pytest.raises(store.ApiError) as err:
        s.list(PODS, field_selector="spec.foo=x")
    assert err.value.message == "field label not supported: spec.foo"


def test_pagination_has_no_skips_or_duplicates(s: store.Store) -> None:
    for n in range(1234):
        s.create(NODES, node(f"node-{n:04}"), manager="kubelet")
    pages = all_pages(s, NODES, 100)
    seen = [name for page in pages for name in names(page)]
    assert seen == sorted(f"node-{n:04}" for n in range(1234))
    assert [len(p.items) for p in pages] == [100] * 12 + [34]
    assert pages[0].remaining == 1134 and pages[-2].remaining == 34 and pages[-1].remaining is None
    assert {p.resource_version for p in pages} == {pages[0].resource_version}


def test_pagination_with_selector_and_namespace(s: store.Store) -> None:
    s.create(NAMESPACES, {"metadata": {"name": "other"}}, manager="m")
    for n in range(50):
        s.create(PODS, pod(f"p{n:02}", "n", {"even": "yes"} if n % 2 == 0 else {}), manager="m")
        s.create(PODS, pod(f"p{n:02}", "n", {"even": "yes"}), namespace="other", manager="m")
    pages = all_pages(s, PODS, 7, namespace="default", label_selector="even=yes")
    assert [name for p in pages for name in names(p)] == [f"p{n:02}" for n in range(0, 50, 2)]
    assert all(p.remaining is None for p in pages)


def test_later_pages_show_the_first_page_snapshot(s: store.Store) -> None:
    for n in range(10):
        s.create(CONFIGMAPS, {"metadata": {"name": f"c{n}"}, "data": {"v": "old"}}, manager="m")
    first = s.list(CONFIGMAPS, limit=5)
    s.update(
        CONFIGMAPS,
        {"metadata": {"name": "c7"}, "data": {"v": "new"}},
        namespace="default",
        name="c7",
        manager="m",
    )
    s.delete(CONFIGMAPS, "default", "c8")
    s.create(CONFIGMAPS, {"metadata": {"name": "c55"}}, manager="m")
    second = s.list(CONFIGMAPS, limit=5, continue_token=first.continue_token)
    assert names(second) == ["c5", "c6", "c7", "c8", "c9"]
    assert second.items[2]["data"] == {"v": "old"}
    assert second.resource_version == first.resource_version
    assert names(s.list(CONFIGMAPS))[5:] == ["c5", "c55", "c6", "c7", "c9"]


def test_continue_token_is_opaque_base64_json(s: store.Store) -> None:
    for n in range(3):
        s.create(CONFIGMAPS, {"metadata": {"name": f"c{n}"}}, manager="m")
    token = s.list(CONFIGMAPS, limit=1).continue_token
    assert token is not None
    decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert decoded["rv"] == s.resource_version and decoded["start"].startswith("default/c0")


def test_too_old_continue_token_is_410() -> None:
    s = store.Store(registry.Registry.builtin(), event_log_size=20)
    try:
        for n in range(5):
            s.create(CONFIGMAPS, {"metadata": {"name": f"c{n}"}}, manager="m")
        token = s.list(CONFIGMAPS, limit=2).continue_token
        for n in range(30):
            s.create(CONFIGMAPS, {"metadata": {"name": f"d{n}"}}, manager="m")
        with pytest.raises(store.ApiError) as err:
            s.list(CONFIGMAPS, limit=2, continue_token=token)
        assert err.value.code == 410 and err.value.reason == "Expired"
        assert err.value.message.startswith("The provided continue parameter is too old")
    finally:
        s.close()


def test_garbage_continue_token_is_400(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.list(CONFIGMAPS, continue_token="not-a-token")
    assert err.value.code == 400


def test_list_returns_copies(s: store.Store) -> None:
    s.create(CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"v": "1"}}, manager="m")
    s.list(CONFIGMAPS).items[0]["data"]["v"] = "mutated"
    assert s.get(CONFIGMAPS, "default", "c")["data"] == {"v": "1"}


def test_fleet_sized_node_list_in_pages_of_500(s: store.Store) -> None:
    """kubectl's default chunking over a 5,000-node fleet: ten pages, each item once, in order."""
    for n in range(5000):
        s.create(NODES, node(f"gpu-{n:04}", {"nvidia.com/gpu.present": "true"}), manager="kubelet")
    pages = all_pages(s, NODES, 500)
    assert [len(p.items) for p in pages] == [500] * 10
    assert [name for p in pages for name in names(p)] == [f"gpu-{n:04}" for n in range(5000)]


def test_churn_of_another_resource_does_not_expire_a_node_list() -> None:
    """The log's floor is per resource: pod writes pushing node events out of the log do not 410 nodes."""
    s = store.Store(registry.Registry.builtin(), event_log_size=20)
    try:
        for n in range(5):
            s.create(NODES, node(f"n{n}"), manager="kubelet")
        first = s.list(NODES, limit=2)
        rv = first.resource_version
        for n in range(40):
            s.create(PODS, pod(f"p{n}", "n0"), manager="m")
        assert first.continue_token is not None
        rest = s.list(NODES, limit=10, continue_token=first.continue_token)
        assert names(first) + names(rest) == [f"n{n}" for n in range(5)]
        with s.watch(NODES, resource_version=rv) as w:
            assert w.next(timeout=0.01) is None
        with pytest.raises(store.ApiError) as err:
            s.watch(PODS, resource_version=rv)
        assert err.value.code == 410
    finally:
        s.close()
