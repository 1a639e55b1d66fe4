"""The twin's NCCL collectives: timed by the fabric, the ring waiting for its slowest rank, landed through the real
Inspector parser; and the ground truth of what each incident cost each job and whose traffic caused it."""

from __future__ import annotations

import datetime as dt
import itertools
import statistics
from pathlib import Path
from typing import Any

import pytest

from rocescope.analysis.collectives import job_collectives
from rocescope.analysis.frames import Window
from rocescope.collectors.nccl.write import InspectorRecord
from rocescope.config import Settings, StoreConfig, TransportConfig
from rocescope.pipeline.store import open_store
from rocescope.sim.collectives import CollectiveTimer, qp_owners_arrow
from rocescope.sim.incidents import World, build_world
from rocescope.sim.jobs import MiB, fabric_bytes_per_rank
from rocescope.sim.run import run_scenario, simulate
from rocescope.sim.scenario import Scenario
from rocescope.sim.scoring import Truth

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
#: two leaves of four 100G hosts (one rail), four spines with one uplink each
FABRIC = {"hosts": 8, "rails": 1, "spines": 4, "host_ports_per_leaf": 4, "host_speed_gbps": 100,
          "uplink_speed_gbps": 100}  # fmt: skip
A = {"name": "llm-a", "namespace": "team-a", "hosts": 4, "message_mib": 16, "compute_ms": 20}
B = {"name": "llm-b", "namespace": "team-b", "hosts": 4, "message_mib": 16, "compute_ms": 20}


def scenario(incidents: list[dict[str, Any]], jobs: list[dict[str, Any]] | None = None, **extra: Any) -> Scenario:
    data = {"name": "t", "seed": 3, "duration": "5s", "fabric": FABRIC, "jobs": jobs or [A, B], "incidents": incidents,
            "collectives": {"step_s": 0.1}}  # fmt: skip
    return Scenario.model_validate({**data, **extra})


def ran(sc: Scenario, before: Any = None) -> tuple[World, list[InspectorRecord]]:
    world = build_world(sc, start=T0)
    if before is not None:
        before(world)
    records: list[InspectorRecord] = []
    simulate(world, snapshots=False, on_collectives=records.extend)
    world.measure_impacts()
    return world, records


def per_phase_ms(r: InspectorRecord, message_mib: float = 16) -> float:
    """A record's execution time per communication phase (records fuse a step's phases)."""
    return r.exec_time_us / 1000 / (r.bytes / (message_mib * MiB))


def seconds(world: World, us: int) -> float:
    return (us - (world.start - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)).total_seconds() * 1e6) / 1e6


def span(world: World, r: InspectorRecord) -> tuple[float, float]:
    """(issued, last kernel stop) of a traced record, in seconds of fabric time."""
    assert r.trace is not None
    return seconds(world, r.trace[0]), seconds(world, r.trace[2][-1][1])


def test_collectives_land_through_the_inspector_parser(tmp_path: Path) -> None:
    store = StoreConfig(path=tmp_path / "chdb", ttl_days=0)
    settings = Settings(store=store, transport=TransportConfig(kind="inprocess"))
    summary = run_scenario(settings, scenario([], duration="6s", collectives={"step_s": 0.5}), out_dir=tmp_path / "out")
    with open_store(settings.store) as store:
        rows = store.query_arrow(
            "SELECT toString(host) AS host, pid, toString(communicator) AS comm, rank, ranks, nodes, sequence, bytes, "
            "exec_time_us, bus_bw_gbs, toString(source) AS source, start_ts, stop_ts FROM collectives"
        ).to_pylist()
        window = Window(summary.start, summary.end + dt.timedelta(seconds=1))
        attributed = job_collectives(store, window).select("communicator", "job_id", "attribution").unique()
    assert summary.rows["collectives"] == len(rows) > 0
    assert {r["source"] for r in rows} == {"inspector_json"}
    assert len({r["comm"] for r in rows}) == 2  # one communicator per job
    for comm in {r["comm"] for r in rows}:
        mine = [r for r in rows if r["comm"] == comm]
        assert {(r["ranks"], r["nodes"]) for r in mine} == {(4, 4)}
        assert len({(r["host"], r["pid"]) for r in mine}) == len({r["rank"] for r in mine}) == 4  # a process per rank
        sequences = sorted({r["sequence"] for r in mine})
        assert sequences == list(range(1, len(sequences) + 1))
        assert len(mine) == 4 * len(sequences)  # every rank reports every collective
        assert len(sequences) <= 3 * 6  # a few collectives per second of fabric time, not one per phase
        assert all(r["stop_ts"] > r["start_ts"] and 0 < r["bus_bw_gbs"] <= 12.5 for r in mine)
    # each rank's process is known by its queue pairs (qp_owners), so every collective names its job
    assert attributed.height == 2 and set(attributed["attribution"]) == {"qp_owner"}
    assert set(attributed["job_id"]) == {"team-a/llm-a", "team-b/llm-b"}


