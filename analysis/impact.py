"""What each finding cost each training job: the job's collectives during the finding against its own baseline.

The numbers rest on how NCCL runs a collective:

* a ring or tree collective ends for all its ranks together (each step waits for data from a neighbour), so a
  problem anywhere on the job's paths, or one late rank, inflates every rank's execution time alike: the job
  is measured as a whole, never host by host;
* each row of `collectives` is one rank's (one GPU's) operation, so the time it ran beyond its baseline is GPU
  time lost: GPU-seconds lost = sum over the job's rows that ran during the span (a collective hung through a
  PFC storm ends after it) of (exec - baseline) x weight, where the
  weight is the number of operations the row stands for: the gap in `sequence` since the rank's previous row
  of the same operation and size (`OPERATIONS`) over that operation's usual gap (1 where the gap is unknown; at
  most ten across restarts and holes). NCCL numbers every collective and Inspector leaves some out at every
  step: those under `NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES` (8 KiB) and, under its default
  `NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=1`, the CPU-timed ones (a loss scalar's all-reduce, a gradient norm).
  So the usual gap is one step, and only a wider one (a ring buffer that overflowed, a dump thread that fell
  behind, v4.0's latest operation per dump at an interval longer than the job's step) stands for rows missing.
  A series sampled at one constant stride throughout cannot be told from that and counts one operation per row
  (NVIDIA's suggested 500 us dump interval catches every operation longer than that; 2.30's rings keep each
  one). The weight is bounded by wall-clock time too: a communicator runs its operations one after another on
  its stream, so no more of them as long as this one fit between the rank's previous row of it and this one
  (`since / exec`, at least 1): a row's loss is never more than the time since the rank's previous row of it;
* a row's baseline is the median execution time and bus bandwidth of the same job, communicator, operation,
  peer and message size over `lookback_s` around the finding (before and after: a finding at the start of
  the data still has one), outside every finding's span, so one problem never becomes another's baseline
  (microbursts excepted: `TOO_BRIEF_TO_SLOW`);
* excesses are summed signed and the total clipped at zero: noise around the median cancels instead of
  adding up (clipping each operation would count half of all noise as loss);
* a collective hung until the data ends (a PFC deadlock) is never reported: a rank that reports nothing for
  `min_silence_s` beyond its usual gap while the finding lasts and its job is placed lost that silence;
* the interval means of Inspector's Prometheus and OTLP aggregations (`inspector_prom_agg`,
  `inspector_otlp_agg`) stand for an unknown number of operations: they are left out.

Findings that overlap in time and claim one job share its loss by how directly they claim it
(`rocescope.analysis.claims`): while the stronger claim lasts, the job's loss is that finding's only, so a job's
losses summed over findings never count one moment twice. What an amplifier added to
a congestion's loss is a counterfactual: lost CNPs name the jobs that congestion hurt as their victims (but the jobs
whose traffic went unthrottled), each with the congestion's loss less what it would have cost with its senders
throttled (`_controlled_loss`: the receiver's port full at its line rate, no pause), and the loss they share
(`amplifies`).

A finding's jobs (`candidate_jobs`) are those it names, those its evidence says its pause spread to, and
those placed on its hosts or under its leaves; each gets `impact` in the evidence: {job: {gpu_seconds_lost,
exec_inflation, busbw_drop, collectives, ranks, hurt}}. `hurt` (a victim) needs a loss of `min_loss_share` of
the baseline time of the collectives judged, and of `min_gpu_seconds`, so the noise of a healthy job is no
damage and a few collectives hung through a storm are.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl

from rocescope.analysis.claims import AMPLIFIERS, SLOWDOWN, Carve, claimed_spans, overlapping, uncarved
from rocescope.analysis.fabric import Fabric, split_ref
from rocescope.analysis.findings import Finding

log = logging.getLogger(__name__)

__all__ = [
    "KEY",
    "ImpactParams",
    "began",
    "candidate_jobs",
    "concerning",
    "measure",
    "usable",
    "with_impact",
]

#: What makes two operations comparable: the same job, communicator, operation, peer and message size.
KEY = ["job_id", "communicator", "collective", "peer", "bytes"]
#: Findings too brief to slow a collective measurably, kept in every baseline: a microburst is, by its definition,
#: a queue that built and drained within a read with its port far from saturated, delaying what it holds by the
#: time to drain its peak (32 MB at 400G: 0.64 ms) against collectives of tens to hundreds of milliseconds. Training
#: traffic makes them all the time; left out of baselines, they would leave a job none.
TOO_BRIEF_TO_SLOW = frozenset({"microburst"})
#: A rank's series of operations on one communicator (NCCL numbers them in one `sequence`).
SERIES = ["host", "pid", "communicator", "rank"]
#: One operation of a rank's series, by function and size: a training step runs each of its collectives (an
#: all-gather, a reduce-scatter, an all-reduce of its gradients) once, so the `sequence` gap between two of one
#: operation is the step's count of collectives, and the one between two different ones says nothing of missing rows.
OPERATIONS = [*SERIES, "collective", "bytes"]
#: sources whose rows are one interval's means per message-size bucket, not single operations
INTERVAL_MEANS = ("inspector_prom_agg", "inspector_otlp_agg")
MAX_GAP_FACTOR = 10


@dataclass(frozen=True)
class ImpactParams:
    #: baselines come from this far before and after the finding (and collectives are read this far back)
    lookback_s: float = 600.0
    #: collectives that end this long after the window are read too (hung through a deadlock, they end late)
    after_s: float = 60.0
    #: baseline rows a (job, communicator, operation, peer, size) needs to be judged
    min_baseline: int = 5
    #: a job counts as hurt (a victim) when it lost this share of its judged collectives' baseline GPU time
    min_loss_share: float = 0.05
    #: ... and at least this many GPU-seconds
    min_gpu_seconds: float = 0.5
    #: finding spans are widened by this much when left out of baselines (the slowdown's ramp)
    exclude_margin_s: float = 5.0
    #: a rank that reports nothing for this long beyond its usual gap, during a finding, is stalled
    min_silence_s: float = 30.0


#: Findings that can stop a rank's collective outright, so a silence while one lasts is its loss: a queue held
#: paused (a storm, a deadlock) sends nothing, and a link down carries nothing until NCCL's retries give up.
#: Congestion of any other kind (incast, microbursts, imbalance, lost CNPs) slows delivery but never stops it
#: (DCQCN's rate has a floor; go-back-N resends what a lossy queue dropped): a job silent through one of those is
#: hung for its own reasons (a data loader, a dead rank, a host) and its silence is no fabric's doing.
#: A hang (`nccl_hang`, reported only where none of those explains the silence) stops its own job's collectives.
STOPPING_KINDS = frozenset({"pfc_deadlock", "pfc_storm", "link_flap", "nccl_hang"})


def usable(coll: pl.DataFrame) -> pl.DataFrame:
    """The attributed collectives impact can count (a job, a time, not interval means), with `weight`: the
    operations each row stands for (see the module docstring)."""
    rows = coll.filter(
        (pl.col("job_id") != "") & ~pl.col("source").is_in(INTERVAL_MEANS) & (pl.col("exec_time_us") > 0)
    ).sort([*SERIES, "ts"])
    gap = (pl.col("sequence") - pl.col("sequence").shift(1).over(OPERATIONS)).cast(pl.Float64)
    known = pl.when((pl.col("sequence") >= 0) & (pl.col("_gap") >= 1)).then(pl.col("_gap"))
    since_us = (pl.col("ts") - pl.col("ts").shift(1).over(OPERATIONS)).dt.total_microseconds().cast(pl.Float64)
    return (
        rows.with_columns(_gap=gap, _fit=since_us / pl.col("exec_time_us"))
        .with_columns(_gap=known)
        .with_columns(_median=pl.col("_gap").median().over(OPERATIONS).fill_null(1.0))
        .with_columns(weight=(pl.col("_gap") / pl.col("_median")).fill_null(1.0).clip(1.0, MAX_GAP_FACTOR))
        .with_columns(
            weight=pl.when(pl.col("_fit").is_not_null())
            .then(pl.min_horizontal("weight", pl.max_horizontal("_fit", 1.0)))
            .otherwise("weight")
        )
        .drop("_gap", "_median", "_fit")
    )


def began() -> pl.Expr:
    """When each collective began: its end less its execution time (a collective hung through a PFC storm
    ends after it, yet ran during it)."""
    return pl.col("ts") - pl.duration(microseconds=pl.col("exec_time_us").round().cast(pl.Int64))


def measure(
    rows: pl.DataFrame,
    targets: pl.DataFrame,
    excluded: Sequence[tuple[dt.datetime, dt.datetime]],
    p: ImpactParams,
    carved: Mapping[tuple[int, str], Sequence[Carve]] | None = None,
) -> pl.DataFrame:
    """Per target (`fid`, `job_id`, `start`, `end`, `placed_until`): the job's operations that ran during
    [start, end] against their baseline (`usable` rows; `excluded`: spans kept out of every baseline), and its
    stalled ranks' silence (`_silences`). Columns: fid, job_id,
    gpu_seconds_lost, exec_inflation, busbw_drop, collectives, ranks, baseline_exec_us, exec_us,
    baseline_gpu_seconds. `carved`: (fid, job) -> spans whose operations that target counts only the given share of
    (none, mostly: `claims.claimed_spans`)."""
    empty = pl.DataFrame(
        schema={
            "fid": pl.Int64,
            "job_id": pl.String,
            "gpu_seconds_lost": pl.Float64,
            "exec_inflation": pl.Float64,
            "busbw_drop": pl.Float64,
            "collectives": pl.Float64,
            "ranks": pl.UInt32,
            "baseline_exec_us": pl.Float64,
            "exec_us": pl.Float64,
            "baseline_gpu_seconds": pl.Float64,
            "bus_gigabytes": pl.Float64,
        }
    )
    if rows.is_empty() or targets.is_empty():
        return empty
    lookback = dt.timedelta(seconds=p.lookback_s)
    cols = [*KEY, "ts", "host", "pid", "rank", "exec_time_us", "bus_bw_gbs", "weight"]
    rows = rows.select(cols).with_columns(began=began())
    by_ts = rows.sort("ts")
    longest = dt.timedelta(microseconds=float(rows.select(pl.col("exec_time_us").max()).item() or 0.0))
    # what ran during the finding: ended after it began, began before it ended (so ended at most the longest
    # operation after it)
    during = _per_target(by_ts, targets, pl.col("start"), pl.col("end") + longest).filter(
        pl.col("ts") >= pl.col("start"), pl.col("began") <= pl.col("end")
    )
    during = uncarved(during, carved or {})
    clean = by_ts.filter(~overlapping(by_ts["began"], by_ts["ts"], excluded))
    base = (
        _per_target(clean, targets, pl.col("start") - lookback, pl.col("end") + lookback)
        .group_by("fid", *KEY)
        .agg(
            base_exec=pl.col("exec_time_us").median(),
            base_bw=pl.col("bus_bw_gbs").filter(pl.col("bus_bw_gbs").is_not_nan()).median(),
            base_n=pl.len(),
        )
        .filter(pl.col("base_n") >= p.min_baseline)
    )
    judged = during.join(base, on=["fid", *KEY], how="inner")
    out = judged.group_by("fid", "job_id").agg(
        gpu_seconds_lost=(((pl.col("exec_time_us") - pl.col("base_exec")) * pl.col("weight")).sum() / 1e6).clip(0.0),
        exec_inflation=(pl.col("exec_time_us") / pl.col("base_exec")).median(),
        busbw_drop=1.0 - (pl.col("bus_bw_gbs") / pl.col("base_bw")).filter(pl.col("base_bw") > 0).median(),
        collectives=pl.col("weight").sum(),
        ranks=pl.struct("host", "rank").n_unique(),
        baseline_exec_us=pl.col("base_exec").median(),
        exec_us=pl.col("exec_time_us").median(),
        baseline_gpu_seconds=(pl.col("base_exec") * pl.col("weight")).sum() / 1e6,
        bus_gigabytes=(_bus_gigabytes() * pl.col("weight")).sum(),
    )
    silent = _silences(rows, targets, p)
    out = out.join(silent, on=["fid", "job_id"], how="full", coalesce=True).with_columns(
        gpu_seconds_lost=pl.col("gpu_seconds_lost").fill_null(0.0) + pl.col("silent_gpu_seconds").fill_null(0.0),
        ranks=pl.max_horizontal(pl.col("ranks").fill_null(0), pl.col("silent_ranks").fill_null(0)),
        collectives=pl.col("collectives").fill_null(0.0),
        baseline_gpu_seconds=pl.col("baseline_gpu_seconds").fill_null(0.0),
        bus_gigabytes=pl.col("bus_gigabytes").fill_null(0.0),
    )
    return out.select(empty.columns).cast(empty.schema).sort("fid", "job_id")


def _per_target(rows: pl.DataFrame, targets: pl.DataFrame, lo: pl.Expr, hi: pl.Expr) -> pl.DataFrame:
    """The rows (sorted by `ts`) of each target's job that ended in [lo, hi] (expressions of the target's columns),
    with the target's columns: each target's span found by binary search, not a join of every row of the job to
    every target of it (an hour of 128x8 is millions of rows, a finding's span a few minutes of them)."""
    spans = targets.with_columns(_lo=lo, _hi=hi)
    ts = rows["ts"]
    first = ts.search_sorted(spans["_lo"], side="left")
    last = ts.search_sorted(spans["_hi"], side="right")
    parts = [
        rows.slice(a, b - a)
        .filter(pl.col("job_id") == target["job_id"])
        .with_columns(pl.lit(target[c], targets.schema[c]).alias(c) for c in targets.columns if c != "job_id")
        for target, a, b in zip(spans.drop("_lo", "_hi").iter_rows(named=True), first, last, strict=True)
    ]
    return pl.concat(parts) if parts else rows.join(targets, on="job_id").head(0)


def _bus_gigabytes() -> pl.Expr:
    """The gigabytes one operation puts on each rank's wire (NCCL's bus bytes: bus bandwidth x time, the same
    for every run of an operation): its own figures, else its baseline's where it reported no bandwidth."""
    own = pl.col("bus_bw_gbs") * pl.col("exec_time_us") / 1e6
    base = pl.col("base_bw") * pl.col("base_exec") / 1e6
    return pl.when(own.is_finite()).then(own).otherwise(base).fill_nan(None).fill_null(0.0)


def _silences(rows: pl.DataFrame, targets: pl.DataFrame, p: ImpactParams) -> pl.DataFrame:
    """Per target, the GPU time of ranks stalled in a collective the data never reports (a PFC deadlock holds
    it until the run or the job ends): a rank silent for `min_silence_s` beyond its usual gap between
    reports, while the finding lasts and the job is placed (`placed_until`), lost that silence, where the finding
    can stop a collective (`stops`: `STOPPING_KINDS`; targets without the column are taken to)."""
    if "stops" in targets.columns:
        targets = targets.filter(pl.col("stops")).drop("stops")
    # only the jobs a stopping finding concerns (most findings stop nothing), each rank's records in order and
    # numbered (one integer to window by, not four columns: an hour of 128x8 is millions of records)
    mine = rows.filter(pl.col("job_id").is_in(targets["job_id"].unique().implode()))
    series = (
        mine.select(*SERIES, "job_id", "ts", "began")
        .sort(*SERIES, "ts")
        .with_columns(_rank=pl.struct(SERIES).rle_id())
        .with_columns(next_began=pl.col("began").shift(-1).over("_rank"))
        .with_columns(gap=pl.col("next_began") - pl.col("ts"))
        .with_columns(quiet_from=pl.col("ts") + pl.col("gap").median().over("_rank").fill_null(dt.timedelta(0)))
    )
    quiet = series.join(targets, on="job_id").with_columns(
        _from=pl.max_horizontal("quiet_from", "start"),
        _to=pl.min_horizontal(pl.col("next_began").fill_null(pl.col("end")), "end", "placed_until"),
    )
    silence = (pl.col("_to") - pl.col("_from")).dt.total_microseconds() / 1e6
    stalled = quiet.filter(
        (pl.col("next_began").fill_null(pl.col("end")) - pl.col("quiet_from")).dt.total_microseconds() / 1e6
        >= p.min_silence_s,
        silence > 0,
    )
    return stalled.group_by("fid", "job_id").agg(
        silent_gpu_seconds=silence.sum(), silent_ranks=pl.struct(SERIES).n_unique()
    )


def _hosts_of(f: Finding, fabric: Fabric) -> set[str]:
    return (set(f.devices) | {split_ref(r)[0] for r in f.ports}) & fabric.hosts


def concerning(
    findings: Iterable[Finding], fabric: Fabric, job: str, start: dt.datetime, end: dt.datetime, slack: dt.timedelta
) -> list[Finding]:
    """The findings that overlap [start, end] (widened by `slack`) and concern `job` (`candidate_jobs`): what may
    explain a job's own trouble in that span."""
    near = [f for f in findings if f.start <= end + slack and f.end >= start - slack]
    return [f for f in near if job in candidate_jobs(f, fabric)]


def candidate_jobs(f: Finding, fabric: Fabric) -> set[str]:
    """The jobs a finding may have hurt: those it names, those its pause spread to (evidence), those placed
    on its hosts or with a NIC under one of its leaves while it lasted."""
    jobs = set(f.job_ids or ())
    for key in ("jobs_paused_by_spread", "jobs_paused_behind"):
        more = f.evidence.get(key)
        if isinstance(more, list):
            jobs |= {str(j) for j in more}
    hosts, devices = _hosts_of(f, fabric), set(f.devices)
    for p in fabric.placements:
        if p.valid_from > f.end or p.valid_to < f.start:
            continue
        if p.host in hosts or fabric.leaves_of(p.host, p.netdev) & devices:
            jobs.add(p.job_id)
    return jobs


def _hurt(lost: float, baseline_gpu_seconds: float, p: ImpactParams) -> bool:
    return bool(lost >= p.min_loss_share * baseline_gpu_seconds and lost >= p.min_gpu_seconds)


def _rounded(row: dict[str, Any]) -> dict[str, Any]:
    def r(v: Any, n: int) -> Any:
        return None if v is None or v != v else round(float(v), n)

    return {
        "gpu_seconds_lost": r(row["gpu_seconds_lost"], 3),
        "exec_inflation": r(row["exec_inflation"], 3),
        "busbw_drop": r(row["busbw_drop"], 3),
        "collectives": r(row["collectives"], 1),
        "ranks": int(row["ranks"]),
        "baseline_exec_us": r(row["baseline_exec_us"], 1),
        "exec_us": r(row["exec_us"], 1),
    }


def with_impact(
    findings: Sequence[Finding],
    coll: pl.DataFrame,
    fabric: Fabric,
    p: ImpactParams | None = None,
    dropped: pl.DataFrame | None = None,
    rows: pl.DataFrame | None = None,
) -> list[Finding]:
    """The findings with `impact` in their evidence: an entry per candidate job with collectives to judge
    (`coll`: attributed collectives, `rocescope.analysis.collectives.ATTRIBUTED_SCHEMA`, read `lookback_s`
    before the window); {} when none of its jobs has. Without any collectives recorded, nothing is measured:
    the findings are returned unchanged. `dropped`: Inspector's own drops (`ts`, `device`: NCCL's hostname,
    `value`: records; `nccl_records_dropped` gauges): an entry whose job's hosts dropped records while the
    finding lasted says how many, and that its loss is a lower bound (`_incomplete`). `rows`: `usable(coll)`, where
    the caller has it already."""
    p = p or ImpactParams()
    rows = usable(coll) if rows is None else rows
    means_only = _means_only(coll, rows)
    if (rows.is_empty() and not means_only) or not findings:
        return list(findings)
    jobs = [candidate_jobs(f, fabric) for f in findings]
    findings = [_unmeasurable(f, jobs[i] & means_only) for i, f in enumerate(findings)]
    if rows.is_empty():
        return [f.with_(evidence={**f.evidence, "impact": {}}) for f in findings]
    placed: dict[str, dt.datetime] = {}
    for pl_ in fabric.placements:
        placed[pl_.job_id] = max(placed.get(pl_.job_id, pl_.valid_to), pl_.valid_to)
    targets = [
        (i, job, f.start, f.end, placed.get(job, f.end), f.kind in STOPPING_KINDS)
        for i, f in enumerate(findings)
        for job in sorted(jobs[i])
    ]
    if not targets:
        return [f.with_(evidence={**f.evidence, "impact": {}}) for f in findings]
    ts = rows.schema["ts"]
    schema: dict[str, pl.DataType] = {
        "fid": pl.Int64(),
        "job_id": pl.String(),
        "start": ts,
        "end": ts,
        "placed_until": ts,
        "stops": pl.Boolean(),
    }
    frame = pl.DataFrame(targets, schema=schema, orient="row")
    margin = dt.timedelta(seconds=p.exclude_margin_s)
    excluded = [(f.start - margin, f.end + margin) for f in findings if f.kind not in TOO_BRIEF_TO_SLOW]
    measured = measure(rows, frame, excluded, p, claimed_spans(findings, jobs))
    per_finding: dict[int, dict[str, dict[str, Any]]] = {}
    rows_of: dict[tuple[int, str], dict[str, Any]] = {}
    for row in measured.iter_rows(named=True):
        entry = _rounded(row)
        entry["hurt"] = _hurt(entry["gpu_seconds_lost"] or 0.0, row["baseline_gpu_seconds"], p)
        per_finding.setdefault(int(row["fid"]), {})[row["job_id"]] = entry
        rows_of[(int(row["fid"]), row["job_id"])] = row
    _amplified(findings, per_finding, rows_of, fabric, p)
    if dropped is not None and dropped.height:
        _incomplete(findings, per_finding, rows, dropped, p)
    return [f.with_(evidence={**f.evidence, "impact": per_finding.get(i, {})}) for i, f in enumerate(findings)]


#: why a job's cost is not measured where its collectives arrive as interval means only (`present.not_measured`)
MEANS_ONLY = (
    "GPU-seconds not measurable from this source: its collectives arrive as interval means (Inspector's "
    "Prometheus or OTLP aggregates), not single operations"
)


def _means_only(coll: pl.DataFrame, rows: pl.DataFrame) -> set[str]:
    """Jobs whose collectives came joined to them only as interval means: no operation to weigh or time."""
    if coll.is_empty():
        return set()
    joined = set(coll.filter(pl.col("job_id") != "", pl.col("source").is_in(INTERVAL_MEANS))["job_id"].to_list())
    return joined - set(rows["job_id"].unique().to_list())


def _unmeasurable(f: Finding, jobs: set[str]) -> Finding:
    """The finding with `impact_not_measured`: job -> why, for its candidate jobs no record can measure."""
    if not jobs:
        return f
    return f.with_(evidence={**f.evidence, "impact_not_measured": {job: MEANS_ONLY for job in sorted(jobs)}})


def _incomplete(
    findings: Sequence[Finding],
    per_finding: dict[int, dict[str, dict[str, Any]]],
    rows: pl.DataFrame,
    dropped: pl.DataFrame,
    p: ImpactParams,
) -> None:
    """Entries whose job's processes dropped records (Inspector's ring buffers overflowed) from the finding's start
    to `after_s` past its end get `records_dropped` and `lower_bound`: the records that would have shown the
    slow collectives are missing, so the GPU-seconds measured from the rest undercount the loss."""
    hosts = rows.group_by("job_id").agg(pl.col("host").unique())
    hosts_of = {str(j): set(h) for j, h in hosts.iter_rows()}
    after = dt.timedelta(seconds=p.after_s)
    for i, jobs in per_finding.items():
        f = findings[i]
        during = dropped.filter(pl.col("ts").is_between(f.start, f.end + after))
        for job, entry in jobs.items():
            n = during.filter(pl.col("device").is_in(sorted(hosts_of.get(job, ()))))["value"].sum()
            if n:
                entry["records_dropped"] = int(n)
                entry["lower_bound"] = True


def _amplified(
    findings: Sequence[Finding],
    per_finding: dict[int, dict[str, dict[str, Any]]],
    measured: Mapping[tuple[int, str], Mapping[str, Any]],
    fabric: Fabric,
    p: ImpactParams,
) -> None:
    """Lost CNPs hurt the jobs that the congestion they left unchecked hurt (an overlapping congestion finding
    on one of its devices: the incast a NIC deaf to CNPs sends into, the incast whose CNPs the fabric drops),
    except the jobs the finding names: their traffic is what went unthrottled, they gain. Their share of that
    loss is what the congestion would have cost with its senders throttled (`_controlled_loss`) taken from it;
    `amplifies` gives the congestion, its loss and that remainder. (PFC turned off makes its own port's senders
    drop instead of pausing the others: its victims are its own.)"""
    for i, f in enumerate(findings):
        if f.kind != "cnp_loss":
            continue
        for k, g in enumerate(findings):
            if g.kind in AMPLIFIERS or g.kind == SLOWDOWN or g.start > f.end or g.end < f.start:
                continue
            if not set(g.devices) & set(f.devices):
                continue
            for job, entry in per_finding.get(k, {}).items():
                if not entry["hurt"] or job in (f.job_ids or ()):
                    continue
                row = measured[(k, job)]
                controlled = _controlled_loss(g, job, row, fabric)
                lost = None if controlled is None else max(0.0, (entry["gpu_seconds_lost"] or 0.0) - controlled)
                shared = {
                    "kind": g.kind,
                    "devices": list(g.devices[:3]),
                    "gpu_seconds_lost": entry["gpu_seconds_lost"],
                    "controlled_gpu_seconds": None if controlled is None else round(controlled, 3),
                }
                hurt = lost is None or _hurt(lost, row["baseline_gpu_seconds"], p)
                per_finding.setdefault(i, {})[job] = {
                    **entry,
                    "gpu_seconds_lost": None if lost is None else round(lost, 3),
                    "hurt": hurt,
                    "amplifies": shared,
                }


def _controlled_loss(g: Finding, job: str, row: Mapping[str, Any], fabric: Fabric) -> float | None:
    """GPU-seconds congestion `g` would have cost `job` had congestion control throttled its senders (the
    counterfactual of lost CNPs), None where `g` names no receiver or speed to reason from.

    Throttled, the senders fill the receiver's port at its line rate C and no more: no pause leaves it. A
    job with no rank behind that port loses nothing then (what it lost came by the pauses). A job whose ranks
    receive through it offers its collectives' bytes at its own rate r while the senders' traffic offers C: a
    FIFO port serves both in proportion, so an operation of B bus bytes takes B (r + C) / (r C) instead of
    B / r: B / C longer, whatever r. Summed over the job's operations (each row one rank's), that is its bus
    bytes over C. None without the port's speed.

    That holds while each operation starts at its line rate against senders that fill the port, which a few
    throttled senders do: in the simulator, 4 of them lengthen the receiving job's operations by 0.97 B / C.
    More senders come closer to sharing the port fairly (N senders: up to N B / C; the simulator's 8, 16 and 64
    give 3.4, 10.8 and 53 B / C), so with a large fan-in this overstates the amplifier's share."""
    receiver = g.evidence.get("receiver")
    if not isinstance(receiver, str) or ":" not in receiver:
        return None
    host, iface = split_ref(receiver)
    if job not in fabric.jobs_on_nic(host, iface, g.start, g.end):
        return 0.0
    speed = g.evidence.get("speed_gbps")
    if not isinstance(speed, int | float) or speed <= 0:
        return None
    return float(row["bus_gigabytes"]) * 8 / float(speed)
