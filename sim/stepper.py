"""The mechanics of the fabric engine: the kernel's arrays over time, flows' paths, the clock, snapshots.

`Stepper` owns the arrays of `rocescope.sim.kernel` (built by `rocescope.sim.arrays`), routes every flow
(ECMP or a forced route) and moves its queued bytes when its path changes, resolves port and flow
references, schedules timed actions on fabric time and advances the kernel between them (`run`,
`steps`), polls the PFC watchdog when it runs (`rocescope.sim.pfcwd`), and reads the counters as the
`counters` stream (`snapshot`). `rocescope.sim.engine.Engine`
adds the incident knobs and probes a scenario uses; the model itself is described there.
"""

from __future__ import annotations

import datetime as dt
import heapq
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple, Self

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocescope.errors import NoRouteError, SimError
from rocescope.sim import kernel as K
from rocescope.sim.arrays import build_counters, build_net, build_state, install_paths
from rocescope.sim.counters import SnapshotPlan
from rocescope.sim.ecmp import Ecmp
from rocescope.sim.jobs import Flow, Job
from rocescope.sim.params import EngineParams
from rocescope.sim.pfcwd import PfcWatchdog
from rocescope.sim.topology import Port, Topology

DEFAULT_START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

PortRef = Port | tuple[str, str] | int
FlowRef = Flow | int


class IterationRecord(NamedTuple):
    """One completed training iteration: communication phase start to its end (compute follows)."""

    job_id: str
    iteration: int
    start_s: float
    end_s: float

    @property
    def comm_s(self) -> float:
        return self.end_s - self.start_s


class ComputeChange(NamedTuple):
    """From `at_s` on, these ranks of the job compute longer by these seconds per iteration (a straggler GPU):
    iterations that END after `at_s` start their next communication phase that much later (the slowest rank's
    extra), while the other ranks, done on time, wait in the collective."""

    at_s: float
    job_id: str
    extra_s: dict[int, float]


class Stepper:
    """The fabric's state over fabric time: arrays, paths, scheduled actions, counter snapshots.

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
        #: (fine tick, order, action, whether it disturbs the fabric: the next coarse period runs fine)
        self._events: list[tuple[int, int, Callable[[], None], bool]] = []
        self._seq = itertools.count()
        self.iterations: list[IterationRecord] = []
        self._iter_counts = [0] * len(self.jobs)
        #: every change of the ranks' extra compute time, in order (`Engine.slow_compute`)
        self.compute_log: list[ComputeChange] = []
        self._slow_ranks: dict[str, dict[int, float]] = {}

        F = len(self.flows)
        prio = np.full(F, prm.lossless_priority, np.int64)
        if flow_priorities is not None:
            prio[:] = flow_priorities
            if ((prio < 0) | (prio > 7)).any():
                raise SimError("flow priorities must be 0..7")
        self._paths: list[list[int] | None] = [self._route(f) for f in range(F)]
        H = max([2, *(len(p) for p in self._paths if p is not None)])
        self._net = build_net(
            topology, self.jobs, self.flows, prm, line=self._line, switch_index=self._sw_index, priorities=prio, hops=H
        )
        line_src = np.array([self._line[p[0]] if p else 0.0 for p in self._paths]) if F else np.zeros(F)
        self._st = build_state(
            self.jobs,
            n_flows=F,
            hops=H,
            n_ports=n_ports,
            n_switches=len(self._sw_index),
            line_src=line_src,
            seed=seed,
            stagger=stagger,
            record_capacity=record_capacity,
        )
        self._counters, self._cnt = build_counters(n_ports)
        self._base = np.zeros_like(self._counters)
        self._plan = SnapshotPlan(topology, prm)
        self._set_active()
        self._install_paths()
        self.watchdog: PfcWatchdog | None = None
        if prm.pfcwd:
            switch_ports = np.array([p.id for p in ports if p.kind != "nic"], dtype=np.int64)
            self.watchdog = PfcWatchdog(prm, switch_ports)
            self._wd_every = max(1, round(prm.pfcwd_poll_s / prm.dt_s)) * self._ratio
            self._at_tick(self._wd_every, self._poll_watchdog, disturbs=False)

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
        """Write the current paths into the kernel arrays (an unrouted flow stays at its source port)."""
        paths = [p if p is not None else [self._src_port(f)] for f, p in enumerate(self._paths)]
        self._net, self._st = install_paths(self._net, self._st, paths, [p is None for p in self._paths])

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
        self._at_tick(self._step_of(t), action)

    def _at_tick(self, tick: int, action: Callable[[], None], disturbs: bool = True) -> None:
        heapq.heappush(self._events, (tick, next(self._seq), action, disturbs))

    def _poll_watchdog(self) -> None:
        """One PFC watchdog poll; the next one is due a poll interval later. Polling changes nothing
        in the fabric; a queue stormed or restored does."""
        assert self.watchdog is not None
        self._refresh()
        if self.watchdog.poll(self._net, self._st, self._cnt):
            self._st.hot[0] = True
        self._at_tick(int(self._st.tick[0]) + self._wd_every, self._poll_watchdog, disturbs=False)

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
            _, _, action, disturbs = heapq.heappop(self._events)
            action()
            if disturbs:
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

    def run(
        self, seconds: float, on_poll: Callable[[dt.datetime, Self], None] | None = None, poll_interval_s: float = 1.0
    ) -> None:
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

    def _refresh(self) -> None:
        """Recompute the aggregates (queue lengths, PG occupancy, buffer use) that probes and gauges read."""
        K.aggregates(self._net, self._st)

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