def test_execution_time_inflates_during_an_incident_and_not_outside() -> None:
    incast = {"kind": "incast", "start": "2s", "end": "3.5s", "receiver": "gpu-001", "senders": 3, "placed": False}
    world, records = ran(scenario([incast], jobs=[A]))
    before = [per_phase_ms(r) for r in records if span(world, r)[1] < 1.9 and span(world, r)[0] > 0.3]
    during = [per_phase_ms(r) for r in records if span(world, r)[0] > 2.1 and span(world, r)[1] < 3.4]
    after = [per_phase_ms(r) for r in records if span(world, r)[0] > 4.0]
    clean = statistics.median(before)
    assert max(before) < 1.01 * clean and max(after) < 1.01 * clean and min(after) > 0.99 * clean
    assert statistics.median(during) > 1.5 * clean


def test_every_record_is_a_whole_step_even_at_the_runs_end() -> None:
    """A step still being fused when the run ends is not written: a shorter record would be an operation of a
    size the job never runs (Inspector writes each collective; the twin fuses a step's)."""
    world, records = ran(scenario([], jobs=[A], duration="2.37s", collectives={"step_s": 0.5}))
    sizes = {r.bytes for r in records}
    assert len(sizes) == 1 and len(records) > 4
    (comm,) = CollectiveTimer(world).comms.values()
    assert sizes == {comm.message_bytes * comm.iterations_per_step}


def test_collectives_inspector_never_records_advance_the_sequence_by_a_count_each_job_draws() -> None:
    """NCCL numbers the small, CPU-timed collectives Inspector drops: each record's `sequence` then advances by
    one plus the job's own count of them per step, drawn in `unrecorded_per_step` (none by default)."""
    for extra, jobs_gaps in ((None, {1}), ((0, 3), None)):
        collectives = {"step_s": 0.1, **({"unrecorded_per_step": extra} if extra else {})}
        world, records = ran(scenario([], duration="1s", collectives=collectives))
        gaps: dict[str, set[int]] = {}
        by_rank = sorted(records, key=lambda r: (r.communicator, r.rank, r.sequence))
        for (comm, _), mine in itertools.groupby(by_rank, key=lambda r: (r.communicator, r.rank)):
            seq = [r.sequence for r in mine]
            gaps.setdefault(comm, set()).update(b - a for a, b in itertools.pairwise(seq))
        assert all(len(g) == 1 for g in gaps.values()), gaps  # one count per job, every step alike
        got = {min(g) for g in gaps.values()}
        if jobs_gaps is not None:
            assert got == jobs_gaps
        else:
            assert got <= {1, 2, 3, 4}
            unrecorded = {c.job_id: c.unrecorded_per_step for c in CollectiveTimer(world).comms.values()}
            assert {1 + k for k in unrecorded.values()} == got and max(got) > 1  # this seed draws 2 and 0


def test_the_ring_waits_for_its_slowest_rank() -> None:
    def slow_one_sender(world: World) -> None:
        flow = next(f for f in world.engine.flows if f.src_rank == 2)
        world.engine.set_rate_limit(flow, 25e9)  # a quarter of its NIC's 100G

    _, fast = ran(scenario([], jobs=[A], duration="2s"))
    world, slow = ran(scenario([], jobs=[A], duration="2s"), slow_one_sender)
    for step in {r.sequence for r in slow}:
        times = [r.exec_time_us for r in slow if r.sequence == step]
        assert len(times) == 4 and max(times) - min(times) < 10  # every rank waits for the slow one
    flow_bytes = world.engine.flows[0].bytes_per_iteration * world.engine.params.wire_factor
    ring_ms = statistics.median(per_phase_ms(r) for r in slow)
    assert ring_ms == pytest.approx(flow_bytes / (25e9 / 8) * 1000, rel=0.05)  # set by the slowest member
    assert ring_ms > 3 * statistics.median(per_phase_ms(r) for r in fast)


