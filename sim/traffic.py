"""The extra traffic of a scenario, built before the engine exists: what its incidents and `traffic:` entries
put on the wire, as background jobs and their flows.

* incast / microburst: `senders` hosts each stream to one receiver NIC (the fan-in), back to back;
* pfc_deadlock: four flows between two leaves of a rail, later forced round leaf-spine-leaf-spine;
* ecmp_imbalance: a few elephants from one leaf to hosts under another, their QP numbers (hence UDP
  source ports, the only entropy ECMP sees) drawn until the leaf's hash puts every one on the same uplink;
* `traffic:` entries: storage, checkpoint or data-loader streams that are no incident, lossless RoCE or
  on a lossy priority.

Every such job is in namespace `background`; unless `placed`, it has no `endpoints` rows (the job
inventory does not know it). A fan-in with an `owner` is that training job's own traffic (its checkpoint
writes, from its hosts): its background job is never placed, so the senders' NICs are the owner's. Flows
exist from the start; the arming pass holds their job stopped outside its window (`rocescope.sim.arming`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rocescope.errors import SimError
from rocescope.sim.ecmp import Ecmp
from rocescope.sim.jobs import Flow, Job, JobSpec, Pod
from rocescope.sim.roce import QpAllocator, udp_sport
from rocescope.sim.scenario import (
    Background,
    EcmpImbalance,
    Incast,
    IncidentModel,
    Microburst,
    PfcDeadlock,
    message_bytes,
)
from rocescope.sim.topology import Nic, Port, Topology

BACKGROUND_NS = "background"
#: Bytes per flow of traffic that is cut by its window rather than finishing (never runs out).
ENDLESS = 1 << 50
#: QP pairs tried per elephant before giving up on hashing it onto the wanted uplink.
MAX_QP_TRIES = 512


def ref(port: Port) -> str:
    """A port as the ground truth names it: `device:port`."""
    return f"{port.device}:{port.name}"


def make_flow(job: Job, qps: QpAllocator, src: Nic, dst: Nic, nbytes: int, src_rank: int, dst_rank: int) -> Flow:
    sq, dq = qps.allocate(src.host, src.rdma_dev), qps.allocate(dst.host, dst.rdma_dev)
    return Flow(job.job_id, "ring", src, dst, src_rank, dst_rank, sq, dq, udp_sport(sq, dq), nbytes)


def background_job(name: str, hosts: Sequence[str], rail: int, compute_ms: float) -> Job:
    spec = JobSpec(name, len(hosts), BACKGROUND_NS, rails=(rail,), message_bytes=0, compute_ms=compute_ms)
    return Job(spec, tuple(Pod(f"{name}-worker-{k}", k, h) for k, h in enumerate(hosts)), (rail,))


def loop_ports(topo: Topology, inc: PfcDeadlock) -> tuple[list[Port], list[Nic], list[Nic]]:
    """The deadlock's ring (leaf1 -> spine1 -> leaf2 -> spine2 -> leaf1 egress ports) and two NICs under
    each of its leaves."""
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


def elephant_ends(topo: Topology, inc: EcmpImbalance) -> tuple[Port, list[Nic], list[Nic]]:
    """The hot uplink and the elephants' sender and receiver NICs."""
    leaf = topo.device(inc.leaf)
    if leaf.role != "leaf" or leaf.rail < 0:
        raise SimError(f"{inc.leaf} is not a leaf of a rail")
    ups = topo.uplinks(leaf.name)
    if inc.uplink >= len(ups):
        raise SimError(f"{leaf.name} has {len(ups)} uplinks; uplink {inc.uplink} does not exist")
    rail = leaf.rail
    below = [n for n in topo.nics if n.leaf == leaf.name and n.rail == rail]
    if isinstance(inc.senders, int):
        if not 1 <= inc.senders <= len(below):
            raise SimError(f"senders must be in 1..{len(below)} (the hosts under {leaf.name})")
        srcs = below[: inc.senders]
    else:
        srcs = [topo.nic(h, rail) for h in inc.senders]
        if any(n.leaf != leaf.name for n in srcs):
            raise SimError(f"every sender must be under {leaf.name}")
    if inc.receivers is None:
        others = [d.name for d in topo.leaves_of_rail(rail) if d.name != leaf.name]
        if not others:
            raise SimError(f"rail {rail} has no other leaf to send to")
        nxt = others[[d.name for d in topo.leaves_of_rail(rail)].index(leaf.name) % len(others)]
        dsts = [n for n in topo.nics if n.leaf == nxt and n.rail == rail][: len(srcs)]
    else:
        dsts = [topo.nic(h, rail) for h in inc.receivers]
    if len(dsts) < len(srcs) or any(n.leaf == leaf.name for n in dsts):
        raise SimError(f"need {len(srcs)} receivers under other leaves than {leaf.name}")
    return ups[inc.uplink], srcs, dsts[: len(srcs)]


