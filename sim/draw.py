"""Incidents drawn, not written: the exam takes a shipped scenario as a template of *what* happens (which kinds,
which jobs, which incidents depend on which) and draws from the run's seed *where*, *how large* and *when*, by
the ranges below, each beside its reason. Two seeds of one kind differ in place and size; the ground truth still
comes from what the engine did (`rocescope.sim.truth`), so a drawn incident that physics did not make into its
kind is labelled by what it became (a fan-in that never crossed the ECN threshold is unobservable, one that
saturated its receiver for a second is an incast, however the template named it).

What is drawn (`draw_scenario`):

* the fabric (except where the fault is in its shape: polarization, ECMP imbalance): leaves of 8, 16 or 32 host
  ports (one to four leaves per rail, so traffic crosses spines), 2 or 4 spines, non-blocking (uplinks =
  host ports, at host speed: rail-optimized AI fabrics are built 1:1);
* every job's placement (contiguous or scattered: a fragmenting scheduler), collective (ring or tree all-reduce,
  or a mixture-of-experts all-to-all), step time and the share of it its NICs communicate (compute gap and
  message size follow);
* each incident's place anywhere the fabric allows, its size within its kind's range and its window anywhere in
  the run; incidents that ride on a fan-in (a CNP-losing sender, a port without PFC) are placed on the drawn
  fan-in, as the template places them on its own;
* how many small collectives each job's steps hold that NCCL numbers and Inspector never records;
* in one run of two, a storage array no collector reads (`Scenario.unmonitored`) on a host port of its own,
  serving reads to a few job hosts over RoCE for a while: its traffic, its CNPs and its switch-side LLDP are on
  the fabric, its own counters and LLDP are not (what a storage appliance watched by its vendor's tools is);
* in one run of four, a leaf no collector reads (`Scenario.unmonitored`): job traffic crosses it, its hosts' NICs
  report as ever and its neighbours' LLDP names it, but its own counters and LLDP are missing (a rack outside the
  monitoring's scope, a switch whose agent is down). No incident is placed on it or on a host under it (a fault
  where nothing is read would be a miss no detector could avoid): it tests what a blind leaf makes the detectors
  say about everything else.

Templates with background traffic or a QoS misconfiguration whose physics rests on one geometry
(`cnp_lossy_queue`: lossy storage traffic through the leaf that drops CNPs) keep their geometry.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from rocescope.sim.ecmp import HASH_FUNCTIONS
from rocescope.sim.incidents import place
from rocescope.sim.jobs import COLLECTIVES, Job, MiB, fabric_share
from rocescope.sim.scenario import (
    Background,
    CnpLoss,
    DegradedOptics,
    EcmpImbalance,
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
    Straggler,
)
from rocescope.sim.topology import FabricSpec, Port, Topology

__all__ = ["draw_scenario"]

#: a stream of its own, so the draw and the engine's use of the same seed do not correlate
_STREAM = 0x6472617721
#: the storage array's own stream: whether a run has one changes no other draw of the run
_STORAGE = 0x73746F72
#: the unmonitored leaf's own stream, likewise
_BLIND_LEAF = 0x626C696E64
#: kinds whose fault is the fabric's shape (the template's fabric is kept)
_SHAPED = frozenset({"polarization", "ecmp_imbalance"})
#: kinds that need uplinks carrying traffic (two leaves or more per rail): a deadlock's loop crosses two leaves,
#: a flapping or failing uplink shows only where frames cross it
_CROSSING = frozenset({"pfc_deadlock", "link_flap", "degraded_optics"})
#: templates whose geometry is kept whole
_FIXED = frozenset({"cnp_lossy_queue"})
#: host ports per leaf: 64-port leaves split 32/32 are the common AI build; smaller leaves put a rail on several
#: leaves, so a rail's traffic crosses the spines
_HOST_PORTS = (8, 16, 32)
#: at most this many leaves per rail: keeps a grown fabric's engine cost bounded
_MAX_LEAVES_PER_RAIL = 4
#: the exam's runs start with a clean stretch for the jobs' own baseline (impact is measured against it) and keep
#: a tail for what an incident leaves behind
_LEAD_S = 30.0
_TAIL_S = 10.0


class _Ranges:
    """Each kind's range, with its reason (issue 28 item 2)."""

    #: incast: >= 2 senders (one sender cannot exceed a receiver of its own speed); up to 64, as a parameter
    #: server or a checkpoint restore at scale
    fan_in = (2, 64)
    #: an incast's transfer size per sender (checkpoint shards of 16 MiB to 256 MiB)
    mib_per_sender = (16.0, 256.0)
    #: an incast lasts >= 1 s by definition; up to a minute and a half (a large restore)
    incast_s = (5.0, 90.0)
    #: microbursts: 1-50 ms bursts (a synchronized all-to-all or a small restore step) from 2-16 senders, once
    #: every 0.5-2 s (training iteration periods)
    burst_s = (0.001, 0.05)
    burst_senders = (2, 16)
    burst_period_s = (0.5, 2.0)
    microburst_s = (20.0, 120.0)
    #: storms: a stuck NIC for seconds to two minutes (mlx5 stall prevention cuts its own after 8 s by default,
    #: the gear's profile decides); below a few seconds a 1 s poll barely holds one
    storm_s = (3.0, 90.0)
    #: link flaps: down 0.5-3 s (an autonegotiation and link-training cycle) every 5-30 s
    flap_period_s = (5.0, 30.0)
    flap_down_s = (0.5, 3.0)
    #: post-FEC frame loss of a failing optic: from 1e-6 (some 100 times a compliant link's ~1e-8 per frame at
    #: IEEE 802.3's BER 1e-12) to 1e-4
    error_rate = (1e-6, 1e-4)
    #: a slow GPU 1.1-2x (thermal throttling to a failing HBM stack)
    slowdown = (1.1, 2.0)
    #: a partial CNP loss: a NIC that handles 10-70% of what it receives
    cnp_loss_fraction = (0.3, 0.9)
    #: faults that last (flaps, optics, stragglers, deadlocks): half a minute to two
    fault_s = (30.0, 120.0)
    #: jobs: a training step of 100 ms to 1 s (sub-second phases: compute and communication alternate every
    #: second or faster), of which the NICs communicate 5-95% (the duty cycle: a data-parallel job with small
    #: gradient buckets idles its NICs most of a step, an FSDP or MoE job whose all-gathers and all-to-alls
    #: overlap its compute keeps them busy nearly all of it); the message is what fills that share at line rate
    step_ms = (100.0, 1000.0)
    comm_share = (0.05, 0.95)
    #: a storage array in one run of two (half the exam's runs with an unmonitored peer, half without): it serves
    #: reads (a data loader's shards, a checkpoint restore) to 1-4 job hosts for 10 s to two minutes
    storage_share = 0.5
    storage_readers = (1, 4)
    storage_read_s = (10.0, 120.0)
    #: a leaf no collector reads drawn in one run of four: most runs keep every leaf watched so the exam still
    #: measures detection where everything is read. Fewer runs get one: an incast's senders or the storage
    #: array's readers often touch every leaf (5 of the 55 runs of the five-kind exam at 369bbde)
    blind_leaf_share = 0.25
    #: small collectives per training step that NCCL numbers and Inspector never records (a loss all-reduce, a
    #: gradient norm, mixed precision's overflow check: CPU-timed, dropped under Inspector's default kernel
    #: timing): none to three, each job its own
    unrecorded_per_step = (0, 3)


