"""The stack's pods folded, page by page, to what a cell of the drift matrix needs (memory bounded on fleets).

Called by the ``drift report`` command (:func:`pod_facts` is the reducer it hands
:meth:`gpuplan.providers.kubernetes.KubernetesProvider.list_reduced`, so each pod is reduced as its list page
arrives) and by :mod:`gpuplan.planner.drift.nodes` / :mod:`gpuplan.planner.drift.report` (which judge cells
from :class:`PodFacts`). A 5000-node fleet has 20,000 stack pods; the full objects (managedFields, volumes,
env, every condition) are never held together, and what is held per pod is one small slotted record whose
repeated strings (namespace, image, owner uid, generation) are interned, so the report's memory grows by far
less than the pods do.

The verdicts that need the whole pod are taken while it is whole, with :mod:`gpuplan.planner.health.gates`'s
own functions (a failing container or an unschedulable pod: :func:`health.pod_failure`; Ready:
:func:`health.pod_ready`), so nothing is judged in a second way; :meth:`PodFacts.as_pod` gives back the
minimal pod shape the apply gates' judges read (owner, generation, node, Ready, init progress).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.modules.common import COMPONENT_LABEL, STACK_LABEL
from gpuplan.planner.health import gates as health
from gpuplan.planner.health.gates import GENERATION_LABEL, Obj
from gpuplan.providers import foreign
from gpuplan.providers.snapshot import ClusterSnapshot


@dataclass(frozen=True, slots=True)
class PodFacts:
    """What the matrix, the version findings and the scrape targets read of one stack pod."""

    component: str
    node: str
    name: str
    namespace: str
    owners: tuple[str, ...]
    """Owner uids (a DaemonSet's pods are current when it owns them)."""
    generation: str | None
    terminating: bool
    image: str | None
    """The image of the component's container."""
    ready: bool
    not_ready_why: str
    """The Ready condition's message, else its reason (shown when the pod is not Ready)."""
    failure: str | None
    """health.pod_failure's message: a container that cannot start, or unschedulable past the grace."""
    init: tuple[int, int] = (0, 0)
    """Init containers done, of all."""

    def as_pod(self) -> Obj:
        """The minimal v1 Pod shape :mod:`gpuplan.planner.health.gates`'s helpers and judges read."""
        done, total = self.init
        labels = {
            COMPONENT_LABEL: self.component,
            **({GENERATION_LABEL: self.generation} if self.generation else {}),
        }
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": labels,
            "ownerReferences": [{"uid": uid} for uid in self.owners],
        }
        if self.terminating:
            metadata["deletionTimestamp"] = "terminating"
        inits: list[Obj] = [
            {"state": {"terminated": {"exitCode": 0}} if index < done else {"running": {}}}
            for index in range(total)
        ]
        ready = {"type": "Ready", "status": "True" if self.ready else "False", "message": self.not_ready_why}
        return {
            "metadata": metadata,
            "spec": {"nodeName": self.node, "containers": [{"image": self.image}]},
            "status": {"conditions": [ready], "initContainerStatuses": inits},
        }


@dataclass(frozen=True)
class StackPods:
    """How the stack's pods are listed and told apart: a pod of the operator's shape carries no gpuplan label
    (``daemonsets.podTemplate``), so they are the pods the stack's DaemonSets select and own."""

    selector: str
    """The label selector of one list: ``app`` in the DaemonSets' selectors' values (every operand's
    selector has it), or the stack label while no DaemonSet of the stack exists."""
    components: Mapping[str, str]
    """The stack's DaemonSets' uids -> their component (a pod is theirs when one owns it)."""


def stack_pods(snapshot: ClusterSnapshot, stack: str) -> StackPods:
    """:class:`StackPods` of the stack's DaemonSets in ``snapshot``."""
    daemonsets = [
        obj
        for obj in snapshot.managed.values()
        if obj.key.kind == "DaemonSet" and obj.labels.get(STACK_LABEL) == stack
    ]
    apps = sorted({str(app) for ds in daemonsets if (app := _selector(ds.manifest).get("app"))})
    components = {str(ds.uid): str(ds.labels.get(COMPONENT_LABEL)) for ds in daemonsets if ds.uid}
    selector = f"app in ({','.join(apps)})" if apps else f"{STACK_LABEL}={stack}"
    return StackPods(selector, components)


