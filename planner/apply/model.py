"""The values apply works with: its options, the events it reports, the hooks that hear them, its result.

:func:`gpuplan.planner.apply.walker.apply` takes :class:`ApplyOptions`, reports every step as an
:class:`ApplyEvent` to an :class:`ApplyHooks` (the views in :mod:`gpuplan.views.progress` render them on a
terminal, as plain lines or as JSON lines, design §4.1) and returns an :class:`ApplyResult`. Callers: the
``apply`` command, and ``gpuplan rollback`` / ``gpuplan demo``, which call the walker with their own hooks.

The event types are the contract of ``apply --json``: ``apply_start``, ``change_start``, ``progress``,
``change_complete``, ``change_errored``, ``rollback_start``, ``rollback_complete``, ``summary``; plus
``note`` for things worth a line that are not changes (the stack namespace created, an interrupted apply
reconciled).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol

from gpuplan.errors import GpuplanError

if TYPE_CHECKING:
    from gpuplan.planner.driver.step import RollsDriver
    from gpuplan.planner.health.wait import PoolProgress
    from gpuplan.planner.plan.model import Change, NodeLabels, Plan
    from gpuplan.providers.protocols import ApplyClient, MetricsQuerier

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
    pools: tuple[PoolProgress, ...] | None = None
    """A ``progress`` event of a component gated per node pool: each pool's gate, state, ready and desired."""

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
    the walk is sequential whatever ``parallelism`` says. A change of the driver DaemonSet is rolled node by
    node by a :class:`~gpuplan.planner.driver.step.DriverRollout` the walker makes for the spec;
    ``driver_rollout`` replaces it (a test's clock, a shorter node timeout).
    """

    operation: Operation = field(default_factory=lambda: Operation.APPLY)
    rollback: bool = True
    parallelism: int = 4
    health_timeout: Mapping[str, float] = field(default_factory=dict)
    """component -> seconds, overriding the spec's healthTimeoutSeconds."""
    unschedulable_grace: float = 15.0
    poll_seconds: float = 1.0
    delete_timeout: float = 120.0
    """How long a delete may take to finish (finalizers, the pods' cascade) before it fails."""
    writer_factory: Callable[[], ApplyClient] | None = None
    prometheus: Callable[[], MetricsQuerier] | None = None
    """Opens the spec's Prometheus (``spec.telemetry.prometheus``) should the DCGM metrics gate need it
    (:mod:`gpuplan.planner.health.metrics_paths`)."""
    driver_rollout: RollsDriver | None = None
    returning_to: int | None = None
    """The generation a ``gpuplan rollback`` returns to: its verdict names it."""


class Operation(StrEnum):
    """What the walker carries out: an apply of a plan, a rollback to a generation, or the check of what an
    interrupted apply left."""

    APPLY = "apply"
    ROLLBACK = "rollback"
    RESUME = "resume"
    TAKEOVER = "takeover"


class Outcome(StrEnum):
    """How it ended."""

    APPLIED = "applied"
    """Every change applied and every changed component healthy."""
    NO_CHANGES = "no-changes"
    RESUMED = "resumed"
    """The interrupted apply's changes are healthy (its half-made components undone); the journal is
    cleared."""
    ROLLED_BACK = "rolled-back"
    """It failed, and everything it changed is as before, its restored components healthy."""
    ROLLBACK_INCOMPLETE = "rollback-incomplete"
    """It failed, and undoing it failed too: the journal names what is left."""
    KEPT = "kept"
    """It failed, and with ``--no-rollback`` its changes stay, the failed components tainted."""


@dataclass(frozen=True)
class Walk:
    """What the walker carries out: the changes, the resourceVersions the plan read (for the write guard),
    the digest of the spec it was made from, and where the stack lives."""

    stack: str
    changes: tuple[Change, ...]
    resource_versions: Mapping[str, str] = field(default_factory=dict)
    spec_digest: str | None = None
    namespace: str = ""
    namespace_exists: bool = True
    counts: Mapping[str, int] = field(default_factory=dict)
    has_changes: bool = True
    """Whether it changes anything (a plan's exit-code rule): the driver's version gate waits only then."""
    node_labels: tuple[NodeLabels, ...] = ()
    """The node pools' node labels to write before the components' changes."""
    pool_of: Mapping[str, str] = field(default_factory=dict)
    """node -> the node pool the plan put it in."""
    pool_identity: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """node -> the GPU identity the plan placed it by (:attr:`Plan.pool_identity`)."""

    @classmethod
    def of(cls, plan: Plan) -> Walk:
        counts = {k: v for k, v in plan.summary.model_dump(by_alias=True).items() if v}
        return cls(
            plan.stack,
            plan.changes,
            plan.resource_versions,
            plan.spec_digest,
            plan.namespace,
            plan.namespace_exists,
            counts,
            plan.has_changes,
            plan.node_labels,
            {node: pool for pool, nodes in plan.pools.items() for node in nodes},
            plan.pool_identity,
        )


STOPPED = "Stopped"
"""The reason of a component stopped because another failed or the apply was interrupted (not a cause)."""


@dataclass
class ApplyResult:
    """What happened, as data: the operation, its outcome, the changes made, the failures (their causes and
    the components merely stopped by them), what was undone and what an incomplete undo left. Views and the
    ``Error:`` line are rendered from it (:attr:`message` is the walker's one-sentence verdict)."""

    operation: Operation = Operation.APPLY
    outcome: Outcome = Outcome.APPLIED
    changed: list[str] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    """Addresses of the changes undone, in the order they were undone."""
    restored: list[str] = field(default_factory=list)
    """Components the rollback restored and found healthy again."""
    left: list[str] = field(default_factory=list)
    """What an incomplete rollback could not undo, or restored but found unhealthy."""
    tainted: list[str] = field(default_factory=list)
    kept: int = 0
    """Changes that stay applied: with ``--no-rollback``, or the healthy ones an interrupted apply made."""
    half_made: list[str] = field(default_factory=list)
    """Components an interrupted apply left half-made (undone when resumed)."""
    returning_to: int | None = None
    serial: int = 0
    events: list[ApplyEvent] = field(default_factory=list)
    drift: bool = False
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.APPLIED, Outcome.NO_CHANGES, Outcome.RESUMED)

    @property
    def rollback_complete(self) -> bool:
        return self.outcome is not Outcome.ROLLBACK_INCOMPLETE

    @property
    def causes(self) -> list[Failure]:
        """The failures that failed it, without the components merely stopped by them."""
        return [f for f in self.failed if f.reason != STOPPED] or list(self.failed)

    @property
    def message(self) -> str:
        """The verdict in one sentence (the ``summary`` and ``rollback_complete`` events' message)."""
        return verdict(self)


