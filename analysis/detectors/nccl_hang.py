"""NCCL hang: a training job that completes no collective on any of its communicators for far longer than its usual
step while it is still placed, with no finding that stops traffic (a PFC deadlock or storm, a link down) on its
path to explain it; the finding names the ranks that fell silent first, their hosts and NICs.

NCCL semantics: a collective completes only when every rank of its communicator has joined it, so one rank that
never arrives (a crashed or wedged process, a GPU or host fault, a rank waiting on another communicator: a
pipeline schedule's deadlock) holds all the others in-kernel, and the training loop, blocked in that collective,
issues no other. Inspector writes completed collectives only, so a hung job is silence in `collectives`, not a
slow record. PyTorch's ProcessGroupNCCL watchdog aborts the process group once a collective outlives its
timeout, so a hang costs every GPU of the job up to that long, and then a restart.

Method: per job, the silences between consecutive collectives completed on any of its communicators, and from
its last one to the window's end. A communicator the loop no longer uses (one made for an initial barrier, an
evaluation) goes quiet while the others go on, which is no hang. The job's `step` is its busiest communicator's:
the median over that communicator's ranks of their median gap between records. A silence of at least
max(`min_silence_s`, `step_multiple` x step) is a hang when the job was still placed (`endpoints` valid past the
point where the silence became one: a job that ended is silent too) and no earlier finding of a kind that stops
collectives (`STOPPING_KINDS`) concerns the job within `explain_slack_s` (that finding owns the silence:
`rocescope.analysis.impact`). A silence still open at the window's end is a warning, critical once it passes the
watchdog's timeout. One that ended (the job resumed) is info, since a checkpoint or an evaluation that holds every
rank in one barrier looks the same. The ranks named are, in each communicator active before the silence, those
with its lowest last sequence number, when its ranks' differ: a process that died stops writing its records
while the others still write the ones they completed.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import polars as pl

from rocescope.analysis.detectors.base import Context, Detector, Params, threshold
from rocescope.analysis.findings import Finding, Severity
from rocescope.analysis.impact import SERIES, STOPPING_KINDS, ImpactParams, concerning
from rocescope.analysis.placements import rank_nic

KIND = "nccl_hang"
COMM = ["job_id", "communicator"]


class HangParams(Params):
    lookback_s: float = threshold(
        600.0,
        "Collectives read this far before the window (the job's step, and a silence that began before it).",
        "derivation: the same span as the slowdown's and impact's baselines (ImpactParams.lookback_s): hundreds of "
        "steps, and a silence up to the watchdog's timeout seen whole",
        ge=0,
    )
    min_silence_s: float = threshold(
        60.0,
        "A job silent at least this long (and step_multiple steps) is hung.",
        "derivation: training steps take 0.1-10 s and each completes collectives on every communicator it uses, so "
        "a minute without one is many steps; it is also far above the delay with which a periodically dumped "
        "Inspector file brings completed collectives to the store",
        gt=0,
    )
    step_multiple: float = threshold(
        10.0,
        "... and at least this many of its steps.",
        "derivation: the gap between a rank's collectives varies with the schedule (gradient accumulation, pipeline "
        "bubbles, an evaluation pass) by small factors; ten median steps is beyond any of them",
        gt=1,
    )
    min_records: int = threshold(
        3,
        "Records a rank needs for its step to be known.",
        "derivation: two gaps give a median between them; with fewer the step is unknown and min_silence_s alone "
        "decides",
        ge=2,
    )
    watchdog_timeout_s: float = threshold(
        600.0,
        "An open silence this long is critical.",
        "vendor: PyTorch's ProcessGroupNCCL aborts a collective that outlives the process group's timeout, 10 "
        "minutes by default (torch.distributed's default_pg_nccl_timeout): by then the job lost its GPUs' time "
        "and restarts",
        gt=0,
    )
    explain_slack_s: float = threshold(
        10.0,
        "A stopping finding this close in time explains a silence.",
        "derivation: the same slack as the slowdown detector's: a fabric finding's edges are known to its "
        "counters' read interval",
        ge=0,
    )
    max_named: int = threshold(
        4,
        "Ranks named at most.",
        "derivation: a cap on the list only (one per process), never on what is detected",
        ge=1,
    )


def _steps(rows: pl.DataFrame, p: HangParams) -> pl.DataFrame:
    """Per job: `step_s`, its busiest communicator's step (the median over the communicator's ranks of their
    median gap between records): the pace the training loop completes collectives at."""
    # each rank's records sorted within the rank (an hour of 128x8 is millions of records; one global sort of them
    # cost twice what this does), a record stored twice counted once
    stamps = pl.col("ts").unique().sort()
    per_rank = (
        rows.group_by(*COMM, *SERIES[:2], "rank")
        .agg(gap=stamps.diff().dt.total_microseconds().median() / 1e6, n=pl.col("ts").n_unique())
        .filter(pl.col("n") >= p.min_records)
    )
    return per_rank.group_by(COMM).agg(step_s=pl.col("gap").median()).group_by("job_id").agg(pl.col("step_s").min())


def _silences(rows: pl.DataFrame, end: dt.datetime, p: HangParams) -> pl.DataFrame:
    """Per job, each gap between consecutive collectives completed on any of its communicators (and the open one
    to `end`) at least its threshold: `start` (the last record before it), `end`, `open`, `silent_s`, `step_s`,
    `limit_s` and `after` (when the silence became a hang)."""
    stamps = rows.select("job_id", "ts").unique().sort("job_id", "ts")
    gaps = (
        stamps.with_columns(next_ts=pl.col("ts").shift(-1).over("job_id"))
        .join(_steps(rows, p), on="job_id", how="left")
        .with_columns(
            limit_s=pl.max_horizontal(pl.lit(p.min_silence_s), p.step_multiple * pl.col("step_s").fill_null(0.0)),
            open=pl.col("next_ts").is_null(),
            end=pl.col("next_ts").fill_null(pl.lit(end).cast(stamps.schema["ts"])),
        )
        .with_columns(silent_s=(pl.col("end") - pl.col("ts")).dt.total_microseconds() / 1e6)
        .filter(pl.col("silent_s") >= pl.col("limit_s"))
    )
    return gaps.select(
        "job_id",
        pl.col("ts").alias("start"),
        "end",
        "open",
        "silent_s",
        "step_s",
        "limit_s",
        (pl.col("ts") + pl.duration(microseconds=(pl.col("limit_s") * 1e6).cast(pl.Int64))).alias("after"),
    )


def _placed(ctx: Context, job: str, after: dt.datetime) -> bool:
    """Whether the job was still placed once its silence became a hang (a job that ended is silent too)."""
    placed = ctx.frames.endpoints().filter(pl.col("job_id") == job)
    return not placed.filter((pl.col("valid_from") <= after) & (pl.col("valid_to") > after)).is_empty()


def _explained(ctx: Context, job: str, start: dt.datetime, end: dt.datetime, slack: dt.timedelta) -> bool:
    """An earlier finding that stops collectives concerns the job in the silence: it owns the silence."""
    return any(f.kind in STOPPING_KINDS for f in concerning(ctx.prior, ctx.fabric, job, start, end, slack))


def _active(rows: pl.DataFrame, job: str, start: dt.datetime, limit_s: float) -> list[str]:
    """The job's communicators that completed a collective within a threshold before the silence: those it hung
    in (one the training loop no longer uses went quiet long before)."""
    since = start - dt.timedelta(seconds=limit_s)
    mine = rows.filter((pl.col("job_id") == job) & pl.col("ts").is_between(since, start))
    return sorted(set(mine["communicator"].to_list()))


def _behind(
    ctx: Context, rows: pl.DataFrame, job: str, communicator: str, start: dt.datetime, p: HangParams
) -> list[dict[str, Any]]:
    """The ranks of the communicator whose last sequence before the silence is its lowest, when its ranks' differ."""
    mine = rows.filter((pl.col("job_id") == job) & (pl.col("communicator") == communicator) & (pl.col("ts") <= start))
    last = mine.group_by("host", "pid", "rank").agg(
        last_sequence=pl.col("sequence").max(),
        last_ts=pl.col("ts").max(),
        ranks=pl.col("ranks").max(),
        gpu=pl.col("gpu").max(),
    )
    if last.is_empty():
        return []
    lowest, highest = (
        int(v)
        for v in last.select(pl.col("last_sequence").min().alias("lo"), pl.col("last_sequence").max().alias("hi")).row(
            0
        )
    )
    if lowest == highest or lowest < 0:
        return []
    named = (
        last.filter(pl.col("last_sequence") == lowest)
        .sort("last_ts", "host", "rank")
        .unique(["host", "pid"], keep="first", maintain_order=True)
    )
    endpoints = ctx.frames.endpoints()
    return [
        {
            "host": r["host"],
            "nic": rank_nic(
                endpoints,
                job,
                r["host"],
                int(r["rank"]),
                int(r["ranks"] or 0),
                int(r["gpu"] if r["gpu"] is not None else -1),
            ),
            "rank": int(r["rank"]),
            "pid": int(r["pid"]),
            "communicator": communicator,
            "last_sequence": int(r["last_sequence"]),
            "communicator_last_sequence": highest,
        }
        for r in named.head(p.max_named).iter_rows(named=True)
    ]


