"""Microbursts: a receiver-facing queue fills in bursts shorter than the polling interval, seen only in
its watermark (peak since the last read), ECN marks and short PFC pauses, while the port's average
utilization stays low.

Method (SONiC `watermarkstat` practice: the periodic queue and PG watermarks are the only counters
that see what happened between two reads; DCQCN, SIGCOMM 2015, and "RDMA over Commodity Ethernet at
Scale", SIGCOMM 2016, on the ECN marks and pauses bursts leave; HPCC, SIGCOMM 2019, on the queues
that bursts of synchronized senders build at the last hop):

* a *burst sample* of a downlink queue (the port facing a receiver NIC, where N senders meet) is
  one whose watermark reached `min_watermark_bytes` while the port transmitted at most
  `max_utilization` of its link speed on average, the queue had drained again by the read (its
  occupancy at most `max_left_fraction` of the watermark) and the port was not held paused (at most
  `max_paused_fraction` of the interval: a queue stuck behind pauses is a PFC storm's victim);
* samples within `incast_guard_intervals` of a sample of the same queue that was congested *and*
  busy (the start or the tail of an incast) are not bursts;
* burst samples of one (port, priority) closer than `merge_gap_s` form one finding when there are
  at least `min_bursts` of them;
* a finding needs a median estimated burst length of `min_burst_ms` (below: the port's usual traffic
  bunched up, e.g. a victim flow's backlog released after a pause upstream, not new traffic);
* per finding: burst count (intervals with a burst, each at least one), peak occupancy (highest
  watermark) and estimated burst duration: the bytes the port sent in a burst interval beyond its
  quiet rate, at line rate (a lower bound: the time the port was busy with the burst), never less
  than the time to drain the peak queue;
* receiver, senders and jobs as for incast (`incast.fan_in`).
"""

from __future__ import annotations

import datetime as dt

import polars as pl
from pydantic import Field

from rocescope.analysis.detectors.base import Context, Detector
from rocescope.analysis.detectors.incast import (
    KEYS,
    QUEUE_NOW,
    QUEUE_WM,
    FanInParams,
    fan_in,
    port_tx,
    queue_samples,
)
from rocescope.analysis.episodes import episodes
from rocescope.analysis.findings import Finding


class MicroburstParams(FanInParams):
    min_senders: int = Field(0, ge=0, description="Sender NICs needed (bursts may come from one sender's jobs).")
    max_utilization: float = Field(0.25, gt=0, le=1, description="Average transmit share of link speed at most.")
    max_left_fraction: float = Field(
        0.5, ge=0, le=1, description="Occupancy at the read at most this share of the watermark (drained)."
    )
    max_paused_fraction: float = Field(0.5, ge=0, le=1, description="Share of the interval the port was paused.")
    incast_guard_intervals: float = Field(2.0, ge=0, description="Distance in samples from sustained congestion.")
    min_burst_ms: float = Field(
        1.0, ge=0, description="Median estimated burst length at least (bursts that add no bytes are not fan-in)."
    )
    merge_gap_s: float = Field(10.0, gt=0, description="Bursts closer than this are one finding.")
    min_bursts: int = Field(2, ge=1, description="Burst intervals a finding needs.")
    warning_bursts: int = Field(10, ge=1, description="Findings with this many bursts are warnings (else info).")


def burst_samples(ctx: Context, p: MicroburstParams) -> pl.DataFrame:
    """Burst samples (see the module docstring)."""
    samples = queue_samples(ctx, p)
    if samples.is_empty():
        return samples
    high = pl.col(QUEUE_WM) >= p.min_watermark_bytes
    busy = episodes(samples.filter(high, pl.col("utilization") > p.max_utilization), KEYS, gap_s=1.5 * ctx.poll_s)
    left = pl.col(QUEUE_NOW).is_null() | (pl.col(QUEUE_NOW) <= p.max_left_fraction * pl.col(QUEUE_WM))
    bursts = samples.filter(
        high,
        pl.col("utilization").is_null() | (pl.col("utilization") <= p.max_utilization),
        pl.col("paused_fraction") <= p.max_paused_fraction,
        left,
    ).sort("ts")
    guard = dt.timedelta(seconds=p.incast_guard_intervals * ctx.poll_s)
    if not busy.is_empty():
        near = bursts.join(busy.select(*KEYS, "start", "end"), on=KEYS).filter(
            pl.col("ts") >= pl.col("start") - guard, pl.col("ts") <= pl.col("end") + guard
        )
        bursts = bursts.join(near.select("ts", *KEYS), on=["ts", *KEYS], how="anti")
    return bursts


