"""The training jobs' NCCL collectives, timed by the fabric, as NCCL Inspector reports them per rank.

Each placed training job has one communicator over its ranks (one per GPU and NIC: `Job.endpoints`), one
process per rank (torchrun's workers: consecutive pids per host). The engine runs the job's iterations: a
compute gap, then a communication phase that puts every flow of the job's all-reduce on the wire and ends
when the LAST flow has delivered its bytes (`rocescope.sim.engine`). So the fabric sets the collective's time:
whichever rank's NIC or flows get the least throughput (PFC pauses, ECN/DCQCN cuts, drops and retransmits,
a longer path) gates every rank, as a ring or tree waits for its slowest member.

A rank's execution time of one phase, as Inspector's `kernel_gpu` timing sees it:

    exec = wait + (end - start) + floor

* `end - start`: the communication phase in the fabric;
* `floor`: what the collective costs with no network at all: kernel launch plus the intra-node reduction over
  NVLink (`LAUNCH_S + message_bytes / NVLINK_BYTES_PER_S`);
* `wait`: a straggler (`Engine.slow_compute`): a rank that computes `d_r` longer issues its collective that
  much later; the phase starts when the slowest rank arrives, so rank r waits `max(d) - d_r` inside the
  collective: every rank but the straggler shows the delay, the straggler itself looks fast and issued late.

Volume: a job runs ~10 iterations a second; consecutive phases are fused into one record per training step
(`iterations_per_step`: about `Collectives.step_s` of fabric time), an AllReduce whose bytes and execution time
are the sums of its phases. Its `sequence` also counts the small collectives NCCL numbers and Inspector never
records (`Collectives.unrecorded_per_step`: a loss all-reduce, a gradient norm), as a real rank's does. Records
are `collectors.nccl.write.InspectorRecord`s, written exactly as NVIDIA's plugin writes them, and land through
the real parser (fast path) or as Inspector files a collector tails (`rocescope.sim.facades.nccl`, served path).
Times are each host's clock (a profile's host skew).

`qp_owners_arrow` is what eBPF (or `rdma resource show qp`) reports of those processes: each rank's queue pairs
at both ends, with its pid, pod and job, so a collective's (host, pid) names its job even on a host that
another job's traffic also uses; and of every other process with queue pairs (background jobs' workers, storage
readers the scheduler never placed), as a monitored host shows them.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocescope.collectors.nccl.write import InspectorRecord
from rocescope.pipeline.batch import conform
from rocescope.sim.facades.pods import pod_uid
from rocescope.sim.jobs import Job, fabric_bytes_per_rank
from rocescope.sim.roce import stable_hash
from rocescope.sim.scenario import Collectives
from rocescope.sim.stepper import ComputeChange, IterationRecord
from rocescope.sim.topology import Topology

if TYPE_CHECKING:
    from rocescope.sim.incidents import World

F64 = npt.NDArray[np.float64]

__all__ = [
    "LAUNCH_S",
    "NVLINK_BYTES_PER_S",
    "CollectiveTimer",
    "Communicator",
    "RankProcess",
    "communicators",
    "floor_s",
    "iterations_per_step",
    "qp_owners_arrow",
    "waits",
]

#: Kernel launch and the first/last chunk's latency of a collective.
LAUNCH_S = 30e-6
#: Intra-node reduction bandwidth (NVLink 4 per GPU, as NCCL's bus bandwidth in a DGX H100 measures it).
NVLINK_BYTES_PER_S = 360e9
#: Inspector's dump thread writes a completed collective within this (its NCCL_INSPECTOR_DUMP_THREAD_INTERVAL).
DUMP_LAG_S = 1e-3
#: Ranks do not start their kernels at exactly the same microsecond.
JITTER_S = 4e-6
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def floor_s(message_bytes: int) -> float:
    """A collective's time with no network: launch plus the intra-node reduction."""
    return LAUNCH_S + message_bytes / NVLINK_BYTES_PER_S


@dataclass(frozen=True)
class RankProcess:
    """One rank: the process driving one GPU and its NIC."""

    rank: int
    host: str
    pid: int
    netdev: str
    rail: int


@dataclass(frozen=True)
class Communicator:
    """A job's communicator: its id as Inspector prints it, its ranks, and how its phases are fused."""

    job_id: str
    comm_id: str
    ranks: tuple[RankProcess, ...]
    nodes: int
    message_bytes: int
    iterations_per_step: int
    #: the NCCL function Inspector names (`ncclAlltoAll` is a collective since NCCL 2.28)
    op: str = "AllReduce"
    #: collectives NCCL numbers between two recorded ones that Inspector never records (`Collectives`)
    unrecorded_per_step: int = 0

    @property
    def floor_s(self) -> float:
        return floor_s(self.message_bytes)


