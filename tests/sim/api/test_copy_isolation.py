"""Callers never alias stored objects: mutating, at any depth, an object a store method returned, a request
body after the call, a watch event or a subscriber's event never changes what the store holds or replays.
Also the JSON copy itself (``objects.copy_json``)."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import patch
from gpuplan.sim.api.objects import copy_json
from gpuplan.sim.api.registry import Registry, ResourceType
from gpuplan.sim.api.store import Event, Store


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store(Registry.builtin())
    yield s
    s.close()


def _rt(store: Store, api_version: str, kind: str) -> ResourceType:
    rt = store.registry.for_kind(api_version, kind)
    assert rt is not None
    return rt


def _vandalise(value: Any) -> None:
    """Change every dict and list inside ``value``, in place, at every depth."""
    if isinstance(value, dict):
        for k in list(value):
            _vandalise(value[k])
            if not isinstance(value[k], (dict, list)):
                value[k] = "vandalised"
        value["vandalised"] = True
    elif isinstance(value, list):
        for item in value:
            _vandalise(item)
        value.append("vandalised")


def _dump(store: Store) -> str:
    """Everything the store holds and can replay, as text."""
    snapshot = {
        f"{rt.plural}": store.list(rt).items
        for rt in (_rt(store, "v1", "Pod"), _rt(store, "v1", "ConfigMap"), _rt(store, "apps/v1", "DaemonSet"))
    }
    with store.watch(_rt(store, "v1", "Pod"), resource_version="1") as watch:
        replay = []
        while (item := watch.next(0)) is not None:
            replay.append(item)
    return json.dumps({"snapshot": snapshot, "replay": replay}, sort_keys=True)


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "x"}},
        "spec": {
            "nodeName": "n1",
            "containers": [{"name": "c", "image": "a:1", "env": [{"name": "E", "value": "1"}]}],
        },
    }


def _status(ready: str) -> dict[str, Any]:
    return {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": ready}],
            "containerStatuses": [{"name": "c", "ready": ready == "True", "restartCount": 0}],
        }
    }


def test_mutating_what_every_write_and_read_returns_never_changes_the_store(store: Store) -> None:
    pods, cms = _rt(store, "v1", "Pod"), _rt(store, "v1", "ConfigMap")
    body = _pod("p")
    returned = [store.create(pods, body, manager="t")]
    _vandalise(body)  # the request body is the caller's: the store kept its own copy
    returned.append(
        store.patch(
            pods, "default", "p", _status("False"), patch.MERGE, manager="kubelet", subresource="status"
        )
    )
    returned.append(
        store.patch(pods, "default", "p", {"metadata": {"labels": {"b": "1"}}}, patch.STRATEGIC, manager="t")
    )
    returned.append(
        store.patch(
            pods,
            "default",
            "p",
            [{"op": "add", "path": "/metadata/annotations", "value": {"a": "1"}}],
            patch.JSON_PATCH,
            manager="t",
        )
    )
    status_update = store.get(pods, "default", "p")
    status_update["status"]["phase"] = "Succeeded"
    returned.append(
        store.update(
            pods, status_update, namespace="default", name="p", manager="kubelet", subresource="status"
        )
    )
    applied = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "namespace": "default"},
        "data": {"k": "v"},
    }
    returned.append(store.patch(cms, "default", "cm", applied, patch.APPLY, manager="applier"))
    returned.append(
        store.patch(cms, "default", "cm", {**applied, "data": {"k": "w"}}, patch.APPLY, manager="applier")
    )
    _vandalise(applied)
    returned.append(store.get(pods, "default", "p"))
    returned.extend(store.list(pods).items)
    before = _dump(store)
    for obj in returned:
        _vandalise(obj)
    assert _dump(store) == before

    deleted = store.delete(cms, "default", "cm")
    after_delete = _dump(store)
    _vandalise(deleted)
    assert _dump(store) == after_delete


def test_a_status_write_leaves_the_earlier_versions_the_log_replays_intact(store: Store) -> None:
    """A status write shares the unchanged spec with the stored object it replaces; neither changes."""
    pods = _rt(store, "v1", "Pod")
    created = store.create(pods, _pod("p"), manager="t")
    first = store.patch(
        pods, "default", "p", _status("False"), patch.MERGE, manager="kubelet", subresource="status"
    )
    second = store.patch(
        pods, "default", "p", _status("True"), patch.MERGE, manager="kubelet", subresource="status"
    )
    _vandalise(second)
    with store.watch(pods, resource_version=created["metadata"]["resourceVersion"]) as watch:
        replayed = [watch.next(1), watch.next(1)]
    assert [e["object"]["status"]["conditions"][0]["status"] for e in replayed if e] == ["False", "True"]
    assert all(e and e["object"]["spec"] == created["spec"] for e in replayed)
    assert first["status"]["conditions"][0]["status"] == "False"


def test_mutating_watch_and_subscriber_events_never_changes_the_store(store: Store) -> None:
    pods = _rt(store, "v1", "Pod")
    seen: list[Event] = []
    done = threading.Event()

    def vandal(event: Event) -> None:
        if event.rt.kind == "Pod":
            seen.append(event)
            for part in (event.object, event.old):
                if part is not None:
                    _vandalise(part)
            if event.type == "DELETED":
                done.set()

    unsubscribe = store.subscribe(vandal)
    watch = store.watch(pods, resource_version=str(store.resource_version))
    store.create(pods, _pod("p"), manager="t")
    for ready in ("False", "True"):
        store.patch(
            pods, "default", "p", _status(ready), patch.MERGE, manager="kubelet", subresource="status"
        )
    store.patch(pods, "default", "p", {"metadata": {"labels": {"x": "y"}}}, patch.MERGE, manager="t")
    kept = store.get(pods, "default", "p")
    while (item := watch.next(0)) is not None:
        _vandalise(item)
    assert store.flush(10)
    assert store.get(pods, "default", "p") == kept
    store.delete(pods, "default", "p", grace_period_seconds=0)  # no kubelet here to finish a graceful one
    assert done.wait(10)
    unsubscribe()
    watch.close()
    assert [e.type for e in seen] == ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"]
    with store.watch(pods, resource_version="1") as replay:
        statuses = []
        while (item := replay.next(0)) is not None:
            statuses.append((item["type"], (item["object"].get("status") or {}).get("phase")))
    assert statuses == [
        ("ADDED", "Pending"),
        ("MODIFIED", "Running"),
        ("MODIFIED", "Running"),
        ("MODIFIED", "Running"),
        ("DELETED", "Running"),
    ]


def test_subscribers_get_each_change_with_its_own_before_and_after(store: Store) -> None:
    """The dispatcher reuses one event's object copy as the next change's ``old``: it must be that state."""
    cms = _rt(store, "v1", "ConfigMap")
    seen: list[tuple[str | None, str]] = []
    unsubscribe = store.subscribe(
        lambda e: (
            seen.append(((e.old or {}).get("data", {}).get("k"), e.object["data"]["k"]))
            if e.rt.kind == "ConfigMap"
            else None
        )
    )
    store.create(cms, {"metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "0"}}, manager="t")
    for value in "123":
        store.patch(cms, "default", "cm", {"data": {"k": value}}, patch.MERGE, manager="t")
    assert store.flush(10)
    unsubscribe()
    assert seen == [(None, "0"), ("0", "1"), ("1", "2"), ("2", "3")]


def test_copy_json_copies_every_container_and_keeps_scalars() -> None:
    source: dict[str, Any] = {"a": [1, {"b": "c"}, [2.5, None, True]], "d": OrderedDict(e=[1]), "t": (1, 2)}
    copied = copy_json(source)
    assert copied == source and copied is not source
    assert copied["a"] is not source["a"] and copied["a"][1] is not source["a"][1]
    assert copied["a"][2] is not source["a"][2]
    assert type(copied["d"]) is dict and copied["d"]["e"] is not source["d"]["e"]
    assert copied["t"] is source["t"]  # immutable: shared
    _vandalise(copied)
    assert source == {"a": [1, {"b": "c"}, [2.5, None, True]], "d": OrderedDict(e=[1]), "t": (1, 2)}
    assert copy_json([{"x": 1}]) == [{"x": 1}] and copy_json("s") == "s"
