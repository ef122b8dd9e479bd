"""Which nodes a DaemonSet's pods run on: the DaemonSet controller's predicate, for plan and health gates
alike.

kube-controller-manager's ``NodeShouldRunDaemonPod`` places a DaemonSet pod on a node when the template's
``nodeName``, ``nodeSelector`` and required node affinity (``matchExpressions`` on labels, ``matchFields`` on
``metadata.name``) match it and every taint with effect NoSchedule or NoExecute is tolerated by the template's
tolerations plus those the controller adds to every DaemonSet pod (``AddOrUpdateDaemonPodTolerations``): the
node-condition taints with the effects listed in :data:`AUTOMATIC_TOLERATIONS`, and ``network-unavailable``
for host-network pods. Any other taint, ``node.kubernetes.io/out-of-service`` among them, keeps the pod away.

The plan (which nodes a change touches, :func:`gpuplan.planner.observe.refresh.scheduled_nodes`) and the
health gates (which nodes must show a component's effect, :func:`gpuplan.planner.health.nodes.targeted_nodes`)
both ask :func:`runs_on`, so the nodes a plan names are the nodes its gate waits on. Pure: v1 Node objects in.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

Obj = Mapping[str, Any]

AUTOMATIC_TOLERATIONS: tuple[Obj, ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION: Obj = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def pod_spec_of(daemonset: Obj) -> Obj:
    spec: Obj = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return spec


def runs_on(pod_spec: Obj, node: Obj) -> bool:
    """Whether the DaemonSet controller places a pod of ``pod_spec`` (a template's spec) on ``node``."""
    metadata = node.get("metadata") or {}
    taints = (node.get("spec") or {}).get("taints") or ()
    return places(pod_spec, str(metadata.get("name") or ""), metadata.get("labels") or {}, taints)


def places(pod_spec: Obj, name: str, labels: Mapping[str, str], taints: Sequence[Obj]) -> bool:
    """:func:`runs_on` for a node given by its name, labels and taints (a snapshot's reduced node)."""
    if pod_spec.get("nodeName") and pod_spec.get("nodeName") != name:
        return False
    if any(labels.get(key) != value for key, value in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    if not _affinity_allows(pod_spec.get("affinity") or {}, labels, name):
        return False
    return _untolerated(pod_spec, taints) is None


def unplaced_because(
    pod_spec: Obj, node: Obj, *, passing: Collection[str] = ()
) -> tuple[str, Obj | None] | None:
    """Why the DaemonSet controller places no pod of ``pod_spec`` on ``node``: the first rule of
    :func:`places` that keeps it away, in words, and the taint when a taint does; None when it places one,
    or only taints whose key is in ``passing`` keep it away."""
    metadata = node.get("metadata") or {}
    name, labels = str(metadata.get("name") or ""), metadata.get("labels") or {}
    if pod_spec.get("nodeName") and pod_spec.get("nodeName") != name:
        return f"its template names node {pod_spec.get('nodeName')}", None
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            found = f"is {labels[key]}" if key in labels else "is missing"
            return f"its nodeSelector asks for label {key}={value}, which {found} there", None
    if not _affinity_allows(pod_spec.get("affinity") or {}, labels, name):
        return "its required node affinity does not match the node's labels", None
    taints = [t for t in (node.get("spec") or {}).get("taints") or () if t.get("key") not in passing]
    taint = _untolerated(pod_spec, taints)
    if taint is not None:
        return f"the node's taint {taint_text(taint)} is not tolerated", taint
    return None


def taint_text(taint: Obj) -> str:
    """A taint as ``kubectl taint`` writes it: ``key=value:Effect`` (``key:Effect`` without a value)."""
    value = taint.get("value")
    return f"{taint.get('key')}{f'={value}' if value else ''}:{taint.get('effect')}"


def _untolerated(pod_spec: Obj, taints: Sequence[Obj]) -> Obj | None:
    """The first NoSchedule or NoExecute taint that neither the template's tolerations nor those the
    controller adds tolerate (``predicates``, pkg/controller/daemon/daemon_controller.go)."""
    tolerations = [
        *(pod_spec.get("tolerations") or ()),
        *AUTOMATIC_TOLERATIONS,
        *((HOST_NETWORK_TOLERATION,) if pod_spec.get("hostNetwork") else ()),
    ]
    return next(
        (
            taint
            for taint in taints
            if taint.get("effect") in ("NoSchedule", "NoExecute")
            and not any(tolerates(toleration, taint) for toleration in tolerations)
        ),
        None,
    )


def nodes_of(daemonset: Obj, nodes: Iterable[Obj]) -> list[Obj]:
    """The nodes of ``nodes`` that ``daemonset``'s pods run on, in the order given."""
    pod_spec = pod_spec_of(daemonset)
    return [node for node in nodes if runs_on(pod_spec, node)]


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """v1 ``Toleration.ToleratesTaint``: an empty effect or key matches any; Exists ignores the value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    if (toleration.get("operator") or "Equal") == "Exists":
        return True
    return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def _affinity_allows(affinity: Obj, labels: Mapping[str, str], name: str) -> bool:
    required = (
        (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    ) or {}
    terms = required.get("nodeSelectorTerms") or ()
    if not terms:
        return True
    fields = {"metadata.name": name}
    return any(_term_matches(term, labels, fields) for term in terms)  # terms ORed, requirements ANDed


def _term_matches(term: Obj, labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
    expressions, matched_fields = term.get("matchExpressions") or (), term.get("matchFields") or ()
    if not expressions and not matched_fields:
        return False  # an empty term matches no node (NodeSelectorTerm semantics)
    return all(_holds(requirement, labels) for requirement in expressions) and all(
        _holds(requirement, fields) for requirement in matched_fields
    )


def _holds(requirement: Obj, values: Mapping[str, str]) -> bool:
    key, operator = str(requirement.get("key") or ""), requirement.get("operator")
    wanted = [str(value) for value in requirement.get("values") or ()]
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            number, bound = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def placement_only(before: Obj, after: Obj) -> bool:
    """Whether two DaemonSets' pod templates differ only in their required node affinity: the pods they
    make on a node both place are the same. The DaemonSet controller replaces a template's required node
    affinity with a term pinning the pod to its node (ReplaceDaemonSetPodNodeNameNodeAffinity,
    pkg/controller/daemon/util/daemonset_util.go), so that part of a template never reaches a pod; such a
    change only moves pods off the nodes it no longer places and onto the nodes it newly does."""
    templates = [copy.deepcopy((obj.get("spec") or {}).get("template") or {}) for obj in (before, after)]
    for template in templates:
        spec = template.get("spec") or {}
        node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
        node_affinity.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
        if not node_affinity:
            (spec.get("affinity") or {}).pop("nodeAffinity", None)
        if not spec.get("affinity"):
            spec.pop("affinity", None)
    original = [(obj.get("spec") or {}).get("template") for obj in (before, after)]
    return templates[0] == templates[1] and original[0] != original[1]


def placement_moves(before: Obj, after: Obj) -> bool:
    """Whether two DaemonSets differ in where their pods go (a node pool added or removed)."""
    old, new = pod_spec_of(before), pod_spec_of(after)
    return any(old.get(key) != new.get(key) for key in ("affinity", "nodeSelector"))
