"""The exam draws where, how large and when from each run's seed (issue 28 item 2): two seeds of one kind differ in
place and size, every draw stays inside its kind's range, incidents that ride on a fan-in stay on it, and a drawn
clean baseline sends traffic over the spines."""

from __future__ import annotations

import datetime as dt
import math

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from rocescope.sim.draw import draw_scenario, named_strings
from rocescope.sim.evaluate import SCENARIOS
from rocescope.sim.exam import exam_scenario, plan_exam
from rocescope.sim.gear import Gear
from rocescope.sim.incidents import build_world, place
from rocescope.sim.jobs import MiB, fabric_share
from rocescope.sim.profile import load_profile
from rocescope.sim.run import simulate
from rocescope.sim.scenario import (
    CnpLoss,
    DegradedOptics,
    Incast,
    JobModel,
    LinkFlap,
    Microburst,
    PfcMisconfig,
    PfcStorm,
    Scenario,
    Straggler,
)
from rocescope.sim.topology import Topology

SEEDS = range(1_000_000_000, 1_000_000_040)
START = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)


def drawn(name: str, seed: int) -> Scenario:
    return draw_scenario(exam_scenario(name), seed)


def where_and_how_large(sc: Scenario) -> list[dict[str, object]]:
    return [inc.model_dump(exclude={"description", "kind", "job", "placed", "owner"}) for inc in sc.incidents]


@pytest.mark.parametrize("name", ["incast", "microburst", "pfc_storm", "link_flap", "degraded_optics", "straggler"])
def test_two_seeds_of_one_kind_differ_in_place_and_size_and_one_seed_draws_alike(name: str) -> None:
    a, b = drawn(name, SEEDS[0]), drawn(name, SEEDS[1])
    assert where_and_how_large(a) != where_and_how_large(b)
    assert drawn(name, SEEDS[0]) == a
    (inc_a,), (inc_b,) = a.incidents, b.incidents
    assert inc_a.start != inc_b.start  # when
    places = {"incast": "receiver", "microburst": "receiver", "straggler": "host"}.get(name, "device")
    sizes = {"incast": "senders", "microburst": "burst", "pfc_storm": "end", "straggler": "slowdown"}
    place_changed = any(getattr(drawn(name, s).incidents[0], places) != getattr(inc_a, places) for s in SEEDS[1:6])
    assert place_changed
    size = sizes.get(name, "period" if name == "link_flap" else "error_rate")
    assert len({str(getattr(drawn(name, s).incidents[0], size)) for s in SEEDS[:6]}) > 1


def test_every_draw_stays_in_its_kinds_range_on_a_non_blocking_fabric() -> None:
    for seed in SEEDS:
        for name in ("incast", "microburst", "pfc_storm", "link_flap", "degraded_optics", "straggler"):
            sc = drawn(name, seed)
            f = sc.fabric
            assert f.spines * f.uplinks_per_spine * f.uplink_speed_gbps == f.host_ports_per_leaf * f.host_speed_gbps
            assert 1 <= math.ceil(f.hosts / f.host_ports_per_leaf) <= 4
            (inc,) = sc.incidents
            end = inc.end if inc.end is not None else sc.duration
            assert 30.0 <= inc.start < end <= sc.duration - 10.0
            if isinstance(inc, Incast):
                assert isinstance(inc.senders, list) and 2 <= len(inc.senders) <= min(64, f.hosts - 1)
                assert inc.receiver not in inc.senders and 5.0 <= end - inc.start <= 90.0
            elif isinstance(inc, Microburst):
                assert 0.001 <= inc.burst <= 0.05 and 0.5 <= inc.period <= 2.0
                assert isinstance(inc.senders, list) and 2 <= len(inc.senders) <= 16
            elif isinstance(inc, PfcStorm):
                assert 3.0 <= end - inc.start <= 90.0 and inc.port == f"eth{int(inc.port[3:])}"
            elif isinstance(inc, LinkFlap):
                assert 0.5 <= inc.down <= min(3.0, inc.period / 2) and 5.0 <= inc.period <= 30.0
            elif isinstance(inc, DegradedOptics):
                assert 1e-6 <= inc.error_rate <= 1e-4
                topo = Topology(f)
                nics = [topo.nic(h, r) for j in place(topo, sc.jobs, seed) for h in j.hosts for r in j.rails]
                on_path = any(
                    (inc.device, inc.port) == (n.leaf, n.leaf_port)
                    or (inc.device == n.leaf and inc.port in {p.name for p in topo.uplinks(n.leaf)})
                    for n in nics
                )
                assert on_path  # frames flow there: an optic failing on an idle link shows nothing
            elif isinstance(inc, Straggler):
                assert 1.1 <= inc.slowdown <= 2.0
                jobs = place(Topology(f), sc.jobs, seed)
                assert any(inc.host in j.hosts for j in jobs)  # a GPU of a training job, as placed for this seed


