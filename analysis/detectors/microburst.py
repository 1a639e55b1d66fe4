"""Microbursts: a receiver-facing queue fills in bursts shorter than the polling interval, seen only in
its watermark (peak since the last read), ECN marks and short PFC pauses, while the port's average
utilization stays low.

Method (SONiC `watermarkstat` practice: the periodic queue and PG watermarks are the only counters
that see what happened between two reads; DCQCN, SIGCOMM 2015, and "RDMA over Commodity Ethernet at
Scale", SIGCOMM 2016, on the ECN marks and pauses bursts leave; HPCC, SIGCOMM 2019, on the queues
that bursts of synchronized senders build at the last hop). The shared physics is in `congestion.py`.

* a *burst reading* is one watermark read of a downlink queue (the port facing a receiver NIC, where N
  senders meet) that reached `min_watermark_bytes`, whose interval (since the previous read, at the queue's
  own cadence: 1 s or SONiC's 60 s) holds no saturated transmit sample of the port (`saturated_load`, see
  `congestion.py`: a queue that stood for a whole sample kept the port sending; a port idle part of every
  sample had its queue up only in bursts, however busy its training traffic keeps it, at any duty cycle),
  the port not held paused (at most `max_paused_fraction` of the interval: a queue stuck behind pauses is a
  PFC storm's victim), and, where a snapshot of the queue's occupancy was taken at the read (within `AT_READ_S`),
  drained again by the read (at most `max_left_fraction` of the watermark). One reading is one peak, never as many
  bursts as the interval has seconds;
* burst readings of one port closer than `merge_gap_s` (or 1.5 reads) form one finding when they show
  `min_bursts` burst intervals, or `min_marked_bursts` (one) that its port's ECN marks or its receiver's CNPs
  corroborate (a queue above Kmin marks: one burst past it is a microburst by the definition): each reading
  counts once, or as many as the ECN-marking or CNP-sending intervals (10 s queue counters, 1 s NIC counters)
  inside it, whichever is more; the receiver's CNPs count only above every CNP sample inside its port's quiet
  reads (a NIC answers marks made at any hop of its flows: CNPs it sends alike while its port's queue stays low
  are marked upstream, `_own_marks`);
* a finding lasts while its port's ECN-marking and CNP-sending samples inside it say the bursts were (the
  reads only bound them: a 60 s read's interval began up to a minute before the first burst), and on through
  such samples after the port's last read when the data ends before its next one (bursts no read saw yet);
* no floor on a burst's length: a queue above Kmin for less than a read is a microburst however short (the
  definition), and duty-cycled training traffic that bunches up at the receiver's port makes such queues
  without adding bytes beyond its usual rate (a backlog released after a pause is the storm's or deadlock's,
  by the port's and its senders' pauses, below);
* per finding: burst count, peak occupancy (highest watermark) and estimated burst duration: the bytes
  the port sent in a burst interval beyond its quiet rate, at line rate (a lower bound: the time the port
  was busy with the burst), never less than the time to drain the peak queue;
* receiver, senders and jobs as for incast (`congestion.fan_in`); senders paused on average more than
  `max_sender_paused_fraction` of the time (pause duration, or XOFF frames times the 0xFFFF quanta each holds
  where only frames are counted) make no microburst (bursts pause them for their milliseconds; a
  storm or deadlock upstream holds them far longer, and what it releases is its spread).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl

from rocescope.analysis.align import as_duration, mean_over, nearest
from rocescope.analysis.detectors.base import Context, Detector, threshold
from rocescope.analysis.detectors.congestion import (
    KEYS,
    QUEUE_NOW,
    QUEUE_WM,
    RX_PAUSED_US,
    FanInParams,
    Sender,
    downlink_evidence,
    fan_in,
    marked_watermarks,
    port_load,
    port_utilization,
)
from rocescope.analysis.episodes import episodes
from rocescope.analysis.findings import Finding

Span = tuple[dt.datetime, dt.datetime]
#: An occupancy snapshot within this of a watermark read shows what the queue held at the read: a queue that stands
#: (the incast definition: a second at line rate) is in any snapshot within half a second of it; one taken farther
#: off (gear reads occupancy and watermarks in different counter groups, seconds apart) is another moment.
AT_READ_S = 0.5


class MicroburstParams(FanInParams):
    min_senders: int = threshold(
        0,
        "Sender NICs needed (bursts may come from one sender's jobs).",
        "derivation: the watermark alone shows the queue burst; senders are found only where CNP, pause, packet or QP "
        "records exist, so requiring any would hide every burst on a fabric that collects none of them.",
        ge=0,
    )
    max_left_fraction: float = threshold(
        0.5,
        "Occupancy at the read at most this share of the watermark (drained).",
        "derivation: a burst shorter than a read drains at line rate in microseconds (1 MB at 400G: 20 us), so little "
        "is left at the read; over half the peak still queued is a standing queue. Half errs toward keeping bursts.",
        ge=0,
        le=1,
    )
    max_paused_fraction: float = threshold(
        0.5,
        "Share of the interval the port was paused.",
        "derivation: a port held paused most of its interval has its queue held by pauses (a PFC storm's victim, the "
        "storm detector's), not filled by bursts, which pause it only for their milliseconds.",
        ge=0,
        le=1,
    )
    max_sender_paused_fraction: float = threshold(
        0.1,
        "Mean share of the time the senders were paused, at most: bursts pause their senders for their "
        "few milliseconds; senders paused far longer are caught in a PFC storm or deadlock, whose released backlog "
        "is no microburst.",
        "derivation: a burst pauses its senders only for its few milliseconds, a small share of any read; senders held "
        "over a tenth of the time are in a PFC storm or deadlock, whose released backlog is no microburst.",
        ge=0,
        le=1,
    )
    merge_gap_s: float = threshold(
        10.0,
        "Bursts closer than this are one finding.",
        "derivation: one read of the 10 s queue counters (ECN marks); readings closer are one bursty episode, and "
        "slower watermark reads (SONiC's 60 s) are bridged by the 1.5-read gap instead.",
        gt=0,
    )
    min_bursts: int = threshold(
        2,
        "Burst intervals a finding needs when no mark corroborates them.",
        "derivation: a watermark read alone is one peak a single stray backlog can make; two burst intervals show "
        "the queue bursting again (where marks corroborate the reads, min_marked_bursts applies).",
        ge=1,
    )
    min_marked_bursts: int = threshold(
        1,
        "Burst intervals a finding needs when the queue's own ECN marks or the receiver's CNPs fall inside them.",
        "derivation: a queue above Kmin marks (RED, as DCQCN deploys it), so a marked peak passed the ECN threshold, "
        "and one burst past it is a microburst by the definition (a queue above Kmin for < 100 ms), recurring or not.",
        ge=1,
    )
    warning_bursts: int = threshold(
        10,
        "Findings with this many bursts are warnings (else info).",
        "derivation: sets severity only, never whether a finding is made: ten burst intervals, five times min_bursts, "
        "are a recurring pattern worth a warning; set wrong it mislabels severity, never hides a burst.",
        ge=1,
    )


def burst_readings(ctx: Context, p: MicroburstParams, evidence: pl.DataFrame, marked: pl.DataFrame) -> pl.DataFrame:
    """Burst readings (see the module docstring) from the ports' evidence and their marked watermark reads, with
    the port's mean transmit rate and utilization over each."""
    reads = pl.concat(
        [x.filter(pl.col("kind") == "watermark") for x in (evidence, marked) if not x.is_empty()] or [pl.DataFrame()],
        how="vertical_relaxed",
    )
    if reads.is_empty():
        return pl.DataFrame()
    reads = reads.rename({"value": "watermark"}).drop("kind")
    util = port_load(ctx, reads.select("device", "port").unique(), p.lossless_priorities)
    # another clock may stamp a transmit sample up to half of its own interval late
    reads = mean_over(reads, util, ["device", "port"], "tx_Bps", late_reads=0.5)
    speeds = util.group_by("device", "port").agg(pl.col("speed_Bps").first(), pl.col("speed_source").first())
    reads = reads.join(speeds, on=["device", "port"], how="left").with_columns(
        pl.when(pl.col("speed_Bps") > 0).then(pl.col("tx_Bps") / pl.col("speed_Bps")).alias("utilization")
    )
    # no saturated transmit sample overlapping the read's interval: a queue that stood for a sample is sustained
    # overload (an incast, or a backlog draining at line rate), not a burst shorter than the reads
    full = util.filter(pl.col("load") >= p.saturated_load).select(
        "device", "port", pl.col("ts").alias("_s"), pl.col("dt_s").alias("_sd")
    )
    seen = reads.join(full, on=["device", "port"]).filter(
        pl.col("_s") - as_duration(pl.col("_sd")) < pl.col("ts") + as_duration(0.5 * pl.col("_sd")),
        pl.col("_s") > pl.col("ts") - as_duration(pl.col("dt_s")) - as_duration(0.5 * pl.col("_sd")),
    )
    reads = reads.join(seen.select("ts", *KEYS).unique(), on=["ts", *KEYS], how="anti")
    if reads.is_empty():
        return reads
    frames = ctx.frames
    devices = sorted(set(reads["device"].to_list()))
    paused = frames.rates([RX_PAUSED_US], devices=devices, roles=["switch"])
    reads = mean_over(reads, paused, KEYS, "paused_us_per_s", late_reads=0.5).with_columns(
        (pl.col("paused_us_per_s").fill_null(0.0) / 1e6).alias("paused_fraction")
    )
    # the read after an interval the port was held paused: the backlog the pause built draining at its release
    # (a storm's or a deadlock's end), a queue that stood above Kmin for the whole pause, not a burst
    when = reads.schema["ts"]
    rows = reads.with_row_index("_r")
    before = mean_over(
        rows.select("_r", *KEYS, "dt_s", (pl.col("ts") - as_duration(pl.col("dt_s"))).cast(when).alias("ts")),
        paused,
        KEYS,
        "_paused_before",
        late_reads=0.5,
    ).select("_r", "_paused_before")
    reads = rows.join(before, on="_r", how="left").drop("_r")
    released = pl.col("_paused_before").fill_null(0.0) / 1e6 > p.max_paused_fraction
    # what the queue held at the read: a snapshot of its occupancy taken then, not one from elsewhere in the read's
    # interval (a burst caught in flight seconds later says nothing about whether this read's peak had drained)
    occupancy = frames.gauges([QUEUE_NOW], devices=devices, roles=["switch"]).rename({"value": "left"})
    reads = nearest(reads, occupancy, KEYS, ["left"], AT_READ_S)
    drained = pl.col("left").is_null() | (pl.col("left") <= p.max_left_fraction * pl.col("watermark"))
    return reads.filter(pl.col("paused_fraction") <= p.max_paused_fraction, drained, ~released).drop("_paused_before")


