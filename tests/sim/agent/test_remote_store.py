"""The remote store against the built-in API server: the in-process store's errors, paginated lists, watches
that survive a 410 Gone, and ``caught_up`` bound to the watch delivering the store's own writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuplan.sim import nfd
from gpuplan.sim.agent import NodeAgent, RemoteStore
from gpuplan.sim.agent.client import ApiClient
from gpuplan.sim.agent.reflector import Reflector
from gpuplan.sim.api.errors import ApiError
from gpuplan.sim.api.watchlog import Event
from gpuplan.sim.cluster import Simulator
from gpuplan.sim.controllers.cache import resource_type

ControlPlane = Callable[..., Simulator]
AgentFactory = Callable[..., NodeAgent]
MERGE = "application/merge-patch+json"


@pytest.fixture
def remote(control_plane: ControlPlane) -> Iterator[tuple[Simulator, RemoteStore]]:
    sim = control_plane()
    store = RemoteStore(ApiClient(sim.url, sim.token, sim.ca_pem))
    yield sim, store
    store.close()


def _eventually(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    """For states no event announces (a reflector's position)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _error(call: Callable[[], Any]) -> tuple[int, str, str]:
    with pytest.raises(ApiError) as caught:
        call()
    return caught.value.code, caught.value.reason, caught.value.message


def test_failures_are_the_api_errors_the_in_process_store_raises(
    remote: tuple[Simulator, RemoteStore],
) -> None:
    sim, store = remote
    configmaps = resource_type(store.registry, "v1", "ConfigMap")
    body = {"metadata": {"name": "c"}, "data": {"k": "v"}}
    first = store.create(configmaps, body, namespace="default", manager="test")
    store.patch(configmaps, "default", "c", {"data": {"k": "w"}}, MERGE, manager="test")
    stale = {"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]}, "data": {"k": "x"}}
    for remote_call, local_call in [
        (lambda: store.get(configmaps, "default", "x"), lambda: sim.store.get(configmaps, "default", "x")),
        (
            lambda: store.create(configmaps, body, namespace="default", manager="test"),
            lambda: sim.store.create(configmaps, body, namespace="default", manager="test"),
        ),
        (
            lambda: store.patch(configmaps, "default", "c", stale, MERGE, manager="test"),
            lambda: sim.store.patch(configmaps, "default", "c", stale, MERGE, manager="test"),
        ),
    ]:
        assert _error(remote_call) == _error(local_call)
    assert _error(lambda: store.get(configmaps, "default", "x")) == (
        404,
        "NotFound",
        'configmaps "x" not found',
    )


def test_a_crd_created_through_it_serves_its_kind_and_a_new_store_discovers_it(
    remote: tuple[Simulator, RemoteStore],
) -> None:
    sim, store = remote
    assert store.registry.for_kind(nfd.API_VERSION, "NodeFeature") is None
    crds = resource_type(store.registry, "apiextensions.k8s.io/v1", "CustomResourceDefinition")
    store.create(crds, nfd.crd(), manager="helm")
    assert store.registry.for_kind(nfd.API_VERSION, "NodeFeature") is not None
    other = RemoteStore(ApiClient(sim.url, sim.token, sim.ca_pem))
    other.discover()
    assert other.registry.for_kind(nfd.API_VERSION, "NodeFeature") is not None
    other.close()


def test_a_reflector_lists_page_by_page_then_watches(remote: tuple[Simulator, RemoteStore]) -> None:
    sim, store = remote
    namespaces = resource_type(store.registry, "v1", "Namespace")
    pages: list[dict[str, str]] = []
    request = store.client.request

    def counting(method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        if method == "GET" and path == "/api/v1/namespaces":
            pages.append(dict(kwargs.get("query") or {}))
        return request(method, path, **kwargs)

    store.client.request = counting  # type: ignore[method-assign]
    events: list[Event] = []
    reflector = Reflector(store.client, namespaces, events.append, page_size=1)
    reflector.start()
    try:
        assert reflector.synced.wait(10)
        names = sorted(e.object["metadata"]["name"] for e in events)
        assert names == sorted(n["metadata"]["name"] for n in sim.store.list(namespaces).items)
        assert len(pages) == len(names)  # one object a page
        assert all(page["limit"] == "1" for page in pages) and "continue" in pages[-1]
        assert all(e.object["kind"] == "Namespace" and e.type == "ADDED" for e in events)
        sim.store.create(namespaces, {"metadata": {"name": "late"}}, manager="test")
        assert _eventually(lambda: any(e.object["metadata"]["name"] == "late" for e in events))
    finally:
        reflector.stop()


def test_caught_up_waits_until_the_watch_delivered_the_stores_own_write(
    remote: tuple[Simulator, RemoteStore],
) -> None:
    _, store = remote
    entered, release = threading.Event(), threading.Event()

    def deliver(event: Event) -> None:
        if event.object["metadata"]["name"] == "mine":
            entered.set()
            release.wait(10)

    store.subscribe(deliver, [("", "namespaces")])
    assert _eventually(store.caught_up)
    namespaces = resource_type(store.registry, "v1", "Namespace")
    store.create(namespaces, {"metadata": {"name": "mine"}}, manager="test")
    assert not store.caught_up()
    assert entered.wait(10)
    assert not store.caught_up()  # still in the subscriber's hands
    release.set()
    assert _eventually(store.caught_up)


def test_a_watch_that_gets_410_gone_lists_again_and_misses_nothing(
    control_plane: ControlPlane, agent_factory: AgentFactory
) -> None:
    sim = control_plane(event_log_size=40)
    agent = agent_factory(sim, "lab", watch_timeout_s=1)
    pods = resource_type(sim.store.registry, "v1", "Pod")

    def pod(name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": {"n": "0"}},
            "spec": {"nodeName": "lab-node", "containers": [{"name": "c", "image": "busybox"}]},
        }

    def phase(name: str) -> str | None:
        found = agent.loop.run_sync(lambda: agent.loop.cache.pods.get(("default", name)))
        return None if found is None else str(found["status"].get("phase"))

    sim.store.create(pods, pod("early"), namespace="default", manager="test")
    assert sim.wait_for(lambda: phase("early") == "Running", 10)
    reflector = agent.store.reflectors[("", "pods")]
    gone = reflector.stats.gone

    sim.set_api_faults(error_rate=1.0, codes=[503])  # the watch ends within its 1 s and cannot start again
    failures = reflector.stats.failures
    assert _eventually(lambda: reflector.stats.failures > failures)
    sim.store.delete(pods, "default", "early", grace_period_seconds=0)
    sim.store.create(pods, pod("late"), namespace="default", manager="test")
    for n in range(1, 50):  # the server's history of pods moves past where the watch was
        sim.store.patch(
            pods, "default", "late", {"metadata": {"labels": {"n": str(n)}}}, MERGE, manager="test"
        )
    sim.clear_api_faults()

    assert _eventually(lambda: reflector.stats.gone > gone)
    assert sim.wait_for(lambda: phase("late") == "Running", 10)
    assert phase("early") is None  # its deletion came with the new list, not as an event
    assert agent.wait_idle(10)


class HeldClient:
    """An ApiClient stand-in whose requests wait until the test lets them through, in order."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.sent: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        assert self.gate.wait(10), "the test never let the request through"
        self.sent.append((method, path, kwargs.get("body")))
        if kwargs.get("body", {}).get("reason") == "Refused":
            raise ApiError(404, "NotFound", 'namespaces "gone" not found')
        return {"metadata": {}}

    def close(self) -> None:
        pass


def test_a_create_nobody_reads_is_written_behind_the_caller_in_order_and_holds_caught_up() -> None:
    client = HeldClient()
    store = RemoteStore(client)  # type: ignore[arg-type]
    events = resource_type(store.registry, "v1", "Event")
    try:
        for reason in ("Pulling", "Refused", "Pulled"):
            body = {"metadata": {"name": reason.lower()}, "reason": reason}
            store.create(events, body, namespace="default", manager="", answer=False)
        assert client.sent == [] and not store.caught_up()  # returned before any round trip
        client.gate.set()
        assert _eventually(store.caught_up)
        assert [body["reason"] for _, _, body in client.sent] == ["Pulling", "Refused", "Pulled"]
        assert {path for _, path, _ in client.sent} == {"/api/v1/namespaces/default/events"}
    finally:
        store.close()


def test_writes_behind_keep_each_objects_order_while_other_objects_overtake() -> None:
    store = RemoteStore(HeldClient(), write_lanes=2)  # type: ignore[arg-type]
    held: tuple[str, str] = ("pods", "held")
    other = next(k for k in (("pods", f"other-{i}") for i in range(64)) if hash(k) % 2 != hash(held) % 2)
    release = threading.Event()
    made: list[str] = []
    answers: list[str | None] = []

    def write(name: str, gate: threading.Event | None = None) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            if gate is not None:
                assert gate.wait(10)
            if name == "refused":
                raise ApiError(409, "Conflict", "refused")
            made.append(name)
            return {"metadata": {"name": name}}

        return run

    def then(answer: dict[str, Any] | None) -> None:
        answers.append(None if answer is None else answer["metadata"]["name"])

    try:
        store.write_behind(held, write("first", release), then)
        store.write_behind(held, write("second"), then)
        store.write_behind(other, write("refused"), then)
        store.write_behind(other, write("overtaking"), then)
        assert _eventually(lambda: made == ["overtaking"])  # another object's lane is not held up
        assert not store.caught_up()  # the held object's writes are still to come
        release.set()
        assert _eventually(store.caught_up)
        assert made == ["overtaking", "first", "second"]  # one object's writes in the order given
        assert answers == [None, "overtaking", "first", "second"]  # a refused write's answer is None
    finally:
        store.close()


def test_closing_drops_the_writes_still_waiting_after_the_one_under_way() -> None:
    store = RemoteStore(HeldClient(), write_lanes=1)  # type: ignore[arg-type]
    release, started = threading.Event(), threading.Event()
    made: list[str] = []

    def write(name: str, gate: threading.Event | None = None) -> Callable[[], dict[str, Any]]:
        def run() -> dict[str, Any]:
            if gate is not None:
                started.set()
                assert gate.wait(10)
            made.append(name)
            return {}

        return run

    store.write_behind("node", write("under way", release), lambda answer: None)
    assert started.wait(10)  # the lane is making it (a busy machine starts the lane's thread late)
    for n in range(5):
        store.write_behind("node", write(f"waiting {n}"), lambda answer: None)
    closer = threading.Thread(target=store.close)
    closer.start()
    assert _eventually(lambda: store._background._closing)
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    assert made == ["under way"]  # a stopping kubelet's backlog is not sent
