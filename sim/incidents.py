"""From a scenario to a running fabric: topology, jobs, flows, engine, incidents armed, ground truth.

Each incident kind becomes engine knob calls scheduled at its window, plus extra traffic where the
incident is traffic (flows exist from the start; their job is held stopped outside the window):

* incast: a `background` job whose senders each stream to one receiver NIC, back to back.
* microburst: the same shape in short bursts (`burst`, tens of ms) every `period`.
* pfc_storm: `pause_storm` on a NIC or switch port.
* pfc_deadlock: four flows between two leaves of a rail forced round leaf-spine-leaf-spine (a route
  loop after a bad reroute); the buffer dependency closes and never clears until `end` (the route
  fixed) or the end of the run.
* cnp_loss: `cnp_loss` on a sender NIC.
* polarization: every switch hashes with the same function and seed for the window.
* link_flap: `link_down` for `down` every `period`, optionally `link_errors` (degraded optics).
* pfc_misconfig: `disable_pfc` on a switch ingress port.

Every incident yields one ground-truth row (`incidents` table): kind, window, the jobs whose flows
cross the incident's ports, devices (root first), ports as `device:port` (port names as the
`counters` table has them), priority and a description.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from rocescope.errors import SimError
from rocescope.pipeline.batch import conform
from rocescope.sim.ecmp import Ecmp, fabric_hashing
from rocescope.sim.engine import Engine
from rocescope.sim.jobs import Flow, Job, JobSpec, Pod, collective_flows
from rocescope.sim.roce import QpAllocator, udp_sport
from rocescope.sim.scenario import (
    CnpLoss,
    Incast,
    IncidentModel,
    JobModel,
    LinkFlap,
    Microburst,
    PfcDeadlock,
    PfcMisconfig,
    PfcStorm,
    Polarization,
    Scenario,
    ScenarioError,
    message_bytes,
)
from rocescope.sim.topology import Nic, Port, Topology

BACKGROUND_NS = "background"
#: Bytes per flow of traffic that is cut by its window rather than finishing (never runs out).
ENDLESS = 1 << 50


@dataclass(frozen=True)
class GroundTruth:
    """One injected incident, times in seconds of fabric time since the run started."""

    kind: str
    start_s: float
    end_s: float
    job_ids: tuple[str, ...]
    devices: tuple[str, ...]
    ports: tuple[str, ...]
    priority: int
    description: str

    def as_dict(self, run_start: dt.datetime) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "start": (run_start + dt.timedelta(seconds=self.start_s)).isoformat(),
            "end": (run_start + dt.timedelta(seconds=self.end_s)).isoformat(),
            "start_s": self.start_s,
            "end_s": self.end_s,
            "job_ids": list(self.job_ids),
            "devices": list(self.devices),
            "ports": list(self.ports),
            "priority": self.priority,
            "description": self.description,
        }


@dataclass
class World:
    """Everything one scenario run is made of."""

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

    @property
    def training_jobs(self) -> list[Job]:
        return [j for j in self.jobs if j.namespace != BACKGROUND_NS]

    def incidents_arrow(self) -> pa.Table:
        """The `incidents` stream for this run's ground truth, conformed."""
        at = [self.start + dt.timedelta(seconds=g.start_s) for g in self.truth]
        to = [self.start + dt.timedelta(seconds=g.end_s) for g in self.truth]
        table = pa.table(
            {
                "scenario": [self.scenario.name] * len(self.truth),
                "kind": [g.kind for g in self.truth],
                "start": pa.array(at, pa.timestamp("ns", tz="UTC")),
                "end": pa.array(to, pa.timestamp("ns", tz="UTC")),
                "job_ids": pa.array([list(g.job_ids) for g in self.truth], pa.list_(pa.string())),
                "devices": pa.array([list(g.devices) for g in self.truth], pa.list_(pa.string())),
                "ports": pa.array([list(g.ports) for g in self.truth], pa.list_(pa.string())),
                "priority": pa.array([g.priority for g in self.truth], pa.int8()),
                "description": [g.description for g in self.truth],
            }
        )
        return pa.Table.from_batches([conform("incidents", table)])

    def ground_truth(self) -> dict[str, Any]:
        """The ground-truth file's content."""
        s = self.scenario
        return {
            "scenario": s.name,
            "seed": s.seed,
            "start": self.start.isoformat(),
            "end": (self.start + dt.timedelta(seconds=self.duration_s)).isoformat(),
            "duration_s": self.duration_s,
            "incidents": [g.as_dict(self.start) for g in self.truth],
        }


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


