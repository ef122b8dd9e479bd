"""Cron schedules as robfig/cron's standard parser reads them (the CronJob controller's), and their next
times."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from gpuplan.sim.controllers.cron import BatchClock, CronError, parse

T0 = datetime(2026, 3, 2, 10, 7, 30, tzinfo=UTC)  # a Monday


def nexts(spec: str, count: int = 3, start: datetime = T0, zone: ZoneInfo | None = None) -> list[str]:
    schedule, moment, out = parse(spec), start, []
    for _ in range(count):
        found = schedule.next(moment, zone or UTC)
        assert found is not None
        out.append(found.strftime("%Y-%m-%d %H:%M %a"))
        moment = found
    return out


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("*/30 * * * *", ["2026-03-02 10:30 Mon", "2026-03-02 11:00 Mon", "2026-03-02 11:30 Mon"]),
        ("5 * * * *", ["2026-03-02 11:05 Mon", "2026-03-02 12:05 Mon", "2026-03-02 13:05 Mon"]),
        ("0 9-17/4 * * *", ["2026-03-02 13:00 Mon", "2026-03-02 17:00 Mon", "2026-03-03 09:00 Tue"]),
        ("15,45 8 * * MON-FRI", ["2026-03-03 08:15 Tue", "2026-03-03 08:45 Tue", "2026-03-04 08:15 Wed"]),
        ("0 0 1 JAN,jul ?", ["2026-07-01 00:00 Wed", "2027-01-01 00:00 Fri", "2027-07-01 00:00 Thu"]),
        ("@hourly", ["2026-03-02 11:00 Mon", "2026-03-02 12:00 Mon", "2026-03-02 13:00 Mon"]),
        ("@daily", ["2026-03-03 00:00 Tue", "2026-03-04 00:00 Wed", "2026-03-05 00:00 Thu"]),
        ("@weekly", ["2026-03-08 00:00 Sun", "2026-03-15 00:00 Sun", "2026-03-22 00:00 Sun"]),
        ("@monthly", ["2026-04-01 00:00 Wed", "2026-05-01 00:00 Fri", "2026-06-01 00:00 Mon"]),
        ("@yearly", ["2027-01-01 00:00 Fri", "2028-01-01 00:00 Sat", "2029-01-01 00:00 Mon"]),
        ("10/20 * * * *", ["2026-03-02 10:10 Mon", "2026-03-02 10:30 Mon", "2026-03-02 10:50 Mon"]),
    ],
)
def test_next_times(spec: str, expected: list[str]) -> None:
    assert nexts(spec) == expected


def test_both_day_fields_restricted_match_either_one() -> None:
    # the 13th, or any Friday (robfig/cron: OR when neither day field is *)
    assert nexts("0 0 13 * 5") == ["2026-03-06 00:00 Fri", "2026-03-13 00:00 Fri", "2026-03-20 00:00 Fri"]
    # a star in one field: both must match (every day of month, Fridays only)
    assert nexts("0 0 * * 5", 1) == ["2026-03-06 00:00 Fri"]


def test_a_time_zone_moves_the_schedule() -> None:
    berlin = ZoneInfo("Europe/Berlin")  # UTC+1 in March before the switch
    found = parse("0 9 * * *").next(T0, berlin)
    assert found == datetime(2026, 3, 3, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        ("60 * * * *", "end of range (60) above maximum (59): 60"),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
        ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
        ("@every", "unrecognized descriptor: @every"),
        ("x * * * *", "failed to parse int from x"),
    ],
)
def test_refused_schedules_say_why(spec: str, message: str) -> None:
    with pytest.raises(CronError) as refused:
        parse(spec)
    assert str(refused.value).startswith(message)


def test_the_batch_clock_freezes_and_advances() -> None:
    clock = BatchClock(speed=60)
    clock.freeze(T0)
    clock.advance(90)
    assert clock.now() == datetime(2026, 3, 2, 10, 9, 0, tzinfo=UTC)
    assert clock.delay_until(T0) == 0.0
    with pytest.raises(ValueError):
        BatchClock(speed=0)
