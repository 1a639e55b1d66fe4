"""The compiled time step of the fluid fabric model (numba). The model is described in `rocescope.sim.engine`.

All compiled code lives in this one file on purpose: numba's on-disk cache (`cache=True`) is
invalidated by changes to the file that holds a function, not by changes to the functions it calls
in other files, so splitting the kernel (e.g. DCQCN into its own module) would let a stale cache
survive an edit.

Layout: three named tuples of numpy arrays travel into the kernel.

* `Net`: the fabric as configured right now (ports, capacities, PFC settings, incident knobs, flow
  paths in processing order, jobs). The engine edits these arrays in place between kernel calls.
* `State`: the dynamic state (per flow-hop backlogs, DCQCN rate state, PFC state per ingress
  priority group, job phases, iteration records).
* `Counters`: cumulative device counters (float64: exact to 2^53) per port (`pc`) and per port
  and priority (`pq`). Per-step traffic is summed per port and priority and folded into them at
  each coarse boundary; the engine only reads them there.

Units inside: bytes (wire bytes: Ethernet frames), seconds, bytes per second. Per-port, per-priority
state is stored priority-major, `[q, port]`, so loops over ports stay in contiguous memory.

Cost: a step touches only its *active set*: the flows that send or have bytes in the fabric, the
ports on their paths, and the ports that pause or are paused (a storm or a deadlock keeps its
ports active without any flow moving). The arrays are taken out of the tuples once per call, and
helpers take arrays, not tuples: numba passes a tuple member by value and updates its reference
count on every call, ~10 ns per array, which dominated the step when done per port or per flow.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, cast

import numba
import numpy as np

from rocescope.sim.params import (
    P_ALPHA_TIMER,
    P_BUFFER,
    P_BYTE_COUNTER,
    P_CNP_INTERVAL,
    P_DCQCN_ON,
    P_DONE_TOL,
    P_DT,
    P_FAST_RECOVERY,
    P_FINE_DT,
    P_G,
    P_KMAX,
    P_KMIN,
    P_LOSSLESS,
    P_LOSSY_ALPHA,
    P_MIN_RATE,
    P_PFC_ALPHA,
    P_PKT_WIRE,
    P_PMAX,
    P_RAI,
    P_RATE_TIMER,
    P_RHAI,
    P_XON_OFFSET,
)

Fn = TypeVar("Fn", bound=Callable[..., Any])
#: numpy arrays as the kernel sees them (numba specializes on dtype and rank).
Arr = np.ndarray


def jit(fn: Fn) -> Fn:
    """numba.njit with the on-disk cache, typed for mypy (numba ships no type hints)."""
    return cast(Fn, numba.njit(cache=True, error_model="numpy")(fn))


def inline(fn: Fn) -> Fn:
    """A helper numba inlines into its caller. A real call passes each array argument by value and
    updates its reference count, ~10 ns per array: too much for helpers called per flow or port."""
    return cast(Fn, numba.njit(cache=True, error_model="numpy", inline="always")(fn))


NPRIO = 8
INF = 1e300

# per-port counters (Counters.pc columns)
C_TX_BYTES = 0
C_TX_PKTS = 1
C_RX_BYTES = 2
C_RX_PKTS = 3
C_RX_DISCARDS = 4
C_TX_DISCARDS = 5
C_FCS_ERRORS = 6
C_ECN_MARKED = 7  # port-level CE marks (switch egress)
C_CNP_SENT = 8  # NIC (notification point)
C_CNP_HANDLED = 9  # NIC (reaction point)
C_CNP_IGNORED = 10
C_ECN_ROCE = 11  # NIC: RoCE packets received with CE
C_OOS = 12  # NIC: out_of_sequence
C_SEQ_ERR = 13  # NIC: packet_seq_err (NAKs received)
C_LINK_DOWN = 14
C_RDMA_TX_BYTES = 15
C_RDMA_RX_BYTES = 16
C_RDMA_TX_PKTS = 17
C_RDMA_RX_PKTS = 18
C_CARRIER = 19  # carrier transitions, down and up (a switch port's `carrier-transitions`)
NPC = 20

# per-port, per-priority counters (Counters.pq last axis)
Q_TX_BYTES = 0
Q_TX_PKTS = 1
Q_RX_BYTES = 2
Q_RX_PKTS = 3
Q_PFC_TX = 4  # pause frames this port sent (it is the congested ingress)
Q_PFC_RX = 5  # pause frames this port received (its transmit was paused)
Q_PFC_TX_US = 6
Q_PFC_RX_US = 7
Q_PFC_RX_TRANS = 8
Q_ECN_MARKED = 9
Q_DROP_PKTS = 10  # egress queue drops
Q_DROP_BYTES = 11
Q_PG_DROP = 12  # ingress priority-group drops
Q_WD_TX_DROP = 13  # PFC watchdog: egress packets its drop action discarded on a stormed queue
Q_WD_RX_DROP = 14  # PFC watchdog: ingress packets discarded from the stormed queue's peer
Q_WD_DETECTED = 15  # PFC watchdog: storms detected (written by rocescope.sim.pfcwd)
Q_WD_RESTORED = 16  # PFC watchdog: storms restored
NQC = 17

# PFC watchdog state of an egress queue (Net.wd): operational, or stormed with the drop or forward action
WD_OFF = 0
WD_DROP = 1
WD_FORWARD = 2

#: Bytes of one CNP on the wire (Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 + 16 reserved + ICRC 4 + FCS 4).
CNP_WIRE_BYTES = 78.0

# job phases
COMPUTE = 0
COMM = 1
STOPPED = 2


class Net(NamedTuple):
    """The configured fabric. Port arrays are indexed by `Port.id`; flow arrays by flow index."""

    prm: np.ndarray  # float64[P_SIZE], see rocescope.sim.params
    cap: np.ndarray  # float64[P] line rate in frame bytes/s, 0 while the link is down
    peer: np.ndarray  # int64[P]
    sw: np.ndarray  # int64[P] switch index of a switch port, -1 for a NIC port
    pfc_on: np.ndarray  # bool[8, P] PFC enabled on this ingress port and priority
    forced: np.ndarray  # float64[8, P] fraction of time this port asserts pause (storm), 0..1
    err: np.ndarray  # float64[P] fraction of frames corrupted on the link out of this port
    refresh: np.ndarray  # float64[P] seconds between pause frames this port sends while XOFF
    cnp_loss: np.ndarray  # float64[P] (NIC ports) fraction of CNPs for this sender never handled
    cnp_ignore: np.ndarray  # bool[P] (NIC ports) lost CNPs count as received-but-ignored
    wd: np.ndarray  # int64[8, P] PFC watchdog state of the egress queue (WD_*), set by rocescope.sim.pfcwd
    cnp_q: np.ndarray  # int64[S] the queue a switch puts CNPs in when it is a lossy one that can drop; -1: none
    active: np.ndarray  # int64[] priorities that carry traffic or can be paused
    path: np.ndarray  # int64[F, H] egress port per hop, -1 padded
    nh: np.ndarray  # int64[F] hops
    prio: np.ndarray  # int64[F]
    delayed: np.ndarray  # bool[F, H] the edge into hop h closes a cycle: it carries last step's bytes
    ingr: np.ndarray  # int64[F, H] ingress port at the switch of hop h (peer of hop h-1), -1 at h=0
    stalled: np.ndarray  # bool[F] no route: the flow cannot send
    rate_limit: np.ndarray  # float64[F] static sender rate cap in bytes/s (INF: none)
    fjob: np.ndarray  # int64[F]
    fbytes: np.ndarray  # float64[F] wire bytes per iteration
    optr: np.ndarray  # int64[K+1] CSR over ports in processing order
    oport: np.ndarray  # int64[K]
    of: np.ndarray  # int64[E] flow of each flow-hop, grouped by port in processing order
    oh: np.ndarray  # int64[E] hop of each flow-hop
    jptr: np.ndarray  # int64[J+1] CSR of flows per job
    jflows: np.ndarray  # int64[F]
    jcompute: np.ndarray  # float64[J] compute gap in seconds


class State(NamedTuple):
    """Everything that evolves. Shapes: F flows, H hops, P ports, S switches, J jobs, M records."""

    tick: np.ndarray  # int64[1] fabric time in fine steps
    fine: np.ndarray  # bool[1] the current coarse period runs as fine steps
    hot: np.ndarray  # bool[1] congestion in motion (marking, PFC holding, queues moving) in this period
    backlog: np.ndarray  # float64[1] bytes in the fabric after the last step
    qf: np.ndarray  # float64[F, H] bytes of flow f queued at the egress port of hop h
    pend: np.ndarray  # float64[F, H] bytes in flight on a delayed edge into hop h
    arr: np.ndarray  # float64[F, H] arrivals this step (scratch)
    dep: np.ndarray  # float64[F, H] departures this step, good frames (scratch)
    lost: np.ndarray  # float64[F, H] corrupted frames sent this step (scratch)
    remaining: np.ndarray  # float64[F] bytes still to send this iteration (retransmissions included)
    delivered: np.ndarray  # float64[F] bytes delivered this iteration
    tot_sent: np.ndarray  # float64[F] cumulative bytes put on the wire by the sender
    tot_delivered: np.ndarray  # float64[F]
    tot_dropped: np.ndarray  # float64[F]
    rc: np.ndarray  # float64[F] DCQCN current rate (bytes/s)
    rt: np.ndarray  # float64[F] DCQCN target rate
    alpha: np.ndarray  # float64[F]
    tstage: np.ndarray  # float64[F] rate-increase timer events since the last cut
    bstage: np.ndarray  # float64[F] byte-counter events since the last cut
    tacc: np.ndarray  # float64[F] time towards the next timer event
    bacc: np.ndarray  # float64[F] bytes towards the next byte-counter event
    cnp_credit: np.ndarray  # float64[F] fractional CNPs not yet emitted
    hand_credit: np.ndarray  # float64[F] fractional CNPs not yet handled
    last_cnp: np.ndarray  # float64[F] CNPs handled in the last step (for probes)
    tot_ce: np.ndarray  # float64[F] cumulative CE-marked packets delivered (expected count; the packet mirror)
    tot_cnp: np.ndarray  # float64[F] cumulative CNPs the receiver sent for the flow (the packet mirror)
    fdone: np.ndarray  # float64[F] when this iteration's bytes of the flow were all delivered (within its step)
    frate: np.ndarray  # float64[F] bytes/s the flow delivered in its last step with deliveries
    qlen: np.ndarray  # float64[8, P] egress queue bytes
    occ: np.ndarray  # float64[8, P] ingress priority-group bytes (switch ingress ports)
    pend_in: np.ndarray  # float64[8, P] bytes in flight towards an ingress on delayed edges
    used: np.ndarray  # float64[S] shared buffer in use per switch
    xoff: np.ndarray  # bool[8, P] PG is asserting XOFF (hysteresis state)
    asserted: np.ndarray  # bool[8, P] the port paused its peer during the last step
    budget: np.ndarray  # float64[8, P] bytes the egress may send this step (PFC of its peer)
    drain: np.ndarray  # float64[8, P] PG bytes that left the switch this step
    drain_prev: np.ndarray  # float64[8, P] rate (bytes/s) at which the PG drained in the last step
    ret: np.ndarray  # float64[8, P] bytes refused by the PG this step (held upstream)
    txq: np.ndarray  # float64[8, P] bytes sent this step
    lostq: np.ndarray  # float64[8, P] of which corrupted on the wire
    markq: np.ndarray  # float64[8, P] of which CE-marked here (expected bytes)
    acc_tx: np.ndarray  # float64[8, P] txq summed over the coarse period, folded into the counters at its end
    acc_lost: np.ndarray  # float64[8, P]
    acc_mark: np.ndarray  # float64[8, P]
    pmark: np.ndarray  # float64[8, P] ECN mark probability this step
    lshare: np.ndarray  # float64[8, P] share of this step's arrivals a lossy queue tail-dropped (CNPs there too)
    qwm: np.ndarray  # float64[8, P] egress queue peak since last read
    # the lossless egress queue above the ECN threshold (step mean over Kmin), for the ground truth (`emergent`):
    kabove: np.ndarray  # float64[P] seconds above, cumulative
    krun: np.ndarray  # float64[P] seconds of the current unbroken run above
    krun_end: np.ndarray  # float64[P] fabric time the current run last reached
    krun_max: np.ndarray  # float64[P] longest unbroken run since the truth last read it (it resets it)
    pgwm: np.ndarray  # float64[8, P] ingress PG peak since last read
    bufwm: np.ndarray  # float64[S] shared buffer peak since last read
    rsum: np.ndarray  # float64[P] scratch
    rratio: np.ndarray  # float64[P] scratch
    load: np.ndarray  # float64[P] scratch
    tot_q: np.ndarray  # float64[8] scratch
    want: np.ndarray  # float64[8] scratch
    serve: np.ndarray  # float64[8] scratch
    jphase: np.ndarray  # int64[J]
    jend: np.ndarray  # float64[J] end of the compute gap
    jstart: np.ndarray  # float64[J] start of the current iteration
    jiter: np.ndarray  # int64[J] completed iterations
    it_job: np.ndarray  # int64[M] completed iterations not yet collected: job
    it_start: np.ndarray  # float64[M]
    it_end: np.ndarray  # float64[M]
    it_n: np.ndarray  # int64[1]
    quiet: np.ndarray  # bool[1] the last step ended with nothing in the fabric and nothing paused
    stats: np.ndarray  # int64[3] fine steps, coarse steps, coarse steps skipped (nothing to do)
    fact: np.ndarray  # bool[F] the flow sends or has bytes in the fabric this step
    fback: np.ndarray  # float64[F] the flow's bytes queued or in flight after the last step
    mark: np.ndarray  # int64[P] step stamp: the port is in this step's active set
    rel: np.ndarray  # int64[P] this step's active ports (first `nrel`)
    watch: np.ndarray  # int64[P] ports that stay active while they pause or are paused (first `nwatch`)
    nwatch: np.ndarray  # int64[1]
    stamp: np.ndarray  # int64[1]


class Counters(NamedTuple):
    pc: np.ndarray  # float64[P, NPC]
    pq: np.ndarray  # float64[P, 8, NQC]


@jit
def red_probability(q: float, kmin: float, kmax: float, pmax: float) -> float:
    """RED/ECN marking probability of a queue of `q` bytes."""
    if q <= kmin:
        return 0.0
    if q >= kmax:
        return 1.0
    return pmax * (q - kmin) / (kmax - kmin)


@inline
def _aggregate(
    active: Arr, path: Arr, nh: Arr, prio: Arr, ingr: Arr, delayed: Arr, sw: Arr,
    qf: Arr, pend: Arr, qlen: Arr, occ: Arr, pend_in: Arr, used: Arr,
) -> None:  # fmt: skip
    """Egress queue, ingress PG and shared-buffer totals from the per flow-hop backlogs."""
    for p in range(qlen.shape[1]):
        for a in range(active.shape[0]):
            q = active[a]
            qlen[q, p] = 0.0
            occ[q, p] = 0.0
            pend_in[q, p] = 0.0
    used[:] = 0.0
    for f in range(path.shape[0]):
        q = prio[f]
        for h in range(1, nh[f]):
            b = qf[f, h]
            if b != 0.0:
                p = path[f, h]
                qlen[q, p] += b
                occ[q, ingr[f, h]] += b
                used[sw[p]] += b
            if delayed[f, h] and pend[f, h] != 0.0:
                pend_in[q, ingr[f, h]] += pend[f, h]


@jit
def aggregates(net: Net, st: State) -> None:
    """Recompute `st.qlen`, `st.occ`, `st.pend_in` and `st.used` (for probes between steps)."""
    _aggregate(
        net.active, net.path, net.nh, net.prio, net.ingr, net.delayed, net.sw,
        st.qf, st.pend, st.qlen, st.occ, st.pend_in, st.used,
    )  # fmt: skip


@inline
def _waterfill(tot_q: Arr, want: Arr, serve: Arr, active: Arr, budget: Arr, p: int, cap: float) -> None:
    """Share `cap` bytes among priorities (equal-weight DWRR): serve[q] out of demand tot_q[q],
    each priority capped by its PFC budget."""
    need = 0.0
    n_unsat = 0
    for a in range(active.shape[0]):
        q = active[a]
        w = min(tot_q[q], budget[q, p])
        want[q] = w
        serve[q] = 0.0
        need += w
        if w > 0.0:
            n_unsat += 1
    if need <= cap:
        for a in range(active.shape[0]):
            serve[active[a]] = want[active[a]]
        return
    left = cap
    while n_unsat > 0 and left > 1e-9:
        share = left / n_unsat
        progressed = False
        for a in range(active.shape[0]):
            q = active[a]
            gap = want[q] - serve[q]
            if gap > 0.0 and gap <= share:
                serve[q] = want[q]
                left -= gap
                n_unsat -= 1
                progressed = True
        if not progressed:
            for a in range(active.shape[0]):
                q = active[a]
                if want[q] - serve[q] > 0.0:
                    serve[q] += share
            left = 0.0


@inline
def _lost_packets(pkt: float, x: float, f: int, prio: Arr, lossless: int, path: Arr, nh: Arr, peer: Arr,
                  pc: Arr) -> None:  # fmt: skip
    """A RoCE packet lost in the fabric: the receiver sees a gap, the sender a NAK and resends."""
    if prio[f] == lossless:
        last = path[f, nh[f] - 1]
        pc[peer[last], C_OOS] += x / pkt
        pc[path[f, 0], C_SEQ_ERR] += x / pkt


@jit
def _drop(
    f: int, h: int, x: float, at_ingress: bool, prm: Arr, path: Arr, nh: Arr, ingr: Arr, sw: Arr, peer: Arr,
    prio: Arr, qf: Arr, arr: Arr, qlen: Arr, occ: Arr, used: Arr, tot_dropped: Arr, remaining: Arr,
    pc: Arr, pq: Arr,
) -> None:  # fmt: skip
    """Discard `x` bytes of flow f that arrived at hop h this step; the sender retransmits them."""
    q = prio[f]
    p = path[f, h]
    i = ingr[f, h]
    pkt = prm[P_PKT_WIRE]
    qf[f, h] -= x
    arr[f, h] -= x
    qlen[q, p] -= x
    occ[q, i] -= x
    used[sw[p]] -= x
    tot_dropped[f] += x
    remaining[f] += x
    if at_ingress:
        pc[i, C_RX_DISCARDS] += x / pkt
        pq[i, q, Q_PG_DROP] += x / pkt
    else:
        pq[p, q, Q_DROP_PKTS] += x / pkt
        pq[p, q, Q_DROP_BYTES] += x
        pc[p, C_TX_DISCARDS] += x / pkt  # out-discards count egress tail drops (SAI IF_OUT_DISCARDS, EOS, SR Linux)
    _lost_packets(pkt, x, f, prio, int(prm[P_LOSSLESS]), path, nh, peer, pc)


@jit
def _give_back(
    f: int, h: int, x: float, prm: Arr, path: Arr, ingr: Arr, delayed: Arr, sw: Arr, pfc_on: Arr, prio: Arr,
    qf: Arr, arr: Arr, dep: Arr, qlen: Arr, occ: Arr, used: Arr, ret: Arr, remaining: Arr, tot_sent: Arr,
) -> None:  # fmt: skip
    """PFC holds `x` bytes of flow f upstream: they never left hop h-1 (cascading while PGs overflow)."""
    q = prio[f]
    lossless = int(prm[P_LOSSLESS])
    while True:
        p = path[f, h]
        i = ingr[f, h]
        qf[f, h] -= x
        arr[f, h] -= x
        qlen[q, p] -= x
        occ[q, i] -= x
        used[sw[p]] -= x
        ret[q, i] += x
        dep[f, h - 1] -= x
        if h - 1 == 0:  # the NIC: the bytes stay in host memory
            remaining[f] += x
            tot_sent[f] -= x
            return
        u = path[f, h - 1]
        iu = ingr[f, h - 1]
        su = sw[u]
        qf[f, h - 1] += x
        qlen[q, u] += x
        occ[q, iu] += x
        used[su] += x
        if delayed[f, h - 1] or q != lossless or not pfc_on[q, iu]:
            return
        excess = occ[q, iu] - prm[P_PFC_ALPHA] * max(0.0, prm[P_BUFFER] - used[su])
        y = min(excess, x, min(qf[f, h - 1], arr[f, h - 1]))
        if y <= 0.0:
            return
        x = y
        h -= 1


@inline
def _dcqcn_increase(
    f: int, dt: float, line: float, commit: bool, prm: Arr, rc: Arr, rt: Arr, tstage: Arr, bstage: Arr,
    tacc: Arr, bacc: Arr,
) -> float:  # fmt: skip
    """Reaction point (DCQCN, Zhu et al. 2015) rate increase over a step of `dt`: the timer (T) and
    byte-counter (B) events that fall in the step, spread evenly over it. Fast recovery for F
    stages (RC = (RT + RC) / 2), then additive (RT += R_AI) and hyper (RT += i R_HAI) increase.

    Returns the mean rate over the step (what the sender offers). `commit` moves the state to the
    end of the step; without it the increase is only projected.
    """
    r = rc[f]
    t = rt[f]
    if r >= line and t >= line:
        return line
    period = prm[P_RATE_TIMER]
    bc = prm[P_BYTE_COUNTER]
    fr = prm[P_FAST_RECOVERY]
    ta = tacc[f] + dt
    nt = math.floor(ta / period)
    ba = bacc[f] + r * dt
    nb = math.floor(ba / bc)
    n_events = nt + nb
    ts = tstage[f]
    bs = bstage[f]
    total = r
    k = 0
    left_t = nt
    left_b = nb
    while left_t > 0 or left_b > 0:
        if left_t >= left_b:
            ts += 1.0
            left_t -= 1
        else:
            bs += 1.0
            left_b -= 1
        hi = max(ts, bs)
        lo = min(ts, bs)
        if lo > fr:
            t = min(line, t + (lo - fr) * prm[P_RHAI])
        elif hi >= fr:
            t = min(line, t + prm[P_RAI])
        r = (t + r) / 2.0
        k += 1
        if r >= line * (1.0 - 1e-9) and t >= line:
            r = line
            total += line * (n_events - k + 1)
            k = n_events
            break
        total += r
    if commit:
        rc[f] = r
        rt[f] = t
        tstage[f] = ts
        bstage[f] = bs
        tacc[f] = ta - nt * period
        bacc[f] = ba - nb * bc
    mean: float = min(line, total / (k + 1))
    return mean


@inline
def _dcqcn_cut(f: int, n_cnp: float, dt: float, decay: float, prm: Arr, rc: Arr, rt: Arr, alpha: Arr,
               tstage: Arr, bstage: Arr, tacc: Arr, bacc: Arr) -> None:  # fmt: skip
    """Reaction point at the end of a step: each handled CNP cuts RT = RC, RC *= 1 - alpha/2 and
    raises alpha = (1-g) alpha + g, restarting the increase stages; alpha decays by (1 - g) per
    alpha period (K) without a CNP. `decay` is (1 - g) ** (dt / K)."""
    if n_cnp <= 0.0:
        alpha[f] *= decay
        return
    g = prm[P_G]
    k = 0
    while k < n_cnp:
        rt[f] = rc[f]
        rc[f] *= 1.0 - alpha[f] / 2.0
        alpha[f] = (1.0 - g) * alpha[f] + g
        k += 1
    rc[f] = max(rc[f], prm[P_MIN_RATE])
    n_alpha = dt / prm[P_ALPHA_TIMER]
    if n_alpha > n_cnp:
        alpha[f] *= (1.0 - g) ** (n_alpha - n_cnp)
    tstage[f] = 0.0
    bstage[f] = 0.0
    tacc[f] = 0.0
    bacc[f] = 0.0


@inline
def _start_iterations(
    now: float, jphase: Arr, jend: Arr, jstart: Arr, jptr: Arr, jflows: Arr, fbytes: Arr, remaining: Arr,
    delivered: Arr, fdone: Arr,
) -> None:  # fmt: skip
    for j in range(jphase.shape[0]):
        if jphase[j] == COMPUTE and now >= jend[j] - 1e-12:
            jphase[j] = COMM
            jstart[j] = now
            for k in range(jptr[j], jptr[j + 1]):
                f = jflows[k]
                remaining[f] += fbytes[f]
                delivered[f] = 0.0
                fdone[f] = now


@jit
def _finish_iterations(
    end: float, tol: float, jphase: Arr, jend: Arr, jstart: Arr, jiter: Arr, jcompute: Arr, jptr: Arr, jflows: Arr,
    fbytes: Arr, nh: Arr, path: Arr, ingr: Arr, sw: Arr, prio: Arr, delayed: Arr, remaining: Arr, delivered: Arr,
    tot_sent: Arr, tot_delivered: Arr, qf: Arr, pend: Arr, fback: Arr, qlen: Arr, occ: Arr, pend_in: Arr, used: Arr,
    it_job: Arr, it_start: Arr, it_end: Arr, it_n: Arr, fdone: Arr,
) -> None:  # fmt: skip
    """Close the iterations whose flows all delivered their bytes by `end` (this step's end). The record's end
    is when the last flow's last byte arrived within the step (a coarse step is 1 ms: a 10 ms collective would
    otherwise be measured in whole steps); the compute gap still starts at the step's end."""
    for j in range(jphase.shape[0]):
        if jphase[j] != COMM:
            continue
        done = True
        for k in range(jptr[j], jptr[j + 1]):
            f = jflows[k]
            if fbytes[f] - delivered[f] > tol:
                done = False
                break
        if not done:
            continue
        last = jstart[j]
        for k in range(jptr[j], jptr[j + 1]):
            f = jflows[k]
            last = max(last, min(fdone[f], end))
            # less than one packet is left in flight: the fluid tail; count it delivered
            residue = remaining[f]
            tot_sent[f] += remaining[f]
            remaining[f] = 0.0
            q = prio[f]
            for h in range(1, nh[f]):
                b = qf[f, h]
                if b != 0.0:
                    qlen[q, path[f, h]] -= b
                    occ[q, ingr[f, h]] -= b
                    used[sw[path[f, h]]] -= b
                    residue += b
                    qf[f, h] = 0.0
                if delayed[f, h] and pend[f, h] != 0.0:
                    pend_in[q, ingr[f, h]] -= pend[f, h]
                    residue += pend[f, h]
                    pend[f, h] = 0.0
            fback[f] = 0.0
            tot_delivered[f] += residue
            delivered[f] = fbytes[f]
        n = it_n[0]
        if n < it_job.shape[0]:
            it_job[n] = j
            it_start[n] = jstart[j]
            it_end[n] = last
            it_n[0] = n + 1
        jiter[j] += 1
        jphase[j] = COMPUTE
        jend[j] = end + jcompute[j]


