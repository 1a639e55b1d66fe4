"""NCCL hangs from Inspector's records landed through the real parser (tests/analysis/nccl_jobs.py): a ring that
stops completing collectives while its job is still placed is one hang, naming the rank whose records stopped
first; a job that ended, a pause shorter than a minute, a communicator no longer used, and a silence a PFC
deadlock on the job's path explains are none; a pause that resumes is info, and one past PyTorch's watchdog
timeout is critical."""

from __future__ import annotations

import datetime as dt

from nccl_jobs import RingJob, land_collectives, one_leaf

from rocescope.analysis.detectors import nccl_hang
from rocescope.analysis.detectors.base import Context
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.run import analyze
from rocescope.collectors.nccl.write import InspectorRecord
from rocescope.pipeline.store import Store

from telemetry import Telemetry

HOSTS = tuple(f"node-{i}" for i in range(8))
JOB = "team-a/train"


def _ring(store: Store, now: dt.datetime, seconds: float, kept: list[InspectorRecord] | None = None) -> RingJob:
    """An 8-rank ring on one leaf, placed; landed with `kept` as its records (default: all of them)."""
    t = Telemetry(now, seconds)
    job = RingJob(JOB, HOSTS, "0x6a")
    job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, job.records(now, seconds) if kept is None else kept)
    return job


def _between(job: RingJob, now: dt.datetime, seconds: float, *spans: tuple[float, float]) -> list[InspectorRecord]:
    """The job's records of the steps issued within the spans (seconds into the run)."""
    return [
        r
        for r in job.records(now, seconds)
        if any(a <= r.sequence * job.every_s < b for a, b in spans)  # step k is issued at k x every_s
    ]


def _hangs(store: Store, now: dt.datetime, seconds: float) -> list[Finding]:
    window = Window(now, now + dt.timedelta(seconds=seconds))
    return [f for f in analyze(store, window, write=False).findings if f.kind == "nccl_hang"]


def test_a_ring_that_stops_while_placed_is_one_hang_naming_the_rank_that_fell_silent_first(
    store: Store, now: dt.datetime
) -> None:
    """From 120 s no collective completes; rank 5's process died two seconds earlier, so its records stop at a
    lower sequence than the others'. 180 s of silence against a 0.25 s step: a warning (short of the 10-minute
    watchdog), the job's silence its loss."""
    job = RingJob(JOB, HOSTS, "0x6a")
    kept = [r for r in _between(job, now, 300, (0, 120)) if r.rank != 5 or r.sequence * job.every_s < 118]
    _ring(store, now, 300, kept)
    (hang,) = _hangs(store, now, 300)
    assert hang.severity == "warning" and hang.job_ids == (JOB,)
    assert abs((hang.start - now).total_seconds() - 120) <= 1 and hang.end == now + dt.timedelta(seconds=300)
    assert hang.devices == ("node-5",) and hang.ports == ("node-5:eth0",)
    (behind,) = hang.evidence["ranks_behind"]
    assert behind["rank"] == 5 and behind["last_sequence"] < behind["communicator_last_sequence"]
    assert hang.evidence["open"] and hang.evidence["communicators"] == ["0x6a"]
    assert "rank 5 on node-5 (eth0)" in hang.summary and "180 s" in hang.summary
    impact = hang.evidence["impact"][JOB]
    assert impact["hurt"] and impact["gpu_seconds_lost"] >= 0.9 * len(HOSTS) * 170
    assert hang.evidence["blame"]["cause"].startswith("a rank of the job that stopped")


def test_a_job_whose_placement_ended_finished_and_a_short_pause_is_no_hang(store: Store, now: dt.datetime) -> None:
    """Nor is a communicator the loop stopped using (an initial barrier's) while the job's others go on."""
    job = RingJob(JOB, HOSTS, "0x6a")
    barrier = RingJob(JOB, HOSTS, "0x6b", every_s=1.0)
    kept = _between(job, now, 300, (0, 120), (160, 300)) + _between(barrier, now, 300, (0, 10))  # a 40 s pause
    _ring(store, now, 300, kept)
    assert _hangs(store, now, 300) == []
    store.command("TRUNCATE TABLE collectives")
    land_collectives(store, _between(job, now, 300, (0, 120)))
    ended = (now + dt.timedelta(seconds=125)).strftime("%Y-%m-%d %H:%M:%S")
    store.command(
        "CREATE TABLE placed ENGINE = Memory AS SELECT * REPLACE "
        f"(toDateTime64('{ended}', 9, 'UTC') AS valid_to) FROM endpoints"
    )
    store.command("TRUNCATE TABLE endpoints")
    store.command("INSERT INTO endpoints SELECT * FROM placed")
    assert _hangs(store, now, 300) == [], "the job's pods ended with its collectives: it finished"


def test_a_pause_that_resumes_is_info_and_one_past_the_watchdog_is_critical(store: Store, now: dt.datetime) -> None:
    job = RingJob(JOB, HOSTS, "0x6a")
    _ring(store, now, 700, _between(job, now, 700, (0, 100), (200, 700)))
    (resumed,) = _hangs(store, now, 700)
    assert resumed.severity == "info" and not resumed.evidence["open"] and "then resumed" in resumed.summary
    assert resumed.evidence["ranks_behind"] == [] and "every rank stopped at the same collective" in resumed.summary
    store.command("TRUNCATE TABLE collectives")
    land_collectives(store, _between(job, now, 700, (0, 60)))
    (stuck,) = _hangs(store, now, 700)
    assert stuck.severity == "critical" and stuck.evidence["silent_s"] >= 600


def test_a_silence_a_pfc_deadlock_on_the_jobs_path_explains_is_the_deadlocks(store: Store, now: dt.datetime) -> None:
    job = RingJob(JOB, HOSTS, "0x6a")
    _ring(store, now, 300, _between(job, now, 300, (0, 120)))
    frames = Frames(store, Window(now, now + dt.timedelta(seconds=300)))
    fabric = Fabric.from_frames(frames)
    start, end = now + dt.timedelta(seconds=118), now + dt.timedelta(seconds=300)
    deadlock = Finding("pfc_deadlock", "critical", start, end, ("leaf1",), ("leaf1:Ethernet1/1",), 3, 1.0, "x")
    incast = Finding("incast", "critical", start, end, ("leaf1",), ("leaf1:Ethernet1/1",), 3, 1.0, "x")
    params = nccl_hang.HangParams()
    assert nccl_hang.detect(Context(frames, fabric, prior=[deadlock]), params) == []
    (hang,) = nccl_hang.detect(Context(frames, fabric, prior=[incast]), params)  # congestion never stops a ring
    assert hang.job_ids == (JOB,)
