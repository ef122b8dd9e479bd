"""What ``drift report --remediate`` may apply (pure): only the reverse of drift on objects gpuplan owns.

The plan is the ordinary plan of :func:`gpuplan.planner.driver.live_plan.build` (so the lock, the write guard,
the gates and the rollback are apply's). It is remediable when every change it makes puts a recorded object
back as the state has it: an update because of drift, or a create of an object deleted outside gpuplan. A
plan with any other change (the spec edited and not applied yet, a component handed to another owner) is
refused: that is a change for a person to review with ``gpuplan apply``. A DaemonSet applied
again only to relabel its nodes (``UPDATE_BECAUSE_NODE_LABELS``) reverses drift when every label the plan
writes puts back the value the state records gpuplan wrote there (``kubectl label node X
nvidia.com/mig.config=... --overwrite``, the report's ``changed`` finding with a ``node``); a node that
joins or a pool edited in the spec is not. Objects of other owners are never in
a plan's changes (they are its conflicts). A driver change that restarts driver pods is refused unless
allowed.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuplan.planner.plan.model import Change, Plan, Reason

REVERSES_DRIFT = frozenset({Reason.UPDATE_BECAUSE_DRIFT, Reason.CREATE_BECAUSE_DELETED_OUTSIDE})


def changes(plan: Plan) -> list[Change]:
    """The plan's changes (no-ops left out)."""
    return [change for change in plan.changes if change.action != "no-op"]


def not_drift(plan: Plan, recorded: Mapping[str, Mapping[str, str]]) -> list[Change]:
    """Changes that do not reverse drift: a reason to refuse the remediation. ``recorded``: the state's
    ``node_labels`` (node -> label -> the value gpuplan wrote)."""
    relabels_back = _restores_labels(plan, recorded)
    return [
        change
        for change in changes(plan)
        if change.reason not in REVERSES_DRIFT
        and not (change.reason == Reason.UPDATE_BECAUSE_NODE_LABELS and relabels_back)
    ]


def _restores_labels(plan: Plan, recorded: Mapping[str, Mapping[str, str]]) -> bool:
    writes = [(node, item.label, item.value) for item in plan.node_labels for node in item.nodes]
    return bool(writes) and all(
        value is not None and recorded.get(node, {}).get(label) == value for node, label, value in writes
    )


def disruptive(plan: Plan) -> list[Change]:
    """Changes that restart the driver (evicting GPU pods) or otherwise disrupt running work."""
    return [change for change in changes(plan) if change.disruptive]