def _own_marks(ctx: Context, p: MicroburstParams, evidence: pl.DataFrame, own: pl.DataFrame) -> pl.DataFrame:
    """`evidence` less the receiver's CNP samples no higher than every one inside its port's quiet reads (watermark
    below `min_watermark_bytes`, no marks of the queue's own): a NIC sends CNPs for marks made at any hop of its
    flows (a spine's queue), and what it sends alike while its port's queue stays low is marked elsewhere. Were the
    CNPs all marked elsewhere, a sample would beat the n quiet ones with chance 1/(n + 1), small at 1 s samples
    over minutes of quiet reads; a port without quiet reads keeps them all."""
    cnp = evidence.filter(pl.col("kind") == "cnp")
    if cnp.is_empty():
        return evidence
    devices = sorted(set(cnp["device"].to_list()))
    reads = ctx.frames.timed_gauges(QUEUE_WM, min_value=0.0, roles=["switch"], devices=devices)
    if reads.is_empty():
        return evidence
    quiet = reads.filter(pl.col("value") < p.min_watermark_bytes).with_columns(pl.col("priority").cast(pl.Int8))
    if not own.is_empty():
        quiet = quiet.join(own.select(*KEYS, "ts").with_columns(pl.col("priority").cast(pl.Int8)), on=[*KEYS, "ts"],
                           how="anti")  # fmt: skip
    spans = quiet.select(*KEYS, pl.col("ts").alias("_hi"), (pl.col("ts") - as_duration(pl.col("dt_s"))).alias("_lo"))
    inside = cnp.join(spans, on=KEYS).filter(pl.col("ts") > pl.col("_lo"), pl.col("ts") <= pl.col("_hi"))
    upstream = inside.group_by(KEYS).agg(pl.col("value").max().alias("_upstream"))
    cnp = cnp.join(upstream, on=KEYS, how="left").filter(
        pl.col("_upstream").is_null() | (pl.col("value") > pl.col("_upstream"))
    )
    return pl.concat([evidence.filter(pl.col("kind") != "cnp"), cnp.drop("_upstream")], how="vertical_relaxed")