@inline
def _wd_discard(
    f: int, h: int, pkt: float, p: int, at_egress: bool, lossless: int, path: Arr, nh: Arr, ingr: Arr, sw: Arr,
    peer: Arr, prio: Arr, qf: Arr, arr: Arr, qlen: Arr, occ: Arr, used: Arr, tot_dropped: Arr, remaining: Arr,
    pc: Arr, pq: Arr,
) -> None:  # fmt: skip
    """The PFC watchdog's drop action on a stormed queue: flow f's bytes at hop h (queued there and
    arriving) are discarded, at the stormed egress queue (`at_egress`) or at the ingress of the stormed
    port (what its peer sends in); the sender retransmits them."""
    q = prio[f]
    i = ingr[f, h]
    b = qf[f, h]
    if b != 0.0:
        qlen[q, p] -= b
        occ[q, i] -= b
        used[sw[p]] -= b
    x = b + arr[f, h]
    qf[f, h] = 0.0
    arr[f, h] = 0.0
    if x <= 0.0:
        return
    tot_dropped[f] += x
    remaining[f] += x
    if at_egress:
        pq[p, q, Q_DROP_PKTS] += x / pkt
        pq[p, q, Q_DROP_BYTES] += x
        pq[p, q, Q_WD_TX_DROP] += x / pkt
    else:
        pc[i, C_RX_DISCARDS] += x / pkt
        pq[i, q, Q_PG_DROP] += x / pkt
        pq[i, q, Q_WD_RX_DROP] += x / pkt
    _lost_packets(pkt, x, f, prio, lossless, path, nh, peer, pc)