def _flow(job: Job, qps: QpAllocator, src: Nic, dst: Nic, nbytes: int, src_rank: int, dst_rank: int) -> Flow:
    sq, dq = qps.allocate(src.host, src.rdma_dev), qps.allocate(dst.host, dst.rdma_dev)
    return Flow(job.job_id, "ring", src, dst, src_rank, dst_rank, sq, dq, udp_sport(sq, dq), nbytes)


def _background_job(name: str, hosts: Sequence[str], rail: int, compute_ms: float) -> Job:
    spec = JobSpec(name, len(hosts), BACKGROUND_NS, rails=(rail,), message_bytes=0, compute_ms=compute_ms)
    return Job(spec, tuple(Pod(f"{name}-worker-{k}", k, h) for k, h in enumerate(hosts)), (rail,))


def _ref(port: Port) -> str:
    return f"{port.device}:{port.name}"


class _Builder:
    """Two passes over the incidents: extra traffic before the engine exists, knobs and truth after."""

    def __init__(self, scenario: Scenario, duration_s: float, topology: Topology) -> None:
        self.s = scenario
        self.duration = duration_s
        self.topo = topology
        self.lossless = scenario.engine_params().lossless_priority
        self.extra_jobs: list[Job] = []
        self.extra_flows: list[Flow] = []
        #: incident index -> (job id, its flows) of the traffic it adds
        self.traffic: dict[int, tuple[Job, list[Flow]]] = {}

    def end_of(self, inc: IncidentModel) -> float:
        return min(inc.end if inc.end is not None else self.duration, self.duration)

    # --- pass 1: traffic

    def add_traffic(self, i: int, inc: IncidentModel, qps: QpAllocator) -> None:
        if isinstance(inc, Incast | Microburst):
            self._fan_in(i, inc, qps)
        elif isinstance(inc, PfcDeadlock):
            self._loop_traffic(i, inc, qps)

    def _fan_in(self, i: int, inc: Incast | Microburst, qps: QpAllocator) -> None:
        topo = self.topo
        dst = topo.nic(inc.receiver, inc.rail)
        if isinstance(inc.senders, int):
            names = [h.name for h in topo.hosts]
            k = names.index(inc.receiver)
            if not 1 <= inc.senders < len(names):
                raise SimError(f"senders must be in 1..{len(names) - 1}")
            senders = [names[(k + 1 + j) % len(names)] for j in range(inc.senders)]
        else:
            senders = list(inc.senders)
            if inc.receiver in senders or not senders:
                raise SimError("senders must be other hosts than the receiver")
        srcs = [topo.nic(h, inc.rail) for h in senders]
        name = inc.job or f"{inc.kind.replace('_', '-')}-{i + 1}"
        job = _background_job(name, [inc.receiver, *senders], inc.rail, 0.0 if isinstance(inc, Incast) else 1e9)
        nbytes = message_bytes(inc.mib_per_sender) if isinstance(inc, Incast) else ENDLESS
        flows = [_flow(job, qps, src, dst, nbytes, k + 1, 0) for k, src in enumerate(srcs)]
        self._add(i, job, flows)

    def _loop_ports(self, inc: PfcDeadlock) -> tuple[list[Port], list[Nic], list[Nic]]:
        topo = self.topo
        leaves = inc.leaves or tuple(d.name for d in topo.leaves_of_rail(inc.rail)[:2])
        spines = inc.spines or tuple(d.name for d in topo.spines[:2])
        if len(leaves) < 2 or len(spines) < 2:
            raise SimError("a PFC deadlock loop needs two leaves on the rail and two spines")
        l1, l2 = leaves
        s1, s2 = spines

        def up(leaf: str, spine: str) -> Port:
            return next(p for p in topo.uplinks(leaf) if p.peer_device == spine)

        ring = [up(l1, s1), topo.downlinks(s1, l2)[0], up(l2, s2), topo.downlinks(s2, l1)[0]]
        on1 = [n for n in topo.nics if n.leaf == l1 and n.rail == inc.rail][:2]
        on2 = [n for n in topo.nics if n.leaf == l2 and n.rail == inc.rail][:2]
        if len(on1) < 2 or len(on2) < 2:
            raise SimError("a PFC deadlock loop needs two hosts on each of its leaves")
        return ring, on1, on2

    def _loop_traffic(self, i: int, inc: PfcDeadlock, qps: QpAllocator) -> None:
        _, on1, on2 = self._loop_ports(inc)
        name = inc.job or f"{inc.kind.replace('_', '-')}-{i + 1}"
        job = _background_job(name, [n.host for n in (*on1, *on2)], inc.rail, 0.0)
        pairs = [(on1[0], on1[1]), (on1[1], on1[0]), (on2[0], on2[1]), (on2[1], on2[0])]
        flows = [_flow(job, qps, a, b, ENDLESS, k, k ^ 1) for k, (a, b) in enumerate(pairs)]
        self._add(i, job, flows)

    def _add(self, i: int, job: Job, flows: list[Flow]) -> None:
        if any(j.job_id == job.job_id for j in self.extra_jobs):
            raise SimError(f"two incidents add traffic as job {job.job_id}; give them distinct `job` names")
        self.extra_jobs.append(job)
        self.extra_flows += flows
        self.traffic[i] = (job, flows)

    # --- pass 2: knobs and ground truth

    def jobs_through(self, eng: Engine, ports: Sequence[Port], extra: Sequence[str] = ()) -> tuple[str, ...]:
        """Jobs with a flow leaving by any of `ports` (in the paths the flows have at the start)."""
        ids = {p.id for p in ports}
        hit = set(extra)
        for f, flow in enumerate(eng.flows):
            if flow.job_id not in hit and any(p.id in ids for p in eng.flow_path(f)):
                hit.add(flow.job_id)
        order = [j.job_id for j in eng.jobs]
        return tuple(sorted(hit, key=order.index))

    def arm(self, i: int, inc: IncidentModel, eng: Engine) -> GroundTruth:
        start, end = inc.start, self.end_of(inc)
        topo = self.topo
        lossless = self.lossless
        if isinstance(inc, Incast | Microburst):
            job, flows = self.traffic[i]
            eng.stop_job(job.job_id)
            if isinstance(inc, Incast):
                eng.resume_job(job.job_id, at=start)
                eng.stop_job(job.job_id, at=end)
                what = f"incast: {len(flows)} senders stream to {inc.receiver} rail {inc.rail}"
            else:
                bursts = np.arange(start, end, inc.period)
                for t in bursts:
                    eng.resume_job(job.job_id, at=float(t))
                    eng.stop_job(job.job_id, at=float(min(t + inc.burst, end)))
                what = (
                    f"microburst: {len(bursts)} bursts of {inc.burst * 1000:.0f} ms every {inc.period:g} s, "
                    f"{len(flows)} senders to {inc.receiver} rail {inc.rail}"
                )
            dst = flows[0].dst
            leaf_port = topo.attachment(dst.host, dst.rail)
            sender_ports = [topo.port(f.src.host, f.src.netdev) for f in flows]
            devices = [dst.host, dst.leaf, *dict.fromkeys(f.src.host for f in flows)]
            ports = [_ref(leaf_port), f"{dst.host}:{dst.netdev}", *(_ref(topo.peer(p)) for p in sender_ports)]
            jobs = self.jobs_through(eng, [leaf_port, *sender_ports], [job.job_id])
            return GroundTruth(inc.kind, start, end, jobs, tuple(devices), tuple(ports), lossless, what)
        if isinstance(inc, PfcStorm):
            port = topo.ports[eng.port_id((inc.device, inc.port))]
            peer = topo.peer(port)
            eng.pause_storm(inc.device, port.name, start, end, inc.priority, inc.fraction)
            prio = lossless if inc.priority is None else inc.priority
            what = f"pfc_storm: {_ref(port)} asserts pause on priority {prio} {inc.fraction:.0%} of the time"
            jobs = self.jobs_through(eng, [peer])
            return GroundTruth(
                inc.kind, start, end, jobs, (port.device, peer.device), (_ref(port), _ref(peer)), prio, what
            )
        if isinstance(inc, PfcDeadlock):
            job, flows = self.traffic[i]
            ring, _, _ = self._loop_ports(inc)
            eng.stop_job(job.job_id)
            eng.resume_job(job.job_id, at=start)
            jobs = self.jobs_through(eng, ring, [job.job_id])
            for k, fl in enumerate(flows):
                hops = ring if k < 2 else ring[2:] + ring[:2]
                first, last = topo.port(fl.src.host, fl.src.netdev), topo.attachment(fl.dst.host, fl.dst.rail)
                eng.reroute(fl, [first, *hops, last], at=start)
                if inc.end is not None and inc.end < self.duration:
                    eng.reroute(fl, None, at=inc.end)
            if inc.end is not None and inc.end < self.duration:
                eng.stop_job(job.job_id, at=inc.end)
            loop = tuple(dict.fromkeys(p.device for p in ring))
            what = "pfc_deadlock: a route loop " + " -> ".join(_ref(p) for p in ring) + " closes a buffer dependency"
            return GroundTruth(inc.kind, start, end, jobs, loop, tuple(_ref(p) for p in ring), lossless, what)
        if isinstance(inc, CnpLoss):
            nic = topo.nic(inc.host, inc.rail)
            port = topo.port(nic.host, nic.netdev)
            eng.cnp_loss(nic.host, nic.netdev, inc.fraction, start, end, inc.ignored)
            what = f"cnp_loss: {nic.host} {nic.rdma_dev} handles only {1 - inc.fraction:.0%} of its CNPs"
            refs = (f"{nic.host}:{nic.rdma_dev}/1", _ref(port))
            return GroundTruth(inc.kind, start, end, self.jobs_through(eng, [port]), (nic.host,), refs, lossless, what)
        if isinstance(inc, Polarization):
            return self._polarize(inc, eng, start, end)
        if isinstance(inc, LinkFlap):
            port = topo.ports[eng.port_id((inc.device, inc.port))]
            peer = topo.peer(port)
            flaps = np.arange(start, end, inc.period)
            for t in flaps:
                eng.link_down(port.device, port.name, start=float(t), end=float(t + inc.down))
            what = f"link_flap: {_ref(port)} down {inc.down:g} s every {inc.period:g} s ({len(flaps)} flaps)"
            if inc.error_rate > 0:
                eng.link_errors(port.device, port.name, inc.error_rate, start, end)
                what += f", {inc.error_rate:.2%} of frames failing FCS"
            jobs = self.jobs_through(eng, [port, peer])
            return GroundTruth(
                inc.kind, start, end, jobs, (port.device, peer.device), (_ref(port), _ref(peer)), -1, what
            )
        if isinstance(inc, PfcMisconfig):
            port = topo.ports[eng.port_id((inc.device, inc.port))]
            peer = topo.peer(port)
            eng.disable_pfc(port.device, port.name, inc.priority, start, end)
            prio = lossless if inc.priority is None else inc.priority
            what = f"pfc_misconfig: PFC off for priority {prio} on ingress {_ref(port)}"
            jobs = self.jobs_through(eng, [peer])
            return GroundTruth(inc.kind, start, end, jobs, (port.device, peer.device), (_ref(port),), prio, what)
        raise SimError(f"unknown incident kind {inc.kind}")  # pragma: no cover

    def _polarize(self, inc: Polarization, eng: Engine, start: float, end: float) -> GroundTruth:
        topo = self.topo
        same = fabric_hashing(topo, "same", inc.function, self.s.seed)
        base = eng.ecmp.hashing

        def switch_to(hashing: Any) -> None:
            eng.set_ecmp(Ecmp(topo, hashing))

        if start <= 0:
            switch_to(same)
        else:
            eng.at(start, lambda: switch_to(same))
        if end < self.duration:
            eng.at(end, lambda: switch_to(base))
        # where the polarized hashing concentrates the flows: spine downlinks above their group's mean
        ecmp = Ecmp(topo, same)
        load: Counter[int] = Counter()
        for flow in eng.flows:
            try:
                load.update(p.id for p in ecmp.route_ports(flow.five_tuple))
            except SimError:
                continue
        hot: list[Port] = []
        for spine in topo.spines:
            for leaf in topo.leaves:
                group = topo.downlinks(spine.name, leaf.name)
                counts: list[int] = [load[p.id] for p in group]
                total = sum(counts)
                if len(group) > 1 and total:
                    mean = total / len(counts)
                    hot += [p for p, c in zip(group, counts, strict=True) if c > mean]
        devices = tuple(dict.fromkeys([*(p.device for p in hot), *(p.peer_device for p in hot)]))
        jobs = self.jobs_through(eng, [p for s in topo.spines for p in topo.ports_of(s.name)])
        what = f"polarization: every switch hashes with {inc.function} and the same seed; {len(hot)} hot spine links"
        return GroundTruth(inc.kind, start, end, jobs, devices, tuple(_ref(p) for p in hot), self.lossless, what)


