"""Structural sharing (``sim.api.sharing``, ``managed.encode``): the pods of one template share what they
have in common in the store and in what subscribers get, while every answer stays its own deep copy and
reads exactly as before."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from gpuplan.sim.api import managed, objects, sharing
from gpuplan.sim.api.registry import Registry, ResourceType
from gpuplan.sim.api.store import Event, Store


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store(Registry.builtin())
    yield s
    s.close()


def _pods(store: Store) -> ResourceType:
    rt = store.registry.for_kind("v1", "Pod")
    assert rt is not None
    return rt


def _pod(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "plugin"}},
        "spec": {
            "nodeName": node,
            # no kube-api-access-<random> volume mounted into each pod's containers: they stay alike
            "automountServiceAccountToken": False,
            "containers": [{"name": "plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def _stored(store: Store, name: str) -> dict[str, Any]:
    found = store._table.get(_pods(store), "default", name)
    assert found is not None
    return found


def test_pods_of_one_template_share_their_common_parts_in_the_store(store: Store) -> None:
    for index in range(3):
        store.create(_pods(store), _pod(f"p{index}", f"node-{index}"), manager="daemonset-controller")
    # a part is pooled once seen twice: the first pod keeps its own, the others share
    first, second = _stored(store, "p1"), _stored(store, "p2")
    assert first["spec"]["containers"] is second["spec"]["containers"]
    assert first["spec"]["tolerations"] is second["spec"]["tolerations"]
    assert first["metadata"]["labels"] is second["metadata"]["labels"]
    first_fields = first["metadata"]["managedFields"][0]["fieldsV1"]
    assert first_fields is second["metadata"]["managedFields"][0]["fieldsV1"]
    assert first["spec"] is not second["spec"]  # each pod's own nodeName


def test_pods_with_their_own_token_volume_still_share_the_template_mounts(store: Store) -> None:
    for index in range(3):
        pod = _pod(f"p{index}", f"node-{index}")
        mounts = [{"name": "run", "mountPath": "/run"}, {"name": f"token-{index}", "mountPath": "/var/run/t"}]
        pod["spec"]["containers"][0]["volumeMounts"] = mounts
        store.create(_pods(store), pod, manager="daemonset-controller")
    first, second = (_stored(store, name)["spec"]["containers"][0]["volumeMounts"] for name in ("p1", "p2"))
    assert first is not second and first[0] is second[0]
    assert first[1] == {"name": "token-1", "mountPath": "/var/run/t"}


def test_the_parts_of_an_event_outside_its_metadata_are_shared(store: Store) -> None:
    rt = store.registry.for_kind("v1", "Event")
    assert rt is not None
    involved = {
        "kind": "Pod",
        "name": "p",
        "namespace": "default",
        "uid": "u",
        "fieldPath": "spec.containers{c}",
    }
    for index, reason in enumerate(("Pulled", "Created", "Started")):
        event = {"metadata": {"name": f"p.{index}"}, "involvedObject": dict(involved), "reason": reason}
        event["source"] = {"component": "kubelet", "host": "node-0"}
        store.create(rt, event, namespace="default", manager="")
    second, third = (store._table.get(rt, "default", f"p.{index}") for index in (1, 2))
    assert second is not None and third is not None
    assert second["involvedObject"] is third["involvedObject"] and second["source"] is third["source"]
    assert store.get(rt, "default", "p.2")["involvedObject"] == involved


def test_answers_are_deep_copies_that_read_as_before(store: Store) -> None:
    for index in range(2):
        store.create(_pods(store), _pod(f"p{index}", f"node-{index}"), manager="daemonset-controller")
    answer = store.get(_pods(store), "default", "p0")
    assert answer["spec"]["containers"] is not _stored(store, "p0")["spec"]["containers"]
    answer["spec"]["containers"][0]["image"] = "changed"
    answer["metadata"]["managedFields"][0]["fieldsV1"]["f:changed"] = {}
    again = store.get(_pods(store), "default", "p1")
    assert again["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.1"
    assert "f:changed" not in again["metadata"]["managedFields"][0]["fieldsV1"]


def test_only_equal_json_is_shared_key_order_and_number_types_included(store: Store) -> None:
    configs = {
        "a": {"x": 1, "y": 2},
        "b": {"y": 2, "x": 1},  # other key order: its own instance, answered in its own order
        "c": {"x": 1.0, "y": 2},
        "d": {"x": True, "y": 2},
    }
    rt = store.registry.for_kind("v1", "ConfigMap")
    assert rt is not None
    for name, value in configs.items():
        store.create(rt, {"metadata": {"name": name, "annotations": value}}, manager="test")
    stored = {name: store._table.get(rt, "default", name) for name in configs}
    annotations = {name: obj["metadata"]["annotations"] for name, obj in stored.items() if obj}
    assert len({id(value) for value in annotations.values()}) == 4
    for name, value in configs.items():
        answer = store.get(rt, "default", name)["metadata"]["annotations"]
        assert json.dumps(answer) == json.dumps(value)


def test_a_part_is_keyed_by_its_compact_json_built_from_its_parts_json() -> None:
    pool = sharing.Pool()
    part = {"env": [{"name": "A", "value": '\u00e9"q'}], "n": [1, 1.5, True, None, float("nan")], "e": {}}
    expected = json.dumps(part, separators=(",", ":"), allow_nan=True)
    for _ in range(2):
        shared, text = sharing._shared_and_text(json.loads(expected), pool, sharing.INNER_LEVELS)
        assert text == expected
    assert pool.key_of(shared) == expected


def test_a_part_s_json_is_json_dumps_for_every_scalar_and_key_type() -> None:
    """The scalars are encoded inline and member names from a bounded table: the text must stay
    ``json.dumps``'s, with keys json converts (numbers, bools, None) and more names than the table keeps."""
    pool = sharing.Pool()
    parts: list[Any] = [
        {
            "i": -3,
            "big": 10**20,
            "f": 0.1,
            "t": True,
            "F": False,
            "n": None,
            "s": "\u2603",
            "l": [0, False, None],
        },
        {1: "a", "b": {"c": [1.5, {"d": None}]}},
        {True: 1, None: 2},
        [{"x": [True, 2, "3"]}, [], {}, "", 0],
    ]
    many = {f"key-{index}": index for index in range(sharing.MEMBER_NAMES_KEPT + 10)}
    for part in [*parts, many, many]:
        expected = json.dumps(part, separators=(",", ":"))
        assert sharing._shared_and_text(part, pool, sharing.INNER_LEVELS)[1] == expected
    assert len(sharing._MEMBER_NAMES) <= sharing.MEMBER_NAMES_KEPT


