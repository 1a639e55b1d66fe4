"""The fabric's CNP balance, per bucket of NIC counters: CNPs sent by the notification points less those the
reaction points handled, how far the NICs' read instants can move it, its jitter and its runs of loss. Read by the
CNP-loss detector (`rocescope.analysis.detectors.cnp_loss`, whose docstring gives the method)."""

from __future__ import annotations

import datetime as dt

import polars as pl

from rocescope.analysis.cnp_peers import HANDLED, SENT, unverifiable_senders
from rocescope.analysis.frames import Frames

__all__ = ["balance", "jitter", "loss_runs", "verifiable"]


def balance(nic: pl.DataFrame, bucket_s: float) -> pl.DataFrame:
    """Per bucket: CNPs sent, handled and lost fabric-wide, and `read_skew`, the most the NICs' read instants can
    move between a bucket and its neighbours: the read that straddles an edge carries at most its interval's worth
    of counts at the rate around that edge, which is the busier of the two buckets it joins (the longest read
    interval over the bucket, of what was sent and handled; at an incast's first or last bucket the rate on the
    far side of the edge is the incast's, not the bucket's mostly quiet average)."""
    share = pl.col("bucket_longest_read_s").clip(upper_bound=bucket_s) / bucket_s
    moved = pl.col("fabric_sent") + pl.col("fabric_handled")
    step = dt.timedelta(seconds=bucket_s)
    neighbour = {
        side: pl.when((pl.col("bucket") - pl.col("bucket").shift(k)).abs() == step).then(moved.shift(k)).otherwise(0.0)
        for side, k in (("before", 1), ("after", -1))
    }
    return (
        nic.group_by("bucket")
        .agg(
            pl.col(SENT).sum().alias("fabric_sent"),
            pl.col(HANDLED).sum().alias("fabric_handled"),
            pl.col("seconds").max().alias("bucket_seconds"),
            pl.col("longest_read_s").max().alias("bucket_longest_read_s"),
        )
        .sort("bucket")
        .with_columns(
            (pl.col("fabric_sent") - pl.col("fabric_handled")).alias("fabric_lost"),
            (
                share * (pl.max_horizontal(moved, neighbour["before"]) + pl.max_horizontal(moved, neighbour["after"]))
            ).alias("read_skew"),
        )
    )


def jitter(balance: pl.DataFrame, start: dt.datetime, end: dt.datetime, bucket_s: float) -> float:
    """The balance's typical error from its reads' timing: the median size of its bucket balances outside [start,
    end) and the bucket on each side of it, while CNPs are sent (steady rates read at other instants and stamped by
    other clocks move a few counts across each edge, either way); 0 where no other bucket carries CNPs (an incast's
    CNPs may all fall in its own buckets: then the loss is all there is, and no jitter is shown). The buckets that
    share an edge with [start, end) hold the reads straddling the loss's own start and end: where the rates step
    there, their balances swing by up to a read's worth of the step each way (a skewed NIC clock: +19,652 and
    -12,652 around a 90 s loss of 700 CNPs/s), which is that loss's edge, not the steady balance's error."""
    step = dt.timedelta(seconds=bucket_s)
    outside = balance.filter(
        pl.col("fabric_sent") > 0, (pl.col("bucket") < start - step) | (pl.col("bucket") >= end + step)
    )
    size = outside.select(pl.col("fabric_lost").abs().median()).item()
    return float(size) if size is not None else 0.0


def loss_runs(balance: pl.DataFrame, bucket_s: float, min_lost_rate: float) -> pl.DataFrame:
    """(run_start, run_end, run_lost): the runs of consecutive buckets whose balance lost at least `min_lost_rate`
    CNPs/s, and the CNPs lost in each."""
    step = dt.timedelta(seconds=bucket_s)
    lossy = balance.filter(pl.col("fabric_lost") / pl.col("bucket_seconds") >= min_lost_rate).sort("bucket")
    run = (pl.col("bucket").diff() != step).fill_null(True).cum_sum().alias("run")
    return (
        lossy.with_columns(run)
        .group_by("run")
        .agg(
            pl.col("bucket").min().alias("run_start"),
            (pl.col("bucket").max() + step).alias("run_end"),
            pl.col("fabric_lost").sum().alias("run_lost"),
        )
    )


def verifiable(frames: Frames, nic: pl.DataFrame, balance: pl.DataFrame) -> pl.DataFrame:
    """`balance` with the CNPs that NICs with unmonitored peers (`unverifiable_senders`) sent taken out of the
    lost ones: they may have been handled where nobody counts, and a NIC that handles fewer than its job-mates is
    a suspect only where the CNPs nobody could have handled explain its shortfall (a lower bound on the loss), nor
    may they keep a read's swing missing from the window's balance. A bucket's surplus (CNPs counted handled before
    they were counted sent: the reads' timing) stays: the swing back of a loss that was only timing."""
    unseen = unverifiable_senders(frames)
    if unseen.is_empty():
        return balance
    rdma_dev = pl.col("port").str.split("/").list.first().alias("rdma_dev")
    maybe = (
        nic.with_columns(rdma_dev)
        .join(unseen, on=["device", "rdma_dev"])
        .group_by("bucket")
        .agg(pl.col(SENT).sum().alias("_unverifiable"))
    )
    # never below zero where the unverifiable CNPs were partly handled by counted NICs, unless the bucket itself
    # shows a surplus
    floor = pl.min_horizontal(pl.col("fabric_lost"), 0.0)
    lost = (pl.col("fabric_lost") - pl.col("_unverifiable").fill_null(0.0)).clip(lower_bound=floor)
    return balance.join(maybe, on="bucket", how="left").with_columns(lost.alias("fabric_lost")).drop("_unverifiable")