def test_incidents_that_ride_on_a_fan_in_stay_on_the_drawn_one() -> None:
    for seed in SEEDS[:10]:
        loss = drawn("cnp_loss", seed)
        incast, lost = loss.incidents
        assert isinstance(incast, Incast) and isinstance(lost, CnpLoss) and isinstance(incast.senders, list)
        assert lost.host in incast.senders and lost.rail == incast.rail and lost.start == incast.start
        assert lost.fraction == 1.0  # a full loss stays full; a partial one is drawn
        assert 0.3 <= drawn("cnp_loss_partial", seed).incidents[1].fraction <= 0.9  # type: ignore[union-attr]
        misconfig = drawn("pfc_misconfig", seed)
        off, incast = misconfig.incidents
        assert isinstance(off, PfcMisconfig) and isinstance(incast, Incast) and isinstance(incast.senders, list)
        topo = Topology(misconfig.fabric)
        ports = {(topo.attachment(h, incast.rail).device, topo.attachment(h, incast.rail).name) for h in incast.senders}
        assert (off.device, off.port) in ports


def test_a_straggler_drawn_during_an_incast_slows_the_receivers_job_while_the_incast_lasts() -> None:
    """Issue 30 item 7: a straggler during a fabric incident on the same job (the exam's `straggler_during_incast`):
    the incast's receiver is a rank of a job, the straggler a rank of that job that begins while the incast lasts."""
    for seed in SEEDS[:10]:
        sc = drawn("straggler_during_incast", seed)
        incast, slow = sc.incidents
        assert isinstance(incast, Incast) and isinstance(slow, Straggler) and incast.end is not None
        jobs = place(Topology(sc.fabric), sc.jobs, sc.seed)
        (job,) = [j for j in jobs if incast.receiver in j.hosts]
        assert slow.host in job.hosts and slow.rail in job.rails
        assert incast.start <= slow.start <= incast.end and slow.end is not None and slow.end > slow.start


def test_storage_readers_are_hosts_no_job_runs_on() -> None:
    for seed in SEEDS[:10]:
        sc = drawn("incast_storage_readers", seed)
        (incast,) = sc.incidents
        assert isinstance(incast, Incast) and not incast.placed and isinstance(incast.senders, list)
        busy = {h for j in place(Topology(sc.fabric), sc.jobs, seed) for h in j.hosts}
        assert not busy & set(incast.senders)


def test_templates_whose_physics_rests_on_one_geometry_keep_it() -> None:
    fabric = exam_scenario("cnp_loss_fabric")
    kept = drawn("cnp_loss_fabric", SEEDS[0])
    assert kept == fabric.model_copy(update={"seed": SEEDS[0], "collectives": kept.collectives})
    assert kept.collectives.unrecorded_per_step == drawn("incast", SEEDS[0]).collectives.unrecorded_per_step != (0, 0)
    polarization = drawn("polarization", SEEDS[0])
    assert polarization.fabric == exam_scenario("polarization").fabric  # the fault is in the shape


def test_the_exam_runs_drawn_scenarios_and_can_run_them_as_written() -> None:
    plan = plan_exam("0c8f131e", kinds=["incast"], seeds_per_kind=2, baselines=1)
    written = plan_exam("0c8f131e", kinds=["incast"], seeds_per_kind=2, baselines=1, drawn=False)
    assert [(r.profile, r.seed) for r in plan] == [(r.profile, r.seed) for r in written]
    for d, w in zip(plan, written, strict=True):
        assert not isinstance(d.scenario, str) and not isinstance(w.scenario, str)
        assert d.scenario == draw_scenario(w.scenario, d.seed)
        assert d.scenario != w.scenario


