"""kubectl's generator commands (`kubectl create <kind> ...`) send built-in kinds as protobuf; what the
simulator stores from them is what it stores from the same object sent as JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuplan.sim.cluster import Simulator


@pytest.mark.parametrize(
    "kind,create",
    [
        ("priorityclass", ["create", "priorityclass", "NAME", "--value=5", "--description=x"]),
        ("cronjob", ["create", "cronjob", "NAME", "--image=busybox", "--schedule=*/5 * * * *"]),
        ("job", ["create", "job", "NAME", "--image=busybox"]),
        ("secret", ["create", "secret", "generic", "NAME", "--from-literal=a=b"]),
        ("configmap", ["create", "configmap", "NAME", "--from-literal=colour=green"]),
        ("clusterrole", ["create", "clusterrole", "NAME", "--verb=get", "--resource=pods"]),
        ("deployment", ["create", "deployment", "NAME", "--image=busybox"]),
    ],
)
def test_a_generated_object_is_stored_as_the_same_object_sent_as_json(
    lab_sim: Simulator, kubectl: Any, kind: str, create: list[str]
) -> None:
    """The protobuf a generator command sends and the JSON `kubectl apply` sends of the same object end
    as the same stored object (server defaults included)."""
    sent = [arg.replace("NAME", "by-create") for arg in create]
    rendered = kubectl(*[arg.replace("NAME", "by-apply") for arg in create], "--dry-run=client", "-o", "json")
    kubectl(*sent)
    kubectl("apply", "-f", "-", input=rendered.stdout)

    def stored(name: str) -> dict[str, Any]:
        obj: dict[str, Any] = json.loads(kubectl("get", kind, name, "-o", "json").stdout)
        uid = obj["metadata"]["uid"]  # a Job's selector and labels carry it
        for key in ("name", "uid", "resourceVersion", "creationTimestamp", "managedFields", "annotations"):
            obj["metadata"].pop(key, None)
        obj.pop("status", None)
        text = json.dumps(obj).replace(uid, "UID").replace(name, "NAME")
        same: dict[str, Any] = json.loads(text)
        return same

    assert stored("by-create") == stored("by-apply")
