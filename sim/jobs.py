"""Training jobs on the fabric, Kubernetes style, and the RoCE flows their collectives put on the wire.

A job is a PyTorchJob: pods `<name>-worker-K` (node rank K), one per host, each driving one GPU per
rail it uses with the NIC of that rail (GPU i <-> mlx5_i, as on rail-optimized servers). Global rank
= K * rails_used + position of the rail, like torchrun's `node_rank * nproc_per_node + local_rank`.

Traffic is described per iteration, not simulated here: all-reduce per rail, as a ring (rank K's NIC
on rail r sends to rank K+1's NIC on the same rail, wrapping around) or as NCCL's double binary tree
(`tree_links`), or the all-to-all of mixture-of-experts expert parallelism (every rank to every other on its
rail: fan-in n-1 at every NIC), plus optional cross-rail flows.
Each flow is one RC queue pair with a QPN at each end; its UDP source port is what Linux derives from
the QPN pair, so ECMP sees the entropy real NCCL traffic has. All of it follows from the seed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import pyarrow as pa

from rocescope.errors import SimError
from rocescope.pipeline.batch import conform
from rocescope.sim.roce import FiveTuple, QpAllocator, stable_hash, udp_sport
from rocescope.sim.topology import Nic, Topology

Placement = Literal["contiguous", "scattered"]
Collective = Literal["ring", "tree", "alltoall"]
COLLECTIVES: tuple[Collective, ...] = ("ring", "tree", "alltoall")
FlowKind = Literal["ring", "tree", "alltoall", "cross_rail"]

MiB = 1 << 20
#: `valid_to` of a placement that is still running.
FAR_FUTURE = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class JobSpec:
    """What a user submits: a name, how many hosts, and the shape of its communication."""

    name: str
    hosts: int
    namespace: str = "default"
    #: Rails (NICs/GPUs per host) the job uses; None: all rails of its hosts.
    rails: tuple[int, ...] | None = None
    #: All-reduce payload per GPU per iteration (the gradient bucket size summed over buckets).
    message_bytes: int = 256 * MiB
    #: Compute time between communication phases (for the time-stepped traffic model).
    compute_ms: float = 100.0
    #: QPs per ring connection (NCCL_IB_QPS_PER_CONNECTION): more QPs, more ECMP entropy.
    qps_per_connection: int = 1
    #: Cross-rail flows (e.g. without PXN): how many, and bytes each carries per iteration.
    cross_rail_flows: int = 0
    cross_rail_bytes: int = 8 * MiB
    #: The collective across pods (per rail): NCCL's ring or double binary tree all-reduce, or an all-to-all.
    collective: Collective = "ring"

    def __post_init__(self) -> None:
        for label in (self.name, self.namespace):
            if not _DNS_LABEL.match(label) or len(label) > 50:
                raise SimError(f"{label!r} is not a valid Kubernetes name (DNS-1123 label, <= 50 chars)")
        if self.hosts < 1 or self.qps_per_connection < 1:
            raise SimError("a job needs at least one host and one QP per connection")
        if self.message_bytes < 0 or self.cross_rail_flows < 0 or self.cross_rail_bytes < 0 or self.compute_ms < 0:
            raise SimError("job sizes and times cannot be negative")
        if self.rails is not None and (not self.rails or len(set(self.rails)) != len(self.rails)):
            raise SimError(f"rails must be distinct and non-empty, got {self.rails}")
        if self.collective not in COLLECTIVES:
            raise SimError(f"collective must be one of {', '.join(COLLECTIVES)}, got {self.collective!r}")

    @property
    def job_id(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Pod:
    """One worker pod: its node rank (PET_NODE_RANK) and the host it was scheduled on."""

    name: str
    rank: int
    host: str


class Endpoint(NamedTuple):
    """One GPU rank of a job and the NIC it communicates through."""

    pod: Pod
    rank: int
    nic: Nic


@dataclass(frozen=True)
class Job:
    """A placed job: its spec, its pods in node-rank order and the rails it uses."""

    spec: JobSpec
    pods: tuple[Pod, ...]
    rails: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def namespace(self) -> str:
        return self.spec.namespace

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(p.host for p in self.pods)

    @property
    def world_size(self) -> int:
        return len(self.pods) * len(self.rails)

    def rank(self, pod_rank: int, rail: int) -> int:
        """Global rank of the GPU on `rail` in pod `pod_rank`."""
        return pod_rank * len(self.rails) + self.rails.index(rail)

    def endpoints(self, topology: Topology) -> list[Endpoint]:
        """Every rank with its pod and NIC, in rank order."""
        return [
            Endpoint(pod, self.rank(pod.rank, rail), topology.nic(pod.host, rail))
            for pod in self.pods
            for rail in self.rails
        ]


def place_jobs(
    topology: Topology, specs: Sequence[JobSpec], placement: Placement = "contiguous", seed: int = 0
) -> list[Job]:
    """Schedule jobs on distinct hosts, in the order given.

    contiguous: each job takes the next free hosts in name order (a topology-aware scheduler).
    scattered: hosts in a seeded random order, ranks following the order the scheduler picked them.
    """
    ids = [s.job_id for s in specs]
    if len(set(ids)) != len(ids):
        raise SimError(f"job ids must be unique, got {ids}")
    needed = sum(s.hosts for s in specs)
    if needed > len(topology.hosts):
        raise SimError(f"jobs need {needed} hosts, the fabric has {len(topology.hosts)}")
    names = [h.name for h in topology.hosts]
    if placement == "scattered":
        names = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    elif placement != "contiguous":
        raise SimError(f"unknown placement {placement!r}")
    jobs: list[Job] = []
    free = iter(names)
    for spec in specs:
        rails = spec.rails if spec.rails is not None else tuple(range(topology.spec.rails))
        bad = [r for r in rails if not 0 <= r < topology.spec.rails]
        if bad:
            raise SimError(f"{spec.job_id}: rails {bad} do not exist on this fabric")
        pods = tuple(Pod(f"{spec.name}-worker-{k}", k, next(free)) for k in range(spec.hosts))
        jobs.append(Job(spec, pods, tuple(rails)))
    return jobs


def endpoints_arrow(
    jobs: Sequence[Job], topology: Topology, valid_from: dt.datetime, valid_to: dt.datetime = FAR_FUTURE
) -> pa.Table:
    """The `endpoints` stream (rocescope.schema) for the jobs, conformed: one row per rank and NIC."""
    rows = [(job, ep) for job in jobs for ep in job.endpoints(topology)]
    n = len(rows)
    table = pa.table(
        {
            "job_id": [j.job_id for j, _ in rows],
            "job_name": [j.name for j, _ in rows],
            "namespace": [j.namespace for j, _ in rows],
            "pod": [ep.pod.name for _, ep in rows],
            "rank": pa.array([ep.rank for _, ep in rows], pa.int32()),
            "host": [ep.nic.host for _, ep in rows],
            "netdev": [ep.nic.netdev for _, ep in rows],
            "rdma_dev": [ep.nic.rdma_dev for _, ep in rows],
            "ip": [ep.nic.ip for _, ep in rows],
            "gid": [ep.nic.gid for _, ep in rows],
            "valid_from": pa.array([valid_from] * n, pa.timestamp("ns", tz="UTC")),
            "valid_to": pa.array([valid_to] * n, pa.timestamp("ns", tz="UTC")),
        }
    )
    return pa.Table.from_batches([conform("endpoints", table)])


@dataclass(frozen=True)
class Flow:
    """One RC queue pair carrying a job's data from `src` to `dst` every iteration."""

    job_id: str
    kind: FlowKind
    src: Nic
    dst: Nic
    src_rank: int
    dst_rank: int
    src_qpn: int
    dst_qpn: int
    udp_sport: int
    bytes_per_iteration: int

    @property
    def five_tuple(self) -> FiveTuple:
        return FiveTuple(self.src.ip, self.dst.ip, self.udp_sport)


