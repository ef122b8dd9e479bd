"""The order of an apply's work: each component's changes as soon as the changes that must come first are made
(those of the components it depends on, directly or not, that write first), each component's gate once its own
changes are made and its dependencies' gates have passed.

The walker (:mod:`gpuplan.planner.apply.walker`) asks :meth:`Schedule.ready` for the tasks it may hand to a
free worker and tells :meth:`Schedule.done` which finished well; a task that failed is never reported done,
so nothing that waits on it is ever ready (the walker stops anyway). Changes come before gates among the
ready tasks, in graph order: with one worker every component's rollout starts before the first gate is
waited for, and with more a ready change takes the next free worker before any gate does.

Why a dependent's changes need no gate and, mostly, no change of its dependencies: the pods order themselves
on each node (the toolkit's driver-validation init container, the device plugin's and GFD's toolkit-validation
init containers, the kubelet's prerequisites), as the GPU Operator's operands do, so the DaemonSets can be
written and roll out together, as a bare ``kubectl apply`` of them all would. What must exist before a
dependent's objects are written is a change of a component that writes first (``Module.writes_first``),
which finishes before any dependent's changes start: the toolkit's RuntimeClass (an API server rejects a pod
that names a missing one), and the driver's node-by-node rollout
(:class:`gpuplan.planner.driver.step.DriverRollout`), which is the driver DaemonSet's change and returns only
once every node runs the new driver, so nothing that depends on the driver starts while it is in progress.
Gates stay in dependency order because their effect checks build on each other (GFD's GPU count against the
device plugin's capacity, the exporter's per-GPU samples against GFD's count).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

TaskKind = Literal["changes", "gate"]


@dataclass(frozen=True)
class Task:
    """One unit of a worker's work: a component's changes, or the wait for its gates."""

    component: str
    kind: TaskKind


class Schedule:
    """Which tasks of one phase may run; not thread-safe (the walker's main loop owns it)."""

    def __init__(
        self,
        depends_on: Mapping[str, Sequence[str]],
        order: Sequence[str],
        with_work: Collection[str],
        *,
        gated: bool,
        writes_after: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """``order``: the components in graph order (ties among ready tasks); ``with_work``: those with
        changes in this phase (the others count as changed and healthy at once, as they were before it);
        ``gated``: whether their gates are waited for (the forward phase) or not (the deletes);
        ``writes_after``: the components whose changes a component's changes wait for (the graph's
        :attr:`~gpuplan.planner.graph.Graph.writes_after`; by default those it depends on)."""
        self._depends_on = {name: tuple(depends_on.get(name, ())) for name in order}
        after = depends_on if writes_after is None else writes_after
        self._writes_after = {name: tuple(after.get(name, ())) for name in order}
        self._order = list(order)
        kinds: tuple[TaskKind, ...] = ("changes", "gate") if gated else ("changes",)
        self._todo = [Task(name, kind) for kind in kinds for name in self._order if name in with_work]
        self._done = {
            Task(name, kind)
            for name in self._order
            for kind in ("changes", "gate")
            if name not in with_work or kind not in kinds
        }

    def pending(self) -> bool:
        """Whether a task was not handed out yet."""
        return bool(self._todo)

    def ready(self, limit: int) -> list[Task]:
        """Up to ``limit`` tasks whose prerequisites are done, changes first; each is handed out once."""
        chosen = [task for task in self._todo if self._prerequisites_done(task)][: max(0, limit)]
        self._todo = [task for task in self._todo if task not in chosen]
        return chosen

    def done(self, task: Task) -> None:
        self._done.add(task)

    def _prerequisites_done(self, task: Task) -> bool:
        if task.kind == "changes":
            return all(Task(dep, "changes") in self._done for dep in self._writes_after[task.component])
        return Task(task.component, "changes") in self._done and all(
            Task(dep, "gate") in self._done for dep in self._depends_on[task.component]
        )