def build_world(scenario: Scenario, duration_s: float | None = None, start: dt.datetime | None = None) -> World:
    """The fabric of `scenario`, incidents armed, ready to `engine.run`. Incidents that start after
    `duration_s` (default: the scenario's) are left out; windows are clipped to it."""
    duration = float(duration_s if duration_s is not None else scenario.duration)
    if duration <= 0:
        raise ScenarioError("duration must be positive")
    run_start = start or dt.datetime.now(dt.UTC) - dt.timedelta(seconds=duration)
    topo = Topology(scenario.fabric)
    seed = scenario.seed
    jobs = place(topo, scenario.jobs, seed)
    qps = QpAllocator(seed)
    flows = [f for j in jobs for f in collective_flows(j, topo, seed, qps)]
    b = _Builder(scenario, duration, topo)
    active = [(i, inc) for i, inc in enumerate(scenario.incidents) if inc.start < duration]
    for i, inc in active:
        try:
            b.add_traffic(i, inc, qps)
        except (SimError, KeyError) as exc:
            raise ScenarioError(f"scenario {scenario.name}: incidents.{i} ({inc.kind}): {_msg(exc)}") from None
    hashing = fabric_hashing(topo, scenario.hashing, scenario.hash_function, seed)
    engine = Engine(
        topo,
        [*jobs, *b.extra_jobs],
        [*flows, *b.extra_flows],
        Ecmp(topo, hashing),
        params=scenario.engine_params(),
        seed=seed,
        start=run_start,
        stagger=scenario.stagger,
    )
    world = World(scenario, duration, run_start, topo, [*jobs, *b.extra_jobs], [*flows, *b.extra_flows], engine)
    for j in jobs:
        world.windows[j.job_id] = (0.0, duration)
    for i, inc in active:
        try:
            world.truth.append(b.arm(i, inc, engine))
        except (SimError, KeyError) as exc:
            raise ScenarioError(f"scenario {scenario.name}: incidents.{i} ({inc.kind}): {_msg(exc)}") from None
        if i in b.traffic:
            world.windows[b.traffic[i][0].job_id] = (inc.start, b.end_of(inc))
    return world


def _msg(exc: Exception) -> str:
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