@inline
def _cnp_fabric_drops(
    f: int, n: float, n_hops: int, path: Arr, peer: Arr, sw: Arr, cnp_q: Arr, lshare: Arr, pq: Arr
) -> float:
    """CNPs of flow f on their way back (receiver to sender: out of each switch by the port the data
    came in by) through switches that put them in a lossy queue: that queue drops the share of its
    arrivals it tail-dropped this step. Returns the CNPs that reach the sender."""
    for k in range(n_hops - 2, -1, -1):
        e = peer[path[f, k]]
        s = sw[e]
        if s < 0:
            continue
        q = cnp_q[s]
        if q < 0:
            continue
        d = lshare[q, e]
        if d > 0.0:
            x = n * d
            pq[e, q, Q_DROP_PKTS] += x
            pq[e, q, Q_DROP_BYTES] += x * CNP_WIRE_BYTES
            n -= x
    return n


@jit
def _fold_counters(
    pkt: float, lossless: int, active: Arr, peer: Arr, sw: Arr, acc_tx: Arr, acc_lost: Arr, acc_mark: Arr,
    pc: Arr, pq: Arr,
) -> None:  # fmt: skip
    """Add a coarse period's traffic to the port counters (both ends of each link) and reset it.

    Per-step traffic is summed per port and priority and counted once per coarse step: the
    counters are read between kernel calls, which always end on a coarse boundary.
    """
    for p in range(acc_tx.shape[1]):
        r = peer[p]
        for a in range(active.shape[0]):
            q = active[a]
            sent = acc_tx[q, p]
            if sent <= 0.0:
                continue
            good = sent - acc_lost[q, p]
            pk = sent / pkt
            pc[p, C_TX_BYTES] += sent
            pc[p, C_TX_PKTS] += pk
            pq[p, q, Q_TX_BYTES] += sent
            pq[p, q, Q_TX_PKTS] += pk
            pc[r, C_RX_BYTES] += good
            pc[r, C_RX_PKTS] += good / pkt
            pq[r, q, Q_RX_BYTES] += good
            pq[r, q, Q_RX_PKTS] += good / pkt
            if q == lossless:
                if sw[p] < 0:  # a NIC sending RoCE
                    pc[p, C_RDMA_TX_BYTES] += sent
                    pc[p, C_RDMA_TX_PKTS] += pk
                if sw[r] < 0:  # a NIC receiving RoCE
                    pc[r, C_RDMA_RX_BYTES] += good
                    pc[r, C_RDMA_RX_PKTS] += good / pkt
            marked = acc_mark[q, p] / pkt
            if marked > 0.0:
                pq[p, q, Q_ECN_MARKED] += marked
                pc[p, C_ECN_MARKED] += marked
            acc_tx[q, p] = 0.0
            acc_lost[q, p] = 0.0
            acc_mark[q, p] = 0.0


