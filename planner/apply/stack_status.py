"""The stack's status after an apply or a rollback (design §7.3), from its :class:`ApplyResult` and the nodes
ready / desired of each component's DaemonSets once the walk ended (pure).

``Ready`` is True when the walk succeeded and every component gpuplan runs is ready on all its nodes; its
message names what is not (the failure's causes, or ``devicePlugin: 0/1 nodes ready``). A walk that changed
something sets ``Drifted`` to Unknown (``NotChecked``): only ``gpuplan drift report`` judges drift (foreign
components, versions on the nodes, telemetry), and a walk with nothing to do leaves the last report's verdict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.modules import stack_status
from gpuplan.modules.base import ComponentConfig, ComponentName
from gpuplan.planner.apply.model import ApplyResult, Operation, Outcome

_APPLIED = {Operation.APPLY: "Applied", Operation.ROLLBACK: "RolledBack", Operation.RESUME: "Applied"}
_FAILED = {
    Operation.APPLY: "ApplyFailed",
    Operation.ROLLBACK: "RollbackFailed",
    Operation.RESUME: "ApplyFailed",
}


def after_walk(
    result: ApplyResult,
    configs: Mapping[ComponentName, ComponentConfig],
    nodes: Mapping[str, stack_status.NodeCounts],
    *,
    now: str,
    by: str,
    operation: str | None = None,
    versions: Mapping[str, str] | None = None,
    running: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The status document to write (see the module doc); ``operation`` names the run in ``lastApplied``
    (default: the walk's own, ``apply`` or ``rollback``); ``versions``: what each component's DaemonSet
    runs (a rollback returns to versions the spec no longer names); ``running``: what the nodes report of
    the components gpuplan does not own (:func:`stack_status.host_versions`)."""
    entries = stack_status.components(configs, nodes, versions, running)
    conditions = [_ready(result, entries)]
    if result.outcome is not Outcome.NO_CHANGES:
        conditions.append(
            stack_status.condition(
                "Drifted",
                "Unknown",
                "NotChecked",
                f"changed by {operation or result.operation.value} at serial {result.serial}; "
                "`gpuplan drift report` checks for drift",
            )
        )
    status: dict[str, Any] = {"conditions": conditions, "components": entries}
    if result.serial:
        status["serial"] = result.serial
    if result.outcome is not Outcome.NO_CHANGES:
        status["lastApplied"] = {"time": now, "by": by, "operation": operation or result.operation.value}
    return status


def _ready(result: ApplyResult, entries: Mapping[str, Any]) -> dict[str, Any]:
    if not result.ok:
        return stack_status.condition("Ready", "False", _FAILED[result.operation], result.message)
    short = stack_status.not_ready(entries)
    if short:
        return stack_status.condition(
            "Ready", "False", "ComponentsNotReady", "not ready: " + "; ".join(short)
        )
    healthy = stack_status.healthy_words(entries)
    return stack_status.condition(
        "Ready",
        "True",
        _APPLIED[result.operation],
        "every component healthy" + (f": {healthy}" if healthy else ""),
    )
