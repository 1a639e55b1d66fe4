"""Arming a scenario's incidents on a built engine, and the ground truth each one yields.

Each incident kind becomes engine knob calls scheduled at its window (its traffic, built by
`rocescope.sim.traffic`, is held stopped outside the window):

* incast: the fan-in streams back to back; microburst: the same in short bursts every `period` (the kind
  of the truth is what the receiver's port made of it, labelled after the run: `World.mark_emergent`).
* pfc_storm: `pause_storm` on a NIC or switch port (mitigated when the engine runs the PFC watchdog).
* pfc_deadlock: the loop's flows forced round leaf-spine-leaf-spine until `end`.
* cnp_loss: `cnp_loss` on a sender NIC (all or part of its CNPs never handled).
* cnp_lossy_queue: `cnp_queue` on switches that put CNPs in a lossy queue (truth kind `cnp_loss`).
* polarization: every switch hashes with the same function and seed for the window.
* link_flap: `link_down` for `down` every `period`, optionally `link_errors`.
* degraded_optics: `link_errors` on a port for the window, the link staying up.
* ecmp_imbalance: the elephants hashed onto one uplink stream for the window.
* pfc_misconfig: `disable_pfc` on a switch ingress port.

* straggler: `slow_compute` on one rank of a training job (truth kind `unexplained_slowdown`).

Every incident yields one ground-truth row (`incidents` table): kind, window, its anchor (what a finding
must name to match it, `rocescope.sim.truth`), the jobs whose flows
cross the incident's ports (placed jobs only: traffic no inventory knows cannot be named), devices
(root first), ports as `device:port` (port names as the `counters` table has them), priority and a
description; and `culprit_jobs`, the placed jobs whose traffic caused it: a fan-in's job (its `owner` when it
is a training job's own traffic; none when it belongs to no placed job), the elephants' job, the jobs
placed on a storming NIC, the jobs placed on or sending from a CNP-ignoring one (their traffic is what it
leaves unthrottled); none for faults and configuration (a route loop's deadlock: the
loop, not the traffic caught in it, is the cause; link flaps, optics, PFC or CNP queue misconfiguration,
polarized hashing) and stragglers. The jobs each incident slowed and the GPU time they lost are measured
after the run (`rocescope.sim.impact`); incidents nothing collected could show are marked after it too
(`World.mark_unobservable`).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rocescope.errors import SimError
from rocescope.sim.ecmp import Ecmp, fabric_hashing
from rocescope.sim.engine import Engine
from rocescope.sim.jobs import Flow, fabric_bytes_per_rank
from rocescope.sim.scenario import (
    TRUTH_KIND,
    Background,
    CnpLoss,
    CnpLossyQueue,
    DegradedOptics,
    EcmpImbalance,
    Incast,
    IncidentModel,
    LinkFlap,
    Microburst,
    PfcDeadlock,
    PfcMisconfig,
    PfcStorm,
    Polarization,
    Scenario,
    Straggler,
)
from rocescope.sim.topology import Port, Topology
from rocescope.sim.traffic import ExtraTraffic, elephant_ends, loop_ports, ref


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
    #: placed jobs whose traffic caused it
    culprit_jobs: tuple[str, ...] = ()
    #: a straggler: (job, rank) of the slow GPU
    slow_rank: tuple[str, int] | None = None
    #: False when nothing a collector reads could show it (`World.mark_unobservable`): scored neither as found
    #: nor as missed
    observable: bool = True
    #: what a finding must name to match it (`rocescope.sim.truth`): `device:port` refs, or a straggler's host
    anchor: tuple[str, ...] = ()
    #: near a definition's edge (`rocescope.sim.truth`): neither found nor missed, findings on it neither true nor
    #: false
    dont_care: bool = False

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
            "culprit_jobs": list(self.culprit_jobs),
            "observable": self.observable,
            "anchor": list(self.anchor or self.ports),
            "dont_care": self.dont_care,
        }


class Arming:
    """Pass 2 of building a scenario: knobs on the engine and the ground truth, per incident."""

    def __init__(self, scenario: Scenario, duration_s: float, topology: Topology, extra: ExtraTraffic) -> None:
        self.s = scenario
        self.duration = duration_s
        self.topo = topology
        self.extra = extra
        self.lossless = scenario.engine_params().lossless_priority

    def end_of(self, inc: IncidentModel | Background) -> float:
        return min(inc.end if inc.end is not None else self.duration, self.duration)

    def jobs_through(self, eng: Engine, ports: Iterable[Port], extra: Sequence[str] = ()) -> tuple[str, ...]:
        """Placed jobs with a flow leaving by any of `ports` (in the paths the flows have at the start),
        plus `extra`; jobs no inventory knows are left out."""
        ids = {p.id for p in ports}
        hit = set(extra)
        for f, flow in enumerate(eng.flows):
            if flow.job_id not in hit and any(p.id in ids for p in eng.flow_path(f)):
                hit.add(flow.job_id)
        order = [j.job_id for j in eng.jobs]
        return tuple(sorted(hit - self.extra.unplaced, key=order.index))

    def placed_only(self, job_ids: Iterable[str]) -> tuple[str, ...]:
        """The jobs an inventory knows (traffic of no placed job can be blamed on no job)."""
        return tuple(j for j in job_ids if j not in self.extra.unplaced)

    def jobs_on(self, port: Port) -> tuple[str, ...]:
        """The training jobs whose ranks use the NIC `port` (none for a switch port)."""
        if port.kind != "nic":
            return ()
        nic = next(n for n in self.topo.nics_of(port.device) if n.netdev == port.name)
        return tuple(j.job_id for j in self.extra.training if nic.host in j.hosts and nic.rail in j.rails)

    def window(self, eng: Engine, job_id: str, start: float, end: float) -> None:
        """The job's traffic flows from `start` to `end` only."""
        eng.stop_job(job_id)
        eng.resume_job(job_id, at=start)
        if end < self.duration:
            eng.stop_job(job_id, at=end)

    def arm(self, i: int, inc: IncidentModel, eng: Engine) -> GroundTruth:
        if isinstance(inc, Incast | Microburst):
            return self._fan_in(i, inc, eng)
        if isinstance(inc, PfcStorm):
            return self._storm(inc, eng)
        if isinstance(inc, PfcDeadlock):
            return self._deadlock(i, inc, eng)
        if isinstance(inc, CnpLoss):
            return self._cnp_loss(inc, eng)
        if isinstance(inc, CnpLossyQueue):
            return self._cnp_lossy_queue(inc, eng)
        if isinstance(inc, Polarization):
            return self._polarize(inc, eng)
        if isinstance(inc, LinkFlap | DegradedOptics):
            return self._link(inc, eng)
        if isinstance(inc, EcmpImbalance):
            return self._imbalance(i, inc, eng)
        if isinstance(inc, PfcMisconfig):
            return self._misconfig(inc, eng)
        if isinstance(inc, Straggler):
            return self._straggler(inc, eng)
        raise SimError(f"unknown incident kind {inc.kind}")  # pragma: no cover

    def _fan_in(self, i: int, inc: Incast | Microburst, eng: Engine) -> GroundTruth:
        start, end, topo = inc.start, self.end_of(inc), self.topo
        job, flows = self.extra.of_incident[i]
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
        if not inc.placed:
            what += " (traffic of no placed job)"
        dst = flows[0].dst
        leaf_port = topo.attachment(dst.host, dst.rail)
        sender_ports = [topo.port(f.src.host, f.src.netdev) for f in flows]
        devices = [dst.host, dst.leaf, *dict.fromkeys(f.src.host for f in flows)]
        ports = [ref(leaf_port), f"{dst.host}:{dst.netdev}", *(ref(topo.peer(p)) for p in sender_ports)]
        jobs = self.jobs_through(eng, [leaf_port, *sender_ports], [job.job_id])
        owner = self.extra.owners.get(i)
        if owner is not None:
            what += f" ({owner}'s own traffic)"
        culprits = (owner,) if owner is not None else self.placed_only([job.job_id])
        anchor = (ref(leaf_port), f"{dst.host}:{dst.netdev}")  # the receiver's port, either end of its cable
        return GroundTruth(
            inc.kind, start, end, jobs, tuple(devices), tuple(ports), self.lossless, what, culprits, anchor=anchor
        )

    def _storm(self, inc: PfcStorm, eng: Engine) -> GroundTruth:
        start, end, topo = inc.start, self.end_of(inc), self.topo
        port = topo.ports[eng.port_id((inc.device, inc.port))]
        peer = topo.peer(port)
        eng.pause_storm(inc.device, port.name, start, end, inc.priority, inc.fraction)
        prio = self.lossless if inc.priority is None else inc.priority
        what = f"pfc_storm: {ref(port)} asserts pause on priority {prio} {inc.fraction:.0%} of the time"
        if eng.watchdog is not None and peer.kind != "nic" and prio == self.lossless:
            what += f"; the PFC watchdog ({eng.params.pfcwd_action}) on {ref(peer)} mitigates it"
        jobs = self.jobs_through(eng, [peer])
        culprits = self.jobs_on(port)
        return GroundTruth(
            inc.kind, start, end, jobs, (port.device, peer.device), (ref(port), ref(peer)), prio, what, culprits,
            anchor=(ref(port),),  # the root: the port asserting the pauses
        )  # fmt: skip

    def _deadlock(self, i: int, inc: PfcDeadlock, eng: Engine) -> GroundTruth:
        start, end, topo = inc.start, self.end_of(inc), self.topo
        job, flows = self.extra.of_incident[i]
        ring, _, _ = loop_ports(topo, inc)
        eng.stop_job(job.job_id)
        eng.resume_job(job.job_id, at=start)
        jobs = self.jobs_through(eng, ring, [job.job_id])
        healed = inc.end is not None and inc.end < self.duration
        for k, fl in enumerate(flows):
            hops = ring if k < 2 else ring[2:] + ring[:2]
            first, last = topo.port(fl.src.host, fl.src.netdev), topo.attachment(fl.dst.host, fl.dst.rail)
            eng.reroute(fl, [first, *hops, last], at=start)
            if healed:
                eng.reroute(fl, None, at=end)
        if healed:
            eng.stop_job(job.job_id, at=end)
        loop = tuple(dict.fromkeys(p.device for p in ring))
        what = "pfc_deadlock: a route loop " + " -> ".join(ref(p) for p in ring) + " closes a buffer dependency"
        refs = tuple(ref(p) for p in ring)
        links = tuple(dict.fromkeys(r for p in ring for r in (ref(p), ref(topo.peer(p)))))  # either end of a link
        return GroundTruth(inc.kind, start, end, jobs, loop, refs, self.lossless, what, anchor=links)

    def _cnp_loss(self, inc: CnpLoss, eng: Engine) -> GroundTruth:
        start, end, topo = inc.start, self.end_of(inc), self.topo
        nic = topo.nic(inc.host, inc.rail)
        port = topo.port(nic.host, nic.netdev)
        eng.cnp_loss(nic.host, nic.netdev, inc.fraction, start, end, inc.ignored)
        what = f"cnp_loss: {nic.host} {nic.rdma_dev} handles only {1 - inc.fraction:.0%} of its CNPs"
        refs = (f"{nic.host}:{nic.rdma_dev}/1", ref(port))
        jobs = self.jobs_through(eng, [port])
        culprits = tuple(dict.fromkeys((*self.jobs_on(port), *jobs)))  # every job whose traffic it leaves unthrottled
        return GroundTruth(inc.kind, start, end, jobs, (nic.host,), refs, self.lossless, what, culprits, anchor=refs)

    def _cnp_lossy_queue(self, inc: CnpLossyQueue, eng: Engine) -> GroundTruth:
        """The CNP senders are the receivers of this scenario's congesting traffic (incast, microburst,
        elephants) whose CNPs, going back, leave a misconfigured switch by a port that lossy traffic of the
        CNPs' queue overloads (so that queue tail-drops) while all three overlap."""
        start, end, topo = inc.start, self.end_of(inc), self.topo
        for sw in inc.switches:
            eng.cnp_queue(sw, inc.priority, start, end)
        switches = set(inc.switches)
        lossy = self._overloaded(eng, switches, inc.priority, start, end)
        hosts: dict[str, None] = {}
        nics: dict[str, None] = {}
        queues: dict[str, None] = {}
        jobs: set[str] = set()
        t0, t1 = end, start
        for k, (job, flows) in self.extra.of_incident.items():
            other = self.s.incidents[k]
            o0, o1 = other.start, self.end_of(other)
            if not isinstance(other, Incast | Microburst | EcmpImbalance) or o0 >= end or o1 <= start:
                continue
            for fl in flows:
                back = [topo.peer(p) for p in self._path(eng, fl)[:-1]]
                for e in (e for e in back if e.id in lossy):
                    l0, l1 = lossy[e.id]
                    w0, w1 = max(start, o0, l0), min(end, o1, l1)
                    if w0 >= w1:
                        continue
                    t0, t1 = min(t0, w0), max(t1, w1)
                    hosts[fl.dst.host] = None
                    nics.update(dict.fromkeys([f"{fl.dst.host}:{fl.dst.rdma_dev}/1", f"{fl.dst.host}:{fl.dst.netdev}"]))
                    queues[ref(e)] = None
                    jobs.add(job.job_id)
        if not queues:
            raise SimError(
                f"no congesting traffic's CNPs leave {', '.join(inc.switches)} by a port that lossy traffic on "
                f"priority {inc.priority} overloads during the window: nothing would drop them"
            )
        devices = (*hosts, *dict.fromkeys(q.split(":")[0] for q in queues))
        ports = (*nics, *queues)
        what = (
            f"cnp_loss: {', '.join(inc.switches)} map CNPs (DSCP 48) to lossy queue {inc.priority}; congested "
            f"by lossy traffic, {', '.join(queues)} drop the CNPs {', '.join(hosts)} send"
        )
        placed = self.jobs_through(eng, [], sorted(jobs))
        # the queues that drop the CNPs, and the NICs whose CNPs they are
        return GroundTruth(TRUTH_KIND[inc.kind], t0, t1, placed, devices, ports, inc.priority, what, anchor=ports)

    def _overloaded(
        self, eng: Engine, switches: set[str], priority: int, start: float, end: float
    ) -> dict[int, tuple[float, float]]:
        """Egress ports of `switches` that lossy `traffic:` on `priority` overloads during [start, end)
        (its senders, without congestion control, offer more than the port's speed), with the span of
        that traffic."""
        offered: dict[int, float] = {}
        span: dict[int, tuple[float, float]] = {}
        for bg, _, flows in self.extra.background:
            b0, b1 = bg.start, self.end_of(bg)
            if bg.priority != priority or b0 >= end or b1 <= start:
                continue
            per_nic = Counter(fl.src.host for fl in flows)
            for fl in flows:
                path = self._path(eng, fl)
                rate = path[0].speed_bps / per_nic[fl.src.host]
                for p in (p for p in path if p.device in switches):
                    offered[p.id] = offered.get(p.id, 0.0) + rate
                    lo, hi = span.get(p.id, (b0, b1))
                    span[p.id] = (min(lo, b0), max(hi, b1))
        ports = self.topo.ports
        return {p: span[p] for p, rate in offered.items() if rate > ports[p].speed_bps * 1.000001}

    @staticmethod
    def _path(eng: Engine, flow: Flow) -> list[Port]:
        return eng.flow_path(eng.flow_id(flow))

    def _reboot(self, inc: LinkFlap, eng: Engine) -> GroundTruth:
        """A device restarts: each of its cables goes down for `down` from the start (its peers see the carrier
        drop; flows reroute as ECMP would) and its counters restart from zero when it does."""
        start, topo = inc.start, self.topo
        ports = list(topo.ports_of(inc.device))
        if not ports:
            raise SimError(f"no device {inc.device!r} with ports to reboot")
        for port in ports:
            eng.link_down(port.device, port.name, start=start, end=start + inc.down)
        eng.reboot(inc.device, at=start)  # after the downs: its own link-down counts restart too
        peers = [topo.peer(p) for p in ports]
        ends = tuple(ref(p) for p in ports)
        devices = (inc.device, *sorted({p.device for p in peers}))
        what = f"link_flap: {inc.device} restarts: its {len(ports)} links down {inc.down:g} s, its counters from 0"
        jobs = self.jobs_through(eng, [*ports, *peers])
        end = min(start + inc.down, self.duration)
        return GroundTruth(inc.kind, start, end, jobs, devices, ends, -1, what, anchor=ends)

    def _link(self, inc: LinkFlap | DegradedOptics, eng: Engine) -> GroundTruth:
        if inc.port is None:
            assert isinstance(inc, LinkFlap)  # a device restarts; optics degrade on a port
            return self._reboot(inc, eng)
        start, end, topo = inc.start, self.end_of(inc), self.topo
        port = topo.ports[eng.port_id((inc.device, inc.port))]
        peer = topo.peer(port)
        if isinstance(inc, DegradedOptics):
            eng.link_errors(port.device, port.name, inc.error_rate, start, end)
            what = f"degraded_optics: {inc.error_rate:.2%} of the frames {ref(port)} receives fail their FCS"
            jobs = self.jobs_through(eng, [peer])  # the direction that corrupts
        else:
            flaps = np.arange(start, end, inc.period)
            for t in flaps:
                eng.link_down(port.device, port.name, start=float(t), end=float(t + inc.down))
            what = f"link_flap: {ref(port)} down {inc.down:g} s every {inc.period:g} s ({len(flaps)} flaps)"
            if inc.error_rate > 0:
                eng.link_errors(port.device, port.name, inc.error_rate, start, end)
                what += f", {inc.error_rate:.2%} of frames failing FCS"
            jobs = self.jobs_through(eng, [port, peer])
        cable = (ref(port), ref(peer))
        return GroundTruth(inc.kind, start, end, jobs, (port.device, peer.device), cable, -1, what, anchor=cable)

    def _imbalance(self, i: int, inc: EcmpImbalance, eng: Engine) -> GroundTruth:
        start, end = inc.start, self.end_of(inc)
        job, flows = self.extra.of_incident[i]
        hot, _, _ = elephant_ends(self.topo, inc)
        self.window(eng, job.job_id, start, end)
        siblings = len(self.topo.uplinks(inc.leaf)) - 1
        what = (
            f"ecmp_imbalance: {len(flows)} elephant flows hash onto {ref(hot)} while its {siblings} sibling "
            "uplinks idle"
        )
        jobs = self.jobs_through(eng, [hot], [job.job_id])
        culprits = self.placed_only([job.job_id])
        return GroundTruth(
            inc.kind, start, end, jobs, (hot.device,), (ref(hot),), self.lossless, what, culprits, anchor=(ref(hot),)
        )

    def _misconfig(self, inc: PfcMisconfig, eng: Engine) -> GroundTruth:
        start, end, topo = inc.start, self.end_of(inc), self.topo
        port = topo.ports[eng.port_id((inc.device, inc.port))]
        peer = topo.peer(port)
        eng.disable_pfc(port.device, port.name, inc.priority, start, end)
        prio = self.lossless if inc.priority is None else inc.priority
        what = f"pfc_misconfig: PFC off for priority {prio} on ingress {ref(port)}"
        jobs = self.jobs_through(eng, [peer])
        return GroundTruth(
            inc.kind, start, end, jobs, (port.device, peer.device), (ref(port),), prio, what, anchor=(ref(port),)
        )

    def _polarize(self, inc: Polarization, eng: Engine) -> GroundTruth:
        start, end, topo = inc.start, self.end_of(inc), self.topo
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
        refs = tuple(ref(p) for p in hot)
        return GroundTruth(inc.kind, start, end, jobs, devices, refs, self.lossless, what, anchor=refs)

    def _straggler(self, inc: Straggler, eng: Engine) -> GroundTruth:
        start, end, topo = inc.start, self.end_of(inc), self.topo
        nic = topo.nic(inc.host, inc.rail)
        job = next((j for j in self.extra.training if inc.host in j.hosts and inc.rail in j.rails), None)
        if job is None:
            raise SimError(f"no training job runs a GPU on {inc.host} rail {inc.rail}")
        if job.spec.compute_ms <= 0:
            raise SimError(f"{job.job_id} has no compute time to slow down (compute_ms 0)")
        pod = next(p for p in job.pods if p.host == inc.host)
        rank = job.rank(pod.rank, inc.rail)
        # The GPU's work per step takes `slowdown` times as long. Training overlaps its all-reduce with the
        # backward pass (DDP buckets, FSDP prefetch), so that work spans the whole step, communication included;
        # the engine runs the phases one after the other, so the whole nominal step is what stretches. Stretching
        # only the compute gap made a 2x GPU a 5% job slowdown where the NICs are busy 95% of the step.
        comm_s = fabric_bytes_per_rank(job) / (topo.spec.host_speed_gbps * 1e9 / 8)
        extra = (inc.slowdown - 1.0) * (job.spec.compute_ms / 1000 + comm_s)
        eng.slow_compute(job.job_id, rank, extra, start, end)
        what = (
            f"straggler: rank {rank} of {job.job_id} (GPU {inc.rail} of {inc.host}) works {inc.slowdown:g}x as "
            f"long per step, {extra * 1000:.0f} ms more per iteration; every collective of the job waits for it"
        )
        return GroundTruth(
            TRUTH_KIND[inc.kind], start, end, (job.job_id,), (inc.host,), (f"{nic.host}:{nic.netdev}",), -1, what,
            (), (job.job_id, rank), anchor=(inc.host,),
        )  # fmt: skip