@jit
def _pressure(
    dt: float, dcqcn_on: bool, lossless: int, prm: Arr, prio: Arr, fjob: Arr, jphase: Arr, stalled: Arr,
    remaining: Arr, rc: Arr, rt: Arr, tstage: Arr, bstage: Arr, tacc: Arr, bacc: Arr, rate_limit: Arr, cap: Arr,
    path: Arr, nh: Arr, budget: Arr, load: Arr,
) -> bool:  # fmt: skip
    """Whether the senders with data would overload a port during a coarse step of `dt` at the rates
    they would offer (DCQCN increase projected): congestion is about to start, the fine step must
    catch it. Senders whose NIC is fully paused cannot send and do not count."""
    busy = False
    for f in range(path.shape[0]):
        if stalled[f] or remaining[f] <= 0.0 or jphase[fjob[f]] != COMM or budget[prio[f], path[f, 0]] <= 0.0:
            continue
        line = cap[path[f, 0]]
        r = rc[f]
        if dcqcn_on and prio[f] == lossless and line > 0.0:
            r = _dcqcn_increase(f, dt, line, False, prm, rc, rt, tstage, bstage, tacc, bacc)
        r = min(r, rate_limit[f], line)
        for h in range(nh[f]):
            load[path[f, h]] += r
    for f in range(path.shape[0]):
        for h in range(nh[f]):
            p = path[f, h]
            if load[p] > cap[p] * (1.0 + 1e-9):
                busy = True
            load[p] = 0.0
    return busy


