"""The write guard: a write held to the resourceVersion the plan read, and what it does when that moved.

A write carries the resourceVersion the plan read. A DaemonSet's status changes
its resourceVersion without anyone touching what gpuplan owns (a pod restarts, a node joins), so when the
writer reports :class:`~gpuplan.providers.protocols.DriftDetected`, the object is read again: if every
field of the plan's before-object is unchanged (the planner's own owned-field diff) the write goes ahead at
the version just read, conditioned on it again, and a further status write racing it is met the same way (a
bounded number of times); if an owned field changed, :class:`OwnedFieldsChanged` stops the apply naming the
field, its values and who changed it. The guard holds writes to the fields gpuplan writes: a change to another
manager's field (a label, ``kubectl rollout restart``) does not stop it, as server-side apply leaves those
alone. A saved plan is held more strictly before the walk starts (planner/plan/planfile.py ``check_fresh``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from gpuplan.planner.diff import fields as diff
from gpuplan.planner.diff import normalize
from gpuplan.providers.protocols import DriftDetected, ObjectReader, contains
from gpuplan.providers.snapshot import LiveObject, ObjectKey

W = TypeVar("W")  # what a guarded write returns (the object written, or the deleted one)
GUARD_ATTEMPTS = 5
"""Writes one change makes at most while status writes keep moving its object's resourceVersion between the
guard's read and its write (each attempt re-reads; a DaemonSet's status settles within a few writes)."""


class OwnedFieldsChanged(DriftDetected):
    """A field gpuplan owns changed since the plan read the object: the write was not made."""

    def __init__(
        self, key: ObjectKey, *, expected: str | None, found: LiveObject, changes: Sequence[diff.FieldChange]
    ) -> None:
        super().__init__(key, expected=expected, found=found)
        managers = diff.attribute(found.manifest, [change.path for change in changes])
        more = f" (and {len(changes) - 1} more)" if len(changes) > 1 else ""
        self.summary = f"{key.ref} changed since the plan: field {changes[0].path}{more}"
        self.args = (self.summary,)
        self.detail = "\n".join(_described(change, managers.get(change.path, ())) for change in changes[:5])
        self.fields = tuple(change.path for change in changes)


def _described(change: diff.FieldChange, managers: Sequence[str]) -> str:
    by = f" (changed by {', '.join(managers)})" if managers else ""
    return f"{change.path}: {normalize.plain(change.before)!r} -> {normalize.plain(change.after)!r}{by}"


def guarded_write(
    reader: ObjectReader,
    key: ObjectKey,
    expected: str | None,
    before: Mapping[str, Any] | None,
    write: Callable[[str | None], W],
) -> W:
    """``write`` at the plan's version ``expected``; when only what gpuplan does not own moved (status), at
    the version just read, again while status writes race it (:data:`GUARD_ATTEMPTS`). Raises DriftDetected
    when the object is gone or was absent at plan time, OwnedFieldsChanged when a field of ``before`` changed.
    The walker's writes go through it (:mod:`gpuplan.planner.apply.steps`); any other write held to a plan's
    version can."""
    version, attempt = expected, 1
    while True:
        try:
            return write(version)
        except DriftDetected:
            live = reader.read(key)
            if live is None or expected is None or before is None:
                raise
            changes = _owned_changes(live, before)
            if changes:
                raise OwnedFieldsChanged(key, expected=expected, found=live, changes=changes) from None
            if attempt >= GUARD_ATTEMPTS:
                raise
            attempt, version = attempt + 1, live.resource_version


def _owned_changes(live: LiveObject, before: Mapping[str, Any]) -> tuple[diff.FieldChange, ...]:
    """The fields of the plan's before-object that ``live`` no longer holds, as the plan's diff compares them
    (server defaults, list order and quantity spelling are not changes)."""
    if contains(live.manifest, before):
        return ()
    return diff.diff(before, diff.owned_view(live.manifest, before))
