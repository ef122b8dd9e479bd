"""The values apply works with: its options, the events it reports, the hooks that hear them, its result.

:func:`gpuplan.planner.apply.walker.apply` takes :class:`ApplyOptions`, reports every step as an
:class:`ApplyEvent`
to an :class:`ApplyHooks` (the views in :mod:`gpuplan.views.progress` render them on a terminal, as plain
lines
or as JSON lines, design §4.1) and returns an :class:`ApplyResult`. Callers: the ``apply`` command, and
``gpuplan rollback`` / ``gpuplan demo``, which call the walker with their own hooks.

The event types are the contract of ``apply --json``: ``apply_start``, ``change_start``, ``progress``,
``change_complete``, ``change_errored``, ``rollback_start``, ``rollback_complete``, ``summary``; plus
``note`` for things worth a line that are not changes (the stack namespace created, an interrupted apply
reconciled).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.providers.protocols import ApplyClient

EventType = Literal[
    "apply_start",
    "change_start",
    "progress",
    "change_complete",
    "change_errored",
    "rollback_start",
    "rollback_complete",
    "summary",
    "note",
]
EVENT_TYPES: tuple[EventType, ...] = (
    "apply_start",
    "change_start",
    "progress",
    "change_complete",
    "change_errored",
    "rollback_start",
    "rollback_complete",
    "summary",
    "note",
)


class ApplyCancelled(GpuplanError):
    """Ctrl-C (SIGINT) or SIGTERM arrived: the walker stops and undoes what this apply changed."""


@dataclass(frozen=True)
class Failure:
    """What failed and why: the object or component, and where the cluster says (pod, node, reason)."""

    address: str
    message: str
    component: str = ""
    reason: str | None = None
    """A pod's waiting reason (CrashLoopBackOff, ImagePullBackOff, ...), Timeout, Drift, Interrupted,
    ApiError."""
    node: str | None = None
    pod: str | None = None
    gate: str | None = None

    def describe(self) -> str:
        # the pod and node, unless the health message already names them (it usually says "pod p on node n")
        where = ", ".join(
            f"{noun} {name}"
            for noun, name in (("pod", self.pod), ("node", self.node))
            if name and name not in self.message
        )
        gate = f" at the {self.gate} gate" if self.gate else ""
        return f"{self.address}{gate}: {self.message}" + (f" [{where}]" if where else "")


@dataclass(frozen=True)
class ApplyEvent:
    """One line of ``apply --json``; fields that do not apply to the type stay None."""

    type: EventType
    message: str = ""
    address: str | None = None
    component: str | None = None
    action: str | None = None
    gate: str | None = None
    state: str | None = None
    ready: int | None = None
    desired: int | None = None
    elapsed: float | None = None
    reason: str | None = None
    node: str | None = None
    pod: str | None = None
    serial: int | None = None
    rolled_back: bool | None = None
    counts: Mapping[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object: ``type`` first, then the fields that are set."""
        document = {key: value for key, value in asdict(self).items() if value is not None}
        if self.elapsed is not None:
            document["elapsed"] = round(self.elapsed, 2)
        return document


class ApplyHooks(Protocol):
    """The engine tells the UI what happens. Called from worker threads one event at a time: the
    walker serialises the calls, so an implementation needs no lock of its own."""

    def on_event(self, event: ApplyEvent) -> None: ...


class NullHooks:
    """Hooks that ignore every event (library callers that only want the result)."""

    def on_event(self, event: ApplyEvent) -> None:
        return None


@dataclass(frozen=True)
class ApplyOptions:
    """How to apply.

    ``writer_factory`` gives each worker thread its own writer (the writer is not thread-safe); without one
    the walk is sequential whatever ``parallelism`` says. ``driver_rollout``, when set, is called instead of
    a plain DaemonSet update for a change of the driver DaemonSet: ``driver_rollout(change, writer, report)``
    performs the node-by-node rollout and returns the live DaemonSet
    (``planner.driver.rollout.roll_driver``); it raises an :class:`~gpuplan.errors.GpuplanError` when a node
    fails.
    """

    rollback: bool = True
    parallelism: int = 4
    health_timeout: Mapping[str, float] = field(default_factory=dict)
    """component -> seconds, overriding the spec's healthTimeoutSeconds."""
    unschedulable_grace: float = 15.0
    poll_seconds: float = 2.0
    delete_timeout: float = 120.0
    """How long a delete may take to finish (finalizers, the pods' cascade) before it fails."""
    writer_factory: Callable[[], ApplyClient] | None = None
    driver_rollout: Callable[..., Any] | None = None


@dataclass
class ApplyResult:
    """What happened. ``ok``: every change applied and healthy. ``rolled_back``: addresses restored."""

    ok: bool
    changed: list[str] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    serial: int = 0
    events: list[ApplyEvent] = field(default_factory=list)
    rollback_complete: bool = True
    """False when an undo step failed too; ``message`` says what is left."""
    message: str = ""
    drift: bool = False
    interrupted: bool = False