R = _Ranges


def draw_scenario(template: Scenario, seed: int) -> Scenario:
    """`template` with its fabric, jobs and incidents drawn from `seed` (see the module docstring); the same
    template and seed always give the same scenario."""
    kinds: set[str] = {inc.kind for inc in template.incidents}
    collectives = template.collectives.model_copy(update={"unrecorded_per_step": R.unrecorded_per_step})
    if kinds & _FIXED or template.traffic:
        return template.model_copy(update={"seed": seed, "collectives": collectives})
    rng = np.random.default_rng([seed, _STREAM])
    storage_rng = np.random.default_rng([seed, _STREAM, _STORAGE])
    with_storage = bool(storage_rng.random() < R.storage_share)
    grown = replace(template.fabric, hosts=template.fabric.hosts + 1) if with_storage else template.fabric
    fabric = template.fabric if kinds & _SHAPED else _fabric(grown, kinds, rng)
    jobs = [_job(j, rng, template.fabric.host_speed_gbps) for j in template.jobs]
    topo = Topology(fabric)
    draw = _Drawer(rng, topo, place(topo, jobs, seed), template.duration)
    fan_ins = [inc for inc in template.incidents if isinstance(inc, Incast | Microburst)]
    # a straggler drawn during the fan-in needs the receiver to be a rank of a job (the job both slow)
    in_job = any(isinstance(inc, Straggler) and inc.during_fan_in for inc in template.incidents)
    drawn_fan_ins = {id(inc): draw.fan_in(inc, receiver_in_job=in_job) for inc in fan_ins}
    rides_on = next(iter(drawn_fan_ins.values()), None)  # the fan-in a CNP-losing sender or a PFC-less port is on
    incidents = [
        drawn_fan_ins[id(inc)] if id(inc) in drawn_fan_ins else draw.incident(inc, rides_on)
        for inc in template.incidents
    ]
    data: dict[str, Any] = template.model_dump()
    data.update(
        seed=seed,
        fabric=fabric,
        jobs=[j.model_dump() for j in jobs],
        incidents=[i.model_dump() for i in incidents],
        collectives=collectives.model_dump(),
    )
    read = _storage_read(storage_rng, draw, incidents) if with_storage else None
    unmonitored: list[str] = []
    if read is not None:
        data.update(traffic=[read.model_dump()])
        unmonitored.append(read.senders[0])
    blind_rng = np.random.default_rng([seed, _STREAM, _BLIND_LEAF])
    if blind_rng.random() < R.blind_leaf_share and not kinds & _SHAPED:
        leaf = _blind_leaf(blind_rng, draw, [*incidents, *([read] if read is not None else [])])
        unmonitored += [leaf] if leaf is not None else []
    data.update(unmonitored=unmonitored)
    return Scenario.model_validate(data)


