"""Impact, blame and unexplained slowdowns from NCCL collective timings landed in a real store through the real
Inspector parser, timed with NCCL's semantics (tests/analysis/nccl_jobs.py): a ring waits for its slowest
member, a straggler is found at its host with or without event traces, one job's incast costs another GPU
time, and a healthy job next to it is no victim."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from dataclasses import replace

import polars as pl
import pytest
from nccl_jobs import (
    INCAST,
    LINE,
    PORT_CLOCK,
    QUEUE_CLOCK,
    WM_CLOCK,
    RingJob,
    incast_between_jobs,
    land_collectives,
    one_leaf,
)

from rocescope.analysis.blame import who_hurt_whom, with_blame
from rocescope.analysis.claims import overlapping
from rocescope.analysis.collectives import job_collectives
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import Frames
from rocescope.analysis.impact import ImpactParams, usable, with_impact
from rocescope.analysis.report.blame import case_items, job_costs
from rocescope.analysis.run import AnalysisResult, analyze
from rocescope.collectors.nccl.write import InspectorRecord
from rocescope.pipeline.store import Store

from telemetry import Clock, Telemetry, steps

HOSTS = tuple(f"node-{i}" for i in range(8))
SLOW = (120.0, 200.0)


def _within(got: float, want: float, tolerance: float = 0.2) -> bool:
    return abs(got - want) <= tolerance * want


def _straggler_job(store: Store, now: dt.datetime, traced: bool) -> tuple[Telemetry, RingJob]:
    """Eight ranks, one per host; rank 5 (node-5) issues its collectives 15 ms late from 120 s to 200 s (a slow
    GPU: the fabric is clean). Host clocks are offset by up to 40 ms, as gettimeofday on different hosts is."""
    t = Telemetry(now, 300)
    skew = {h: 5_000.0 * ((-1) ** i) * i for i, h in enumerate(HOSTS)}
    job = RingJob("team-a/train", HOSTS, "0x5a", traced=traced, late={5: steps((*SLOW, 15_000.0))}, skew_us=skew)
    job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, job.records(now, 300))
    return t, job


@pytest.mark.parametrize("traced", [False, True], ids=["exec_times", "event_traces"])
def test_a_ring_waits_for_its_straggler_and_the_straggler_is_named_at_its_host(
    store: Store, now: dt.datetime, traced: bool
) -> None:
    t, job = _straggler_job(store, now, traced)
    result = analyze(store, t.window, write=False)
    assert not result.failed, result.failed
    (slow,) = result.findings
    assert slow.kind == "unexplained_slowdown" and slow.job_ids == (job.job_id,)
    assert slow.devices == ("node-5",) and slow.ports == ("node-5:eth0",)
    assert slow.evidence["straggler_method"] == ("event_trace" if traced else "exec_time")
    (straggler,) = slow.evidence["stragglers"]
    assert straggler["rank"] == 5 and straggler["nic"] == "eth0"
    assert abs((slow.start - t.window.start).total_seconds() - SLOW[0]) <= 10
    assert abs((slow.end - t.window.start).total_seconds() - SLOW[1]) <= 10
    impact = slow.evidence["impact"][job.job_id]
    assert impact["hurt"] and impact["exec_inflation"] > 1.3
    assert _within(impact["gpu_seconds_lost"], job.lost_gpu_seconds(*SLOW))
    assert slow.evidence["blame"] == {
        "culprit_jobs": [], "culprit_shares": {}, "victim_jobs": [job.job_id], "cause": "a straggler in the job",
        "measured": True,
    }  # fmt: skip


def test_a_straggler_keeps_its_loss_from_microbursts_on_the_jobs_own_nic(store: Store, now: dt.datetime) -> None:
    """Microbursts on a port of the job's, over the straggler's spell, that its detector judged unable to explain
    the slowdown: the GPU-seconds are the straggler's, not theirs (before: the bursts, on the job's own NIC,
    claimed the whole spell and the slowdown showed no impact)."""
    t, job = _straggler_job(store, now, traced=False)
    frames = Frames(store, t.window)
    (slow,) = analyze(store, t.window, write=False).findings
    placed = {"job_paths": {job.job_id: "placed"}}
    burst = Finding("microburst", "warning", slow.start, slow.end, ("leaf1",), ("leaf1:Ethernet1/3", "node-2:eth0"),
                    3, 1.0, "bursts", job_ids=(job.job_id,), evidence=placed)  # fmt: skip
    straggler, bursts = with_impact([slow, burst], frames.collectives(600), Fabric.from_frames(frames))
    assert _within(straggler.evidence["impact"][job.job_id]["gpu_seconds_lost"], job.lost_gpu_seconds(*SLOW))
    assert job.job_id not in bursts.evidence["impact"]


def test_microbursts_all_through_the_window_leave_the_job_its_baseline(store: Store, now: dt.datetime) -> None:
    """Training traffic makes microbursts all the time: a finding of them over the whole window keeps no collective
    out of the baselines (they cannot slow one measurably), so the straggler's loss is still measured (before:
    no baseline was left, and the slowdown showed no impact)."""
    t, job = _straggler_job(store, now, traced=False)
    frames = Frames(store, t.window)
    (slow,) = analyze(store, t.window, write=False).findings
    burst = Finding("microburst", "warning", t.window.start, t.window.end, ("leaf1",), ("leaf1:Ethernet1/3",), 3,
                    1.0, "bursts all along")  # fmt: skip
    straggler, _ = with_impact([slow, burst], frames.collectives(600), Fabric.from_frames(frames))
    assert _within(straggler.evidence["impact"][job.job_id]["gpu_seconds_lost"], job.lost_gpu_seconds(*SLOW))


def test_congestion_the_job_ran_under_at_its_usual_speed_does_not_explain_its_straggler(
    store: Store, now: dt.datetime
) -> None:
    """Bursts into node-2 (a tree parent's fan-in, say) for the whole window: the job ran at its usual speed under
    them for two minutes, so they cannot explain why it slowed at 120 s; the straggler is still found."""
    t = Telemetry(now, 300)
    job = RingJob("team-a/train", HOSTS, "0x5c", late={5: steps((*SLOW, 15_000.0))})
    job.place(t)
    one_leaf(t, HOSTS)
    t.gauge("leaf1", "switch", "Ethernet1/3", "port_speed_bps", steps(base=8 * LINE), PORT_CLOCK)  # 400G
    t.gauge("leaf1", "switch", "Ethernet1/3", "queue_watermark_bytes", steps(base=9e6), WM_CLOCK, priority=3)
    t.counter("leaf1", "switch", "Ethernet1/3", "queue_ecn_marked_packets", steps(base=3e4), QUEUE_CLOCK, 3)
    t.land(store)
    land_collectives(store, job.records(now, 300))
    result = analyze(store, t.window, write=False)
    (burst,) = [f for f in result.findings if f.kind == "microburst"]
    assert burst.start - t.window.start <= dt.timedelta(seconds=60)  # there before the job slowed
    (slow,) = [f for f in result.findings if f.kind == "unexplained_slowdown"]
    assert slow.devices == ("node-5",)
    assert abs((slow.start - t.window.start).total_seconds() - SLOW[0]) <= 10


def _bursts_into_node_2_from_the_slowdown(store: Store, t: Telemetry, job: RingJob, busy: float) -> AnalysisResult:
    """`job` on one leaf (as `one_leaf`), with bursts into node-2's 400G port from the slowdown's start to the end
    (watermark reads every 60 s, ECN marks every 10 s) and the port `busy` (a share of its line rate) meanwhile;
    analyzed."""
    job.place(t)
    for i, host in enumerate(HOSTS, start=1):
        t.link(host, "eth0", "leaf1", f"Ethernet1/{i}")
        t.counter(host, "nic", "eth0", "tx_bytes", steps(base=0.1 * LINE), Clock(1.0, (0.13 * i) % 1.0))
        sent = steps((SLOW[0], 300.0, busy * LINE), base=0.1 * LINE) if i == 3 else steps(base=0.1 * LINE)
        t.counter("leaf1", "switch", f"Ethernet1/{i}", "tx_bytes", sent, PORT_CLOCK)
    bursts = (SLOW[0], 300.0)
    t.gauge("leaf1", "switch", "Ethernet1/3", "port_speed_bps", steps(base=8 * LINE), PORT_CLOCK)  # 400G
    t.gauge("leaf1", "switch", "Ethernet1/3", "queue_watermark_bytes", steps((*bursts, 9e6)), WM_CLOCK, priority=3)
    t.counter("leaf1", "switch", "Ethernet1/3", "queue_ecn_marked_packets", steps((*bursts, 3e4)), QUEUE_CLOCK, 3)
    t.land(store)
    land_collectives(store, job.records(t.start, 300))
    return analyze(store, t.window, write=False)


def test_microbursts_that_began_with_the_straggler_do_not_explain_it(store: Store, now: dt.datetime) -> None:
    """Bursts into node-2 from the moment node-5 began to arrive late (a straggler shifts when the job's ranks send,
    and with it where queues build): each drains in a fraction of a millisecond and leaves the port idle most of
    every read, where the job's collectives ran 1.5x slower for 80 s. Bursts that short cannot hold back a job
    that long; the straggler is still found."""
    t = Telemetry(now, 300)
    job = RingJob("team-a/train", HOSTS, "0x5d", late={5: steps((*SLOW, 15_000.0))})
    result = _bursts_into_node_2_from_the_slowdown(store, t, job, busy=0.3)
    (burst,) = [f for f in result.findings if f.kind == "microburst"]
    assert abs((burst.start - t.window.start).total_seconds() - SLOW[0]) <= 10  # began with the slowdown
    (slow,) = [f for f in result.findings if f.kind == "unexplained_slowdown"]
    assert slow.devices == ("node-5",)


def test_traffic_that_fills_the_jobs_port_from_when_it_slowed_explains_the_slowdown(
    store: Store, now: dt.datetime
) -> None:
    """From 120 s other traffic (a storage array's reads) fills node-2's port to 85% of its line rate, and every rank
    of the job runs 1.6x slower: the job's transfers through that port share its bandwidth. Its queue still drains
    within each read (a train of bursts, not a standing queue), but the port is busy, not idle: the slowdown is
    explained, not reported as one with "no fabric finding on its hosts or paths"."""
    t = Telemetry(now, 300)
    job = RingJob("team-a/train", HOSTS, "0x5e", slow=steps((*SLOW, 1.6), base=1.0))
    result = _bursts_into_node_2_from_the_slowdown(store, t, job, busy=0.85)
    (burst,) = [f for f in result.findings if f.kind == "microburst"]
    assert burst.evidence["utilization"] > 0.5  # 60 s watermark reads: the first one half before the traffic came
    assert abs((burst.start - t.window.start).total_seconds() - SLOW[0]) <= 10
    assert not [f for f in result.findings if f.kind == "unexplained_slowdown"]


def _slow_ring(store: Store, now: dt.datetime, comm: str, factor: float) -> tuple[Telemetry, RingJob]:
    """Eight ranks on one leaf, every collective `factor` times slower during SLOW, every record landed."""
    t = Telemetry(now, 300)
    job = RingJob("team-a/train", HOSTS, comm, slow=steps((*SLOW, factor), base=1.0))
    job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, job.records(now, 300))
    return t, job


def test_a_slowdown_of_every_rank_alike_names_no_straggler(store: Store, now: dt.datetime) -> None:
    t, job = _slow_ring(store, now, "0x5b", 1.6)
    (slow,) = analyze(store, t.window, write=False).findings
    assert slow.kind == "unexplained_slowdown" and slow.devices == () and slow.evidence["stragglers"] == []
    assert "all ranks slowed alike" in slow.summary
    assert _within(slow.evidence["impact"][job.job_id]["gpu_seconds_lost"], job.lost_gpu_seconds(*SLOW))


def test_one_jobs_incast_costs_the_other_gpu_seconds_and_explains_its_slowdown(store: Store, now: dt.datetime) -> None:
    t, victim, culprit = incast_between_jobs(store, now)
    result = analyze(store, t.window, write=False)
    assert not result.failed, result.failed
    assert [f.kind for f in result.findings] == ["incast"]  # the victim's slowdown is explained: no other finding
    (incast,) = result.findings
    assert set(incast.job_ids or ()) == {victim.job_id, culprit.job_id}
    impact = incast.evidence["impact"]
    assert impact[victim.job_id]["hurt"] and not impact[culprit.job_id]["hurt"]
    assert _within(impact[victim.job_id]["gpu_seconds_lost"], victim.lost_gpu_seconds(*INCAST))
    assert impact[victim.job_id]["busbw_drop"] > 0.3  # 1.8x slower: bus bandwidth down ~44%
    blame = incast.evidence["blame"]
    assert blame["culprit_jobs"] == [culprit.job_id] and blame["victim_jobs"] == [victim.job_id]
    (edge,) = who_hurt_whom([{"kind": f.kind, "evidence": f.evidence} for f in result.findings])
    assert (edge.culprit, edge.victim) == (culprit.job_id, victim.job_id)
    assert edge.gpu_seconds_lost == pytest.approx(impact[victim.job_id]["gpu_seconds_lost"])


def _loss_landed(
    store: Store,
    now: dt.datetime,
    job: RingJob,
    seconds: float,
    span: tuple[float, float],
    recorded: Callable[[list[InspectorRecord]], list[InspectorRecord]],
) -> tuple[float, pl.DataFrame]:
    """`job` on one leaf for `seconds`, the records `recorded` keeps of its own landed: the GPU-seconds a finding
    over `span` measures, and the collectives it measured them from."""
    t = Telemetry(now, seconds)
    job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, recorded(job.records(now, seconds)))
    frames = Frames(store, t.window)
    coll = frames.collectives(600)
    start, end = (now + dt.timedelta(seconds=s) for s in span)
    finding = Finding("link_flap", "warning", start, end, ("leaf1",), ("leaf1:Ethernet1/1",), -1, 1.0, "x")
    (measured,) = with_impact([finding], coll, Fabric.from_frames(frames))
    return measured.evidence["impact"][job.job_id]["gpu_seconds_lost"], coll


def test_records_missing_from_a_series_are_weighed_by_the_rows_that_remain(store: Store, now: dt.datetime) -> None:
    """Every collective is recorded but while the job is slow, when only every 4th reaches the file (a ring buffer
    that overflowed, a dump thread that fell behind): each of those rows then stands for four collectives, and
    the loss estimated from them matches the loss of all of them."""
    job = RingJob("team-a/train", HOSTS, "0x5c", slow=steps((*SLOW, 1.5), base=1.0))
    slow = {k for k, at in enumerate(job._steps(300)) if SLOW[0] <= at < SLOW[1]}
    lost, coll = _loss_landed(
        store, now, job, 300, SLOW, lambda rs: [r for r in rs if r.sequence not in slow or r.sequence % 4 == 0]
    )
    assert sorted(usable(coll)["weight"].unique().to_list()) == [1.0, 4.0]
    assert _within(lost, job.lost_gpu_seconds(*SLOW))


def test_collectives_numbered_but_never_recorded_do_not_multiply_the_loss(store: Store, now: dt.datetime) -> None:
    """NCCL numbers every collective; Inspector drops the small CPU-timed ones (its default
    `NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=1`), so each recorded all-reduce here follows two unrecorded ones: its
    `sequence` gap is 3 though it stands for one all-reduce (before: three times the true loss)."""
    job = RingJob("team-a/train", HOSTS, "0x5e", slow=steps((40.0, 80.0, 1.5), base=1.0))
    lost, _ = _loss_landed(
        store, now, job, 120, (40.0, 80.0), lambda rs: [replace(r, sequence=3 * r.sequence) for r in rs]
    )
    assert _within(lost, job.lost_gpu_seconds(40.0, 80.0))


def test_a_step_of_several_recorded_collectives_weighs_each_by_its_own_gaps(store: Store, now: dt.datetime) -> None:
    """Each step runs an all-gather of 64 MiB, then the all-reduce, then two small collectives Inspector never
    records (sequence 4k, 4k + 1; 4k + 2 and 4k + 3 unrecorded): the rank's gaps alternate 1 and 3, but each
    operation's own gap is 4, every step: each row stands for one (before: each all-gather, 3 after the last
    all-reduce, counted three times)."""
    job = RingJob("team-a/train", HOSTS, "0x62", slow=steps((40.0, 80.0, 1.5), base=1.0))

    def two_per_step(records: list[InspectorRecord]) -> list[InspectorRecord]:
        out = []
        for r in records:
            gather = replace(r, op="AllGather", bytes=r.bytes // 4, sequence=4 * r.sequence,
                             dumped_at_us=r.dumped_at_us - r.exec_time_us - 1_000)  # fmt: skip
            out += [gather, replace(r, sequence=4 * r.sequence + 1)]
        return out

    lost, coll = _loss_landed(store, now, job, 120, (40.0, 80.0), two_per_step)
    assert usable(coll)["weight"].unique().to_list() == [1.0]
    assert _within(lost, 2 * job.lost_gpu_seconds(40.0, 80.0))


def test_a_wider_sequence_gap_counts_no_more_collectives_than_fit_in_the_time_since_the_previous_record(
    store: Store, now: dt.datetime
) -> None:
    """While the job is slow, NCCL numbers three more collectives between two recorded all-reduces (an evaluation
    pass's small ones, say): the gap is four times the usual. The job spends 80% of its time in this all-reduce,
    so no second one fits between two records: each row still stands for one (before the wall-clock bound: four
    times the true loss)."""
    job = RingJob("team-a/train", HOSTS, "0x5f", every_s=0.025, slow=steps((40.0, 80.0, 1.2), base=1.0))
    extra = list(itertools.accumulate(3 * (40.0 <= s < 80.0) for s in job._steps(120)))
    lost, _ = _loss_landed(
        store, now, job, 120, (40.0, 80.0), lambda rs: [replace(r, sequence=r.sequence + extra[r.sequence]) for r in rs]
    )
    assert _within(lost, job.lost_gpu_seconds(40.0, 80.0))


def test_a_finding_on_a_path_the_job_is_seen_to_take_claims_its_loss_before_one_it_may_take(
    store: Store, now: dt.datetime
) -> None:
    """Two findings overlap the job's slow spell and both name it alone: a storm on an uplink its placement merely
    allows (`possible`) and an imbalance on one its connections were seen to cross (`observed`). The loss is the
    observed one's; before, both counted it in full."""
    t, job = _slow_ring(store, now, "0x5d", 1.5)
    frames = Frames(store, t.window)
    start, end = (now + dt.timedelta(seconds=s) for s in SLOW)
    found = [
        Finding("pfc_storm", "warning", start, end, ("leaf1",), ("leaf1:Ethernet9/1",), 3, 1.0, "x",
                job_ids=(job.job_id,), evidence={"job_paths": {job.job_id: "possible"}}),
        Finding("ecmp_imbalance", "warning", start, end, ("leaf1",), ("leaf1:Ethernet10/1",), -1, 1.0, "y",
                job_ids=(job.job_id,), evidence={"job_paths": {job.job_id: "observed"}}),
    ]  # fmt: skip
    maybe, seen = with_impact(found, frames.collectives(600), Fabric.from_frames(frames))
    assert _within(seen.evidence["impact"][job.job_id]["gpu_seconds_lost"], job.lost_gpu_seconds(*SLOW))
    assert job.job_id not in maybe.evidence.get("impact", {})  # its whole span is the observed one's


def test_of_two_findings_on_the_jobs_path_the_one_that_leaves_it_less_claims_the_loss(
    store: Store, now: dt.datetime
) -> None:
    """Microbursts and a storm on ports the job's connections were both seen to cross, over its slow spell: a
    queue held paused leaves its traffic nothing, milliseconds of a full queue most of the link, so the loss is
    the storm's; before, both counted it in full (the job's loss twice in a sum over findings)."""
    t, job = _slow_ring(store, now, "0x60", 1.5)
    frames = Frames(store, t.window)
    start, end = (now + dt.timedelta(seconds=s) for s in SLOW)
    paths = {"job_paths": {job.job_id: "observed"}}
    found = [
        Finding("microburst", "warning", start, end, ("leaf1",), ("leaf1:Ethernet9/1",), 3, 1.0, "x",
                job_ids=(job.job_id,), evidence=paths),
        Finding("pfc_storm", "warning", start, end, ("leaf1",), ("leaf1:Ethernet10/1",), 3, 1.0, "y",
                job_ids=(job.job_id,), evidence=paths),
    ]  # fmt: skip
    bursts, storm = with_impact(found, frames.collectives(600), Fabric.from_frames(frames))
    assert _within(storm.evidence["impact"][job.job_id]["gpu_seconds_lost"], job.lost_gpu_seconds(*SLOW))
    assert job.job_id not in bursts.evidence.get("impact", {})


def test_two_equal_claims_on_one_job_count_each_moment_of_its_loss_once(store: Store, now: dt.datetime) -> None:
    """Two storms that both name the job, on ports it is seen to cross, overlap by 40 s of its 80 s slow spell: the
    one that began first counts the overlap, so the job's losses summed over them are its loss over the spell
    (before: the overlap twice, 1.5x)."""
    t, job = _slow_ring(store, now, "0x61", 1.5)
    frames = Frames(store, t.window)
    at = [now + dt.timedelta(seconds=s) for s in (SLOW[0], SLOW[0] + 60.0, SLOW[0] + 20.0, SLOW[1])]
    paths = {"job_paths": {job.job_id: "observed"}}
    found = [
        Finding("pfc_storm", "warning", at[2], at[3], ("leaf1",), ("leaf1:Ethernet9/1",), 3, 1.0, "x",
                job_ids=(job.job_id,), evidence=paths),
        Finding("pfc_storm", "warning", at[0], at[1], ("leaf1",), ("leaf1:Ethernet10/1",), 3, 1.0, "y",
                job_ids=(job.job_id,), evidence=paths),
    ]  # fmt: skip
    later, first = with_impact(found, frames.collectives(600), Fabric.from_frames(frames))
    lost = first.evidence["impact"][job.job_id]["gpu_seconds_lost"]
    assert _within(lost, job.lost_gpu_seconds(SLOW[0], SLOW[0] + 60))
    total = sum(f.evidence["impact"][job.job_id]["gpu_seconds_lost"] for f in (first, later))
    assert _within(total, job.lost_gpu_seconds(*SLOW))


def test_lost_cnps_name_the_victims_of_the_congestion_they_left_unchecked(store: Store, now: dt.datetime) -> None:
    """An incast from a NIC deaf to CNPs slows the receiver's job 1.8x: the CNP loss names that job its victim
    with the incast's loss less what the incast would have cost with its senders throttled (the receiver's
    400G port shared in proportion: each operation longer by its bus bytes at 400G); the job on the deaf NIC,
    whose traffic went unthrottled, is no victim of it; lost CNPs on a host the incast does not touch hurt
    nobody. An incast that names no receiver leaves the share unmeasured."""
    t = Telemetry(now, 300)
    victim = RingJob("team-b/train", HOSTS[:4], "0x5e", slow=steps((*SLOW, 1.8), base=1.0))
    deaf = RingJob("team-a/train", HOSTS[4:], "0x5f")
    for job in (victim, deaf):
        job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, victim.records(now, 300) + deaf.records(now, 300))
    frames = Frames(store, t.window)
    start, end = (now + dt.timedelta(seconds=s) for s in SLOW)
    jobs = (victim.job_id, deaf.job_id)
    incast = Finding("incast", "critical", start, end, ("node-0", "leaf1", "node-4"), ("leaf1:Ethernet1/1",), 3,
                     1.0, "x", {"receiver": "node-0:eth0", "speed_gbps": 400.0}, job_ids=jobs)  # fmt: skip
    on_sender = Finding("cnp_loss", "warning", start, end, ("node-4",), ("node-4:eth0",), 3, 1.0, "x",
                        {"where": "nic"}, job_ids=(deaf.job_id,))  # fmt: skip
    elsewhere = Finding("cnp_loss", "warning", start, end, ("node-6",), ("node-6:eth0",), 3, 1.0, "x",
                        {"where": "nic"}, job_ids=(deaf.job_id,))  # fmt: skip
    fabric = Fabric.from_frames(frames)
    measured = with_blame(with_impact([incast, on_sender, elsewhere], frames.collectives(600), fabric), fabric)
    congestion, amplifier, unrelated = (f.evidence for f in measured)
    lost = congestion["impact"][victim.job_id]["gpu_seconds_lost"]
    assert _within(lost, victim.lost_gpu_seconds(*SLOW))
    slowed = [
        r for r in victim.records(now, 300) if start.timestamp() <= r.dumped_at_us / 1e6 - 0.02 <= end.timestamp()
    ]
    throttled = sum(2 * (r.ranks - 1) / r.ranks * r.bytes * 8 / 400e9 for r in slowed)
    entry = amplifier["impact"][victim.job_id]
    assert entry["hurt"] and _within(entry["gpu_seconds_lost"], victim.lost_gpu_seconds(*SLOW) - throttled)
    assert entry["amplifies"]["kind"] == "incast" and entry["amplifies"]["gpu_seconds_lost"] == lost
    assert _within(entry["amplifies"]["controlled_gpu_seconds"], throttled)
    assert not amplifier["impact"].get(deaf.job_id, {}).get("hurt")  # its loss, if any, is the incast's
    assert amplifier["blame"]["victim_jobs"] == [victim.job_id]
    assert unrelated["blame"]["victim_jobs"] == []
    edges = {
        (e.culprit, e.victim): e for e in who_hurt_whom([{"kind": f.kind, "evidence": f.evidence} for f in measured])
    }
    (cost,) = (text for name, text in case_items({"evidence": amplifier}) if name == "cost")
    assert f"{victim.job_id}: {entry['gpu_seconds_lost']:.1f} GPU-s of the incast's {lost:.1f} GPU-s" in cost
    costs = {
        job: lost_s
        for job, lost_s, _, _ in job_costs([{"evidence": f.evidence, "job_ids": f.job_ids} for f in measured])
    }
    assert costs[victim.job_id] == pytest.approx(lost)  # the amplifier's share is part of the incast's, not added
    edge = edges[(deaf.job_id, victim.job_id)]
    assert edge.findings == 1 and edge.gpu_seconds_lost == pytest.approx(entry["gpu_seconds_lost"])

    anonymous = incast.with_(evidence={})
    congestion, amplifier, _ = (
        f.evidence for f in with_impact([anonymous, on_sender, elsewhere], frames.collectives(600), fabric)
    )
    entry = amplifier["impact"][victim.job_id]
    assert entry["hurt"] and entry["gpu_seconds_lost"] is None
    (cost,) = (text for name, text in case_items({"evidence": amplifier}) if name == "cost")
    assert f"{victim.job_id}: part of the incast's {lost:.1f} GPU-s" in cost


def test_lost_cnps_cost_a_job_behind_the_pauses_all_it_lost(store: Store, now: dt.datetime) -> None:
    """A job with no rank behind the incast's receiver port, slowed 1.5x while a NIC deaf to CNPs sends into the
    incast, lost what it lost by the pauses: throttled, the senders would have filled that port and paused
    nobody, so the lost CNPs cost it the incast's whole loss."""
    t = Telemetry(now, 300)
    receiver = RingJob("team-b/train", HOSTS[:4], "0x6e")
    deaf = RingJob("team-a/train", HOSTS[4:6], "0x6f")
    behind = RingJob("team-c/train", HOSTS[6:], "0x70", slow=steps((*SLOW, 1.5), base=1.0))
    for job in (receiver, deaf, behind):
        job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, receiver.records(now, 300) + deaf.records(now, 300) + behind.records(now, 300))
    frames = Frames(store, t.window)
    start, end = (now + dt.timedelta(seconds=s) for s in SLOW)
    jobs = (receiver.job_id, deaf.job_id, behind.job_id)
    incast = Finding("incast", "critical", start, end, ("node-0", "leaf1", "node-4"), ("leaf1:Ethernet1/1",), 3,
                     1.0, "x", {"receiver": "node-0:eth0", "speed_gbps": 400.0}, job_ids=jobs)  # fmt: skip
    on_sender = Finding("cnp_loss", "warning", start, end, ("node-4",), ("node-4:eth0",), 3, 1.0, "x",
                        {"where": "nic"}, job_ids=(deaf.job_id,))  # fmt: skip
    congestion, amplifier = (
        f.evidence for f in with_impact([incast, on_sender], frames.collectives(600), Fabric.from_frames(frames))
    )
    lost = congestion["impact"][behind.job_id]["gpu_seconds_lost"]
    assert _within(lost, behind.lost_gpu_seconds(*SLOW))
    entry = amplifier["impact"][behind.job_id]
    assert entry["hurt"] and entry["gpu_seconds_lost"] == lost and entry["amplifies"]["controlled_gpu_seconds"] == 0
    assert receiver.job_id not in amplifier["impact"]  # unslowed: no victim of the incast, none of its amplifier


