"""The apply's one node cache: listed once for every gate, and a pass confirmed by catching its watch up to
the server's current resourceVersion (one list of one item), not by listing the fleet again."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuplan.planner.health.informer import SharedNodes
from gpuplan.providers.protocols import Listing, WatchEvent
from gpuplan.providers.snapshot import LiveObject


def node(name: str, version: str, ready: str = "True") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": version,
            "labels": {"nvidia.com/gpu.present": "true"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "images": [{"names": ["registry/image:1"], "sizeBytes": 1}],
            "nodeInfo": {"kernelVersion": "6.8"},
        },
    }


@dataclass
class Server:
    """Lists, watches (each call takes the next scripted window) and the current resourceVersion."""

    listed: list[dict[str, Any]]
    windows: list[list[WatchEvent]] = field(default_factory=list)
    current: str = "10"
    lists: int = 0
    versions_asked: int = 0
    watched_from: list[str | None] = field(default_factory=list)

    def list_objects(self, api_version: str, kind: str, **_: Any) -> Listing:
        self.lists += 1
        return Listing(tuple(LiveObject.from_manifest(o) for o in self.listed), "5")

    def list_nodes(self, **_: Any) -> Listing:
        return self.list_objects("v1", "Node")

    def watch(self, api_version: str, kind: str, **kwargs: Any) -> Iterator[WatchEvent]:
        self.watched_from.append(kwargs["resource_version"])
        yield from self.windows.pop(0) if self.windows else []

    def current_version(self, api_version: str, kind: str) -> str | None:
        self.versions_asked += 1
        return self.current


def test_every_gate_reads_one_listing_of_the_nodes() -> None:
    server = Server([node("a", "3"), node("b", "4")])
    shared = SharedNodes()
    first, second = shared.items(server), shared.items(server)  # type: ignore[arg-type]
    assert [n["metadata"]["name"] for n in first] == ["a", "b"] and first == second
    assert server.lists == 1


def test_a_catch_up_applies_the_events_up_to_the_current_version_without_listing() -> None:
    server = Server([node("a", "3")], windows=[[WatchEvent("MODIFIED", node("a", "10", ready="False"))]])
    shared = SharedNodes(clock=iter(range(100)).__next__)
    shared.items(server)  # type: ignore[arg-type]
    shared.catch_up(server, since=1)  # type: ignore[arg-type]
    [caught] = shared.items(server)  # type: ignore[arg-type]
    assert caught["status"]["conditions"][0]["status"] == "False"
    assert (server.lists, server.versions_asked, server.watched_from) == (1, 1, ["5"])


def test_a_quiet_window_is_caught_up_and_serves_every_later_request_until_then() -> None:
    server = Server([node("a", "3")], current="99")
    shared = SharedNodes(clock=iter(range(100)).__next__)
    shared.items(server)  # type: ignore[arg-type]
    shared.catch_up(server, since=0)  # type: ignore[arg-type]
    assert server.watched_from == ["5"], "nothing came in a whole window: nothing was left to apply"
    shared.catch_up(server, since=0)  # type: ignore[arg-type]
    assert (server.lists, server.versions_asked, len(server.watched_from)) == (1, 1, 1)


def test_a_catch_up_that_never_reaches_the_version_lists_again() -> None:
    busy = [[WatchEvent("MODIFIED", node("a", str(4 + n)))] for n in range(5)]
    server = Server([node("a", "3")], windows=busy, current="99")
    shared = SharedNodes(clock=iter(range(100)).__next__)
    shared.items(server)  # type: ignore[arg-type]
    shared.catch_up(server, since=1)  # type: ignore[arg-type]
    assert server.lists == 2 and len(server.watched_from) == 5


def test_the_cache_holds_folded_nodes_only() -> None:
    """What every gate reads stays a node's few facts, whatever the fleet: no images, annotations or
    nodeInfo."""
    server = Server([node(f"n{index}", str(index)) for index in range(50)])
    shared = SharedNodes()
    for held in shared.items(server):  # type: ignore[arg-type]
        assert set(held["metadata"]) <= {"name", "labels", "managedFields"}
        assert set(held["status"]) <= {"capacity", "allocatable", "runtimeHandlers", "conditions"}