def _corroborating(evidence: pl.DataFrame, reads: pl.DataFrame) -> pl.DataFrame:
    """Per burst reading, the ECN-marking and CNP-sending samples of its port inside its interval."""
    other = evidence.filter(pl.col("kind") != "watermark").select("device", "port", pl.col("ts").alias("_t"))
    spans = reads.select(*KEYS, "ts", (pl.col("ts") - as_duration(pl.col("dt_s"))).alias("_lo"))
    hits = spans.join(other, on=["device", "port"]).filter(pl.col("_t") > pl.col("_lo"), pl.col("_t") <= pl.col("ts"))
    return hits.group_by(*KEYS, "ts").agg(pl.col("_t").n_unique().alias("marked"))


def _marked_span(ctx: Context, evidence: pl.DataFrame, row: dict[str, Any], p: MicroburstParams) -> Span:
    """An episode's span narrowed to its port's ECN-marking and CNP-sending samples (1-10 s apart, where the
    watermark reads may be 60 s apart: the reads bound when the bursts could have been, the marks say when they
    were); the reads' span where the port has no such samples. Marks that go on after the port's last read
    (the data ends before its next one) are bursts no read saw yet: the span runs on through them while they
    follow each other closer than `merge_gap_s`."""
    start: dt.datetime = row["start"]
    end: dt.datetime = row["end"]
    marks = evidence.filter(
        pl.col("kind") != "watermark", pl.col("device") == row["device"], pl.col("port") == row["port"]
    ).sort("ts")
    inside = marks.filter(pl.col("ts") > start, pl.col("ts") <= end)
    if inside.is_empty():
        return start, end
    first: dt.datetime = inside.select((pl.col("ts") - as_duration(pl.col("dt_s"))).min()).item()
    last: dt.datetime = inside.select(pl.col("ts").max()).item()
    if not _read_after(ctx, row, end):
        for ts, dt_s in marks.filter(pl.col("ts") > end).select("ts", "dt_s").iter_rows():
            if (ts - last).total_seconds() > max(p.merge_gap_s, 1.5 * dt_s):
                break
            last = ts
    return max(start, first), last