def test_baselines_leave_out_every_findings_span(store: Store, now: dt.datetime) -> None:
    """A slow spell that another finding covers is no baseline: against a baseline taken from it, the job's
    second spell would look healthy."""
    t = Telemetry(now, 300)
    job = RingJob("team-a/train", HOSTS, "0x5d", slow=steps((20.0, 110.0, 2.0), (*SLOW, 2.0), base=1.0))
    job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, job.records(now, 300))
    frames = Frames(store, t.window)
    at = [(now + dt.timedelta(seconds=a), now + dt.timedelta(seconds=b)) for a, b in ((20.0, 110.0), SLOW)]
    findings = [Finding("link_flap", "warning", a, b, ("leaf1",), (), -1, 1.0, "x") for a, b in at]
    measured = with_impact(findings, frames.collectives(600), Fabric.from_frames(frames), ImpactParams(lookback_s=120))
    for f, (a, b) in zip(measured, (((20.0, 110.0)), SLOW), strict=True):
        assert _within(f.evidence["impact"][job.job_id]["gpu_seconds_lost"], job.lost_gpu_seconds(a, b))


def test_overlapping_merges_spans_and_sees_long_rows_across_them() -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def at(*seconds: float) -> pl.Series:
        return pl.Series("t", [t0 + dt.timedelta(seconds=s) for s in seconds], pl.Datetime("ns", "UTC"))

    spans = [(t0 + dt.timedelta(seconds=a), t0 + dt.timedelta(seconds=b)) for a, b in ((5, 10), (11, 15), (-9, 0))]
    # points in and out of the spans, a row after them, a row across two spans, a row between two
    starts, ends = at(0, 5, 10, 15, 25, 40, 20, 4, 10.2), at(0, 5, 10, 15, 25, 40, 30, 16, 10.8)
    assert overlapping(starts, ends, spans).to_list() == [True, True, True, True, False, False, False, True, False]
    assert overlapping(at(14, 2), at(16, 3), spans).to_list() == [True, False]
    assert overlapping(starts, ends, []).to_list() == [False] * 9