def test_a_straggler_makes_every_other_rank_wait_and_is_unexplained_by_the_fabric() -> None:
    straggler = {"kind": "straggler", "start": "1s", "end": "3s", "host": "gpu-003", "slowdown": 2.0}
    world, records = ran(scenario([straggler], jobs=[A]))
    (truth,) = world.ground_truth()["incidents"]
    assert truth["kind"] == "unexplained_slowdown"
    assert (truth["ports"], truth["devices"], truth["job_ids"]) == (["gpu-003:eth0"], ["gpu-003"], ["team-a/llm-a"])
    assert truth["culprit_jobs"] == [] and truth["victim_jobs"] == ["team-a/llm-a"]
    # the three others wait the slow rank's extra step (2x: its 20 ms compute and its all-reduce's nominal time
    # more, the work training overlaps) in every collective of the window that follows a phase ending while it is slow
    (job,) = [j for j in world.jobs if j.job_id == "team-a/llm-a"]
    extra = 0.020 + fabric_bytes_per_rank(job) / (world.topology.spec.host_speed_gbps * 1e9 / 8)
    its = [it for it in world.engine.iterations if it.job_id == "team-a/llm-a"]
    waited = sum(1 for prev, it in itertools.pairwise(its) if 1.0 < prev.end_s <= 3.0 and it.start_s < 3.0 + extra)
    assert truth["gpu_seconds_lost"]["team-a/llm-a"] == pytest.approx(3 * extra * waited, rel=1e-3)
    slow_rank = 2  # gpu-003 is node rank 2 on one rail
    hit = [r for r in records if span(world, r)[0] > 1.2 and span(world, r)[1] < 2.8]
    for step in {r.sequence for r in hit}:
        ranks = {r.rank: r for r in hit if r.sequence == step}
        others = [r.exec_time_us for k, r in ranks.items() if k != slow_rank]
        assert ranks[slow_rank].exec_time_us < min(others) - 15_000  # the straggler looks fast...
        assert span(world, ranks[slow_rank])[0] > max(span(world, r)[0] for r in ranks.values() if r.rank != slow_rank)
    assert world.engine.byte_balance().dropped == 0  # ...and the fabric stays clean


def test_a_job_hurt_by_its_own_traffic_is_its_only_victim() -> None:
    gather = {"kind": "incast", "start": "1.5s", "end": "3.5s", "receiver": "gpu-001", "senders": 3,
              "owner": "team-a/llm-a"}  # fmt: skip
    world, _ = ran(scenario([gather]))
    (truth,) = world.ground_truth()["incidents"]
    assert truth["culprit_jobs"] == ["team-a/llm-a"] and truth["victim_jobs"] == ["team-a/llm-a"]
    lost = truth["gpu_seconds_lost"]
    assert lost["team-a/llm-a"] > 0.2 and abs(lost["team-b/llm-b"]) < 0.01
    assert "background/incast-1" not in {j.job_id for j in world.jobs}  # the owner's traffic, no job of its own


def test_a_jobs_checkpoint_hurts_the_job_sharing_its_receivers_port() -> None:
    ckpt = {"kind": "incast", "start": "1.5s", "end": "3.5s", "receiver": "gpu-005", "senders": 3,
            "owner": "team-a/llm-a", "mib_per_sender": 64}  # fmt: skip
    world, _ = ran(scenario([ckpt]))
    (truth,) = world.ground_truth()["incidents"]
    assert truth["culprit_jobs"] == ["team-a/llm-a"]
    assert "team-b/llm-b" in truth["victim_jobs"] and truth["gpu_seconds_lost"]["team-b/llm-b"] > 0.2


def test_traffic_of_no_placed_job_is_blamed_on_no_job_and_a_storm_on_the_job_of_its_nic() -> None:
    storage = {"kind": "incast", "start": "1s", "end": "2s", "receiver": "gpu-001", "senders": 3, "placed": False}
    storm = {"kind": "pfc_storm", "start": "3s", "end": "4s", "device": "gpu-006", "port": "eth0", "fraction": 0.7}
    world, _ = ran(scenario([storage, storm]))
    first, second = world.ground_truth()["incidents"]
    assert first["culprit_jobs"] == [] and first["victim_jobs"] == ["team-a/llm-a"]
    assert second["culprit_jobs"] == ["team-b/llm-b"] and "team-b/llm-b" in second["victim_jobs"]


