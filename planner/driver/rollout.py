"""The driver's node-by-node rollout: what the GPU Operator's upgrade controller does, done by apply (facts
§7).

The driver DaemonSet is ``OnDelete`` (facts §3.1): applying a new template changes no pod. After the apply
walker wrote the new spec, :func:`roll_driver` replaces the driver pod node by node, never more than
``upgradePolicy.maxUnavailable`` nodes unavailable at once (nodes cordoned or NotReady by someone else count)
and never more than ``maxParallelUpgrades`` upgrading at once. Per node, in the controller's states:
``cordon-required`` (cordon; a node that was already unschedulable is remembered in the controller's
``...node-initial-state.unschedulable`` annotation and stays cordoned afterwards), ``pod-deletion-required``
(evict the GPU pods, :func:`gpuplan.planner.driver.node.gpu_pods_on`), ``drain-required`` (when
``drain.enable``), ``pod-restart-required`` (delete the driver pod; the DaemonSet controller creates the new
one), ``validation-required`` (the new pod in sync and Ready, the node reporting the expected driver version,
its validator Ready), ``uncordon-required``, ``upgrade-done``. The state is written to the node's
``nvidia.com/gpu-driver-upgrade-state`` label as the operator does, so NVIDIA tooling and people see progress,
and so a node this rollout cordoned is recognised as such by the next run (a rollback, or after a crash).

Nodes go in batches: a batch is as many nodes as the free slots allow, processed step by step together and
finished (uncordoned) before the next batch starts. The controller's sliding window could start a node as
soon as any finishes; batches keep one writer on one thread, with the same bound. Already cordoned nodes go
first: upgrading them costs no availability, so they may proceed even when no slot is free (as upstream).

A node that fails stops the rollout: the result names the node, the pod and the reason; the failed node stays
cordoned and labelled ``upgrade-failed``. The apply walker then restores the old DaemonSet spec and calls the
rollout again (:class:`gpuplan.planner.driver.step.DriverRollout` remembers which nodes it restarted, and
rolls those first), which puts
the old driver back and uncordons them.

Callers: the apply walker through :class:`~gpuplan.planner.driver.step.DriverRollout`
(``ApplyOptions.driver_rollout``); the plan, through
:func:`gpu_pods_on`, to list the pods a driver change will evict.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gpuplan.modules.driver import UpgradePolicy
from gpuplan.planner.driver import node as steps
from gpuplan.planner.driver.gate import UpgradeCheck, wait_node_upgraded
from gpuplan.planner.driver.node import NodeFailure, NodeStepFailed, Timing, gpu_pods_on, pods_of
from gpuplan.planner.facts import DRIVER_CHANGING_STATES, DRIVER_UPGRADE_STATE_LABEL
from gpuplan.planner.health import revision
from gpuplan.planner.health.gates import (
    GENERATION_LABEL,
    Obj,
    condition_of,
    in_sync,
    node_of,
    pod_name,
    pod_ready,
)
from gpuplan.planner.spec import selector as label_selector
from gpuplan.providers.protocols import Listing, RolloutClient
from gpuplan.providers.snapshot import LiveObject, ObjectKey

__all__ = ["NodeProgress", "RolloutResult", "gpu_pods_on", "max_unavailable_nodes", "roll_driver"]

TEMPLATE_GENERATION = "deprecated.daemonset.template.generation"
"""The annotation apps/v1 DaemonSets carry their template generation in (the pods' generation label)."""
STATE_LABEL = DRIVER_UPGRADE_STATE_LABEL
SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
INITIAL_UNSCHEDULABLE = "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable"
UPGRADE_DONE, UPGRADE_FAILED = "upgrade-done", "upgrade-failed"
# States between cordon and uncordon: a node labelled with one was cordoned by a rollout, not by a person.
IN_PROGRESS = DRIVER_CHANGING_STATES

NodeGate = Callable[[str], None]
"""Waits until the node's new driver works; raises NodeStepFailed when it does not."""


@dataclass(frozen=True)
class NodeProgress:
    """One step of one node, for a display: node ``index`` of ``total`` is now in ``state``."""

    node: str
    index: int
    total: int
    state: str
    message: str = ""


@dataclass(frozen=True)
class RolloutResult:
    """What the rollout did. ``restarted``: nodes whose driver pod it replaced (the failed one included),
    which a rollback must roll again; ``evicted``: the pods it evicted, as namespace/name."""

    ok: bool
    upgraded: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    evicted: tuple[str, ...] = ()
    failure: NodeFailure | None = None

    @property
    def message(self) -> str:
        if self.failure is None:
            return f"driver rolled out on {len(self.upgraded)} node(s)"
        pod = (
            f" (pod {self.failure.pod})"
            if self.failure.pod and self.failure.pod not in self.failure.message
            else ""
        )
        return f"node {self.failure.node} failed at {self.failure.step}: {self.failure.message}{pod}"


def max_unavailable_nodes(value: int | str, total: int) -> int:
    """``maxUnavailable`` as a node count: an int, or a percentage of ``total`` rounded up."""
    text = str(value).strip()
    if text.endswith("%"):
        return math.ceil(total * int(text[:-1]) / 100)
    return int(text)


@dataclass(eq=False)
class _Node:
    name: str
    index: int
    initially_unschedulable: bool = False
    evicted: list[str] = field(default_factory=list)
    checked: bool = False
    needed: bool = True
    """Whether the node still needs the upgrade, once ``checked`` (when its turn came)."""
    pod_in_sync: bool = False
    """Its driver pod already runs the current template; only our cordon is left to finish (a node an
    earlier run left cordoned, e.g. one whose GPU pods could not be evicted): no eviction, no restart."""


@dataclass
class _Run:
    writer: RolloutClient
    daemonset: ObjectKey
    policy: UpgradePolicy
    gate: NodeGate
    timing: Timing
    hooks: Callable[[NodeProgress], None] | None
    label_nodes: bool
    total: int
    policy_path: str = steps.POLICY_PATH
    upgraded: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)
    evicted: list[str] = field(default_factory=list)

    def report(self, node: _Node, state: str, message: str = "") -> None:
        if self.label_nodes:
            self.label(node, state)
        if self.hooks is not None:
            self.hooks(NodeProgress(node.name, node.index, self.total, state, message))

    def label(self, node: _Node, state: str) -> None:
        """The controller's state label (and its initial-state annotation while the node is in progress).
        Server-side apply: annotations this field manager no longer sends are removed by the server."""
        metadata: dict[str, object] = {"name": node.name, "labels": {STATE_LABEL: state}}
        if node.initially_unschedulable and state in IN_PROGRESS:
            metadata["annotations"] = {INITIAL_UNSCHEDULABLE: "true"}
        self.writer.apply({"apiVersion": "v1", "kind": "Node", "metadata": metadata})


