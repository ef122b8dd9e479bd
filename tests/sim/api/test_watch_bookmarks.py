"""When a watch that allows bookmarks gets one: as the apiserver's watch cache schedules them."""

from __future__ import annotations

from gpuplan.sim.api.handlers import bookmark_times


def test_a_short_watch_gets_one_two_seconds_before_its_timeout() -> None:
    assert list(bookmark_times(100.0, 105.0)) == [103.0]


def test_a_long_watch_gets_one_a_minute_and_one_before_its_timeout() -> None:
    assert list(bookmark_times(0.0, 150.0)) == [60.0, 120.0, 148.0]


def test_a_watch_of_two_seconds_or_less_gets_none() -> None:
    assert list(bookmark_times(10.0, 12.0)) == []
    assert list(bookmark_times(10.0, 11.0)) == []