def _read_after(ctx: Context, row: dict[str, Any], end: dt.datetime) -> bool:
    """Whether the port's queue watermark was read after `end` (what came after is then known)."""
    reads = ctx.frames.gauges([QUEUE_WM], devices=[row["device"]], roles=["switch"])
    later = reads.filter(pl.col("port") == row["port"], pl.col("priority") == row["priority"], pl.col("ts") > end)
    return not later.is_empty()


def _quiet_rates(ctx: Context, bursts: pl.DataFrame, evidence: pl.DataFrame) -> pl.DataFrame:
    """Each bursting port's usual transmit rate (`quiet_Bps`): the median over its samples away from its
    ECN-marking or CNP-sending samples (`evidence`, 1-10 s apart: finer than the watermark reads, and they see
    the bursts after the last read of the window, which are unread, not quiet); for a port without such
    samples, its samples outside the burst readings' intervals."""
    tx = port_utilization(ctx, bursts.select("device", "port").unique())
    marks = (
        evidence.filter(pl.col("kind") != "watermark")
        .select("device", "port", pl.col("ts").alias("_mark"), pl.col("dt_s").alias("_mark_dt"))
        .sort("_mark")
    )
    if not marks.is_empty() and not tx.is_empty():
        near = (
            tx.sort("ts")
            .join_asof(
                marks, left_on="ts", right_on="_mark", by=["device", "port"], strategy="nearest", check_sortedness=False
            )
            .filter((pl.col("_mark") - pl.col("ts")).abs() <= as_duration(pl.max_horizontal("dt_s", "_mark_dt")))
        )
        tx = tx.join(near.select("ts", "device", "port").unique(), on=["ts", "device", "port"], how="anti")
    unmarked = (
        bursts.select("device", "port")
        .unique()
        .join(marks.select("device", "port").unique(), on=["device", "port"], how="anti")
    )
    spans = (
        bursts.join(unmarked, on=["device", "port"])
        .select("device", "port", "ts", "dt_s")
        .with_columns((pl.col("ts") - as_duration(pl.col("dt_s"))).alias("_lo"))
    )
    inside = tx.join(spans.rename({"ts": "_hi", "dt_s": "_d"}), on=["device", "port"]).filter(
        pl.col("ts") > pl.col("_lo"), pl.col("ts") <= pl.col("_hi")
    )
    tx = tx.join(inside.select("ts", "device", "port").unique(), on=["ts", "device", "port"], how="anti")
    return tx.group_by("device", "port").agg(pl.col("tx_Bps").median().alias("quiet_Bps"))


#: bit times a pause quantum lasts, and the quanta an XOFF frame asks for (switches send the most, refreshing it)
QUANTUM_BITS, XOFF_QUANTA = 512, 0xFFFF


def _paused_share(ctx: Context, sender: Sender) -> float:
    """The share of the time the leaf held a sender paused: its pause duration counter, else (Broadcom counts
    frames only) its XOFF frames per second times what one frame holds at the port's speed, at most 1."""
    if sender.paused_us_per_s > 0 or sender.pause_frames_per_s <= 0:
        return sender.paused_us_per_s / 1e6
    device, _, port = sender.ref.partition(":")
    speed = ctx.speeds.of(device, port)
    if speed is None or speed.bps <= 0:
        return 0.0
    return min(1.0, sender.pause_frames_per_s * QUANTUM_BITS * XOFF_QUANTA / speed.bps)


