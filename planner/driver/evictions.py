"""The GPU pods a driver change disrupts, read when the plan is made and attached to its driver changes.

:func:`gpuplan.planner.plan.build.make_plan` stays pure, so :func:`gpuplan.planner.driver.live_plan.build`
calls :func:`with_gpu_pods` on the plan it made: for each disruptive driver DaemonSet change (an update or an
adopt that sets fields, which the rollout walks node by node, evicting each node's GPU pods first; a replace
or a delete, which removes every driver pod at once) it reads the pods of the change's nodes and keeps the
ones the rollout evicts, with the rollout's own selection (:func:`gpuplan.planner.driver.node.gpu_pods_on`).
They land in ``Change.gpu_pods`` (node -> pods), so ``plan --json``, saved plans and ``gpuplan show`` carry
them; the human view lists them under the change.

Scale (design §5: a plan's API requests must not grow with the nodes): at most :data:`NODES_READ` nodes are
read, one pod list per node with a ``spec.nodeName`` field selector, the first ones the rollout takes in its
order (:func:`rollout_order`). The other nodes are counted in ``Change.gpu_pods_note``; apply names their pods
before it starts (:func:`gpuplan.planner.driver.step.pods_to_evict`). The requests spent are added
to the plan's ``api_requests``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuplan.errors import AccessDeniedError, TransientProviderError
from gpuplan.modules.driver import UpgradePolicy
from gpuplan.modules.mig_manager import CONFIG_LABEL as MIG_CONFIG_LABEL
from gpuplan.planner.driver import node as steps
from gpuplan.planner.driver.rollout import SKIP_LABEL
from gpuplan.planner.health.gates import Obj, pod_name
from gpuplan.planner.plan.decide import rolls_node_by_node
from gpuplan.planner.plan.model import Change, Plan
from gpuplan.providers.protocols import CountingPodLister

PolicyOf = Callable[[Change], tuple[UpgradePolicy, str]]
"""A driver change's upgradePolicy and its path in the spec (``driver.step.policy_of``)."""

NODES_READ = 8
"""Nodes whose pods one plan reads, whatever the size of the fleet."""


def disrupts_gpu_pods(change: Change) -> bool:
    """Whether ``change`` restarts or removes the driver under running GPU pods (see
    :func:`gpuplan.planner.plan.decide.with_disruption`), or repartitions their GPUs
    (:func:`with_mig_changes`)."""
    return (
        bool(change.disruptive)
        and change.component in ("driver", "migManager")
        and change.kind == "DaemonSet"
    )


def mig_reconfigured(plan: Plan) -> dict[str, list[str]]:
    """MIG config -> the nodes the plan's node labels give it instead of another (a node without the label
    is taken as MIG-disabled): their mig-manager repartitions the GPUs under the pods that use them."""
    found: dict[str, list[str]] = {}
    for item in plan.node_labels:
        if item.label != MIG_CONFIG_LABEL or item.value is None:
            continue
        for node, before in sorted(item.before.items()):
            if (before or "all-disabled") != item.value:
                found.setdefault(item.value, []).append(node)
    return found


def mig_nodes(plan: Plan) -> list[str]:
    """The nodes whose GPUs the plan repartitions, by name."""
    return sorted({node for nodes in mig_reconfigured(plan).values() for node in nodes})


def with_mig_changes(plan: Plan) -> Plan:
    """``plan`` with its migManager DaemonSet change marked disruptive where its node labels repartition
    nodes (pure)."""
    reconfigured = mig_reconfigured(plan)
    if not reconfigured:
        return plan
    text = "; ".join(
        f"the MIG config of {_count(len(names), 'node')} ({_names(names)}) becomes {config}"
        for config, names in sorted(reconfigured.items())
    )
    text += (
        ": the mig-manager stops the device plugin, GFD and DCGM there and repartitions the GPUs under the "
        "GPU pods that use them"
    )
    changes = tuple(
        change.model_copy(update={"disruptive": True, "disruption": text})
        if _repartitions(change)
        else change
        for change in plan.changes
    )
    return plan.model_copy(update={"changes": changes})


def _repartitions(change: Change) -> bool:
    return (
        change.component == "migManager"
        and change.kind == "DaemonSet"
        and change.action not in ("delete", "no-op")
    )


def needs_reads(plan: Plan) -> bool:
    """Whether :func:`with_gpu_pods` has anything to read for ``plan`` (the plan opens a reader only
    then)."""
    return any(disrupts_gpu_pods(change) for change in plan.changes)


