"""Incast: many senders converge on one receiver NIC, and the leaf port facing it stays busy and congested
for many consecutive intervals; who sends, and how far the PFC pause spreads upstream.

Method (the physics and the shared pieces are in `congestion.py`):

* an *incast sample* is a transmit sample of a receiver-facing (downlink) port that was saturated (its load,
  the transmit rate over what its peer's pauses left of its speed, at `saturated_load` or more: a queue that
  stands through the sample keeps the port sending) while congestion evidence covers it: the queue's watermark
  reached `min_watermark_bytes`, or it ECN-marked `min_ecn_rate` packets/s, or the receiver NIC sent
  `min_cnp_sent_rate` CNPs/s. Each evidence sample covers its own interval (a 60 s watermark covers sixty
  1 s transmit samples), so the incast is timed at the port's own cadence whatever the queue counters'
  (bursts shorter than the interval leave the port idle part of it, however busy its other traffic keeps it:
  that is a microburst, see `microburst.py`);
* incast samples of one port form an episode, bridging gaps of `gap_intervals` samples; it is an incast
  when it lasts `min_seconds` (the definition: overload for a second holds thousands of round trips, so
  DCQCN has settled and the excess is sustained demand) and at least `min_senders` sender NICs are found
  (`fan_in`), at any
  fan-in: a 32-to-1 incast is one finding whose senders are its parts, even when PFC holds them paused
  most of the time (then the PFC storm detector leaves them alone: their leaf pauses from congestion);
* the finding names the receiver host, its leaf and the senders; the receiver-facing port, the receiver
  NIC and the ports facing the senders; its jobs are the jobs on those NICs; the switch ports that sent PFC
  pauses meanwhile show how far the pause tree reached (critical when it left the receiver's leaf).

Without flow or QP records, two incasts at the same time whose senders share a job with both receivers
cannot be told apart: their senders are reported for both (sampled packets, where captured, tell them apart).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import polars as pl

from rocescope.analysis.detectors.base import Context, Detector, threshold
from rocescope.analysis.detectors.congestion import (
    FanIn,
    FanInParams,
    congested_samples,
    downlink_evidence,
    fan_in,
    port_load,
)
from rocescope.analysis.episodes import episodes
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import Finding

#: a poll's stamps wander by tens of milliseconds (collector scheduling, device clocks): a one-second sample may
#: cover 0.9-1.1 s of the device's time
READ_JITTER = 0.9


class IncastParams(FanInParams):
    min_seconds: float = threshold(
        1.0,
        "Saturated and congested this long (the incast definition: a second of overload holds thousands "
        "of round trips, so DCQCN (Zhu et al. 2015) has settled and the overload is sustained demand, not a burst).",
        "derivation: a second of overload holds thousands of fabric round trips, so DCQCN has settled and the excess "
        "is sustained demand, not a burst; it is also one read at 1 s, the finest counter cadence commonly used.",
        gt=0,
    )
    gap_intervals: float = threshold(
        3.0,
        "Samples this many intervals apart are one episode.",
        "derivation: bridges up to two missing or dipped samples (a late read, a DCQCN cut below saturated_load) so "
        "one incast is not split in pieces; counted in the series' own intervals, so it holds at any cadence.",
        ge=1,
    )
    held_load: float = threshold(
        0.5,
        "Between saturated spells of one incast, the receiver's port load that still counts as the same incast "
        "while congestion evidence covers it: DCQCN holds an overload back by cutting each sender's rate by at most "
        "half per notification, so the port does not fall below half its line rate while the queue marks.",
        "derivation: DCQCN's reaction point cuts its rate to R_C(1 - alpha/2) with alpha <= 1 (Zhu et al., SIGCOMM "
        "2015), at most a halving per notification, so senders held back together keep the receiver's port above "
        "half its line rate while its queue still marks; below half, the senders stopped offering load. It only "
        "joins saturated spells of one port into one incast, never makes one.",
        gt=0,
        le=1,
    )
    critical_seconds: float = threshold(
        30.0,
        "Incasts at least this long are critical.",
        "derivation: sets severity only, never whether an incast is found: 30 times the 1 s definition, overload that "
        "outlasted several 10 s queue-counter reads; an incast that paused spines is critical at any length.",
        gt=0,
    )


def upstream_of(fabric: Fabric, fan: FanIn) -> list[str]:
    """Switches the receiver's leaf paused through its uplinks: the pause tree left the leaf."""
    leaf = fan.leaf_ref.partition(":")[0]
    out = set()
    for ref in fan.pausing:
        d, _, port = ref.partition(":")
        peer = fabric.peer(d, port)
        if d == leaf and peer is not None and fabric.port_kind(d, port) == "uplink":
            out.add(peer[0])
    return sorted(out)