def test_collectives_of_no_job_are_not_counted(store: Store, now: dt.datetime) -> None:
    """Collectives on a host no job is placed on carry no job: impact leaves them out."""
    job = RingJob("team-x/orphan", HOSTS[:2], "0x5e")
    land_collectives(store, job.records(now, 30))
    coll = job_collectives(store, Telemetry(now, 30).window)
    assert coll.height == 2 * 120 and set(coll["attribution"]) == {"none"}
    assert usable(coll).is_empty()


def _stalled_ring(store: Store, now: dt.datetime) -> tuple[RingJob, Frames, dt.datetime, dt.datetime]:
    """A ring job on one leaf whose collectives stop being reported at 120 s of 300; a finding's span after it."""
    t = Telemetry(now, 300)
    job = RingJob("team-a/train", HOSTS, "0x5f")
    job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    land_collectives(store, [r for r in job.records(now, 300) if r.sequence < 120 / job.every_s])
    return job, Frames(store, t.window), now + dt.timedelta(seconds=120), now + dt.timedelta(seconds=290)


def test_ranks_stalled_in_a_collective_never_reported_lose_their_silence(store: Store, now: dt.datetime) -> None:
    """A PFC deadlock holds the ring's collective from 120 s to the end of the data: Inspector never reports it.
    Every rank, silent far beyond its usual gap while the deadlock lasts, lost that time."""
    job, frames, start, end = _stalled_ring(store, now)
    deadlock = Finding("pfc_deadlock", "critical", start, end, ("leaf1",), ("leaf1:Ethernet1/1",), 3, 1.0, "x")
    (measured,) = with_impact([deadlock], frames.collectives(600, 60), Fabric.from_frames(frames))
    impact = measured.evidence["impact"][job.job_id]
    assert impact["hurt"] and impact["ranks"] == len(HOSTS) and impact["collectives"] == 0
    assert _within(impact["gpu_seconds_lost"], len(HOSTS) * 170.0, 0.02)


