"""The node labels of an apply (design §7.1), as the GPU Operator's node labeller writes them for its
operands: written, journaled, recorded in the state and put back when the apply fails.

The plan lists them per node pool (``Plan.node_labels``, from ``Spec.label_rules``). Most are written before
the components' changes (the device plugin's config-manager reads ``nvidia.com/device-plugin.config`` when its
pod starts). The labels of a rule that follows GFD (the mig-manager's deploy label and
``nvidia.com/mig.config`` on the nodes GFD labels ``nvidia.com/mig.capable=true``) wait for the gates of
their component instead: its dependencies' gates have passed then, so GFD has labelled the nodes, and one
node list finds the MIG-capable nodes that joined or were labelled since the plan was made.

Crash safety, as every other step of the walker: a journal entry (``<component>/Node/<node>``, the label's
value before and after) is written before each label write, and the state's record of the labels gpuplan
owns, with the entry marked done, after it; :func:`gpuplan.planner.apply.journal.recover` records a write
that landed before a ``kill -9``. The labels written with a label whenever it changes (the mig-manager's
``nvidia.com/mig.config.state=pending``, so the old config's ``success`` cannot pass its gate) are written
with it, not recorded: the component owns them.

In the GPU Operator's pod-template shape the operands' deploy labels (``nvidia.com/gpu.deploy.<operand>``)
are written only where a node has none and put back only where the node still has gpuplan's value: a
``false`` or ``paused-for-...`` that k8s-driver-manager or the mig-manager set in between is theirs.

Every write is a merge patch naming only its labels (``ApplyClient.label_node``), not a server-side apply:
one field manager's apply of one label set would remove the labels it applied before and left out now (the
other rules' and pools'), and it cannot say "only where absent", which needs the node's value read first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuplan.errors import GpuplanError
from gpuplan.planner import pools
from gpuplan.planner.apply.journal import Recorder
from gpuplan.planner.plan.model import NodeLabels
from gpuplan.providers.protocols import ApplyClient
from gpuplan.providers.snapshot import ObjectKey


@dataclass(frozen=True)
class Written:
    """One label an apply wrote on one node (``value``; None: removed), its value before, and the state's
    record of it before."""

    component: str
    node: str
    label: str
    value: str | None
    before: str | None
    recorded: str | None


class NodeLabeller:
    """The node label writes of one apply (thread-safe: gates run in workers)."""

    def __init__(
        self,
        rules: Sequence[pools.LabelRule],
        planned: pools.PlannedPools,
        recorder: Recorder,
        report: Callable[[str, str], None],
    ) -> None:
        self.rules, self.planned, self.recorder, self.report = rules, planned, recorder, report
        self.written: list[Written] = []
        self._lock = threading.Lock()

    def follows_gfd(self, label: str) -> str | None:
        """The component whose gates ``label`` waits for (a rule that follows GFD), else None."""
        return next(
            (rule.component for rule in self.rules if rule.follows_gfd and label in rule.wanted.written()),
            None,
        )

    def write(self, writer: ApplyClient, item: NodeLabels) -> None:
        """Set (or remove) ``item``'s label on each of its nodes."""
        component = pools.component_of(self.rules, item.label)
        for node in item.nodes:
            self._write(writer, component, node, item.label, item.value, item.before[node])
        pool = f"{item.pool}: " if item.pool else ""
        self.report(f"{pool}{item.describe()}", component)

    def before_gates(self, writer: ApplyClient, component: str) -> list[NodeLabels]:
        """The labels ``component``'s rules that follow GFD want, on the nodes as they are now (one node
        list), written where they differ; what was written."""
        rules = [rule for rule in self.rules if rule.component == component and rule.follows_gfd]
        if not rules:
            return []
        nodes = [(live.key.name, dict(live.labels)) for live in writer.list_nodes()]
        # the pools the plan decided (GFD has labelled the nodes since, and may have renamed their product)
        placed = [(name, self.planned.labels(name, labels)) for name, labels in nodes]
        members = pools.membership(self.planned.selectors, placed)
        wanted = pools.wanted_labels(rules, members, nodes)
        work = pools.label_work(wanted, members, nodes, {}, pools.if_absent_labels(rules))
        items = [NodeLabels(pool=w.pool, label=w.label, value=w.value, before=dict(w.before)) for w in work]
        for item in items:
            self.write(writer, item)
        return items

    def restore(self, writer: ApplyClient) -> list[tuple[Written, GpuplanError]]:
        """Put back every label this apply wrote, newest first, and the state's record of it; the writes that
        failed (the others are still put back)."""
        failed = []
        honoured = pools.if_absent_labels(self.rules)
        for written in reversed(self.written):
            try:
                if written.label in honoured and self._leave_theirs(writer, written):
                    continue
                self._put(writer, written, written.before, was=written.value, record=written.recorded)
            except GpuplanError as exc:
                failed.append((written, exc))
        return failed

    def _leave_theirs(self, writer: ApplyClient, written: Written) -> bool:
        """Whether someone set another value of ``written``'s label since this apply wrote it: that value
        stays, and the state no longer records the label as gpuplan's."""
        live = writer.read(ObjectKey("v1", "Node", None, written.node))
        now = live.labels.get(written.label) if live is not None else written.value
        if now == written.value:
            return False
        label, node = written.label, written.node
        address = self.recorder.begin_labels(written.component, node, {label: now}, {label: now})
        self.recorder.labelled(address, node, {label: None})
        return True

    def _write(
        self,
        writer: ApplyClient,
        component: str,
        node: str,
        label: str,
        value: str | None,
        before: str | None,
    ) -> None:
        recorded = self.recorder.state.node_labels.get(node, {}).get(label)
        written = Written(component, node, label, value, before, recorded)
        self._put(writer, written, value, was=before, record=value)
        with self._lock:
            self.written.append(written)

    def _put(
        self, writer: ApplyClient, written: Written, value: str | None, *, was: str | None, record: str | None
    ) -> None:
        label, node = written.label, written.node
        address = self.recorder.begin_labels(written.component, node, {label: was}, {label: value})
        resets = pools.written_with(self.rules, label) if value is not None else {}
        writer.label_node(node, {label: value, **resets})
        self.recorder.labelled(address, node, {label: record})
