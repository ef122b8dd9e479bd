"""Apply progress: three renderers of the walker's :class:`~gpuplan.planner.apply.model.ApplyEvent` stream.

- :class:`JsonLines`: ``apply --json``, one JSON object per line (design §4.1), flushed at once so a pipe
  reader sees each event as it happens; the final ``summary`` carries the run's tally as extra keys.
- :class:`PlainLines`: one line per event when stdout is not a terminal (CI logs); a component's wait is
  named once, and a progress line follows only when what it stands at changes (its gate, state or counts, or
  a node pool's), so a wait that stands still for an hour is one line, not one per round.
- :class:`~gpuplan.views.live.LiveDisplay`: on a terminal, one line per component in flight redrawn in place,
  each replaced by a one-line result when the component is done; the other events scroll above.

Each ends with the summary of :mod:`gpuplan.views.apply_summary` (resources, gate times, total time), after a
failure too. Every renderer takes a clock (the moment an event arrives), so tests drive the times.

Every fact is said once in the human renderers (JSON keeps every event whole). A failed gate's progress report
is not printed as a line: the ``change_errored`` line that follows says the same with the address, pod and
node (and a restored component that stays unhealthy is named in the final error). ``rollback_complete`` is one
short line from its counts. A failed ``summary``'s verdict is not printed (its tally is): the command ends by
raising it as its ``Error:`` line on stderr (the same text), so a log that merges stdout and stderr shows the
verdict once.

:func:`for_stream` picks one, as ``--json`` and the stream's ``isatty`` say. Callers: the ``apply`` command,
and ``gpuplan rollback`` / ``gpuplan demo``. The walker serialises calls, so none needs a lock.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from typing import IO

from gpuplan.planner.apply.model import ApplyEvent, ApplyHooks
from gpuplan.providers.snapshot import STACK_LABEL
from gpuplan.views.apply_summary import Tally
from gpuplan.views.colour import Palette
from gpuplan.views.event_lines import line_of, rollback_line, waiting_text
from gpuplan.views.live import LiveDisplay

__all__ = [
    "JsonLines",
    "LiveDisplay",
    "PlainLines",
    "for_stream",
    "line_of",
    "rollback_line",
    "undo_notes",
]


class JsonLines:
    """``apply --json``: one object per line; the final ``summary`` adds the run's tally (new keys only)."""

    def __init__(self, stream: IO[str], *, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.clock = stream, clock
        self.tally = Tally()

    def on_event(self, event: ApplyEvent) -> None:
        self.tally.fold(event, self.clock())
        document = event.to_json()
        if event.type == "summary":
            document |= {key: value for key, value in self.tally.json_keys().items() if key not in document}
        self.stream.write(json.dumps(document, sort_keys=False) + "\n")
        self.stream.flush()


class PlainLines:
    """Plain lines for logs: every change, and a gate's progress when where it stands changes (a log reader
    learns nothing from a line that repeats the last one with a later time)."""

    def __init__(self, stream: IO[str], *, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.clock = stream, clock
        self.tally = Tally()
        self._last: dict[str, object] = {}
        """component -> where its last progress line stood (gate, state, counts, each pool's)."""

    def on_event(self, event: ApplyEvent) -> None:
        self.tally.fold(event, self.clock())
        if event.type == "progress":
            lines = [f"  {waiting_text(event)}"] if self._due(event) else []
        else:
            self._last.pop(event.component or "", None)  # a wait after this line is named again
            text = line_of(event)
            lines = [text] if text is not None else []
            if event.type == "summary":
                lines += self.tally.lines()
        if lines:
            self.stream.write("".join(line + "\n" for line in lines))
            self.stream.flush()

    def _due(self, event: ApplyEvent) -> bool:
        """Whether a progress event is worth a line: the first of a wait, and one whose gate, state or counts
        (or a node pool's) differ from the last line's. A failed gate is not: the change_errored line (or
        the final error) says it, with the pod and node. The message and the elapsed time are left out of
        the comparison: a message that names the slowest node, or a waiter that starts a new wait for the
        same gate each round, would otherwise print the same standing again and again."""
        if event.state == "failed":
            return False
        stands = (
            event.gate,
            event.state,
            event.ready,
            event.desired,
            tuple((p.pool, p.gate, p.state, p.ready, p.desired) for p in event.pools or ()),
        )
        component = event.component or ""
        if self._last.get(component) == stands:
            return False
        self._last[component] = stands
        return True


def for_stream(
    stream: IO[str], *, as_json: bool, palette: Palette, clock: Callable[[], float] = time.monotonic
) -> ApplyHooks:
    """JSON lines with ``--json``; the live display on a terminal; plain lines otherwise."""
    if as_json:
        return JsonLines(stream, clock=clock)
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return LiveDisplay(stream, palette, width=lambda: shutil.get_terminal_size().columns, clock=clock)
    return PlainLines(stream, clock=clock)


OWN_UNDO_NOTES_SHOWN = 3
"""Changes of gpuplan's own objects that the pre-confirm notes name one per line; more are counted on one
line."""


def undo_notes(document: dict[str, object]) -> list[str]:
    """What the user should know before confirming a saved plan, in a few lines: each disruptive change (the
    plan's disruption text), each delete or replace of an object gpuplan did not create (its ``undo`` note),
    and the deletes and replaces of gpuplan's own objects, which rollback can only recreate as new objects
    (:func:`gpuplan.planner.plan.decide.with_undo`): up to :data:`OWN_UNDO_NOTES_SHOWN` with their notes, else
    one line that counts them, so a destroy plan's twenty deletes do not flood the prompt. ``gpuplan plan``
    (:func:`gpuplan.views.plan_human.render`) shows every note beside its change, from the same document."""
    notes: list[str] = []
    own: list[tuple[str, str, str]] = []  # address, kind, note
    changes = document.get("changes")
    for change in changes if isinstance(changes, list) else ():
        if not isinstance(change, dict):
            continue
        address = str(change.get("address"))
        if change.get("disruptive"):
            notes.append(f"{address}: disruptive: {change.get('disruption')}")
        undo = str(change.get("undo") or "")
        if not undo:
            continue
        if _created_by_gpuplan(change.get("before")):
            own.append((address, str(change.get("kind")), undo))
        else:
            notes.append(f"{address}: {undo}")
    if len(own) <= OWN_UNDO_NOTES_SHOWN:
        return notes + [f"{address}: {undo}" for address, _, undo in own]
    return notes + [_own_undo_count(own)]


def _own_undo_count(own: list[tuple[str, str, str]]) -> str:
    """One line for many deletes and replaces of gpuplan's own objects: how many, what a rollback would cost
    (the DaemonSets' pods restart), and the first few addresses."""
    daemonsets = sum(1 for _, kind, _ in own if kind == "DaemonSet")
    restart = (
        f"; the pods of {daemonsets} DaemonSet{'s' if daemonsets != 1 else ''} restart" if daemonsets else ""
    )
    shown = ", ".join(address for address, _, _ in own[:OWN_UNDO_NOTES_SHOWN])
    return (
        f"{len(own)} deletes or replaces of gpuplan's objects cannot be undone in place: if the apply fails, "
        f"rollback recreates them from their recorded manifests as new objects (new uids{restart}): {shown} "
        f"and {len(own) - OWN_UNDO_NOTES_SHOWN} more (`gpuplan show PLANFILE` gives each note)"
    )


def _created_by_gpuplan(before: object) -> bool:
    """Whether a change's before-object is gpuplan's own: it carries the stack label."""
    metadata = before.get("metadata") if isinstance(before, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    return isinstance(labels, dict) and STACK_LABEL in labels
