"""Node pools by GPU model (design §8.3): a pool selecting ``nvidia.com/gpu.product`` matches its nodes before
GFD runs (the product of NFD's PCI id), once GFD has labelled them, and after sharing or the single MIG
strategy renamed the product; the plan finds pools that overlap only by the GPU identity; the apply's gates
judge each node by the pool the plan placed it in, and fail at once, naming the node and its labels, when
someone moves it to another pool during the apply."""

from __future__ import annotations

from typing import Any

import pytest

from gpuplan.modules.base import HealthCheck
from gpuplan.planner import facts, pools
from gpuplan.planner.facts import NodeFacts
from gpuplan.planner.health import gates
from gpuplan.planner.health.nodes import POOL_MOVED
from gpuplan.planner.spec import compat
from gpuplan.planner.spec import model as spec_model

A100 = "NVIDIA-A100-SXM4-80GB"
NFD_ONLY = {"feature.node.kubernetes.io/pci-10de.present": "true", "team": "ml"}
GFD = {
    **NFD_ONLY,
    "nvidia.com/gpu.product": A100,
    "nvidia.com/gpu.family": "ampere",
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
}
BY_MODEL = f"""  nodePools:
    - name: a100
      nodeSelector: {{nvidia.com/gpu.product: {A100}}}
      devicePlugin: {{config: {{timeSlicing: {{replicas: 4}}}}}}
    - name: ml
      nodeSelector: {{team: ml, nvidia.com/gpu.family: hopper}}
"""


def make_spec(body: str) -> spec_model.Spec:
    text = "apiVersion: gpuplan.io/v1alpha1\nkind: GPUStack\nmetadata: {name: t}\nspec:\n" + body
    return spec_model.parse_spec(text, filename="gpustack.yaml")


def node(labels: dict[str, str], pci: str | None = "0x20b2") -> NodeFacts:
    """An A100 node as the plan sees it: its labels, and the PCI id NFD listed (before GFD: its identity)."""
    base = NodeFacts.from_node({"metadata": {"name": "a100-1", "labels": labels}})
    return NodeFacts(**{**base.__dict__, "pci_device": pci})


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param(NFD_ONLY, id="before-gfd"),
        pytest.param(GFD, id="after-gfd"),
        pytest.param({**GFD, "nvidia.com/gpu.product": f"{A100}-SHARED"}, id="shared"),
        pytest.param({**GFD, "nvidia.com/gpu.product": f"{A100}-MIG-1g.10gb"}, id="mig-single"),
    ],
)
def test_a_pool_by_product_holds_its_node_whatever_gfd_says_of_it(labels: dict[str, str]) -> None:
    spec = make_spec(BY_MODEL)
    members = pools.membership(spec.pool_selectors(), [("a100-1", facts.pool_labels(node(labels)))])
    assert members.pool_of == {"a100-1": "a100"} and members.overlaps == ()


def test_without_gfd_or_a_known_pci_id_the_node_is_in_no_pool() -> None:
    spec = make_spec(BY_MODEL)
    for fact in (node(NFD_ONLY, pci=None), node(NFD_ONLY, pci="0xffff")):
        assert pools.membership(spec.pool_selectors(), [("a100-1", facts.pool_labels(fact))]).pool_of == {}


def test_identity_keys_come_from_the_identity_not_from_a_hand_label() -> None:
    """A hand-written product label on a node GFD has not labelled yet does not outweigh its PCI id."""
    labels = {**NFD_ONLY, "nvidia.com/gpu.family": "hopper"}
    assert facts.pool_labels(node(labels))["nvidia.com/gpu.family"] == "ampere"


def test_pools_that_overlap_only_by_gpu_identity_are_a_plan_error_before_gfd_runs() -> None:
    """By product and by family: the live labels (NFD's only) match neither pool, the identity both."""
    spec = make_spec(
        "  nodePools:\n"
        f"    - {{name: a100, nodeSelector: {{nvidia.com/gpu.product: {A100}}},"
        " mig: {config: all-1g.10gb}}\n"
        "    - {name: ampere, nodeSelector: {nvidia.com/gpu.family: ampere, team: ml},"
        " devicePlugin: {config: {timeSlicing: {replicas: 2}}}}\n"
    )
    assert pools.membership(spec.pool_selectors(), [("a100-1", NFD_ONLY)]).overlaps == ()
    [error] = compat.blocking(compat.check_nodes(spec, [node(NFD_ONLY)]))
    assert error.node == "a100-1"
    assert "node a100-1 is selected by node pools 'a100' and 'ampere'" in error.message


