"""The dynamic fabric: a time-stepped fluid model of queues, PFC, ECN and DCQCN, with device counters.

Time
----
The issue asks for sub-second queue dynamics over 10 minutes of fabric time on a laptop. A packet
or event model of a 400G fabric is ~10^7 events per link-second; a fluid model costs the same per
step whatever the load. The step is compiled with numba (`rocescope.sim.kernel`). Byte counts are
fractional inside (fluid); counters are reported in whole units.

The step adapts (a change from a fixed 1 ms step, for the reason below):

* `dt_s` (1 ms) while the fabric is calm: at line rate without contention a millisecond is exact.
* `fine_dt_s` (50 us, the CNP interval) for the next millisecond whenever any queue was congested
  in the last one (CE marks, PFC holding bytes back, queues growing or draining) or the senders'
  rates would overload a port. DCQCN is a control loop of tens of microseconds: run at 1 ms, every
  sender overshoots for a whole millisecond, builds megabytes of queue, then takes up to 20 CNPs
  in a row and collapses; a 2:1 incast then used ~40% of the bottleneck instead of ~98%.
* Whole milliseconds with nothing on the wire and nothing paused are skipped (compute gaps).

Flows and hops
--------------
Every `Flow` (one RC QP) has its path as egress port ids (`Ecmp.route_ports`, or a forced route),
stored as an (F, H) array. Per step, egress ports are processed once each, in a topological order
of the port graph (edge a -> b when some flow leaves by a and then by b): what hop h-1 sends in a
step arrives at hop h in the same step, so a transfer crosses the fabric without artificial
per-hop latency. When the graph has a cycle (forced loops: the PFC deadlock scenario), the edges
that close it are *delayed*: bytes sent on them arrive one step later (they are "in flight").
This improves on a one-step-per-hop pipeline, which would add a step of latency per hop to every
transfer and every control loop, and still handles arbitrary (cyclic) paths.

One egress port, one step: arrivals per priority come from the upstream hops; the port serves
`min(capacity share, backlog + arrivals)`; priorities share the line rate with equal weights
(DWRR), each capped by the PFC budget of that priority (below); every flow gets the same fraction
of what it has there (fluid FIFO); the rest stays queued per flow and hop. A NIC egress holds no
queue: what it cannot send stays in host memory (the QP's remaining bytes).

Traffic: jobs iterate. A communication phase starts every flow of the job with its
`bytes_per_iteration` (wire bytes: payload plus headers); the phase ends when every flow has
delivered them; then a compute gap of `compute_ms`. Senders offer `min(line rate, DCQCN rate)`
while they have bytes left. All flows run concurrently (the ring's 2(n-1) lock-step rounds, or a
tree's pipelined reduce and broadcast, are folded into one transfer per flow: the slowest flow gates
the iteration, as in NCCL). The
completed iterations (start, end) per job are recorded: slowdowns under incidents show there.

Buffers and PFC
---------------
A switch has one shared buffer (`buffer_bytes`). Bytes queued at its egress ports are also
accounted to the ingress port they came in by (the peer of the flow's previous egress port): that
is the ingress priority group (PG) occupancy PFC acts on. A lossless PG's XOFF threshold is dynamic,
`pfc_alpha x free shared buffer` (SONiC/SAI dynamic thresholds), XON is `xon_offset` below it.

A port moves more bytes in a step (2.5 MB at 400G in 50 us, 50 MB in 1 ms) than a PG may hold, so
PFC is modeled as its fluid average rather than as one on/off decision per step:

* Within the step, a PG never exceeds XOFF: after the egress port is served, bytes of this step's
  arrivals that would overflow a PFC-protected PG are *held upstream* (they never left the previous
  hop: they go back into its queue, cascading further up while that PG overflows too, and into
  host memory at the NIC). Bytes that merely cross an uncongested switch are not held back.
* A PG that reached XOFF stays in XOFF until it falls below XON. While it does, its upstream port
  may send on that priority only what keeps the PG at XOFF: `XOFF - occupancy + last step's drain`
  bytes. The budget applies to *all* the upstream port's traffic on the priority: head-of-line
  blocking, victim flows, pause trees spreading upstream and deadlocks follow from it.
* While XOFF, the link is paused for the part of the step it did not transmit:
  `tau = dt - bytes sent / line rate` (the on/off duty cycle). That is added to the pause duration
  of both ends (`pfc_tx_pause_duration_us` at the congested ingress, `pfc_rx_pause_duration_us` at
  its peer), and pause frames are counted at one per refresh interval (half the 65535-quanta pause
  time at the port's speed) plus one per new episode.
* A storm knob makes a port (a NIC or a switch port) assert pause for a fraction of every step
  regardless of its buffers (a stalled receiver, a stuck NIC): its peer's capacity on that
  priority shrinks accordingly.

Drops happen only where the real fabric drops: on a lossy priority (egress queue tail drop above
`lossy_alpha x free buffer`) and on a lossless priority whose PFC is disabled on the ingress port
(PG overflow: `rx_discards`, `pg_dropped_packets`). A dropped RoCE packet is retransmitted by the
sender and counted as `out_of_sequence` at the receiver and `packet_seq_err` at the sender (one
per lost packet: go-back-N's extra resends are not modeled). A degraded link corrupts a fraction of
its frames (`rx_fcs_errors` at the receiving port), handled the same way.

ECN, CNPs and DCQCN
-------------------
The lossless egress queue marks with RED on the step's mean occupancy: probability 0 below Kmin,
rising linearly to Pmax at Kmax, 1 above. A flow's CE fraction over its path is
`1 - prod(1 - p_hop)`. The receiver NIC (notification point) counts the CE packets
(`np_ecn_marked_roce_packets`) and sends at most one CNP per QP per `cnp_interval`: for m marked
packets in a step, `W (1 - exp(-m / W))` CNPs with `W = dt / cnp_interval`, emitted as whole CNPs
through a per-flow remainder. The sender (reaction point) handles them (`rp_cnp_handled`) unless
the CNP-loss knob of that NIC drops a fraction (sent but never handled; optionally counted as
`rp_cnp_ignored`).

DCQCN (Zhu et al., SIGCOMM 2015) per QP: each handled CNP cuts `RT = RC; RC *= 1 - alpha/2;
alpha = (1-g) alpha + g` and restarts the increase stages; alpha decays by `(1-g)` per alpha period
(K) without CNP; rate-increase events (one per timer period T, one per B bytes sent) run fast
recovery `RC = (RT + RC)/2` for F stages, then additive (`RT += R_AI`) and hyper (`RT += i R_HAI`)
increase. Within a step the increase events are spread evenly and the sender offers the step's
mean rate; CNPs of the step cut at its end (the CNP round trip is folded into the step).

Counters
--------
Cumulative per port and per priority, as devices count them: bytes and packets (wire bytes,
packets = bytes / full-MTU frame), pause frames and durations per priority, ECN marks per egress
queue, drops, CNPs; gauges: queue occupancy, queue and PG watermarks (peak since the last read:
a snapshot resets them), shared-buffer watermark, "queue paused", link up, speed. `reboot(device)`
resets a device's counters to 0. `snapshot(ts)` returns the `counters` stream (SONiC names for
switches, mlx5 ethtool and RDMA names for NICs; see `rocescope.sim.counters`).

Simplifications (on purpose)
----------------------------
Per-flow FIFO shares are proportional (a fluid queue), so a flow's last bytes behind a persistent
queue drain geometrically; an iteration ends when every flow has less than one packet left.
ACKs, CNP bytes and the reverse direction of RC traffic are not put on the wire (the packet mirror,
`rocescope.sim.mirror`, samples ACKs and CNPs from the per-flow totals, `flow_totals`). When a flow is
rerouted, its bytes queued past the point where the paths diverge are dropped if their port went
down, else delivered at once. PFC reacts and CNPs return within the step (real: microseconds). The
PFC headroom is not modeled (holding upstream is exact), so `pg_headroom` counters are not reported.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocescope.errors import NoRouteError, SimError
from rocescope.sim import kernel as K
from rocescope.sim.counters import SnapshotPlan
from rocescope.sim.ecmp import Ecmp
from rocescope.sim.jobs import Flow, Job
from rocescope.sim.params import EngineParams
from rocescope.sim.topology import Port, Topology

DEFAULT_START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
#: 802.1Qbb: one pause frame buys 65535 quanta of 512 bit times.
PAUSE_QUANTA = 65535 * 512

PortRef = Port | tuple[str, str] | int
FlowRef = Flow | int
PollCallback = Callable[[dt.datetime, "Engine"], None]


class IterationRecord(NamedTuple):
    """One completed training iteration: communication phase start to its end (compute follows)."""

    job_id: str
    iteration: int
    start_s: float
    end_s: float

    @property
    def comm_s(self) -> float:
        return self.end_s - self.start_s


class FlowTotals(NamedTuple):
    """Cumulative per-flow packet counts (float: the model is fluid) and each flow's switch hops now."""

    delivered: npt.NDArray[np.float64]
    ce_marked: npt.NDArray[np.float64]
    cnps: npt.NDArray[np.float64]
    switch_hops: npt.NDArray[np.int64]


