"""The reconcile loop: events to handlers in order, timers, cross-thread calls, idleness, surviving bugs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api.registry import Registry
from gpuplan.sim.api.store import Store
from gpuplan.sim.controllers.cache import Cache, Change
from gpuplan.sim.controllers.loop import Loop


class Recorder:
    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.flushes = 0
        self.fail_on: str | None = None

    def on_change(self, change: Change) -> None:
        if self.fail_on and change.key[1] == self.fail_on:
            raise RuntimeError("handler bug")
        self.changes.append(change)

    def flush(self) -> bool:
        self.flushes += 1
        return False


@pytest.fixture
def loop() -> Iterator[Loop]:
    store = Store(Registry.builtin())
    loop = Loop(store)
    yield loop
    loop.stop()
    store.close()


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def test_events_reach_handlers_in_write_order(loop: Loop) -> None:
    recorder = Recorder()
    loop.add_handler(recorder)
    loop.subscribe()
    loop.start()
    rt = loop.store.registry.for_kind("v1", "Node")
    loop.store.create(rt, node("a"), manager="t")
    loop.store.create(rt, node("b"), manager="t")
    loop.store.patch(
        rt, None, "a", {"metadata": {"labels": {"x": "1"}}}, "application/merge-patch+json", manager="t"
    )
    loop.store.delete(rt, None, "b")
    assert loop.wait_idle(5)
    seen = [(c.key[1], c.old is None, c.new is None) for c in recorder.changes]
    assert seen == [("a", True, False), ("b", True, False), ("a", False, False), ("b", False, True)]
    assert loop.cache.node("a")["metadata"]["labels"] == {"x": "1"} and loop.cache.node("b") is None


def test_the_loop_is_given_only_the_kinds_it_caches_and_not_read_only_writes_and_is_idle_after_them(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    given: list[str] = []
    enqueue = loop._enqueue_event
    monkeypatch.setattr(loop, "_enqueue_event", lambda event: (given.append(event.rt.kind), enqueue(event)))
    recorder = Recorder()
    loop.add_handler(recorder)
    loop.subscribe()
    loop.start()
    nodes = loop.store.registry.for_kind("v1", "Node")
    events = loop.store.registry.for_kind("v1", "Event")
    loop.store.create(nodes, node("a"), manager="t")
    loop.store.create(
        events,
        {"metadata": {"name": "a.1"}, "involvedObject": {"kind": "Node", "name": "a"}, "reason": "R"},
        manager="",
    )
    # a handler's own read-only write: its answer is the handler's to apply, its event never queued
    loop.store.create(nodes, node("b"), manager="t", read_only=True)
    assert loop.wait_idle(5)
    assert given == ["Node"]
    assert [c.key[1] for c in recorder.changes] == ["a"]


def test_a_failing_handler_is_logged_and_the_loop_goes_on(loop: Loop) -> None:
    recorder = Recorder()
    recorder.fail_on = "bad"
    loop.add_handler(recorder)
    loop.subscribe()
    loop.start()
    rt = loop.store.registry.for_kind("v1", "Node")
    loop.store.create(rt, node("bad"), manager="t")
    loop.store.create(rt, node("good"), manager="t")
    assert loop.wait_idle(5)
    assert [c.key[1] for c in recorder.changes] == ["good"]
    assert len(loop.errors) == 1 and str(loop.errors[0]) == "handler bug"


def test_run_sync_runs_on_the_loop_thread_and_returns_or_raises(loop: Loop) -> None:
    loop.start()
    assert loop.run_sync(lambda: threading.current_thread().name) == "gpuplan-sim-loop"

    def boom() -> None:
        raise ValueError("from the loop")

    with pytest.raises(ValueError, match="from the loop"):
        loop.run_sync(boom)


def test_timers_fire_in_deadline_order_and_cancelled_ones_do_not(loop: Loop) -> None:
    fired: list[str] = []
    loop.start()
    loop.call_later(0.03, lambda: fired.append("late"))
    loop.call_later(0.01, lambda: fired.append("early"))
    loop.call_later(0.02, lambda: fired.append("cancelled")).cancel()
    assert loop.wait_idle(5, horizon=float("inf"))
    assert fired == ["early", "late"]


def test_wait_idle_waits_for_settling_timers_only(loop: Loop) -> None:
    fired = threading.Event()
    loop.start()
    background = loop.call_later(60, lambda: None, settling=False)
    loop.call_later(0.02, fired.set)
    assert loop.wait_idle(5, horizon=float("inf"))
    assert fired.is_set()
    background.cancel()
    loop.call_later(60, lambda: None)
    assert not loop.wait_idle(0.05, horizon=float("inf"))


def test_cache_ignores_stale_copies_and_late_events_of_deleted_objects() -> None:
    cache = Cache()
    first = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "5"}, "spec": {"nodeName": "n"}}
    newer = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7"}, "spec": {"nodeName": "n"}}
    assert cache.apply("pods", newer) is not None
    assert cache.apply("pods", first) is None
    gone = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "8"}, "spec": {"nodeName": "n"}}
    change = cache.apply("pods", gone, deleted=True)
    assert change is not None and change.new is None and cache.pods_on("n") == []
    assert cache.apply("pods", newer) is None, "a late MODIFIED of a deleted pod must not resurrect it"


def test_the_store_event_of_an_observed_write_replaces_its_answer_silently() -> None:
    """A handler's write is observed through its full answer; the store's event of the same version then
    takes its place (the copy sharing the store's common parts), with no second change for the handlers."""
    cache = Cache()
    answer = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "5"}, "spec": {"nodeName": "n"}}
    event = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "5"}, "spec": {"nodeName": "n"}}
    assert cache.apply("pods", answer) is not None
    assert cache.apply("pods", event) is None
    assert cache.pods[("ns", "p")] is event
    assert cache.pods_on("n") == [event]