def test_a_job_silent_through_congestion_that_cannot_stop_it_is_not_charged_its_silence(
    store: Store, now: dt.datetime
) -> None:
    """The same silence beside an incast: congestion slows a collective but never stops it (DCQCN's rate has a
    floor, go-back-N resends), so a job that stops reporting for minutes hung for its own reasons (a data loader,
    a dead rank), and the incast is charged none of it."""
    job, frames, start, end = _stalled_ring(store, now)
    incast = Finding("incast", "critical", start, end, ("leaf1",), ("leaf1:Ethernet1/1",), 3, 1.0, "x")
    (measured,) = with_impact([incast], frames.collectives(600, 60), Fabric.from_frames(frames))
    impact = measured.evidence["impact"].get(job.job_id, {})
    assert not impact.get("hurt") and (impact.get("gpu_seconds_lost") or 0.0) == 0.0


def test_records_inspector_dropped_during_a_finding_make_its_loss_a_lower_bound(store: Store, now: dt.datetime) -> None:
    """Inspector's ring buffer overflowed on one of the job's hosts while the deadlock lasted (its `dump_stats` say
    40 records): the records that would show the stall are missing, so the entry says so. Drops on a host of no
    job of the finding, or long before it, say nothing about it."""
    job, frames, start, end = _stalled_ring(store, now)
    deadlock = Finding("pfc_deadlock", "critical", start, end, ("leaf1",), ("leaf1:Ethernet1/1",), 3, 1.0, "x")
    dropped = pl.DataFrame(
        {
            "ts": [start + dt.timedelta(seconds=10), start + dt.timedelta(seconds=20), now],
            "device": [HOSTS[0], "gpu-elsewhere", HOSTS[1]],
            "value": [40.0, 900.0, 900.0],
        },
        schema={"ts": pl.Datetime("ns", "UTC"), "device": pl.String, "value": pl.Float64},
    )
    (measured,) = with_impact([deadlock], frames.collectives(600, 60), Fabric.from_frames(frames), dropped=dropped)
    impact = measured.evidence["impact"][job.job_id]
    assert impact["hurt"] and impact["records_dropped"] == 40 and impact["lower_bound"] is True
    (plain,) = with_impact([deadlock], frames.collectives(600, 60), Fabric.from_frames(frames))
    assert "records_dropped" not in plain.evidence["impact"][job.job_id]


