"""Telemetry shaped like real gear, written directly, for detector tests that must not lean on the simulator.

Each series is sampled at its own cadence and phase and stamped by its own (skewed) clock, counters are
cumulative integrals of a rate profile, watermarks are the peak since the previous read, and whatever a
test leaves out (port speeds, pause durations, one side of LLDP) is simply not there: the conditions
real fabrics give (SONiC polls ports every 1 s, queues every 10 s, watermarks every 60 s; Broadcom
reports no pause duration; Arista names ports `Ethernet1/1`; lldpd runs on the hosts only).
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from rocescope.analysis.frames import Window
from rocescope.pipeline.batch import conform
from rocescope.pipeline.store import Store


@dataclass(frozen=True)
class Steps:
    """A piecewise-constant profile: `base`, and `value` over each (start, end, value) span (later spans win).
    Integrated and maximised exactly, so bursts of milliseconds count in full whatever the read cadence."""

    spans: tuple[tuple[float, float, float], ...]
    base: float = 0.0

    def __call__(self, t: float) -> float:
        for start, end, value in reversed(self.spans):
            if start <= t < end:
                return value
        return self.base

    def _pieces(self, a: float, b: float) -> list[tuple[float, float, float]]:
        cuts = sorted({a, b, *(x for s, e, _ in self.spans for x in (s, e) if a < x < b)})
        return [(lo, hi, self((lo + hi) / 2)) for lo, hi in itertools.pairwise(cuts) if hi > lo]

    def integral(self, a: float, b: float) -> float:
        return sum((hi - lo) * v for lo, hi, v in self._pieces(a, b))

    def peak(self, a: float, b: float) -> float:
        return max((v for _, _, v in self._pieces(a, b)), default=self(a))


def steps(*spans: tuple[float, float, float], base: float = 0.0) -> Steps:
    return Steps(tuple(spans), base)


@dataclass
class Clock:
    """When a series is read (`phase` within its `every`) and how its device stamps it (`skew`)."""

    every: float = 1.0
    phase: float = 0.0
    skew: float = 0.0


@dataclass
class Telemetry:
    start: dt.datetime
    seconds: float
    counters: list[tuple[dt.datetime, str, str, str, int, str, float]] = field(default_factory=list)
    links: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    endpoints: list[tuple[str, str, str, str, str, int]] = field(default_factory=list)
    qps: list[tuple[str, str, str, int, int]] = field(default_factory=list)

    @property
    def window(self) -> Window:
        return Window(self.start, self.start + dt.timedelta(seconds=self.seconds))

    def _reads(self, clock: Clock) -> list[float]:
        n = int((self.seconds - clock.phase) // clock.every) + 1
        return [clock.phase + k * clock.every for k in range(n) if clock.phase + k * clock.every <= self.seconds]

    def _stamp(self, t: float, clock: Clock) -> dt.datetime:
        return self.start + dt.timedelta(seconds=t + clock.skew)

    def counter(
        self,
        device: str,
        role: str,
        port: str,
        metric: str,
        rate: Steps,
        clock: Clock,
        priority: int = -1,
        resets: Sequence[float] = (),
    ) -> None:
        """A cumulative counter of `rate` per second, read at the clock's cadence (reset to 0 at `resets`)."""
        total, last = 1e9 * (sum(map(ord, device + port + metric)) % 7 + 1), 0.0  # a device up for a while
        for read in self._reads(clock):
            for r in resets:
                if last <= r < read:
                    total, last = 0.0, r
            total += rate.integral(last, read)
            last = read
            self.counters.append((self._stamp(read, clock), device, role, port, priority, metric, total))

    def gauge(
        self, device: str, role: str, port: str, metric: str, value: Steps, clock: Clock, priority: int = -1
    ) -> None:
        """A gauge read at the clock's cadence: the peak of `value` since the previous read (a watermark)."""
        last = -clock.every
        for read in self._reads(clock):
            self.counters.append(
                (self._stamp(read, clock), device, role, port, priority, metric, value.peak(last, read))
            )
            last = read

    def snapshot(
        self, device: str, role: str, port: str, metric: str, value: Steps, clock: Clock, priority: int = -1
    ) -> None:
        """A gauge read at the clock's cadence as its value at that instant (a queue's occupancy)."""
        for read in self._reads(clock):
            self.counters.append(
                (self._stamp(read, clock), device, role, port, priority, metric, value.peak(read - 1e-6, read))
            )

    def link(self, device: str, port: str, peer_device: str, peer_port: str, source: str = "lldp") -> None:
        self.links.append((device, port, peer_device, peer_port, source))

    def rdma_netdev(self, host: str, rdma_port: str, netdev: str) -> None:
        """The NIC collector's inventory: a host RDMA port's netdev (a `links` row of source `rdma`)."""
        self.link(host, rdma_port, host, netdev, source="rdma")

    def endpoint(self, job: str, host: str, netdev: str, rdma_dev: str, ip: str, rank: int) -> None:
        self.endpoints.append((job, host, netdev, rdma_dev, ip, rank))

    def qp(self, host: str, rdma_dev: str, dest_ip: str, qpn: int | None = None, dest_qpn: int | None = None) -> None:
        """An RDMA connection (a QP owner row, as eBPF or `rdma resource show qp` gives it); its numbers, where a test
        pairs it with its other end, else numbers no other QP answers."""
        n = len(self.qps)
        self.qps.append(
            (host, rdma_dev, dest_ip, 100 + n if qpn is None else qpn, 200 + n if dest_qpn is None else dest_qpn)
        )

    def land(self, store: Store) -> None:
        rows = self.counters
        table = pa.table(
            {
                "ts": pa.array([r[0] for r in rows], pa.timestamp("ns", tz="UTC")),
                "device": [r[1] for r in rows],
                "role": [r[2] for r in rows],
                "port": [r[3] for r in rows],
                "priority": pa.array([r[4] for r in rows], pa.int8()),
                "metric": [r[5] for r in rows],
                "value": pa.array([float(r[6]) for r in rows], pa.float64()),
                "source": ["import"] * len(rows),
                "raw_name": [r[5] for r in rows],
            }
        )
        store.insert("counters", pa.Table.from_batches([conform("counters", table)]))
        seen = self.start - dt.timedelta(minutes=5)
        if self.links:
            links = pa.table(
                {
                    "seen_at": pa.array([seen] * len(self.links), pa.timestamp("ns", tz="UTC")),
                    "device": [r[0] for r in self.links],
                    "port": [r[1] for r in self.links],
                    "peer_device": [r[2] for r in self.links],
                    "peer_port": [r[3] for r in self.links],
                    "source": [r[4] for r in self.links],
                }
            )
            store.insert("links", pa.Table.from_batches([conform("links", links)]))
        if self.endpoints:
            far = seen + dt.timedelta(days=1)
            ep = {
                "job_id": [r[0] for r in self.endpoints],
                "job_name": [r[0].rpartition("/")[2] for r in self.endpoints],
                "namespace": [r[0].partition("/")[0] for r in self.endpoints],
                "pod": [f"{r[0].rpartition('/')[2]}-{r[5]}" for r in self.endpoints],
                "rank": pa.array([r[5] for r in self.endpoints], pa.int32()),
                "host": [r[1] for r in self.endpoints],
                "netdev": [r[2] for r in self.endpoints],
                "rdma_dev": [r[3] for r in self.endpoints],
                "ip": [r[4] for r in self.endpoints],
                "gid": [""] * len(self.endpoints),
                "valid_from": pa.array([seen] * len(self.endpoints), pa.timestamp("ns", tz="UTC")),
                "valid_to": pa.array([far] * len(self.endpoints), pa.timestamp("ns", tz="UTC")),
            }
            table = pa.table(ep)
            store.insert("endpoints", pa.Table.from_batches([conform("endpoints", table)]))
        if self.qps:
            n = len(self.qps)
            qp = {
                "host": [r[0] for r in self.qps],
                "rdma_dev": [r[1] for r in self.qps],
                "qpn": pa.array([r[3] for r in self.qps], pa.uint32()),
                "dest_qpn": pa.array([r[4] for r in self.qps], pa.uint32()),
                "dest_ip": [r[2] for r in self.qps],
                "pid": pa.array([4242] * n, pa.uint32()),
                "comm": ["reader"] * n,
                "cgroup": [""] * n,
                "job_id": [""] * n,
                "seen_at": pa.array([seen] * n, pa.timestamp("ns", tz="UTC")),
                "dest_gid": [""] * n,
                "udp_sport": pa.array([49152 + i for i in range(n)], pa.uint16()),
            }
            store.insert("qp_owners", pa.Table.from_batches([conform("qp_owners", pa.table(qp))]))