def test_every_kinds_drawn_scenarios_build() -> None:
    for names in SCENARIOS.values():
        for k, name in enumerate(names):
            sc = drawn(name, SEEDS[k])
            world = build_world(sc, None, START)  # built for the whole run, not simulated
            assert len(world.truth) == len(sc.incidents)


def test_a_drawn_clean_baseline_sends_traffic_over_the_spines() -> None:
    for seed in SEEDS:
        sc = drawn("baseline", seed)
        if math.ceil(sc.fabric.hosts / sc.fabric.host_ports_per_leaf) >= 2 and len(sc.jobs) >= 1:
            break
    world = build_world(sc, 1.0, START)  # a second holds every job's first step (steps of 1 s at most)
    tables: list[pa.Table] = []
    simulate(world, lambda _ts, table: tables.append(table))
    last = tables[-1]
    spines = {d.name for d in world.topology.spines}
    rows = last.filter(pc.is_in(last["device"].cast(pa.string()), pa.array(sorted(spines))))
    moved = rows.filter(pc.equal(rows["metric"].cast(pa.string()), "tx_bytes"))
    assert moved.num_rows and pc.sum(moved["value"]).as_py() > 0


def test_every_kinds_drawn_scenarios_build_with_a_storage_array() -> None:
    """The array's reads are named apart from every incident's traffic (a template's own storage readers)."""
    for names in SCENARIOS.values():
        for name in names:
            sc = next((s for s in (drawn(name, seed) for seed in SEEDS) if s.traffic and s.unmonitored), None)
            if sc is None:
                continue  # a template whose geometry is kept whole draws none
            world = build_world(sc, None, START)
            assert len(world.truth) == len(sc.incidents)


def test_some_runs_have_a_storage_array_no_collector_reads_serving_job_hosts() -> None:
    """Issue 28 item 3: in about one run of two a storage array (`unmonitored`) on a port no job and no incident
    uses serves reads to job hosts over the lossless priority; the rest of the draw does not depend on it."""
    kinds = {name: [drawn(name, s) for s in SEEDS[:20]] for name in ("baseline", "incast", "pfc_storm")}
    for name, scenarios in kinds.items():
        with_array = [sc for sc in scenarios if sc.traffic]
        assert 0 < len(with_array) < len(scenarios), name
        for sc in with_array:
            (read,) = sc.traffic
            (array,) = set(read.senders) & set(sc.unmonitored)
            busy = {h for j in place(Topology(sc.fabric), sc.jobs, sc.seed) for h in j.hosts}
            named = {v for inc in sc.incidents for v in inc.model_dump().values() if isinstance(v, str)}
            named |= {h for inc in sc.incidents for v in inc.model_dump().values() if isinstance(v, list) for h in v}
            assert array not in busy and array not in named
            assert set(read.senders) == {array} and set(read.receivers) <= busy and read.priority is None
            assert not read.placed and read.end is not None and read.end <= sc.duration


