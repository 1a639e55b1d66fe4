"""The kernel's arrays for one fabric: sized and filled from the topology, jobs and flows, and rewritten
when flows change paths.

`build_net` and `build_state` make the `kernel.Net` (structure and knobs) and `kernel.State` (what
evolves) of `rocescope.sim.kernel`; `build_counters` the cumulative counters. `install_paths` writes
routed paths into them: hops, the ingress port of each hop, the order ports are processed in (a
topological order of the port graph, `processing_order`) and the delayed edges that close cycles
(see "Flows and hops" in `rocescope.sim.engine`).
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import numpy.typing as npt

from rocescope.sim import kernel as K
from rocescope.sim.jobs import Flow, Job
from rocescope.sim.params import EngineParams
from rocescope.sim.topology import Topology

#: 802.1Qbb: one pause frame buys 65535 quanta of 512 bit times.
PAUSE_QUANTA = 65535 * 512


def processing_order(paths: Iterable[Sequence[int]]) -> list[int]:
    """Ports in topological order of the "flow leaves by a, then by b" graph; cycles broken greedily.

    When no port is free of unplaced predecessors, the one with the fewest of them (then the lowest
    id) is placed next: the edges into it from later ports become the delayed edges.
    """
    succ: dict[int, set[int]] = defaultdict(set)
    indeg: dict[int, int] = defaultdict(int)
    nodes: set[int] = set()
    for path in paths:
        nodes.update(path)
        for a, b in itertools.pairwise(path):
            if b not in succ[a]:
                succ[a].add(b)
                indeg[b] += 1
    ready = [n for n in nodes if indeg[n] == 0]
    heapq.heapify(ready)
    placed: set[int] = set()
    order: list[int] = []
    while len(order) < len(nodes):
        if not ready:
            heapq.heappush(ready, min((indeg[n], n) for n in nodes - placed)[1])
        n = heapq.heappop(ready)
        if n in placed:
            continue
        placed.add(n)
        order.append(n)
        for m in succ[n]:
            if m not in placed:
                indeg[m] -= 1
                if indeg[m] == 0:
                    heapq.heappush(ready, m)
    return order


def build_net(
    topology: Topology,
    jobs: Sequence[Job],
    flows: Sequence[Flow],
    params: EngineParams,
    *,
    line: npt.NDArray[np.float64],
    switch_index: Mapping[str, int],
    priorities: npt.NDArray[np.int64],
    hops: int,
) -> K.Net:
    """The fabric's structure for the kernel, paths still empty (`install_paths` fills them); PFC on the
    lossless priority of every switch port."""
    ports = topology.ports
    n_ports, F = len(ports), len(flows)
    job_index = {j.job_id: i for i, j in enumerate(jobs)}
    fjob = np.array([job_index[f.job_id] for f in flows], dtype=np.int64)
    order = np.argsort(fjob, kind="stable")
    jptr = np.searchsorted(fjob[order], np.arange(len(jobs) + 1)).astype(np.int64)
    net = K.Net(
        prm=params.to_array(),
        cap=line.copy(),
        peer=topology.peer_ids.astype(np.int64),
        sw=np.array([switch_index.get(p.device, -1) for p in ports], dtype=np.int64),
        pfc_on=np.zeros((K.NPRIO, n_ports), dtype=np.bool_),
        forced=np.zeros((K.NPRIO, n_ports)),
        err=np.zeros(n_ports),
        refresh=np.array([PAUSE_QUANTA / p.speed_bps * params.pause_refresh_fraction for p in ports]),
        cnp_loss=np.zeros(n_ports),
        cnp_ignore=np.zeros(n_ports, dtype=np.bool_),
        wd=np.zeros((K.NPRIO, n_ports), dtype=np.int64),
        cnp_q=np.full(len(switch_index), -1, dtype=np.int64),
        active=np.zeros(0, np.int64),
        path=np.full((F, hops), -1, np.int64),
        nh=np.ones(F, np.int64),
        prio=priorities,
        delayed=np.zeros((F, hops), np.bool_),
        ingr=np.full((F, hops), -1, np.int64),
        stalled=np.zeros(F, np.bool_),
        rate_limit=np.full(F, K.INF),
        fjob=fjob,
        fbytes=np.array([f.bytes_per_iteration * params.wire_factor for f in flows], dtype=np.float64),
        optr=np.zeros(1, np.int64),
        oport=np.zeros(0, np.int64),
        of=np.zeros(0, np.int64),
        oh=np.zeros(0, np.int64),
        jptr=jptr,
        jflows=order.astype(np.int64),
        jcompute=np.array([j.spec.compute_ms / 1000 for j in jobs], dtype=np.float64),
    )
    switch_port = net.sw >= 0
    net.pfc_on[params.lossless_priority, switch_port] = True
    return net


def build_state(
    jobs: Sequence[Job],
    *,
    n_flows: int,
    hops: int,
    n_ports: int,
    n_switches: int,
    line_src: npt.NDArray[np.float64],
    seed: int,
    stagger: bool,
    record_capacity: int,
) -> K.State:
    """The fabric at rest: empty queues, senders at their line rate (`line_src`), every job in its first
    compute gap (cut at a seeded random point with `stagger`)."""
    F, J = n_flows, len(jobs)
    zf = np.zeros(F)
    zq = np.zeros((K.NPRIO, n_ports))  # per priority, per port: priority-major for contiguous loops
    rng = np.random.default_rng(seed)
    return K.State(
        tick=np.zeros(1, np.int64),
        fine=np.zeros(1, np.bool_),
        hot=np.zeros(1, np.bool_),
        backlog=np.zeros(1),
        qf=np.zeros((F, hops)),
        pend=np.zeros((F, hops)),
        arr=np.zeros((F, hops)),
        dep=np.zeros((F, hops)),
        lost=np.zeros((F, hops)),
        remaining=zf.copy(),
        delivered=zf.copy(),
        tot_sent=zf.copy(),
        tot_delivered=zf.copy(),
        tot_dropped=zf.copy(),
        rc=line_src.copy(),
        rt=line_src.copy(),
        alpha=np.ones(F),
        tstage=zf.copy(),
        bstage=zf.copy(),
        tacc=zf.copy(),
        bacc=zf.copy(),
        cnp_credit=zf.copy(),
        hand_credit=zf.copy(),
        last_cnp=zf.copy(),
        tot_ce=zf.copy(),
        tot_cnp=zf.copy(),
        fdone=zf.copy(),
        frate=zf.copy(),
        qlen=zq.copy(),
        occ=zq.copy(),
        pend_in=zq.copy(),
        used=np.zeros(n_switches),
        xoff=np.zeros((K.NPRIO, n_ports), np.bool_),
        asserted=np.zeros((K.NPRIO, n_ports), np.bool_),
        budget=np.full((K.NPRIO, n_ports), K.INF),
        drain=zq.copy(),
        drain_prev=zq.copy(),
        ret=zq.copy(),
        txq=zq.copy(),
        lostq=zq.copy(),
        markq=zq.copy(),
        acc_tx=zq.copy(),
        acc_lost=zq.copy(),
        acc_mark=zq.copy(),
        pmark=zq.copy(),
        lshare=zq.copy(),
        qwm=zq.copy(),
        kabove=np.zeros(n_ports),
        krun=np.zeros(n_ports),
        krun_end=np.full(n_ports, -1.0),
        krun_max=np.zeros(n_ports),
        pgwm=zq.copy(),
        bufwm=np.zeros(n_switches),
        rsum=np.zeros(n_ports),
        rratio=np.zeros(n_ports),
        load=np.zeros(n_ports),
        tot_q=np.zeros(K.NPRIO),
        want=np.zeros(K.NPRIO),
        serve=np.zeros(K.NPRIO),
        jphase=np.full(J, K.COMPUTE, np.int64),
        # jobs start at a seeded offset within their first compute gap (not in lock step), or at once
        jend=np.array([rng.uniform(0, j.spec.compute_ms / 1000) if stagger else 0.0 for j in jobs]),
        jstart=np.zeros(J),
        jiter=np.zeros(J, np.int64),
        it_job=np.zeros(record_capacity, np.int64),
        it_start=np.zeros(record_capacity),
        it_end=np.zeros(record_capacity),
        it_n=np.zeros(1, np.int64),
        quiet=np.zeros(1, np.bool_),
        stats=np.zeros(3, np.int64),
        fact=np.zeros(F, np.bool_),
        fback=zf.copy(),
        mark=np.zeros(n_ports, np.int64),
        rel=np.zeros(2 * n_ports, np.int64),
        watch=np.zeros(n_ports, np.int64),
        nwatch=np.zeros(1, np.int64),
        stamp=np.zeros(1, np.int64),
    )


def build_counters(n_ports: int) -> tuple[npt.NDArray[np.float64], K.Counters]:
    """The cumulative counters as one flat array (snapshots index it) and the kernel's views of it."""
    flat = np.zeros(n_ports * K.NPC + n_ports * K.NPRIO * K.NQC)
    views = K.Counters(
        pc=flat[: n_ports * K.NPC].reshape(n_ports, K.NPC),
        pq=flat[n_ports * K.NPC :].reshape(n_ports, K.NPRIO, K.NQC),
    )
    return flat, views


