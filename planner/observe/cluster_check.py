"""``gpuplan validate --cluster``: the compatibility rules against the cluster's nodes, from a read-only look.

One small refresh (no managed kinds but the DaemonSets, whose one list also finds gpuplan's driver: a node it
runs on has a containerised driver, not a host one), the nodes' facts with their GPUs from GFD's labels or
NFD's NodeFeature (:func:`gpuplan.planner.observe.refresh.node_facts`), and
:func:`gpuplan.planner.spec.compat.check_nodes` over them. Reads only: no state, no lock, no write; the
request count is the refresh's, flat in nodes.

:func:`nfd_findings` is what the NodeFeature read itself says (a 403 is a warning); the plan reports it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.modules.common import COMPONENT_LABEL, STACK_LABEL
from gpuplan.planner.facts import NodeFacts
from gpuplan.planner.observe import refresh
from gpuplan.planner.spec import compat
from gpuplan.planner.spec.model import Spec
from gpuplan.providers.snapshot import ClusterReader, ClusterSnapshot

DAEMONSET = ("apps/v1", "DaemonSet")


@dataclass(frozen=True)
class ClusterCheck:
    """The findings of the node rules, the facts they were judged on, and what the look cost."""

    findings: tuple[compat.Finding, ...]
    facts: tuple[NodeFacts, ...]
    requests: int
    nfd: str
    """NFD's NodeFeature API as found: ``read``, ``not-served`` or ``forbidden``."""


def check_cluster(reader: ClusterReader, spec: Spec) -> ClusterCheck:
    snapshot = reader.refresh(stack=spec.metadata.name, namespace=spec.spec.namespace, kinds=[DAEMONSET])
    facts = refresh.node_facts(snapshot, driver_daemonsets=_driver_daemonsets(snapshot, spec.metadata.name))
    findings = [*compat.check_nodes(spec, facts), *nfd_findings(snapshot)]
    return ClusterCheck(tuple(findings), facts, snapshot.requests, snapshot.node_features.status)


def _driver_daemonsets(snapshot: ClusterSnapshot, stack: str) -> list[dict[str, object]]:
    """The stack's driver DaemonSets: its own and each node pool's."""
    return [
        dict(obj.manifest)
        for obj in snapshot.managed.values()
        if obj.key.kind == "DaemonSet"
        and obj.labels.get(STACK_LABEL) == stack
        and obj.labels.get(COMPONENT_LABEL) == "driver"
    ]


def nfd_findings(snapshot: ClusterSnapshot) -> Sequence[compat.Finding]:
    """A warning when the credentials may not list NFD's NodeFeatures (their GPUs then go unidentified)."""
    features = snapshot.node_features
    if features.status != "forbidden":
        return []
    return [
        compat.Finding(
            "warning",
            None,
            None,
            f"NFD's NodeFeatures could not be read ({features.detail}): the GPUs of nodes GFD has not "
            "labelled are not identified",
            "allow list on nodefeatures.nfd.k8s-sigs.io to the credentials gpuplan uses",
        )
    ]