@jit
def run_steps(net: Net, st: State, cnt: Counters, n_ticks: int) -> int:
    """Advance the fabric by up to `n_ticks` fine ticks (a multiple of the fine steps per coarse
    step); returns how many ran (it stops early, at a coarse boundary, when the buffer of completed
    iteration records is nearly full, for the engine to collect them).

    At each coarse boundary the next coarse period is either skipped (nothing in the fabric, no job
    communicating), run as one coarse step, or run as fine steps when any queue was congested or
    paused in the last period, or the senders' current rates would overload a port.

    The arrays are taken out of the tuples once here: a call that passes a whole tuple of arrays
    costs a reference-count update per array, which would dominate the step if done per port.
    """
    prm = net.prm
    cap = net.cap
    peer = net.peer
    sw = net.sw
    pfc_on = net.pfc_on
    forced = net.forced
    err = net.err
    refresh = net.refresh
    cnp_loss = net.cnp_loss
    cnp_ignore = net.cnp_ignore
    wd = net.wd
    cnp_q = net.cnp_q
    active = net.active
    path = net.path
    nh = net.nh
    prio = net.prio
    delayed = net.delayed
    ingr = net.ingr
    stalled = net.stalled
    rate_limit = net.rate_limit
    fjob = net.fjob
    fbytes = net.fbytes
    optr = net.optr
    oport = net.oport
    of = net.of
    oh = net.oh
    jptr = net.jptr
    jflows = net.jflows
    jcompute = net.jcompute

    qf = st.qf
    pend = st.pend
    arr = st.arr
    dep = st.dep
    lost = st.lost
    remaining = st.remaining
    delivered = st.delivered
    tot_sent = st.tot_sent
    tot_delivered = st.tot_delivered
    tot_dropped = st.tot_dropped
    rc = st.rc
    rt = st.rt
    alpha = st.alpha
    cnp_credit = st.cnp_credit
    hand_credit = st.hand_credit
    last_cnp = st.last_cnp
    tot_ce = st.tot_ce
    tot_cnp = st.tot_cnp
    qlen = st.qlen
    occ = st.occ
    kabove = st.kabove
    krun = st.krun
    krun_end = st.krun_end
    krun_max = st.krun_max
    pend_in = st.pend_in
    used = st.used
    xoff = st.xoff
    asserted = st.asserted
    budget = st.budget
    drain = st.drain
    drain_prev = st.drain_prev
    ret = st.ret
    txq = st.txq
    lostq = st.lostq
    markq = st.markq
    acc_tx = st.acc_tx
    acc_lost = st.acc_lost
    acc_mark = st.acc_mark
    pmark = st.pmark
    lshare = st.lshare
    qwm = st.qwm
    pgwm = st.pgwm
    bufwm = st.bufwm
    rsum = st.rsum
    rratio = st.rratio
    tot_q = st.tot_q
    want = st.want
    serve = st.serve
    jphase = st.jphase
    pc = cnt.pc
    pq = cnt.pq
    jend = st.jend
    jstart = st.jstart
    jiter = st.jiter
    tstage = st.tstage
    bstage = st.bstage
    tacc = st.tacc
    bacc = st.bacc
    load = st.load
    it_job = st.it_job
    it_start = st.it_start
    it_end = st.it_end
    it_n = st.it_n
    clock = st.tick
    quiet = st.quiet
    hot = st.hot
    fine = st.fine
    stats = st.stats
    fact = st.fact
    fback = st.fback
    fdone = st.fdone
    frate = st.frate
    mark = st.mark
    rel = st.rel
    watch = st.watch
    nwatch = st.nwatch
    stamp = st.stamp

    coarse_dt = prm[P_DT]
    fine_dt = prm[P_FINE_DT]
    ratio = round(coarse_dt / fine_dt)
    lossless = int(prm[P_LOSSLESS])
    pkt = prm[P_PKT_WIRE]
    buffer = prm[P_BUFFER]
    pfc_alpha = prm[P_PFC_ALPHA]
    xon_offset = prm[P_XON_OFFSET]
    lossy_alpha = prm[P_LOSSY_ALPHA]
    kmin = prm[P_KMIN]
    kmax = prm[P_KMAX]
    pmax = prm[P_PMAX]
    dcqcn_on = prm[P_DCQCN_ON] > 0.0
    done_tol = prm[P_DONE_TOL]
    nact = active.shape[0]
    F = path.shape[0]
    P = cap.shape[0]
    room = it_job.shape[0] - jphase.shape[0] - 1
    decay_coarse = (1.0 - prm[P_G]) ** (coarse_dt / prm[P_ALPHA_TIMER])
    decay_fine = (1.0 - prm[P_G]) ** (fine_dt / prm[P_ALPHA_TIMER])
    storming = False
    for p in range(P):
        for a in range(nact):
            if forced[active[a], p] > 0.0:
                storming = True
    # PFC watchdog mitigating a storm somewhere; switches that put CNPs in a lossy queue
    wd_on = False
    for p in range(P):
        if wd[lossless, p] != WD_OFF:
            wd_on = True
    cnp_lossy = False
    for x in range(cnp_q.shape[0]):
        if cnp_q[x] >= 0:
            cnp_lossy = True

    # the engine may have changed paths, knobs or queues since the last call: resynchronize
    _aggregate(active, path, nh, prio, ingr, delayed, sw, qf, pend, qlen, occ, pend_in, used)
    for f in range(F):
        left = 0.0
        for h in range(nh[f]):
            left += qf[f, h] + pend[f, h]
        fback[f] = left
    n_watch = 0
    for p in range(P):
        watched = False
        for a in range(nact):
            q = active[a]
            budget[q, p] = INF
            if xoff[q, p] or asserted[q, p] or forced[q, p] > 0.0:
                watched = True
        if watched:
            watch[n_watch] = p
            n_watch += 1
    nwatch[0] = n_watch

    done = 0
    while done < n_ticks:
        tick = clock[0]
        now = tick * fine_dt
        _start_iterations(now, jphase, jend, jstart, jptr, jflows, fbytes, remaining, delivered, fdone)
        if tick % ratio == 0:
            # a coarse boundary: pick the step for the next coarse period
            comm = False
            next_start = INF
            for j in range(jphase.shape[0]):
                if jphase[j] == COMM:
                    comm = True
                elif jphase[j] == COMPUTE:
                    next_start = min(next_start, jend[j])
            if quiet[0] and not storming and not comm:
                # nothing on the wire and nothing paused: only DCQCN timers run
                at_line = True
                for f in range(F):
                    if rc[f] < cap[path[f, 0]] or rt[f] < cap[path[f, 0]]:
                        at_line = False
                        break
                n = 1
                if at_line:  # skip ahead to the next iteration start
                    n = max(1, (n_ticks - done) // ratio)
                    if next_start < INF:
                        n = max(1, min(n, math.ceil((next_start - now) / coarse_dt - 1e-9)))
                    factor = decay_coarse**n
                    for f in range(F):
                        alpha[f] *= factor
                else:
                    for f in range(F):
                        alpha[f] *= decay_coarse
                        if dcqcn_on and prio[f] == lossless and cap[path[f, 0]] > 0.0:
                            _dcqcn_increase(f, coarse_dt, cap[path[f, 0]], True, prm, rc, rt, tstage, bstage, tacc,
                                            bacc)  # fmt: skip
                clock[0] += n * ratio
                done += n * ratio
                stats[2] += n
                continue
            busy = hot[0] or _pressure(coarse_dt, dcqcn_on, lossless, prm, prio, fjob, jphase, stalled,
                                       remaining, rc, rt, tstage, bstage, tacc, bacc, rate_limit, cap, path, nh,
                                       budget, load)  # fmt: skip
            fine[0] = ratio > 1 and busy
            hot[0] = False
            # queue totals are kept incrementally within the period; recompute them exactly once per period
            _aggregate(active, path, nh, prio, ingr, delayed, sw, qf, pend, qlen, occ, pend_in, used)
        if fine[0]:
            dt = fine_dt
            ticks = 1
            decay = decay_fine
            stats[0] += 1
        else:
            dt = coarse_dt
            ticks = ratio
            decay = decay_coarse
            stats[1] += 1
        cnp_window = dt / prm[P_CNP_INTERVAL]
        stamp[0] += 1
        mk = stamp[0]
        nrel = 0

        # --- PFC budgets: what each egress may send this step, given its peer's ingress PG state.
        # Only watched ports (XOFF, pausing or storming) hold a budget; every other one has none (INF).
        for k in range(nwatch[0]):
            i = watch[k]
            if mark[i] != mk:
                mark[i] = mk
                rel[nrel] = i
                nrel += 1
            u = peer[i]
            for a in range(nact):
                q = active[a]
                b = INF
                fp = forced[q, i]
                if fp > 0.0:
                    b = (1.0 - fp) * cap[u] * dt
                if sw[i] >= 0 and q == lossless and pfc_on[q, i] and xoff[q, i]:
                    xo = pfc_alpha * max(0.0, buffer - used[sw[i]])
                    b = min(b, max(0.0, xo - occ[q, i] - pend_in[q, i] + drain_prev[q, i] * dt))
                if wd_on and wd[q, u] != WD_OFF:
                    b = INF  # the watchdog stormed the queue: pauses are ignored (forwarded or dropped)
                budget[q, u] = b

        # --- senders offer min(rate, line) while their iteration has bytes left; the active set is
        # the flows sending or with bytes in the fabric, and the ports on their paths
        for f in range(F):
            line = cap[path[f, 0]]
            r = rc[f]
            if dcqcn_on and prio[f] == lossless and line > 0.0:
                r = _dcqcn_increase(f, dt, line, True, prm, rc, rt, tstage, bstage, tacc, bacc)
            offer = 0.0
            if not stalled[f] and remaining[f] > 0.0 and jphase[fjob[f]] == COMM:
                offer = min(remaining[f], min(r, rate_limit[f], line) * dt)
            if offer > 0.0 or fback[f] > 0.0:
                fact[f] = True
                for h in range(nh[f]):
                    dep[f, h] = 0.0
                    lost[f, h] = 0.0
                    arr[f, h] = 0.0
                    for p in (path[f, h], peer[path[f, h]]):
                        if mark[p] != mk:
                            mark[p] = mk
                            rel[nrel] = p
                            nrel += 1
                arr[f, 0] = offer
            else:
                fact[f] = False
                last_cnp[f] = 0.0
                alpha[f] *= decay  # an idle QP's alpha keeps decaying

        # --- egress ports in processing order (those the active flows use)
        for k in range(oport.shape[0]):
            p = oport[k]
            if mark[p] != mk:
                continue
            lo = optr[k]
            hi = optr[k + 1]
            s = sw[p]
            for a in range(nact):
                tot_q[active[a]] = 0.0
            for e in range(lo, hi):
                f = of[e]
                if not fact[f]:
                    continue
                h = oh[e]
                if h > 0:
                    arr[f, h] = pend[f, h] if delayed[f, h] else dep[f, h - 1]
                    if (
                        wd_on
                        and prio[f] == lossless
                        and (wd[lossless, p] == WD_DROP or wd[lossless, ingr[f, h]] == WD_DROP)
                    ):
                        _wd_discard(f, h, pkt, p, wd[lossless, p] == WD_DROP, lossless, path, nh, ingr, sw, peer,
                                    prio, qf, arr, qlen, occ, used, tot_dropped, remaining, pc, pq)  # fmt: skip
                        continue
                tot_q[prio[f]] += qf[f, h] + arr[f, h]
            _waterfill(tot_q, want, serve, active, budget, p, cap[p] * dt)
            q_before = qlen[lossless, p]
            for e in range(lo, hi):
                f = of[e]
                if not fact[f]:
                    continue
                h = oh[e]
                q = prio[f]
                t = tot_q[q]
                have = qf[f, h] + arr[f, h]
                d = min(have, have * serve[q] / t) if t > 0.0 else 0.0
                bad = d * err[p]
                dep[f, h] = d - bad
                lost[f, h] = bad
                if h == 0:
                    remaining[f] -= d
                    tot_sent[f] += d
                else:
                    delta = have - d - qf[f, h]
                    qf[f, h] = have - d
                    qlen[q, p] += delta
                    occ[q, ingr[f, h]] += delta
                    used[s] += delta
                if bad > 0.0:
                    tot_dropped[f] += bad
                    remaining[f] += bad
                    pc[peer[p], C_FCS_ERRORS] += bad / pkt
                    _lost_packets(pkt, bad, f, prio, lossless, path, nh, peer, pc)
            if s < 0:
                continue
            backlog = 0.0
            for a in range(nact):
                backlog += qlen[active[a], p]
            if backlog <= 1e-9 and q_before <= 1e-9:
                continue  # everything that arrived left: no marking, no buffer pressure from this port
            # ECN: RED on the lossless queue at the step's mean occupancy
            q_mean = 0.5 * (q_before + qlen[lossless, p])
            pmark[lossless, p] = red_probability(q_mean, kmin, kmax, pmax)
            if q_mean > kmin:  # a run above the threshold continues only from the step that ended where this starts
                if abs(krun_end[p] - now) > 0.5 * fine_dt:
                    krun[p] = 0.0
                krun[p] += dt
                krun_end[p] = now + dt
                kabove[p] += dt
                if krun[p] > krun_max[p]:
                    krun_max[p] = krun[p]
            free = max(0.0, buffer - used[s])
            # lossy queues: tail drop above the dynamic threshold
            for a in range(nact):
                q = active[a]
                if q == lossless:
                    continue
                excess = qlen[q, p] - lossy_alpha * free
                if excess <= 0.0:
                    continue
                total = 0.0
                for e in range(lo, hi):
                    if fact[of[e]] and prio[of[e]] == q:
                        total += min(qf[of[e], oh[e]], arr[of[e], oh[e]])
                if total <= 0.0:
                    continue
                share = min(1.0, excess / total)
                if cnp_lossy:
                    lshare[q, p] = share
                for e in range(lo, hi):
                    f = of[e]
                    h = oh[e]
                    if fact[f] and prio[f] == q:
                        x = min(qf[f, h], arr[f, h]) * share
                        if x > 0.0:
                            _drop(f, h, x, False, prm, path, nh, ingr, sw, peer, prio, qf, arr, qlen, occ, used,
                                  tot_dropped, remaining, pc, pq)  # fmt: skip
            # lossless ingress priority groups: hold upstream (PFC) or drop (PFC off) what exceeds XOFF
            xo = pfc_alpha * max(0.0, buffer - used[s])
            for e in range(lo, hi):
                f = of[e]
                if fact[f] and prio[f] == lossless:
                    h = oh[e]
                    i = ingr[f, h]
                    rsum[i] += min(qf[f, h], arr[f, h])
                    rratio[i] = -1.0
            for e in range(lo, hi):
                f = of[e]
                if not fact[f] or prio[f] != lossless:
                    continue
                h = oh[e]
                i = ingr[f, h]
                if rratio[i] < 0.0:
                    excess = occ[lossless, i] - xo
                    rratio[i] = min(1.0, excess / rsum[i]) if excess > 0.0 and rsum[i] > 0.0 else 0.0
                x = min(qf[f, h], arr[f, h]) * rratio[i]
                if x <= 0.0:
                    continue
                if pfc_on[lossless, i]:
                    if not delayed[f, h]:
                        _give_back(f, h, x, prm, path, ingr, delayed, sw, pfc_on, prio, qf, arr, dep, qlen, occ,
                                   used, ret, remaining, tot_sent)  # fmt: skip
                else:
                    _drop(f, h, x, True, prm, path, nh, ingr, sw, peer, prio, qf, arr, qlen, occ, used,
                          tot_dropped, remaining, pc, pq)  # fmt: skip
            for e in range(lo, hi):
                rsum[ingr[of[e], oh[e]]] = 0.0

        # --- counters, PG drain, delivery, ECN seen by the receiver, CNPs, DCQCN
        in_network = 0.0
        marking = False
        for f in range(F):
            if not fact[f]:
                continue
            q = prio[f]
            n_hops = nh[f]
            surv = 1.0
            left = 0.0
            for h in range(n_hops):
                p = path[f, h]
                d = dep[f, h]
                bad = lost[f, h]
                sent = d + bad
                if sent > 0.0:
                    txq[q, p] += sent
                    if bad > 0.0:
                        lostq[q, p] += bad
                    if h > 0:
                        drain[q, ingr[f, h]] += sent
                    pm = pmark[q, p]
                    if pm > 0.0:
                        markq[q, p] += sent * pm
                        surv *= 1.0 - pm
                        marking = True
                if h + 1 < n_hops and delayed[f, h + 1]:
                    pend_in[q, ingr[f, h + 1]] += d - pend[f, h + 1]
                    pend[f, h + 1] = d
                    left += d
                left += qf[f, h]
            fback[f] = left
            in_network += left
            d = dep[f, n_hops - 1]
            n_handled = 0.0
            if d > 0.0:
                goal = fbytes[f] - done_tol
                if delivered[f] < goal <= delivered[f] + d:
                    # the iteration's last byte arrives in this step, at the flow's pace: this step's delivery
                    # is only what was left, so the pace is the larger of it and the last step's
                    pace = max(d / dt, frate[f])
                    fdone[f] = now + min(dt, (goal - delivered[f]) / pace)
                frate[f] = d / dt
                delivered[f] += d
                tot_delivered[f] += d
                dst = peer[path[f, n_hops - 1]]
                if q == lossless:
                    marked = d / pkt * (1.0 - surv)
                    if marked > 0.0:
                        # notification point: at most one CNP per QP per interval
                        pc[dst, C_ECN_ROCE] += marked
                        tot_ce[f] += marked
                        cnp_credit[f] += cnp_window * (1.0 - math.exp(-marked / cnp_window))
                        n = math.floor(cnp_credit[f])
                        cnp_credit[f] -= n
                        if n > 0:
                            pc[dst, C_CNP_SENT] += n
                            tot_cnp[f] += n
                            src = path[f, 0]
                            arrive = float(n)
                            if cnp_lossy:
                                arrive = _cnp_fabric_drops(f, arrive, n_hops, path, peer, sw, cnp_q, lshare, pq)
                            keep = arrive * (1.0 - cnp_loss[src])
                            hand_credit[f] += keep
                            n_handled = math.floor(hand_credit[f] + 1e-9)
                            hand_credit[f] -= n_handled
                            pc[src, C_CNP_HANDLED] += n_handled
                            if cnp_ignore[src]:
                                pc[src, C_CNP_IGNORED] += arrive - keep
            last_cnp[f] = n_handled
            if dcqcn_on and q == lossless:
                _dcqcn_cut(f, n_handled, dt, decay, prm, rc, rt, alpha, tstage, bstage, tacc, bacc)
            else:
                alpha[f] *= decay

        # --- PFC state per ingress PG; pause frames and durations on both ends of the link
        pausing = False
        held = False
        n_watch = 0
        for k in range(nrel):
            i = rel[k]
            u = peer[i]
            s = sw[i]
            keep_watching = False
            for a in range(nact):
                q = active[a]
                tau = 0.0
                if s >= 0 and q == lossless and pfc_on[q, i]:
                    xo = pfc_alpha * max(0.0, buffer - used[s])
                    o = occ[q, i]
                    was = xoff[q, i]
                    if ret[q, i] > 0.0 or (o > 0.0 and o >= xo * (1.0 - 1e-9)):
                        now_x = True
                    elif o < xo - xon_offset:
                        now_x = False
                    else:
                        now_x = was
                    xoff[q, i] = now_x
                    if now_x or was:
                        busy = txq[q, u] / cap[u] if cap[u] > 0.0 else 0.0
                        tau = max(0.0, dt - busy)
                        if was and not now_x:
                            tau *= 0.5
                elif xoff[q, i]:
                    xoff[q, i] = False
                fp = forced[q, i]
                if fp * dt > tau:
                    tau = fp * dt
                if tau > 0.0:
                    episode = 0.0 if asserted[q, i] else 1.0
                    frames = tau / refresh[i] + episode
                    pq[i, q, Q_PFC_TX] += frames
                    pq[i, q, Q_PFC_TX_US] += tau * 1e6
                    pq[u, q, Q_PFC_RX] += frames
                    pq[u, q, Q_PFC_RX_US] += tau * 1e6
                    pq[u, q, Q_PFC_RX_TRANS] += episode
                    asserted[q, i] = True
                    pausing = True
                else:
                    asserted[q, i] = False
                if xoff[q, i]:
                    pausing = True
                if xoff[q, i] or asserted[q, i] or fp > 0.0:
                    keep_watching = True
                else:
                    budget[q, u] = INF
                drain_prev[q, i] = drain[q, i] / dt  # a rate: the next step may be longer or shorter
                if ret[q, i] > 0.0:
                    held = True
                if qlen[q, i] > qwm[q, i]:
                    qwm[q, i] = qlen[q, i]
                if occ[q, i] > pgwm[q, i]:
                    pgwm[q, i] = occ[q, i]
            if keep_watching:
                watch[n_watch] = i
                n_watch += 1
        nwatch[0] = n_watch
        # per-step scratch: folded into the coarse-period totals, then cleared
        for k in range(nrel):
            i = rel[k]
            for a in range(nact):
                q = active[a]
                sent = txq[q, i]
                if sent > 0.0:
                    acc_tx[q, i] += sent
                    acc_lost[q, i] += lostq[q, i]
                    acc_mark[q, i] += markq[q, i]
                    txq[q, i] = 0.0
                    lostq[q, i] = 0.0
                    markq[q, i] = 0.0
                drain[q, i] = 0.0
                ret[q, i] = 0.0
                pmark[q, i] = 0.0
                if cnp_lossy:
                    lshare[q, i] = 0.0
        for s in range(used.shape[0]):
            if used[s] > bufwm[s]:
                bufwm[s] = used[s]

        communicating = False
        for j in range(jphase.shape[0]):
            if jphase[j] == COMM:
                communicating = True
        if communicating:
            _finish_iterations(
                now + dt, prm[P_DONE_TOL], jphase, jend, jstart, jiter, jcompute, jptr, jflows, fbytes, nh, path,
                ingr, sw, prio, delayed, remaining, delivered, tot_sent, tot_delivered, qf, pend, fback, qlen, occ,
                pend_in, used, it_job, it_start, it_end, it_n, fdone,
            )  # fmt: skip
        clock[0] += ticks
        done += ticks
        if clock[0] % ratio == 0:
            _fold_counters(pkt, lossless, active, peer, sw, acc_tx, acc_lost, acc_mark, pc, pq)
        quiet[0] = in_network == 0.0 and not pausing
        # congestion in motion: marked packets, PFC holding bytes back, queues moving. (A fabric
        # frozen by PFC, e.g. a deadlock or a storm that has filled its tree, is static: coarse.)
        if marking or held or abs(in_network - st.backlog[0]) > pkt:
            hot[0] = True
        st.backlog[0] = in_network
        if it_n[0] >= room and clock[0] % ratio == 0:
            return done
    return done