def test_some_runs_have_a_leaf_no_collector_reads_that_no_incident_touches() -> None:
    """Issue 28 item 3: in about one run of four a leaf that job traffic crosses is unmonitored; no incident names it
    or a host under it, and its own counters never reach the store while its hosts' NICs still report."""
    for name in ("baseline", "incast", "pfc_storm", "straggler"):
        scenarios = [drawn(name, s) for s in SEEDS]
        blind = [sc for sc in scenarios if any(d.startswith("leaf") for d in sc.unmonitored)]
        assert 0 < len(blind) < len(scenarios) / 2, name
        for sc in blind:
            topo = Topology(sc.fabric)
            (leaf,) = [d for d in sc.unmonitored if d.startswith("leaf")]
            named = {v for inc in sc.incidents for v in named_strings(inc.model_dump())}
            under = {n.host for h in topo.hosts for n in topo.nics_of(h.name) if n.leaf == leaf}
            assert leaf not in named and not under & named, (name, sc.seed)
            jobs = place(topo, sc.jobs, sc.seed)
            assert under & {h for j in jobs for h in j.hosts}, "job traffic crosses it"
    sc = next(sc for sc in (drawn("incast", s) for s in SEEDS) if any(d.startswith("leaf") for d in sc.unmonitored))
    (leaf,) = [d for d in sc.unmonitored if d.startswith("leaf")]
    world = build_world(sc, 2.0, START)
    gear = Gear(load_profile(sc.profile), world)
    tables: list[pa.Table] = []
    simulate(world, lambda ts, table: tables.append(gear.counters(ts, table)))
    devices = set(pc.unique(pa.concat_tables(tables)["device"].cast(pa.string())).to_pylist())
    topo = world.topology
    under = {n.host for n in (n for h in topo.hosts for n in topo.nics_of(h.name)) if n.leaf == leaf}
    assert leaf not in devices and under <= devices
    lldp = gear.links(START, "lldp").to_pylist()
    assert not [r for r in lldp if r["device"] == leaf] and [r for r in lldp if r["peer_device"] == leaf]


def nominal_busy(job: JobModel, host_gbps: float) -> float:
    """The share of a step the job's NICs send at line rate, from its message, collective and compute gap."""
    comm_s = fabric_share(job.collective, job.hosts) * job.message_mib * MiB / (host_gbps * 1e9 / 8)
    return comm_s / (comm_s + job.compute_ms / 1000)


def test_drawn_jobs_keep_their_nics_busy_for_5_to_95_percent_of_sub_second_steps() -> None:
    """Issue 28 item 1, issue 29 item 1: training traffic at every duty cycle, its phases sub-second; before, jobs
    drew 20-400 ms of compute beside 32-512 MiB messages and idled their 400G NICs 80-100% of each step."""
    busy = []
    for seed in SEEDS:
        sc = drawn("baseline", seed)
        for job in sc.jobs:
            busy.append(nominal_busy(job, sc.fabric.host_speed_gbps))
            assert job.compute_ms < 1000  # sub-second compute phases
    assert all(0.049 <= b <= 0.951 for b in busy), busy
    assert min(busy) < 0.3 and max(busy) > 0.7  # the range is drawn, not one point of it
    assert sum(b >= 0.4 for b in busy) >= len(busy) / 3  # many jobs where a 40%-busy veto would hide a burst


def test_a_drawn_jobs_receiving_ports_carry_its_duty_cycle() -> None:
    """The engine delivers what the draw meant: a leaf port facing a rank of a ring job (no fan-in: no congestion
    slows it) sends for about the job's drawn share of each second."""
    for seed in SEEDS:
        sc = drawn("baseline", seed)
        ring = [j for j in sc.jobs if j.collective == "ring" and j.hosts >= 2]
        if ring and 0.3 <= nominal_busy(ring[0], sc.fabric.host_speed_gbps) <= 0.8:
            break
    job = ring[0]
    sc = sc.model_copy(update={"jobs": [job], "incidents": [], "traffic": [], "unmonitored": []})
    world = build_world(sc, 6.0, START)
    tables: list[pa.Table] = []
    simulate(world, lambda _ts, table: tables.append(table))
    (placed,) = place(Topology(sc.fabric), sc.jobs, sc.seed)
    port = world.topology.attachment(placed.hosts[0], placed.rails[0] if placed.rails else 0)

    def sent(table: pa.Table) -> float:
        rows = table.filter(
            pc.and_(
                pc.and_(pc.equal(table["device"].cast(pa.string()), port.device),
                        pc.equal(table["port"].cast(pa.string()), port.name)),
                pc.equal(table["metric"].cast(pa.string()), "tx_bytes"),
            )
        )  # fmt: skip
        return float(pc.sum(rows["value"]).as_py() or 0.0)

    busy = (sent(tables[-1]) - sent(tables[1])) / ((len(tables) - 2) * sc.fabric.host_speed_gbps * 1e9 / 8)
    assert busy == pytest.approx(nominal_busy(job, sc.fabric.host_speed_gbps), abs=0.15)
