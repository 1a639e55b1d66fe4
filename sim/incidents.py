"""From a scenario to a running fabric: topology, jobs, flows, engine, incidents armed, ground truth.

`build_world` places the training jobs, builds their collectives' flows, adds the traffic the
incidents and `traffic:` entries put on the wire (`rocescope.sim.traffic`), builds the engine, then
arms every incident on it and collects its ground truth (`rocescope.sim.arming`, which describes each
kind). The `World` is everything one run is made of; `GroundTruth` rows become the `incidents` stream
and `ground_truth.json`, with what each incident cost each job once the engine ran (`rocescope.sim.impact`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from rocescope.errors import SimError
from rocescope.pipeline.batch import conform
from rocescope.sim.arming import Arming, GroundTruth
from rocescope.sim.ecmp import Ecmp, fabric_hashing
from rocescope.sim.emergent import Event, Ledger
from rocescope.sim.engine import Engine
from rocescope.sim.impact import Impact, incident_impacts
from rocescope.sim.jobs import Flow, Job, JobSpec, Pod, collective_flows
from rocescope.sim.roce import QpAllocator
from rocescope.sim.scenario import JobModel, Scenario, ScenarioError, message_bytes
from rocescope.sim.scoring import SLOWDOWN
from rocescope.sim.topology import Topology
from rocescope.sim.traffic import BACKGROUND_NS, ENDLESS, ExtraTraffic

__all__ = ["BACKGROUND_NS", "ENDLESS", "GroundTruth", "World", "build_world", "place"]

T = TypeVar("T")


@dataclass
class World:
    """Everything one scenario run is made of. `jobs` are the jobs the inventory knows (placed: they get
    `endpoints` rows and pods); the engine also runs `unplaced` ones (traffic of no placed job)."""

    scenario: Scenario
    duration_s: float
    start: dt.datetime
    topology: Topology
    jobs: list[Job]
    flows: list[Flow]
    engine: Engine
    truth: list[GroundTruth] = field(default_factory=list)
    #: (job, valid from s, valid to s) for the endpoints table: training jobs run all along.
    windows: dict[str, tuple[float, float]] = field(default_factory=dict)
    unplaced: list[Job] = field(default_factory=list)
    #: each incident's toll, measured once the run is over (`measure_impacts`)
    impacts: list[Impact] | None = None
    #: the engine state the emergent labels need, read at each poll (`observe`), and the imbalance and congestion
    #: no incident injected, labelled after the run (`mark_emergent`): truth rows with no toll measured (nothing to
    #: switch off)
    ledger: Ledger | None = None
    emergent: list[GroundTruth] = field(default_factory=list)
    #: the jobs of the scenario's `traffic:` entries (storage reads, checkpoint writes: no incident)
    traffic_jobs: list[str] = field(default_factory=list)

    @property
    def training_jobs(self) -> list[Job]:
        return [j for j in self.jobs if j.namespace != BACKGROUND_NS]

    def measure_impacts(self) -> list[Impact]:
        """Each incident's toll on the jobs, with counterfactual runs where other incidents or traffic overlap it
        (once, when the run is over: later calls return the same)."""
        if self.impacts is None:
            self.impacts = incident_impacts(self)
        return self.impacts

    def mark_unobservable(self) -> None:
        """After the run, mark the incidents that by their kind's definition (`rocescope.sim.truth`) never
        happened where anything could see them: degraded optics on a link that no frame crossed (the hashing put
        no flow on it: no FCS failed); PFC off on a port no congestion reached (nothing dropped: the missing
        pause was never asked for); a NIC that drops CNPs but was sent none (no congestion on its flows); a route
        loop whose links were not held paused (it kept draining: no deadlock). A
        scenario staged on a larger fabric (the exam's) can leave its incident where no traffic goes."""
        totals = self.engine.flow_totals()
        for i, t in enumerate(self.truth):
            if not t.observable or t.kind not in ("degraded_optics", "pfc_misconfig", "cnp_loss", "pfc_deadlock"):
                continue
            device, _, port = t.ports[0].partition(":")
            why = ""
            if t.kind == "degraded_optics" and self.engine.counter(device, port, "rx_fcs_errors") <= 0:
                why = "no frame crossed the link in the window, so none failed"
            elif t.kind == "pfc_misconfig" and (
                self.engine.counter(device, port, "rx_discards") <= 0
                and self.engine.counter(device, port, "pg_dropped_packets", t.priority) <= 0
            ):
                why = "no congestion reached the port: nothing dropped for want of a pause"
            elif t.kind == "cnp_loss" and len(t.devices) == 1:  # a NIC's own loss, not a switch queue's
                nic = self.topology.port(device, t.ports[1].partition(":")[2])
                paths = (self.engine.flow_path(f) for f in range(len(self.engine.flows)))
                sent = sum(float(totals.cnps[f]) for f, p in enumerate(paths) if p and p[0].id == nic.id)
                if sent <= 0:
                    why = "no CNP was sent to it: none of its flows met congestion"
            elif t.kind == "pfc_deadlock" and not self._deadlocked(t):
                why = "the loop kept draining (a PFC watchdog broke it, or its buffers never filled): no deadlock"
            if why:
                self.truth[i] = replace(t, observable=False, description=f"{t.description}; {why} (unobservable)")

    def _deadlocked(self, t: GroundTruth) -> bool:
        """Whether every link of the loop was held paused for half the incident or more (nothing drains)."""
        span_us = max(t.end_s - t.start_s, 1e-9) * 1e6
        for ref in t.ports:
            device, _, port = ref.partition(":")
            if self.engine.counter(device, port, "pfc_rx_pause_duration_us", t.priority) < 0.5 * span_us:
                return False
        return True

    def observe(self) -> None:
        """Read what the after-run labels need (call at every poll)."""
        if self.ledger is not None:
            self.ledger.observe(self.engine)

    def mark_emergent(self) -> None:
        """After the run, label what the traffic did by itself (`rocescope.sim.emergent`: ECMP imbalance, incast
        and the congestion around them that is don't care) where no injected incident explains it: an
        imbalance on a leaf or spine with an injected imbalance, polarization, flap or deadlock; congestion at a
        port (or its cable's other end) whose queue an injected incident fills (`_filled`)."""
        if self.ledger is None or self.emergent:
            return
        explains = {"ecmp_imbalance", "polarization", "link_flap", "pfc_deadlock"}
        lossless = self.scenario.engine_params().lossless_priority

        # the ledger reads at each poll: what an incident leaves behind (a queue draining after a storm) shows in
        # the poll that ends after it
        after = self.scenario.poll_interval_s

        def overlaps(t: GroundTruth, ev: Event, slack: float = 0.0) -> bool:
            return t.start_s < ev.end_s and t.end_s + slack > ev.start_s

        congestion = self.ledger.congestion()
        imbalance = self.ledger.imbalance()
        self._label_fan_in(congestion)
        self._label_imbalance(imbalance)
        self._label_contention(lossless)
        for ev in [*imbalance, *congestion]:
            where = f"{ev.port.device}:{ev.port.name}"
            if ev.kind == "ecmp_imbalance":
                near = {ev.port.device, ev.port.peer_device}
                if any(
                    t.kind in explains and t.observable and overlaps(t, ev) and near & set(t.devices)
                    for t in self.truth
                ):
                    continue
            else:
                cable = {where, f"{ev.port.peer_device}:{ev.port.peer_port}"}
                if any(overlaps(t, ev, after) and cable & _filled(t) for t in self.truth):
                    continue
            jobs = self._jobs_crossing(ev)
            what = ev.what if "emergent" in ev.what else f"{ev.kind} (emergent): {ev.what}"
            culprits = jobs if ev.kind == "ecmp_imbalance" and not ev.dont_care else ()
            self.emergent.append(
                GroundTruth(
                    ev.kind, ev.start_s, ev.end_s, jobs, (ev.port.device, ev.port.peer_device), (where,), lossless,
                    what, culprits, anchor=(where, f"{ev.port.peer_device}:{ev.port.peer_port}"),
                    dont_care=ev.dont_care,
                )
            )  # fmt: skip

    def _label_fan_in(self, events: list[Event]) -> None:
        """Injected fan-in takes its kind from what its receiver's port did, by the kinds' definitions
        (`rocescope.sim.truth`): the scenario says who sends, the physics what that became. Senders that DCQCN
        holds below the line rate between bursts make microbursts, not an incast; bursts that merge at a busy
        port make an incast; a port near the definitions' edges is don't care; a queue that never went above the
        ECN threshold showed nothing (unobservable)."""
        after = self.scenario.poll_interval_s
        for i, t in enumerate(self.truth):
            if t.kind not in ("incast", "microburst") or not t.observable or t.dont_care:
                continue
            there = [
                ev
                for ev in events
                if f"{ev.port.device}:{ev.port.name}" in t.anchor
                and ev.start_s < t.end_s + after
                and ev.end_s > t.start_s
            ]
            kinds = {ev.kind for ev in there if not ev.dont_care}
            kind = "incast" if "incast" in kinds else "microburst" if kinds else None
            if kind is None and there:
                self.truth[i] = replace(t, dont_care=True, description=f"{t.description}; its port stayed at the "
                                        "definitions' edges (don't care)")  # fmt: skip
            elif kind is None:
                self.truth[i] = replace(t, observable=False, description=f"{t.description}; its queue never went "
                                        "above the ECN threshold (unobservable)")  # fmt: skip
            elif kind != t.kind:
                became = next(ev.what for ev in there if ev.kind == kind and not ev.dont_care)
                self.truth[i] = replace(t, kind=kind, description=f"{t.description}; by the definitions: {became}")

    def _label_imbalance(self, events: list[Event]) -> None:
        """Injected ECMP imbalance is an incident only where its hot member met the definition
        (`rocescope.sim.truth.IMBALANCE`), as injected fan-in is: elephants that DCQCN holds below saturation on
        the member they share, or whose siblings were busy too, stayed at the definition's edge (don't care) or
        never made the member hot at all (unobservable)."""
        for i, t in enumerate(self.truth):
            if t.kind != "ecmp_imbalance" or not t.observable or t.dont_care:
                continue
            there = [
                ev
                for ev in events
                if f"{ev.port.device}:{ev.port.name}" in t.anchor and ev.start_s < t.end_s and ev.end_s > t.start_s
            ]
            if any(not ev.dont_care for ev in there):
                continue
            if there:
                self.truth[i] = replace(t, dont_care=True, description=f"{t.description}; {there[0].what} (don't "
                                        "care)")  # fmt: skip
            else:
                self.truth[i] = replace(t, observable=False, description=f"{t.description}; its member never ran "
                                        "hot while its siblings had room (unobservable)")  # fmt: skip

    def _label_contention(self, lossless: int) -> None:
        """Traffic that is no incident (a `traffic:` entry: storage reads, a checkpoint restore) slows the training
        jobs whose flows share a link with it while it runs: their collectives wait for the bandwidth it takes, yet
        no kind the detectors name describes it. A slowdown of such a job then is neither right nor wrong: a
        don't-care `unexplained_slowdown` (no host: the whole job), as `sim.scoring.shared_slowdown` reads it."""
        training = {j.job_id for j in self.training_jobs}
        paths = [(flow.job_id, {p.id for p in self.engine.flow_path(f)}) for f, flow in enumerate(self.engine.flows)]
        for job_id in self.traffic_jobs:
            lo, hi = self.windows.get(job_id, (0.0, self.duration_s))
            theirs = set().union(*(ports for j, ports in paths if j == job_id))
            slowed = tuple(dict.fromkeys(j for j, ports in paths if j in training and ports & theirs))
            if slowed and hi > lo:
                what = f"contention: {job_id}'s traffic shares links with {', '.join(slowed)} (don't care)"
                self.emergent.append(GroundTruth(SLOWDOWN, lo, hi, slowed, (), (), lossless, what, dont_care=True))

    def _jobs_crossing(self, ev: Event) -> tuple[str, ...]:
        """Placed jobs with a flow crossing the event's port while it lasted; for fan-in (incast, microburst) also
        the jobs with a flow leaving by one of its senders' NICs, as an injected fan-in names them
        (`Arming._fan_in`): the receiver's leaf pauses those NICs on the lossless priority, every job on them."""
        placed = {j.job_id for j in self.jobs}

        def during(job_id: str) -> bool:
            lo, hi = self.windows.get(job_id, (0.0, self.duration_s))
            return lo < ev.end_s and hi > ev.start_s

        live = [
            (flow, self.engine.flow_path(f))
            for f, flow in enumerate(self.engine.flows)
            if flow.job_id in placed and during(flow.job_id)
        ]
        through = [(flow, path) for flow, path in live if any(p.id == ev.port.id for p in path)]
        jobs = dict.fromkeys(flow.job_id for flow, _ in through)
        if ev.kind in ("incast", "microburst"):
            senders = {path[0].id for _, path in through if path}
            jobs |= dict.fromkeys(flow.job_id for flow, path in live if path and path[0].id in senders)
        return tuple(jobs)

    def incidents_arrow(self) -> pa.Table:
        """The `incidents` stream for this run's ground truth, conformed."""
        rows = [*self.truth, *self.emergent]
        at = [self.start + dt.timedelta(seconds=g.start_s) for g in rows]
        to = [self.start + dt.timedelta(seconds=g.end_s) for g in rows]
        table = pa.table(
            {
                "scenario": [self.scenario.name] * len(rows),
                "kind": [g.kind for g in rows],
                "start": pa.array(at, pa.timestamp("ns", tz="UTC")),
                "end": pa.array(to, pa.timestamp("ns", tz="UTC")),
                "job_ids": pa.array([list(g.job_ids) for g in rows], pa.list_(pa.string())),
                "devices": pa.array([list(g.devices) for g in rows], pa.list_(pa.string())),
                "ports": pa.array([list(g.ports) for g in rows], pa.list_(pa.string())),
                "priority": pa.array([g.priority for g in rows], pa.int8()),
                "description": [g.description for g in rows],
            }
        )
        return pa.Table.from_batches([conform("incidents", table)])

    def ground_truth(self) -> dict[str, Any]:
        """The ground-truth file's content; each incident's victims and GPU time lost (`rocescope.sim.impact`):
        as measured by `measure_impacts`, else as far as the engine ran against the jobs' clean times (none
        before the run)."""
        s = self.scenario
        impacts = self.impacts if self.impacts is not None else incident_impacts(self, counterfactual_runs=False)
        return {
            "scenario": s.name,
            "seed": s.seed,
            "start": self.start.isoformat(),
            "end": (self.start + dt.timedelta(seconds=self.duration_s)).isoformat(),
            "duration_s": self.duration_s,
            "incidents": [g.as_dict(self.start) | i.as_dict() for g, i in zip(self.truth, impacts, strict=True)]
            + [g.as_dict(self.start) | Impact((), {}).as_dict() for g in self.emergent],
        }


def _filled(t: GroundTruth) -> set[str]:
    """The ports whose queues an injected incident fills, so congestion there is its doing: a fan-in's receiver
    port only (its anchor; the senders' leaf ports it names carry its traffic in, and the queue there is the one
    towards the sender, which other traffic fills); every port any other incident names (a storm's, a loop's)."""
    if t.kind in ("incast", "microburst"):
        return set(t.anchor)
    return {*t.ports, *t.anchor}


def place(topology: Topology, models: Sequence[JobModel], seed: int) -> list[Job]:
    """Jobs on distinct hosts in file order: `contiguous` takes the next free hosts in name order,
    `scattered` free hosts in a seeded random order."""
    free = [h.name for h in topology.hosts]
    rng = np.random.default_rng(seed)
    jobs: list[Job] = []
    for m in models:
        spec = JobSpec(
            m.name,
            m.hosts,
            m.namespace,
            rails=m.rails,
            message_bytes=message_bytes(m.message_mib),
            compute_ms=m.compute_ms,
            qps_per_connection=m.qps_per_connection,
            cross_rail_flows=m.cross_rail_flows,
            cross_rail_bytes=message_bytes(m.cross_rail_mib),
            collective=m.collective,
        )
        if m.placement == "scattered":
            free = [free[i] for i in rng.permutation(len(free))]
        hosts, free = free[: m.hosts], free[m.hosts :]
        if m.placement == "contiguous":
            free.sort()
        rails = spec.rails if spec.rails is not None else tuple(range(topology.spec.rails))
        bad = [r for r in rails if not 0 <= r < topology.spec.rails]
        if bad:
            raise SimError(f"{spec.job_id}: rails {bad} do not exist on this fabric")
        pods = tuple(Pod(f"{spec.name}-worker-{k}", k, h) for k, h in enumerate(hosts))
        jobs.append(Job(spec, pods, tuple(rails)))
    return jobs


def build_world(
    scenario: Scenario,
    duration_s: float | None = None,
    start: dt.datetime | None = None,
    switched_off: Collection[int] = (),
) -> World:
    """The fabric of `scenario`, incidents armed, ready to `engine.run`. Incidents and traffic that start
    after `duration_s` (default: the scenario's) are left out; windows are clipped to it. Incidents whose index
    is in `switched_off` are built (their traffic keeps its QPs, so nothing else moves) but never happen and
    yield no truth: the counterfactual fabric `rocescope.sim.impact` measures an incident's toll against."""
    duration = float(duration_s if duration_s is not None else scenario.duration)
    if duration <= 0:
        raise ScenarioError("duration must be positive")
    run_start = start or dt.datetime.now(dt.UTC) - dt.timedelta(seconds=duration)
    topo = Topology(scenario.fabric)
    seed = scenario.seed
    jobs = place(topo, scenario.jobs, seed)
    qps = QpAllocator(seed)
    flows = [f for j in jobs for f in collective_flows(j, topo, seed, qps)]
    lossless = scenario.engine_params().lossless_priority
    hashing = fabric_hashing(topo, scenario.hashing, scenario.hash_function, seed)
    extra = ExtraTraffic(topo, Ecmp(topo, hashing), lossless, training=jobs)
    active = [(i, inc) for i, inc in enumerate(scenario.incidents) if inc.start < duration]
    for i, inc in active:
        _named(scenario, f"incidents.{i} ({inc.kind})", extra.add_incident, i, inc, qps)
    background = [(k, bg) for k, bg in enumerate(scenario.traffic) if bg.start < duration]
    for k, bg in background:
        _named(scenario, f"traffic.{k} ({bg.name})", extra.add_background, bg, qps)
    all_jobs = [*jobs, *extra.jobs]
    engine = Engine(
        topo,
        all_jobs,
        [*flows, *extra.flows],
        Ecmp(topo, hashing),
        params=scenario.engine_params(),
        seed=seed,
        start=run_start,
        flow_priorities=[lossless] * len(flows) + extra.priorities,
        stagger=scenario.stagger,
    )
    placed = [j for j in all_jobs if j.job_id not in extra.unplaced]
    unplaced = [j for j in all_jobs if j.job_id in extra.unplaced]
    world = World(scenario, duration, run_start, topo, placed, [*flows, *extra.flows], engine, unplaced=unplaced)
    world.ledger = Ledger(topo)
    # its first read at the start, so the first poll interval counts too: every job starts at once, at line rate,
    # and the queues that start makes are there for the watermarks and ECN counters to read
    world.ledger.observe(engine)
    for j in jobs:
        world.windows[j.job_id] = (0.0, duration)
    arming = Arming(scenario, duration, topo, extra)
    for i, inc in active:
        if i in switched_off:
            if i in extra.of_incident:
                engine.stop_job(extra.of_incident[i][0].job_id)
            continue
        world.truth.append(_named(scenario, f"incidents.{i} ({inc.kind})", arming.arm, i, inc, engine))
        if i in extra.of_incident:
            world.windows[extra.of_incident[i][0].job_id] = (inc.start, arming.end_of(inc))
    for (k, bg), (_, job, _) in zip(background, extra.background, strict=True):
        _named(scenario, f"traffic.{k} ({bg.name})", arming.window, engine, job.job_id, bg.start, arming.end_of(bg))
        world.windows[job.job_id] = (bg.start, arming.end_of(bg))
        world.traffic_jobs.append(job.job_id)
    return world


def _named(scenario: Scenario, where: str, step: Callable[..., T], *args: Any) -> T:
    """Run one building step; a problem is reported with the scenario and the entry it comes from."""
    try:
        return step(*args)
    except (SimError, KeyError) as exc:
        msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        raise ScenarioError(f"scenario {scenario.name}: {where}: {msg}") from None
