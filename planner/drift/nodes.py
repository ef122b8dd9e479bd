"""The nodes × components matrix of the drift report: each component's status on each node (pure).

Called by :mod:`gpuplan.planner.drift.report`. Its columns are the catalog's components
(:data:`gpuplan.modules.base.COMPONENTS`, in order) less those of owner none of which nothing is there
(:func:`columns`): the mig-manager, off by default, gets a column once a spec owns it. For every node and
column it answers a :class:`Cell`: ``ok``, ``missing`` (the component should run there and does not),
``unhealthy`` (it runs but is not Ready, crash-loops, or its effect on the node is wrong) or ``n/a``
(not targeted there, owner none, or not checkable from here), with a short reason. The report turns a
Ready cell into ``drifted`` where its pod is not what gpuplan applied (an object changed by hand reaches it,
or the pod runs another image than the spec's), so the table says what the findings say.

Nothing is judged twice in two ways: the pod verdicts are :mod:`gpuplan.planner.health.gates`'s (failing
waiting reasons, Ready), and the node effects are the apply gates of each module
(:func:`gpuplan.modules.catalog. health_checks` judged by :data:`gpuplan.planner.health.nodes.JUDGES`:
allocatable ``nvidia.com/gpu``, GFD's labels, a DCGM sample per GPU, the driver version, the runtime handler,
the validator Ready, the node's MIG config applied). Pods arrive folded to
:class:`gpuplan.planner.drift.pods.PodFacts` while their list was paged, grouped by cell,
so a 5000-node fleet is judged in one pass without its pods held whole.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from gpuplan.modules.base import COMPONENTS, HealthCheck
from gpuplan.planner.drift import pods as drift_pods
from gpuplan.planner.drift.pods import PodFacts
from gpuplan.planner.health import nodes as health_nodes
from gpuplan.planner.health.gates import Obj, Observation, Scrape

CellStatus = Literal["ok", "drifted", "missing", "unhealthy", "n/a"]
RUNNING: frozenset[CellStatus] = frozenset({"ok", "drifted"})
"""Cells whose component runs and is healthy there (drifted: but not as gpuplan applied it)."""
# Gates whose evidence is the stack's own pods or scrapes: an external owner's cannot be judged from them.
POD_EVIDENCE_GATES = frozenset({"validator-ready", "dcgm-metrics"})


@dataclass(frozen=True)
class Cell:
    status: CellStatus
    reason: str
    check: str | None = None
    """The apply gate that failed here (``allocatable``, ``gfd-labels`` ...), which ``spec.ignore``'s
    ``checks`` name; None when the pod itself is missing or not Ready, or nothing failed."""


@dataclass(frozen=True)
class ComponentView:
    """What the matrix needs to know of one component, decided once for all nodes."""

    name: str
    owner: str
    daemonset: Obj | None
    """The live DaemonSet (gpuplan owner), else the desired one (when it was deleted), else None."""
    daemonset_live: bool
    checks: tuple[HealthCheck, ...]
    targeted: frozenset[str]
    """Nodes the component should run on (or, for an external owner, be verified on)."""


def columns(owners: Mapping[str, str], present: Collection[str]) -> tuple[str, ...]:
    """The matrix's components, in catalog order: each one the spec owns, or of which something is there
    (``present``: the components of the stack's objects, pods and foreign objects found)."""
    return tuple(name for name in COMPONENTS if owners.get(name, "none") != "none" or name in present)


def cell(
    view: ComponentView,
    node: Obj,
    pods: Sequence[PodFacts],
    scrape: Scrape | None,
    *,
    scraping: str | None,
    now: float,
) -> Cell:
    """The status of ``view``'s component on ``node``. ``scraping``: why the node was not scraped (None: it
    was
    scraped, or there was nothing to scrape)."""
    name = str((node.get("metadata") or {}).get("name"))
    if view.owner == "none":
        return Cell("n/a", "owner none")
    if name not in view.targeted:
        return Cell("n/a", "not targeted")
    if view.owner == "gpuplan":
        found = _pod_cell(view, pods)
        if found is not None:
            return found
    observation = Observation(
        daemonset=view.daemonset if view.daemonset_live else None,
        pods=tuple(pod.as_pod() for pod in pods),
        nodes=(node,),
        metrics={name: scrape} if scrape is not None else {},
        now=now,
    )
    notes = []
    for check in view.checks:
        if check.kind == "rollout":
            continue
        if check.kind in POD_EVIDENCE_GATES and view.owner != "gpuplan":
            notes.append(f"owner {view.owner}: {check.kind} not checked")
            continue
        if check.kind == "dcgm-metrics" and scrape is None:
            notes.append(f"metrics not scraped ({scraping})" if scraping else "metrics not scraped")
            continue
        problem = health_nodes.JUDGES[check.kind](check.params, node, observation)
        if problem:
            status: CellStatus = "missing" if _is_absence(check.kind, problem) else "unhealthy"
            return Cell(status, problem.removeprefix(f"{name}: "), check.kind)
    if notes and view.owner != "gpuplan" and len(notes) == sum(1 for c in view.checks if c.kind != "rollout"):
        return Cell("n/a", "; ".join(notes))
    return Cell("ok", "; ".join(["healthy", *notes]) if notes else _ok_reason(view))


def _pod_cell(view: ComponentView, pods: Sequence[PodFacts]) -> Cell | None:
    """Whether the component's pod runs on the node and is Ready; None when it is (the effects come next)."""
    if view.daemonset is None or not view.daemonset_live:
        return Cell("missing", f"its DaemonSet {_ds_name(view.daemonset)} does not exist")
    running = sorted(drift_pods.current(view.daemonset, pods), key=lambda pod: pod.name)
    if not running:
        return Cell("missing", f"no {view.name} pod runs there")
    failure = next((pod.failure for pod in running if pod.failure), None)
    if failure is not None:
        return Cell("unhealthy", failure)
    not_ready = [pod for pod in running if not pod.ready]
    if not_ready:
        why = not_ready[0].not_ready_why
        return Cell("unhealthy", f"pod {not_ready[0].name} is not Ready" + (f" ({why})" if why else ""))
    return None


def _is_absence(kind: str, problem: str) -> bool:
    return kind in ("validator-ready", "dcgm-metrics") and "no " in problem and "runs there" in problem


def _ok_reason(view: ComponentView) -> str:
    return {
        "driver": "driver version as expected",
        "toolkit": "nvidia runtime handler present",
        "devicePlugin": "pod Ready, allocatable nvidia.com/gpu right",
        "gfd": "GFD labels present and consistent",
        "dcgmExporter": "a metrics sample per GPU",
        "validator": "validator Ready",
        "migManager": "MIG config applied",
    }.get(view.name, "healthy")


def _ds_name(daemonset: Obj | None) -> str:
    metadata = (daemonset or {}).get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}" if metadata else "(none rendered)"
