"""The simulator's fast path: run a scenario and land its telemetry in the store through the pipeline.

`run_scenario` builds the fabric (`rocescope.sim.incidents.build_world`), publishes the `links`,
`endpoints`, `qp_owners` (the processes of every queue pair) and `incidents` (ground truth) streams once, then
runs the engine and publishes one `counters` Batch (every device, keyed `sim`) per poll, and the packet
mirror's sampled `packets` (`rocescope.sim.mirror`) of the poll, through `rocescope.pipeline.runner.publishing`:
Kafka, or the embedded sink into the configured store. The run is placed so it ends within two minutes before
now (`run_end`: the last minute boundary less a phase its seed draws), so its data is fresh and inside the store's
retention, and the same seed puts its reads at the same place in every 10 s or 1 min bucket on every run.

A deployment profile (`rocescope.sim.profile`: the scenario's `profile:`, or `profile=` here) turns the
engine's all-knowing snapshots into what that gear reports (`rocescope.sim.gear.Gear`): names, metrics
that exist, cadence per metric group, device clocks, one LLDP side; the ground truth is renamed alike.
The `ideal` profile passes everything through untouched.

The training jobs' NCCL collectives, timed by the fabric (`rocescope.sim.collectives`), are written as NCCL
Inspector's JSON lines and read back by the real parser (`rocescope.collectors.nccl.parse`) into the
`collectives` stream, poll by poll, so the rows are exactly what Inspector output on those hosts would give.
The ground truth is written again after the run with what each incident cost each job (`rocescope.sim.impact`).

`simulate` is the same run without any transport (for benchmarks): snapshots are taken and dropped,
or handed to a callback.
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rocescope.collectors.nccl.parse import collectives_batches, parse_json_lines
from rocescope.collectors.nccl.write import InspectorRecord, json_line
from rocescope.config import Settings
from rocescope.errors import SimError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.runner import publishing
from rocescope.pipeline.transport import Producer
from rocescope.sim.collectives import CollectiveTimer, qp_owners_arrow
from rocescope.sim.engine import Engine
from rocescope.sim.gear import Gear, rdma_netdevs_arrow
from rocescope.sim.incidents import World, build_world
from rocescope.sim.jobs import FAR_FUTURE, endpoints_arrow
from rocescope.sim.mirror import PacketMirror, Sampled
from rocescope.sim.profile import Profile, load_profile
from rocescope.sim.scenario import Scenario, load_scenario

SOURCE = "sim"
SnapshotCallback = Callable[[dt.datetime, pa.Table], None]
PacketsCallback = Callable[[dt.datetime, Sampled, PacketMirror], None]
CollectivesCallback = Callable[[list[InspectorRecord]], None]
#: Inspector records parsed and published together on the fast path
COLLECTIVES_BATCH = 8192


@dataclass(frozen=True)
class JobTimes:
    """Completed iterations of one job and their communication-phase durations."""

    job_id: str
    iterations: int
    mean_ms: float
    p50_ms: float
    max_ms: float


@dataclass
class RunSummary:
    """What a run did: fabric time simulated, wall time, rows published per stream, jobs, incidents."""

    scenario: str
    seed: int
    start: dt.datetime
    end: dt.datetime
    sim_seconds: float
    wall_seconds: float
    polls: int
    rows: dict[str, int] = field(default_factory=dict)
    jobs: list[JobTimes] = field(default_factory=list)
    incidents: list[dict[str, Any]] = field(default_factory=list)
    steps: dict[str, int] = field(default_factory=dict)
    out_dir: Path | None = None
    profile: str = "ideal"

    @property
    def speed(self) -> float:
        """Simulated seconds per wall-clock second."""
        return self.sim_seconds / self.wall_seconds if self.wall_seconds > 0 else float("inf")

    @property
    def rows_published(self) -> int:
        return sum(self.rows.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "profile": self.profile,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "sim_seconds": self.sim_seconds,
            "wall_seconds": round(self.wall_seconds, 3),
            "speed_sim_s_per_wall_s": round(self.speed, 2),
            "polls": self.polls,
            "rows": self.rows,
            "jobs": [vars(j) for j in self.jobs],
            "incidents": self.incidents,
            "steps": self.steps,
        }

    def lines(self) -> list[str]:
        """A short human summary (for the CLI)."""
        out = [
            f"scenario {self.scenario} (seed {self.seed}, profile {self.profile}): {self.sim_seconds:g} s of "
            f"fabric time in {self.wall_seconds:.1f} s ({self.speed:.1f}x), "
            f"{self.start:%Y-%m-%d %H:%M:%S} to {self.end:%H:%M:%S} UTC",
            "rows published: " + ", ".join(f"{k} {v}" for k, v in self.rows.items()),
        ]
        for j in self.jobs:
            out.append(
                f"job {j.job_id}: {j.iterations} iterations, comm mean {j.mean_ms:.1f} ms, "
                f"p50 {j.p50_ms:.1f} ms, max {j.max_ms:.1f} ms"
            )
        for inc in self.incidents:
            out.append(f"incident {inc['kind']} {inc['start_s']:g}-{inc['end_s']:g} s: {inc['description']}")
            lost = inc.get("gpu_seconds_lost", {})
            if inc.get("victim_jobs"):
                hurt = ", ".join(f"{j} {lost.get(j, 0.0):.1f} GPU-s" for j in inc["victim_jobs"])
                out.append(f"  slowed {hurt}; caused by {', '.join(inc.get('culprit_jobs', [])) or 'no job'}")
        if self.out_dir is not None:
            out.append(f"ground truth: {self.out_dir / 'ground_truth.json'}")
        return out


def job_times(engine: Engine, job_ids: list[str]) -> list[JobTimes]:
    out = []
    for jid in job_ids:
        times = [t * 1000 for t in engine.iteration_times(jid)]
        if times:
            out.append(JobTimes(jid, len(times), statistics.fmean(times), statistics.median(times), max(times)))
        else:
            out.append(JobTimes(jid, 0, 0.0, 0.0, 0.0))
    return out


def static_tables(world: World, gear: Gear | None = None) -> dict[str, pa.Table]:
    """`links`, `endpoints` (each job over its window), `qp_owners` (the processes of every queue pair) and
    `incidents` of a run, conformed; as the profile's gear reports them when `gear` is given."""
    start = world.start
    parts = []
    for job in world.jobs:
        lo, hi = world.windows.get(job.job_id, (0.0, world.duration_s))
        valid_to = FAR_FUTURE if hi >= world.duration_s else start + dt.timedelta(seconds=hi)
        parts.append(endpoints_arrow([job], world.topology, start + dt.timedelta(seconds=lo), valid_to))
    topo = world.topology
    if gear is None:
        return {
            "links": pa.concat_tables([topo.links_arrow(start, SOURCE), rdma_netdevs_arrow(topo, start)]),
            "endpoints": pa.concat_tables(parts),
            "qp_owners": qp_owners_arrow(world),
            "incidents": world.incidents_arrow(),
        }
    return {
        "links": pa.concat_tables([gear.links(start, SOURCE), gear.rdma_netdevs(start)]),
        "endpoints": gear.endpoints(pa.concat_tables(parts)),
        "qp_owners": gear.qp_owners(qp_owners_arrow(world)),
        "incidents": gear.incidents(world.incidents_arrow()),
    }


