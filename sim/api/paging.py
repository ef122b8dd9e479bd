"""Paged, consistent list snapshots: continue tokens, the objects as of a resourceVersion, and one page.

A continue token is ``base64({"v": "meta.k8s.io/v1", "rv": <list resourceVersion>, "start": <last key>\\0})``,
as the apiserver encodes it: it pins the list's resourceVersion, so later pages are rebuilt at that version
from the event log (``snapshot``), and 410 Expired once the log has dropped a change of that resource made
after it. ``Page.remaining`` serves ``remainingItemCount``, which the store sets only without selectors.

Called by ``sim.api.store`` (``Store.list``) under the store lock; pure functions of what it passes in.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json

from gpuplan.sim.api import errors, selectors
from gpuplan.sim.api.objects import Key, Obj
from gpuplan.sim.api.registry import ResourceType
from gpuplan.sim.api.watchlog import EventLog

CONTINUE_TOO_OLD = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)


def encode_continue(list_rv: int, last: Key) -> str:
    start = f"{last[0]}/{last[1]}" if last[0] else last[1]
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": list_rv, "start": start + "\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, Key]:
    """(the list's resourceVersion, the last key served); 400 BadRequest for a token that is not one."""
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        start = raw["start"].rstrip("\x00")
        namespace, _, name = start.rpartition("/")
        return int(raw["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
        raise errors.bad_request(f"continue key is not valid: {exc}") from exc


def snapshot(
    rt: ResourceType, list_rv: int, live: dict[Key, Obj], live_keys: list[Key], log: EventLog
) -> tuple[dict[Key, Obj], list[Key]]:
    """The objects of ``rt`` as of ``list_rv`` and their sorted keys: the live ones when nothing changed
    since, else the live ones with the logged changes after ``list_rv`` undone."""
    if log.is_current(rt, list_rv):
        return live, live_keys
    objects = dict(live)
    for changed, before in log.changes_since(rt, list_rv, CONTINUE_TOO_OLD).items():
        if before is None:
            objects.pop(changed, None)
        else:
            objects[changed] = before
    return objects, sorted(objects)


class Page:
    """One page of a list over sorted keys: from after ``start``, within ``namespace``, up to a limit."""

    def __init__(self, keys: list[Key], namespace: str | None, start: Key | None) -> None:
        self.keys = keys
        self.namespace = namespace
        self.position = bisect.bisect_right(keys, start) if start is not None else 0
        self.end = len(keys)
        if namespace is not None:
            self.position = max(self.position, bisect.bisect_left(keys, (namespace, "")))
            self.end = bisect.bisect_left(keys, (namespace + "\x00", ""))
        self.last: Key | None = None

    def select(
        self,
        objects: dict[Key, Obj],
        labels: selectors.LabelSelector,
        fields: selectors.FieldSelector,
        limit: int | None,
    ) -> tuple[list[Obj], bool]:
        """The matching objects of the page and whether more follow."""
        chosen: list[Obj] = []
        for index in range(self.position, self.end):
            obj = objects[self.keys[index]]
            if labels.matches(obj) and fields.matches(obj):
                if limit and len(chosen) >= limit:
                    return chosen, True
                chosen.append(obj)
                self.last = self.keys[index]
        return chosen, False

    def remaining(self) -> int:
        """Items after the page (without selectors every key in range is an item)."""
        return self.end - bisect.bisect_right(self.keys, self.last) if self.last is not None else 0