@dataclass
class ExtraTraffic:
    """Pass 1 of building a scenario: the background jobs and flows its incidents and `traffic:` add."""

    topo: Topology
    ecmp: Ecmp
    lossless: int
    jobs: list[Job] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    #: switch priority of each flow in `flows`
    priorities: list[int] = field(default_factory=list)
    #: incident index -> (job, its flows) of the traffic it adds
    of_incident: dict[int, tuple[Job, list[Flow]]] = field(default_factory=dict)
    #: `traffic:` entries: (entry, job, flows)
    background: list[tuple[Background, Job, list[Flow]]] = field(default_factory=list)
    #: jobs no inventory knows (no `endpoints` rows)
    unplaced: set[str] = field(default_factory=set)
    #: the scenario's placed training jobs (owners of fan-in traffic are looked up here)
    training: list[Job] = field(default_factory=list)
    #: incident index -> the training job whose own traffic the incident's fan-in is
    owners: dict[int, str] = field(default_factory=dict)

    def add_incident(self, i: int, inc: IncidentModel, qps: QpAllocator) -> None:
        if isinstance(inc, Incast | Microburst):
            self._fan_in(i, inc, qps)
        elif isinstance(inc, PfcDeadlock):
            self._loop(i, inc, qps)
        elif isinstance(inc, EcmpImbalance):
            self._elephants(i, inc, qps)

    def add_background(self, bg: Background, qps: QpAllocator) -> None:
        topo = self.topo
        srcs = [topo.nic(h, bg.rail) for h in bg.senders]
        dsts = [topo.nic(h, bg.rail) for h in bg.receivers]
        job = background_job(bg.name, [*bg.senders, *bg.receivers], bg.rail, 0.0)
        flows = [
            make_flow(job, qps, src, dsts[k % len(dsts)], ENDLESS, k, len(srcs) + k % len(dsts))
            for k, src in enumerate(srcs)
        ]
        prio = self.lossless if bg.priority is None else bg.priority
        self._add(job, flows, bg.placed, prio)
        self.background.append((bg, job, flows))

    def _fan_in(self, i: int, inc: Incast | Microburst, qps: QpAllocator) -> None:
        topo = self.topo
        dst = topo.nic(inc.receiver, inc.rail)
        owner = self._owner(inc) if inc.owner is not None else None
        if owner is not None and isinstance(inc.senders, int):
            names = [h for h in owner.hosts if h != inc.receiver]
            if not 1 <= inc.senders <= len(names):
                raise SimError(f"senders must be in 1..{len(names)} (the hosts of {owner.job_id})")
            senders = names[: inc.senders]
        elif isinstance(inc.senders, int):
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
        job = background_job(name, [inc.receiver, *senders], inc.rail, 0.0 if isinstance(inc, Incast) else 1e9)
        nbytes = message_bytes(inc.mib_per_sender) if isinstance(inc, Incast) else ENDLESS
        flows = [make_flow(job, qps, src, dst, nbytes, k + 1, 0) for k, src in enumerate(srcs)]
        if owner is not None:
            strangers = sorted(set(senders) - set(owner.hosts))
            if strangers or inc.rail not in owner.rails:
                what = strangers or f"rail {inc.rail}"
                raise SimError(f"{owner.job_id} sends its own traffic from its hosts and rails, not {what}")
            self.owners[i] = owner.job_id
        self._add(job, flows, inc.placed and owner is None, self.lossless, i)

    def _owner(self, inc: Incast | Microburst) -> Job:
        for job in self.training:
            if job.job_id == inc.owner:
                return job
        raise SimError(f"owner {inc.owner!r} is no training job of the scenario ({[j.job_id for j in self.training]})")

    def _loop(self, i: int, inc: PfcDeadlock, qps: QpAllocator) -> None:
        _, on1, on2 = loop_ports(self.topo, inc)
        name = inc.job or f"{inc.kind.replace('_', '-')}-{i + 1}"
        job = background_job(name, [n.host for n in (*on1, *on2)], inc.rail, 0.0)
        pairs = [(on1[0], on1[1]), (on1[1], on1[0]), (on2[0], on2[1]), (on2[1], on2[0])]
        flows = [make_flow(job, qps, a, b, ENDLESS, k, k ^ 1) for k, (a, b) in enumerate(pairs)]
        self._add(job, flows, True, self.lossless, i)

    def _elephants(self, i: int, inc: EcmpImbalance, qps: QpAllocator) -> None:
        hot, srcs, dsts = elephant_ends(self.topo, inc)
        name = inc.job or f"{inc.kind.replace('_', '-')}-{i + 1}"
        job = background_job(name, [n.host for n in (*srcs, *dsts)], srcs[0].rail, 0.0)
        flows = []
        for k, (src, dst) in enumerate(zip(srcs, dsts, strict=True)):
            for _ in range(MAX_QP_TRIES):
                fl = make_flow(job, qps, src, dst, ENDLESS, k, len(srcs) + k)
                if self.ecmp.route_ports(fl.five_tuple)[1].id == hot.id:
                    flows.append(fl)
                    break
            else:
                raise SimError(f"no QP pair from {src.host} hashes onto {ref(hot)} in {MAX_QP_TRIES} tries")
        self._add(job, flows, inc.placed, self.lossless, i)

    def _add(self, job: Job, flows: list[Flow], placed: bool, priority: int, incident: int | None = None) -> None:
        if any(j.job_id == job.job_id for j in self.jobs):
            raise SimError(f"two incidents or traffic entries add traffic as job {job.job_id}; give distinct names")
        self.jobs.append(job)
        self.flows += flows
        self.priorities += [priority] * len(flows)
        if not placed:
            self.unplaced.add(job.job_id)
        if incident is not None:
            self.of_incident[incident] = (job, flows)