def _selector(daemonset: Mapping[str, Any]) -> Mapping[str, Any]:
    match: Mapping[str, Any] = ((daemonset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return match


def _component_of(metadata: Mapping[str, Any], components: Mapping[str, str] | None) -> str | None:
    """The component of the stack's DaemonSet that owns the pod; without the DaemonSets (a pod judged on its
    own), the pod's gpuplan label."""
    if components is not None:
        owners = (str(ref.get("uid")) for ref in metadata.get("ownerReferences") or ())
        return next((components[uid] for uid in owners if uid in components), None)
    component = (metadata.get("labels") or {}).get(COMPONENT_LABEL)
    return str(component) if component else None


def pod_facts(
    pod: Mapping[str, Any], *, now: float, components: Mapping[str, str] | None = None
) -> PodFacts | None:
    """The facts of one stack pod, taken while it is whole; None for a pod without component or node (not yet
    scheduled pods of no component cannot fill a cell, nor pods no DaemonSet of ``components`` owns).
    ``now`` dates an unschedulable pod's grace."""
    metadata = pod.get("metadata") or {}
    component = _component_of(metadata, components)
    node = health.node_of(pod)
    if not component or not node:
        return None
    failed = health.pod_failure([pod], now, health.UNSCHEDULABLE_GRACE_SECONDS)
    condition = health.condition_of(pod, "Ready") or {}
    why = " ".join(str(condition.get("message") or condition.get("reason") or "").split())
    inits: Sequence[Mapping[str, Any]] = (pod.get("status") or {}).get("initContainerStatuses") or ()
    done = sum(1 for s in inits if ((s.get("state") or {}).get("terminated") or {}).get("exitCode") == 0)
    generation = (metadata.get("labels") or {}).get(GENERATION_LABEL)
    image = _main_image(pod, str(component))
    return PodFacts(
        component=_shared(str(component)),
        node=_shared(node),
        name=str(metadata.get("name")),
        namespace=_shared(str(metadata.get("namespace"))),
        owners=tuple(_shared(str(ref.get("uid"))) for ref in metadata.get("ownerReferences") or ()),
        generation=_shared(str(generation)) if generation is not None else None,
        terminating=bool(metadata.get("deletionTimestamp")),
        image=_shared(image) if image else None,
        ready=health.pod_ready(pod),
        not_ready_why=_shared(why),
        failure=failed.message if failed else None,
        init=(done, len(inits)),
    )


def cells_of(pods: Sequence[PodFacts | None]) -> dict[tuple[str, str], list[PodFacts]]:
    """(component, node) -> the stack's pods of that component there."""
    grouped: dict[tuple[str, str], list[PodFacts]] = {}
    for pod in pods:
        if pod is not None:
            grouped.setdefault((pod.component, pod.node), []).append(pod)
    return grouped


def current(daemonset: Obj, pods: Sequence[PodFacts]) -> list[PodFacts]:
    """The pods :func:`health.current_pods` counts for the DaemonSet (its own, not terminating); it judges pod
    by pod, so each is asked alone."""
    return [facts for facts in pods if health.current_pods(daemonset, [facts.as_pod()])]


def _main_image(pod: Mapping[str, Any], component: str) -> str | None:
    """The image of the pod's container that is ``component`` (by the rule foreign objects are read by)."""
    containers = (pod.get("spec") or {}).get("containers") or ()
    for container in containers:
        if foreign.container_component(container) == component:
            return str(container.get("image"))
    return str(containers[0].get("image")) if containers else None


def _shared(text: str) -> str:
    # Interned: 20,000 pods repeat a handful of namespaces, images, owner uids and generations.
    return sys.intern(text)
