"""Durations and times as people write them (rocescope.units)."""

from __future__ import annotations

import datetime as dt

import pytest

from rocescope.errors import ConfigError
from rocescope.units import parse_duration, parse_time

NOW = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)


def test_durations() -> None:
    assert parse_duration("10m") == 600
    assert parse_duration("1m30s") == 90
    assert parse_duration("250ms") == 0.25
    assert parse_duration("1.5h") == 5400
    assert parse_duration(" 2 min ") == 120
    assert parse_duration("90") == 90.0
    assert parse_duration(7) == 7.0
    for bad in ("ten minutes", "10m extra", "", True, None, -1, "-5s"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_times_are_now_a_duration_ago_or_iso() -> None:
    assert parse_time("now", NOW) == NOW
    assert parse_time("15m", NOW) == NOW - dt.timedelta(minutes=15)
    assert parse_time("2026-11-22T09:00:00", NOW) == dt.datetime(2026, 11, 22, 9, tzinfo=dt.UTC)  # naive is UTC
    offset = dt.timezone(dt.timedelta(hours=2))
    assert parse_time("2026-11-22T09:00:00+02:00", NOW) == dt.datetime(2026, 11, 22, 9, tzinfo=offset)
    assert abs(parse_time("now") - dt.datetime.now(dt.UTC)) < dt.timedelta(seconds=5)  # default: the clock
    with pytest.raises(ConfigError, match="not a time or duration: 'yesterday-ish'"):
        parse_time("yesterday-ish", NOW)