def with_profile(scenario: Scenario, profile: Profile) -> Scenario:
    """The scenario with what the profile sets in the engine (the PFC watchdog) and the profile named."""
    params = {**scenario.params, **profile.switch.pfc_watchdog.engine_params()}
    return scenario.model_copy(update={"params": params, "profile": profile.name})


def progress_bar(enabled: bool, total: float, label: str) -> Any:
    if not enabled:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed:.0f}/{task.total:.0f} s fabric time"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )


def simulate(
    world: World,
    on_snapshot: SnapshotCallback | None = None,
    progress: bool = False,
    snapshots: bool = True,
    on_packets: PacketsCallback | None = None,
    on_collectives: CollectivesCallback | None = None,
    timer: CollectiveTimer | None = None,
) -> tuple[float, int]:
    """Run the world's engine to its duration, a counters snapshot per poll (dropped unless a callback
    takes it) and, with `on_packets`, the packet mirror's sample of the poll (when the scenario's mirror
    is enabled); with `on_collectives`, the Inspector records of the collectives completed by each poll
    (`timer`'s, default one on the world's clocks). Returns (wall seconds, polls)."""
    eng, poll = world.engine, world.scenario.poll_interval_s
    mirror = PacketMirror(eng, world.scenario.mirror, world.scenario.seed) if on_packets is not None else None
    if mirror is not None and not world.scenario.mirror.enabled:
        mirror = None
    if on_collectives is not None and timer is None:
        timer = CollectiveTimer(world)
    polls = 0
    with progress_bar(progress, world.duration_s, world.scenario.name) as bar:
        task = bar.add_task(world.scenario.name, total=world.duration_s) if bar is not None else None

        def on_poll(ts: dt.datetime, engine: Engine) -> None:
            nonlocal polls
            polls += 1
            world.observe()
            if snapshots:
                table = engine.snapshot(ts)
                if on_snapshot is not None:
                    on_snapshot(ts, table)
            if mirror is not None and on_packets is not None:
                on_packets(ts, mirror.sample(), mirror)
            if timer is not None and on_collectives is not None:
                on_collectives(timer.take())
            if bar is not None:
                bar.update(task, completed=min(engine.now, world.duration_s))

        t0 = time.perf_counter()
        eng.run(world.duration_s, on_poll, poll)
        if timer is not None and on_collectives is not None:
            on_collectives(timer.take())  # the steps the last poll left
        wall = time.perf_counter() - t0
    return wall, polls


