"""Cron schedules as the CronJob controller reads them, and the batch controllers' clock.

``parse(text)`` accepts what ``cron.ParseStandard`` of github.com/robfig/cron/v3 accepts (the parser
kube-controller-manager's cronjob controller uses): five fields (minute, hour, day of month, month, day of
week) of ``*``, ``?``, numbers, ranges ``a-b``, steps ``*/n`` ``a-b/n`` ``a/n``, lists ``a,b``, month names
JAN-DEC and day names SUN-SAT; or a macro ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily``
(``@midnight``), ``@hourly``. As in robfig/cron, when both day fields are restricted a day matching either
one matches; when one is ``*`` (or ``?``) both must match. ``Schedule.next(after)`` is the first minute
strictly after ``after``, in the schedule's time zone.

``BatchClock`` is the wall clock of the Job and CronJob controllers: UTC now, running ``speed`` times as fast
as real time from the moment it was made (``timing.batchClockSpeed``), or frozen at a time the tests set and
advance (``freeze``, ``advance``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTHS = {n: i + 1 for i, n in enumerate(_MONTH_NAMES)}
_DAYS = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# (low, high, names) per field, as robfig/cron's bounds
_FIELDS: tuple[tuple[int, int, dict[str, int]], ...] = (
    (0, 59, {}),
    (0, 23, {}),
    (1, 31, {}),
    (1, 12, _MONTHS),
    (0, 6, _DAYS),
)
_SEARCH_YEARS = 5


class CronError(ValueError):
    """A schedule the parser refuses (the message names why)."""


@dataclass(frozen=True)
class Schedule:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    any_day: bool  # day of month was * or ?
    any_weekday: bool

    def matches_day(self, moment: datetime) -> bool:
        dom = moment.day in self.days
        dow = (moment.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow

    def next(self, after: datetime, zone: tzinfo = UTC) -> datetime | None:
        """The first scheduled minute strictly after ``after`` (an aware datetime), or None within 5
        years."""
        local = after.astimezone(zone).replace(second=0, microsecond=0, tzinfo=None) + timedelta(minutes=1)
        limit = local.year + _SEARCH_YEARS
        while local.year <= limit:
            if local.month not in self.months:
                local = (local.replace(day=1) + timedelta(days=32)).replace(day=1, hour=0, minute=0)
            elif not self.matches_day(local):
                local = (local + timedelta(days=1)).replace(hour=0, minute=0)
            elif local.hour not in self.hours:
                local = (local + timedelta(hours=1)).replace(minute=0)
            elif local.minute not in self.minutes:
                local += timedelta(minutes=1)
            else:
                return local.replace(tzinfo=zone).astimezone(UTC)
        return None


def parse(text: str) -> Schedule:
    """The schedule of a CronJob's ``spec.schedule``; ``CronError`` as robfig/cron words a refusal."""
    spec = text.strip()
    if spec.startswith("@"):
        if spec not in MACROS:
            raise CronError(f"unrecognized descriptor: {spec}")
        spec = MACROS[spec]
    fields = spec.split()
    if len(fields) != 5:
        raise CronError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    parsed = [
        _field(field, low, high, names) for field, (low, high, names) in zip(fields, _FIELDS, strict=True)
    ]
    minutes, hours, days, months, weekdays = (frozenset(found) for found, _ in parsed)
    return Schedule(minutes, hours, days, months, weekdays, any_day=parsed[2][1], any_weekday=parsed[4][1])


def _field(field: str, low: int, high: int, names: dict[str, int]) -> tuple[set[int], bool]:
    found: set[int] = set()
    star = False
    for part in field.split(","):
        span, _, step_text = part.partition("/")
        step = _number(step_text, {}) if step_text else 1
        if step <= 0:
            raise CronError(f"step of range should be a positive number: {part}")
        if span in ("*", "?"):
            start, end = low, high
            star = star or step == 1
        elif "-" in span:
            first, _, last = span.partition("-")
            start, end = _number(first, names), _number(last, names)
        else:
            start = _number(span, names)
            end = high if step_text else start
        _check_range(part, start, end, low, high)
        found.update(range(start, end + 1, step))
    return found, star


def _check_range(part: str, start: int, end: int, low: int, high: int) -> None:
    if start < low:
        raise CronError(f"beginning of range ({start}) below minimum ({low}): {part}")
    if end > high:
        raise CronError(f"end of range ({end}) above maximum ({high}): {part}")
    if start > end:
        raise CronError(f"beginning of range ({start}) beyond end of range ({end}): {part}")


def _number(text: str, names: dict[str, int]) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise CronError(f"failed to parse int from {text}: strconv.Atoi: parsing {text!r}: invalid syntax")
    return int(text)


class BatchClock:
    """UTC wall time for the Job and CronJob controllers (see the module docstring)."""

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("the batch clock's speed must be above 0")
        self.speed = speed
        self._origin = datetime.now(UTC)
        self._started = time.monotonic()
        self._frozen: datetime | None = None

    def now(self) -> datetime:
        if self._frozen is not None:
            return self._frozen
        return self._origin + timedelta(seconds=(time.monotonic() - self._started) * self.speed)

    def delay_until(self, moment: datetime) -> float:
        """Real seconds until the clock reads ``moment`` (0 when past; frozen: 0 when past, else an hour,
        the timer then only re-checks)."""
        remaining = (moment - self.now()).total_seconds()
        if remaining <= 0:
            return 0.0
        return 3600.0 if self._frozen is not None else remaining / self.speed

    def freeze(self, moment: datetime) -> None:
        self._frozen = moment.astimezone(UTC)

    def advance(self, seconds: float) -> None:
        if self._frozen is None:
            self._frozen = self.now()
        self._frozen += timedelta(seconds=seconds)
