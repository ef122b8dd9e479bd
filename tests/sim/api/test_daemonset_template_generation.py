"""A DaemonSet's ``deprecated.daemonset.template.generation`` annotation, as the daemonset strategy and the
apps/v1 conversion keep it: 1 on create (or the client's larger value), bumped with each template change,
never settable by a write, owned by the manager that created the DaemonSet with an Update."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import managed, patch, registry, store

DAEMONSETS = next(rt for rt in registry.BUILTIN if rt.kind == "DaemonSet")
KEY = "deprecated.daemonset.template.generation"


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def daemonset(image: str = "busybox:1", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    labels = {"app": "d"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "d", **({"annotations": annotations} if annotations else {})},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    }


def generations(obj: dict[str, Any]) -> tuple[str, int]:
    return obj["metadata"]["annotations"][KEY], obj["metadata"]["generation"]


def test_created_at_one_and_owned_by_the_creator(s: store.Store) -> None:
    created = s.create(DAEMONSETS, daemonset(), manager="kubectl-create")
    assert generations(created) == ("1", 1)
    owned = created["metadata"]["managedFields"][0]["fieldsV1"]["f:metadata"]["f:annotations"]
    assert f"f:{KEY}" in owned


def test_a_larger_value_sent_on_create_is_kept(s: store.Store) -> None:
    assert generations(s.create(DAEMONSETS, daemonset(annotations={KEY: "7"}), manager="m")) == ("7", 1)


def test_an_applied_create_does_not_own_it(s: store.Store) -> None:
    answer = s.patch(DAEMONSETS, "default", "d", json.dumps(daemonset()), patch.APPLY, manager="gpuplan")
    assert generations(answer) == ("1", 1)
    assert "f:annotations" not in answer["metadata"]["managedFields"][0]["fieldsV1"].get("f:metadata", {})


def test_bumped_by_a_template_change_only(s: store.Store) -> None:
    s.create(DAEMONSETS, daemonset(), manager="m")
    spec_only = s.patch(
        DAEMONSETS, "default", "d", json.dumps({"spec": {"minReadySeconds": 5}}), patch.MERGE, manager="m"
    )
    assert generations(spec_only) == ("1", 2)
    template = {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}}}
    changed = s.patch(DAEMONSETS, "default", "d", json.dumps(template), patch.STRATEGIC, manager="m")
    assert generations(changed) == ("2", 3)
    applied = s.patch(
        DAEMONSETS, "default", "d", json.dumps(daemonset("busybox:3")), patch.APPLY, manager="a", force=True
    )
    assert generations(applied) == ("3", 4)


def test_its_owner_is_whoever_sent_a_value_other_than_the_stored_one(s: store.Store) -> None:
    """The Update manager compares the decoded request (the annotation as sent, 0 when absent) with the
    stored object, before the strategy sets the real value: a read-modify-write of the template does not
    take the annotation, a manifest without it does."""
    s.create(DAEMONSETS, daemonset(), manager="kubectl-create")
    live = s.get(DAEMONSETS, "default", "d")
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    edited = s.update(DAEMONSETS, live, namespace="default", name="d", manager="kubectl-edit")
    assert generations(edited) == ("2", 2)
    assert managed.owners(edited, managed.fields("metadata", "annotations", KEY))[0][0] == ("kubectl-create")
    replaced = s.update(DAEMONSETS, daemonset("busybox:3"), namespace="default", name="d", manager="replace")
    assert generations(replaced) == ("3", 3)
    owners = managed.owners(replaced, managed.fields("metadata", "annotations", KEY))
    assert [o[0] for o in owners] == ["replace"]


def test_a_write_cannot_set_it(s: store.Store) -> None:
    s.create(DAEMONSETS, daemonset(), manager="m")
    forged = s.update(
        DAEMONSETS, daemonset(annotations={KEY: "9"}), namespace="default", name="d", manager="m"
    )
    assert generations(forged) == ("1", 1)
    without = s.update(DAEMONSETS, daemonset(), namespace="default", name="d", manager="m")
    assert generations(without) == ("1", 1)
    assert without["metadata"]["resourceVersion"] == forged["metadata"]["resourceVersion"]