def rollout_order(change: Change, nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """The change's nodes in the order the driver rollout takes them (:func:`gpuplan.planner.driver.rollout.
    roll_driver`): by name, nodes already unavailable (cordoned or not Ready) first, nodes labelled
    ``nvidia.com/gpu-driver-upgrade.skip=true`` left out (the rollout does not touch them); that is an update,
    or an adopt that sets fields (:func:`gpuplan.planner.plan.decide.rolls_node_by_node`). A delete or a
    replace takes every node at once: by name, none skipped. ``nodes``: the refresh's node facts."""
    names = sorted(set(change.nodes))
    if not rolls_node_by_node(change):
        return names
    facts = {str(node.get("name")): node for node in nodes}
    kept = [name for name in names if (facts.get(name, {}).get("labels") or {}).get(SKIP_LABEL) != "true"]
    return sorted(kept, key=lambda name: 0 if _unavailable(facts.get(name, {})) else 1)


def with_gpu_pods(
    plan: Plan,
    reader: CountingPodLister,
    nodes: Sequence[Mapping[str, Any]],
    *,
    limit: int = NODES_READ,
    policy_of: PolicyOf | None = None,
) -> Plan:
    """``plan`` with ``gpu_pods`` (and ``gpu_pods_note``) on each disruptive driver change and the reads'
    requests in ``api_requests``. ``nodes``: the refresh's node facts (``ClusterSnapshot.nodes``).
    ``policy_of``: the upgradePolicy a driver change rolls by and its spec path; with it, the pods its
    podDeletion rules refuse are named in ``gpu_pods_blocked`` (apply stops at them)."""
    if not needs_reads(plan):
        return plan
    orders = {
        change.address: mig_nodes(plan) if change.component == "migManager" else rollout_order(change, nodes)
        for change in plan.changes
        if disrupts_gpu_pods(change)
    }
    wanted = list(dict.fromkeys(name for order in orders.values() for name in order))[:limit]
    before = reader.request_count
    try:
        pods = _read_pods(reader, wanted)
    except (AccessDeniedError, TransientProviderError) as exc:
        # the pods are shown for review, not acted on: a reader that may not list pods still gets its plan
        unread = f"the GPU pods could not be read ({exc.summary}); apply names them before it starts"
        changes = tuple(
            change.model_copy(update={"gpu_pods_note": unread}) if change.address in orders else change
            for change in plan.changes
        )
        return plan.model_copy(
            update={"changes": changes, "api_requests": plan.api_requests + reader.request_count - before}
        )
    requests = reader.request_count - before
    found = {node: tuple(_name(pod) for pod in listed) for node, listed in pods.items()}
    changes = tuple(
        _blocked(_attached(change, orders[change.address], found), pods, policy_of)
        if change.address in orders
        else change
        for change in plan.changes
    )
    return plan.model_copy(update={"changes": changes, "api_requests": plan.api_requests + requests})


def read_gpu_pods(reader: CountingPodLister, nodes: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """node -> ``namespace/name`` of its GPU pods (the rollout's selection), for each of ``nodes`` (empty when
    it has none): one pod list per node, filtered by the server on ``spec.nodeName``."""
    return {node: tuple(_name(pod) for pod in pods) for node, pods in _read_pods(reader, nodes).items()}


def _read_pods(reader: CountingPodLister, nodes: Sequence[str]) -> dict[str, list[Obj]]:
    return {
        node: steps.gpu_pods_on(
            [node], steps.pods_of(reader.list_pods(field_selector=f"spec.nodeName={node}"))
        )
        for node in nodes
    }


def _name(pod: Obj) -> str:
    return f"{steps.namespace_of(pod)}/{pod_name(pod)}"


def _blocked(change: Change, pods: Mapping[str, Sequence[Obj]], policy_of: PolicyOf | None) -> Change:
    """The pods of ``change``'s nodes that its podDeletion rules refuse (the rollout stops at the first of
    them, on the same rule: :func:`gpuplan.planner.driver.node.refusal`), with the key that lets them go.
    Only the node-by-node rollout deletes GPU pods; a MIG change leaves them to the mig-manager."""
    if policy_of is None or not (change.component == "driver" and rolls_node_by_node(change)):
        return change
    policy, path = policy_of(change)
    where = f"{path}.podDeletion"
    blocked = {
        _name(pod): refused
        for node in change.gpu_pods or {}
        for pod in pods.get(node, ())
        if (refused := steps.refusal_by(pod, policy.pod_deletion, where)) is not None
    }
    return change.model_copy(update={"gpu_pods_blocked": blocked}) if blocked else change


def _attached(change: Change, order: Sequence[str], found: Mapping[str, tuple[str, ...]]) -> Change:
    read = {name: found[name] for name in order if name in found}
    unread = [name for name in order if name not in found]
    skipped = sorted(set(change.nodes) - set(order))
    notes = []
    if unread:
        notes.append(
            f"and {_count(len(unread), 'more node')}: not read, so that the plan's API requests do not "
            "grow with the nodes; apply names their GPU pods before it starts"
        )
    if skipped:
        notes.append(
            f"{_count(len(skipped), 'node')} labelled {SKIP_LABEL}=true ({_names(skipped)}): the rollout "
            "leaves them alone"
        )
    return change.model_copy(update={"gpu_pods": read, "gpu_pods_note": "; ".join(notes)})


def _unavailable(node: Mapping[str, Any]) -> bool:
    """Cordoned, or not Ready: what driver_rollout._unavailable checks on the live Node."""
    ready = next((c for c in node.get("conditions") or () if c.get("type") == "Ready"), None)
    return bool(node.get("unschedulable")) or (ready is not None and ready.get("status") != "True")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'s' if number != 1 else ''}"


def _names(names: Sequence[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
