"""What an apply did, folded from its events: the resources added, changed, replaced and destroyed, each
component's gate time, and the total time; said at the end by every renderer (and as new keys of the final
JSON ``summary`` event).

Times come from a clock the renderer is given (the moment each event arrives; the walker serialises them),
so a test drives it with a fake one. A component's gate time runs from its first ``change_start`` to its
first passed ``progress`` (or to its ``change_errored``); a component with no gate to wait for is timed to
its last ``change_complete``. Progress after ``rollback_start`` is the rollback's restore wait: it does not
move the times of the apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplan.planner.apply.model import STOPPED, ApplyEvent

RESOURCE_WORDS = (
    ("adopt", "adopted"),
    ("create", "added"),
    ("update", "changed"),
    ("replace", "replaced"),
    ("delete", "destroyed"),
)
"""Actions and their word, in Terraform's order; ``adopted`` is said only when something was (as Terraform
says ``imported``)."""


@dataclass
class ComponentTimes:
    """One component's run: when its first change started, and how it ended (when, and how many nodes)."""

    started: float
    ended: float | None = None
    result: str = "applied"
    """``healthy`` (its gate passed), ``failed`` (with ``reason``), or ``applied`` (no gate was waited
    for)."""
    reason: str = ""
    ready: int = 0
    desired: int = 0

    def seconds(self) -> float | None:
        return None if self.ended is None else self.ended - self.started


class Tally:
    """Folds the events of one run; :meth:`lines` and :meth:`json_keys` say the result."""

    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.done: dict[str, int] = {}
        self.components: dict[str, ComponentTimes] = {}
        self.started: float | None = None
        self.undone = 0
        self.rolling_back = False
        self.total: float | None = None

    def fold(self, event: ApplyEvent, now: float) -> None:
        if event.type == "apply_start":  # what came before (an interrupted apply's check) is not this run's
            self._clear()
            self.started = now
        elif event.type == "rollback_start":
            self.rolling_back = True
        elif event.type == "rollback_complete":
            self.undone += int((event.counts or {}).get("undone", 0))
        elif event.type == "summary":
            self.total = None if self.started is None else now - self.started
        elif event.component and not self.rolling_back:
            self._fold_component(event, event.component, now)

    def _fold_component(self, event: ApplyEvent, component: str, now: float) -> None:
        times = self.components.get(component)
        if event.type == "change_start" and times is None:
            self.components[component] = ComponentTimes(now)
            return
        if times is None or times.result != "applied":
            return  # a later wait of a component already judged (the deferred driver-version gate)
        if event.type == "change_complete":
            self.done[event.action or ""] = self.done.get(event.action or "", 0) + 1
            times.ended = now
        elif event.type == "progress":
            times.ready, times.desired = nodes_of(event)
            if event.state == "passed":
                times.result, times.ended = "healthy", now
        elif event.type == "change_errored":
            times.result, times.ended, times.reason = "failed", now, event.reason or "failed"

    def resources(self) -> dict[str, int]:
        """``{"added": 3, "changed": 1, "replaced": 0, "destroyed": 0}`` (``adopted`` first when any)."""
        return {
            word: self.done.get(action, 0)
            for action, word in RESOURCE_WORDS
            if action != "adopt" or self.done.get(action)
        }

    def resources_line(self) -> str:
        counts = ", ".join(f"{count} {word}" for word, count in self.resources().items())
        undone = f"; {self.undone} undone by the rollback" if self.undone else ""
        return f"Resources: {counts}{undone}."

    def lines(self) -> list[str]:
        """The summary that stays in the scrollback: the resources, each component's gate time, the total."""
        lines = [self.resources_line()]
        if self.components:
            lines.append("Gate times (first change to gate passed):")
            width = max(len(name) for name in self.components)
            lines += [f"  {name:<{width}}  {gate_words(t)}" for name, t in self.components.items()]
        if self.total is not None:
            lines.append(f"Total time: {duration(self.total)}.")
        return lines

    def json_keys(self) -> dict[str, Any]:
        """New keys of the final ``summary`` event: ``resources``, ``gate_seconds`` (component -> seconds,
        to its pass, its failure, or its last change without a gate) and ``total_seconds``."""
        keys: dict[str, Any] = {
            "resources": self.resources() | ({"undone": self.undone} if self.undone else {}),
            "gate_seconds": {
                name: round(seconds, 2)
                for name, t in self.components.items()
                if (seconds := t.seconds()) is not None
            },
        }
        if self.total is not None:
            keys["total_seconds"] = round(self.total, 2)
        return keys


def nodes_of(event: ApplyEvent) -> tuple[int, int]:
    """A progress event's nodes ready of desired: over all its node pools when it is gated per pool (each
    pool's current gate), else its pending gate's."""
    if event.pools:
        return sum(pool.ready for pool in event.pools), sum(pool.desired for pool in event.pools)
    return event.ready or 0, event.desired or 0


def gate_words(times: ComponentTimes) -> str:
    """``42.1s, healthy on 1000/1000 nodes``, ``failed after 31.0s``, ``2.0s, no gate``."""
    seconds = times.seconds()
    took = duration(seconds) if seconds is not None else "unfinished"
    nodes = f" on {times.ready}/{times.desired} nodes" if times.desired else ""
    if times.result == "healthy":
        return f"{took}, healthy{nodes}"
    if times.result == "failed":  # why is the failure's own line (and the command's error)
        return f"{'stopped' if times.reason == STOPPED else 'failed'} after {took}"
    return f"{took}, no gate" if seconds is not None else "unfinished"


def duration(seconds: float) -> str:
    """``42.1s``, ``3m 12.0s``, ``1h 02m``: short enough for a status line."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}m {rest:04.1f}s"
    hours, minutes = divmod(int(minutes), 60)
    return f"{hours}h {minutes:02d}m"
