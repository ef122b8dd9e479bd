"""The nodes × components matrix of the drift report: each component's status on each node (pure).

Called by :mod:`gpuplan.planner.drift`. For every node and every component (driver, toolkit, device plugin,
GFD, DCGM exporter, validator) it answers a :class:`Cell`: ``ok``, ``missing`` (the component should run there
and does not), ``unhealthy`` (it runs but is not Ready, crash-loops, or its effect on the node is wrong) or
``n/a`` (not targeted there, owner none, or not checkable from here), with a short reason.

Nothing is judged twice in two ways: the pod verdicts are :mod:`gpuplan.planner.health`'s (failing waiting
reasons, Ready), and the node effects are the apply gates of each module (:func:`gpuplan.modules.catalog.
health_checks` judged by :data:`gpuplan.planner.health_nodes.JUDGES`: allocatable ``nvidia.com/gpu``, GFD's
labels, a DCGM sample per GPU, the driver version, the runtime handler, the validator Ready). Pods arrive
compacted (:func:`compact_pod`), already grouped by node, so a 5000-node fleet is judged in one pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from gpuplan.modules.base import HealthCheck
from gpuplan.modules.common import COMPONENT_LABEL, STACK_LABEL
from gpuplan.planner import health, health_nodes
from gpuplan.planner.health import Obj, Observation, Scrape
from gpuplan.providers import foreign

CellStatus = Literal["ok", "missing", "unhealthy", "n/a"]
COMPONENTS = ("driver", "toolkit", "devicePlugin", "gfd", "dcgmExporter", "validator")
# Gates whose evidence is the stack's own pods or scrapes: an external owner's cannot be judged from them.
POD_EVIDENCE_GATES = frozenset({"validator-ready", "dcgm-metrics"})
_KEPT_LABELS = (COMPONENT_LABEL, STACK_LABEL, "pod-template-generation", "app")


@dataclass(frozen=True)
class Cell:
    status: CellStatus
    reason: str


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


def compact_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a pod the matrix reads, as the same nested shape (so health's helpers read it): a pods
    list is reduced page by page with this, so a fleet's pods are never held whole."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    labels = metadata.get("labels") or {}
    return {
        "metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace"),
                     "labels": {key: labels[key] for key in _KEPT_LABELS if key in labels},
                     "ownerReferences": [{"uid": ref.get("uid"), "kind": ref.get("kind")}
                                         for ref in metadata.get("ownerReferences") or ()],
                     **({"deletionTimestamp": metadata["deletionTimestamp"]}
                        if metadata.get("deletionTimestamp") else {})},
        "spec": {"nodeName": spec.get("nodeName"),
                 "containers": [{key: c[key] for key in ("name", "image", "command", "args") if key in c}
                                for c in spec.get("containers") or ()]},
        "status": {"phase": status.get("phase"),
                   "conditions": [{key: c.get(key) for key in ("type", "status", "reason", "message",
                                                               "lastTransitionTime")}
                                  for c in status.get("conditions") or ()],
                   "initContainerStatuses": [_compact_container(c) for c in status.get("initContainerStatuses") or ()],
                   "containerStatuses": [_compact_container(c) for c in status.get("containerStatuses") or ()]},
    }


def _compact_container(status: Mapping[str, Any]) -> dict[str, Any]:
    state = status.get("state") or {}
    kept = {key: state[key] for key in ("waiting", "terminated") if key in state}
    if "running" in state:
        kept["running"] = {}
    return {"name": status.get("name"), "ready": status.get("ready"), "restartCount": status.get("restartCount", 0),
            "image": status.get("image"), "state": kept}


def pods_by_node(pods: Sequence[Obj]) -> dict[tuple[str, str], list[Obj]]:
    """(component, node) -> the stack's pods of that component there."""
    grouped: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        component = (pod.get("metadata") or {}).get("labels", {}).get(COMPONENT_LABEL)
        node = health.node_of(pod)
        if component and node:
            grouped.setdefault((str(component), node), []).append(pod)
    return grouped


def cell(view: ComponentView, node: Obj, pods: Sequence[Obj], scrape: Scrape | None, *, scraping: str | None,
         now: float) -> Cell:
    """The status of ``view``'s component on ``node``. ``scraping``: why the node was not scraped (None: it was
    scraped, or there was nothing to scrape)."""
    name = str((node.get("metadata") or {}).get("name"))
    if view.owner == "none":
        return Cell("n/a", "owner none")
    if name not in view.targeted:
        return Cell("n/a", "not targeted")
    if view.owner == "gpuplan":
        found = _pod_cell(view, name, pods, now)
        if found is not None:
            return found
    observation = Observation(daemonset=view.daemonset if view.daemonset_live else None, pods=tuple(pods),
                              nodes=(node,), metrics={name: scrape} if scrape is not None else {}, now=now)
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
            return Cell(status, problem.removeprefix(f"{name}: "))
    if notes and view.owner != "gpuplan" and len(notes) == sum(1 for c in view.checks if c.kind != "rollout"):
        return Cell("n/a", "; ".join(notes))
    return Cell("ok", "; ".join(["healthy", *notes]) if notes else _ok_reason(view))


def _pod_cell(view: ComponentView, node: str, pods: Sequence[Obj], now: float) -> Cell | None:
    """Whether the component's pod runs on the node and is Ready; None when it is (the effects come next)."""
    if view.daemonset is None or not view.daemonset_live:
        return Cell("missing", f"its DaemonSet {_ds_name(view.daemonset)} does not exist")
    current = health.current_pods(view.daemonset, pods)
    if not current:
        return Cell("missing", f"no {view.name} pod runs there")
    failure = health.pod_failure(current, now, health.UNSCHEDULABLE_GRACE_SECONDS)
    if failure is not None:
        return Cell("unhealthy", failure.message)
    not_ready = [pod for pod in current if not health.pod_ready(pod)]
    if not_ready:
        pod = not_ready[0]
        condition = health.condition_of(pod, "Ready") or {}
        why = " ".join(str(condition.get("message") or condition.get("reason") or "").split())
        return Cell("unhealthy", f"pod {health.pod_name(pod)} is not Ready" + (f" ({why})" if why else ""))
    return None


def _is_absence(kind: str, problem: str) -> bool:
    return kind in ("validator-ready", "dcgm-metrics") and "no " in problem and "runs there" in problem


def _ok_reason(view: ComponentView) -> str:
    return {"driver": "driver version as expected", "toolkit": "nvidia runtime handler present",
            "devicePlugin": "pod Ready, allocatable nvidia.com/gpu right", "gfd": "GFD labels present and consistent",
            "dcgmExporter": "a metrics sample per GPU", "validator": "validator Ready"}.get(view.name, "healthy")


def _ds_name(daemonset: Obj | None) -> str:
    metadata = (daemonset or {}).get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}" if metadata else "(none rendered)"


def main_image(pod: Obj, component: str) -> str | None:
    """The image of the pod's container that is ``component`` (by the same rule foreign objects are read by)."""
    for container in (pod.get("spec") or {}).get("containers") or ():
        if foreign.container_component(container) == component:
            return str(container.get("image"))
    containers = (pod.get("spec") or {}).get("containers") or ()
    return str(containers[0].get("image")) if containers else None
