"""The GPU pods a driver change evicts, read at plan time (planner/driver/evictions.py): the rollout's
selection, its node order, the cap on nodes read, the requests counted, and what saved plans carry."""

from __future__ import annotations

import json
from typing import Any

from gpuplan.errors import AccessDeniedError
from gpuplan.planner.driver import evictions
from gpuplan.planner.driver import rollout as driver_rollout
from gpuplan.planner.driver import step as driver_rollout_apply
from gpuplan.planner.driver.rollout import SKIP_LABEL
from gpuplan.planner.observe import adopt, refresh
from gpuplan.planner.plan import planfile
from gpuplan.planner.plan.build import Change, Plan, make_plan
from gpuplan.planner.spec.model import Spec, parse_spec
from gpuplan.providers.fake import FakeKubernetes
from gpuplan.providers.kubernetes_write import Listing
from gpuplan.providers.snapshot import STACK_LABEL, ClusterSnapshot, LiveObject
from gpuplan.state.model import StateFile
from gpuplan.views import plan_human

DRIVER = "driver/DaemonSet/gpu-operator/nvidia-driver-daemonset"


def spec_of(version: str) -> Spec:
    return parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
        f'  driver: {{version: "{version}"}}\n  toolkit: {{owner: external}}\n',
        filename="gpustack.yaml",
    )


def gpu_pod(
    name: str,
    node: str,
    *,
    namespace: str = "default",
    resource: str = "nvidia.com/gpu",
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    init: bool = False,
) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox", "resources": {"limits": {resource: "1"}}}
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "side", "image": "busybox"}]}
    spec.setdefault("initContainers" if init else "containers", []).append(container)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": spec,
        "status": {"phase": phase},
    }