def _connect(
    job: Job,
    kind: FlowKind,
    qps: QpAllocator,
    src: Endpoint,
    dst: Endpoint,
    n_qps: int,
    total_bytes: int,
) -> list[Flow]:
    """The QPs of one connection, `total_bytes` split across them."""
    flows = []
    for q in range(n_qps):
        sq = qps.allocate(src.nic.host, src.nic.rdma_dev)
        dq = qps.allocate(dst.nic.host, dst.nic.rdma_dev)
        share = total_bytes // n_qps + (1 if q < total_bytes % n_qps else 0)
        flows.append(Flow(job.job_id, kind, src.nic, dst.nic, src.rank, dst.rank, sq, dq, udp_sport(sq, dq), share))
    return flows


def ring_flows(job: Job, topology: Topology, qps: QpAllocator) -> list[Flow]:
    """Ring all-reduce per rail: on each rail, node rank K sends to K+1 (mod pods).

    Each rank sends 2(n-1)/n of the message per iteration (reduce-scatter, then all-gather).
    A one-pod job reduces over NVLink and puts nothing on the fabric.
    """
    n = len(job.pods)
    if n < 2:
        return []
    per_rank = 2 * (n - 1) * job.spec.message_bytes // n
    by_key = {(ep.pod.rank, ep.nic.rail): ep for ep in job.endpoints(topology)}
    flows: list[Flow] = []
    for rail in job.rails:
        for k in range(n):
            src, dst = by_key[(k, rail)], by_key[((k + 1) % n, rail)]
            flows += _connect(job, "ring", qps, src, dst, job.spec.qps_per_connection, per_rank)
    return flows


