"""The dynamic fabric: a time-stepped fluid model of queues, PFC, ECN and DCQCN, with device counters.

`Engine` (here: the incident knobs and probes a scenario uses) builds on `rocescope.sim.stepper.Stepper`
(the arrays over time, paths, clock and snapshots), whose arrays `rocescope.sim.arrays` builds; the
compiled step is `rocescope.sim.kernel`. The model they implement:

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
the iteration, as in NCCL). The completed iterations (start; end: when the last flow's last byte arrived,
within its step) per job are recorded: slowdowns under incidents show there, and the collectives of
`rocescope.sim.collectives` are timed from them. A straggler (`slow_compute`) lengthens the compute gap.

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
`rp_cnp_ignored`). CNPs travel back by the data's path reversed (out of each switch by the port the
data came in by) in a strict-priority queue that never drops, unless a switch maps them to a lossy
queue (`cnp_queue`): there they are dropped at the share of its arrivals that queue tail-drops in the
step (it drops only while lossy traffic congests it), counted as its queue drops (78-byte frames).

PFC watchdog
------------
Off by default (`EngineParams.pfcwd`). When on, SONiC's watchdog polls every switch port's lossless
queue between steps and mitigates the queues it finds stormed (`rocescope.sim.pfcwd`): with the drop
action their lossless bytes (queued, arriving, and what their peer sends in) are discarded and
retransmitted by the senders, and pauses from the peer no longer hold anything back.

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
`rocescope.sim.mirror`, samples ACKs and CNPs from the per-flow totals, `flow_totals`; CNPs
lost in the fabric are counted, not queued). When a flow is
rerouted, its bytes queued past the point where the paths diverge are dropped if their port went
down, else delivered at once. PFC reacts and CNPs return within the step (real: microseconds). The
PFC headroom is not modeled (holding upstream is exact), so `pg_headroom` counters are not reported.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rocescope.errors import SimError
from rocescope.sim import kernel as K
from rocescope.sim.ecmp import Ecmp
from rocescope.sim.stepper import ComputeChange, FlowRef, IterationRecord, PortRef, Stepper
from rocescope.sim.topology import Port


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


class Engine(Stepper):
    """Runs the fluid model over a topology, jobs and their flows; incident knobs; probes; counter snapshots.

    Knobs take effect at the current time, or at `start` (seconds of fabric time) and revert at
    `end` when given, so a scenario can be written as a list of calls before `run`. The arrays, paths,
    clock and snapshots are `Stepper`'s.
    """

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

    def cnp_queue(self, switch: str, priority: int, start: float | None = None, end: float | None = None) -> None:
        """Misconfiguration: `switch` maps the CNP DSCP (48) to the lossy queue `priority` instead of its own
        strict-priority queue; where that queue tail-drops (congested by lossy traffic), it drops CNPs at the
        same rate (counted as its queue drops), and their senders never see them."""
        if switch not in self._sw_index:
            raise SimError(f"{switch} is not a switch")
        q = self._prio(priority)
        if q == self.params.lossless_priority:
            raise SimError("CNPs in the lossless queue are never dropped; give a lossy priority")
        s = self._sw_index[switch]

        def on() -> None:
            self._net.cnp_q[s] = q

        def off() -> None:
            self._net.cnp_q[s] = -1

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
            self._cnt.pc[[a, b], K.C_LINK_DOWN] += 1
            self._cnt.pc[[a, b], K.C_CARRIER] += 1
            self._reroute_all()

        def off() -> None:
            self.link_up(device, port)

        self._when(start, end, on, off)

    def port_load(self, ids: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """(cumulative bytes transmitted, capacity now: 0 while the link is down) of the ports `ids`."""
        return self._cnt.pc[ids, K.C_TX_BYTES].copy(), self._net.cap[ids].copy()

    def queue_above_kmin(self, ids: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Of the lossless egress queues of ports `ids`: cumulative seconds above the ECN threshold, and the longest
        unbroken run above it since the previous call (which resets it, as a watermark read does)."""
        st = self._st
        above: npt.NDArray[np.float64] = st.kabove[ids].copy()
        longest: npt.NDArray[np.float64] = st.krun_max[ids].copy()
        ongoing = np.abs(st.krun_end[ids] - self.now) <= self._tick
        st.krun_max[ids] = np.where(ongoing, st.krun[ids], 0.0)
        return above, longest

    def flow_delivery(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]:
        """Per flow: cumulative bytes delivered, and the egress port of its last hop now (-1: unrouted)."""
        last = np.array([p[-1] if p else -1 for p in self._paths], dtype=np.int64)
        return self._st.tot_delivered.copy(), last

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
        self._cnt.pc[[a, b], K.C_CARRIER] += 1
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

    def slow_compute(
        self, job_id: str, rank: int, extra_s: float, start: float | None = None, end: float | None = None
    ) -> None:
        """A straggler: `rank` of the job computes `extra_s` longer per iteration. The job's next communication
        phase waits for its slowest rank, so its compute gap grows by the largest extra of its ranks (the fabric
        sees fewer iterations); `compute_log` records each change for the collectives' timings."""
        j = self._job_pos(job_id)
        if extra_s < 0:
            raise SimError("extra compute time cannot be negative")
        base = float(self._net.jcompute[j])
        slow = self._slow_ranks.setdefault(job_id, {})

        def apply() -> None:
            self._net.jcompute[j] = base + max(slow.values(), default=0.0)
            self.compute_log.append(ComputeChange(self.now, job_id, dict(slow)))

        def on() -> None:
            slow[rank] = extra_s
            apply()

        def off() -> None:
            slow.pop(rank, None)
            apply()

        self._when(start, end, on, off)

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

    def open_iterations(self) -> list[IterationRecord]:
        """Communication phases still running now (a hung job's), each as if it ended now."""
        st = self._st
        return [
            IterationRecord(j.job_id, int(st.jiter[k]), float(st.jstart[k]), self.now)
            for k, j in enumerate(self.jobs)
            if st.jphase[k] == K.COMM
        ]

    def completed_iterations(self, job_id: str) -> int:
        return int(self._st.jiter[self._job_pos(job_id)])