def test_parts_that_differ_deep_down_by_a_number_type_are_not_shared(store: Store) -> None:
    for index, port in enumerate([1, 1, 1, True, 1.0]):
        pod = _pod(f"p{index}", f"node-{index}")
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port}]
        store.create(_pods(store), pod, manager="daemonset-controller")
    ports = [_stored(store, f"p{index}")["spec"]["containers"][0]["ports"] for index in range(5)]
    assert ports[1] is ports[2]  # pooled the second time seen
    assert len({id(value) for value in ports[2:]}) == 3
    assert [type(p[0]["hostPort"]) for p in ports] == [int, int, int, bool, float]


def test_subscribers_share_one_copy_of_a_common_part_never_the_stored_one(store: Store) -> None:
    seen: list[Event] = []
    done = threading.Event()

    def collect(event: Event) -> None:
        seen.append(event)
        if len(seen) == 3:
            done.set()

    unsubscribe = store.subscribe(collect)
    for index in range(3):
        store.create(_pods(store), _pod(f"p{index}", f"node-{index}"), manager="daemonset-controller")
    assert done.wait(10)
    unsubscribe()
    first, second = (event.object["spec"]["containers"] for event in seen[1:])
    assert first is second
    assert first is not _stored(store, "p1")["spec"]["containers"]
    assert first == _stored(store, "p1")["spec"]["containers"]


def _write_status(store: Store, status: dict[str, Any], *, read_only: bool = False) -> dict[str, Any]:
    """A kubelet's status merge patch of pod p0."""
    return store.patch(
        _pods(store),
        "default",
        "p0",
        {"status": status},
        "application/merge-patch+json",
        manager="kubelet",
        subresource="status",
        read_only=read_only,
    )


def test_a_status_write_keeps_sharing_the_spec(store: Store) -> None:
    store.create(_pods(store), _pod("p0", "node-0"), manager="daemonset-controller")
    before = _stored(store, "p0")
    _write_status(store, {"phase": "Running"})
    assert _stored(store, "p0")["spec"] is before["spec"]


