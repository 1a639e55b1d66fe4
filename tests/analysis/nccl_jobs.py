"""Training jobs' all-reduces as NCCL Inspector writes them, timed as NCCL runs them, landed through the real
parser: for the impact, blame and slowdown tests.

Timing model (a ring or tree waits for its slowest member): every rank issues step k at its own time (the
step's start plus the rank's lateness); the collective then needs `net_us` (times the fabric's slowdown, with
a little deterministic noise) once the last rank is in; every rank ends together, so a rank's execution time
(kernel start to stop, `kernel_gpu`) is the end minus its own issue: the punctual ranks wait for the late one,
the late one waits least. Hosts' clocks may be offset (`skew_us`), as gettimeofday on different hosts is.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa

from rocescope.collectors.nccl.parse import parse_json_lines
from rocescope.collectors.nccl.write import InspectorRecord, json_line
from rocescope.pipeline.store import Store

from telemetry import Clock, Steps, Telemetry, steps

MiB = 1 << 20


def _noise(k: int, rank: int) -> float:
    """Deterministic noise in [-1, 1]."""
    return math.sin(12.9898 * k + 78.233 * rank) * 0.5 + math.sin(3.7 * k) * 0.5


@dataclass
class RingJob:
    job_id: str
    hosts: tuple[str, ...]
    communicator: str
    net_us: float = 20_000.0
    every_s: float = 0.25
    message_bytes: int = 256 * MiB
    noise: float = 0.03
    traced: bool = False
    #: the fabric's slowdown of the collective's own time (a factor over time)
    slow: Steps = field(default_factory=lambda: steps(base=1.0))
    #: rank -> how late it issues its collectives (us, over time)
    late: Mapping[int, Steps] = field(default_factory=dict)
    #: host -> clock offset (us)
    skew_us: Mapping[str, float] = field(default_factory=dict)
    netdev: str = "eth0"
    rdma_dev: str = "mlx5_0"

    @property
    def ranks(self) -> int:
        return len(self.hosts)

    def place(self, t: Telemetry) -> None:
        """The job's placement (`endpoints`): one rank, and one NIC, per host."""
        for rank, host in enumerate(self.hosts):
            t.endpoint(self.job_id, host, self.netdev, self.rdma_dev, f"10.9.{len(host)}.{rank + 1}", rank)

    def _steps(self, seconds: float) -> list[float]:
        return [k * self.every_s for k in range(int(seconds / self.every_s))]

    def records(self, start: dt.datetime, seconds: float) -> list[InspectorRecord]:
        t0_us = start.timestamp() * 1e6
        out = []
        for k, t in enumerate(self._steps(seconds)):
            issue = [t0_us + t * 1e6 + self.late.get(r, steps())(t) for r in range(self.ranks)]
            net = self.net_us * self.slow(t) * (1 + self.noise * _noise(k, 0))
            done = max(issue) + net
            for r, host in enumerate(self.hosts):
                skew = self.skew_us.get(host, 0.0)
                a, b = int(issue[r] + skew), int(done + skew)
                out.append(
                    InspectorRecord(
                        host=host,
                        pid=1000 + r,
                        communicator=self.communicator,
                        rank=r,
                        ranks=self.ranks,
                        nodes=self.ranks,
                        op="AllReduce",
                        sequence=k,
                        bytes=self.message_bytes,
                        exec_time_us=int(done - issue[r]),
                        dumped_at_us=b,
                        trace=(a, a + 5, ((a + 40, b),)) if self.traced else None,
                    )
                )
        return out

    def lost_gpu_seconds(self, start_s: float, end_s: float) -> float:
        """The true loss over [start_s, end_s): each rank's execution beyond what it would have been with every
        rank punctual and the fabric healthy."""
        lost = 0.0
        for k, t in enumerate(self._steps(end_s)):
            if t < start_s:
                continue
            issue = [t * 1e6 + self.late.get(r, steps())(t) for r in range(self.ranks)]
            healthy = self.net_us * (1 + self.noise * _noise(k, 0))
            done = max(issue) + healthy * self.slow(t)
            lost += sum(done - i - healthy for i in issue) / 1e6
        return lost


