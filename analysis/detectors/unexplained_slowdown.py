"""Unexplained slowdown: a training job's collectives run slow for a sustained time and no fabric finding
explains it; the finding names the ranks that hold the others back (stragglers), their hosts and NICs.

NCCL semantics (ring and tree alike, NVIDIA/nccl's `ncclKernel` steps): a rank cannot finish a step before
its neighbours hand it data, so one rank that *arrives late* (issues the collective late: a slow GPU, a
data-loader stall, a throttled host) holds every other rank in-kernel, waiting, until it arrives; then the
collective runs at its usual speed. Hence:

* every punctual rank's execution time grows by the straggler's delay, while the straggler's own kernel
  starts last and waits least: its execution time stays near its baseline. A slow link or queue instead
  slows the data of every step, and every rank alike, with no late arrival: that is the fabric's detectors'
  domain, and what `ctx.prior` (their findings) explains;
* with Inspector's verbose traces (`event_trace_ts`: `start_ts`, when each rank issued the collective), the
  straggler is the rank that issues the same collective (communicator, sequence) last, by more than usual:
  its lateness against the first rank, minus its own lateness in the baseline, which cancels the constant
  offsets between host clocks;
* without traces, it is the rank whose execution time grew least while the job's grew: the late rank waits
  least in-kernel. A job whose ranks all slowed alike names no straggler (a shared cause: a fabric problem
  no detector saw, or the job's own communication pattern).

Method: each operation against the median of its (job, communicator, operation, peer, size) outside slow
spells (two passes: the first marks the buckets that are slow against the median of everything, the second
takes the baseline without them); per job and `bucket_s`, the median inflation of the operations that ran in the
bucket (by time: an operation counts in every bucket its execution overlaps, its extra time spread over them);
buckets at `min_inflation` or more joined into spells (gaps of `gap_buckets`), those of `min_seconds` or more that no
earlier finding covers (the job among a finding's jobs, placed on its hosts or under its leaves, or paused
by its spread: `rocescope.analysis.impact.candidate_jobs`; a finding that began more than `min_seconds` plus
`explain_slack_s` before the spell was there while the job ran at its usual speed, and explains nothing) are
findings. A rank is named when its score
reaches `straggler_share`: with traces, its extra lateness over the latest rank's, when that explains at
least `min_lateness_share` of the job's median extra time (less than all of it where a record sums several
collectives, each delayed); else how much less than the job's median extra time it waited, over that. Its
NIC comes from the job's placement on its host (`rocescope.analysis.placements.rank_nic`).

A straggler during a fabric incident: a spell an earlier finding explains is still a finding where the event
traces show the named rank issuing later than it usually does, beyond its usual spread (congestion slows every
rank's data and makes none issue late; a rank it spared issues early), with its own share of the spell's extra time
(`own_share`: in each collective the straggler's own extra time is the fabric's, every other rank's beyond it is
the wait for the straggler; of what all ranks took beyond their baselines) and the findings it ran `during`: impact
gives it that share of the job's loss while they overlap and the fabric finding the rest
(`rocescope.analysis.claims`). Without traces no straggler is told there: the rank that waited least may be one
the congestion spared (an all-to-all's rank whose transfers missed the congested port).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl

from rocescope.analysis.claims import DURING, SHARE
from rocescope.analysis.detectors.base import Context, Detector, Params, threshold
from rocescope.analysis.episodes import episodes
from rocescope.analysis.findings import Finding
from rocescope.analysis.impact import KEY, ImpactParams, began, concerning
from rocescope.analysis.placements import rank_nic

KIND = "unexplained_slowdown"
RANK = ["host", "pid", "communicator", "rank"]


class SlowdownParams(Params):
    lookback_s: float = threshold(
        600.0,
        "Collectives read this far before the window (baseline).",
        "derivation: ten minutes hold hundreds of training iterations, so each (communicator, op, size) has far more "
        "than min_baseline operations; the same span as impact's baselines (ImpactParams.lookback_s).",
        ge=0,
    )
    bucket_s: float = threshold(
        5.0,
        "Bucket of the job's median inflation.",
        "derivation: five seconds hold several iterations (sub-second to a few seconds each), so the bucket's median "
        "is over many operations, and min_seconds spans six buckets so a spell's edges are resolved.",
        gt=0,
    )
    min_inflation: float = threshold(
        1.3,
        "Median execution time over baseline that is slow.",
        "derivation: a judgement on the quiet side: the median of a bucket's operations 30% over their own median "
        "baseline is far beyond ordinary jitter of such a median; a milder slowdown goes unreported.",
        gt=1,
    )
    min_seconds: float = threshold(
        30.0,
        "A slow spell at least this long is a finding.",
        "derivation: six 5 s buckets, so one slow iteration or a few seconds' stall cannot make a finding; a sustained "
        "slowdown costs GPU time, a blip does not.",
        gt=0,
    )
    gap_buckets: float = threshold(
        2.0,
        "Slow buckets this many buckets apart are one spell.",
        "derivation: a late rank's delay varies by iteration, so one bucket's median may dip under min_inflation "
        "inside a spell; bridging a one-bucket gap keeps it one spell, longer gaps split it.",
        ge=1,
    )
    min_baseline: int = threshold(
        5,
        "Baseline operations a (communicator, op, size) needs.",
        "derivation: the median of 5 operations stays among the usual ones with up to 2 outliers, so no single slow "
        "operation sets a baseline; the same floor as impact's (ImpactParams.min_baseline).",
        ge=1,
    )
    straggler_share: float = threshold(
        0.5,
        "Score from which a rank is named a straggler.",
        "derivation: scores run from 0 (a punctual rank: it waits the job's whole extra time, or is not late) to 1 "
        "(the rank the others wait for); the midpoint names only ranks nearer the straggler.",
        gt=0,
        le=1,
    )
    min_lateness_share: float = threshold(
        0.1,
        "Extra lateness (traces) of the latest rank over the job's extra time that names.",
        "derivation: a record may sum several collectives, each delayed by the late rank, so its lateness explains "
        "only a share of the job's extra time; 10% admits records of up to ~10, below it execution times judge.",
        gt=0,
        le=1,
    )
    max_named: int = threshold(
        4,
        "Stragglers named at most.",
        "derivation: a cap on the list only (highest scores first, one per process), never on what is detected; a few "
        "names keep an operator on the likeliest hosts rather than a whole job.",
        ge=1,
    )
    explain_slack_s: float = threshold(
        10.0,
        "A finding this close in time may explain a spell.",
        "derivation: a fabric finding's edges are known to its counters' read interval and the spell's to a 5 s "
        "bucket; the slack lets a cause timed a read apart explain it (errs toward not calling it unexplained).",
        ge=0,
    )
    shared_port_busy: float = threshold(
        0.5,
        "A microburst finding whose port averaged at least this busy may explain a spell.",
        "derivation: bursts cannot explain a spell because each drains within a read on a port far from saturation, "
        "delaying what it held by a drain time (`CANNOT_EXPLAIN`). A port busy over half its time, in a finding that "
        "began with the spell, carried traffic that was not there before: DCQCN converges competing flows to fair "
        "shares, so whenever the job's transfers met that traffic there they got half the line rate or less and took "
        "twice as long or more, a bandwidth share and no drain time.",
        gt=0,
        le=1,
    )
    critical_inflation: float = threshold(
        2.0,
        "Spells this slow are critical.",
        "derivation: at twice their baseline the job's collectives spend as long waiting as working, half of their GPU "
        "time in them lost; below it the finding stays a warning.",
        gt=1,
    )


def _every(p: SlowdownParams) -> str:
    """`bucket_s` as a polars interval."""
    return f"{round(p.bucket_s * 1000)}ms"


def _ratios(rows: pl.DataFrame, p: SlowdownParams) -> pl.DataFrame:
    """Rows with `bucket`, `base` (their baseline execution time), `ratio`, `excess_us` and `slow_bucket`, one per
    collective and bucket its execution overlaps (`_rec`: the collective's row in `rows`, whose other columns
    `_records` joins back; `share`: the part of its execution in the bucket, over which its excess is spread). By
    time, not by record: a storm the fabric missed stretches collectives to 15 s, one record ending every third 5 s
    bucket, and buckets judged by the records ending in them left that spell in pieces shorter than `min_seconds`;
    judged by what ran in them, every bucket is slow."""
    every = _every(p)
    bucket_end = pl.col("bucket") + pl.duration(microseconds=round(p.bucket_s * 1e6))
    overlap = pl.min_horizontal("ts", bucket_end) - pl.max_horizontal("_began", "bucket")
    # the comparable operations (`KEY`: five strings) as one integer, joined once per record: the baselines are then
    # joined to every (record, bucket) row on it (an hour of 128x8 is millions of records); only the columns the
    # baselines need are spread over buckets (all of them made every join of millions of rows copy two dozen)
    keys = rows.select(KEY).unique().with_row_index("_key")
    records = (
        rows.select(*KEY, "ts", "exec_time_us", "bus_bw_gbs", "weight")
        .with_row_index("_rec")
        .join(keys, on=KEY, how="left", coalesce=True)
        .drop(k for k in KEY if k != "job_id")
    )
    # the buckets from the one the collective began in to the one it ended in, as offsets from the first (as integers:
    # a third faster than ranges of datetimes over millions of records)
    first_bucket = pl.col("_began").dt.truncate(every)
    step_us = round(p.bucket_s * 1e6)
    buckets = (pl.col("ts").dt.truncate(every) - first_bucket).dt.total_microseconds() // step_us + 1
    spread = (
        records.with_columns(_began=began())
        .with_columns(_k=pl.int_ranges(0, buckets))
        .explode("_k")
        .with_columns(bucket=first_bucket + pl.duration(microseconds=step_us) * pl.col("_k"))
        .drop("_k")
        .with_columns(share=(overlap.dt.total_microseconds() / pl.col("exec_time_us").clip(1.0)).clip(0.0, 1.0))
    )
    # a collective of no measurable length (it began when it ended, to the microsecond: no bucket overlaps it) is all
    # in the bucket it ended in
    spread = spread.with_columns(share=pl.when(pl.col("ts") > pl.col("_began")).then("share").otherwise(1.0))

    def judged(base_records: pl.DataFrame) -> pl.DataFrame:
        base = (
            base_records.group_by("_key")
            .agg(base=pl.col("exec_time_us").median(), base_bw=pl.col("bus_bw_gbs").median(), _n=pl.len())
            .filter(pl.col("_n") >= p.min_baseline)
            .drop("_n")
        )
        return spread.join(base, on="_key", how="inner").with_columns(
            ratio=pl.col("exec_time_us") / pl.col("base"),
            excess_us=(pl.col("exec_time_us") - pl.col("base")) * pl.col("weight") * pl.col("share"),
        )

    def slow_buckets(frame: pl.DataFrame) -> pl.DataFrame:
        per = frame.group_by("job_id", "bucket").agg(inflation=pl.col("ratio").median())
        return per.filter(pl.col("inflation") >= p.min_inflation).select("job_id", "bucket")

    first = judged(records)
    touched = spread.join(slow_buckets(first), on=["job_id", "bucket"], how="semi")["_rec"].unique()
    second = judged(records.filter(~pl.col("_rec").is_in(touched.implode())))
    slow = slow_buckets(second).with_columns(slow_bucket=pl.lit(True))
    out = second.join(slow, on=["job_id", "bucket"], how="left").with_columns(pl.col("slow_bucket").fill_null(False))
    return out.drop("_key", "_began")


def _records(judged: pl.DataFrame, rows: pl.DataFrame, job: str, p: SlowdownParams) -> pl.DataFrame:
    """The job's collectives, one row each (`_ratios` spreads them over buckets: the one of the bucket it ended in),
    with every column of `rows` (of which `_ratios` judged them) and their baseline and ratio."""
    mine = judged.filter(pl.col("job_id") == job, pl.col("bucket") == pl.col("ts").dt.truncate(_every(p)))
    own = rows.with_row_index("_rec").filter(pl.col("job_id") == job)
    return own.join(mine.drop("job_id", "ts", "exec_time_us", "bus_bw_gbs", "weight"), on="_rec").sort("_rec")


def _spells(judged: pl.DataFrame, p: SlowdownParams) -> pl.DataFrame:
    per = judged.group_by("job_id", "bucket").agg(
        inflation=pl.col("ratio").median(),
        busbw=(pl.col("bus_bw_gbs") / pl.col("base_bw")).filter(pl.col("base_bw") > 0).median(),
        excess_us=pl.col("excess_us").sum(),
        slow=pl.col("slow_bucket").first(),
    )
    slow = per.filter(pl.col("slow")).with_columns(
        ts=pl.col("bucket") + pl.duration(milliseconds=round(p.bucket_s * 1000)), dt_s=pl.lit(p.bucket_s)
    )
    if slow.is_empty():
        return slow
    return episodes(
        slow,
        ["job_id"],
        gap_s=p.gap_buckets * p.bucket_s,
        aggregations=[
            pl.col("inflation").median().alias("inflation"),
            pl.col("busbw").median().alias("busbw"),
            (pl.col("excess_us").sum() / 1e6).alias("gpu_seconds"),
        ],
    )


def _edges(
    rows: pl.DataFrame, start: dt.datetime, end: dt.datetime, p: SlowdownParams
) -> tuple[dt.datetime, dt.datetime]:
    """A spell's edges at the collectives' own times, not the buckets': from the first slow collective's start
    to the last one's end, within a bucket of the spell's."""
    edge = dt.timedelta(seconds=p.bucket_s)
    slow = rows.filter(pl.col("ratio") >= p.min_inflation, pl.col("ts").is_between(start - edge, end + edge))
    if slow.is_empty():
        return start, end
    first, last = slow.select(began().min().alias("first"), pl.col("ts").max().alias("last")).row(0)
    return first, last


#: Findings that cannot explain a sustained slowdown, whenever they are, unless their port was busy
#: (`SlowdownParams.shared_port_busy`). A microburst is, by its definition, a queue that built and drained within a
#: read with its port far from saturated: each burst delays what it holds by the time to drain its peak (32 MB at
#: 400G: 0.64 ms), where a spell is collectives `min_inflation` (30%) slower for `min_seconds` (30 s), tens to hundreds
#: of milliseconds a collective. Congestion that holds a job back that long keeps queues standing and ports saturated
#: or paused for reads on end: an incast, a storm, an imbalance, or traffic that shares the job's port.
CANNOT_EXPLAIN = frozenset({"microburst"})


def _explained(
    ctx: Context,
    p: SlowdownParams,
    job: str,
    start: dt.datetime,
    end: dt.datetime,
    slack: dt.timedelta,
    onset: dt.timedelta,
) -> list[Finding]:
    """Earlier findings of another kind that overlap the spell, concern the job and began with it: at most `onset`
    before the spell's start. A cause the job ran under for a whole spell's length at its usual speed (congestion
    that was there all along: a tree's fan-in, a busy storage reader) was not slowing it, and cannot explain why it
    slowed later; nor can bursts too short to hold a job back (`CANNOT_EXPLAIN`) on a port mostly idle."""
    near = concerning(ctx.prior, ctx.fabric, job, start, end, slack)
    return [
        f
        for f in near
        if f.kind != KIND
        and (f.kind not in CANNOT_EXPLAIN or float(f.evidence.get("utilization") or 0.0) >= p.shared_port_busy)
        and f.start >= start - onset
    ]


def _lateness(rows: pl.DataFrame) -> pl.DataFrame:
    """The traced rows (Inspector's `event_trace_ts`) with `lateness_us`: how long after the first rank of its
    communicator each rank issued the same collective."""
    return (
        rows.filter(pl.col("start_ts").dt.epoch("us") > 0, pl.col("sequence") >= 0)
        .with_columns(
            lateness_us=(pl.col("start_ts") - pl.col("start_ts").min().over("communicator", "collective", "sequence"))
            .dt.total_microseconds()
            .cast(pl.Float64),
            _ranks=pl.len().over("communicator", "collective", "sequence"),
        )
        .filter(pl.col("_ranks") >= 2)
    )


def _scores(
    rows: pl.DataFrame, start: dt.datetime, end: dt.datetime, p: SlowdownParams
) -> tuple[pl.DataFrame, str, float]:
    """Per rank of one job: its straggler score (see the module docstring), the method and the job's median
    extra time per operation (us)."""
    during = rows.filter(pl.col("ts").is_between(start, end))
    job_excess = float(during.select((pl.col("exec_time_us") - pl.col("base")).median()).item() or 0.0)
    if job_excess <= 0 or during.select(pl.struct(RANK).n_unique()).item() < 2:
        return pl.DataFrame(), "none", job_excess
    traced = _lateness(rows)
    if not traced.is_empty():
        now = traced.filter(pl.col("ts").is_between(start, end))
        late = now.group_by(RANK).agg(late=pl.col("lateness_us").median())
        usual = traced.filter(~pl.col("slow_bucket")).group_by(RANK).agg(usual=pl.col("lateness_us").median())
        both = late.join(usual, on=RANK, how="inner").with_columns(lateness_us=pl.col("late") - pl.col("usual"))
        top = both["lateness_us"].max() if both.height >= 2 else None
        # a record may sum several collectives (the late rank delays each of them): lateness explains a share
        if isinstance(top, int | float) and top >= p.min_lateness_share * job_excess:
            return both.with_columns(score=pl.col("lateness_us") / top), "event_trace", job_excess
    own = during.group_by(RANK).agg(
        own_excess_us=(pl.col("exec_time_us") - pl.col("base")).median(), own_inflation=pl.col("ratio").median()
    )
    return own.with_columns(score=(job_excess - pl.col("own_excess_us")) / job_excess), "exec_time", job_excess


def _stragglers(
    ctx: Context, p: SlowdownParams, job: str, scored: pl.DataFrame, rows: pl.DataFrame
) -> list[dict[str, Any]]:
    if scored.is_empty():
        return []
    named = scored.filter(pl.col("score") >= p.straggler_share).sort("score", descending=True)
    named = named.unique(["host", "pid"], keep="first", maintain_order=True).head(p.max_named)
    info = rows.group_by(RANK).agg(pl.col("ranks").max(), pl.col("gpu").max())
    out = []
    for row in named.join(info, on=RANK, how="left").iter_rows(named=True):
        nic = rank_nic(
            ctx.frames.endpoints(), job, row["host"], int(row["rank"]), int(row["ranks"] or 0), int(row["gpu"] or -1)
        )
        entry: dict[str, Any] = {
            "host": row["host"],
            "nic": nic,
            "rank": int(row["rank"]),
            "communicator": row["communicator"],
            "pid": int(row["pid"]),
            "score": round(float(row["score"]), 3),
        }
        for k in ("lateness_us", "own_inflation"):
            if k in row and row[k] is not None:
                entry[k] = round(float(row[k]), 3)
        out.append(entry)
    return out


def _summary(job: str, row: dict[str, Any], seconds: float, named: list[dict[str, Any]], method: str) -> str:
    bw = f" (bus bandwidth {-(1 - row['busbw']):+.0%})" if row["busbw"] is not None else ""
    head = (
        f"unexplained slowdown: {job}'s collectives ran {row['inflation']:.2f}x their baseline{bw} for "
        f"{seconds:.0f} s with no fabric finding on its hosts or paths"
    )
    if not named:
        return head + "; all ranks slowed alike (no single straggler)"
    who = ", ".join(f"rank {s['rank']} on {s['host']}" + (f" ({s['nic']})" if s["nic"] else "") for s in named)
    how = "issues its collectives last, by the event traces" if method == "event_trace" else "waits least in-kernel"
    return head + f"; straggler{'s' if len(named) > 1 else ''} the ring waits for: {who} ({how})"


def detect(ctx: Context, p: SlowdownParams) -> list[Finding]:
    rows = ctx.frames.usable_collectives(p.lookback_s, ImpactParams().after_s)  # the read impact makes too
    if rows.is_empty():
        return []
    judged = _ratios(rows, p)
    spells = _spells(judged, p)
    findings = []
    slack = dt.timedelta(seconds=p.explain_slack_s)
    # a cause began with the spell when it began at most a spell's minimum length (plus the slack for edges known to
    # a read) before it: had it slowed the job earlier, the spell would have begun earlier
    onset = slack + dt.timedelta(seconds=p.min_seconds)
    for row in spells.iter_rows(named=True) if not spells.is_empty() else ():
        if row["end"] <= ctx.window.start:
            continue
        job = row["job_id"]
        mine = _records(judged, rows, job, p)
        start, end = ctx.clip(*_edges(mine, row["start"], row["end"], p))
        seconds = (end - start).total_seconds()
        if seconds < p.min_seconds - 1e-6:
            continue
        causes = _explained(ctx, p, job, start, end, slack, onset)
        scored, method, job_excess = _scores(mine, start, end, p)
        named = _stragglers(ctx, p, job, scored, mine)
        # a fabric finding explains the spell unless the event traces show the straggler issuing later than it
        # usually does: congestion slows every rank's data and makes none issue late (a rank it spared finishes
        # early and issues its next collective early), so that lateness is the straggler's own; without traces
        # the rank that waited least may be one the congestion spared, and no straggler is told
        if causes:
            named = [s for s in named if method == "event_trace" or _issues_late(mine, start, end, s)]
            if not named:
                continue
        hosts = sorted(set(mine["host"].to_list()))
        evidence: dict[str, Any] = {
            "job": job,
            "inflation": row["inflation"],
            "busbw_drop": None if row["busbw"] is None else 1 - row["busbw"],
            "excess_us_per_collective": job_excess,
            "straggler_method": method,
            "stragglers": named,
            "job_hosts": len(hosts),
        }
        summary = _summary(job, row, seconds, named, method)
        gpu_seconds = max(0.0, float(row["gpu_seconds"]))
        if causes:
            share = _own_share(mine, start, end, named[0])
            evidence[SHARE] = share
            evidence[DURING] = [
                {"kind": f.kind, "start": f.start.isoformat(), "end": f.end.isoformat()} for f in causes
            ]
            kinds = " and ".join(sorted({f.kind.replace("_", " ") for f in causes}))
            summary = _during(job, row, seconds, named, kinds, share)
            gpu_seconds *= share
        findings.append(
            Finding(
                kind=KIND,
                severity="critical" if row["inflation"] >= p.critical_inflation and not causes else "warning",
                start=start,
                end=end,
                devices=tuple(dict.fromkeys(s["host"] for s in named)),
                ports=tuple(dict.fromkeys(f"{s['host']}:{s['nic']}" for s in named if s["nic"])),
                priority=-1,
                score=gpu_seconds,
                summary=summary,
                evidence=evidence,
                job_ids=(job,),
            )
        )
    return findings


def _issues_late(rows: pl.DataFrame, start: dt.datetime, end: dt.datetime, straggler: dict[str, Any]) -> bool:
    """Whether the event traces show `straggler` issuing its collectives later during the spell than it usually does,
    by more than its usual lateness varies (the spread of its lateness outside slow buckets): a record that sums
    several collectives carries its first one's issue time only, so the lateness is a part of what the others
    waited, yet late it is, where a rank the congestion spared issues early."""
    lateness, usual = pl.col("lateness_us"), ~pl.col("slow_bucket")
    hi, lo, mid, now, n = (
        _lateness(rows)
        .filter(*(pl.col(k) == straggler[k] for k in RANK))
        .select(
            lateness.filter(usual).quantile(0.75),
            lateness.filter(usual).quantile(0.25).alias("lo"),
            lateness.filter(usual).median().alias("mid"),
            lateness.filter(pl.col("ts").is_between(start, end)).median().alias("now"),
            usual.sum().alias("n"),
        )
        .row(0)
    )
    return n >= 2 and now is not None and now - mid > hi - lo


def _own_share(rows: pl.DataFrame, start: dt.datetime, end: dt.datetime, straggler: dict[str, Any]) -> float:
    """The share of the job's extra time over the spell a straggler's late arrival accounts for, while a fabric
    finding slows the job too: in each collective the straggler's own extra time is the fabric's (it waits for no
    one), and every other rank waited that much plus the straggler's delay; so the delay is what each other rank
    took beyond the straggler, of what all ranks took beyond their baselines."""
    during = rows.filter(pl.col("ts").is_between(start, end)).with_columns(
        excess=(pl.col("exec_time_us") - pl.col("base")).clip(lower_bound=0.0)
    )
    key = ["communicator", "sequence"]
    theirs = during.filter(*(pl.col(k) == straggler[k] for k in RANK)).select(*key, fabric=pl.col("excess"))
    others = during.filter(~pl.all_horizontal(*(pl.col(k) == straggler[k] for k in RANK))).join(theirs, on=key)
    waited = float(
        others.select(((pl.col("excess") - pl.col("fabric")).clip(lower_bound=0.0) * pl.col("weight")).sum()).item()
        or 0.0
    )
    total = float(during.select((pl.col("excess") * pl.col("weight")).sum()).item() or 0.0)
    return min(1.0, waited / total) if total > 0 else 0.0


def _during(
    job: str, row: dict[str, Any], seconds: float, named: list[dict[str, Any]], kinds: str, share: float
) -> str:
    who = ", ".join(f"rank {s['rank']} on {s['host']}" + (f" ({s['nic']})" if s["nic"] else "") for s in named)
    return (
        f"straggler during {kinds}: {job}'s collectives ran {row['inflation']:.2f}x their baseline for {seconds:.0f} s "
        f"while {kinds} slowed it; {who} issues its collectives late, by the event traces, which accounts for "
        f"{share:.0%} of the job's extra time (the rest is the {kinds}'s)"
    )


DETECTOR = Detector("unexplained_slowdown", "1", (KIND,), SlowdownParams, detect)
