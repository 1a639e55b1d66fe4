"""Episodes: consecutive samples of one series that meet a condition, joined into one time span.

Every detector reduces "sample by sample, this port looks bad" to "this port was bad from t0 to t1":
samples of a key closer than `gap` seconds belong to the same episode. A sample at `ts` covers the
interval that ends at `ts` (counters are read at the end of what they count), so an episode starts
at its first sample's `ts - dt_s` where `dt_s` is known. Series are polled at their own cadence (1 s
ports, 10 s queues, 60 s watermarks), so the gap may also be given in each series' own intervals
(`gap_intervals`): a sample joins the episode when it follows the previous one within that many of its
own intervals (or `gap_s`, whichever is longer).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl


def episodes(
    frame: pl.DataFrame,
    keys: Sequence[str],
    gap_s: float,
    aggregations: Sequence[pl.Expr] = (),
    interval: str | None = "dt_s",
    gap_intervals: float | None = None,
) -> pl.DataFrame:
    """One row per episode: the keys, `start`, `end`, `samples`, and the given aggregations.

    `interval` names the column with each sample's covered seconds (None: a sample is an instant).
    """
    keys = list(keys)
    ordered = frame.sort([*keys, "ts"])
    gap: pl.Expr = pl.duration(microseconds=round(gap_s * 1e6))
    if gap_intervals is not None and interval is not None:
        own = pl.duration(microseconds=(pl.col(interval) * gap_intervals * 1e6).round().cast(pl.Int64))
        gap = pl.max_horizontal(gap, own)
    new = (pl.col("ts").diff().over(keys) > gap).fill_null(True)
    ordered = ordered.with_columns(new.cast(pl.UInt32).cum_sum().over(keys).alias("_episode"))
    covered = pl.duration(microseconds=(pl.col(interval) * 1e6).round().cast(pl.Int64)) if interval else None
    starts = pl.col("ts") - covered if covered is not None else pl.col("ts")
    return (
        ordered.with_columns(starts.alias("_from"))
        .group_by([*keys, "_episode"], maintain_order=True)
        .agg(
            pl.col("_from").min().cast(frame.schema["ts"]).alias("start"),
            pl.col("ts").max().alias("end"),
            pl.len().alias("samples"),
            *aggregations,
        )
        .drop("_episode")
    )
