"""The words of apply's events, shared by the plain lines and the live display
(:mod:`gpuplan.views.progress`, :mod:`gpuplan.views.live`): a change's line, the rollback's outcome, and a
gate wait's progress with the node it still waits for, and each node pool's part of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.planner.apply.model import ApplyEvent
from gpuplan.views.apply_summary import duration

if TYPE_CHECKING:
    from gpuplan.planner.health.wait import PoolProgress

NO_POOL = "(no pool)"
"""How the nodes in no node pool are named beside the pools (as the plan's node labels name them)."""

_SYMBOL = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "adopt": "<=", "no-op": "="}


def line_of(event: ApplyEvent) -> str | None:
    """The plain text of an event: None for progress (each renderer shows it its own way), for a failed
    summary (the command's error says it) and for a summary with no message (the plan shown said it)."""
    symbol = _SYMBOL.get(event.action or "", "")
    if event.type == "apply_start":
        return str(event.message)
    if event.type == "change_start":
        return f"{symbol} {event.address}: {event.action} ..."
    if event.type == "change_complete":
        took = f" ({event.elapsed:.1f}s)" if event.elapsed is not None else ""
        return f"{symbol} {event.address}: {event.action} complete{took}"
    if event.type == "change_errored":
        return f"! {event.message}"
    if event.type == "rollback_complete":
        return rollback_line(event)
    if event.type == "summary":
        return None if event.state == "failed" or not event.message else str(event.message)
    if event.type in ("rollback_start", "note"):
        return str(event.message)
    return None


def rollback_line(event: ApplyEvent) -> str:
    """The outcome of the undo, short: the whole story (what failed, what is left) is the command's error."""
    counts = event.counts or {}
    undone, left = counts.get("undone", 0), counts.get("left", 0)
    if event.rolled_back:
        return f"rollback complete: {undone} change(s) undone"
    if left:
        return f"rollback incomplete: {undone} change(s) undone, {left} could not be (the error says which)"
    return (
        f"rollback incomplete: {undone} change(s) undone, but a restored component is not healthy "
        "(the error says which)"
    )


def waiting_text(event: ApplyEvent) -> str:
    """A gate wait as a log line: ``dcgmExporter: waiting for dcgm-metrics: 812/1000 nodes ready (slowest:
    node-0042: ...) 31.0s``, or ``devicePlugin: rollout passed: 2/2 nodes ready 4.0s``; no count before any
    pod is desired."""
    gate = event.gate or "health"
    head = f"waiting for {gate}" if event.state == "progressing" else f"{gate} {event.state}"
    nodes = f": {nodes_ready(event)}" if event.desired else ""
    detail = f" ({slowest(event)})" if event.state == "progressing" and event.message else ""
    took = f" {duration(event.elapsed)}" if event.elapsed is not None else ""
    pools = f"; per pool: {', '.join(pool_words(pool) for pool in event.pools)}" if event.pools else ""
    return f"{event.component}: {head}{nodes}{detail}{took}{pools}"


def pool_name(pool: PoolProgress) -> str:
    return pool.pool or NO_POOL


def pool_state(pool: PoolProgress) -> str:
    """The gate a pool waits for, else ``passed`` or ``failed``."""
    return (pool.gate or "health") if pool.state == "progressing" else pool.state


def pool_words(pool: PoolProgress) -> str:
    """``training allocatable 10/20``: the pool, the gate it waits for (or that it passed or failed), its
    nodes ready of desired."""
    return f"{pool_name(pool)} {pool_state(pool)} {pool.ready}/{pool.desired}"


def nodes_ready(event: ApplyEvent) -> str:
    return f"{event.ready}/{event.desired} nodes ready"


def slowest(event: ApplyEvent) -> str:
    """What the gate still waits for: ``slowest: NODE: what it lacks`` where it names a node, else its
    message."""
    if not event.node:
        return str(event.message)
    named = event.message if event.message.startswith(event.node) else f"{event.node}: {event.message}"
    return f"slowest: {named}"