def incast_samples(ctx: Context, p: IncastParams) -> pl.DataFrame:
    """Busy and congested transmit samples of receiver-facing ports (see the module docstring), with `held`: the
    number of the port's spell of congested samples at `held_load` or more that each lies in."""
    evidence = downlink_evidence(ctx, p)
    if evidence.is_empty():
        return pl.DataFrame()
    util = port_load(ctx, evidence.select("device", "port").unique(), p.lossless_priorities)
    held = congested_samples(ctx, evidence, util.filter(pl.col("load") >= min(p.held_load, p.saturated_load)))
    if held.is_empty():
        return held
    spells = episodes(held, ["device", "port"], gap_s=0.0, gap_intervals=p.gap_intervals).with_row_index("held")
    saturated = held.filter(pl.col("load") >= p.saturated_load)
    return (
        saturated.join(spells.select("device", "port", "held", "start", "end"), on=["device", "port"])
        .filter(pl.col("ts").is_between(pl.col("start"), pl.col("end")))
        .drop("start", "end")
    )


def _incasts(hot: pl.DataFrame, p: IncastParams, kinds: Sequence[str]) -> pl.DataFrame:
    """Saturated spells (`gap_intervals` bridged) of at least `min_seconds`, each joined with the port's other
    saturated spells of one held spell (`held_load`): DCQCN's cuts that dip an incast's port below saturation for a
    few seconds split no incast in pieces."""
    aggregations = [
        pl.col("priority").min().alias("priority"),
        pl.col("utilization").mean().alias("util"),
        pl.col("speed_source").first().alias("speed_source"),
        pl.col("speed_Bps").max().alias("speed_Bps"),
        *(pl.col(k).max().alias(k) for k in kinds),
    ]
    spells = episodes(hot, ["device", "port", "held"], gap_s=0.0, gap_intervals=p.gap_intervals)
    long_enough = dt.timedelta(seconds=p.min_seconds * READ_JITTER)
    incast = spells.filter(pl.col("end") - pl.col("start") >= long_enough).select("device", "port", "held").unique()
    if incast.is_empty():
        return spells.clear()
    joined = hot.join(incast, on=["device", "port", "held"], how="semi")
    # no gap inside one held spell splits it: the whole data's span is a gap longer than any
    longest = float(hot.select((pl.col("ts").max() - pl.col("ts").min()).dt.total_seconds()).item()) + 1.0
    return episodes(joined, ["device", "port", "held"], gap_s=longest, aggregations=aggregations)


def detect(ctx: Context, p: IncastParams) -> list[Finding]:
    hot = incast_samples(ctx, p)
    if hot.is_empty():
        return []
    kinds = [k for k in ("watermark", "ecn", "cnp") if k in hot.columns]
    eps = _incasts(hot, p, kinds)
    findings = []
    for row in eps.iter_rows(named=True):
        device, port, prio = row["device"], row["port"], int(row["priority"])
        start, end = ctx.clip(row["start"], row["end"])
        fan = fan_in(ctx, device, port, prio, start, end, p)
        if fan is None or len(fan.senders) < p.min_senders:
            continue
        seconds = (end - start).total_seconds()
        beyond = upstream_of(ctx.fabric, fan)
        receiver = f"{fan.receiver[0]}:{fan.receiver[1]}"
        util, peak = float(row["util"]), row.get("watermark")
        queue = f" with its queue peaking at {peak / 1e6:.1f} MB" if peak else ""
        findings.append(
            Finding(
                kind="incast",
                severity="critical" if seconds >= p.critical_seconds or beyond else "warning",
                start=start,
                end=end,
                devices=fan.devices,
                ports=fan.ports,
                priority=prio,
                score=seconds * util * max(1, len(fan.senders)),
                summary=(
                    f"incast: {len(fan.senders)} senders to {receiver}; {fan.leaf_ref} priority {prio} "
                    f"{util:.0%} busy{queue} for {seconds:.0f} s"
                    + (f"; its leaf paused {len(beyond)} spine(s)" if beyond else "")
                ),
                evidence={
                    **fan.evidence(),
                    "samples": row["samples"],
                    "utilization": util,
                    "speed_source": row["speed_source"],
                    "speed_gbps": row["speed_Bps"] * 8 / 1e9 if row["speed_Bps"] else None,
                    "peak_watermark_bytes": peak,
                    "ecn_marked_per_s": row.get("ecn"),
                    "congestion_evidence": [k for k in kinds if row.get(k) is not None],
                    "paused_upstream": beyond,
                },
                job_ids=fan.job_ids,
            )
        )
    return findings


DETECTOR = Detector("incast", "3", ("incast",), IncastParams, detect)