def _summary(job: str, hang: dict[str, Any], named: list[dict[str, Any]]) -> str:
    comms = ", ".join(hang["communicators"])
    state = (
        f"has completed no collective for {hang['silent_s']:.0f} s"
        if hang["open"]
        else f"completed no collective for {hang['silent_s']:.0f} s, then resumed (a checkpoint or evaluation barrier "
        "looks the same)"
    )
    step = f" (its step: {hang['step_s']:.2f} s)" if hang["step_s"] else ""
    head = (
        f"NCCL hang: {job} (communicator {comms}) {state}{step} while still placed, with no deadlock, storm or "
        "link down on its path"
    )
    if not named:
        return head + "; every rank stopped at the same collective"
    who = ", ".join(
        f"rank {n['rank']} on {n['host']}"
        + (f" ({n['nic']})" if n["nic"] else "")
        + f" at sequence {n['last_sequence']}"
        for n in named
    )
    return head + f"; fell silent first: {who} of {named[0]['communicator_last_sequence']}"


def detect(ctx: Context, p: HangParams) -> list[Finding]:
    rows = ctx.frames.usable_collectives(p.lookback_s, ImpactParams().after_s)  # the read impact makes too
    rows = rows.filter(pl.col("ts") <= ctx.window.end)
    if rows.is_empty():
        return []
    silences = _silences(rows, ctx.window.end, p).filter(pl.col("end") > ctx.window.start)
    slack = dt.timedelta(seconds=p.explain_slack_s)
    hangs: list[dict[str, Any]] = []
    for s in silences.sort("job_id", "start").iter_rows(named=True):
        job = s["job_id"]
        if not _placed(ctx, job, s["after"]) or _explained(ctx, job, s["start"], s["end"], slack):
            continue
        comms = _active(rows, job, s["start"], s["limit_s"])
        named = [n for comm in comms for n in _behind(ctx, rows, job, comm, s["start"], p)]
        hangs.append({**s, "communicators": comms, "named": named[: p.max_named]})
    findings = []
    for hang in hangs:
        job, who = hang["job_id"], hang["named"]
        start, end = ctx.clip(hang["start"], hang["end"])
        ranks = rows.filter(pl.col("job_id") == job).select("host", "pid").unique().height
        severity: Severity = (
            "info" if not hang["open"] else "critical" if hang["silent_s"] >= p.watchdog_timeout_s else "warning"
        )
        findings.append(
            Finding(
                kind=KIND,
                severity=severity,
                start=start,
                end=end,
                devices=tuple(dict.fromkeys(n["host"] for n in who)),
                ports=tuple(dict.fromkeys(f"{n['host']}:{n['nic']}" for n in who if n["nic"])),
                priority=-1,
                score=ranks * (end - start).total_seconds(),
                summary=_summary(job, hang, who),
                evidence={
                    "job": job,
                    "communicators": hang["communicators"],
                    "silent_s": round(hang["silent_s"], 3),
                    "step_s": hang["step_s"],
                    "open": hang["open"],
                    "ranks_behind": who,
                    "job_processes": ranks,
                },
                job_ids=(job,),
            )
        )
    return findings


DETECTOR = Detector("nccl_hang", "1", (KIND,), HangParams, detect)