class TreeNode(NamedTuple):
    """One rank's place in a binary tree: its parent and children (-1: none)."""

    parent: int
    child0: int
    child1: int


def btree(nranks: int, rank: int) -> TreeNode:
    """NCCL's binary tree (`ncclGetBtree`): rank 0 is the root with one child; a rank's parent and
    children follow from its lowest set bit, so the tree is balanced whatever `nranks`."""
    bit = 1
    while bit < nranks and not bit & rank:
        bit <<= 1
    if rank == 0:
        return TreeNode(-1, -1, bit >> 1 if nranks > 1 else -1)
    up = (rank ^ bit) | (bit << 1)
    if up >= nranks:
        up = rank ^ bit
    low = bit >> 1
    down0 = -1 if low == 0 else rank - low
    down1 = -1 if low == 0 else rank + low
    while down1 >= nranks:
        low >>= 1
        down1 = -1 if low == 0 else rank + low
    return TreeNode(up, down0, down1)


def dtree(nranks: int, rank: int) -> tuple[TreeNode, TreeNode]:
    """NCCL's double binary tree (`ncclGetDtree`): the binary tree, and a second one that is its
    mirror image (even `nranks`: every rank is a leaf in one tree and an inner node in the other)
    or its shift by one (odd `nranks`)."""
    first = btree(nranks, rank)
    if nranks % 2:
        t = btree(nranks, (rank - 1) % nranks)

        def move(r: int) -> int:
            return -1 if r == -1 else (r + 1) % nranks
    else:
        t = btree(nranks, nranks - 1 - rank)

        def move(r: int) -> int:
            return -1 if r == -1 else nranks - 1 - r

    return first, TreeNode(move(t.parent), move(t.child0), move(t.child1))


def tree_links(nranks: int) -> list[tuple[int, int, int]]:
    """(tree 0 or 1, child, parent) of every edge of the double binary tree over `nranks` ranks."""
    return [(t, r, node.parent) for r in range(nranks) for t, node in enumerate(dtree(nranks, r)) if node.parent >= 0]


