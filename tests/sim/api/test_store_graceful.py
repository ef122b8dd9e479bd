"""Graceful pod deletion in the store: a DELETE of a pod bound to a node marks it terminating with its grace
period (MODIFIED), and only a delete with grace period 0 removes it (DELETED), as a real API server does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gpuplan.sim.api import registry, store

PODS = registry.BUILTIN[2]
NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin(), clock=lambda: NOW)
    yield st
    st.close()


def make_pod(
    s: store.Store, name: str, *, node: str | None = "n1", grace: int | None = None, phase: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node:
        spec["nodeName"] = node
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    created: dict[str, Any] = s.create(
        PODS, {"metadata": {"name": name}, "spec": spec}, namespace="default", manager="m"
    )
    if phase:
        created = s.patch(
            PODS,
            "default",
            name,
            {"status": {"phase": phase}},
            "application/merge-patch+json",
            manager="kubelet",
            subresource="status",
        )
    return created


def exists(s: store.Store, name: str) -> bool:
    try:
        s.get(PODS, "default", name)
    except store.ApiError as exc:
        assert exc.code == 404
        return False
    return True


def test_a_bound_pod_is_marked_terminating_with_its_grace_period(s: store.Store) -> None:
    make_pod(s, "p")
    watch = s.watch(PODS, namespace="default", resource_version=str(s.resource_version))
    answer = s.delete(PODS, "default", "p")
    assert answer["metadata"]["deletionTimestamp"] == "2026-11-29T12:00:30Z"  # now + the default 30 s
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 30
    assert s.get(PODS, "default", "p")["metadata"]["deletionTimestamp"] == "2026-11-29T12:00:30Z"
    s.delete(
        PODS, "default", "p", grace_period_seconds=0
    )  # what the kubelet sends once the containers stopped
    assert not exists(s, "p")
    events = [watch.next(5) for _ in range(2)]
    watch.close()
    assert [(e or {}).get("type") for e in events] == ["MODIFIED", "DELETED"]


def test_the_grace_period_comes_from_the_request_else_the_pod(s: store.Store) -> None:
    make_pod(s, "short", grace=5)
    assert s.delete(PODS, "default", "short")["metadata"]["deletionGracePeriodSeconds"] == 5
    make_pod(s, "asked")
    marked = s.delete(PODS, "default", "asked", grace_period_seconds=7)
    assert (marked["metadata"]["deletionGracePeriodSeconds"], marked["metadata"]["deletionTimestamp"]) == (
        7,
        "2026-11-29T12:00:07Z",
    )
    make_pod(s, "negative")
    assert (
        s.delete(PODS, "default", "negative", grace_period_seconds=-1)["metadata"][
            "deletionGracePeriodSeconds"
        ]
        == 1
    ), "a negative period counts as 1 s"


@pytest.mark.parametrize(
    "kwargs", [{"node": None}, {"phase": "Succeeded"}, {"phase": "Failed"}, {"grace": 0}]
)
def test_pods_with_nothing_to_stop_go_at_once(s: store.Store, kwargs: dict[str, Any]) -> None:
    make_pod(s, "p", **kwargs)
    s.delete(PODS, "default", "p")
    assert not exists(s, "p")


def test_a_second_delete_may_only_shorten_the_period(s: store.Store) -> None:
    make_pod(s, "p")
    first = s.delete(PODS, "default", "p", grace_period_seconds=20)
    again = s.delete(PODS, "default", "p", grace_period_seconds=25)
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert again["metadata"]["deletionGracePeriodSeconds"] == 20
    shorter = s.delete(PODS, "default", "p", grace_period_seconds=3)
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 3
    assert shorter["metadata"]["deletionTimestamp"] == "2026-11-29T12:00:03Z"
    assert shorter["metadata"]["resourceVersion"] != first["metadata"]["resourceVersion"]
    s.delete(PODS, "default", "p", grace_period_seconds=0)
    assert not exists(s, "p")


def test_dry_run_and_preconditions(s: store.Store) -> None:
    pod = make_pod(s, "p")
    answer = s.delete(PODS, "default", "p", dry_run=True)
    assert answer["metadata"]["deletionGracePeriodSeconds"] == 30
    assert "deletionTimestamp" not in s.get(PODS, "default", "p")["metadata"]
    with pytest.raises(store.ApiError) as err:
        s.delete(PODS, "default", "p", grace_period_seconds=0, preconditions={"uid": "someone-else"})
    assert err.value.code == 409
    s.delete(PODS, "default", "p", grace_period_seconds=0, preconditions={"uid": pod["metadata"]["uid"]})
    assert not exists(s, "p")


def test_eviction_is_graceful_too(s: store.Store) -> None:
    make_pod(s, "p")
    assert s.evict("default", "p")["status"] == "Success"
    assert s.get(PODS, "default", "p")["metadata"]["deletionGracePeriodSeconds"] == 30
    s.evict("default", "p", grace_period_seconds=0)
    assert not exists(s, "p")


def test_a_namespace_cascade_removes_its_pods_at_once(s: store.Store) -> None:
    namespaces = registry.BUILTIN[0]
    s.create(namespaces, {"metadata": {"name": "team"}}, manager="m")
    s.create(
        PODS,
        {"metadata": {"name": "p"}, "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]}},
        namespace="team",
        manager="m",
    )
    s.delete(namespaces, None, "team")
    assert s.list(PODS, namespace="team").items == []
