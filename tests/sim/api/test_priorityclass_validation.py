"""PriorityClass writes as the real API server validates them: ``system-`` names reserved for the built-in
classes, user values capped at 1,000,000,000, value and preemptionPolicy immutable (422 with the real
messages), and a generation that no update bumps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import patch
from gpuplan.sim.api.registry import Registry, ResourceType
from gpuplan.sim.api.store import ApiError, Store


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store(Registry.builtin())
    yield s
    s.close()


@pytest.fixture
def pcs(store: Store) -> ResourceType:
    rt = store.registry.get("scheduling.k8s.io", "v1", "priorityclasses")
    assert rt is not None
    return rt


def _pc(name: str, value: int, **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **fields,
    }


def _refusal(call: Any) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call()
    assert caught.value.code == 422 and caught.value.reason == "Invalid"
    return caught.value


def test_an_unknown_system_name_is_reserved(store: Store, pcs: ResourceType) -> None:
    error = _refusal(lambda: store.create(pcs, _pc("system-gpu", 10), manager="t"))
    assert error.message == (
        'PriorityClass.scheduling.k8s.io "system-gpu" is invalid: metadata.name: Forbidden: priority class '
        "names "
        "with 'system-' prefix are reserved for system use only. error: system-gpu is not a known system "
        "priority class"
    )
    assert error.details is not None
    assert error.details["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "field": "metadata.name",
            "message": error.message.split("metadata.name: ", 1)[1],
        }
    ]


def test_a_built_in_name_with_another_value_or_as_global_default_is_refused(
    store: Store, pcs: ResourceType
) -> None:
    store.delete(pcs, None, "system-node-critical")
    error = _refusal(lambda: store.create(pcs, _pc("system-node-critical", 5), manager="t"))
    assert error.message.endswith("error: value of system-node-critical PriorityClass must be 2000001000")
    error = _refusal(
        lambda: store.create(pcs, _pc("system-node-critical", 2000001000, globalDefault=True), manager="t")
    )
    assert error.message.endswith("error: globalDefault of system-node-critical PriorityClass must be false")
    recreated = store.create(pcs, _pc("system-node-critical", 2000001000), manager="t")
    assert recreated["value"] == 2000001000


def test_a_user_class_value_is_at_most_one_billion(store: Store, pcs: ResourceType) -> None:
    assert store.create(pcs, _pc("gpu-top", 1_000_000_000), manager="t")["value"] == 1_000_000_000
    error = _refusal(lambda: store.create(pcs, _pc("gpu-higher", 1_000_000_001), manager="t"))
    assert error.message == (
        'PriorityClass.scheduling.k8s.io "gpu-higher" is invalid: value: Forbidden: '
        "maximum allowed value of a user defined priority is 1000000000"
    )


def test_an_unsupported_preemption_policy_is_refused(store: Store, pcs: ResourceType) -> None:
    error = _refusal(lambda: store.create(pcs, _pc("gpu", 5, preemptionPolicy="Sometimes"), manager="t"))
    assert error.message.endswith(
        'preemptionPolicy: Unsupported value: "Sometimes": supported values: "PreemptLowerPriority", "Never"'
    )


@pytest.mark.parametrize("patch_type", [patch.MERGE, patch.APPLY])
def test_value_is_immutable(store: Store, pcs: ResourceType, patch_type: str) -> None:
    store.create(pcs, _pc("gpu", 100), manager="t")
    body = _pc("gpu", 200) if patch_type == patch.APPLY else {"value": 200}
    error = _refusal(lambda: store.patch(pcs, None, "gpu", body, patch_type, manager="t", force=True))
    assert error.message == (
        'PriorityClass.scheduling.k8s.io "gpu" is invalid: value: Forbidden: may not be changed in an update.'
    )
    assert store.get(pcs, None, "gpu")["value"] == 100


def test_preemption_policy_is_immutable(store: Store, pcs: ResourceType) -> None:
    store.create(pcs, _pc("gpu", 100), manager="t")
    error = _refusal(
        lambda: store.patch(pcs, None, "gpu", {"preemptionPolicy": "Never"}, patch.MERGE, manager="t")
    )
    assert error.message.endswith('preemptionPolicy: Invalid value: "Never": field is immutable')


def test_updating_a_system_class_description_is_allowed(store: Store, pcs: ResourceType) -> None:
    """Update validation checks immutability only, not the create-time name rules."""
    updated = store.patch(
        pcs, None, "system-cluster-critical", {"description": "edited"}, patch.MERGE, manager="t"
    )
    assert updated["description"] == "edited" and updated["value"] == 2000000000


def test_generation_is_one_and_never_bumped(store: Store, pcs: ResourceType) -> None:
    created = store.create(pcs, _pc("gpu", 100, description="first"), manager="t")
    assert created["metadata"]["generation"] == 1
    changed = store.patch(
        pcs, None, "gpu", {"description": "second", "globalDefault": True}, patch.MERGE, manager="t"
    )
    assert changed["description"] == "second"
    assert int(changed["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert changed["metadata"]["generation"] == 1


def test_other_kinds_still_bump_generation(store: Store) -> None:
    """The PriorityClass exception is the only one: a DaemonSet spec change still bumps it."""
    ds = store.registry.get("apps", "v1", "daemonsets")
    assert ds is not None
    labels = {"app": "x"}
    created = store.create(
        ds,
        {
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "a:1"}]},
                },
            },
        },
        manager="t",
    )
    changed = store.patch(ds, "default", "x", {"spec": {"minReadySeconds": 5}}, patch.MERGE, manager="t")
    assert (created["metadata"]["generation"], changed["metadata"]["generation"]) == (1, 2)
