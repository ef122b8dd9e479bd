"""Which nodes a DaemonSet's pods belong on: the predicates of the real DaemonSet controller.

Mirrors kube-controller-manager's ``NodeShouldRunDaemonPod``: the template's nodeName, nodeSelector and
required node affinity must match the node; taints with effect NoSchedule or NoExecute must be tolerated by
the pod's tolerations plus the ones every DaemonSet pod gets automatically. An untolerated NoSchedule taint
keeps new pods off a node but lets a running one stay; an untolerated NoExecute taint evicts it. A cordoned
node (``spec.unschedulable``) still gets its DaemonSet pods, because of the automatic ``unschedulable``
toleration.

Pure functions; called by ``gpuplan.sim.controllers.daemonset``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

Obj = dict[str, Any]

# What the DaemonSet controller adds to every pod it creates (AddOrUpdateDaemonPodTolerations).
AUTO_TOLERATIONS: tuple[Obj, ...] = (
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


class Placement(NamedTuple):
    should_run: bool  # a pod should be created here
    should_continue: bool  # an existing pod may stay


def daemon_tolerations(pod_spec: Obj) -> list[Obj]:
    """The template's tolerations plus the automatic ones, without duplicates (same key and effect)."""
    tolerations = [dict(t) for t in pod_spec.get("tolerations") or []]
    extra = list(AUTO_TOLERATIONS) + ([HOST_NETWORK_TOLERATION] if pod_spec.get("hostNetwork") else [])
    for auto in extra:
        same = [t for t in tolerations if t.get("key") == auto["key"] and t.get("effect") == auto["effect"]]
        for t in same:
            tolerations.remove(t)
        tolerations.append(dict(auto))
    return tolerations


def placement(pod_spec: Obj, node: Obj) -> Placement:
    """Whether a pod with ``pod_spec`` (a DaemonSet template's spec) should run on ``node``."""
    wanted_node = pod_spec.get("nodeName")
    if wanted_node and wanted_node != node["metadata"]["name"]:
        return Placement(False, False)
    if not matches_node_selector(pod_spec.get("nodeSelector") or {}, node):
        return Placement(False, False)
    if not matches_required_affinity(pod_spec.get("affinity") or {}, node):
        return Placement(False, False)
    tolerations = daemon_tolerations(pod_spec)
    taints = node.get("spec", {}).get("taints") or []
    untolerated = [
        t
        for t in taints
        if t.get("effect") in ("NoSchedule", "NoExecute")
        and not any(tolerates(tol, t) for tol in tolerations)
    ]
    if not untolerated:
        return Placement(True, True)
    return Placement(False, not any(t.get("effect") == "NoExecute" for t in untolerated))


def matches_node_selector(selector: dict[str, str], node: Obj) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def matches_required_affinity(affinity: Obj, node: Obj) -> bool:
    required = (affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(_matches_term(term, node) for term in terms)


def _matches_term(term: Obj, node: Obj) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term matches no node (k8s NodeSelectorTerm semantics)
    labels = node.get("metadata", {}).get("labels") or {}
    field_values = {"metadata.name": node["metadata"]["name"]}
    return all(_matches_requirement(e, labels) for e in expressions) and all(
        _matches_requirement(f, field_values) for f in fields
    )


def _matches_requirement(req: Obj, values: dict[str, str]) -> bool:
    key, op, wanted = req.get("key", ""), req.get("operator", ""), req.get("values") or []
    present = key in values
    if op == "In":
        return present and values[key] in wanted
    if op == "NotIn":
        return not present or values[key] not in wanted
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, limit = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return have > limit if op == "Gt" else have < limit
    return False


def tolerates(toleration: Obj, taint: Obj) -> bool:
    """v1 Toleration.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return bool(key) and (toleration.get("value") or "") == (taint.get("value") or "")


def pin_to_node(pod_spec: Obj, node_name: str) -> Obj:
    """The affinity the real controller gives a DaemonSet pod (ReplaceDaemonSetPodNodeNameNodeAffinity):
    the required node selector becomes a single ``matchFields metadata.name In [node]`` term."""
    affinity = dict(pod_spec.get("affinity") or {})
    node_affinity = dict(affinity.get("nodeAffinity") or {})
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }
    affinity["nodeAffinity"] = node_affinity
    return affinity
