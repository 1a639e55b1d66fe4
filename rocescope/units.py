"""Durations and times as people write them: `90s`, `2m`, `1m30s`, `500ms`, `1.5h`, or an ISO time.

Shared by the scenario files and the command line (`analyze --from 15m`), so both read them alike.
"""

from __future__ import annotations

import datetime as dt
import re

from rocescope.errors import ConfigError

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|min|s|m|h)")


def parse_duration(value: object) -> float:
    """Seconds from a number or a string like `10m`, `90s`, `1m30s`, `250ms`, `1.5h`.

    Raises ValueError, so it can serve as a pydantic validator."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string like '10m'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            if not parts or _PART.sub("", text).strip():
                raise ValueError(f"{value!r} is not a duration (e.g. 90, 90s, 2m, 1m30s, 500ms)") from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        raise ValueError("a duration is a number of seconds or a string like '10m'")
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def parse_time(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """`now`, `15m`, `2h`, `90s` (that long before `now`) or an ISO time (UTC when it has no offset)."""
    now = now or dt.datetime.now(dt.UTC)
    if text == "now":
        return now
    try:
        return now - dt.timedelta(seconds=parse_duration(text))
    except ValueError:
        pass
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"not a time or duration: {text!r} (want e.g. 15m, 2h, 2026-11-22T10:00:00)") from None
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)