def _quiet_rates(ctx: Context, bursts: pl.DataFrame) -> pl.DataFrame:
    """Each bursting port's usual transmit rate (`quiet_Bps`): the median over its samples without a burst."""
    tx = port_tx(ctx, sorted(set(bursts["device"].to_list())))
    tx = tx.join(bursts.select("ts", "device", "port"), on=["ts", "device", "port"], how="anti")
    return tx.group_by("device", "port").agg(pl.col("tx_Bps").median().alias("quiet_Bps"))


def detect(ctx: Context, p: MicroburstParams) -> list[Finding]:
    bursts = burst_samples(ctx, p)
    if bursts.is_empty():
        return []
    bursts = bursts.join(_quiet_rates(ctx, bursts), on=["device", "port"], how="left")
    base = pl.col("quiet_Bps").fill_null(0.0)
    line = pl.when(pl.col("speed_Bps") > 0).then(pl.col("speed_Bps"))
    excess_s = (pl.col("tx_Bps") - base).clip(lower_bound=0) * pl.col("dt_s") / line
    drain_s = pl.col(QUEUE_WM) / line
    bursts = bursts.with_columns(pl.max_horizontal(excess_s, drain_s).alias("burst_s"))
    eps = episodes(
        bursts,
        KEYS,
        gap_s=p.merge_gap_s,
        aggregations=[
            pl.col(QUEUE_WM).max().alias("peak"),
            pl.col("utilization").mean().alias("util"),
            pl.col("ecn_rate").mean().alias("ecn"),
            pl.col("paused_fraction").mean().alias("paused"),
            pl.col("burst_s").median().alias("burst_s"),
        ],
    ).filter(
        pl.col("samples") >= p.min_bursts, pl.col("burst_s").is_null() | (pl.col("burst_s") >= p.min_burst_ms / 1e3)
    )
    findings = []
    for device, port, prio, start, end, n, peak, util, ecn, paused, burst_s in eps.iter_rows():
        start, end = ctx.clip(start, end)
        fan = fan_in(ctx, device, port, int(prio), start, end, p)
        if fan is None or len(fan.senders) < p.min_senders:
            continue
        receiver = f"{fan.receiver[0]}:{fan.receiver[1]}"
        ms = f", ~{burst_s * 1000:.0f} ms each" if burst_s is not None else ""
        findings.append(
            Finding(
                kind="microburst",
                severity="warning" if n >= p.warning_bursts else "info",
                start=start,
                end=end,
                devices=fan.devices,
                ports=fan.ports,
                priority=int(prio),
                score=float(n) * float(peak) / 1e6,
                summary=(
                    f"microbursts: {n} bursts into {receiver} at {fan.leaf_ref} priority {prio}, queue peaking at "
                    f"{peak / 1e6:.1f} MB{ms}, while the port averaged {util or 0:.0%} busy"
                    + (f"; {len(fan.senders)} senders" if fan.senders else "")
                ),
                evidence={
                    **fan.evidence(),
                    "bursts": n,
                    "peak_watermark_bytes": peak,
                    "estimated_burst_ms": None if burst_s is None else burst_s * 1000,
                    "utilization": util,
                    "ecn_marked_per_s": ecn,
                    "paused_fraction": paused,
                },
                job_ids=fan.job_ids,
            )
        )
    return findings


DETECTOR = Detector("microburst", "1", ("microburst",), MicroburstParams, detect)
