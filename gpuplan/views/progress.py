"""Apply progress: three renderers of the walker's :class:`~gpuplan.planner.apply.model.ApplyEvent` stream.

- :class:`JsonLines`: ``apply --json``, one JSON object per line (design §4.1), flushed at once so a pipe
  reader sees each event as it happens.
- :class:`PlainLines`: one line per event when stdout is not a terminal (CI logs); a component's progress is
  printed only when its gate, state or ready count changes, so a long wait is not a flood.
- :class:`LiveDisplay`: on a terminal, one line per component (nodes ready/desired, elapsed, the current gate)
  redrawn in place with plain ANSI cursor moves (no dependency); the other events scroll above it.

Every fact is said once in the human renderers (JSON keeps every event whole). A failed gate's progress report
is not printed as a line: the ``change_errored`` line that follows says the same with the address, pod and
node (and a restored component that stays unhealthy is named in the final error). ``rollback_complete`` is one
short line from its counts. A failed ``summary`` is not printed at all: the command ends by raising it as its
``Error:`` line on stderr (the same text), so a log that merges stdout and stderr shows the verdict once.

:func:`for_stream` picks one, as ``--json`` and the stream's ``isatty`` say. Callers: the ``apply`` command,
and ``gpuplan rollback`` / ``gpuplan demo``. The walker serialises calls, so none needs a lock.
"""

from __future__ import annotations

import json
from typing import IO

from gpuplan.planner.apply.model import ApplyEvent, ApplyHooks
from gpuplan.providers.snapshot import STACK_LABEL
from gpuplan.views.colour import Palette

_SYMBOL = {"create": "+", "update": "~", "replace": "-/+", "delete": "-", "adopt": "<=", "no-op": "="}


class JsonLines:
    """``apply --json``: one object per line."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def on_event(self, event: ApplyEvent) -> None:
        self.stream.write(json.dumps(event.to_json(), sort_keys=False) + "\n")
        self.stream.flush()


def line_of(event: ApplyEvent) -> str | None:
    """The plain text of an event: None for progress (each renderer shows it its own way) and for a failed
    summary (the command's error says it)."""
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
        return None if event.state == "failed" else str(event.message)  # failed: the command's Error: line
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


def progress_text(event: ApplyEvent) -> str:
    """``dcgmExporter: 1/1 ready, 2.3s, rollout progressing: ...`` (no count before any pod is desired)."""
    parts = [
        f"{event.ready}/{event.desired} ready" if event.desired else "",
        f"{event.elapsed:.1f}s" if event.elapsed is not None else "",
    ]
    head = ", ".join(part for part in parts if part)
    lead = f"{head}, " if head else ""
    return f"{event.component}: {lead}{event.gate or 'health'} {event.state}: {event.message}"


class PlainLines:
    """Plain lines for logs; progress only when it changes."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._last: dict[str, tuple[str | None, str | None, int | None]] = {}

    def on_event(self, event: ApplyEvent) -> None:
        if event.type == "progress":
            if event.state == "failed":
                return  # the change_errored line (or the final error) says it, with the pod and node
            key = (event.gate, event.state, event.ready)
            if self._last.get(event.component or "") == key:
                return
            self._last[event.component or ""] = key
            text: str | None = "  " + progress_text(event)
        else:
            text = line_of(event)
        if text is not None:
            self.stream.write(text + "\n")
            self.stream.flush()


class LiveDisplay:
    """A terminal display: scrolled event lines above, one redrawn status line per component below."""

    def __init__(self, stream: IO[str], palette: Palette, *, width: int = 120) -> None:
        self.stream = stream
        self.palette = palette
        self.width = width
        self._status: dict[str, str] = {}
        self._drawn = 0

    def on_event(self, event: ApplyEvent) -> None:
        self._erase()
        if event.type == "progress" and event.component:
            self._status[event.component] = self._status_line(event)
        else:
            text = line_of(event)
            if text is not None:
                self.stream.write(self._colour(event, text) + "\n")
            if (
                event.type in ("change_errored", "summary", "rollback_start")
                and event.component in self._status
            ):
                self._status.pop(event.component or "", None)
            if event.type == "summary":
                self._status.clear()
        self._draw()
        self.stream.flush()

    def _status_line(self, event: ApplyEvent) -> str:
        text = progress_text(event)
        if len(text) > self.width:
            text = text[: self.width - 1] + "…"
        colour = {"passed": "green", "failed": "red"}.get(event.state or "", "yellow")
        return self.palette.paint(colour, text)

    def _colour(self, event: ApplyEvent, text: str) -> str:
        if event.type == "change_errored" or (event.type == "summary" and event.state == "failed"):
            return self.palette.paint("red", text)
        if event.type == "summary":
            return self.palette.paint("green", text)
        return text

    def _erase(self) -> None:
        # cursor up one line and clear it, once per status line drawn last time
        self.stream.write("\x1b[1A\x1b[2K" * self._drawn)
        self._drawn = 0

    def _draw(self) -> None:
        for line in self._status.values():
            self.stream.write(line + "\n")
        self._drawn = len(self._status)


def for_stream(stream: IO[str], *, as_json: bool, palette: Palette) -> ApplyHooks:
    """JSON lines with ``--json``; the live display on a terminal; plain lines otherwise."""
    if as_json:
        return JsonLines(stream)
    isatty = getattr(stream, "isatty", None)
    if callable(isatty) and isatty():
        return LiveDisplay(stream, palette)
    return PlainLines(stream)


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