def iterations_per_step(job: Job, topology: Topology, step_s: float) -> int:
    """Phases per record: about `step_s` of fabric time at the job's nominal pace (compute plus its all-reduce
    at line rate)."""
    per_rank = fabric_bytes_per_rank(job)
    period = job.spec.compute_ms / 1000 + per_rank / (topology.spec.host_speed_gbps * 1e9 / 8)
    return max(1, round(step_s / period)) if period > 0 else 1


def _pid(job: Job, host: str) -> int:
    """torchrun's first worker pid on `host` (its local ranks follow)."""
    return 1000 + stable_hash(f"{job.job_id}@{host}") % 4_000_000


def communicators(world: World, spec: Collectives | None = None) -> list[Communicator]:
    """One communicator per placed training job, its ranks in rank order."""
    spec = spec or world.scenario.collectives
    out = []
    for job in world.training_jobs:
        ranks = tuple(
            RankProcess(ep.rank, ep.nic.host, _pid(job, ep.nic.host) + job.rails.index(ep.nic.rail), ep.nic.netdev,
                        ep.nic.rail)
            for ep in job.endpoints(world.topology)
        )  # fmt: skip
        comm = stable_hash(f"{world.scenario.seed}/{job.job_id}") << 32 | stable_hash(f"{job.job_id}/comm")
        lo, hi = spec.unrecorded_per_step
        unrecorded = lo + stable_hash(f"{world.scenario.seed}/{job.job_id}/unrecorded") % (hi - lo + 1)
        out.append(
            Communicator(
                job.job_id, f"0x{comm:x}", ranks, len(job.pods), job.spec.message_bytes,
                iterations_per_step(job, world.topology, spec.step_s),
                "AlltoAll" if job.spec.collective == "alltoall" else "AllReduce", unrecorded,
            )
        )  # fmt: skip
    return out


#: what eBPF names the process at a QP's end outside the training ranks (a checkpoint restore, a data loader)
BACKGROUND_COMM = "python3"


def qp_owners_arrow(world: World) -> pa.Table:
    """`qp_owners` of every queue pair the engine runs, at both ends, seen at the run's start: eBPF (or `rdma
    resource show qp`) on a monitored host sees each process's QPs, not only the training ranks'. A training
    rank's process (pid, `pt_main_thread`), its pod (`pod:<uid>`) and job; a placed background job's worker as
    that job's; traffic the scheduler never placed (storage readers) from processes of no job."""
    owner: dict[tuple[str, str, int], tuple[int, str, str, str]] = {}  # (job, host, rail) -> (pid, comm, cgroup, job)
    comms = {c.job_id: c for c in communicators(world)}
    for job in world.training_jobs:
        pods = {p.host: p for p in job.pods}
        for rp in comms[job.job_id].ranks:
            cgroup = f"pod:{pod_uid(job, pods[rp.host])}"
            owner[(job.job_id, rp.host, rp.rail)] = (rp.pid, "pt_main_thread", cgroup, job.job_id)
    jobs = {j.job_id: j for j in world.jobs}

    def owned(job_id: str, host: str, rail: int) -> tuple[int, str, str, str]:
        hit = owner.get((job_id, host, rail))
        if hit is not None:
            return hit
        job = jobs.get(job_id)
        pod = next((p for p in job.pods if p.host == host), None) if job is not None else None
        if job is not None and pod is not None:
            return _pid(job, host) + rail, BACKGROUND_COMM, f"pod:{pod_uid(job, pod)}", job_id
        return 1000 + stable_hash(f"{job_id}@{host}") % 4_000_000 + rail, BACKGROUND_COMM, "system.slice", ""

    rows: list[tuple[str, str, int, int, str, str, int, int, str, str, str]] = []
    for f in world.engine.flows:
        for here, there, qpn, peer_qpn in ((f.src, f.dst, f.src_qpn, f.dst_qpn), (f.dst, f.src, f.dst_qpn, f.src_qpn)):
            pid, comm, cgroup, jid = owned(f.job_id, here.host, here.rail)
            rows.append(
                (here.host, here.rdma_dev, qpn, peer_qpn, there.ip, there.gid, f.udp_sport, pid, comm, cgroup, jid)
            )
    cols: list[Sequence[object]] = list(zip(*rows, strict=True)) if rows else [[] for _ in range(11)]
    table = pa.table(
        {
            "host": pa.array(cols[0], pa.string()),
            "rdma_dev": pa.array(cols[1], pa.string()),
            "qpn": pa.array(cols[2], pa.uint32()),
            "dest_qpn": pa.array(cols[3], pa.uint32()),
            "dest_ip": pa.array(cols[4], pa.string()),
            "dest_gid": pa.array(cols[5], pa.string()),
            "udp_sport": pa.array(cols[6], pa.uint16()),
            "pid": pa.array(cols[7], pa.uint32()),
            "comm": pa.array(cols[8], pa.string()),
            "cgroup": pa.array(cols[9], pa.string()),
            "job_id": pa.array(cols[10], pa.string()),
            "seen_at": pa.array([world.start] * len(rows), pa.timestamp("ns", tz="UTC")),
        }
    )
    return pa.Table.from_batches([conform("qp_owners", table)])