def tree_flows(job: Job, topology: Topology, qps: QpAllocator) -> list[Flow]:
    """Double-binary-tree all-reduce per rail over the job's pods (node ranks), as NCCL runs it between
    nodes: each tree carries half the message, reduced up to its root (child -> parent) and broadcast
    back down (parent -> child), so every tree edge has one flow each way with half the message.
    """
    n = len(job.pods)
    if n < 2:
        return []
    half = job.spec.message_bytes // 2
    by_key = {(ep.pod.rank, ep.nic.rail): ep for ep in job.endpoints(topology)}
    flows: list[Flow] = []
    for rail in job.rails:
        for _tree, child, parent in tree_links(n):
            c, p = by_key[(child, rail)], by_key[(parent, rail)]
            flows += _connect(job, "tree", qps, c, p, job.spec.qps_per_connection, half)
            flows += _connect(job, "tree", qps, p, c, job.spec.qps_per_connection, half)
    return flows


def alltoall_flows(job: Job, topology: Topology, qps: QpAllocator) -> list[Flow]:
    """All-to-all per rail (mixture-of-experts token dispatch, PXN keeping it on the rail): every node rank sends
    1/n of the message to every other, all at once, so each NIC receives from n-1 peers together.
    """
    n = len(job.pods)
    if n < 2:
        return []
    per_peer = job.spec.message_bytes // n
    by_key = {(ep.pod.rank, ep.nic.rail): ep for ep in job.endpoints(topology)}
    flows: list[Flow] = []
    for rail in job.rails:
        for a in range(n):
            for b in range(n):
                if a != b:
                    flows += _connect(job, "alltoall", qps, by_key[(a, rail)], by_key[(b, rail)], 1, per_peer)
    return flows


def fabric_share(collective: str, ranks: int) -> float:
    """Bytes each rank puts on the fabric per byte of message, per iteration of its collective (0: one rank)."""
    if ranks < 2:
        return 0.0
    return {"tree": 1.0, "alltoall": (ranks - 1) / ranks}.get(collective, 2 * (ranks - 1) / ranks)


def fabric_bytes_per_rank(job: Job) -> float:
    """Bytes each rank puts on the fabric per iteration of its collective."""
    return fabric_share(job.spec.collective, len(job.pods)) * job.spec.message_bytes


def cross_rail_flows(job: Job, topology: Topology, qps: QpAllocator, seed: int = 0) -> list[Flow]:
    """`spec.cross_rail_flows` flows between different rails of different hosts, drawn from the seed.

    In a rail-optimized fabric these are the only job flows that climb to the spines when each rail
    has one leaf.
    """
    count = job.spec.cross_rail_flows
    if count == 0:
        return []
    if len(job.pods) < 2 or len(job.rails) < 2:
        raise SimError(f"{job.job_id}: cross-rail flows need at least 2 pods and 2 rails")
    rng = np.random.default_rng([seed & 0xFFFFFFFF, stable_hash(job.job_id)])
    by_key = {(ep.pod.rank, ep.nic.rail): ep for ep in job.endpoints(topology)}
    n, rails = len(job.pods), job.rails
    flows: list[Flow] = []
    for _ in range(count):
        a = int(rng.integers(n))
        b = (a + 1 + int(rng.integers(n - 1))) % n
        ra = int(rng.integers(len(rails)))
        rb = (ra + 1 + int(rng.integers(len(rails) - 1))) % len(rails)
        src, dst = by_key[(a, rails[ra])], by_key[(b, rails[rb])]
        flows += _connect(job, "cross_rail", qps, src, dst, 1, job.spec.cross_rail_bytes)
    return flows


def collective_flows(job: Job, topology: Topology, seed: int = 0, qps: QpAllocator | None = None) -> list[Flow]:
    """Every flow of one iteration of `job`: its collective per rail (ring, tree or all-to-all), then cross-rail.

    Pass one `QpAllocator` for all jobs and extra traffic of a scenario so QPNs never collide on a NIC.
    """
    alloc = qps if qps is not None else QpAllocator(seed)
    collective = {"tree": tree_flows, "alltoall": alltoall_flows}.get(job.spec.collective, ring_flows)
    return collective(job, topology, alloc) + cross_rail_flows(job, topology, alloc, seed)
