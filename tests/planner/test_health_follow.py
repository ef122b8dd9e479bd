"""The apply's caches of nodes and pods: listed once, kept by a follower thread, read by every gate without
waiting on the follower's requests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuplan.planner.health.follow import ApplyCaches, equality_selector
from gpuplan.providers.protocols import Listing, WatchEvent, WatchExpired
from gpuplan.providers.snapshot import LiveObject


def node(name: str, version: str, ready: str = "True") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "resourceVersion": version, "labels": {"nvidia.com/gpu.present": "true"}},
        "status": {"conditions": [{"type": "Ready", "status": ready}], "images": [{"names": ["a"]}]},
    }


def pod(name: str, app: str, version: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version, "labels": {"app": app}},
        "spec": {"nodeName": "a", "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }


@dataclass
class Server:
    """Lists; each watch takes the next scripted window, then stays open until the test releases it."""

    objects: dict[str, list[dict[str, Any]]]
    windows: list[list[WatchEvent | Exception]] = field(default_factory=list)
    lists: list[str] = field(default_factory=list)
    watched_from: list[str | None] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    watching: threading.Event = field(default_factory=threading.Event)

    def list_objects(self, api_version: str, kind: str, **_: Any) -> Listing:
        self.lists.append(kind)
        return Listing(tuple(LiveObject.from_manifest(o) for o in self.objects[kind]), "5")

    def watch(self, api_version: str, kind: str, **kwargs: Any) -> Iterator[WatchEvent]:
        self.watched_from.append(kwargs["resource_version"])
        for item in self.windows.pop(0) if self.windows else []:
            if isinstance(item, Exception):
                raise item
            yield item
        self.watching.set()
        self.release.wait(5)  # a window with no more events: the follower blocks here, holding no lock


def caches_of(server: Server) -> ApplyCaches:
    return ApplyCaches(lambda: server)  # type: ignore[arg-type, return-value]


def test_every_gate_reads_one_listing_while_the_follower_waits_on_its_watch() -> None:
    server = Server({"Node": [node("a", "3"), node("b", "4")]})
    caches = caches_of(server)
    try:
        first = caches.nodes()
        assert server.watching.wait(5)
        second = caches.nodes()  # the follower is blocked in its watch: the read does not wait for it
        assert [n["metadata"]["name"] for n in first] == ["a", "b"] and first == second
        assert server.lists == ["Node"]
    finally:
        caches.close()
        server.release.set()


def test_an_event_moves_the_cache_and_wakes_the_gates() -> None:
    server = Server(
        {"Node": [node("a", "3")]}, windows=[[], [WatchEvent("MODIFIED", node("a", "6", ready="False"))]]
    )
    server.release.set()  # the first window ends at once: the event comes in the second
    caches = caches_of(server)
    try:
        seen = caches.version
        caches.nodes()
        assert caches.await_change(seen, 5)
        while caches.nodes()[0]["status"]["conditions"][0]["status"] != "False":
            assert caches.await_change(caches.version, 5)
        assert server.lists == ["Node"] and server.watched_from[:2] == ["5", "5"]
    finally:
        caches.close()


def test_a_too_old_version_lists_again() -> None:
    server = Server({"Node": [node("a", "3")]}, windows=[[WatchExpired("too old")]])
    caches = caches_of(server)
    try:
        caches.nodes()
        assert server.watching.wait(5), "after the second list the follower watches again"
        assert server.lists == ["Node", "Node"]
    finally:
        caches.close()
        server.release.set()


def test_a_gates_pods_are_the_namespaces_that_its_selector_matches() -> None:
    server = Server({"Pod": [pod("p1", "plugin"), pod("g1", "gfd"), pod("p2", "plugin")]})
    caches = caches_of(server)
    try:
        plugin = caches.pods("ns", "app=plugin")
        gfd = caches.pods("ns", "app=gfd")
        assert plugin is not None and gfd is not None
        assert [p["metadata"]["name"] for p in plugin] == ["p1", "p2"]
        assert [p["metadata"]["name"] for p in gfd] == ["g1"]
        assert server.lists == ["Pod"], "one list of the namespace serves every gate"
        assert caches.pods("ns", "app in (plugin)") is None, "a selector the cache cannot match locally"
    finally:
        caches.close()
        server.release.set()


def test_equality_selectors_only() -> None:
    assert equality_selector("a=b, c=d") == {"a": "b", "c": "d"}
    assert equality_selector("") == {}
    for other in ("a!=b", "a==b", "a", "a in (b)", "!a"):
        assert equality_selector(other) is None, other