def detect(ctx: Context, p: MicroburstParams) -> list[Finding]:
    evidence, marked_reads = downlink_evidence(ctx, p), marked_watermarks(ctx, p)
    bursts = burst_readings(ctx, p, evidence, marked_reads)
    if bursts.is_empty():
        return []
    if not evidence.is_empty():
        evidence = _own_marks(ctx, p, evidence, marked_reads)
    if evidence.is_empty():  # marked reads below the watermark floor only: no other evidence, typed
        evidence = bursts.select(*KEYS, "ts", "dt_s", kind=pl.lit("watermark"), value="watermark").clear()
    marked = _corroborating(evidence, bursts)
    bursts = bursts.join(marked, on=[*KEYS, "ts"], how="left").with_columns(
        pl.max_horizontal(pl.lit(1), pl.col("marked").fill_null(0)).alias("intervals")
    )
    bursts = bursts.join(_quiet_rates(ctx, bursts, evidence), on=["device", "port"], how="left")
    base = pl.col("quiet_Bps").fill_null(0.0)
    line = pl.when(pl.col("speed_Bps") > 0).then(pl.col("speed_Bps"))
    excess_s = (pl.col("tx_Bps") - base).clip(lower_bound=0) * pl.col("dt_s") / pl.col("intervals") / line
    drain_s = pl.col("watermark") / line
    bursts = bursts.with_columns(pl.max_horizontal(excess_s, drain_s).alias("burst_s"))
    eps = episodes(
        bursts,
        KEYS,
        gap_s=p.merge_gap_s,
        gap_intervals=1.5,
        aggregations=[
            pl.col("intervals").sum().alias("bursts"),
            pl.col("watermark").max().alias("peak"),
            pl.col("utilization").mean().alias("util"),
            pl.col("paused_fraction").mean().alias("paused"),
            pl.col("burst_s").median().alias("burst_s"),
            pl.col("speed_source").first().alias("speed_source"),
            pl.col("dt_s").median().alias("read_every_s"),
            pl.col("marked").fill_null(0).max().alias("corroborated"),
        ],
    ).filter(
        (pl.col("bursts") >= p.min_bursts) | ((pl.col("corroborated") > 0) & (pl.col("bursts") >= p.min_marked_bursts))
    )
    findings = []
    for row in eps.iter_rows(named=True):
        device, port, prio, n = row["device"], row["port"], int(row["priority"]), int(row["bursts"])
        start, end = ctx.clip(*_marked_span(ctx, evidence, row, p))
        fan = fan_in(ctx, device, port, prio, start, end, p)
        if fan is None or len(fan.senders) < p.min_senders:
            continue
        held = [_paused_share(ctx, x) for x in fan.senders]
        if held and sum(held) / len(held) > p.max_sender_paused_fraction:
            continue  # senders held back by pauses a good part of the time: a storm's or deadlock's spread
        receiver = f"{fan.receiver[0]}:{fan.receiver[1]}"
        burst_s, peak, util = row["burst_s"], float(row["peak"]), row["util"]
        ms = ""
        if burst_s is not None:  # past the definition's 100 ms: many bursts in each marking interval
            length = f"{burst_s * 1e6:.0f} us" if burst_s < 1e-3 else f"{burst_s * 1000:.0f} ms"
            ms = f", ~{length} " + ("each" if burst_s <= 0.1 else "at line rate per marking interval")
        findings.append(
            Finding(
                kind="microburst",
                severity="warning" if n >= p.warning_bursts else "info",
                start=start,
                end=end,
                devices=fan.devices,
                ports=fan.ports,
                priority=prio,
                score=float(n) * peak / 1e6,
                summary=(
                    f"microbursts: {n} bursts into {receiver} at {fan.leaf_ref} priority {prio}, queue peaking at "
                    f"{peak / 1e6:.1f} MB{ms}, while the port averaged {util or 0:.0%} busy"
                    + (f"; {len(fan.senders)} senders" if fan.senders else "")
                ),
                evidence={
                    **fan.evidence(),
                    "bursts": n,
                    "watermark_reads": row["samples"],
                    "watermark_every_s": row["read_every_s"],
                    "peak_watermark_bytes": peak,
                    "estimated_burst_ms": None if burst_s is None else burst_s * 1000,
                    "utilization": util,
                    "speed_source": row["speed_source"],
                    "paused_fraction": row["paused"],
                },
                job_ids=fan.job_ids,
            )
        )
    return findings


DETECTOR = Detector("microburst", "3", ("microburst",), MicroburstParams, detect)