def test_a_cnp_ignoring_nic_is_blamed_on_every_job_whose_traffic_it_leaves_unthrottled() -> None:
    """The NIC's own training job and the checkpoint reader sending from it, not merely the job placed there."""
    reader = {"kind": "incast", "start": "1s", "end": "3s", "receiver": "gpu-008", "senders": 3,
              "job": "ckpt-reader"}  # fmt: skip
    deaf = {"kind": "cnp_loss", "start": "1s", "host": "gpu-001", "fraction": 1.0}
    world, _ = ran(scenario([reader, deaf]))
    _, truth = world.ground_truth()["incidents"]
    assert truth["culprit_jobs"] == ["team-a/llm-a", "background/ckpt-reader"]


def test_overlapping_incidents_count_only_what_switching_each_off_gives_back() -> None:
    incast = {"kind": "incast", "start": "1s", "end": "4s", "receiver": "gpu-001", "senders": 3, "placed": False}
    optics = {"kind": "degraded_optics", "start": "2s", "end": "3s", "device": "leaf-r0-01", "port": "Ethernet0",
              "error_rate": 1e-6}  # fmt: skip
    world, _ = ran(scenario([incast, optics], jobs=[A]))
    alone, _ = ran(scenario([incast], jobs=[A]))
    both = world.ground_truth()["incidents"]
    # a negligible fault beside an incast: the incast keeps its toll, the fault costs next to nothing
    assert both[0]["gpu_seconds_lost"]["team-a/llm-a"] == pytest.approx(
        alone.ground_truth()["incidents"][0]["gpu_seconds_lost"]["team-a/llm-a"], rel=0.05
    )
    assert both[1]["victim_jobs"] == [] and abs(both[1]["gpu_seconds_lost"]["team-a/llm-a"]) < 0.05


def test_truth_files_without_the_impact_fields_still_load() -> None:
    old = {"kind": "incast", "start": T0.isoformat(), "end": T0.isoformat(), "job_ids": ["a"], "devices": ["d"],
           "ports": ["d:p"]}  # fmt: skip
    truth = Truth.from_dict(old)
    assert (truth.culprit_jobs, truth.victim_jobs, dict(truth.gpu_seconds_lost)) == ((), (), {})
    new = Truth.from_dict({**old, "culprit_jobs": ["c"], "victim_jobs": ["a"], "gpu_seconds_lost": {"a": 1.5}})
    assert (new.culprit_jobs, new.victim_jobs, dict(new.gpu_seconds_lost)) == (("c",), ("a",), {"a": 1.5})


def test_every_queue_pair_has_its_process_not_only_the_training_ranks() -> None:
    """eBPF on a monitored host sees every process's queue pairs: an incast's senders and receiver are its
    background job's workers where the scheduler placed it, processes of no job where it did not (storage
    readers); the training ranks keep their pods and jobs."""
    for placed in (True, False):
        incast = {"kind": "incast", "start": "1s", "end": "2s", "receiver": "gpu-001", "senders": 3, "placed": placed}
        world = build_world(scenario([incast], jobs=[A]), start=T0)
        owners = qp_owners_arrow(world).to_pylist()
        background = [f for f in world.engine.flows if f.job_id.startswith("background/")]
        assert background and len(owners) == 2 * len(world.engine.flows)
        by_qp = {(o["host"], o["qpn"]): o for o in owners}
        for f in background:
            for end, peer in ((by_qp[(f.src.host, f.src_qpn)], f.dst), (by_qp[(f.dst.host, f.dst_qpn)], f.src)):
                assert end["job_id"] == (f.job_id if placed else "") and end["comm"] == "python3"
                assert end["dest_ip"] == peer.ip and end["pid"] > 0
        ranks = [o for o in owners if o["job_id"] == "team-a/llm-a"]
        assert ranks and {o["comm"] for o in ranks} == {"pt_main_thread"}
        assert all(o["cgroup"].startswith("pod:") for o in ranks)
