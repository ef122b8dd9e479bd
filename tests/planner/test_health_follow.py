"""The apply's caches of nodes and pods: listed once, kept by a follower thread, read by every gate without
waiting on the follower's requests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuplan.planner.health.follow import NODES, ApplyCaches, pod_topic
from gpuplan.planner.health.wait import watch_warnings
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


def selected(obj: dict[str, Any], selector: str | None) -> bool:
    labels = obj["metadata"].get("labels") or {}
    terms = [term.split("=") for term in (selector or "").split(",") if term]
    return all(labels.get(key) == value for key, value in terms)


@dataclass
class Server:
    """Lists by label selector; each watch takes the next scripted window of its kind and selector, then
    stays open until the test releases it."""

    objects: dict[str, list[dict[str, Any]]]
    windows: dict[tuple[str, str | None], list[list[WatchEvent | Exception]]] = field(default_factory=dict)
    lists: list[str] = field(default_factory=list)
    watched_from: list[str | None] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    watching: threading.Event = field(default_factory=threading.Event)

    def list_objects(self, api_version: str, kind: str, **kwargs: Any) -> Listing:
        selector = kwargs.get("label_selector")
        self.lists.append(f"{kind} {selector}" if selector else kind)
        found = [o for o in self.objects[kind] if selected(o, selector)]
        return Listing(tuple(LiveObject.from_manifest(o) for o in found), "5")

    def watch(self, api_version: str, kind: str, **kwargs: Any) -> Iterator[WatchEvent]:
        self.watched_from.append(kwargs["resource_version"])
        windows = self.windows.get((kind, kwargs.get("label_selector"))) or []
        for item in windows.pop(0) if windows else []:
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
        {"Node": [node("a", "3")]},
        windows={("Node", None): [[], [WatchEvent("MODIFIED", node("a", "6", ready="False"))]]},
    )
    server.release.set()  # the first window ends at once: the event comes in the second
    caches = caches_of(server)
    try:
        topics = frozenset({NODES})
        seen = caches.stamp(topics)
        caches.nodes()
        assert caches.await_change(topics, seen, 5)
        while caches.nodes()[0]["status"]["conditions"][0]["status"] != "False":
            assert caches.await_change(topics, caches.stamp(topics), 5)
        assert server.lists == ["Node"] and server.watched_from[:2] == ["5", "5"]
    finally:
        caches.close()


def test_a_too_old_version_lists_again() -> None:
    server = Server({"Node": [node("a", "3")]}, windows={("Node", None): [[WatchExpired("too old")]]})
    caches = caches_of(server)
    try:
        caches.nodes()
        assert server.watching.wait(5), "after the second list the follower watches again"
        assert server.lists == ["Node", "Node"]
    finally:
        caches.close()
        server.release.set()


def test_each_components_pods_are_listed_once_for_all_its_reads() -> None:
    server = Server({"Pod": [pod("p1", "plugin"), pod("g1", "gfd"), pod("p2", "plugin")]})
    caches = caches_of(server)
    try:
        plugin = caches.pods("ns", "app=plugin")
        assert caches.pods("ns", "app=plugin") == plugin
        gfd = caches.pods("ns", "app=gfd")
        assert [p["metadata"]["name"] for p in plugin] == ["p1", "p2"]
        assert [p["metadata"]["name"] for p in gfd] == ["g1"]
        assert sorted(server.lists) == ["Pod app=gfd", "Pod app=plugin"]
    finally:
        caches.close()
        server.release.set()


def test_a_gate_wakes_for_its_own_pods_not_for_another_components() -> None:
    server = Server(
        {"Pod": [pod("p1", "plugin"), pod("g1", "gfd")]},
        windows={("Pod", "app=gfd"): [[], [WatchEvent("MODIFIED", pod("g1", "gfd", "6"))]]},
    )
    caches = caches_of(server)
    try:
        plugin = frozenset({pod_topic("ns", "app=plugin")})
        gfd = frozenset({pod_topic("ns", "app=gfd")})
        caches.pods("ns", "app=plugin")
        caches.pods("ns", "app=gfd")
        before = caches.stamp(plugin), caches.stamp(gfd)
        server.release.set()  # the first windows end: gfd's second brings its event
        assert caches.await_change(gfd, before[1], 5)
        assert caches.stamp(plugin) == before[0], "another component's pod moved"
    finally:
        caches.close()


def test_a_daemonsets_status_wakes_its_rollout_gate() -> None:
    """Its pods may all be Ready a while before the controller counts them: the gate wakes when the
    DaemonSet moves, not at its next poll."""
    ds = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "plugin", "namespace": "ns"}}
    moved = {**ds, "metadata": {**ds["metadata"], "resourceVersion": "9"}, "status": {"numberReady": 1}}
    server = Server({"DaemonSet": [ds]}, windows={("DaemonSet", None): [[], [WatchEvent("MODIFIED", moved)]]})
    caches = caches_of(server)
    try:
        topic = frozenset({caches.daemonsets("ns")})
        assert server.watching.wait(5)
        seen = caches.stamp(topic)
        server.release.set()
        assert caches.await_change(topic, seen, 5)
    finally:
        caches.close()


def warning(name: str, pod_name: str, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(count)},
        "type": "Warning",
        "reason": "BackOff",
        "count": count,
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": pod_name},
    }


def test_only_the_warnings_that_come_after_the_first_list_count() -> None:
    """A warning about an earlier rollout's pod is in the first list and says nothing of this one; one that
    comes (or repeats) through the watch does."""
    old = warning("e1", "plugin-old")
    server = Server(
        {"Event": [old]},
        windows={("Event", None): [[WatchEvent("ADDED", warning("e2", "plugin-new"))]]},
    )
    caches = caches_of(server)
    try:
        topic = frozenset({caches.warnings("ns")})
        assert server.watching.wait(5), "listed, then the window's event applied"
        assert caches.warned("ns", "plugin-")
        assert not caches.warned("ns", "exporter-"), "a warning about another DaemonSet's pod"
        assert server.lists == ["Event"] and caches.stamp(topic) == 2
    finally:
        caches.close()
        server.release.set()


def test_a_listed_warning_alone_does_not_count() -> None:
    server = Server({"Event": [warning("e1", "plugin-old")]})
    caches = caches_of(server)
    try:
        assert not caches.warned("ns", "plugin-")
    finally:
        caches.close()
        server.release.set()


def test_a_follower_no_gate_holds_rests_and_is_listed_again_when_read() -> None:
    """While a fleet's pods start, following the nodes and pods would have the API server encode each of
    their changes for the follower: a gate that reads its DaemonSet's status alone lets the caches no gate
    holds rest."""
    server = Server({"Node": [node("a", "3")], "Pod": [pod("p1", "plugin")]})
    server.release.set()  # every window ends at once: a resting follower's thread ends with its window
    caches = caches_of(server)
    plugin = pod_topic("ns", "app=plugin")
    try:
        caches.hold(NODES)
        caches.nodes()
        caches.pods("ns", "app=plugin")
        assert caches.rest() == [plugin], "the held nodes keep their follower"
        caches.release([NODES])
        assert caches.rest() == [NODES]
        assert caches.rest() == []
        caches.nodes()
        caches.pods("ns", "app=plugin")
        assert server.lists == ["Node", "Pod app=plugin", "Node", "Pod app=plugin"]
    finally:
        caches.close()


def test_the_warnings_and_daemonsets_never_rest() -> None:
    """A warning must be heard from the first write on; the DaemonSets change a few times a rollout."""
    server = Server({"Event": [], "DaemonSet": []})
    caches = caches_of(server)
    try:
        caches.warnings("ns")
        caches.daemonsets("ns")
        assert server.watching.wait(5)
        assert caches.rest() == []
    finally:
        caches.close()
        server.release.set()


@dataclass
class SlowLister(Server):
    """Answers its list once the DaemonSet is written (``written``), or after ``patience`` seconds for a
    caller that waits for the list first; ``log`` has the order of the two."""

    written: threading.Event = field(default_factory=threading.Event)
    log: list[str] = field(default_factory=list)
    patience: float = 1.0

    def list_objects(self, api_version: str, kind: str, **kwargs: Any) -> Listing:
        self.written.wait(self.patience)
        self.log.append(f"list {kind}")
        return super().list_objects(api_version, kind, **kwargs)


def test_the_warnings_are_listed_before_the_daemonset_is_written_so_its_first_pull_failure_counts() -> None:
    """The walker listens before it writes a DaemonSet: a pull failure's one Warning, which the kubelet
    sends as soon as the pod fails to pull (its back-offs are Normal Events), then comes through the watch.
    Listed only after the write, that Warning could be in the first list, which counts for nothing, and the
    gate would read the DaemonSet's status alone until its timeout."""
    server = SlowLister(
        {"Event": []},
        windows={("Event", None): [[WatchEvent("ADDED", warning("e1", "plugin-abcde"))]]},
    )
    caches = caches_of(server)
    try:
        watch_warnings(caches, {"metadata": {"name": "plugin", "namespace": "ns"}})
        server.log.append("write the DaemonSet")
        server.written.set()
        assert server.watching.wait(5)
        assert server.log == ["list Event", "write the DaemonSet"]
        assert caches.warned("ns", "plugin-")
    finally:
        caches.close()
        server.release.set()