_FAILED = {
    Operation.APPLY: "Apply failed",
    Operation.ROLLBACK: "Rollback failed",
    Operation.RESUME: "The interrupted apply failed its health gates",
    Operation.TAKEOVER: "Takeover failed",
}
_BEFORE = {
    Operation.APPLY: "before this apply",
    Operation.ROLLBACK: "before this rollback",
    Operation.RESUME: "before the interrupted apply",
    Operation.TAKEOVER: "before this takeover (the GPU Operator's)",
}


def verdict(result: ApplyResult) -> str:
    """The one-sentence account of ``result``, by operation and outcome."""
    if result.outcome is Outcome.NO_CHANGES:
        return "No changes. The cluster matches the configuration."
    if result.outcome is Outcome.APPLIED:
        applied = f"{len(result.changed)} change(s) applied, every changed component healthy"
        if result.operation is Operation.ROLLBACK:
            return (
                f"Rolled back to generation {result.returning_to}: {applied}; the state is at serial "
                f"{result.serial}, and this rollback is kept as a new generation."
            )
        if result.operation is Operation.TAKEOVER:
            return f"Takeover complete: {applied}."
        return f"Apply complete: {applied}."
    if result.outcome is Outcome.RESUMED:
        parts = [f"{result.kept} change(s) healthy"] if result.kept or not result.half_made else []
        if result.half_made:
            parts.append(
                f"half-made {', '.join(result.half_made)} undone ({len(result.rolled_back)} change(s))"
            )
        return f"The interrupted apply resumed: {', '.join(parts)}; its journal is cleared."
    if result.operation is Operation.RESUME and not result.failed:
        return (
            f"The interrupted apply left {', '.join(result.half_made)} half-made, and undoing it failed: "
            f"{'; '.join(result.left)}. The journal in the state names what is left; the next apply "
            "retries it."
        )
    causes = "; ".join(dict.fromkeys(failure.describe() for failure in result.causes))
    return f"{failed_words(result.operation)}: {causes}. {after_failure(result)}"


def failed_words(operation: Operation) -> str:
    """How a failure of ``operation`` begins: ``Apply failed``, ``Rollback failed``, ..."""
    return _FAILED[operation]


def after_failure(result: ApplyResult) -> str:
    """What became of a failed run's changes: rolled back (as before it), rollback incomplete (what is
    left), or kept with --no-rollback (what is tainted)."""
    undone = (
        f" Undone: {', '.join(result.rolled_back)}."
        if result.operation is Operation.RESUME and result.rolled_back
        else ""
    )
    return _after_failure(result) + undone


def _after_failure(result: ApplyResult) -> str:
    if result.outcome is Outcome.KEPT:
        tainted = (
            f"; tainted (the next plan replaces them): {', '.join(result.tainted)}" if result.tainted else ""
        )
        return f"Not rolled back (--no-rollback): {result.kept} change(s) stay applied{tainted}."
    if result.outcome is Outcome.ROLLBACK_INCOMPLETE:
        return (
            "Rollback incomplete: "
            + "; ".join(result.left)
            + ". The journal in the state names what is left; the next apply reconciles it."
        )
    healthy = f"; restored components healthy: {', '.join(result.restored)}" if result.restored else ""
    return (
        f"Rolled back: {len(result.rolled_back)} change(s) undone, the cluster and the state are as "
        f"{_BEFORE[result.operation]}{healthy}."
    )