def _blind_leaf(rng: np.random.Generator, draw: _Drawer, named_by: Sequence[IncidentModel | Background]) -> str | None:
    """A leaf job traffic crosses that no incident (nor the storage array's reads) names, nor any host under it;
    None where every such leaf is taken."""
    topo = draw.topo
    named = {v for item in named_by for v in named_strings(item.model_dump())}
    touched = named | {topo.nic(h, r).leaf for h in draw.hosts if h in named for r in range(topo.spec.rails)}
    used = {topo.nic(h, r).leaf for j in draw.jobs for h in j.hosts for r in j.rails}
    free = sorted(leaf.name for leaf in topo.leaves if leaf.name in used and leaf.name not in touched)
    return str(rng.choice(free)) if free else None


def _storage_read(rng: np.random.Generator, draw: _Drawer, incidents: Sequence[IncidentModel]) -> Background | None:
    """A storage array's reads: on a host port no job and no incident uses (an incident at a device nobody reads
    would be a miss no detector could avoid), to 1-4 job hosts on one rail; None where no such port is left."""
    named = {v for inc in incidents for v in named_strings(inc.model_dump())}
    free = [h for h in draw.free if h not in named]
    busy = [h for h in draw.hosts if h not in draw.free]
    if not free or not busy:
        return None
    array = str(rng.choice(free))
    k = min(len(busy), int(rng.integers(R.storage_readers[0], R.storage_readers[1] + 1)))
    readers = sorted(str(h) for h in rng.choice(busy, size=k, replace=False))
    span = min(_log_uniform(rng, R.storage_read_s), draw.duration - _LEAD_S - _TAIL_S)
    start = round(float(rng.uniform(_LEAD_S, draw.duration - _TAIL_S - span)), 1)
    rail = int(rng.integers(draw.topo.spec.rails))
    taken = {str(job) for inc in incidents if (job := getattr(inc, "job", None))}
    name = next(n for n in (f"storage-array-{i}" for i in range(len(taken) + 1)) if n not in taken)
    return Background(
        name=name, start=start, end=round(start + span, 1), rail=rail, senders=[array] * k, receivers=readers
    )


