"""The plan of a live cluster, in one call: what ``gpuplan plan``, ``apply`` (when it plans) and ``rollback``
review.

:func:`build` refreshes (:func:`gpuplan.planner.observe.refresh.observe`), reads the driver versions GFD has
not labelled (:func:`gpuplan.planner.observe.driver_versions.gather`), makes the plan
(:func:`gpuplan.planner.plan.build.make_plan`, pure), refuses the images it pulls on nodes the cluster shows
cannot reach their registry (:func:`gpuplan.planner.observe.pull_failures.gather`, read only when the plan
pulls an image; :func:`gpuplan.planner.plan.pulls.with_refusals`) and names the GPU pods its driver changes
evict (:func:`gpuplan.planner.driver.evictions.with_gpu_pods`). :func:`build_rollback` does the same for the
return to an applied generation (:func:`gpuplan.planner.plan.rollback.rollback_plan`). Each fact is computed
once per plan: the desired objects are rendered by the refresh, for the nodes it listed, and handed to the
plan; the dependency graph is built once and handed down.

It lives here, above ``plan/``, because the eviction lists are the driver rollout's rule
(:func:`gpuplan.planner.driver.node.gpu_pods_on`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Protocol

from gpuplan.modules.driver import UpgradePolicy
from gpuplan.planner import graph
from gpuplan.planner.driver import evictions, step
from gpuplan.planner.observe import driver_versions, pull_failures, refresh
from gpuplan.planner.plan import pulls, rollback
from gpuplan.planner.plan.build import Plan, make_plan
from gpuplan.planner.plan.model import Change
from gpuplan.planner.spec.model import Spec
from gpuplan.providers.protocols import CountingPodLister, ProxyReader, ReducedLister
from gpuplan.providers.snapshot import ClusterReader, ClusterSnapshot
from gpuplan.state.model import Generation, StateFile


class PlanReader(ClusterReader, ReducedLister, Protocol):
    """What a plan reads the cluster through: the refresh's reads and the pods folded page by page
    (KubernetesProvider, KubernetesWriter)."""


class LiveReader(ProxyReader, CountingPodLister, Protocol):
    """A reader of its own for the pod proxy scrapes (one per thread) and the eviction lists."""


OpenReader = Callable[[], LiveReader]


def build(
    spec: Spec,
    state: StateFile | None,
    reader: PlanReader,
    *,
    open_reader: OpenReader,
    dependency_graph: graph.Graph | None = None,
    targets: Sequence[str] = (),
    refresh_only: bool = False,
    destroy: bool = False,
    spec_file: str = "gpustack.yaml",
) -> Plan:
    """The plan for ``spec`` against ``state`` and the cluster ``reader`` reads (see the module doc).
    ``dependency_graph``: ``graph.build(spec)`` when the caller built it already (to check ``targets`` before
    it reads the cluster). A destroy plan reads no driver versions."""
    observed = refresh.observe(reader, spec, state)
    reports = (
        None
        if destroy
        else driver_versions.gather(
            reader, observed.snapshot, spec, open_reader=open_reader, facts=observed.facts
        )
    )
    plan = make_plan(
        spec,
        state,
        observed.snapshot,
        targets=targets,
        refresh_only=refresh_only,
        destroy=destroy,
        spec_file=spec_file,
        desired=observed.desired,
        driver_reports=reports,
        dependency_graph=dependency_graph or graph.build(spec),
        node_facts=observed.facts,
    )
    if pulls.needs_reads(plan):
        plan = pulls.with_refusals(plan, pull_failures.gather(reader), pulls.configured_by(spec))
    return with_gpu_pods(plan, observed.snapshot, open_reader, spec)


def build_rollback(
    spec: Spec,
    state: StateFile,
    generation: Generation,
    reader: ClusterReader,
    *,
    open_reader: OpenReader,
    spec_file: str = "gpustack.yaml",
) -> Plan:
    """The plan that returns the cluster to ``generation`` (:func:`gpuplan.planner.plan.rollback.
    rollback_plan`), refreshed for the generation's owners, with the GPU pods its driver change evicts."""
    restored = rollback.rollback_spec(spec, generation)
    snapshot = refresh.refresh(reader, restored, state)
    plan = rollback.rollback_plan(spec, state, snapshot, generation, spec_file=spec_file)
    return with_gpu_pods(plan, snapshot, open_reader, restored)


def with_gpu_pods(
    plan: Plan, snapshot: ClusterSnapshot, open_reader: OpenReader, spec: Spec | None = None
) -> Plan:
    """``plan`` naming the GPU pods its disruptive driver changes evict and its MIG changes repartition, read
    through a reader opened only when there is something to read; with ``spec``, the pods its upgradePolicy
    refuses to delete, as the rollout will."""
    plan = evictions.with_mig_changes(plan)
    if not evictions.needs_reads(plan):
        return plan
    with contextlib.closing(open_reader()) as reader:
        policy_of = None if spec is None else _policy_of(spec)
        return evictions.with_gpu_pods(plan, reader, snapshot.nodes, policy_of=policy_of)


def _policy_of(spec: Spec) -> evictions.PolicyOf:
    def of(change: Change) -> tuple[UpgradePolicy, str]:
        return step.policy_of(spec, change.after or change.before or {})

    return of
