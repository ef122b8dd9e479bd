"""The waiter's informer: one list, then watch events applied to folded objects; a 410 lists again."""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuplan.planner.health.informer import Informer, fold_node, fold_pod
from gpuplan.providers.protocols import Listing, WatchEvent, WatchExpired
from gpuplan.providers.snapshot import LiveObject


def pod(name: str, version: str, ready: str = "True") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "gpu-operator",
            "resourceVersion": version,
            "uid": f"uid-{name}",
            "labels": {"app": "x"},
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {
            "nodeName": "n1",
            "volumes": [{"name": "big", "hostPath": {"path": "/run"}}],
            "containers": [
                {"name": "c", "image": "i:1", "volumeMounts": [{"name": "big", "mountPath": "/x"}]}
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]},
    }


@dataclass
class Stream:
    """Lists and watches played from a script; each watch call takes the next entry (events, or a 410)."""

    listed: list[dict[str, Any]]
    watches: list[list[WatchEvent] | Exception] = field(default_factory=list)
    lists: int = 0
    asked: list[str | None] = field(default_factory=list)

    def list_objects(self, api_version: str, kind: str, **_: Any) -> Listing:
        self.lists += 1
        return Listing(tuple(LiveObject.from_manifest(o) for o in self.listed), f"list-{self.lists}")

    def watch(self, api_version: str, kind: str, **kwargs: Any) -> Iterator[WatchEvent]:
        self.asked.append(kwargs["resource_version"])
        entry = self.watches.pop(0)
        if isinstance(entry, Exception):
            raise entry
        yield from entry


def informer(stream: Stream) -> Informer:
    return Informer(stream, "v1", "Pod", fold_pod, namespace="gpu-operator", label_selector="app=x")  # type: ignore[arg-type]


def test_events_after_the_list_are_applied_and_the_version_advances() -> None:
    stream = Stream(
        [pod("a", "5"), pod("b", "6")],
        [
            [
                WatchEvent("MODIFIED", pod("a", "7", ready="False")),
                WatchEvent("DELETED", pod("b", "8")),
                WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "9"}}),
            ],
            [WatchEvent("ADDED", pod("c", "10"))],
        ],
    )
    cache = informer(stream)
    cache.sync()
    assert cache.follow(1.0) == 2
    assert [p["metadata"]["name"] for p in cache.items()] == ["a"]
    assert cache.items()[0]["status"]["conditions"][0]["status"] == "False"
    assert cache.follow(1.0) == 1 and [p["metadata"]["name"] for p in cache.items()] == ["a", "c"]
    assert stream.asked == ["list-1", "9"], "each watch resumes from the last version seen, bookmarks too"
    assert stream.lists == 1


def test_a_too_old_version_lists_again() -> None:
    stream = Stream([pod("a", "5")], [WatchExpired("watch pods: too old")])
    cache = informer(stream)
    cache.sync()
    stream.listed = [pod("z", "20")]
    cache.follow(1.0)
    assert stream.lists == 2 and [p["metadata"]["name"] for p in cache.items()] == ["z"]
    assert cache.resource_version == "list-2"


def test_a_pod_is_folded_to_what_the_gates_read() -> None:
    folded = fold_pod(pod("a", "5"))
    assert "managedFields" not in folded["metadata"] and "volumes" not in folded["spec"]
    assert folded["spec"]["containers"] == [{"name": "c", "image": "i:1"}]
    assert folded["spec"]["nodeName"] == "n1" and folded["status"]["phase"] == "Running"


def test_a_node_keeps_only_the_label_owners_of_its_managed_fields() -> None:
    node = {
        "metadata": {
            "name": "n1",
            "labels": {"nvidia.com/gpu.count": "1"},
            "managedFields": [
                {
                    "manager": "gpu-feature-discovery",
                    "operation": "Apply",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}}}},
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {}},
                },
            ],
        },
        "status": {"images": [{"names": ["x"] * 50}], "allocatable": {"nvidia.com/gpu": "1"}},
    }
    folded = fold_node(node)
    assert "images" not in folded["status"] and folded["status"]["allocatable"] == {"nvidia.com/gpu": "1"}
    assert folded["metadata"]["managedFields"] == [
        {
            "manager": "gpu-feature-discovery",
            "operation": "Apply",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.count": {}}}},
        },
        {"manager": "kubelet", "operation": "Update", "subresource": "status"},
    ]