def test_a_stall_of_few_very_long_collectives_is_one_slowdown_by_time(store: Store, now: dt.datetime) -> None:
    """A storm no switch reported stretches a job's all-reduces from 20 ms to 15 s from 120 s to 200 s (each
    collective issued when the last one ended, 230 ms of compute apart): a handful of records, one ending every
    third 5 s bucket. Judged by the records ending in each bucket the spell fell apart into 5 s pieces and no
    finding; judged by the time each collective ran, it is one slowdown over the spell, whose GPU-seconds are the
    ranks' extra time."""
    t = Telemetry(now, 300)
    job = RingJob("team-a/train", HOSTS, "0x77")
    job.place(t)
    one_leaf(t, HOSTS)
    t.land(store)
    records, clock, k, lost = [], 0.0, 0, 0.0
    while clock < 300.0:
        exec_s = 15.0 if SLOW[0] <= clock < SLOW[1] else 0.02
        end = clock + exec_s
        for r, host in enumerate(HOSTS):
            records.append(
                InspectorRecord(host=host, pid=1000 + r, communicator="0x77", rank=r, ranks=len(HOSTS),
                                nodes=len(HOSTS), op="AllReduce", sequence=k, bytes=256 << 20,
                                exec_time_us=int(exec_s * 1e6), dumped_at_us=int((now.timestamp() + end) * 1e6))
            )  # fmt: skip
        lost += len(HOSTS) * (exec_s - 0.02)
        clock, k = end + 0.23, k + 1
    land_collectives(store, records)

    result = analyze(store, t.window, write=False)
    assert not result.failed, result.failed
    (slow,) = result.findings
    assert slow.kind == "unexplained_slowdown" and slow.job_ids == (job.job_id,)
    assert abs((slow.start - t.window.start).total_seconds() - SLOW[0]) <= 10
    assert abs((slow.end - t.window.start).total_seconds() - (SLOW[1] + 15)) <= 10  # the last long one ends late
    assert _within(slow.score, lost)
