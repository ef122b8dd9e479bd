"""planner.observe.refresh: what is read beyond the label-selected lists, node facts from the snapshot, and
which
nodes a DaemonSet's pods land on."""

from __future__ import annotations

from typing import Any

import pytest
from lab_stack import lab_spec

from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan.build import make_plan
from gpuplan.planner.spec.model import parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.snapshot import ObjectKey
from gpuplan.state.model import StateFile

SPEC = parse_spec(lab_spec(driver="{owner: external}", gfd="{owner: none}"), filename="gpustack.yaml")
ACCOUNT = {
    "apiVersion": "v1",
    "kind": "ServiceAccount",
    "metadata": {"name": "old-plugin", "namespace": "kube-system"},
}
RUNTIME_CLASS = {
    "apiVersion": "node.k8s.io/v1",
    "kind": "RuntimeClass",
    "metadata": {"name": "nvidia"},
    "handler": "nvidia",
}


def test_kinds_cover_components_not_owned_now_and_recorded_kinds() -> None:
    kinds = refresh.manageable_kinds(SPEC, None)
    assert ("apps/v1", "DaemonSet") in kinds and ("rbac.authorization.k8s.io/v1", "Role") in kinds, (
        "gfd (owner none) still has its kinds listed, so its leftovers are found"
    )
    assert ("node.k8s.io/v1", "RuntimeClass") in kinds, "the toolkit renders one when gpuplan owns it"


def test_objects_no_list_returned_are_read_by_name_one_request_per_kind_and_namespace() -> None:
    cluster = FakeKubernetes([ACCOUNT, RUNTIME_CLASS])
    live = cluster.read(ObjectKey.of(ACCOUNT))
    assert live is not None
    state = StateFile.new().with_record(adopt.record_imported("devicePlugin", live, serial=1)).next_serial()
    snapshot = refresh.refresh(cluster, SPEC, state)
    assert ObjectKey.of(ACCOUNT) in snapshot.managed
    assert [obj.key for obj in snapshot.foreign] == [refresh.RUNTIME_CLASS]
    unlisted = [ObjectKey.of(ACCOUNT), refresh.RUNTIME_CLASS] + [
        ObjectKey.of(obj.manifest) for obj in SPEC.desired_objects()
    ]
    groups = {(key.api_version, key.kind, key.namespace) for key in unlisted}
    assert len(groups) < len(set(unlisted)), "the lab stack has several objects of one kind in one namespace"
    assert snapshot.requests == 1 + len(groups), (
        "the refresh, then one read per kind and namespace of the recorded, RuntimeClass and desired objects"
    )
    assert set(snapshot.resource_versions()) == {ObjectKey.of(ACCOUNT).ref, refresh.RUNTIME_CLASS.ref}


def test_a_hand_made_object_at_a_desired_name_is_read_and_is_a_foreign_object_of_its_component() -> None:
    """kubectl create sa nvidia-dcgm-exporter: not labelled, so no list returns it; refresh reads the desired
    names it did not see, and the plan shows a conflict resolved by import, not a create bound to fail."""
    squatter = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "nvidia-dcgm-exporter", "namespace": "gpu-operator"},
    }
    cluster = FakeKubernetes([squatter])
    snapshot = refresh.refresh(cluster, SPEC, None)
    [found] = [obj for obj in snapshot.foreign if obj.key == ObjectKey.of(squatter)]
    assert found.components == ("dcgmExporter",) and found.owner == "manual"
    plan = make_plan(SPEC, None, snapshot)
    [change] = [c for c in plan.changes if c.object == ObjectKey.of(squatter).ref]
    assert change.action == "create" and change.reason == "CREATE_OVER_FOREIGN_OBJECT"
    [conflict] = [c for c in plan.conflicts if c.object == ObjectKey.of(squatter).ref]
    assert conflict.address == "dcgmExporter/ServiceAccount/gpu-operator/nvidia-dcgm-exporter"
    assert conflict.resolutions[0].command.startswith(
        "gpuplan import -f gpustack.yaml dcgmExporter/ServiceAccount/gpu-operator/nvidia-dcgm-exporter "
        "ServiceAccount/gpu-operator/nvidia-dcgm-exporter"
    )
    assert not plan.applicable