def land_collectives(store: Store, records: list[InspectorRecord]) -> int:
    """Write the records as Inspector's JSON lines and land what the real parser reads from them."""
    parsed = parse_json_lines("".join(json_line(r) for r in records))
    assert parsed.malformed == 0, parsed.problem
    store.insert("collectives", pa.Table.from_batches([parsed.batch]))
    return parsed.rows


# --- one leaf, two jobs: one's incast hurts the other -------------------------------------------------------

GB = 1e9
LINE = 50 * GB  # 400G in bytes/s
HOSTS = [f"gpu-{i:02d}" for i in range(1, 10)]
PORTS = {h: f"Ethernet1/{i}" for i, h in enumerate(HOSTS, start=1)}
PORT_CLOCK, QUEUE_CLOCK, WM_CLOCK = Clock(1.0, 0.31), Clock(10.0, 0.37), Clock(60.0, 0.42)
#: the incast's span (s into the window)
INCAST = (120.0, 210.0)


def incast_between_jobs(store: Store, start: dt.datetime, seconds: float = 300.0) -> tuple[Telemetry, RingJob, RingJob]:
    """Job B (team-b/ckpt, gpu-01..04) writes a checkpoint into gpu-09, where job A (team-a/train, gpu-05..09) has
    a rank: an 4-to-1 incast on leaf1's port to gpu-09 (SONiC cadences), during which A's ring waits on its rank
    behind the congested port (1.8x) and B's own ring does not. Landed; returns the telemetry, A and B."""
    t = Telemetry(start, seconds)
    victim = RingJob("team-a/train", tuple(HOSTS[4:]), "0xa11", slow=steps((*INCAST, 1.8), base=1.0))
    culprit = RingJob("team-b/ckpt", tuple(HOSTS[:4]), "0xb22", net_us=12_000.0, every_s=0.4)
    for job in (victim, culprit):
        job.place(t)
    receiver = HOSTS[-1]
    for i, host in enumerate(HOSTS, start=1):
        t.link(host, "eth0", "leaf1", PORTS[host])
        nic = Clock(1.0, (0.13 * i) % 1.0)
        t.counter(host, "nic", "eth0", "tx_bytes", steps(base=0.3 * LINE), nic)
        t.counter(host, "nic", "eth0", "rx_bytes", steps(base=0.3 * LINE), nic)
        busy = steps((*INCAST, 0.98 * LINE), base=0.3 * LINE) if host == receiver else steps(base=0.3 * LINE)
        t.counter("leaf1", "switch", PORTS[host], "tx_bytes", busy, PORT_CLOCK)
        t.counter("leaf1", "switch", PORTS[host], "rx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
        if host in culprit.hosts:
            t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*INCAST, 800.0)), nic)
            t.counter("leaf1", "switch", PORTS[host], "pfc_tx_pause", steps((*INCAST, 300.0)), PORT_CLOCK, priority=3)
            t.qp(host, "mlx5_0", victim_ip(t, receiver))
    for port in ("Ethernet2/1", "Ethernet2/2"):
        t.counter("leaf1", "switch", port, "tx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
    t.counter(receiver, "nic", "mlx5_0/1", "cnp_sent", steps((*INCAST, 3200.0)), Clock(1.0, 0.17))
    t.counter("leaf1", "switch", PORTS[receiver], "queue_ecn_marked_packets", steps((*INCAST, 2e5)), QUEUE_CLOCK, 3)
    t.gauge("leaf1", "switch", PORTS[receiver], "queue_watermark_bytes", steps((*INCAST, 9e6), base=4e4), WM_CLOCK, 3)
    t.land(store)
    land_collectives(store, victim.records(start, seconds) + culprit.records(start, seconds))
    return t, victim, culprit


def victim_ip(t: Telemetry, host: str) -> str:
    return next(ip for _, h, _, _, ip, _ in t.endpoints if h == host)


def one_leaf(t: Telemetry, hosts: tuple[str, ...]) -> None:
    """The hosts cabled to leaf1 (LLDP from the hosts), moving a little traffic: a fabric with nothing wrong."""
    for i, host in enumerate(hosts, start=1):
        t.link(host, "eth0", "leaf1", f"Ethernet1/{i}")
        t.counter(host, "nic", "eth0", "tx_bytes", steps(base=0.1 * LINE), Clock(1.0, (0.13 * i) % 1.0))
        t.counter("leaf1", "switch", f"Ethernet1/{i}", "tx_bytes", steps(base=0.1 * LINE), PORT_CLOCK)
