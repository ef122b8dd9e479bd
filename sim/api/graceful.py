"""Graceful pod deletion: the grace period a pod DELETE gets, as the pod strategy and the generic store
decide.

A real API server does not remove a running pod when it is deleted: ``rest.BeforeDelete`` and the pod
strategy's ``CheckGracefulDelete`` give it a grace period and set ``metadata.deletionTimestamp`` (now + the
period) and ``deletionGracePeriodSeconds``; the pod shows ``Terminating`` and stays until its kubelet has
stopped the containers and deletes it again with ``gracePeriodSeconds=0``. The period is, in that order:

- the request's ``gracePeriodSeconds`` (a negative value counts as 1 s, as ``BeforeDelete`` says), else the
  pod's ``spec.terminationGracePeriodSeconds`` (defaulted to 30 on create), else 0;
- 0 for a pod bound to no node (nothing runs it) and for a pod in a terminal phase (Succeeded, Failed).

A period of 0 removes the pod at once (``kubectl delete --grace-period=0 --force``). A second delete of a
terminating pod may only shorten its period: a longer or equal one changes nothing, 0 removes it.

Pure functions; ``sim.api.lifecycle.Lifecycle._delete_pod`` applies them under the store's lock. Only the
pod DELETE verbs (delete, deletecollection, pods/eviction) are graceful: the cascades the store performs for
the garbage collector and namespace deletion remove pods at once, as they remove every other dependent.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

Obj = dict[str, Any]
DEFAULT_GRACE_SECONDS = 30
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def is_pod(kind: str, group: str) -> bool:
    return kind == "Pod" and not group


def grace_period(pod: Obj, requested: int | None) -> int:
    """The grace period (seconds) a DELETE of ``pod`` with ``gracePeriodSeconds=requested`` gets."""
    if requested is not None:
        period = 1 if requested < 0 else requested
    else:
        period = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS))
    if not (pod.get("spec") or {}).get("nodeName"):
        return 0
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return 0
    return max(period, 0)


def shortens(pod: Obj, period: int) -> bool:
    """Whether a new delete with ``period`` changes a pod that is already terminating (only shorter
    counts)."""
    current = pod.get("metadata", {}).get("deletionGracePeriodSeconds")
    return current is None or period < int(current)


def deletion_timestamp(now: datetime, period: int) -> str:
    """``deletionTimestamp``: when the grace period ends (RFC 3339, whole seconds)."""
    return (now + timedelta(seconds=period)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