# -- the apply: the plan's placement, and a node moved during the apply ------------------------------------


def planned(spec: spec_model.Spec, *nodes: tuple[str, dict[str, str]]) -> pools.PlannedPools:
    """The pools as a plan made on ``nodes`` (name, labels; A100s, GFD not run yet) placed them."""
    identity = {name: facts.gpu_identity(node(labels)) for name, labels in nodes}
    selectors = tuple(spec.pool_selectors())
    labelled = [(name, pools.pool_labels(labels, identity[name])) for name, labels in nodes]
    return pools.PlannedPools(selectors, identity, pools.membership(selectors, labelled).pool_of)


def node_object(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": "32"}}}


def capacity_gate(pool: str | None) -> HealthCheck:
    """The device plugin's capacity gate of ``pool`` (None: the stack's, on the nodes of no sharing pool)."""
    params: dict[str, Any] = {"resource": "nvidia.com/gpu", "perGpu": 4}
    if pool is None:
        return HealthCheck("allocatable", {**params, "perGpu": 1, "excludeSelectors": [{"team": "ml"}]})
    return HealthCheck("allocatable", {**params, "pool": pool, "poolSelector": {"team": "ml"}})


def observe(check: HealthCheck, plan: pools.PlannedPools, *nodes: dict[str, Any]) -> gates.Observation:
    return gates.Observation(
        nodes=nodes,
        node_selector={},
        pool_selector=check.params.get("poolSelector") or {},
        excluded=tuple(check.params.get("excludeSelectors") or ()),
        pools=plan,
    )


def test_the_gates_judge_a_renamed_node_in_its_planned_pool() -> None:
    spec = make_spec(BY_MODEL)
    plan = planned(spec, ("a100-1", NFD_ONLY))
    assert plan.pool_of == {"a100-1": "a100"}
    shared = {**GFD, "nvidia.com/gpu.product": f"{A100}-SHARED"}
    assert plan.moved("a100-1", shared) is None
    assert pools.pool_of_labels(plan.selectors, plan.labels("a100-1", shared)) == "a100"


def test_a_node_labelled_out_of_its_pool_during_the_apply_fails_the_pools_gate_at_once() -> None:
    spec = make_spec(
        "  nodePools:\n    - {name: ml, nodeSelector: {team: ml},"
        " devicePlugin: {config: {timeSlicing: {replicas: 4}}}}\n"
    )
    plan = planned(spec, ("a100-1", NFD_ONLY), ("a100-2", NFD_ONLY))
    assert plan.pool_of == {"a100-1": "ml", "a100-2": "ml"}
    relabelled = {key: value for key, value in GFD.items() if key != "team"}
    moved_node, kept = node_object("a100-1", relabelled), node_object("a100-2", GFD)
    for check in (capacity_gate("ml"), capacity_gate(None)):
        status = gates.evaluate(check, observe(check, plan, moved_node, kept))
        assert (status.state, status.reason, status.node) == ("failed", POOL_MOVED, "a100-1")
        assert status.message == (
            "node a100-1 moved from node pool ml to no node pool during the apply: its labels changed "
            "(team=(none)); run plan again to place it"
        )
    passed = gates.evaluate(capacity_gate("ml"), observe(capacity_gate("ml"), plan, kept))
    assert passed.state == "passed", passed


def test_a_node_the_plan_did_not_see_is_placed_by_its_live_identity() -> None:
    spec = make_spec(BY_MODEL)
    plan = planned(spec)
    shared = {**GFD, "nvidia.com/gpu.product": f"{A100}-SHARED"}
    assert plan.moved("joined", shared) is None
    assert pools.pool_of_labels(plan.selectors, plan.labels("joined", shared)) == "a100"
