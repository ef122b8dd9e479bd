"""Watches (replay, 410, selector transitions, synthetic ADDED) and subscribers (order, outside the lock)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import registry, sharing, store

PODS = registry.BUILTIN[2]
CONFIGMAPS = registry.BUILTIN[3]
NAMESPACES = registry.BUILTIN[0]
MERGE = "application/merge-patch+json"


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin(), event_log_size=50)
    yield st
    st.close()


def cm(name: str, labels: dict[str, str] | None = None, value: str = "1") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": {"v": value}}


def drain(watch: store.Watch) -> list[tuple[str, str]]:
    """Every event already queued (a short timeout only ends the drain, nothing is waited for)."""
    seen = []
    while (event := watch.next(timeout=0.01)) is not None:
        seen.append((event["type"], event["object"]["metadata"]["name"]))
    return seen


def test_watch_from_resource_version_replays_later_events(s: store.Store) -> None:
    s.create(CONFIGMAPS, cm("a"), manager="m")
    rv = str(s.resource_version)
    s.create(CONFIGMAPS, cm("b"), manager="m")
    s.update(CONFIGMAPS, cm("a", value="2"), namespace="default", name="a", manager="m")
    s.delete(CONFIGMAPS, "default", "b")
    with s.watch(CONFIGMAPS, resource_version=rv) as w:
        assert drain(w) == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


def test_watch_then_live_events_in_order(s: store.Store) -> None:
    with s.watch(CONFIGMAPS, resource_version=str(s.resource_version)) as w:
        s.create(CONFIGMAPS, cm("a"), manager="m")
        event = w.next(timeout=5)
        assert event is not None and event["type"] == "ADDED"
        assert event["object"]["metadata"]["resourceVersion"] == str(s.resource_version)
        assert event["object"]["apiVersion"] == "v1" and event["object"]["kind"] == "ConfigMap"


def test_watch_without_resource_version_starts_with_current_state(s: store.Store) -> None:
    s.create(CONFIGMAPS, cm("b"), manager="m")
    s.create(CONFIGMAPS, cm("a"), manager="m")
    with s.watch(CONFIGMAPS, resource_version="0") as w:
        assert drain(w) == [("ADDED", "a"), ("ADDED", "b")]


def test_too_old_resource_version_is_410(s: store.Store) -> None:
    rv = str(s.resource_version)
    for n in range(60):
        s.create(CONFIGMAPS, cm(f"c{n}"), manager="m")
    with pytest.raises(store.ApiError) as err:
        s.watch(CONFIGMAPS, resource_version=rv)
    assert err.value.code == 410 and err.value.reason == "Expired"
    assert err.value.message.startswith(f"too old resource version: {rv} (")


def test_watch_filters_by_namespace(s: store.Store) -> None:
    s.create(NAMESPACES, {"metadata": {"name": "gpu-operator"}}, manager="m")
    with s.watch(CONFIGMAPS, namespace="gpu-operator", resource_version=str(s.resource_version)) as w:
        s.create(CONFIGMAPS, cm("elsewhere"), manager="m")
        s.create(CONFIGMAPS, cm("here"), namespace="gpu-operator", manager="m")
        assert drain(w) == [("ADDED", "here")]


def test_selector_transitions_become_added_and_deleted(s: store.Store) -> None:
    s.create(CONFIGMAPS, cm("a", {"app": "x"}), manager="m")
    with s.watch(CONFIGMAPS, label_selector="app=x", resource_version=str(s.resource_version)) as w:
        s.update(CONFIGMAPS, cm("a", {"app": "y"}), namespace="default", name="a", manager="m")
        s.update(CONFIGMAPS, cm("a", {"app": "y"}, value="2"), namespace="default", name="a", manager="m")
        s.update(CONFIGMAPS, cm("a", {"app": "x"}), namespace="default", name="a", manager="m")
        s.update(CONFIGMAPS, cm("a", {"app": "x"}, value="3"), namespace="default", name="a", manager="m")
        assert drain(w) == [("DELETED", "a"), ("ADDED", "a"), ("MODIFIED", "a")]


def test_deleted_by_selector_carries_new_resource_version(s: store.Store) -> None:
    s.create(CONFIGMAPS, cm("a", {"app": "x"}), manager="m")
    with s.watch(CONFIGMAPS, label_selector="app=x", resource_version=str(s.resource_version)) as w:
        s.update(CONFIGMAPS, cm("a", {"app": "y"}), namespace="default", name="a", manager="m")
        event = w.next(timeout=5)
        assert event is not None and event["type"] == "DELETED"
        assert event["object"]["metadata"]["resourceVersion"] == str(s.resource_version)
        assert event["object"]["metadata"]["labels"] == {"app": "x"}


def test_field_selector_on_watch(s: store.Store) -> None:
    spec = {"containers": [{"name": "c", "image": "i"}]}
    with s.watch(PODS, field_selector="spec.nodeName=n1", resource_version=str(s.resource_version)) as w:
        s.create(PODS, {"metadata": {"name": "on-n2"}, "spec": {**spec, "nodeName": "n2"}}, manager="m")
        s.create(PODS, {"metadata": {"name": "on-n1"}, "spec": {**spec, "nodeName": "n1"}}, manager="m")
        assert drain(w) == [("ADDED", "on-n1")]


def test_next_returns_none_on_timeout_and_after_close(s: store.Store) -> None:
    w = s.watch(CONFIGMAPS, resource_version=str(s.resource_version))
    assert w.next(timeout=0.01) is None
    w.close()
    s.create(CONFIGMAPS, cm("a"), manager="m")
    assert w.next(timeout=0.01) is None


def test_close_wakes_a_blocked_reader(s: store.Store) -> None:
    w = s.watch(CONFIGMAPS, resource_version=str(s.resource_version))
    results: list[Any] = []
    reader = threading.Thread(target=lambda: results.append(w.next(timeout=30)))
    reader.start()
    w.close()
    reader.join(timeout=10)
    assert not reader.is_alive() and results == [None]


def test_watch_rejects_bad_selector(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as err:
        s.watch(CONFIGMAPS, label_selector="a in b")
    assert err.value.code == 400


def test_subscribers_see_every_event_in_order_outside_the_lock(s: store.Store) -> None:
    seen: list[tuple[str, str, str]] = []
    reads_ok: list[bool] = []

    def callback(event: store.Event) -> None:
        # A subscriber may call the store: it runs outside the store lock, on the dispatcher thread.
        reads_ok.append(s.resource_version >= int(event.object["metadata"]["resourceVersion"]))
        seen.append((event.type, event.rt.kind, event.object["metadata"]["name"]))

    unsubscribe = s.subscribe(callback)
    s.create(CONFIGMAPS, cm("a"), manager="m")
    s.create(
        PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, manager="m"
    )
    s.update(CONFIGMAPS, cm("a", value="2"), namespace="default", name="a", manager="m")
    s.delete(CONFIGMAPS, "default", "a")
    assert s.flush(timeout=10)
    assert seen == [
        ("ADDED", "ConfigMap", "a"),
        ("ADDED", "Pod", "p"),
        ("MODIFIED", "ConfigMap", "a"),
        ("DELETED", "ConfigMap", "a"),
    ]
    assert all(reads_ok)
    unsubscribe()
    s.create(CONFIGMAPS, cm("b"), manager="m")
    assert s.flush(timeout=10)
    assert len(seen) == 4


def test_a_subscriber_of_some_resources_gets_theirs_and_no_copy_is_made_of_the_others(
    s: store.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    copied: list[str] = []
    real_copy = sharing.subscriber_copy

    def counting_copy(
        rt: registry.ResourceType, stored: dict[str, Any], pool: sharing.Pool, previous: Any = None
    ) -> Any:
        copied.append(rt.kind)
        return real_copy(rt, stored, pool, previous)

    monkeypatch.setattr(sharing, "subscriber_copy", counting_copy)
    seen: list[str] = []
    s.subscribe(lambda e: seen.append(e.object["metadata"]["name"]), resources=[CONFIGMAPS.storage_key])
    s.create(
        PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, manager="m"
    )
    s.create(CONFIGMAPS, cm("a"), manager="m")
    s.create(
        PODS, {"metadata": {"name": "q"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}, manager="m"
    )
    assert s.flush(timeout=10) and s.caught_up()
    assert seen == ["a"]
    assert "Pod" not in copied


def test_a_subscriber_may_decline_the_events_of_read_only_writes(s: store.Store) -> None:
    """Read-only writes are the simulator's handlers', which apply their answers themselves."""
    all_seen: list[str] = []
    others: list[str] = []
    s.subscribe(lambda e: all_seen.append(e.object["metadata"]["name"]))
    s.subscribe(lambda e: others.append(e.object["metadata"]["name"]), read_only_writes=False)
    answer = s.create(CONFIGMAPS, cm("mine"), manager="controller", read_only=True)
    s.create(CONFIGMAPS, cm("theirs"), manager="kubectl")
    s.patch(CONFIGMAPS, "default", "mine", {"data": {"v": "2"}}, MERGE, manager="controller", read_only=True)
    assert s.flush(timeout=10) and s.caught_up()
    assert all_seen == ["mine", "theirs", "mine"]
    assert others == ["theirs"]
    assert answer["metadata"]["name"] == "mine"


def test_subscriber_event_has_old_state(s: store.Store) -> None:
    olds: list[Any] = []
    s.subscribe(lambda e: olds.append(e.old and e.old["data"]))
    s.create(CONFIGMAPS, cm("a"), manager="m")
    s.update(CONFIGMAPS, cm("a", value="2"), namespace="default", name="a", manager="m")
    assert s.flush(timeout=10)
    assert olds == [None, {"v": "1"}]


def test_failing_subscriber_does_not_stop_delivery(s: store.Store, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def broken(event: store.Event) -> None:
        raise RuntimeError("boom")

    s.subscribe(broken)
    s.subscribe(lambda e: seen.append(e.object["metadata"]["name"]))
    s.create(CONFIGMAPS, cm("a"), manager="m")
    s.create(CONFIGMAPS, cm("b"), manager="m")
    assert s.flush(timeout=10)
    assert seen == ["a", "b"]
    assert "store subscriber" in caplog.text


def test_subscriber_may_write_to_the_store(s: store.Store) -> None:
    """Controllers react to events by writing; those writes are delivered after, in order."""
    seen: list[str] = []

    def controller(event: store.Event) -> None:
        seen.append(event.object["metadata"]["name"])
        if event.object["metadata"]["name"] == "a":
            s.create(CONFIGMAPS, cm("a-child"), manager="controller")

    s.subscribe(controller)
    s.create(CONFIGMAPS, cm("a"), manager="m")
    assert s.flush(timeout=10)
    assert seen == ["a", "a-child"]


def test_flush_from_a_subscriber_does_not_wait_for_itself(s: store.Store) -> None:
    answers: list[bool] = []
    s.subscribe(lambda e: answers.append(s.flush(timeout=30)))
    s.create(CONFIGMAPS, cm("a"), manager="m")
    assert s.flush(timeout=10)
    assert answers == [False]


def test_a_watch_list_sends_the_current_objects_then_the_initial_events_end_bookmark(s: store.Store) -> None:
    """sendInitialEvents: the current state as ADDED whatever resourceVersion says (NotOlderThan), then a
    BOOKMARK at the current resourceVersion annotated k8s.io/initial-events-end, then live events."""
    s.create(CONFIGMAPS, cm("b"), manager="m")
    rv = str(s.resource_version)
    s.create(CONFIGMAPS, cm("a"), manager="m")
    with s.watch(CONFIGMAPS, resource_version=rv, send_initial_events=True) as w:
        events = [w.next(timeout=0.01) for _ in range(3)]
        assert [(e["type"], e["object"]["metadata"].get("name")) for e in events if e] == [
            ("ADDED", "a"),
            ("ADDED", "b"),
            ("BOOKMARK", None),
        ]
        bookmark = events[2]
        assert bookmark is not None and bookmark["object"]["metadata"] == {
            "resourceVersion": str(s.resource_version),
            "annotations": {"k8s.io/initial-events-end": "true"},
        }
        s.create(CONFIGMAPS, cm("c"), manager="m")
        assert drain(w) == [("ADDED", "c")]