def roll_driver(
    writer: RolloutClient,
    *,
    daemonset: ObjectKey,
    nodes: Sequence[str],
    policy: UpgradePolicy,
    gate: UpgradeCheck | NodeGate,
    hooks: Callable[[NodeProgress], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    label_nodes: bool = True,
    policy_path: str = steps.POLICY_PATH,
) -> RolloutResult:
    """Replace the driver pod on ``nodes`` (in this order, cordoned ones first) after the driver DaemonSet's
    new spec was applied; see the module doc. ``gate`` is what "upgraded" means on a node: an
    :class:`UpgradeCheck` (the new pod Ready, the version, the validator), or a callable that waits itself."""
    timing = Timing(clock, sleep)
    node_gate = gate if callable(gate) else _check_gate(writer, gate, timing)
    live_nodes = {n.key.name: n for n in writer.list_nodes()}
    base = _driver_nodes(writer, daemonset, live_nodes) | set(nodes)
    run = _Run(
        writer,
        daemonset,
        policy,
        node_gate,
        timing,
        hooks,
        label_nodes,
        total=len(nodes),
        policy_path=policy_path,
    )
    skipped: list[str] = []
    queue: list[_Node] = []
    for index, name in enumerate(_ordered(nodes, live_nodes), start=1):
        node = live_nodes.get(name)
        if node is None or node.labels.get(SKIP_LABEL) == "true":
            skipped.append(name)
            continue
        queue.append(_Node(name, index, initially_unschedulable=_cordoned_by_others(node)))
    limit = max_unavailable_nodes(policy.max_unavailable, len(base))
    try:
        while queue:
            # Up to date is decided when a node's turn comes, not before: after a rollback restored the old
            # template, the first restarted pod reveals the revision hash the untouched nodes' pods carry.
            batch = _next_batch(
                queue, writer, base, limit, policy.max_parallel_upgrades, _up_to_date_check(writer, daemonset)
            )
            skipped += [node.name for node in queue if node.checked and not node.needed]
            queue = [node for node in queue if node not in batch and node.needed]
            if batch:
                _upgrade_batch(run, batch)
            elif queue:
                raise NodeStepFailed(
                    NodeFailure(
                        queue[0].name,
                        "cordon",
                        "NoUpgradeSlot",
                        f"maxUnavailable {policy.max_unavailable} of {len(base)} node(s) "
                        "allows no node to be taken down now (others are unavailable)",
                    )
                )
    except NodeStepFailed as failed:
        return RolloutResult(
            False,
            tuple(run.upgraded),
            tuple(run.restarted),
            tuple(skipped),
            tuple(run.evicted),
            failed.failure,
        )
    return RolloutResult(True, tuple(run.upgraded), tuple(run.restarted), tuple(skipped), tuple(run.evicted))


def _upgrade_batch(run: _Run, batch: Sequence[_Node]) -> None:
    """Every node of the batch through each step; a failure marks its node failed and stops."""
    current: _Node | None = None
    try:
        for step in (_cordon, _delete_gpu_pods, _drain, _restart, _validate, _uncordon):
            for node in batch:
                current = node
                step(run, node)
    except NodeStepFailed as failed:
        assert current is not None
        run.report(current, UPGRADE_FAILED, failed.failure.message)
        raise


def _cordon(run: _Run, node: _Node) -> None:
    run.report(node, "cordon-required")
    run.writer.cordon(node.name, True)


def _delete_gpu_pods(run: _Run, node: _Node) -> None:
    if node.pod_in_sync:
        return
    run.report(node, "pod-deletion-required")
    node.evicted = steps.clear_gpu_pods(run.writer, node.name, run.policy, run.timing, run.policy_path)
    run.evicted += node.evicted


def _drain(run: _Run, node: _Node) -> None:
    if not run.policy.drain.enable or node.pod_in_sync:
        return
    run.report(node, "drain-required")
    selector = label_selector.matcher(run.policy.drain.pod_selector)
    drained = steps.drain_pods(run.writer, node.name, run.policy, run.timing, selector, run.policy_path)
    run.evicted += drained


def _restart(run: _Run, node: _Node) -> None:
    if node.pod_in_sync:
        return
    run.report(node, "pod-restart-required")
    live = run.writer.read(run.daemonset)
    if live is None:
        raise NodeStepFailed(
            NodeFailure(node.name, "pod-restart", "DaemonSetGone", f"{run.daemonset.ref} is gone")
        )
    # Deleting the pod of a node the DaemonSet no longer places would leave it without a driver for good.
    untargeted = steps.untargeted(run.writer, node.name, live.manifest)
    if untargeted is not None:
        raise NodeStepFailed(untargeted)
    deleted = steps.restart_driver_pod(run.writer, node.name, live.manifest)
    if deleted is not None:
        run.restarted.append(node.name)


def _validate(run: _Run, node: _Node) -> None:
    run.report(node, "validation-required")
    run.gate(node.name)


def _uncordon(run: _Run, node: _Node) -> None:
    run.report(node, "uncordon-required")
    if not node.initially_unschedulable:
        run.writer.cordon(node.name, False)
    run.report(
        node, UPGRADE_DONE, "" if not node.initially_unschedulable else "left cordoned, as it was before"
    )
    run.upgraded.append(node.name)


# ----------------------------------------------------------------------------------------- bookkeeping


def _next_batch(
    queue: Sequence[_Node],
    writer: RolloutClient,
    base: set[str],
    limit: int,
    max_parallel: int,
    up_to_date: Callable[[_Node], bool],
) -> list[_Node]:
    """The nodes to take now: unavailable ones for free, then as many as the free slots and the parallel
    limit allow. Availability is read afresh, so nodes someone else cordoned in the meantime count. A node
    found up to date when its turn comes is marked so (``needed`` False) and passed over."""
    live = {n.key.name: n for n in writer.list_nodes()}
    unavailable = {name for name in base if name in live and _unavailable(live[name])}
    parallel = max_parallel or len(queue)
    batch: list[_Node] = []
    for node in queue:
        if len(batch) >= parallel:
            break
        if up_to_date(node):
            continue
        if node.name not in unavailable and len(unavailable) >= limit:
            break  # keep the given order: the next node waits for the next batch
        if node.name not in unavailable:  # an unavailable node is already out of service: it costs nothing
            unavailable.add(node.name)
        batch.append(node)
    return batch


def _ordered(nodes: Sequence[str], live: Mapping[str, LiveObject]) -> list[str]:
    """Nodes already cordoned (by anyone) first, then the others, each group in the given order."""
    seen = list(dict.fromkeys(nodes))
    return sorted(seen, key=lambda name: 0 if name in live and _unavailable(live[name]) else 1)


def _unavailable(node: LiveObject) -> bool:
    ready = condition_of(node.manifest, "Ready")
    return bool((node.manifest.get("spec") or {}).get("unschedulable")) or (
        ready is not None and ready.get("status") != "True"
    )


def _cordoned_by_others(node: LiveObject) -> bool:
    """Unschedulable before this rollout: not cordoned by an earlier run (whose state label says so) unless
    that run recorded it as initially unschedulable."""
    if not (node.manifest.get("spec") or {}).get("unschedulable"):
        return False
    if node.labels.get(STATE_LABEL) in IN_PROGRESS:
        return bool(node.annotations.get(INITIAL_UNSCHEDULABLE) == "true")
    return True


def _up_to_date_check(writer: RolloutClient, daemonset: ObjectKey) -> Callable[[_Node], bool]:
    """Whether a node's driver pod already runs the current template and nothing of ours is left to finish
    there (its state label); each node is read once, the first time it is asked about."""
    live = writer.read(daemonset)
    current = revision.current_hash(writer, live.manifest) if live is not None else None

    def check(node: _Node) -> bool:
        if not node.checked:
            node.checked = True
            node.pod_in_sync, ours = _driver_state(writer, node.name, live, current)
            node.needed = not node.pod_in_sync or ours
        return not node.needed

    return check


def _driver_state(
    writer: RolloutClient, name: str, daemonset: LiveObject | None, revision: str | None
) -> tuple[bool, bool]:
    """(the node's driver pod runs the current template, a rollout's state label is still in progress)."""
    node = writer.read(ObjectKey("v1", "Node", None, name))
    ours = node is not None and node.labels.get(STATE_LABEL) in IN_PROGRESS
    if daemonset is None or node is None:
        return False, ours
    pod = steps.driver_pod_on(name, steps.pods_of(steps.node_pods(writer, name)), daemonset.manifest)
    return pod is not None and in_sync(pod, daemonset.manifest, revision), ours


def _driver_nodes(writer: RolloutClient, daemonset: ObjectKey, live: Mapping[str, LiveObject]) -> set[str]:
    """The nodes running a pod of the driver DaemonSet: what maxUnavailable's percentage is of."""
    ds = writer.read(daemonset)
    if ds is None:
        return set()
    pods = writer.list_pods(namespace=daemonset.namespace, label_selector=revision.match_labels(ds.manifest))
    uid = ds.uid
    return {
        node
        for pod in pods
        if (node := node_of(pod.manifest))
        and node in live
        and any(ref.get("uid") == uid for ref in pod.metadata.get("ownerReferences") or ())
    }


def _check_gate(writer: RolloutClient, check: UpgradeCheck, timing: Timing) -> NodeGate:
    def gate(node: str) -> None:
        wait_node_upgraded(writer, node, check, timing)

    return gate


# ------------------------------------------------------------------------------------------- hand-over


def hand_over(
    writer: RolloutClient,
    *,
    daemonset: ObjectKey,
    nodes: Sequence[str],
    policy: UpgradePolicy,
    policy_path: str = steps.POLICY_PATH,
    write: Callable[[], object],
    gate: Callable[[str, ObjectKey], None],
    hooks: Callable[[NodeProgress], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    timeout_seconds: float = 300.0,
) -> RolloutResult:
    """Move ``nodes`` off the driver DaemonSet onto the driver DaemonSet that also places them (a node pool's
    own): cordon them and clear their GPU pods (and drain, when ``drain.enable``), ``write`` the DaemonSet's
    new spec, which no longer places them (the DaemonSet controller deletes a pod on a node its template no
    longer places, whatever the update strategy: ``podsShouldBeOnNode``, pkg/controller/daemon/
    daemon_controller.go), wait until that pod is gone, restart the other DaemonSet's pod there (it could not
    load its driver while the old one ran), ``gate`` on it (the node and the DaemonSet that took it over),
    uncordon. One spec write moves every such node, so they go down together."""
    timing = Timing(clock, sleep)
    live_nodes = {n.key.name: n for n in writer.list_nodes()}
    live = writer.read(daemonset)
    if live is None:
        return RolloutResult(True)
    run = _Run(writer, daemonset, policy, lambda _node: None, timing, hooks, True, len(nodes), policy_path)
    queue = _queue(nodes, live_nodes)
    current: _Node | None = None
    try:
        current = _take_down(run, queue)
        write()
        for node in queue:
            current = node
            run.report(node, "pod-restart-required", "moves to the driver DaemonSet that now places it")
            taker = _wait_handed_over(writer, node.name, live, timing, timing.clock() + timeout_seconds)
            run.restarted.append(node.name)
            run.report(node, "validation-required")
            gate(node.name, taker)
            _uncordon(run, node)
    except NodeStepFailed as failed:
        if current is not None:
            run.report(current, UPGRADE_FAILED, failed.failure.message)
        return RolloutResult(
            False, tuple(run.upgraded), tuple(run.restarted), (), tuple(run.evicted), failed.failure
        )
    return RolloutResult(True, tuple(run.upgraded), tuple(run.restarted), (), tuple(run.evicted))


def _wait_handed_over(
    writer: RolloutClient, node: str, daemonset: LiveObject, timing: Timing, deadline: float
) -> ObjectKey:
    """Until the node runs no pod of the DaemonSet ``uid`` any more (its driver unloaded), then the other
    driver DaemonSet there: its pod is deleted unless Ready, since it crash-looped while the old driver was
    in use and would only retry after the kubelet's back-off; the DaemonSet controller makes a new one. The
    other driver DaemonSets' pods carry the same selector labels (design §7.1)."""
    uid = daemonset.uid
    match = ((daemonset.manifest.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    _wait_pods_gone(writer, node, uid, timing, deadline)
    others = [
        pod
        for pod in pods_of(steps.node_pods(writer, node))
        if _driver_pod(pod, match)
        and not _owned_by(pod, uid)
        and not (pod.get("metadata") or {}).get("deletionTimestamp")
    ]
    if not others:
        raise NodeStepFailed(
            NodeFailure(node, "pod-restart", "NoDriver", f"{node}: no other driver DaemonSet places the node")
        )
    pod = others[0]
    owner = next(
        ref
        for ref in (pod.get("metadata") or {}).get("ownerReferences") or ()
        if ref.get("kind") == "DaemonSet"
    )
    if not pod_ready(pod):
        writer.delete_pod(ObjectKey("v1", "Pod", steps.namespace_of(pod), pod_name(pod)))
    return ObjectKey("apps/v1", "DaemonSet", steps.namespace_of(pod), str(owner.get("name")))


def _queue(nodes: Sequence[str], live_nodes: Mapping[str, LiveObject]) -> list[_Node]:
    return [
        _Node(name, index, initially_unschedulable=_cordoned_by_others(live_nodes[name]))
        for index, name in enumerate(nodes, start=1)
        if name in live_nodes
    ]


def _take_down(run: _Run, queue: Sequence[_Node]) -> _Node | None:
    """Cordon, clear the GPU pods of, and drain every node of ``queue``, step by step; the last node. A node
    that fails is labelled so here, since the caller does not know which one it was."""
    current: _Node | None = None
    for step in (_cordon, _delete_gpu_pods, _drain):
        for node in queue:
            current = node
            try:
                step(run, node)
            except NodeStepFailed as failed:
                run.report(node, UPGRADE_FAILED, failed.failure.message)
                raise
    return current


def _wait_pods_gone(
    writer: RolloutClient, node: str, uid: str | None, timing: Timing, deadline: float
) -> None:
    """Until the node runs no pod of the DaemonSet ``uid`` any more: its driver is unloaded."""

    def gone(listing: Listing) -> NodeFailure | bool:
        left = [pod for pod in pods_of(listing) if _owned_by(pod, uid)]
        if not left:
            return True
        return timing.clock() >= deadline and NodeFailure(
            node,
            "pod-restart",
            "Timeout",
            f"{node}: driver pod {pod_name(left[0])} still there",
            pod_name(left[0]),
        )

    steps.wait_on_node(writer, node, gone, timing, deadline)


def hand_back(
    writer: RolloutClient,
    *,
    daemonset: ObjectKey,
    policy: UpgradePolicy,
    policy_path: str = steps.POLICY_PATH,
    delete: Callable[[], object],
    hooks: Callable[[NodeProgress], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    timeout_seconds: float = 300.0,
) -> RolloutResult:
    """The mirror of :func:`hand_over`: give the nodes of a driver DaemonSet that is deleted (a removed node
    pool's) back to the driver DaemonSet whose update places them next (the stack's). Cordon them and clear
    their GPU pods (and drain, when ``drain.enable``), ``delete`` the DaemonSet, wait until its pods there are
    gone (their driver unloaded, so the other DaemonSet's pod can load its own). The nodes stay cordoned and
    labelled ``pod-restart-required``: the update's rollout takes a node in that state even when the pod it
    finds there is current (:func:`roll_driver`), gates on it and uncordons. Deleting the DaemonSet removes
    every pod of it at once, so its nodes go down together. ``restarted``: the nodes handed back."""
    timing = Timing(clock, sleep)
    live_nodes = {n.key.name: n for n in writer.list_nodes()}
    live = writer.read(daemonset)
    nodes = sorted(_driver_nodes(writer, daemonset, live_nodes))
    run = _Run(writer, daemonset, policy, lambda _node: None, timing, hooks, True, len(nodes), policy_path)
    queue = _queue(nodes, live_nodes)
    current: _Node | None = None
    try:
        current = _take_down(run, queue)
        for node in queue:
            current = node
            run.report(node, "pod-restart-required", f"{daemonset.name} is deleted")
        current = None
        delete()
        deadline = timing.clock() + timeout_seconds
        for node in queue:
            current = node
            _wait_pods_gone(writer, node.name, live.uid if live else None, timing, deadline)
            run.restarted.append(node.name)
    except NodeStepFailed as failed:
        if current is not None:
            run.report(current, UPGRADE_FAILED, failed.failure.message)
        return RolloutResult(False, (), tuple(run.restarted), (), tuple(run.evicted), failed.failure)
    return RolloutResult(True, (), tuple(run.restarted), (), tuple(run.evicted))


def _owned_by(pod: Obj, uid: str | None) -> bool:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return any(ref.get("uid") == uid for ref in refs)


def _driver_pod(pod: Obj, match: Mapping[str, str]) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    refs = (pod.get("metadata") or {}).get("ownerReferences") or ()
    return all(labels.get(k) == v for k, v in match.items()) and any(
        ref.get("kind") == "DaemonSet" for ref in refs
    )


def current_pods(writer: RolloutClient, daemonset: ObjectKey) -> list[str]:
    """The DaemonSet's pods that run its current template (:func:`in_sync`), by name."""
    live = writer.read(daemonset)
    if live is None:
        return []
    current = revision.current_hash(writer, live.manifest)
    pods = writer.list_pods(
        namespace=daemonset.namespace, label_selector=revision.match_labels(live.manifest)
    )
    return [
        pod.key.name
        for pod in pods
        if _owned_by(pod.manifest, live.uid) and in_sync(pod.manifest, live.manifest, current)
    ]


def adopt_placement_change(writer: RolloutClient, daemonset: ObjectKey, pods: Collection[str]) -> list[str]:
    """After a template change of the required node affinity alone (:func:`gpuplan.planner.placement.
    placement_only`), label the DaemonSet's ``pods`` that ran the previous template with its new template
    generation: the pod the controller would make from the new template on their node is the same one, so
    they are current. The DaemonSet controller and gpuplan judge "current" by that label or the revision hash
    (IsPodUpdated, pkg/controller/daemon/util/daemonset_util.go); under OnDelete it never replaces those pods
    itself (updateDaemonSet, pkg/controller/daemon/daemon_controller.go: no rolling step for OnDelete), so
    without this they would stay "on an older template" for good. The pods labelled."""
    live = writer.read(daemonset)
    if live is None:
        return []
    metadata = live.manifest.get("metadata") or {}
    generation = str(
        (metadata.get("annotations") or {}).get(TEMPLATE_GENERATION) or metadata.get("generation") or ""
    )
    labelled = []
    for pod in writer.list_pods(
        namespace=daemonset.namespace, label_selector=revision.match_labels(live.manifest)
    ):
        if pod.key.name not in pods or not _owned_by(pod.manifest, live.uid):
            continue
        writer.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod.key.name,
                    "namespace": pod.key.namespace,
                    "labels": {GENERATION_LABEL: generation},
                },
            }
        )
        labelled.append(pod.key.name)
    return labelled