def publish_table(producer: Producer, stream: str, table: pa.Table, key: str, rows: dict[str, int]) -> None:
    for rb in table.to_batches():
        if rb.num_rows:
            producer.publish(Batch(stream, rb, key))
            rows[stream] = rows.get(stream, 0) + rb.num_rows


def publish_collectives(producer: Producer, records: list[InspectorRecord], rows: dict[str, int]) -> None:
    """Records as Inspector's JSON lines, through the real parser, into the `collectives` stream."""
    if not records:
        return
    parsed = parse_json_lines("".join(json_line(r) for r in records).encode())
    if parsed.malformed:
        raise SimError(f"the parser refused {parsed.malformed} simulated Inspector record(s): {parsed.problem}")
    for batch in collectives_batches(parsed.batch):
        producer.publish(batch)
        rows["collectives"] = rows.get("collectives", 0) + batch.num_rows


def run_end(seed: int, now: dt.datetime) -> dt.datetime:
    """When a run of `seed` ends: the minute boundary before `now` less a phase of 0-60 s drawn from the seed (ms).
    Detectors sum counters in buckets of wall-clock time (10 s, 1 min): a run that ended at the wall clock's second
    put its reads at another place in them each time, so two runs of one exam draw (before and after a change)
    differed by more than the change. Drawn per seed, the phase still varies across an exam's runs."""
    phase_ms = int(np.random.default_rng([seed, 60]).integers(0, 60_000))
    return now.replace(second=0, microsecond=0) - dt.timedelta(milliseconds=phase_ms)


