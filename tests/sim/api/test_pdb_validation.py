"""policy/v1 PodDisruptionBudget writes as the real API server takes them: its validation (422 with the
real messages), its strategy (status emptied on create, generation bumped by a spec change only) and the
row `kubectl get pdb` prints."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import tables
from gpuplan.sim.api.registry import Registry, ResourceType
from gpuplan.sim.api.store import ApiError, Store

MERGE = "application/merge-patch+json"


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store(Registry.builtin())
    yield s
    s.close()


@pytest.fixture
def pdbs(store: Store) -> ResourceType:
    [rt] = store.registry.find("pdb")
    assert (rt.group, rt.version, rt.kind, rt.plural, rt.subresources) == (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        ("status",),
    )
    return rt


def _create(store: Store, rt: ResourceType, **spec: Any) -> dict[str, Any]:
    body = {"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec}}
    return store.create(rt, body, namespace="default", manager="test")


def _refusal(store: Store, rt: ResourceType, **spec: Any) -> tuple[str, list[dict[str, str]]]:
    with pytest.raises(ApiError) as refused:
        _create(store, rt, **spec)
    assert refused.value.code == 422
    return refused.value.message, (refused.value.details or {})["causes"]


def test_min_available_and_max_unavailable_exclude_each_other(store: Store, pdbs: ResourceType) -> None:
    message, causes = _refusal(store, pdbs, minAvailable=1, maxUnavailable="10%")
    assert message == (
        'PodDisruptionBudget.policy "web" is invalid: spec: Invalid value: {"MinAvailable":1,"Selector":'
        '{"matchLabels":{"app":"web"}},"MaxUnavailable":"10%","UnhealthyPodEvictionPolicy":null}: '
        "minAvailable and maxUnavailable cannot be both set"
    )
    assert [c["field"] for c in causes] == ["spec"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "spec.minAvailable: Invalid value: -1: must be greater than or equal to 0"),
        ("120%", 'spec.minAvailable: Invalid value: "120%": must not be greater than 100%'),
        (
            "half",
            'spec.minAvailable: Invalid value: "half": a valid percent string must be a numeric string '
            "followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
        ),
    ],
)
def test_a_bound_is_a_non_negative_int_or_a_percentage(
    store: Store, pdbs: ResourceType, value: Any, message: str
) -> None:
    assert (
        _refusal(store, pdbs, minAvailable=value)[0]
        == f'PodDisruptionBudget.policy "web" is invalid: {message}'
    )


def test_the_selector_and_the_eviction_policy_are_checked(store: Store, pdbs: ResourceType) -> None:
    _, causes = _refusal(
        store,
        pdbs,
        minAvailable=1,
        selector={"matchExpressions": [{"key": "app", "operator": "In"}]},
        unhealthyPodEvictionPolicy="Never",
    )
    assert causes == [
        {
            "reason": "FieldValueRequired",
            "field": "spec.selector.matchExpressions[0].values",
            "message": "Required value: must be specified when `operator` is 'In' or 'NotIn'",
        },
        {
            "reason": "FieldValueNotSupported",
            "field": "spec.unhealthyPodEvictionPolicy",
            "message": 'Unsupported value: "Never": supported values: "AlwaysAllow", "IfHealthyBudget"',
        },
    ]


def test_the_status_starts_empty_and_only_a_spec_change_is_a_new_generation(
    store: Store, pdbs: ResourceType
) -> None:
    body = {
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {}},
        "status": {"disruptionsAllowed": 5, "observedGeneration": 3},
    }
    created = store.create(pdbs, body, namespace="default", manager="test")
    assert created["metadata"]["generation"] == 1
    assert created["status"] == {
        "disruptionsAllowed": 0,
        "currentHealthy": 0,
        "desiredHealthy": 0,
        "expectedPods": 0,
    }
    status = {**created["status"], "disruptionsAllowed": 1}
    written = store.update(
        pdbs,
        {**created, "status": status},
        namespace="default",
        name="web",
        manager="c",
        subresource="status",
    )
    assert (written["metadata"]["generation"], written["status"]["disruptionsAllowed"]) == (1, 1)
    patched = store.patch(pdbs, "default", "web", {"spec": {"minAvailable": 2}}, MERGE, manager="test")
    assert (patched["metadata"]["generation"], patched["status"]["disruptionsAllowed"]) == (2, 1)
    with pytest.raises(ApiError) as refused:
        store.patch(
            pdbs,
            "default",
            "web",
            {"status": {"currentHealthy": -1}},
            MERGE,
            manager="c",
            subresource="status",
        )
    assert refused.value.message == (
        'PodDisruptionBudget.policy "web" is invalid: status.currentHealthy: Invalid value: -1: '
        "must be greater than or equal to 0"
    )


def test_kubectl_get_pdb_columns() -> None:
    now = datetime.datetime(2026, 1, 1, 0, 5, tzinfo=datetime.UTC)
    pdb = {
        "metadata": {"name": "web", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"maxUnavailable": "25%"},
        "status": {"disruptionsAllowed": 2},
    }
    table = tables.table(
        "policy", "poddisruptionbudgets", [pdb, {**pdb, "spec": {"minAvailable": 0}}], now=now
    )
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name",
        "Min Available",
        "Max Unavailable",
        "Allowed Disruptions",
        "Age",
    ]
    assert [row["cells"] for row in table["rows"]] == [
        ["web", "N/A", "25%", 2, "5m"],
        ["web", "0", "N/A", 2, "5m"],
    ]
