"""The live display of an apply on a terminal: the events scroll, and below them one status line per
component in flight (its gate, nodes ready of desired, elapsed time, the node the gate still waits for), and
under a component gated per node pool one line per pool (its gate, nodes ready of desired), redrawn in
place.

Each redraw moves the cursor up over the status lines it drew last time (``ESC[nA``), writes the new scrolled
lines and the status lines over them, each ending with clear-to-end-of-line (``ESC[K``), then clears below
(``ESC[J``) when fewer lines are left: nothing is blanked first, so nothing flickers. A status line is cut to
the terminal's width (asked at each redraw, so a resized window is followed), so it never wraps and the
cursor arithmetic holds; scrolled lines are left whole. Progress is redrawn at most every
:data:`REDRAW_SECONDS` by the injected clock (a new component or gate at once); a round in between is shown
with the next redraw. When a component's gate passes or it fails, its status line gives way to a one-line
result that stays in the scrollback; the run ends with the summary of :mod:`gpuplan.views.apply_summary`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from gpuplan.planner.apply.model import STOPPED, ApplyEvent
from gpuplan.views.apply_summary import Tally, duration, nodes_of
from gpuplan.views.colour import Palette
from gpuplan.views.event_lines import line_of, pool_name, pool_state, slowest

REDRAW_SECONDS = 0.1
"""The shortest time between two redraws of the status lines (about ten a second at most)."""
ELLIPSIS = "…"


@dataclass
class InFlight:
    """A component's latest gate round, and the clock when its wait was first heard of."""

    event: ApplyEvent
    since: float


class LiveDisplay:
    """A terminal display: scrolled event lines above, one redrawn status line per component below."""

    def __init__(
        self,
        stream: IO[str],
        palette: Palette,
        *,
        width: int | Callable[[], int] = 120,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream, self.palette, self.clock = stream, palette, clock
        self._width = width
        self.tally = Tally()
        self._status: dict[str, InFlight] = {}
        self._judged: set[str] = set()
        """Components whose result line is shown: a later gate of theirs is named by its gate."""
        self._drawn = 0
        self._last_draw: float | None = None

    @property
    def width(self) -> int:
        return self._width() if callable(self._width) else self._width

    def on_event(self, event: ApplyEvent) -> None:
        now = self.clock()
        self.tally.fold(event, now)
        if event.type == "progress" and event.component:
            self._progress(event, event.component, now)
            return
        self._redraw(self._scrolled(event, now), now)

    def _progress(self, event: ApplyEvent, component: str, now: float) -> None:
        if event.state == "passed":
            line = self._result_line(event, component, now)
            self._status.pop(component, None)
            self._redraw([line], now)
            return
        here = self._status.get(component)
        self._status[component] = InFlight(event, here.since if here else now - (event.elapsed or 0.0))
        moved_on = here is None or here.event.gate != event.gate  # a new line, or a new gate: shown at once
        if moved_on or self._last_draw is None or now - self._last_draw >= REDRAW_SECONDS:
            self._redraw([], now)

    def _scrolled(self, event: ApplyEvent, now: float) -> list[str]:
        if event.type == "change_errored" and event.component:
            line = self._failed_line(event, event.component, self._status.get(event.component), now)
            self._status.pop(event.component, None)
            return [line]
        text = line_of(event)
        lines = [self._colour(event, text)] if text is not None else []
        if event.type == "rollback_start":
            self._status.clear()  # the failed and stopped components said so already
        if event.type == "summary":
            self._status.clear()
            lines += self.tally.lines()
        return lines

    def _elapsed(
        self, component: str, now: float, *, final: bool = False, event: ApplyEvent | None = None
    ) -> float:
        """Since the component's first change (its gate time once it is judged); a rollback's restore wait
        since it was first heard of."""
        times = self.tally.components.get(component)
        if times is not None and not self.tally.rolling_back:
            seconds = times.seconds() if final else None
            return seconds if seconds is not None else now - times.started
        here = self._status.get(component)
        if here is not None:
            return now - here.since
        return (event.elapsed if event is not None else None) or 0.0

    def _result_line(self, event: ApplyEvent, component: str, now: float) -> str:
        """``✓ devicePlugin  healthy  1000/1000 nodes  42.1s``; a gate of a component this run did not change
        or judged already (the deferred driver-version gate) by its name."""
        times = self.tally.components.get(component)
        if self.tally.rolling_back:
            word = "restored, healthy"
        elif times is None or component in self._judged:
            word = f"{event.gate or 'health'} passed"
        else:
            word = "healthy"
        self._judged.add(component)
        ready, desired = nodes_of(event)
        nodes = f"  {ready}/{desired} nodes" if desired else ""
        took = duration(self._elapsed(component, now, final=True, event=event))
        return f"{self.palette.green('✓')} {component}  {word}{nodes}  {took}"

    def _failed_line(self, event: ApplyEvent, component: str, failed: InFlight | None, now: float) -> str:
        """``✗ dcgmExporter  failed  812/1000 nodes  31.0s  <the failure>`` (left whole: it is the reason)."""
        word = "stopped" if event.reason == STOPPED else "failed"
        last = failed.event if failed is not None else None
        nodes = f"  {last.ready}/{last.desired} nodes" if last is not None and last.desired else ""
        took = duration(self._elapsed(component, now, final=True))
        mark, word = self.palette.red("✗"), self.palette.red(word)
        return f"{mark} {component}  {word}{nodes}  {took}  {event.message}"

    def _status_lines(self, component: str, here: InFlight, now: float) -> list[str]:
        """The component's line and, when it is gated per node pool, a line per pool under it."""
        event = here.event
        parts = [
            f"{ELLIPSIS} {component}",
            event.gate or "health",
            f"{event.ready}/{event.desired} nodes" if event.desired else "",
            duration(self._elapsed(component, now)),
            slowest(event) if event.message else "",
        ]
        lines = ["  ".join(part for part in parts if part)]
        width = max((len(pool_name(pool)) for pool in event.pools or ()), default=0)
        for pool in event.pools or ():
            lines.append(
                f"    {pool_name(pool):<{width}}  {pool_state(pool)}  {pool.ready}/{pool.desired} nodes"
            )
        colour = "red" if event.state == "failed" else "yellow"
        # the last column left free: no terminal wraps early
        return [self.palette.paint(colour, truncate(line, self.width - 1)) for line in lines]

    def _colour(self, event: ApplyEvent, text: str) -> str:
        if event.type == "summary":
            return self.palette.paint("green", text)
        return text

    def _redraw(self, scrolled: list[str], now: float) -> None:
        parts = [f"\r\x1b[{self._drawn}A"] if self._drawn else []
        parts += [line + "\x1b[K\n" for line in scrolled]
        status = [line for name, here in self._status.items() for line in self._status_lines(name, here, now)]
        parts += [line + "\x1b[K\n" for line in status]
        if self._drawn > len(status):
            parts.append("\x1b[J")  # the lines of components done since
        self.stream.write("".join(parts))
        self.stream.flush()
        self._drawn, self._last_draw = len(status), now


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, its last one an ellipsis when cut."""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + ELLIPSIS