def waits(log: Sequence[ComputeChange], job_id: str, prev_end: float, ranks: int) -> F64:
    """Seconds each rank waits in the collective that follows an iteration ending at `prev_end`: the slowest
    rank's extra compute minus its own (the extras in force when that iteration ended)."""
    extra: dict[int, float] = {}
    for change in log:
        if change.job_id == job_id and change.at_s < prev_end:
            extra = change.extra_s
    out = np.zeros(ranks)
    if extra:
        slowest = max(extra.values())
        out[:] = slowest
        for r, d in extra.items():
            if 0 <= r < ranks:
                out[r] = slowest - d
    return out


@dataclass
class _Pending:
    """A job's phases since its last record, and what the next record needs."""

    phases: list[IterationRecord] = field(default_factory=list)
    waits: list[F64] = field(default_factory=list)
    prev_end: float | None = None
    sequence: int = 0


class CollectiveTimer:
    """Turns the engine's completed iterations into Inspector records, step by step (`take` after each poll)."""

    def __init__(self, world: World, skew_s: Mapping[str, float] | None = None) -> None:
        self.world = world
        self.spec = world.scenario.collectives
        self.comms = {c.job_id: c for c in communicators(world, self.spec)}
        self.skew_s = dict(skew_s or {})
        self._pending = {j: _Pending() for j in self.comms}
        self._cursor = 0
        self._rng = np.random.default_rng([world.scenario.seed & 0xFFFFFFFF, 0x1CC1])
        self.records = 0

    def take(self) -> list[InspectorRecord]:
        """Records of the steps completed since the last call. A step still being fused when the run ends is
        never written: a record stands for a whole step, and a shorter one would be an operation of a size the
        job never runs, where Inspector would have written each of its collectives (a job that a storm slowed
        to a few collectives a minute then shows as silent until the end, as one hung does)."""
        if not self.spec.enabled:
            return []
        eng = self.world.engine
        new = eng.iterations[self._cursor :]
        self._cursor = len(eng.iterations)
        out: list[InspectorRecord] = []
        for it in new:
            comm = self.comms.get(it.job_id)
            if comm is None:
                continue
            p = self._pending[it.job_id]
            n = len(comm.ranks)
            wait = np.zeros(n) if p.prev_end is None else waits(eng.compute_log, it.job_id, p.prev_end, n)
            p.phases.append(it)
            p.waits.append(wait)
            p.prev_end = it.end_s
            if len(p.phases) >= comm.iterations_per_step:
                out += self._records(comm, p)
        self.records += len(out)
        return out

    def _records(self, comm: Communicator, p: _Pending) -> list[InspectorRecord]:
        start = self.world.start
        base_us = (start - EPOCH) // dt.timedelta(microseconds=1)
        ends = np.array([it.end_s for it in p.phases])
        starts = np.array([it.start_s for it in p.phases])
        wait = np.vstack(p.waits)  # (phases, ranks)
        fl = comm.floor_s
        exec_s = (wait + (ends - starts)[:, None] + fl).sum(axis=0)
        n = len(comm.ranks)
        exec_s = exec_s + self._rng.uniform(0.0, JITTER_S, n)
        issued = starts[0] - wait[0]  # each rank issues its first collective when its compute is done
        stop = ends[-1] + fl
        lag = self._rng.uniform(0.0, DUMP_LAG_S, n)
        nbytes = comm.message_bytes * len(p.phases)
        p.sequence += 1 + comm.unrecorded_per_step
        out = []
        for k, rp in enumerate(comm.ranks):
            skew = self.skew_s.get(rp.host, 0.0)
            t_issue = base_us + round((issued[k] + skew) * 1e6)
            t_stop = base_us + round((stop + skew) * 1e6)
            out.append(
                InspectorRecord(
                    host=rp.host, pid=rp.pid, communicator=comm.comm_id, rank=rp.rank, ranks=n, nodes=comm.nodes,
                    op=comm.op, sequence=p.sequence, bytes=nbytes, exec_time_us=max(1, round(exec_s[k] * 1e6)),
                    dumped_at_us=t_stop + math.ceil(lag[k] * 1e6),
                    trace=(t_issue, t_issue + 5, ((t_issue + round(LAUNCH_S * 1e6 / 2), t_stop),))
                    if self.spec.verbose else None,
                )
            )  # fmt: skip
        p.phases, p.waits = [], []
        return out
