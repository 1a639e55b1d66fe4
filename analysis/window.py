"""An analysis window and the frame conventions every read of it keeps: fixed schemas, plain strings, UTC times."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from rocescope.errors import SchemaError

__all__ = ["TS", "Window", "bound", "check_schema", "plain"]

TS = pl.Datetime("ns", "UTC")


@dataclass(frozen=True)
class Window:
    """[start, end) in UTC."""

    start: dt.datetime
    end: dt.datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("window bounds must be timezone-aware")
        if self.end <= self.start:
            raise ValueError(f"empty window: {self.start.isoformat()} .. {self.end.isoformat()}")

    @classmethod
    def last(cls, seconds: float, now: dt.datetime | None = None) -> Window:
        end = now or dt.datetime.now(dt.UTC)
        return cls(end - dt.timedelta(seconds=seconds), end)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M:%S} .. {self.end:%Y-%m-%d %H:%M:%S} UTC"


def check_schema(frame: pl.DataFrame, expected: Mapping[str, pl.DataType], what: str) -> pl.DataFrame:
    """The frame with exactly the expected columns in order, or a SchemaError naming what differs."""
    missing = [c for c in expected if c not in frame.columns]
    if missing:
        raise SchemaError(f"{what}: missing columns {missing}")
    out = frame.select(list(expected))
    wrong = [f"{c}: {out.schema[c]} (want {t})" for c, t in expected.items() if out.schema[c] != t]
    if wrong:
        raise SchemaError(f"{what}: wrong types {wrong}")
    return out


def plain(frame: pl.DataFrame, expected: Mapping[str, pl.DataType], what: str) -> pl.DataFrame:
    """Dictionary-encoded strings to plain strings, the expected types, then the schema check."""
    if frame.width == 0:
        frame = pl.DataFrame(schema=dict(expected))
    casts = [pl.col(c).cast(t) for c, t in expected.items() if c in frame.columns and frame.schema[c] != t]
    return check_schema(frame.with_columns(casts) if casts else frame, expected, what)


def bound(**values: Any) -> dict[str, Any]:
    """Query parameters that are set (sequences as lists): unset filters are not in the SQL either."""
    return {k: list(v) if isinstance(v, tuple | list) else v for k, v in values.items() if v is not None}
