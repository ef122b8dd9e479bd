"""Admission in the store as a real API server runs it: the RuntimeClass plugin (unknown class refused with
the plugin's words, overhead and scheduling copied into the pod, conflicts refused), the stored
PriorityClasses (system classes present at start, served as scheduling.k8s.io/v1 with short name pc, user
classes and the one global default used by the Priority plugin), and refusals naming the generateName as
NewForbidden does."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuplan.sim.api import admission, registry, store
from gpuplan.sim.api.registry import ResourceType

REG = registry.Registry.builtin()


def kind(name: str) -> ResourceType:
    return next(rt for rt in registry.BUILTIN if rt.kind == name)


PODS, RUNTIME_CLASSES, PRIORITY_CLASSES = kind("Pod"), kind("RuntimeClass"), kind("PriorityClass")


@pytest.fixture
def s() -> Iterator[store.Store]:
    st = store.Store(registry.Registry.builtin())
    yield st
    st.close()


def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox:1"}], **spec}}


def nvidia_class(s: store.Store, **fields: Any) -> None:
    s.create(RUNTIME_CLASSES, {"metadata": {"name": "nvidia"}, "handler": "nvidia", **fields}, manager="test")


# ------------------------------------------------------------------------------------------ RuntimeClass


def test_a_pod_naming_a_missing_runtime_class_is_forbidden(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as refused:
        s.create(PODS, pod(runtimeClassName="nvidia"), namespace="default", manager="test")
    assert (refused.value.code, refused.value.reason, refused.value.message) == (
        403,
        "Forbidden",
        'pods "p" is forbidden: pod rejected: RuntimeClass "nvidia" not found',
    )
    assert s.list(PODS, namespace="default").items == []


def test_a_refused_generated_name_is_named_by_its_prefix(s: store.Store) -> None:
    body = pod(runtimeClassName="nvidia")
    body["metadata"] = {"generateName": "nvidia-device-plugin-daemonset-"}
    with pytest.raises(store.ApiError) as refused:
        s.create(PODS, body, namespace="default", manager="test")
    assert refused.value.message == (
        'pods "nvidia-device-plugin-daemonset-" is forbidden: pod rejected: RuntimeClass "nvidia" not found'
    )


def test_an_existing_runtime_class_admits_the_pod_with_its_overhead_and_scheduling(s: store.Store) -> None:
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    nvidia_class(
        s,
        overhead={"podFixed": {"cpu": "250m", "memory": "64Mi"}},
        scheduling={"nodeSelector": {"nvidia.com/gpu.present": "true"}, "tolerations": [gpu_taint]},
    )
    created = s.create(
        PODS, pod(runtimeClassName="nvidia", nodeSelector={"zone": "a"}), namespace="default", manager="test"
    )
    spec = created["spec"]
    assert spec["overhead"] == {"cpu": "250m", "memory": "64Mi"}
    assert spec["nodeSelector"] == {"zone": "a", "nvidia.com/gpu.present": "true"}
    assert gpu_taint in spec["tolerations"]
    # the DefaultTolerationSeconds pair is still there, each toleration once
    keys = [t["key"] for t in spec["tolerations"]]
    assert sorted(keys) == sorted(
        ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "nvidia.com/gpu"]
    )


def test_a_runtime_class_without_scheduling_or_overhead_changes_nothing_else(s: store.Store) -> None:
    nvidia_class(s)
    created = s.create(PODS, pod(runtimeClassName="nvidia"), namespace="default", manager="test")
    assert "overhead" not in created["spec"] and "nodeSelector" not in created["spec"]
    assert created["spec"]["runtimeClassName"] == "nvidia"


@pytest.mark.parametrize(
    ("pod_spec", "why"),
    [
        (
            {"nodeSelector": {"nvidia.com/gpu.present": "false"}},
            "conflict: runtimeClass.scheduling.nodeSelector[nvidia.com/gpu.present] = true; "
            "pod.spec.nodeSelector[nvidia.com/gpu.present] = false",
        ),
        (
            {"overhead": {"cpu": "1"}},
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
        ),
    ],
)
def test_a_pod_contradicting_its_runtime_class_is_forbidden(
    s: store.Store, pod_spec: dict[str, Any], why: str
) -> None:
    nvidia_class(
        s,
        overhead={"podFixed": {"cpu": "250m"}},
        scheduling={"nodeSelector": {"nvidia.com/gpu.present": "true"}},
    )
    with pytest.raises(store.ApiError) as refused:
        s.create(PODS, pod(runtimeClassName="nvidia", **pod_spec), namespace="default", manager="test")
    assert refused.value.code == 403 and refused.value.message == f'pods "p" is forbidden: {why}'


def test_an_overhead_without_a_runtime_class_overhead_is_forbidden(s: store.Store) -> None:
    with pytest.raises(store.ApiError) as refused:
        s.create(PODS, pod(overhead={"cpu": "1"}), namespace="default", manager="test")
    assert refused.value.message.endswith(
        "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
    )


def test_an_update_does_not_look_the_runtime_class_up_again(s: store.Store) -> None:
    nvidia_class(s)
    s.create(PODS, pod(runtimeClassName="nvidia"), namespace="default", manager="test")
    s.delete(RUNTIME_CLASSES, None, "nvidia")
    updated = s.patch(
        PODS,
        "default",
        "p",
        {"metadata": {"labels": {"a": "b"}}},
        "application/merge-patch+json",
        manager="test",
    )
    assert updated["metadata"]["labels"] == {"a": "b"}


@pytest.mark.parametrize(
    ("first", "second", "merged"),
    [
        # equal tolerations: the first is kept
        (
            [{"key": "a", "operator": "Exists"}],
            [{"key": "a", "operator": "Exists"}],
            [{"key": "a", "operator": "Exists"}],
        ),
        # an Exists toleration of a key covers an Equal one of the same key
        (
            [{"key": "a", "operator": "Equal", "value": "x"}],
            [{"key": "a", "operator": "Exists"}],
            [{"key": "a", "operator": "Exists"}],
        ),
        # an empty key with Exists tolerates everything
        (
            [{"key": "a", "operator": "Exists", "effect": "NoSchedule"}],
            [{"operator": "Exists"}],
            [{"operator": "Exists"}],
        ),
        # a bounded NoExecute toleration does not cover a longer one
        (
            [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}],
            [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            [{"key": "a", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 600}],
        ),
        # different keys are both kept, in order
        (
            [{"key": "a", "operator": "Exists"}],
            [{"key": "b", "operator": "Exists"}],
            [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
        ),
    ],
)
def test_tolerations_merge_as_the_plugin_merges_them(
    first: list[dict[str, Any]], second: list[dict[str, Any]], merged: list[dict[str, Any]]
) -> None:
    assert admission.merge_tolerations(first, second) == merged


# ------------------------------------------------------------------------------------------ PriorityClass


def test_priority_classes_are_served_with_the_system_classes_present_at_start(s: store.Store) -> None:
    rt = REG.get("scheduling.k8s.io", "v1", "priorityclasses")
    assert rt is not None and not rt.namespaced and rt.short_names == ("pc",)
    assert REG.find("pc") == [rt]
    found = {c["metadata"]["name"]: c for c in s.list(PRIORITY_CLASSES).items}
    assert {name: c["value"] for name, c in found.items()} == {
        "system-node-critical": 2000001000,
        "system-cluster-critical": 2000000000,
    }
    assert all(c["preemptionPolicy"] == "PreemptLowerPriority" and c["description"] for c in found.values())
    assert "scheduling.k8s.io" in dict(REG.groups())


def test_a_stored_priority_class_sets_the_pod_priority(s: store.Store) -> None:
    s.create(PRIORITY_CLASSES, {"metadata": {"name": "gpu-critical"}, "value": 1000}, manager="test")
    created = s.create(PODS, pod(priorityClassName="gpu-critical"), namespace="default", manager="test")
    assert (created["spec"]["priority"], created["spec"]["preemptionPolicy"]) == (
        1000,
        "PreemptLowerPriority",
    )
    s.delete(PRIORITY_CLASSES, None, "gpu-critical")
    with pytest.raises(store.ApiError) as refused:
        s.create(PODS, pod("q", priorityClassName="gpu-critical"), namespace="default", manager="test")
    assert refused.value.message == 'pods "q" is forbidden: no PriorityClass with name gpu-critical was found'


def test_the_stored_system_class_is_what_admission_uses(s: store.Store) -> None:
    created = s.create(
        PODS, pod(priorityClassName="system-node-critical"), namespace="default", manager="test"
    )
    assert created["spec"]["priority"] == 2000001000


def test_one_global_default_priority_class_applies_and_a_second_is_forbidden(s: store.Store) -> None:
    s.create(
        PRIORITY_CLASSES,
        {"metadata": {"name": "low"}, "value": 10, "globalDefault": True, "preemptionPolicy": "Never"},
        manager="test",
    )
    created = s.create(PODS, pod(), namespace="default", manager="test")
    assert (
        created["spec"]["priorityClassName"],
        created["spec"]["priority"],
        created["spec"]["preemptionPolicy"],
    ) == ("low", 10, "Never")
    with pytest.raises(store.ApiError) as refused:
        s.create(
            PRIORITY_CLASSES,
            {"metadata": {"name": "other"}, "value": 20, "globalDefault": True},
            manager="test",
        )
    assert refused.value.code == 403 and refused.value.message == (
        'priorityclasses.scheduling.k8s.io "other" is forbidden: PriorityClass low is already marked as '
        "default. Only one default can exist"
    )
