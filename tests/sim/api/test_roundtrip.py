"""What the store keeps of a built-in object is what the Go type's JSON encoding keeps: the zeros of
``omitempty`` fields left out and quantities in canonical form, on every write path (create, update, each
patch type, server-side apply, status writes), alike in the answer, a GET and the watch event."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gpuplan.sim.api import patch, registry, store
from gpuplan.sim.api.registry import ResourceType

Obj = dict[str, Any]


def kind(name: str) -> ResourceType:
    return next(rt for rt in registry.BUILTIN if rt.kind == name)


PODS, NODES, RUNTIME_CLASSES = kind("Pod"), kind("Node"), kind("RuntimeClass")
LABELS = {"app": "x"}
# Where each kind keeps its pod spec.
POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "DaemonSet": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def pod_spec(container: Obj) -> Obj:
    return {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "containers": [container],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }


def workload(kind_name: str, container: Obj) -> Obj:
    """A valid object of the kind whose pod spec has ``container``."""
    spec = pod_spec(container)
    template = {"metadata": {"labels": LABELS}, "spec": spec}
    body: Obj = {"apiVersion": kind(kind_name).api_version, "kind": kind_name, "metadata": {"name": "w"}}
    if kind_name == "Pod":
        body["spec"] = spec
    elif kind_name in ("DaemonSet", "Deployment"):
        spec["restartPolicy"] = "Always"
        body["spec"] = {"selector": {"matchLabels": LABELS}, "template": template}
    elif kind_name == "Job":
        body["spec"] = {"template": template}
    else:
        body["spec"] = {"schedule": "@hourly", "jobTemplate": {"spec": {"template": template}}}
    return body


def spec_at(obj: Obj, kind_name: str) -> Obj:
    found = obj
    for key in POD_SPEC_PATHS[kind_name]:
        found = found[key]
    return found


EMPTY_STRINGS = {
    "name": "c",
    "image": "busybox:1.36",
    "command": [],
    "workingDir": "",
    "env": [{"name": "EMPTY", "value": ""}, {"name": "SET", "value": "x"}],
    "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "", "subPathExpr": "", "readOnly": False}],
}
FILLED = {
    "name": "c",
    "image": "busybox:1.36",
    "workingDir": "/w",
    "env": [{"name": "EMPTY", "value": "before"}, {"name": "SET", "value": "x"}],
    "volumeMounts": [{"name": "v", "mountPath": "/v", "subPath": "s"}],
}


def write_with(s: store.Store, rt: ResourceType, verb: str, body: Obj, base: Obj) -> Obj:
    """Write ``body`` with ``verb``; every verb but create first stores ``base``."""
    if verb == "create":
        return s.create(rt, body, manager="m")
    if verb == "apply":
        s.patch(rt, "default", "w", json.dumps(base), patch.APPLY, manager="a")
        return s.patch(rt, "default", "w", json.dumps(body), patch.APPLY, manager="a")
    s.create(rt, base, manager="m")
    if verb == "update":
        # The stored object with the body's containers: a PUT keeps what admission gave a pod.
        stored = s.get(rt, "default", "w")
        spec_at(stored, rt.kind)["containers"] = spec_at(body, rt.kind)["containers"]
        return s.update(rt, stored, namespace="default", name="w", manager="m")
    if verb == "json":
        path = "/" + "/".join(POD_SPEC_PATHS[rt.kind]) + "/containers"
        ops = [{"op": "replace", "path": path, "value": spec_at(body, rt.kind)["containers"]}]
        return s.patch(rt, "default", "w", json.dumps(ops), patch.JSON_PATCH, manager="m")
    patch_type = patch.MERGE if verb == "merge" else patch.STRATEGIC
    return s.patch(rt, "default", "w", json.dumps({"spec": body["spec"]}), patch_type, manager="m")


def observed(s: store.Store, rt: ResourceType, write: Callable[[], Obj]) -> tuple[Obj, Obj, Obj]:
    """The answer of ``write``, a GET after it and the object of the last watch event it caused."""
    with s.watch(rt, namespace="default", resource_version=str(s.resource_version)) as watch:
        answer = write()
        events = []
        while (event := watch.next(timeout=0.05)) is not None:
            events.append(event)
    return answer, s.get(rt, "default", "w"), events[-1]["object"]


@pytest.mark.parametrize("verb", ["create", "update", "merge", "json", "strategic", "apply"])
@pytest.mark.parametrize("kind_name", list(POD_SPEC_PATHS))
def test_empty_strings_of_omitempty_fields_are_left_out(s: store.Store, kind_name: str, verb: str) -> None:
    rt = kind(kind_name)
    # A pod's spec is immutable: its writes re-send the same spec (were the empties kept, that would be a
    # change, refused).
    body, base = (
        workload(kind_name, EMPTY_STRINGS),
        workload(kind_name, FILLED if kind_name != "Pod" else EMPTY_STRINGS),
    )
    answer, got, watched = observed(s, rt, lambda: write_with(s, rt, verb, body, base))
    container = spec_at(got, kind_name)["containers"][0]
    assert container["env"] == [{"name": "EMPTY"}, {"name": "SET", "value": "x"}]
    assert container["volumeMounts"] == [{"name": "v", "mountPath": "/v"}]
    assert "workingDir" not in container and "command" not in container
    assert answer == got
    assert watched == got


def test_an_update_owns_no_field_it_sent_empty(s: store.Store) -> None:
    """A create's fields come from the decoded object, where the empty value is gone; an apply owns what it
    applied (the real server lists ``f:value`` for an applied ``value: ""`` it does not store)."""
    created = s.create(PODS, workload("Pod", EMPTY_STRINGS), manager="m")
    env = created["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:containers"]['k:{"name":"c"}'][
        "f:env"
    ]
    assert env['k:{"name":"EMPTY"}'] == {".": {}, "f:name": {}}
    applied = workload("Pod", EMPTY_STRINGS)
    applied["metadata"]["name"] = "a"
    answer = s.patch(PODS, "default", "a", json.dumps(applied), patch.APPLY, manager="a")
    entry = answer["metadata"]["managedFields"][0]["fieldsV1"]["f:spec"]["f:containers"]['k:{"name":"c"}']
    assert "f:value" in entry["f:env"]['k:{"name":"EMPTY"}']
    assert answer["spec"]["containers"][0]["env"][0] == {"name": "EMPTY"}


def test_structs_and_pointers_keep_their_zero(s: store.Store) -> None:
    pod = workload("Pod", {"name": "c", "image": "busybox:1.36", "resources": {}})
    pod["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/h", "type": ""}})
    pod["spec"]["securityContext"] = {}
    got = s.create(PODS, pod, manager="m")
    assert got["spec"]["containers"][0]["resources"] == {}
    assert got["spec"]["volumes"][1]["hostPath"] == {"path": "/h", "type": ""}
    assert got["spec"]["securityContext"] == {}


QUANTITIES = {"cpu": "0.1", "memory": "1.5Gi", "ephemeral-storage": "2e9", "nvidia.com/gpu": "1000m"}
CANONICAL = {"cpu": "100m", "memory": "1536Mi", "ephemeral-storage": "2e9", "nvidia.com/gpu": "1"}


@pytest.mark.parametrize("kind_name", list(POD_SPEC_PATHS))
def test_quantities_of_containers_and_volumes_are_canonical(s: store.Store, kind_name: str) -> None:
    container = {
        "name": "c",
        "image": "busybox:1.36",
        "resources": {"requests": QUANTITIES, "limits": QUANTITIES},
    }
    body = workload(kind_name, container)
    spec_at(body, kind_name)["initContainers"] = [copy.deepcopy(container) | {"name": "i"}]
    spec_at(body, kind_name)["volumes"] = [{"name": "v", "emptyDir": {"sizeLimit": 0.5}}]
    answer, got, watched = observed(s, kind(kind_name), lambda: s.create(kind(kind_name), body, manager="m"))
    spec = spec_at(got, kind_name)
    for part in (spec["containers"][0], spec["initContainers"][0]):
        assert part["resources"] == {"requests": CANONICAL, "limits": CANONICAL}
    assert spec["volumes"][0]["emptyDir"] == {"sizeLimit": "500m"}
    assert answer == got == watched


def test_a_manifest_resent_with_its_quantities_as_written_is_a_no_op(s: store.Store) -> None:
    body = workload("Pod", {"name": "c", "image": "busybox:1.36", "resources": {"limits": {"cpu": 0.5}}})
    first = s.create(PODS, copy.deepcopy(body), manager="m")
    again = s.patch(PODS, "default", "w", json.dumps({"spec": body["spec"]}), patch.STRATEGIC, manager="m")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    assert again["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "500m"},
        "requests": {"cpu": "500m"},
    }


def test_a_runtime_class_overhead_reaches_the_pod_canonical(s: store.Store) -> None:
    s.create(
        RUNTIME_CLASSES,
        {"metadata": {"name": "nvidia"}, "handler": "nvidia", "overhead": {"podFixed": {"memory": "0.5Gi"}}},
        manager="m",
    )
    pod = workload("Pod", {"name": "c", "image": "busybox:1.36"})
    pod["spec"]["runtimeClassName"] = "nvidia"
    assert s.get(RUNTIME_CLASSES, None, "nvidia")["overhead"] == {"podFixed": {"memory": "512Mi"}}
    assert s.create(PODS, pod, manager="m")["spec"]["overhead"] == {"memory": "512Mi"}


def test_node_capacity_is_canonical_on_create_and_on_status_writes(s: store.Store) -> None:
    node = {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4000m", "memory": "16777216Ki"}}}
    created = s.create(NODES, node, manager="kubelet")
    assert created["status"]["capacity"] == {"cpu": "4", "memory": "16Gi"}
    stored_metadata = s.get(NODES, None, "n")["metadata"]
    allocatable = {"cpu": "3.5", "nvidia.com/gpu": "2.0e3"}
    body = {"status": {"allocatable": allocatable, "nodeInfo": {"kernelVersion": ""}}}
    answer, got, watched = observed_node(s, body)
    assert got["status"]["allocatable"] == {"cpu": "3500m", "nvidia.com/gpu": "2e3"}
    assert got["status"]["nodeInfo"] == {"kernelVersion": ""}  # NodeSystemInfo's fields have no omitempty
    assert got["status"]["capacity"] == {"cpu": "4", "memory": "16Gi"}
    assert answer == got == watched
    assert got["metadata"]["uid"] == stored_metadata["uid"]


def observed_node(s: store.Store, body: Obj) -> tuple[Obj, Obj, Obj]:
    with s.watch(NODES, resource_version=str(s.resource_version)) as watch:
        answer = s.patch(
            NODES, None, "n", json.dumps(body), patch.MERGE, manager="kubelet", subresource="status"
        )
        event = watch.next(timeout=5)
    assert event is not None
    return answer, s.get(NODES, None, "n"), event["object"]


def test_a_status_write_changes_no_part_of_the_stored_version(s: store.Store) -> None:
    """A status merge patch starts from the stored object's own parts (no copy): the encoding replaces what
    it changes instead of changing it in place."""
    s.create(NODES, {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": "4"}}}, manager="kubelet")
    stored = s._table.get(NODES, None, "n")
    body = {"status": {"capacity": {"cpu": "2000m"}, "allocatable": {"cpu": "1000m"}}}
    s.patch(NODES, None, "n", json.dumps(body), patch.MERGE, manager="kubelet", subresource="status")
    assert stored["status"] == {"capacity": {"cpu": "4"}}
    assert s.get(NODES, None, "n")["status"] == {"capacity": {"cpu": "2"}, "allocatable": {"cpu": "1"}}