class ByteBalance(NamedTuple):
    """Where every byte a sender put on the wire is: sent = delivered + dropped + queued + in_flight."""

    sent: float
    delivered: float
    dropped: float
    queued: float
    in_flight: float

    @property
    def error(self) -> float:
        return self.sent - self.delivered - self.dropped - self.queued - self.in_flight


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


class Engine:
    """Runs the fluid model over a topology, jobs and their flows; incident knobs; counter snapshots.

    Knobs take effect at the current time, or at `start` (seconds of fabric time) and revert at
    `end` when given, so a scenario can be written as a list of calls before `run`.

    Jobs begin with a compute gap: with `stagger` each job's first one is cut at a seeded random
    point, so jobs do not communicate in lock step; without it every job communicates at once.
    """

    def __init__(
        self,
        topology: Topology,
        jobs: Sequence[Job],
        flows: Sequence[Flow],
        ecmp: Ecmp | None = None,
        params: EngineParams | None = None,
        seed: int = 0,
        start: dt.datetime = DEFAULT_START,
        flow_priorities: Sequence[int] | None = None,
        stagger: bool = True,
        record_capacity: int = 1 << 16,
    ) -> None:
        self.topology = topology
        self.jobs = list(jobs)
        self.flows = list(flows)
        self.params = params or EngineParams()
        self.seed = seed
        self.start = start
        self.ecmp = ecmp or Ecmp(topology)
        prm = self.params
        self._dt = prm.dt_s
        self._ratio = prm.fine_steps
        self._tick = prm.dt_s / prm.fine_steps
        job_index = {j.job_id: i for i, j in enumerate(self.jobs)}
        if len(job_index) != len(self.jobs):
            raise SimError("job ids must be unique")
        unknown = {f.job_id for f in self.flows} - set(job_index)
        if unknown:
            raise SimError(f"flows of unknown jobs: {sorted(unknown)}")
        if flow_priorities is not None and len(flow_priorities) != len(self.flows):
            raise SimError("flow_priorities needs one priority per flow")
        self._flow_index = {f: i for i, f in enumerate(self.flows)}

        ports = topology.ports
        n_ports = len(ports)
        self._sw_index = {d.name: i for i, d in enumerate(topology.switches)}
        self._line = np.array([prm.line_rate(p.speed_bps) for p in ports])
        self._down: set[int] = set()
        self._down_pairs: set[tuple[str, str]] = set()
        self._forced_routes: dict[int, list[int]] = {}
        self._storms: dict[tuple[int, int], float] = {}
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.iterations: list[IterationRecord] = []
        self._iter_counts = [0] * len(self.jobs)

        F = len(self.flows)
        prio = np.full(F, prm.lossless_priority, np.int64)
        if flow_priorities is not None:
            prio[:] = flow_priorities
            if ((prio < 0) | (prio > 7)).any():
                raise SimError("flow priorities must be 0..7")
        fjob = np.array([job_index[f.job_id] for f in self.flows], dtype=np.int64)
        order = np.argsort(fjob, kind="stable")
        jptr = np.searchsorted(fjob[order], np.arange(len(self.jobs) + 1)).astype(np.int64)
        self._paths: list[list[int] | None] = [self._route(f) for f in range(F)]
        H = max([2, *(len(p) for p in self._paths if p is not None)])
        cap = self._line.copy()
        self._net = K.Net(
            prm=prm.to_array(),
            cap=cap,
            peer=topology.peer_ids.astype(np.int64),
            sw=np.array([self._sw_index.get(p.device, -1) for p in ports], dtype=np.int64),
            pfc_on=np.zeros((K.NPRIO, n_ports), dtype=np.bool_),
            forced=np.zeros((K.NPRIO, n_ports)),
            err=np.zeros(n_ports),
            refresh=np.array([PAUSE_QUANTA / p.speed_bps * prm.pause_refresh_fraction for p in ports]),
            cnp_loss=np.zeros(n_ports),
            cnp_ignore=np.zeros(n_ports, dtype=np.bool_),
            active=np.zeros(0, np.int64),
            path=np.full((F, H), -1, np.int64),
            nh=np.ones(F, np.int64),
            prio=prio,
            delayed=np.zeros((F, H), np.bool_),
            ingr=np.full((F, H), -1, np.int64),
            stalled=np.zeros(F, np.bool_),
            rate_limit=np.full(F, K.INF),
            fjob=fjob,
            fbytes=np.array([f.bytes_per_iteration * prm.wire_factor for f in self.flows], dtype=np.float64),
            optr=np.zeros(1, np.int64),
            oport=np.zeros(0, np.int64),
            of=np.zeros(0, np.int64),
            oh=np.zeros(0, np.int64),
            jptr=jptr,
            jflows=order.astype(np.int64),
            jcompute=np.array([j.spec.compute_ms / 1000 for j in self.jobs], dtype=np.float64),
        )
        switch_port = self._net.sw >= 0
        self._net.pfc_on[prm.lossless_priority, switch_port] = True
        n_sw = len(self._sw_index)
        J = len(self.jobs)
        zf = np.zeros(F)
        zq = np.zeros((K.NPRIO, n_ports))  # per priority, per port: priority-major for contiguous loops
        line_src = np.array([self._line[p[0]] if p else 0.0 for p in self._paths]) if F else zf
        rng = np.random.default_rng(seed)
        self._st = K.State(
            tick=np.zeros(1, np.int64),
            fine=np.zeros(1, np.bool_),
            hot=np.zeros(1, np.bool_),
            backlog=np.zeros(1),
            qf=np.zeros((F, H)),
            pend=np.zeros((F, H)),
            arr=np.zeros((F, H)),
            dep=np.zeros((F, H)),
            lost=np.zeros((F, H)),
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
            qlen=zq.copy(),
            occ=zq.copy(),
            pend_in=zq.copy(),
            used=np.zeros(n_sw),
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
            qwm=zq.copy(),
            pgwm=zq.copy(),
            bufwm=np.zeros(n_sw),
            rsum=np.zeros(n_ports),
            rratio=np.zeros(n_ports),
            load=np.zeros(n_ports),
            tot_q=np.zeros(K.NPRIO),
            want=np.zeros(K.NPRIO),
            serve=np.zeros(K.NPRIO),
            jphase=np.full(J, K.COMPUTE, np.int64),
            # jobs start at a seeded offset within their first compute gap (not in lock step), or at once
            jend=np.array([rng.uniform(0, j.spec.compute_ms / 1000) if stagger else 0.0 for j in self.jobs]),
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
        self._counters = np.zeros(n_ports * K.NPC + n_ports * K.NPRIO * K.NQC)
        self._base = np.zeros_like(self._counters)
        self._cnt = K.Counters(
            pc=self._counters[: n_ports * K.NPC].reshape(n_ports, K.NPC),
            pq=self._counters[n_ports * K.NPC :].reshape(n_ports, K.NPRIO, K.NQC),
        )
        self._plan = SnapshotPlan(topology, prm)
        self._set_active()
        self._install_paths()

    # --- structure

    def _route(self, f: int) -> list[int] | None:
        if f in self._forced_routes:
            return self._forced_routes[f]
        try:
            return [p.id for p in self.ecmp.route_ports(self.flows[f].five_tuple)]
        except NoRouteError:
            return None

    def _set_active(self) -> None:
        prios = {self.params.lossless_priority, *(int(q) for q in np.unique(self._net.prio))}
        prios.update(q for (_, q) in self._storms)
        self._net = self._net._replace(active=np.array(sorted(prios), dtype=np.int64))

    def _install_paths(self) -> None:
        """Write the current paths into the kernel arrays: hops, ingress ports, processing order."""
        net, st = self._net, self._st
        paths = [p if p is not None else [self._src_port(f)] for f, p in enumerate(self._paths)]
        H = max([2, *(len(p) for p in paths)])
        if net.path.shape[1] != H:
            self._resize_hops(H)
            net, st = self._net, self._st
        order = processing_order(paths)
        pos = {port: k for k, port in enumerate(order)}
        net.path.fill(-1)
        net.ingr.fill(-1)
        net.delayed.fill(False)
        entries: list[tuple[int, int, int]] = []
        for f, path in enumerate(paths):
            net.path[f, : len(path)] = path
            net.nh[f] = len(path)
            net.stalled[f] = self._paths[f] is None
            for h, port in enumerate(path):
                entries.append((pos[port], f, h))
                if h > 0:
                    net.ingr[f, h] = net.peer[path[h - 1]]
                    net.delayed[f, h] = pos[path[h - 1]] > pos[port]
        entries.sort()
        arr = np.array(entries, dtype=np.int64).reshape(-1, 3)
        optr = np.searchsorted(arr[:, 0], np.arange(len(order) + 1)).astype(np.int64)
        self._net = net._replace(
            optr=optr, oport=np.array(order, dtype=np.int64), of=arr[:, 1].copy(), oh=arr[:, 2].copy()
        )
        # bytes in flight on an edge that is no longer delayed land in the queue they were heading to
        landed = (st.pend != 0) & ~self._net.delayed
        st.qf[landed] += st.pend[landed]
        st.pend[landed] = 0.0

    def _resize_hops(self, H: int) -> None:
        def grow(a: npt.NDArray[np.generic], fill: object) -> npt.NDArray[np.generic]:
            out = np.full((a.shape[0], H), fill, dtype=a.dtype)
            w = min(H, a.shape[1])
            out[:, :w] = a[:, :w]
            return out

        n = self._net
        self._net = n._replace(path=grow(n.path, -1), delayed=grow(n.delayed, False), ingr=grow(n.ingr, -1))
        s = self._st
        self._st = s._replace(
            qf=grow(s.qf, 0.0), pend=grow(s.pend, 0.0), arr=grow(s.arr, 0.0), dep=grow(s.dep, 0.0),
            lost=grow(s.lost, 0.0),
        )  # fmt: skip

    def _src_port(self, f: int) -> int:
        src = self.flows[f].src
        return self.topology.port(src.host, src.netdev).id

    def _change_paths(self, new: dict[int, list[int] | None]) -> None:
        """Move flows to new paths. Their bytes queued past the divergence point leave the fabric:
        dropped (and retransmitted) where the port is down, delivered otherwise."""
        st, cnt = self._st, self._cnt
        pkt = self.params.packet_wire_bytes
        lossless = self.params.lossless_priority
        for f, path in new.items():
            old = self._paths[f] or [self._src_port(f)]
            cur = path or [self._src_port(f)]
            if old == cur and (path is None) == (self._paths[f] is None):
                continue
            keep = 0
            while keep < min(len(old), len(cur)) and old[keep] == cur[keep]:
                keep += 1
            q = int(self._net.prio[f])
            for h in range(keep, len(old)):
                b = float(st.qf[f, h] + st.pend[f, h])
                st.qf[f, h] = st.pend[f, h] = 0.0
                if b <= 0.0:
                    continue
                port = old[h]
                if port in self._down:
                    st.tot_dropped[f] += b
                    st.remaining[f] += b
                    cnt.pq[port, q, K.Q_DROP_PKTS] += b / pkt
                    cnt.pq[port, q, K.Q_DROP_BYTES] += b
                    cnt.pc[port, K.C_TX_DISCARDS] += b / pkt
                    if q == lossless:
                        cnt.pc[self.topology.peer_ids[old[-1]], K.C_OOS] += b / pkt
                        cnt.pc[old[0], K.C_SEQ_ERR] += b / pkt
                else:
                    st.tot_delivered[f] += b
                    st.delivered[f] += b
            self._paths[f] = path
        self._install_paths()

    def _reroute_all(self) -> None:
        self.ecmp = Ecmp(self.topology, self.ecmp.hashing, down=sorted(self._down_pairs))
        self._change_paths({f: self._route(f) for f in range(len(self.flows))})

    # --- references

    def port_id(self, ref: PortRef) -> int:
        """A port id from a Port, an id, or (device, port name); NIC ports also as (host, 'mlx5_N')."""
        if isinstance(ref, Port):
            return ref.id
        if isinstance(ref, int):
            if not 0 <= ref < len(self.topology.ports):
                raise KeyError(f"no port id {ref}")
            return ref
        device, name = ref
        if name.startswith("mlx5_"):
            name = "eth" + name.removeprefix("mlx5_")
        return self.topology.port(device, name).id

    def flow_id(self, ref: FlowRef) -> int:
        if isinstance(ref, int):
            if not 0 <= ref < len(self.flows):
                raise KeyError(f"no flow {ref}")
            return ref
        return self._flow_index[ref]

    def _prio(self, priority: int | None) -> int:
        q = self.params.lossless_priority if priority is None else priority
        if not 0 <= q <= 7:
            raise SimError(f"priority must be 0..7, got {q}")
        return q

    # --- time and scheduling

    @property
    def now(self) -> float:
        """Fabric time in seconds since the engine started."""
        return int(self._st.tick[0]) * self._tick

    @property
    def time(self) -> dt.datetime:
        """Fabric time as a UTC datetime."""
        return self.start + dt.timedelta(seconds=self.now)

    def _step_of(self, t: float) -> int:
        """The fine tick of the first coarse step boundary at or after `t` seconds."""
        return max(0, math.ceil(t / self._dt - 1e-9)) * self._ratio

    def at(self, t: float, action: Callable[[], None]) -> None:
        """Run `action` when fabric time reaches `t` seconds (before the step starting then)."""
        heapq.heappush(self._events, (self._step_of(t), next(self._seq), action))

    def _when(self, start: float | None, end: float | None, on: Callable[[], None], off: Callable[[], None]) -> None:
        if start is None or self._step_of(start) <= int(self._st.tick[0]):
            on()
            self._st.hot[0] = True
        else:
            self.at(start, on)
        if end is not None:
            self.at(end, off)

    def _fire_due(self) -> None:
        while self._events and self._events[0][0] <= int(self._st.tick[0]):
            _, _, action = heapq.heappop(self._events)
            action()
            self._st.hot[0] = True  # the fabric changed: watch the next coarse period closely

    def _advance(self, n: int) -> None:
        while n > 0:
            done = int(K.run_steps(self._net, self._st, self._cnt, n))
            n -= done
            self._collect_iterations()

    def _collect_iterations(self) -> None:
        st = self._st
        n = int(st.it_n[0])
        if not n:
            return
        for k in range(n):
            j = int(st.it_job[k])
            self.iterations.append(
                IterationRecord(self.jobs[j].job_id, self._iter_counts[j], float(st.it_start[k]), float(st.it_end[k]))
            )
            self._iter_counts[j] += 1
        st.it_n[0] = 0

    def _job_pos(self, job_id: str) -> int:
        for i, j in enumerate(self.jobs):
            if j.job_id == job_id:
                return i
        raise KeyError(f"no job {job_id!r}")

    def steps(self, seconds: float) -> Iterator[float]:
        """Advance coarse step by coarse step over `seconds`, yielding fabric time after each."""
        for _ in range(self._step_of(seconds) // self._ratio):
            self._fire_due()
            self._advance(self._ratio)
            yield self.now

    def run(self, seconds: float, on_poll: PollCallback | None = None, poll_interval_s: float = 1.0) -> None:
        """Advance `seconds` of fabric time, calling `on_poll(ts, engine)` every `poll_interval_s`.

        Polls fall on multiples of the interval since the engine started; a poll sees the state
        after the step that ends at its time.
        """
        if poll_interval_s <= 0:
            raise SimError("poll_interval_s must be positive")
        end = int(self._st.tick[0]) + self._step_of(seconds)
        every = max(1, round(poll_interval_s / self._dt)) * self._ratio
        next_poll = (int(self._st.tick[0]) // every + 1) * every
        while True:
            self._fire_due()
            cur = int(self._st.tick[0])
            if cur >= end:
                break
            target = end
            if on_poll is not None:
                target = min(target, next_poll)
            if self._events:
                target = min(target, max(cur + 1, self._events[0][0]))
            self._advance(target - cur)
            if on_poll is not None and int(self._st.tick[0]) >= next_poll:
                on_poll(self.time, self)
                next_poll += every

    # --- incident knobs

    def pause_storm(
        self,
        device: str,
        port: str,
        start: float | None = None,
        end: float | None = None,
        priority: int | None = None,
        fraction: float = 1.0,
    ) -> None:
        """(device, port) keeps pausing its peer on `priority` for `fraction` of the time (a NIC or a
        switch port stuck sending XOFF). `fraction` < 1: a slow receiver."""
        pid = self.port_id((device, port))
        q = self._prio(priority)
        if not 0.0 <= fraction <= 1.0:
            raise SimError("fraction must be in [0, 1]")

        def on() -> None:
            self._storms[(pid, q)] = fraction
            self._net.forced[q, pid] = fraction
            self._set_active()

        def off() -> None:
            self._storms.pop((pid, q), None)
            self._net.forced[q, pid] = 0.0

        self._when(start, end, on, off)

    def cnp_loss(
        self,
        device: str,
        port: str,
        fraction: float,
        start: float | None = None,
        end: float | None = None,
        ignored: bool = False,
    ) -> None:
        """The sender NIC (device, port) handles only 1 - `fraction` of the CNPs sent to it; with
        `ignored` the others count as `rp_cnp_ignored`, else they are never seen."""
        pid = self.port_id((device, port))
        if self.topology.ports[pid].kind != "nic":
            raise SimError(f"{device}:{port} is not a NIC")
        if not 0.0 <= fraction <= 1.0:
            raise SimError("fraction must be in [0, 1]")

        def on() -> None:
            self._net.cnp_loss[pid] = fraction
            self._net.cnp_ignore[pid] = ignored

        def off() -> None:
            self._net.cnp_loss[pid] = 0.0
            self._net.cnp_ignore[pid] = False

        self._when(start, end, on, off)

    def disable_pfc(
        self,
        device: str,
        port: str,
        priority: int | None = None,
        start: float | None = None,
        end: float | None = None,
    ) -> None:
        """Misconfiguration: the switch ingress (device, port) does not run PFC on `priority`; its
        priority group drops what it cannot hold instead of pausing the peer."""
        pid = self.port_id((device, port))
        if self._net.sw[pid] < 0:
            raise SimError(f"{device}:{port} is not a switch port")
        q = self._prio(priority)

        def on() -> None:
            self._net.pfc_on[q, pid] = False
            self._st.xoff[q, pid] = False

        def off() -> None:
            self._net.pfc_on[q, pid] = q == self.params.lossless_priority

        self._when(start, end, on, off)

    def link_down(self, device: str, port: str, start: float | None = None, end: float | None = None) -> None:
        """Take the cable at (device, port) down (both ends); flows are rerouted as ECMP would."""
        a = self.port_id((device, port))
        b = int(self.topology.peer_ids[a])

        def on() -> None:
            if a in self._down:
                return
            self._down.update((a, b))
            self._down_pairs.add((device, self.topology.ports[a].name))
            self._net.cap[a] = self._net.cap[b] = 0.0
            self._cnt.pc[a, K.C_LINK_DOWN] += 1
            self._cnt.pc[b, K.C_LINK_DOWN] += 1
            self._reroute_all()

        def off() -> None:
            self.link_up(device, port)

        self._when(start, end, on, off)

    def link_up(self, device: str, port: str) -> None:
        """Bring a downed cable back; flows return to their ECMP paths."""
        a = self.port_id((device, port))
        b = int(self.topology.peer_ids[a])
        if a not in self._down:
            return
        self._down.difference_update((a, b))
        self._down_pairs = {(d, p) for d, p in self._down_pairs if self.port_id((d, p)) not in (a, b)}
        self._net.cap[a] = self._line[a]
        self._net.cap[b] = self._line[b]
        self._reroute_all()

    def set_ecmp(self, ecmp: Ecmp) -> None:
        """Switch the fabric's ECMP hashing (e.g. to same-seed hashing for polarization); every flow reroutes."""
        self.ecmp = ecmp
        self._reroute_all()

    def link_errors(
        self, device: str, port: str, rate: float, start: float | None = None, end: float | None = None
    ) -> None:
        """Degraded optics: a fraction `rate` of the frames (device, port) receives fail their FCS."""
        pid = self.port_id((device, port))
        src = int(self.topology.peer_ids[pid])
        if not 0.0 <= rate < 1.0:
            raise SimError("rate must be in [0, 1)")

        def on() -> None:
            self._net.err[src] = rate

        def off() -> None:
            self._net.err[src] = 0.0

        self._when(start, end, on, off)

    def reboot(self, device: str, at: float | None = None) -> None:
        """Reset every counter and watermark of `device` to 0 (a device or driver restart)."""
        ids = np.array([p.id for p in self.topology.ports_of(device)], dtype=np.int64)

        def on() -> None:
            n_ports = len(self.topology.ports)
            pc_cells = (ids[:, None] * K.NPC + np.arange(K.NPC)).ravel()
            pq_cells = n_ports * K.NPC + (ids[:, None] * K.NPRIO * K.NQC + np.arange(K.NPRIO * K.NQC)).ravel()
            cells = np.concatenate([pc_cells, pq_cells])
            self._base[cells] = self._counters[cells]
            self._st.qwm[:, ids] = 0.0
            self._st.pgwm[:, ids] = 0.0
            if device in self._sw_index:
                self._st.bufwm[self._sw_index[device]] = 0.0

        self._when(at, None, on, on)

    def reroute(self, flow: FlowRef, ports: Sequence[PortRef] | None, at: float | None = None) -> None:
        """Force `flow` onto `ports` (its egress ports, source NIC first), e.g. a loop after a bad
        route; None returns it to ECMP. The path must be cabled hop to hop and end at its receiver."""
        f = self.flow_id(flow)
        path = None if ports is None else [self.port_id(p) for p in ports]
        if path is not None:
            topo = self.topology
            if not path or path[0] != self._src_port(f):
                raise SimError("a forced path starts at the flow's source NIC port")
            for a, b in itertools.pairwise(path):
                pa_, pb = topo.ports[a], topo.ports[b]
                if pa_.peer_device != pb.device:
                    raise SimError(f"{pa_.device}:{pa_.name} is not cabled to {pb.device}")
            dst = self.flows[f].dst
            last = topo.ports[path[-1]]
            if (last.peer_device, last.peer_port) != (dst.host, dst.netdev):
                raise SimError("a forced path ends at the port facing the flow's receiver")

        def on() -> None:
            if path is None:
                self._forced_routes.pop(f, None)
            else:
                self._forced_routes[f] = path
            self._change_paths({f: self._route(f)})

        self._when(at, None, on, on)

    def stop_job(self, job_id: str, at: float | None = None) -> None:
        """The job stops putting new bytes on the wire (killed or hung); bytes already sent stay in flight."""
        j = self._job_pos(job_id)

        def on() -> None:
            st = self._st
            st.jphase[j] = K.STOPPED
            members = self._net.jflows[self._net.jptr[j] : self._net.jptr[j + 1]]
            st.remaining[members] = 0.0

        self._when(at, None, on, on)

    def resume_job(self, job_id: str, at: float | None = None) -> None:
        """A stopped job starts a new iteration."""
        j = self._job_pos(job_id)

        def on() -> None:
            if self._st.jphase[j] == K.STOPPED:
                self._st.jphase[j] = K.COMPUTE
                self._st.jend[j] = self.now

        self._when(at, None, on, on)

    def set_rate_limit(self, flow: FlowRef, bps: float | None) -> None:
        """Cap a sender's rate (None: no cap), independent of DCQCN: for tests and paced traffic."""
        self._net.rate_limit[self.flow_id(flow)] = K.INF if bps is None else bps / 8

    # --- probes

    def flow_path(self, flow: FlowRef) -> list[Port]:
        path = self._paths[self.flow_id(flow)]
        return [self.topology.ports[p] for p in path] if path else []

    def flow_rate_bps(self, flow: FlowRef) -> float:
        """The sender's DCQCN current rate (bits/s)."""
        f = self.flow_id(flow)
        return float(min(self._st.rc[f], self._net.rate_limit[f])) * 8

    def flow_totals(self) -> FlowTotals:
        """Per flow, cumulative since the start: packets delivered, CE-marked packets delivered, CNPs its
        receiver sent; and its routed hops now (what the packet mirror samples from)."""
        st, pkt = self._st, self.params.packet_wire_bytes
        return FlowTotals(st.tot_delivered / pkt, st.tot_ce.copy(), st.tot_cnp.copy(), self._net.nh - 1)

    def byte_balance(self, flows: Iterable[FlowRef] | None = None) -> ByteBalance:
        st = self._st
        idx = np.arange(len(self.flows)) if flows is None else np.array([self.flow_id(f) for f in flows], np.int64)
        return ByteBalance(
            float(st.tot_sent[idx].sum()),
            float(st.tot_delivered[idx].sum()),
            float(st.tot_dropped[idx].sum()),
            float(st.qf[idx].sum()),
            float(st.pend[idx].sum()),
        )

    def _refresh(self) -> None:
        K.aggregates(self._net, self._st)

    def queue_bytes(self, device: str, port: str, priority: int | None = None) -> float:
        """Bytes queued at the egress queue (device, port, priority) now."""
        self._refresh()
        return float(self._st.qlen[self._prio(priority), self.port_id((device, port))])

    def pg_bytes(self, device: str, port: str, priority: int | None = None) -> float:
        """Bytes held in the switch for the ingress priority group (device, port, priority) now."""
        self._refresh()
        return float(self._st.occ[self._prio(priority), self.port_id((device, port))])

    def buffer_bytes(self, switch: str) -> float:
        self._refresh()
        return float(self._st.used[self._sw_index[switch]])

    def is_paused(self, device: str, port: str, priority: int | None = None) -> bool:
        """Whether the transmit of (device, port) was held by pauses from its peer in the last step."""
        peer = int(self.topology.peer_ids[self.port_id((device, port))])
        return bool(self._st.asserted[self._prio(priority), peer])

    def is_pausing(self, device: str, port: str, priority: int | None = None) -> bool:
        """Whether (device, port) sent pauses to its peer in the last step."""
        return bool(self._st.asserted[self._prio(priority), self.port_id((device, port))])

    def iteration_times(self, job_id: str) -> list[float]:
        """Durations (communication phase) of the job's completed iterations, in order."""
        return [r.comm_s for r in self.iterations if r.job_id == job_id]

    def completed_iterations(self, job_id: str) -> int:
        return int(self._st.jiter[self._job_pos(job_id)])

    def step_stats(self) -> dict[str, int]:
        """How the fabric time was stepped so far: fine steps, coarse steps, coarse steps skipped idle."""
        fine, coarse, skipped = (int(x) for x in self._st.stats)
        return {"fine": fine, "coarse": coarse, "skipped": skipped}

    # --- counters

    def _gauges(self) -> npt.NDArray[np.float64]:
        self._refresh()
        plan, st, net = self._plan, self._st, self._net
        g = np.zeros(plan.g_size)
        n = plan.n_ports * K.NPRIO
        # the plan indexes gauges port-major (port * 8 + priority)
        g[plan.g_qlen : plan.g_qlen + n] = np.maximum(st.qlen, 0.0).T.ravel()
        g[plan.g_qwm : plan.g_qwm + n] = st.qwm.T.ravel()
        g[plan.g_pgwm : plan.g_pgwm + n] = st.pgwm.T.ravel()
        g[plan.g_paused : plan.g_paused + n] = st.asserted[:, net.peer].T.ravel()
        g[plan.g_oper : plan.g_oper + plan.n_ports] = net.cap > 0
        g[plan.g_speed : plan.g_speed + plan.n_ports] = [p.speed_bps for p in self.topology.ports]
        g[plan.g_bufwm : plan.g_bufwm + plan.n_switches] = st.bufwm
        return g

    def counter(self, device: str, port: str, metric: str, priority: int = -1) -> float:
        """One reported value, as the next snapshot would show it (without resetting watermarks)."""
        row = np.array([self._plan.row(device, port, metric, priority)], dtype=np.int64)
        return float(self._plan.values(self._counters, self._base, self._gauges(), row)[0])

    def snapshot(
        self, ts: dt.datetime | None = None, devices: Iterable[str] | None = None, reset_watermarks: bool = True
    ) -> pa.Table:
        """Every device's counters now, as the `counters` stream (conformed Arrow table).

        Watermarks are peak-since-last-read: reading them here resets them to the current occupancy
        (for the devices read).
        """
        rows = None if devices is None else self._plan.rows_of(devices)
        values = self._plan.values(self._counters, self._base, self._gauges(), rows)
        table = self._plan.table(ts or self.time, values, rows)
        if reset_watermarks:
            st = self._st
            if devices is None:
                st.qwm[:] = np.maximum(st.qlen, 0.0)
                st.pgwm[:] = np.maximum(st.occ, 0.0)
                st.bufwm[:] = st.used
            else:
                for d in devices:
                    ids = [p.id for p in self.topology.ports_of(d)]
                    st.qwm[:, ids] = np.maximum(st.qlen[:, ids], 0.0)
                    st.pgwm[:, ids] = np.maximum(st.occ[:, ids], 0.0)
                    if d in self._sw_index:
                        st.bufwm[self._sw_index[d]] = st.used[self._sw_index[d]]
        return table
