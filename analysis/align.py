"""Putting series from different devices, metric groups and collectors side by side, whatever their clocks.

Real gear stamps each notification with the device's own clock, path by path, and polls metric groups at
their own cadence (SONiC: ports 1 s, queues 10 s, watermarks 60 s), so two series never share a timestamp.
No detector joins on an exact timestamp; they go through these:

* every sample covers an interval: a counter's rate sample at `ts` covers (ts - dt_s, ts]; a gauge sample
  (a watermark is the peak since the previous read) covers the time since its series' previous sample
  (`with_intervals`);
* `mean_over` gives each row of a frame the mean rate of another series over that row's own interval,
  from the other series' cumulative counts (so a 60 s watermark reading gets the mean of sixty 1 s port
  samples, and a 1 s sample the share of a 10 s queue sample it falls in);
* `covering` gives each row the values of the other series' sample whose interval holds the row's time,
  within a tolerance (about one interval: clocks of different devices differ by up to a second).

Tolerances for another clock's stamps are given in reads of the other series (`late_reads`: a fraction of
that series' own median interval), never in one fabric-wide poll interval: a switch polled over SNMP every
30 s beside NICs read every second has two cadences, and each series is judged by its own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Literal

import polars as pl

__all__ = ["as_duration", "covering", "mean_over", "with_intervals"]


def as_duration(seconds: pl.Expr) -> pl.Expr:
    """Seconds (a float column) as a polars duration, to the microsecond."""
    return pl.duration(microseconds=(seconds * 1e6).round().cast(pl.Int64))


def with_intervals(frame: pl.DataFrame, keys: Sequence[str], default_s: float = 1.0) -> pl.DataFrame:
    """`dt_s` for gauge samples: the time since the series' previous sample; a series' first sample gets the
    series' median gap (a series of one sample: the median gap of all series in the frame, else `default_s`)."""
    if frame.is_empty():
        return frame.with_columns(pl.lit(None, pl.Float64).alias("dt_s"))
    gap = pl.col("ts").diff().over(keys).dt.total_microseconds() / 1e6
    out = frame.sort([*keys, "ts"]).with_columns(gap.alias("dt_s"))
    return out.with_columns(
        pl.col("dt_s")
        .fill_null(pl.col("dt_s").median().over(keys))
        .fill_null(pl.col("dt_s").median())
        .fill_null(default_s)
        .clip(lower_bound=1e-3)
    )


def _late(frame: pl.DataFrame, source: pl.DataFrame, by: list[str], late_reads: float) -> pl.DataFrame:
    """`frame` with `_late`: `late_reads` of the source series' median interval (per `by`), in seconds."""
    if not late_reads:
        return frame.with_columns(pl.lit(0.0).alias("_late"))
    every = source.group_by(by).agg((pl.col("dt_s").median() * late_reads).alias("_late"))
    return frame.join(every, on=by, how="left").with_columns(pl.col("_late").fill_null(0.0))


def mean_over(
    frame: pl.DataFrame, source: pl.DataFrame, by: Sequence[str], name: str, late_reads: float = 0.0
) -> pl.DataFrame:
    """`frame` with column `name`: the mean rate of `source` (a rates frame: `by`, ts, delta, dt_s) over each
    row's interval (ts - dt_s, ts], shifted late by `late_reads` of the source's own interval (a sample
    stamped just after the interval by another clock still counts). Null where `source` has no sample in or
    after the interval."""
    by = list(by)
    if frame.is_empty():
        return frame.with_columns(pl.lit(None, pl.Float64).alias(name))
    src = (
        source.select(*by, "ts", "delta", "dt_s")
        .sort([*by, "ts"])
        .with_columns(
            pl.col("delta").cum_sum().over(by).alias("_cum"),
            pl.col("dt_s").cum_sum().over(by).alias("_cum_s"),
        )
    )
    shift = as_duration(pl.col("_late"))
    when = source.schema["ts"]
    rows = _late(frame.with_row_index("_row"), source, by, late_reads).with_columns(
        (pl.col("ts") + shift).cast(when).alias("_hi"),
        (pl.col("ts") - as_duration(pl.col("dt_s")) + shift).cast(when).alias("_lo"),
    )
    keys = src.select(*by, "ts", "_cum", "_cum_s")

    def at(column: str, suffix: str) -> pl.DataFrame:
        part = rows.select("_row", *by, column).sort(column)
        return part.join_asof(
            keys.sort("ts"), left_on=column, right_on="ts", by=by, strategy="backward", check_sortedness=False
        ).select("_row", pl.col("_cum").alias(f"_c{suffix}"), pl.col("_cum_s").alias(f"_s{suffix}"))

    hi, lo = at("_hi", "hi"), at("_lo", "lo")
    joined = rows.join(hi, on="_row").join(lo, on="_row")
    delta = pl.col("_chi") - pl.col("_clo").fill_null(0.0)
    seconds = pl.col("_shi") - pl.col("_slo").fill_null(0.0)
    rate = pl.when(seconds > 0).then(delta / seconds)
    dropped = ("_row", "_late", "_hi", "_lo", "_chi", "_clo", "_shi", "_slo")
    return joined.with_columns(rate.alias(name)).sort("_row").drop(*dropped)


def covering(
    frame: pl.DataFrame, source: pl.DataFrame, by: Sequence[str], columns: Sequence[str], late_reads: float
) -> pl.DataFrame:
    """`frame` with `columns` of the `source` sample whose interval (ts - dt_s, ts] holds each row's time:
    the first source sample at or after it, kept when it began before the row's time (+ `late_reads` of the
    sample's own interval: another clock's stamp)."""
    if frame.is_empty():
        return frame.with_columns(*(pl.lit(None).alias(c) for c in columns))
    began = pl.col("_t") - as_duration(pl.col("_d") * (1 + late_reads)) <= pl.col("ts")
    return _as_of(frame, source.rename({"dt_s": "_d"}), by, [*columns, "_d"], "forward", None, began).drop("_d")


def nearest(
    frame: pl.DataFrame, source: pl.DataFrame, by: Sequence[str], columns: Sequence[str], within_s: float
) -> pl.DataFrame:
    """`frame` with `columns` of the `source` sample stamped nearest each row's time, if within `within_s` (a
    snapshot, such as a queue's occupancy, says what was at its own instant only)."""
    if frame.is_empty() or source.is_empty():
        return frame.with_columns(*(pl.lit(None, source.schema.get(c, pl.Float64)).alias(c) for c in columns))
    return _as_of(frame, source, by, columns, "nearest", dt.timedelta(seconds=within_s), None)


def _as_of(
    frame: pl.DataFrame,
    source: pl.DataFrame,
    by: Sequence[str],
    columns: Sequence[str],
    strategy: Literal["forward", "nearest"],
    tolerance: dt.timedelta | None,
    keep: pl.Expr | None,
) -> pl.DataFrame:
    """`frame` with `columns` of one `source` sample per row, found by an as-of join on time within `by` (rows
    whose match fails `keep` get nulls), in the frame's order."""
    by = list(by)
    src = source.select(*by, pl.col("ts").alias("_t"), *columns).sort("_t")
    rows = frame.with_row_index("_row")
    hit = (
        rows.select("_row", *by, pl.col("ts").cast(source.schema["ts"]))
        .sort("ts")
        .join_asof(
            src, left_on="ts", right_on="_t", by=by, strategy=strategy, tolerance=tolerance, check_sortedness=False
        )
    )
    if keep is not None:
        hit = hit.filter(keep)
    return rows.join(hit.select("_row", *columns), on="_row", how="left").sort("_row").drop("_row")