def test_a_round_ends_after_a_burst_even_when_the_stream_then_stays_silent() -> None:
    """The stream gives one event, then nothing until the server would end the window: the round still
    ends (a reader thread holds the blocked read), and the event is applied."""
    release = threading.Event()

    class Silent(Stream):
        def watch(self, api_version: str, kind: str, **kwargs: Any) -> Iterator[WatchEvent]:
            self.asked.append(kwargs["resource_version"])
            yield WatchEvent("MODIFIED", pod("a", "7", ready="False"))
            release.wait(60)  # a quiet stream, as a real one until its timeoutSeconds

    stream = Silent([pod("a", "5")])
    cache = informer(stream)
    cache.sync()
    try:
        assert cache.follow(30.0) == 1
        assert not release.is_set(), "the round ended while the stream was still open"
        assert cache.items()[0]["status"]["conditions"][0]["status"] == "False"
        assert cache.resource_version == "7"
    finally:
        release.set()


def test_the_reader_stops_at_the_first_event_after_its_round_and_closes_the_stream() -> None:
    """Events that come after a round ended are read again by the next round's watch: the reader takes at
    most one of them and ends the stream, instead of decoding the rest of the window (each overlapping
    reader decoded every later event of its window, several times over at fleet scale)."""
    late, closed = threading.Event(), threading.Event()
    pulled: list[str] = []

    class Late(Stream):
        def watch(self, api_version: str, kind: str, **kwargs: Any) -> Iterator[WatchEvent]:
            try:
                for version in ("7", "8", "9", "10"):
                    if version == "8":
                        late.wait(60)  # the next event arrives only once the round is over
                    pulled.append(version)
                    yield WatchEvent("MODIFIED", pod("a", version, ready="False"))
            finally:
                closed.set()

    stream = Late([pod("a", "5")])
    cache = informer(stream)
    cache.sync()
    assert cache.follow(30.0) == 1
    late.set()
    assert closed.wait(30), "the reader did not end the stream"
    assert pulled == ["7", "8"]
    assert cache.resource_version == "7"


def served_node(name: str) -> dict[str, Any]:
    """A GPU node as the API server serves it, decoded on its own (a list page or a watch event): labels from
    NFD and GFD, five conditions, capacity, and what the gates never read (addresses, images, nodeInfo)."""
    labels = {f"feature.node.kubernetes.io/feature-{n}.present": "true" for n in range(20)}
    labels |= {f"nvidia.com/gpu.attribute-{n}": f"value-{n % 4}" for n in range(20)}
    labels["kubernetes.io/hostname"] = name
    conditions = [
        {
            "type": kind,
            "status": "False",
            "reason": f"KubeletHas{kind}",
            "message": f"kubelet has no {kind.lower()} on this node",
            "lastHeartbeatTime": "2026-12-01T19:00:00Z",
            "lastTransitionTime": "2026-12-01T18:00:00Z",
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable", "Ready")
    ]
    resources = {"cpu": "96", "memory": "1056797464Ki", "nvidia.com/gpu": "8", "pods": "110"}
    node = {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": labels},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": "10.0.0.1"},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {"kernelVersion": "5.15.0-139-generic", "osImage": "Ubuntu 22.04.5 LTS"},
        },
    }
    return json.loads(json.dumps(node))  # each node its own decoded strings, as the client gets them


def test_a_fleet_s_folded_nodes_share_their_strings() -> None:
    """An informer holds one folded node per node of the fleet, each decoded on its own (what it keeps of
    the decoded node, the rest dropped): with the labels' names and values interned, the cache costs about
    half of what the decoded nodes would, not nearly all of it (the labels are most of a node's strings)."""
    names = [f"gpu-{index:04d}" for index in range(300)]
    tracemalloc.start()
    try:
        decoded = [served_node(name) for name in names]
        decoded_bytes, _ = tracemalloc.get_traced_memory()
        del decoded
        base, _ = tracemalloc.get_traced_memory()
        folded = [fold_node(served_node(name)) for name in names]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert folded[0]["metadata"]["labels"]["kubernetes.io/hostname"] == "gpu-0000"
    assert held - base < decoded_bytes * 0.6, (
        f"folded nodes hold {held - base} bytes, decoded {decoded_bytes}"
    )