def test_a_read_only_status_write_answers_with_the_last_answer_s_copy_of_what_it_kept(store: Store) -> None:
    """The store copies only what a status write changed into its answer: the spec the write kept is the
    copy the previous read-only answer (the create's) holds, and every answer still reads as the object."""
    created = store.create(_pods(store), _pod("p0", "node-0"), manager="daemonset-controller", read_only=True)
    answers = [created]
    pending = {"phase": "Pending", "conditions": [{"type": "Ready", "status": "False"}]}
    # the second keeps the conditions, as a kubelet's patch does
    for status in (pending, {"phase": "Running"}):
        answers.append(_write_status(store, status, read_only=True))
    assert answers[2]["spec"] is answers[1]["spec"] is created["spec"]
    assert answers[2]["status"] is not answers[1]["status"]
    assert answers[2]["status"]["conditions"] is answers[1]["status"]["conditions"]  # kept two levels down
    assert answers[2] == store.get(_pods(store), "default", "p0")
    assert answers[2]["spec"] is not _stored(store, "p0")["spec"]  # a copy, never the stored instance


def test_a_write_after_another_client_s_copies_again(store: Store) -> None:
    """Only the answer of the stored version's own read-only write is reused: after a plain write (whose
    answer the client may change) the next read-only answer is a copy of its own."""
    created = store.create(_pods(store), _pod("p0", "node-0"), manager="daemonset-controller", read_only=True)
    plain = store.patch(
        _pods(store),
        "default",
        "p0",
        {"metadata": {"labels": {"b": "1"}}},
        "application/merge-patch+json",
        manager="m",
    )
    plain["spec"]["containers"][0]["image"] = "changed by the client"
    answer = _write_status(store, {"phase": "Running"}, read_only=True)
    assert answer["spec"] is not created["spec"] and answer["spec"] is not plain["spec"]
    assert answer == store.get(_pods(store), "default", "p0")


def test_equal_path_sets_encode_to_one_trie() -> None:
    paths = {("f:spec", "f:replicas"), ("f:metadata", "f:labels", "f:app")}
    trie = managed.encode(paths)
    assert managed.encode(set(paths)) is trie
    assert managed.decode(trie) == paths


def test_the_pool_takes_a_part_seen_twice_and_forgets_its_oldest() -> None:
    pool = sharing.Pool(size=2)
    once = ["a"]
    assert pool.canonical("a", once) is once and not pool.pooled(once)
    first = pool.canonical("a", ["a"])
    assert pool.pooled(first) and pool.canonical("a", ["a", "equal"]) is first
    for name in ("b", "c"):
        pool.canonical(name, [name])
        pool.canonical(name, [name])
    assert not pool.pooled(first)
    assert pool.copy_of(first) is None


def test_a_read_only_answer_is_the_copy_subscribers_get_and_reads_as_a_deep_copy(store: Store) -> None:
    delivered: list[Event] = []
    done = threading.Event()

    def collect(event: Event) -> None:
        delivered.append(event)
        done.set()

    unsubscribe = store.subscribe(collect)
    answer = store.create(_pods(store), _pod("p0", "node-0"), manager="daemonset-controller", read_only=True)
    assert done.wait(10)
    unsubscribe()
    assert delivered[0].object is answer
    assert answer == store.get(_pods(store), "default", "p0")
    assert answer["spec"]["containers"] is not _stored(store, "p0")["spec"]["containers"]


def test_a_read_only_patch_answers_as_a_plain_one(store: Store) -> None:
    store.create(_pods(store), _pod("p0", "node-0"), manager="daemonset-controller")
    body = {"status": {"phase": "Running"}}
    merge = "application/merge-patch+json"
    answer = store.patch(
        _pods(store), "default", "p0", body, merge, manager="kubelet", subresource="status", read_only=True
    )
    assert answer == store.get(_pods(store), "default", "p0")
    again = store.patch(
        _pods(store), "default", "p0", body, merge, manager="kubelet", subresource="status", read_only=True
    )
    assert again == answer  # a no-op: the same version


def test_times_of_one_second_are_one_string() -> None:
    first = objects.rfc3339(datetime(2026, 12, 1, 16, 57, 45, 100, tzinfo=UTC))
    again = objects.rfc3339(datetime(2026, 12, 1, 17, 57, 45, 900, tzinfo=timezone(timedelta(hours=1))))
    assert first == "2026-12-01T16:57:45Z" and again is first
    assert objects.rfc3339(datetime(2026, 12, 1, 16, 57, 46, tzinfo=UTC)) == "2026-12-01T16:57:46Z"