class FakePodReader:
    """Pods by node, answering ``spec.nodeName=`` field selectors as the API server does, one request each."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.request_count = 0
        self.selectors: list[str | None] = []

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        self.request_count += 1
        self.selectors.append(field_selector)
        node = (field_selector or "").removeprefix("spec.nodeName=") or None
        items = [
            LiveObject.from_manifest(p) for p in self.pods if node is None or p["spec"]["nodeName"] == node
        ]
        return Listing(tuple(items), "1")


def cluster_with(nodes: list[dict[str, Any]]) -> tuple[FakeKubernetes, StateFile]:
    """The driver at the old version applied and recorded on ``nodes``."""
    cluster = FakeKubernetes(nodes=nodes)
    old = spec_of("580.105.08")
    records = [
        adopt.record_applied(obj, cluster.put(obj.manifest), serial=1) for obj in old.desired_objects()
    ]
    return cluster, StateFile.new().with_records(records).next_serial()


def planned(cluster: FakeKubernetes, state: StateFile, **options: Any) -> tuple[Plan, ClusterSnapshot]:
    spec = spec_of("595.91.07")
    snapshot = refresh.refresh(cluster, spec, state)
    return make_plan(spec, state, snapshot, created_at="2026-11-29T12:00:00Z", **options), snapshot


def driver_change(plan: Plan) -> Change:
    return next(change for change in plan.changes if change.address == DRIVER)


def nodes(
    gpu_node: Any, count: int, *, cordoned: tuple[str, ...] = (), skipped: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    made = [gpu_node(f"gpu-{i:02d}", gfd=False) for i in range(count)]
    for node in made:
        name = node["metadata"]["name"]
        if name in cordoned:
            node["spec"] = {"unschedulable": True}
        if name in skipped:
            node["metadata"]["labels"][SKIP_LABEL] = "true"
    return made


def test_a_driver_update_names_the_gpu_pods_the_rollout_evicts_per_node(gpu_node: Any) -> None:
    cluster, state = cluster_with(nodes(gpu_node, 3))
    plan, snapshot = planned(cluster, state)
    assert driver_change(plan).gpu_pods is None, "make_plan stays pure: it reads no pods"
    reader = FakePodReader(
        [
            gpu_pod("train", "gpu-00"),
            gpu_pod("web", "gpu-00", resource="cpu"),
            gpu_pod("done", "gpu-01", phase="Succeeded"),
            gpu_pod("prep", "gpu-01", init=True, namespace="ml"),
            gpu_pod(
                "nvidia-dcgm-exporter-x", "gpu-01", namespace="gpu-operator", labels={STACK_LABEL: "lab"}
            ),
            gpu_pod("slice", "gpu-02", resource="nvidia.com/mig-1g.10gb"),
        ]
    )
    result = evictions.with_gpu_pods(plan, reader, snapshot.nodes)
    change = driver_change(result)
    assert change.gpu_pods == {
        "gpu-00": ("default/train",),
        "gpu-01": ("ml/prep",),
        "gpu-02": ("default/slice",),
    }
    assert change.gpu_pods_note == ""
    assert reader.selectors == ["spec.nodeName=gpu-00", "spec.nodeName=gpu-01", "spec.nodeName=gpu-02"]
    assert result.api_requests == plan.api_requests + 3
    assert "node by node: all GPU pods on 3 nodes are evicted first" in change.disruption
    others = [c for c in result.changes if c.address != DRIVER]
    assert others and all(c.gpu_pods is None for c in others)


def test_the_reads_stop_at_a_fixed_number_of_nodes_whatever_the_fleet(gpu_node: Any) -> None:
    costs = []
    for size in (evictions.NODES_READ + 4, evictions.NODES_READ * 5):
        cluster, state = cluster_with(nodes(gpu_node, size))
        plan, snapshot = planned(cluster, state)
        reader = FakePodReader([gpu_pod(f"train-{i}", f"gpu-{i:02d}") for i in range(size)])
        change = driver_change(evictions.with_gpu_pods(plan, reader, snapshot.nodes))
        assert change.gpu_pods is not None
        assert list(change.gpu_pods) == sorted(change.nodes)[: evictions.NODES_READ]
        assert change.gpu_pods_note.startswith(f"and {size - evictions.NODES_READ} more nodes: not read")
        costs.append(reader.request_count)
    assert costs == [evictions.NODES_READ, evictions.NODES_READ]


class ForbiddenPodReader(FakePodReader):
    """A reader whose RBAC may not list pods: the API server answers 403."""

    def list_pods(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        self.request_count += 1
        raise AccessDeniedError('pods is forbidden: User "viewer" cannot list resource "pods"')


def test_pods_that_may_not_be_read_leave_a_note_and_the_plan_stands(gpu_node: Any) -> None:
    cluster, state = cluster_with(nodes(gpu_node, 2))
    plan, snapshot = planned(cluster, state)
    result = evictions.with_gpu_pods(plan, ForbiddenPodReader([]), snapshot.nodes)
    change = driver_change(result)
    assert change.gpu_pods is None and change.disruptive
    assert change.gpu_pods_note.startswith("the GPU pods could not be read (pods is forbidden")
    assert result.api_requests == plan.api_requests + 1


def test_the_nodes_read_first_are_the_rollouts_first_and_skipped_nodes_are_left_out(gpu_node: Any) -> None:
    fleet = nodes(gpu_node, 4, cordoned=("gpu-03",), skipped=("gpu-01",))
    cluster, state = cluster_with(fleet)
    plan, snapshot = planned(cluster, state)
    reader = FakePodReader([gpu_pod("a", "gpu-01"), gpu_pod("b", "gpu-03")])
    change = driver_change(evictions.with_gpu_pods(plan, reader, snapshot.nodes, limit=2))
    assert change.gpu_pods == {"gpu-03": ("default/b",), "gpu-00": ()}  # the cordoned node goes first
    assert "and 1 more node: not read" in change.gpu_pods_note
    assert (
        f"1 node labelled {SKIP_LABEL}=true (gpu-01): the rollout leaves them alone" in change.gpu_pods_note
    )
    assert reader.request_count == 2


def test_a_destroy_plan_lists_the_gpu_pods_left_without_the_driver(gpu_node: Any) -> None:
    cluster, state = cluster_with(nodes(gpu_node, 2))
    plan, snapshot = planned(cluster, state, destroy=True)
    change = driver_change(plan)
    assert change.action == "delete" and change.disruptive
    assert "at once, not node by node; no GPU pods are evicted first" in change.disruption
    reader = FakePodReader([gpu_pod("train", "gpu-01")])
    assert driver_change(evictions.with_gpu_pods(plan, reader, snapshot.nodes)).gpu_pods == {
        "gpu-00": (),
        "gpu-01": ("default/train",),
    }


def test_a_plan_without_a_disruptive_driver_change_reads_nothing(gpu_node: Any) -> None:
    cluster, state = cluster_with(nodes(gpu_node, 2))
    spec = spec_of("580.105.08")
    plan = make_plan(spec, state, refresh.refresh(cluster, spec, state))
    reader = FakePodReader([gpu_pod("train", "gpu-00")])
    assert not evictions.needs_reads(plan)
    assert evictions.with_gpu_pods(plan, reader, ()) == plan
    assert reader.request_count == 0


def test_saved_plans_carry_the_pods_and_older_saved_plans_still_load(gpu_node: Any) -> None:
    cluster, state = cluster_with(nodes(gpu_node, 2))
    plan, snapshot = planned(cluster, state)
    result = evictions.with_gpu_pods(plan, FakePodReader([gpu_pod("train", "gpu-00")]), snapshot.nodes)
    again = planfile.loads(planfile.dumps(result))
    assert driver_change(again).gpu_pods == {"gpu-00": ("default/train",), "gpu-01": ()}
    assert again.api_requests == result.api_requests
    older = result.document()
    for change in older["changes"]:
        del change["gpu_pods"], change["gpu_pods_note"]
    assert driver_change(planfile.loads(json.dumps(older))).gpu_pods is None


def test_the_plan_orders_nodes_as_the_rollout_does(gpu_node: Any) -> None:
    """rollout_order reads the refresh's node facts; the rollout (driver_rollout._ordered) the live Nodes."""
    fleet = nodes(gpu_node, 6, cordoned=("gpu-04",))
    fleet[2]["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]
    fleet[5]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    cluster, state = cluster_with(fleet)
    plan, snapshot = planned(cluster, state)
    live = {node["metadata"]["name"]: LiveObject.from_manifest(node) for node in fleet}
    ordered = evictions.rollout_order(driver_change(plan), snapshot.nodes)
    assert ordered == driver_rollout._ordered(sorted(live), live)
    assert ordered[:2] == ["gpu-02", "gpu-04"]  # not Ready, cordoned: the rollout takes them first


def adopting_the_driver(fleet: list[dict[str, Any]]) -> tuple[Plan, ClusterSnapshot]:
    """The old driver runs with the stack's label but its record is gone (an interrupted apply): the plan at
    the new version adopts it and sets its fields."""
    cluster, state = cluster_with(fleet)
    return planned(cluster, state.without(DRIVER))


def test_an_adopt_that_sets_the_drivers_fields_is_a_node_by_node_rollout(gpu_node: Any) -> None:
    fleet = nodes(gpu_node, 4, cordoned=("gpu-03",), skipped=("gpu-01",))
    plan, snapshot = adopting_the_driver(fleet)
    change = driver_change(plan)
    assert change.action == "adopt" and change.fields, "the version differs: the adopt sets fields"
    assert change.disruptive
    assert "node by node: all GPU pods on 4 nodes are evicted first" in change.disruption
    assert evictions.needs_reads(plan)
    assert evictions.rollout_order(change, snapshot.nodes) == ["gpu-03", "gpu-00", "gpu-02"]
    reader = FakePodReader([gpu_pod("a", "gpu-01"), gpu_pod("b", "gpu-03"), gpu_pod("c", "gpu-02")])
    result = evictions.with_gpu_pods(plan, reader, snapshot.nodes)
    read = driver_change(result)
    assert read.gpu_pods == {"gpu-03": ("default/b",), "gpu-00": (), "gpu-02": ("default/c",)}
    assert f"1 node labelled {SKIP_LABEL}=true (gpu-01)" in read.gpu_pods_note
    document = next(c for c in result.document()["changes"] if c["address"] == DRIVER)
    assert plan_human.gpu_pod_lines(document)[:2] == [
        "        evicts on gpu-03: default/b",
        "        evicts on gpu-02: default/c",
    ]


def test_apply_names_the_pods_an_adopt_of_the_driver_evicts_before_it_asks(gpu_node: Any) -> None:
    plan, _ = adopting_the_driver(nodes(gpu_node, 2))
    reader = FakePodReader([gpu_pod("train", "gpu-01")])
    assert driver_rollout_apply.pods_to_evict(reader, plan.changes) == {"gpu-01": ["default/train"]}


def test_an_adopt_of_the_driver_as_it_is_disrupts_nothing(gpu_node: Any) -> None:
    cluster, state = cluster_with(nodes(gpu_node, 2))
    spec = spec_of("580.105.08")
    plan = make_plan(spec, state.without(DRIVER), refresh.refresh(cluster, spec, state.without(DRIVER)))
    change = driver_change(plan)
    assert change.action == "adopt" and not change.fields
    assert not change.disruptive and change.disruption == ""
    assert not evictions.needs_reads(plan)


def test_a_pools_mig_config_marks_the_mig_manager_change_disruptive_for_its_nodes_only(gpu_node: Any) -> None:
    spec = parse_spec(
        "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: lab}\nspec:\n"
        "  mig: {strategy: mixed}\n  migManager: {owner: gpuplan}\n"
        "  nodePools:\n    - {name: training, nodeSelector: {pool: training}, mig: {config: all-1g.10gb}}\n",
        filename="gpustack.yaml",
    )
    train, plain = gpu_node("train", gpu="a100-80gb"), gpu_node("plain", gpu="a100-80gb")
    for node, extra in ((train, {"pool": "training"}), (plain, {})):
        node["metadata"]["labels"].update({"nvidia.com/mig.capable": "true", **extra})
    cluster = FakeKubernetes(nodes=[train, plain])
    plan = make_plan(spec, None, refresh.refresh(cluster, spec, None), created_at="2026-11-29T12:00:00Z")
    assert evictions.mig_reconfigured(plan) == {"all-1g.10gb": ["train"]}  # plain stays all-disabled
    marked = [c for c in evictions.with_mig_changes(plan).changes if c.disruptive]
    assert [c.address for c in marked] == ["migManager/DaemonSet/gpu-operator/nvidia-mig-manager"]
    assert marked[0].disruption is not None
    assert marked[0].disruption.startswith("the MIG config of 1 node (train) becomes all-1g.10gb: ")