def run_scenario(
    settings: Settings,
    scenario: str | Path | Scenario,
    duration_s: float | None = None,
    out_dir: Path | None = None,
    progress: bool = False,
    profile: str | Path | Profile | None = None,
    counterfactuals: bool = True,
) -> RunSummary:
    """Run a scenario (shipped name, YAML path, or a loaded `Scenario`) for `duration_s` of fabric
    time (default: the scenario's), landing everything through the configured transport/store, as the
    deployment `profile` reports it (default: the scenario's `profile:`). Without `counterfactuals`, the
    incidents' toll is measured against the jobs' clean times only (no rerun of the fabric per overlapping
    incident: what a benchmark that needs the telemetry, not the truth, can skip).

    With `out_dir`, writes `ground_truth.json` (before the run, and again with each incident's toll after it)
    and `summary.json` there. The run ends now.
    """
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    prof = load_profile(profile if profile is not None else sc.profile)
    sc = with_profile(sc, prof)
    duration = float(duration_s if duration_s is not None else sc.duration)
    end = run_end(sc.seed, dt.datetime.now(dt.UTC))
    world = build_world(sc, duration, end - dt.timedelta(seconds=duration))
    gear = Gear(prof, world)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        truth = gear.ground_truth(world.ground_truth())
        (out_dir / "ground_truth.json").write_text(json.dumps(truth, indent=2) + "\n")
    rows: dict[str, int] = {}
    t0 = time.perf_counter()
    with publishing(settings) as (producer, _metrics):
        for stream, table in static_tables(world, gear).items():
            publish_table(producer, stream, table, SOURCE, rows)
        for stream in ("links", "endpoints", "qp_owners", "incidents", "counters", "packets", "collectives"):
            rows.setdefault(stream, 0)

        def land(ts: dt.datetime, table: pa.Table) -> None:
            publish_table(producer, "counters", gear.counters(ts, table), SOURCE, rows)

        def land_packets(_ts: dt.datetime, sampled: Sampled, mirror: PacketMirror) -> None:
            if sampled.size:
                publish_table(producer, "packets", gear.packets(mirror.table(sampled)), SOURCE, rows)

        pending: list[InspectorRecord] = []

        def land_collectives(records: list[InspectorRecord]) -> None:
            pending.extend(gear.inspector_records(records))  # parsed a few thousand at a time: cost is per call
            if len(pending) >= COLLECTIVES_BATCH:
                publish_collectives(producer, pending, rows)
                pending.clear()

        timer = CollectiveTimer(world, gear.host_skew_s)
        _, polls = simulate(
            world, land, progress, on_packets=land_packets, on_collectives=land_collectives, timer=timer
        )
        publish_collectives(producer, pending, rows)
    wall = time.perf_counter() - t0
    return summarize(world, duration, wall, polls, rows, out_dir, gear, counterfactuals)


def summarize(
    world: World,
    end_s: float,
    wall: float,
    polls: int,
    rows: dict[str, int],
    out_dir: Path | None,
    gear: Gear | None = None,
    counterfactuals: bool = True,
) -> RunSummary:
    """The summary of a finished run (fast path or served), written to `out_dir/summary.json` if given (with
    the final `ground_truth.json`); its incidents named as the profile's gear names them."""
    eng, sc = world.engine, world.scenario
    world.mark_unobservable()
    if counterfactuals:
        world.measure_impacts()
    world.mark_emergent()
    truth = world.ground_truth() if gear is None else gear.ground_truth(world.ground_truth())
    summary = RunSummary(
        scenario=sc.name,
        seed=sc.seed,
        start=world.start,
        end=world.start + dt.timedelta(seconds=end_s),
        sim_seconds=eng.now,
        wall_seconds=wall,
        polls=polls,
        rows=rows,
        jobs=job_times(eng, [j.job_id for j in world.jobs]),
        incidents=truth["incidents"],
        steps=eng.step_stats(),
        out_dir=out_dir,
        profile=sc.profile if gear is None else gear.profile.name,
    )
    if out_dir is not None:
        (out_dir / "ground_truth.json").write_text(json.dumps(truth, indent=2) + "\n")
        (out_dir / "summary.json").write_text(json.dumps(summary.as_dict(), indent=2) + "\n")
    return summary