def test_a_missing_recorded_object_stays_missing() -> None:
    cluster = FakeKubernetes([ACCOUNT])
    live = cluster.read(ObjectKey.of(ACCOUNT))
    assert live is not None
    state = StateFile.new().with_record(adopt.record_imported("devicePlugin", live, serial=1)).next_serial()
    cluster.remove(ObjectKey.of(ACCOUNT))
    snapshot = refresh.refresh(cluster, SPEC, state)
    assert snapshot.managed == {} and snapshot.foreign == ()


def ds(
    selector: dict[str, str], tolerations: list[dict[str, Any]], terms: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    pod: dict[str, Any] = {"nodeSelector": selector, "tolerations": tolerations}
    if terms is not None:
        pod["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
        }
    return {"kind": "DaemonSet", "spec": {"template": {"spec": pod}}}


NODES = [
    {"name": "gpu", "labels": {"gpu": "true"}, "taints": []},
    {
        "name": "tainted",
        "labels": {"gpu": "true"},
        "taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
    },
    {
        "name": "paused",
        "labels": {"gpu": "true", "nvidia.com/gpu.deploy.device-plugin": "false"},
        "taints": [],
    },
    {"name": "cpu", "labels": {}, "taints": []},
    {"name": "soft", "labels": {"gpu": "true"}, "taints": [{"key": "x", "effect": "PreferNoSchedule"}]},
]
NOT_PAUSED = [
    {
        "matchExpressions": [
            {"key": "nvidia.com/gpu.deploy.device-plugin", "operator": "NotIn", "values": ["false"]}
        ]
    }
]


@pytest.mark.parametrize(
    ("daemonset", "expected"),
    [
        (ds({"gpu": "true"}, []), ["gpu", "paused", "soft"]),
        (
            ds({"gpu": "true"}, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
            ["gpu", "tainted", "paused", "soft"],
        ),
        (ds({"gpu": "true"}, [{"operator": "Exists"}], NOT_PAUSED), ["gpu", "tainted", "soft"]),
        (ds({}, [{"operator": "Exists"}]), ["gpu", "tainted", "paused", "cpu", "soft"]),
        ({"kind": "ServiceAccount"}, []),
    ],
)
def test_scheduled_nodes(daemonset: dict[str, Any], expected: list[str]) -> None:
    assert refresh.scheduled_nodes(daemonset, NODES) == expected


def test_node_facts_from_the_snapshot_and_a_gpuplan_driver(gpu_node: Any) -> None:
    cluster = FakeKubernetes(nodes=[gpu_node("a", driver="580.105.08"), gpu_node("b", gpu=None)])
    snapshot = refresh.refresh(cluster, SPEC, None)
    facts = {fact.name: fact for fact in refresh.node_facts(snapshot)}
    assert (
        facts["a"].driver_version == "580.105.08"
        and facts["a"].has_nvidia_gpu
        and not facts["b"].has_nvidia_gpu
    )
    assert facts["a"].runtime_handlers == ("runc", "nvidia") and facts["a"].container_runtime == "containerd"
    driver = ds({"feature.node.kubernetes.io/pci-10de.present": "true"}, [])
    marked = {fact.name: fact for fact in refresh.node_facts(snapshot, driver_daemonsets=[driver])}
    assert marked["a"].containerized_driver and not marked["b"].containerized_driver


def test_each_node_pools_driver_daemonset_marks_its_own_nodes(gpu_node: Any) -> None:
    """A pool with a driver of its own runs its own DaemonSet: a node either of them runs on has a
    containerised driver, not a host driver that the plan would refuse to replace."""
    nodes = [
        gpu_node(name, driver="580.105.08", labels={"pool": name}) for name in ("volta", "hopper", "host")
    ]
    snapshot = refresh.refresh(FakeKubernetes(nodes=nodes), SPEC, None)
    drivers = [ds({"pool": "volta"}, []), ds({"pool": "hopper"}, [])]
    marked = {
        fact.name: fact.containerized_driver
        for fact in refresh.node_facts(snapshot, driver_daemonsets=drivers)
    }
    assert marked == {"volta": True, "hopper": True, "host": False}