def named_strings(value: Any) -> list[str]:
    """Every string in a dumped model (the hosts and devices an incident names, among others)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in named_strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in named_strings(v)]
    return []


def _uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    return float(rng.uniform(*bounds))


def _log_uniform(rng: np.random.Generator, bounds: tuple[float, float]) -> float:
    """Sizes spanning decades are drawn evenly per decade."""
    lo, hi = bounds
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _fabric(spec: FabricSpec, kinds: set[str], rng: np.random.Generator) -> FabricSpec:
    choices = [p for p in _HOST_PORTS if math.ceil(spec.hosts / p) <= _MAX_LEAVES_PER_RAIL]
    if kinds & _CROSSING:
        choices = [p for p in choices if math.ceil(spec.hosts / p) >= 2] or choices
    if not choices or not spec.rail_optimized:
        return spec
    ports = int(rng.choice(choices))
    spines = int(rng.choice([s for s in (2, 4) if s <= ports]))
    return replace(
        spec,
        host_ports_per_leaf=ports,
        leaves_per_rail=None,
        spines=spines,
        uplinks_per_spine=ports // spines,
        uplink_speed_gbps=spec.host_speed_gbps,
    )


def _job(job: JobModel, rng: np.random.Generator, host_gbps: float) -> JobModel:
    """The job's placement, collective and step: its compute gap and the message whose collective keeps its
    NICs at line rate for the drawn share of the step (at nominal speed: contention only stretches it)."""
    placement, collective = str(rng.choice(["contiguous", "scattered"])), str(rng.choice(COLLECTIVES))
    step_s, busy = _log_uniform(rng, R.step_ms) / 1000, _uniform(rng, R.comm_share)
    # a one-host job puts nothing on the fabric: its message is sized as if it did
    message = busy * step_s * host_gbps * 1e9 / 8 / (fabric_share(collective, job.hosts) or 1.0)
    return job.model_copy(
        update={
            "placement": placement,
            "collective": collective,
            "compute_ms": round((1 - busy) * step_s * 1000, 1),
            "message_mib": round(message / MiB, 1),
        }
    )


class _Drawer:
    def __init__(self, rng: np.random.Generator, topo: Topology, jobs: Sequence[Job], duration: float) -> None:
        self.rng, self.topo, self.jobs, self.duration = rng, topo, jobs, duration
        self.hosts = [h.name for h in topo.hosts]
        busy = {h for j in jobs for h in j.hosts}
        self.free = [h for h in self.hosts if h not in busy]

    def window(self, length: tuple[float, float], template_end: float | None) -> tuple[float, float | None]:
        """A start anywhere after the lead-in, lasting `length` (log-uniform); open-ended where the template's
        incident is (a deadlock or a polarized hash never clears by itself)."""
        span = min(_log_uniform(self.rng, length), self.duration - _LEAD_S - _TAIL_S)
        start = round(self.rng.uniform(_LEAD_S, self.duration - _TAIL_S - span), 1)
        return start, (None if template_end is None else round(start + span, 1))

    def fan_in(self, inc: Incast | Microburst, receiver_in_job: bool = False) -> Incast | Microburst:
        rail = int(self.rng.integers(self.topo.spec.rails))
        if inc.owner is not None:  # the owner's checkpoint writes: its senders and rail stay the template's
            receiver, rail, senders = inc.receiver, inc.rail, inc.senders
        else:
            ranks = sorted({h for j in self.jobs for h in j.hosts})
            receiver = str(self.rng.choice(ranks if receiver_in_job and ranks else self.hosts))
            # traffic outside the job inventory (storage servers) comes from hosts no job runs on, where there are
            others = [h for h in (self.hosts if inc.placed else self.free) if h != receiver]
            others = others if len(others) >= 2 else [h for h in self.hosts if h != receiver]
            bounds = R.fan_in if isinstance(inc, Incast) else R.burst_senders
            k = min(len(others), round(_log_uniform(self.rng, (bounds[0], bounds[1] + 0.49))))
            senders = sorted(str(h) for h in self.rng.choice(others, size=k, replace=False))
        if isinstance(inc, Incast):
            start, end = self.window(R.incast_s, inc.end)
            size = {"mib_per_sender": round(_log_uniform(self.rng, R.mib_per_sender), 1)}
        else:
            start, end = self.window(R.microburst_s, inc.end)
            burst = round(_log_uniform(self.rng, R.burst_s), 4)
            size = {"burst": burst, "period": round(max(_uniform(self.rng, R.burst_period_s), 4 * burst), 3)}
        return inc.model_copy(
            update={"receiver": receiver, "rail": rail, "senders": senders, "start": start, "end": end, **size}
        )

    def incident(self, inc: IncidentModel, fan_in: Incast | Microburst | None) -> IncidentModel:
        rng = self.rng
        if isinstance(inc, CnpLoss | PfcMisconfig) and fan_in is not None and isinstance(fan_in.senders, list):
            # rides on the fan-in: a sender of it loses CNPs, or a sender's leaf port runs without PFC
            host = str(rng.choice(fan_in.senders))
            times = {"start": fan_in.start, "end": None if inc.end is None else fan_in.end}
            if isinstance(inc, CnpLoss):
                fraction = inc.fraction if inc.fraction >= 1 else round(_uniform(rng, R.cnp_loss_fraction), 2)
                return inc.model_copy(update={"host": host, "rail": fan_in.rail, "fraction": fraction, **times})
            port = self.topo.attachment(host, fan_in.rail)
            return inc.model_copy(update={"device": port.device, "port": port.name, **times})
        if isinstance(inc, PfcStorm):
            start, end = self.window(R.storm_s, inc.end)
            if inc.device in self.hosts:  # a stuck NIC, as the template's
                nic = self.topo.nic(str(rng.choice(self.hosts)), int(rng.integers(self.topo.spec.rails)))
                return inc.model_copy(update={"device": nic.host, "port": nic.netdev, "start": start, "end": end})
            return inc.model_copy(update={"start": start, "end": end})
        if isinstance(inc, PfcDeadlock):
            rail = int(rng.integers(self.topo.spec.rails))
            leaves = [d.name for d in self.topo.leaves_of_rail(rail)]
            spines = [d.name for d in self.topo.spines]
            if len(leaves) < 2 or len(spines) < 2:
                return inc
            two_leaves = tuple(sorted(str(x) for x in rng.choice(leaves, size=2, replace=False)))
            two_spines = tuple(sorted(str(x) for x in rng.choice(spines, size=2, replace=False)))
            start, end = self.window(R.fault_s, inc.end)
            return inc.model_copy(
                update={"rail": rail, "leaves": two_leaves, "spines": two_spines, "start": start, "end": end}
            )
        if isinstance(inc, LinkFlap):
            port = self._switch_port(up_share=0.7)
            period = round(_uniform(rng, R.flap_period_s), 1)
            down = round(min(_uniform(rng, R.flap_down_s), period / 2), 2)
            start, end = self.window(R.fault_s, inc.end)
            return inc.model_copy(
                update={"device": port.device, "port": port.name, "period": period, "down": down,
                        "start": start, "end": end}
            )  # fmt: skip
        if isinstance(inc, DegradedOptics):
            port = self._port_of_a_job(up_share=0.5)
            start, end = self.window(R.fault_s, inc.end)
            rate = float(f"{_log_uniform(rng, R.error_rate):.2g}")
            return inc.model_copy(
                update={"device": port.device, "port": port.name, "error_rate": rate, "start": start, "end": end}
            )
        if isinstance(inc, Straggler) and inc.during_fan_in and isinstance(fan_in, Incast) and fan_in.end is not None:
            return self._straggler_during(inc, fan_in)
        if isinstance(inc, Straggler):
            job = self.jobs[int(rng.integers(len(self.jobs)))]
            start, end = self.window(R.fault_s, inc.end)
            return inc.model_copy(
                update={"host": str(rng.choice(job.hosts)), "rail": int(rng.choice(job.rails)),
                        "slowdown": round(_uniform(rng, R.slowdown), 2), "start": start, "end": end}
            )  # fmt: skip
        if isinstance(inc, EcmpImbalance):
            return self._imbalance(inc)
        if isinstance(inc, Polarization):
            start, _ = self.window(R.fault_s, None)
            return inc.model_copy(update={"function": str(rng.choice(HASH_FUNCTIONS)), "start": start})
        return inc

    def _straggler_during(self, inc: Straggler, fan_in: Incast) -> Straggler:
        """A slow GPU of the fan-in's receiver's job that begins while the fan-in lasts (in its first half, so the
        two overlap) and lasts as faults do: both slow the job, each by its own cause."""
        rng = self.rng
        job = next((j for j in self.jobs if fan_in.receiver in j.hosts), self.jobs[int(rng.integers(len(self.jobs)))])
        assert fan_in.end is not None
        start = round(fan_in.start + rng.uniform(0.0, 0.5) * (fan_in.end - fan_in.start), 1)
        span = min(_log_uniform(rng, R.fault_s), self.duration - _TAIL_S - start)
        return inc.model_copy(
            update={"host": str(rng.choice(job.hosts)), "rail": int(rng.choice(job.rails)),
                    "slowdown": round(_uniform(rng, R.slowdown), 2), "start": start, "end": round(start + span, 1)}
        )  # fmt: skip

    def _switch_port(self, up_share: float) -> Port:
        """A leaf uplink (`up_share` of the time) or a leaf's host-facing port, anywhere in the fabric."""
        leaf = self.topo.leaves[int(self.rng.integers(len(self.topo.leaves)))]
        kind = "up" if self.rng.random() < up_share else "down"
        ports = [p for p in self.topo.ports_of(leaf.name) if p.kind == kind]
        return ports[int(self.rng.integers(len(ports)))]

    def _port_of_a_job(self, up_share: float) -> Port:
        """A port on a job's path: the leaf port facing one of its NICs or (`up_share` of the time) an uplink of
        that leaf. Frame errors need frames: a failing optic where nothing flows shows nothing, so an incident
        drawn on an idle link would be unobservable by any telemetry (runs without jobs: any leaf port)."""
        if not self.jobs:
            return self._switch_port(up_share)
        job = self.jobs[int(self.rng.integers(len(self.jobs)))]
        nic = self.topo.nic(str(self.rng.choice(job.hosts)), int(self.rng.choice(job.rails)))
        if self.rng.random() < up_share:
            ups = self.topo.uplinks(nic.leaf)
            return ups[int(self.rng.integers(len(ups)))]
        return next(p for p in self.topo.ports_of(nic.leaf) if p.name == nic.leaf_port)

    def _imbalance(self, inc: EcmpImbalance) -> EcmpImbalance:
        """Elephants from 2-4 hosts of a leaf to hosts under other leaves of its rail, all on one drawn uplink."""
        rng = self.rng
        rails = [r for r in range(self.topo.spec.rails) if len(self.topo.leaves_of_rail(r)) >= 2]
        if not rails:
            return inc
        rail = int(rng.choice(rails))
        leaves = self.topo.leaves_of_rail(rail)
        leaf = leaves[int(rng.integers(len(leaves)))]
        under = [h for h in self.hosts if self.topo.nic(h, rail).leaf == leaf.name]
        elsewhere = [h for h in self.hosts if self.topo.nic(h, rail).leaf != leaf.name]
        k = int(rng.integers(2, min(4, len(under), len(elsewhere)) + 1))
        start, end = self.window(R.fault_s, inc.end)
        return inc.model_copy(
            update={
                "leaf": leaf.name,
                "uplink": int(rng.integers(len(self.topo.uplinks(leaf.name)))),
                "senders": sorted(str(h) for h in rng.choice(under, size=k, replace=False)),
                "receivers": sorted(str(h) for h in rng.choice(elsewhere, size=k, replace=False)),
                "start": start,
                "end": end,
            }
        )
