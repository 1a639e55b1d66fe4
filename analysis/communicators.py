"""A communicator's job, where a host alone cannot tell: the collectives `rocescope.analysis.collectives` left
ambiguous (a host two placed jobs share, no QP owner naming the process) get the job of their communicator.

An NCCL communicator belongs to one job: its ranks are one job's processes. So, per communicator:

1. the one job its other collectives were attributed to (by `qp_owners` or by a host only that job uses);
2. else the one job placed on every host the communicator spans whose placement has as many ranks (NICs) as
   the communicator has (a job with a rank per GPU and NIC; a checkpoint or storage transfer placed on the
   same hosts has other sizes).

Collectives still without a job keep `ambiguous`; those resolved say `communicator`.
"""

from __future__ import annotations

import polars as pl

from rocescope.analysis.frames import check_schema

__all__ = ["by_communicator"]


def by_communicator(coll: pl.DataFrame, endpoints: pl.DataFrame) -> pl.DataFrame:
    """`coll` (attributed collectives: `job_id`, `attribution`) with ambiguous rows resolved through their
    communicator; `endpoints`: placements (job_id, host, netdev, ...)."""
    open_ = (pl.col("attribution") == "ambiguous") & (pl.col("communicator") != "")
    if coll.is_empty() or not coll.select(open_.any()).item():
        return coll
    known = (
        coll.filter(pl.col("job_id") != "", pl.col("communicator") != "")
        .group_by("communicator")
        .agg(pl.col("job_id").unique().alias("jobs"))
        .filter(pl.col("jobs").list.len() == 1)
        .select("communicator", known_job=pl.col("jobs").list.first())
    )
    spans = (
        coll.filter(pl.col("communicator") != "")
        .group_by("communicator")
        .agg(pl.col("host").unique().alias("hosts"), pl.col("ranks").max().alias("size"))
    )
    sizes = endpoints.group_by("job_id").agg(
        pl.struct("host", "netdev").n_unique().alias("nics"), pl.col("host").unique().alias("job_hosts")
    )
    fits = (
        spans.join(sizes, how="cross")
        .filter(pl.col("size") == pl.col("nics"))
        .filter(pl.col("hosts").list.set_difference("job_hosts").list.len() == 0)
        .group_by("communicator")
        .agg(pl.col("job_id").alias("fit"))
        .filter(pl.col("fit").list.len() == 1)
        .select("communicator", fit_job=pl.col("fit").list.first())
    )
    resolved = pl.coalesce("known_job", "fit_job")
    out = (
        coll.join(known, on="communicator", how="left")
        .join(fits, on="communicator", how="left")
        .with_columns(
            job_id=pl.when(open_ & resolved.is_not_null()).then(resolved).otherwise("job_id"),
            attribution=pl.when(open_ & resolved.is_not_null()).then(pl.lit("communicator")).otherwise("attribution"),
        )
    )
    return check_schema(out, dict(coll.schema), "collectives by communicator")