def served_pod(index: int) -> dict[str, Any]:
    """A DaemonSet's pod on node ``index`` as the API server serves it, decoded on its own: what the gates
    read, and what they never do (the affinity pinning it to its node, image ids, container ids, start
    times, IPs, volumes)."""
    node, when = f"gpu-{index:05d}", f"2026-12-01T18:00:{index % 3:02d}Z"
    container = {
        "name": "plugin",
        "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
        "command": ["nvidia-device-plugin"],
        "env": [{"name": f"VAR_{n}", "value": f"value-{n}"} for n in range(8)],
        "volumeMounts": [{"name": "device-plugin", "mountPath": "/var/lib/kubelet/device-plugins"}],
    }
    started = {"running": {"startedAt": when}}
    pod = {
        "metadata": {
            "name": f"plugin-{index:05d}",
            "namespace": "gpu-operator",
            "uid": f"uid-{index:032d}",
            "labels": {"app": "plugin", "pod-template-generation": "1", "controller-revision-hash": "abc"},
            "ownerReferences": [{"kind": "DaemonSet", "name": "plugin", "uid": "ds-uid", "controller": True}],
        },
        "spec": {
            "nodeName": node,
            "affinity": {"nodeAffinity": {"required": [{"matchFields": [{"values": [node]}]}]}},
            "containers": [container],
            "volumes": [{"name": "device-plugin", "hostPath": {"path": "/var/lib/kubelet/device-plugins"}}],
        },
        "status": {
            "phase": "Running",
            "podIP": f"10.1.{index // 250}.{index % 250}",
            "conditions": [
                {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": when}
                for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": "plugin",
                    "ready": True,
                    "restartCount": 0,
                    "image": container["image"],
                    "imageID": f"{container['image']}@sha256:{'0' * 64}",
                    "containerID": f"containerd://{index:064d}",
                    "state": started,
                }
            ],
        },
    }
    return json.loads(json.dumps(pod))


def held_per_object(fold: Any, serve: Any, count: int) -> float:
    """Bytes a cache holds per folded object of ``count`` (each served and decoded on its own)."""
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        folded = [fold(serve(index)) for index in range(count)]
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(folded) == count
    return (held - base) / count


def test_a_folded_pod_keeps_what_its_gates_read_and_shares_what_its_daemonsets_pods_have_alike() -> None:
    """The apply's cache holds every pod of the stack (four or more per node): per pod it holds its name,
    uid, node and state, the rest one object for all the DaemonSet's pods, so a bigger fleet costs the same
    per pod, a small part of the decoded pod."""
    folded = fold_pod(served_pod(7))
    assert set(folded["metadata"]) == {"name", "namespace", "uid", "labels", "ownerReferences"}
    assert set(folded["spec"]) == {"nodeName", "containers"}
    assert folded["status"]["containerStatuses"] == [
        {"name": "plugin", "restartCount": 0, "state": {"running": {}}}
    ]
    assert folded["status"]["conditions"][1] == {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": "2026-12-01T18:00:01Z",
    }
    other = fold_pod(served_pod(8))
    assert other["spec"]["containers"] is folded["spec"]["containers"]
    assert other["metadata"]["labels"] is folded["metadata"]["labels"]
    small, big = held_per_object(fold_pod, served_pod, 300), held_per_object(fold_pod, served_pod, 3000)
    assert big < 1.2 * small, (small, big)
    assert big < 2000, f"{big:.0f} bytes per folded pod"


def test_a_folded_node_costs_the_same_whatever_the_fleet() -> None:
    small = held_per_object(fold_node, lambda index: served_node(f"gpu-{index:05d}"), 300)
    big = held_per_object(fold_node, lambda index: served_node(f"gpu-{index:05d}"), 3000)
    assert big < 1.2 * small, (small, big)
    folded = fold_node(served_node("gpu-00001"))
    assert "lastHeartbeatTime" not in folded["status"]["conditions"][0]
    assert folded["status"]["capacity"] is fold_node(served_node("gpu-00002"))["status"]["capacity"]
