"""The driver rollout as the apply walker's step: :class:`DriverRollout` is ``ApplyOptions.driver_rollout``.

The walker (:func:`gpuplan.planner.apply.steps.perform`) calls ``driver_rollout(change, writer, report)``
instead of a plain update when the driver DaemonSet changes, and expects the live DaemonSet back, or a
:class:`~gpuplan.errors.GpuplanError` when the change failed. This adapter applies the new spec (with the
walker's drift guard: the plan's resourceVersion, tolerating moves of fields gpuplan does not own), then
rolls it node by node (:func:`gpuplan.planner.driver.rollout.roll_driver`) with the spec's
``upgradePolicy``. Progress goes to ``report`` as one line per node state.

A node that fails stops the rollout and is rolled back here, before the error is raised: the old DaemonSet
spec is applied again and the nodes already changed are rolled back to the old driver (the others still run
it and are left alone), so the error can say what failed and what was restored. The walker then undoes the
changes made before this one. The adapter remembers the nodes it restarted; a later call (the walker undoing
a driver change after a later component failed) rolls those first.

What "upgraded" means on a node is read from the cluster when the rollout starts: the node must report the
new driver version when GFD labels the nodes with one (facts §4), and the validator pod on it must be Ready
when validator pods run (facts §8); a cluster with neither only waits for the new driver pod to be Ready.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gpuplan.errors import ApplyFailedError, GpuplanError
from gpuplan.modules.common import POOL_LABEL
from gpuplan.modules.driver import UpgradePolicy, driver_release
from gpuplan.planner.diff.guard import guarded_write
from gpuplan.planner.driver import node as steps
from gpuplan.planner.driver.gate import UpgradeCheck, failed_creates, wait_node_upgraded
from gpuplan.planner.driver.node import Timing
from gpuplan.planner.driver.rollout import (
    NodeProgress,
    RolloutResult,
    adopt_placement_change,
    current_pods,
    hand_back,
    hand_over,
    roll_driver,
)
from gpuplan.planner.health import revision
from gpuplan.planner.health.gates import node_of, pod_name
from gpuplan.planner.health.nodes import DRIVER_LABEL
from gpuplan.planner.placement import placement_moves, placement_only, pod_spec_of, runs_on
from gpuplan.planner.plan.model import Change
from gpuplan.planner.spec.model import Spec, pool_driver
from gpuplan.providers.protocols import ANY_VERSION, PodLister, RolloutClient
from gpuplan.providers.snapshot import LiveObject, ObjectKey

VALIDATOR_SELECTOR = "app=nvidia-operator-validator"
PER_NODE_QUERIES = 8
"""Up to this many targeted nodes, the GPU pods to evict are read node by node; beyond, in one list."""


def policy_of(spec: Spec, manifest: Mapping[str, Any]) -> tuple[UpgradePolicy, str]:
    """The upgradePolicy a driver DaemonSet rolls by (a node pool's DaemonSet by its pool's), and the spec
    path where a user changes it: the pool's own key when the pool sets one, else the stack's."""
    pool_name = ((manifest.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)
    for index, pool in enumerate(spec.spec.node_pools):
        if pool.name == pool_name:
            own = pool.driver is not None and "upgrade_policy" in pool.driver.model_fields_set
            path = f"spec.nodePools[{index}].driver.upgradePolicy" if own else steps.POLICY_PATH
            return pool_driver(spec.spec, pool).upgrade_policy, path
    return spec.spec.driver.upgrade_policy, steps.POLICY_PATH


class DriverRolloutFailed(ApplyFailedError):
    """A node's driver upgrade failed; ``node``, ``pod`` and ``reason`` say where and why, ``restored``
    whether the old driver is back on every node this rollout changed."""

    def __init__(self, result: RolloutResult, *, restored: bool, restore_note: str) -> None:
        failure = result.failure
        assert failure is not None
        super().__init__(
            f"driver rollout stopped at node {failure.node} ({failure.reason}): {failure.message}",
            rolled_back=restored,
            detail=restore_note,
        )
        self.node = failure.node
        self.pod = failure.pod
        self.reason = failure.reason
        self.restored = restored


class RollsDriver(Protocol):
    """What the apply walker calls instead of a plain update when the driver DaemonSet changes: the new spec
    written and rolled node by node; the live DaemonSet back, or a GpuplanError when a node failed."""

    def __call__(
        self, change: Change, writer: RolloutClient, report: Callable[[str], None] | None = None
    ) -> LiveObject: ...

    def hand_back(
        self,
        change: Change,
        writer: RolloutClient,
        delete: Callable[[], LiveObject | None],
        report: Callable[[str], None] | None = None,
    ) -> LiveObject | None:
        """The delete of a driver DaemonSet whose nodes a driver DaemonSet updated by the same plan takes
        back (:func:`gpuplan.planner.plan.decide.hands_back`): ``delete`` once its nodes are cordoned and
        drained; the object deleted."""
        ...


class DriverRollout:
    """The walker's :class:`RollsDriver` for a spec: ``rollout(change, writer, report) -> live DaemonSet``."""

    def __init__(
        self,
        spec: Spec,
        *,
        resource_versions: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        node_timeout: float | None = None,
        restore: bool = True,
    ) -> None:
        """``resource_versions``: the plan's (``Plan.resource_versions``), for the drift guard;
        ``node_timeout``: how long one node may take to validate (default: the driver's healthTimeoutSeconds);
        ``restore``: put the old driver back when a node fails (False for ``apply --no-rollback``: the failed
        node then stays cordoned and labelled upgrade-failed, as the operator leaves it)."""
        driver = spec.spec.driver
        self.spec = spec
        self.resource_versions = dict(resource_versions or {})
        self.node_timeout = float(node_timeout or driver.health_timeout_seconds)
        self.clock, self.sleep = clock, sleep
        self.restore = restore
        self.restarted: list[str] = []
        """Nodes whose driver pod this adapter replaced, over all its calls."""
        self.handed_back: list[str] = []
        """Nodes left cordoned without a driver by :meth:`hand_back`, for the update that takes them."""
        self.results: list[RolloutResult] = []

    def __call__(
        self, change: Change, writer: RolloutClient, report: Callable[[str], None] | None = None
    ) -> LiveObject:
        assert change.after is not None, "a driver rollout needs the new DaemonSet"
        key = ObjectKey.of(change.after)
        placement = change.before is not None and placement_only(change.before, change.after)
        current = current_pods(writer, key) if placement else []
        leaving = self._leaving(writer, key, change.after) if _moves(change) else []
        entering = self._entering(writer, change.after) if _moves(change) else []
        before = failed_creates(writer, key)  # listed before the spec is written, here or in the hand-over
        if leaving:
            moved = self._hand_over(writer, key, change, leaving, report)
            live = writer.read(key)
            if not moved.ok or live is None:
                self.results.append(moved)
                raise DriverRolloutFailed(
                    moved,
                    restored=False,
                    restore_note="the node stays cordoned; apply again once it is fixed",
                )
        else:
            live = self._apply_new_spec(writer, key, change)
        if placement:
            adopt_placement_change(writer, key, current)
        result = self._roll(writer, key, change.after, report, before, only=entering) if entering else None
        if result is None or result.ok:
            self.handed_back = [node for node in self.handed_back if node not in entering]
            result = self._roll(writer, key, change.after, report, before)
        if result.ok:
            return writer.read(key) or live
        if not self.restore:
            raise DriverRolloutFailed(
                result,
                restored=False,
                restore_note="left as it is (no rollback): the node "
                "stays cordoned; the next apply of a working version finishes it",
            )
        if change.before is None:
            raise DriverRolloutFailed(
                result, restored=False, restore_note="there is no earlier spec to restore"
            )
        restored, note = self._restore(writer, key, change.before, result, report)
        raise DriverRolloutFailed(result, restored=restored, restore_note=note)

    def hand_back(
        self,
        change: Change,
        writer: RolloutClient,
        delete: Callable[[], LiveObject | None],
        report: Callable[[str], None] | None = None,
    ) -> LiveObject | None:
        """Cordon and drain the nodes of the driver DaemonSet ``change`` deletes, ``delete`` it and wait until
        its pods are gone (:func:`gpuplan.planner.driver.rollout.hand_back`); the update of the driver
        DaemonSet that takes those nodes then starts its pod there, gates on it and uncordons them."""
        assert change.before is not None, "a hand-back deletes a recorded DaemonSet"
        key = ObjectKey.of(change.before)
        deleted: list[LiveObject | None] = []
        policy, policy_path = policy_of(self.spec, change.before)
        result = hand_back(
            writer,
            daemonset=key,
            policy=policy,
            policy_path=policy_path,
            delete=lambda: deleted.append(delete()),
            hooks=_reporter(report),
            clock=self.clock,
            sleep=self.sleep,
            timeout_seconds=self.node_timeout,
        )
        self.handed_back += [node for node in result.restarted if node not in self.handed_back]
        if not result.ok:
            self.results.append(result)
            raise DriverRolloutFailed(
                result,
                restored=False,
                restore_note="the node stays cordoned; apply again once it is fixed",
            )
        return deleted[0] if deleted else None

    def _entering(self, writer: RolloutClient, after: Mapping[str, Any]) -> list[str]:
        """The nodes :meth:`hand_back` left without a driver that the DaemonSet's new spec places."""
        spec = pod_spec_of(after)
        nodes = {node.key.name: node for node in writer.list_nodes()}
        return [name for name in self.handed_back if name in nodes and runs_on(spec, nodes[name].manifest)]

    def _leaving(self, writer: RolloutClient, key: ObjectKey, after: Mapping[str, Any]) -> list[str]:
        """The nodes running a pod of the DaemonSet that its new spec no longer places (a node pool with a
        driver of its own takes them)."""
        spec = pod_spec_of(after)
        nodes = {node.key.name: node for node in writer.list_nodes()}
        return [
            name
            for name in self._nodes(writer, key)
            if name in nodes and name not in self.restarted and not runs_on(spec, nodes[name].manifest)
        ]

    def _hand_over(
        self,
        writer: RolloutClient,
        key: ObjectKey,
        change: Change,
        leaving: Sequence[str],
        report: Callable[[str], None] | None,
    ) -> RolloutResult:
        """Cordon and drain the nodes that leave, write the new spec, and gate on the driver DaemonSet that
        takes each over (:func:`gpuplan.planner.driver.rollout.hand_over`)."""
        taking: dict[ObjectKey, UpgradeCheck] = {}

        def gate(node: str, taker: ObjectKey) -> None:
            if taker not in taking:
                live = writer.read(taker)
                taking[taker] = UpgradeCheck(
                    taker,
                    expected_version=self._expected_version(writer, live.manifest) if live else None,
                    validator_selector=self._validator_selector(writer, taker),
                    timeout_seconds=self.node_timeout,
                )
            wait_node_upgraded(writer, node, taking[taker], Timing(self.clock, self.sleep))

        policy, policy_path = policy_of(self.spec, change.after or {})
        return hand_over(
            writer,
            daemonset=key,
            nodes=leaving,
            policy=policy,
            policy_path=policy_path,
            write=lambda: self._apply_new_spec(writer, key, change),
            gate=gate,
            hooks=_reporter(report),
            clock=self.clock,
            sleep=self.sleep,
            timeout_seconds=self.node_timeout,
        )

    def _apply_new_spec(self, writer: RolloutClient, key: ObjectKey, change: Change) -> LiveObject:
        """The walker's guard (:func:`gpuplan.planner.diff.guard.guarded_write`): the plan's version; while
        only fields gpuplan does not own move (status writes of the DaemonSet controller), the one just
        read."""
        after = change.after
        assert after is not None
        expected = self.resource_versions.get(key.ref, ANY_VERSION)
        return guarded_write(
            writer, key, expected, change.before, lambda version: writer.apply(after, expected_rv=version)
        )

    def _roll(
        self,
        writer: RolloutClient,
        key: ObjectKey,
        manifest: Mapping[str, Any],
        report: Callable[[str], None] | None,
        refusals_before: frozenset[str],
        only: Sequence[str] | None = None,
    ) -> RolloutResult:
        """Roll ``only`` those nodes, or every node of the DaemonSet that ``manifest`` still places (a node
        restarted earlier that a restored spec no longer places has no pod of it to wait for);
        ``refusals_before``: the DaemonSet's FailedCreate Events before it was written
        (:func:`gpuplan.planner.driver.gate.failed_creates`)."""
        placed = {node.key.name: node.manifest for node in writer.list_nodes()}
        spec = pod_spec_of(manifest)
        nodes = (
            list(only)
            if only is not None
            else [
                node for node in self._nodes(writer, key) if node not in placed or runs_on(spec, placed[node])
            ]
        )
        policy, policy_path = policy_of(self.spec, manifest)
        check = UpgradeCheck(
            key,
            expected_version=self._expected_version(writer, manifest),
            validator_selector=self._validator_selector(writer, key),
            timeout_seconds=self.node_timeout,
            refusals_before=refusals_before,
        )
        result = roll_driver(
            writer,
            daemonset=key,
            nodes=nodes,
            policy=policy,
            policy_path=policy_path,
            gate=check,
            hooks=_reporter(report),
            clock=self.clock,
            sleep=self.sleep,
        )
        self.restarted += [node for node in result.restarted if node not in self.restarted]
        self.results.append(result)
        return result

    def _restore(
        self,
        writer: RolloutClient,
        key: ObjectKey,
        before: Mapping[str, Any],
        failed: RolloutResult,
        report: Callable[[str], None] | None,
    ) -> tuple[bool, str]:
        """The old spec back, and the old driver back on the nodes this rollout changed."""
        assert failed.failure is not None
        try:
            refusals = failed_creates(writer, key)
            writer.apply(before, expected_rv=ANY_VERSION)
            back = self._roll(writer, key, before, report, refusals)
        except GpuplanError as exc:
            return False, f"restoring the old driver failed too: {exc.summary}; the node stays cordoned"
        changed = ", ".join(failed.restarted) or "none"
        if back.ok:
            return True, (
                f"the old DaemonSet spec is restored and the old driver runs again on the nodes this "
                f"rollout changed ({changed}); {len(failed.upgraded)} node(s) had been upgraded"
            )
        return False, f"restoring the old driver failed: {back.message}"

    def _nodes(self, writer: RolloutClient, key: ObjectKey) -> list[str]:
        """The nodes running the driver DaemonSet's pods, those restarted before first."""
        live = writer.read(key)
        if live is None:
            return list(self.restarted)
        pods = writer.list_pods(namespace=key.namespace, label_selector=revision.match_labels(live.manifest))
        # its own pods only: a node pool's driver pods carry the same app label (design §7.1)
        owned = [
            p for p in pods if any(r.get("uid") == live.uid for r in p.metadata.get("ownerReferences") or ())
        ]
        nodes = sorted({node for pod in owned if (node := (pod.manifest.get("spec") or {}).get("nodeName"))})
        return [*self.restarted, *(node for node in nodes if node not in self.restarted)]

    @staticmethod
    def _expected_version(writer: RolloutClient, manifest: Mapping[str, Any]) -> str | None:
        """The driver release of the manifest's image, when GFD reports driver versions on the nodes."""
        version = driver_release(manifest)
        if version is None or not any(DRIVER_LABEL in node.labels for node in writer.list_nodes()):
            return None
        return version

    @staticmethod
    def _validator_selector(writer: RolloutClient, key: ObjectKey) -> str | None:
        validators = writer.list_pods(namespace=key.namespace, label_selector=VALIDATOR_SELECTOR)
        return VALIDATOR_SELECTOR if len(validators) else None