def install_paths(
    net: K.Net, st: K.State, paths: Sequence[Sequence[int]], unrouted: Sequence[bool]
) -> tuple[K.Net, K.State]:
    """Write the paths (an unrouted flow's is its source port alone) into the kernel arrays: hops, ingress
    ports, processing order and delayed edges; arrays grow when a path is longer than any before."""
    H = max([2, *(len(p) for p in paths)])
    if net.path.shape[1] != H:
        net, st = resize_hops(net, st, H)
    order = processing_order(paths)
    pos = {port: k for k, port in enumerate(order)}
    net.path.fill(-1)
    net.ingr.fill(-1)
    net.delayed.fill(False)
    entries: list[tuple[int, int, int]] = []
    for f, path in enumerate(paths):
        net.path[f, : len(path)] = path
        net.nh[f] = len(path)
        net.stalled[f] = unrouted[f]
        for h, port in enumerate(path):
            entries.append((pos[port], f, h))
            if h > 0:
                net.ingr[f, h] = net.peer[path[h - 1]]
                net.delayed[f, h] = pos[path[h - 1]] > pos[port]
    entries.sort()
    arr = np.array(entries, dtype=np.int64).reshape(-1, 3)
    optr = np.searchsorted(arr[:, 0], np.arange(len(order) + 1)).astype(np.int64)
    net = net._replace(optr=optr, oport=np.array(order, dtype=np.int64), of=arr[:, 1].copy(), oh=arr[:, 2].copy())
    # bytes in flight on an edge that is no longer delayed land in the queue they were heading to
    landed = (st.pend != 0) & ~net.delayed
    st.qf[landed] += st.pend[landed]
    st.pend[landed] = 0.0
    return net, st


def resize_hops(net: K.Net, st: K.State, H: int) -> tuple[K.Net, K.State]:
    """The per-(flow, hop) arrays widened (or narrowed) to `H` hops, their contents kept."""

    def grow(a: npt.NDArray[np.generic], fill: object) -> npt.NDArray[np.generic]:
        out = np.full((a.shape[0], H), fill, dtype=a.dtype)
        w = min(H, a.shape[1])
        out[:, :w] = a[:, :w]
        return out

    net = net._replace(path=grow(net.path, -1), delayed=grow(net.delayed, False), ingr=grow(net.ingr, -1))
    st = st._replace(
        qf=grow(st.qf, 0.0), pend=grow(st.pend, 0.0), arr=grow(st.arr, 0.0), dep=grow(st.dep, 0.0),
        lost=grow(st.lost, 0.0),
    )  # fmt: skip
    return net, st