def _moves(change: Change) -> bool:
    """Whether the change touches where the DaemonSet's pods go (a node pool added or removed)."""
    return placement_moves(change.before or {}, change.after or {})


def pods_to_evict(reader: PodLister, changes: Sequence[Change]) -> dict[str, list[str]]:
    """node -> ``namespace/name`` of the GPU pods a driver rollout of ``changes`` will evict or delete there
    (the same selection the rollout makes, :func:`gpuplan.planner.driver.node.gpu_pods_on`), read
    when apply asks for confirmation: the plan cannot know which pods will run then.

    Bounded reads: up to :data:`PER_NODE_QUERIES` targeted nodes, one pod list per node with a
    ``spec.nodeName`` field selector (the server filters; cheap on a large cluster); beyond that, one
    paginated list of every pod, filtered here, so the number of requests never grows with the nodes."""
    nodes = sorted(
        {
            node
            for change in changes
            if change.component == "driver" and change.kind == "DaemonSet" and change.disruptive
            for node in change.nodes
        }
    )
    if not nodes:
        return {}
    if len(nodes) <= PER_NODE_QUERIES:
        pods = [
            pod.manifest for node in nodes for pod in reader.list_pods(field_selector=f"spec.nodeName={node}")
        ]
    else:
        pods = [pod.manifest for pod in reader.list_pods()]
    found: dict[str, list[str]] = {}
    for pod in steps.gpu_pods_on(nodes, pods):
        found.setdefault(str(node_of(pod)), []).append(f"{steps.namespace_of(pod)}/{pod_name(pod)}")
    return found


def eviction_notes(evicted: Mapping[str, list[str]], *, shown: int = 10) -> list[str]:
    """One line per node with GPU pods to evict, at most ``shown`` pod names each."""
    lines = []
    for node, pods in sorted(evicted.items()):
        more = f" and {len(pods) - shown} more" if len(pods) > shown else ""
        lines.append(f"driver rollout evicts on {node}: {', '.join(pods[:shown])}{more}")
    return lines


def _reporter(report: Callable[[str], None] | None) -> Callable[[NodeProgress], None] | None:
    if report is None:
        return None

    def hear(progress: NodeProgress) -> None:
        suffix = f": {progress.message}" if progress.message else ""
        report(f"driver: node {progress.index}/{progress.total} {progress.node} {progress.state}{suffix}")

    return hear
