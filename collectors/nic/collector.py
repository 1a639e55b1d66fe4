"""NIC collector: `ethtool -S` of every RoCE netdev and the RDMA port counters of one host.

One `poll()` reads, through the `NicHost` seam (`host.py`: `LiveHost` or `FixtureHost`):

* for each netdev: `ethtool -S` (per-queue statistics skipped, see `ethtool.py`), and the link state and
  speed from /sys/class/net/<netdev>/{operstate,speed}; port = the netdev, source = `ethtool`;
* for each RDMA device port: /sys/class/infiniband/<dev>/ports/<p>/hw_counters (named by the provider: vendor
  `mlx5_rdma` or `bnxt_rdma` by the device's driver, `vendors.py`) and counters (IBTA PortCounters, vendor
  `ib_port`; a metric the provider's hw_counters already give is kept raw, `normalize.demote_taken`), and its
  state and rate; port = `<dev>/<p>`, source = `rdma`;

and returns ONE Batch of the `counters` stream for the host, keyed by host name (device = host
name, role = `nic`). `run()` polls on fixed ticks and publishes each Batch through a Producer.

Names go through the catalog (`normalize.py`): canonical metrics, scaled; unknown names kept as
`raw:<name>` (or dropped with `keep_unknown=False`). Link rows: raw names `operstate`/`speed`
(netdev) and `state`/`rate` (RDMA port).

Failures. Each netdev, each RDMA port and the discovery are targets with their own `Health` (see
`health()`): one that cannot be read (ethtool missing, failing or timing out) is counted and logged
once (again only when the error changes, and on recovery), and the others go on; malformed lines
are counted per target and logged the same way; good values around them are kept.

Self-metrics (`NicMetrics`): the standard `rocescope_nic_*` per target, plus the poll's CPU time
and the per-queue values skipped.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter

from rocescope.collectors.common.health import CollectorMetrics, Health, Targets
from rocescope.collectors.common.polling import run_ticks
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.lldp.collector import links_batch
from rocescope.collectors.lldp.parse import Neighbor
from rocescope.collectors.nic.ethtool import parse_ethtool_stats, vendor_of_driver
from rocescope.collectors.nic.host import NicHost
from rocescope.collectors.nic.normalize import (
    KEEP_UNKNOWN,
    RDMA_NOT_COUNTERS,
    UNKNOWN_PREFIX,
    add_link,
    demote_taken,
    normalize,
)
from rocescope.collectors.nic.vendors import IB_PORT_VENDOR, rdma_vendor
from rocescope.errors import RocescopeError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer

__all__ = ["NicCollector", "NicInventory", "NicMetrics"]

log = logging.getLogger(__name__)

_ROLE = "nic"
#: `links` rows naming a host RDMA port's netdev (the host to itself), as `alias` rows name a switch port's alias
RDMA_SOURCE = "rdma"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class NicMetrics(CollectorMetrics):
    """`rocescope_nic_*`: the standard per-target metrics (targets: each netdev, each RDMA port `<dev>/<p>`,
    and `discovery`), plus what only this collector has."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__("nic", registry)
        r = self.registry
        self.poll_cpu_seconds = Counter(
            "rocescope_nic_poll_cpu_seconds", "CPU time spent polling (this thread).", registry=r
        )
        self.queue_values = Counter(
            "rocescope_nic_queue_values_skipped", "Per-queue ethtool statistics skipped.", registry=r
        )


def _ns(ts: dt.datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return (ts - _EPOCH) // dt.timedelta(microseconds=1) * 1000


@dataclass
class NicInventory:
    """What discovery found: netdevs and RDMA devices with their catalog vendor, RDMA ports, RDMA port -> netdev."""

    netdevs: list[str] = field(default_factory=list)
    vendors: dict[str, str] = field(default_factory=dict)
    rdma_ports: list[tuple[str, int]] = field(default_factory=list)
    port_map: dict[str, str | None] = field(default_factory=dict)
    rdma_vendors: dict[str, str] = field(default_factory=dict)


class NicCollector:
    """Polls one host's NICs into one `counters` Batch per poll; `run()` publishes them on a cadence."""

    def __init__(
        self,
        host: NicHost,
        hostname: str,
        producer: Producer | None = None,
        keep_unknown: bool = KEEP_UNKNOWN,
        rediscover_s: float = 60.0,
        metrics: NicMetrics | None = None,
    ):
        self.host = host
        self.hostname = hostname
        self.producer = producer
        self.keep_unknown = keep_unknown
        self.rediscover_s = rediscover_s
        self.metrics = metrics or NicMetrics()
        self.targets = Targets(self.metrics, log, f"nic {hostname}", keep_unknown)
        self.inventory = NicInventory()
        self._discovered_at: float | None = None
        self._inventoried_at: float | None = None

    def health(self) -> dict[str, Health]:
        """Per target (netdev, RDMA port, `discovery`): what the collector knows of its reads."""
        return dict(self.targets.health)

    # --- discovery
    def discover(self) -> NicInventory:
        """Find the netdevs (and their drivers), RDMA ports and the RDMA port -> netdev map."""
        t0 = time.perf_counter()
        try:
            netdevs = self.host.netdevs()
            vendors = {nd: vendor_of_driver(self.host.driver(nd)) for nd in netdevs}
            devices = self.host.rdma_devices()
            rdma_vendors = {dev: rdma_vendor(self.host.rdma_driver(dev), dev) for dev in devices}
            ports = [(dev, p) for dev in devices for p in self.host.rdma_ports(dev)]
            port_map = {f"{dev}/{p}": self.host.netdev_of(dev, p) for dev, p in ports}
        except (RocescopeError, OSError) as exc:
            problem = f"discovery failed, keeping the previous inventory: {exc}"
            self.targets.failed("discovery", problem, time.perf_counter() - t0)
            return self.inventory
        self.targets.succeeded("discovery", time.perf_counter() - t0)
        self.targets.add(*netdevs, *port_map)
        self.inventory = NicInventory(netdevs, vendors, ports, port_map, rdma_vendors)
        self._discovered_at = time.monotonic()
        return self.inventory

    @property
    def port_map(self) -> dict[str, str | None]:
        """`mlx5_3/1` -> `eth3` (None for a port without a netdev) as of the last discovery."""
        return dict(self.inventory.port_map)

    # --- polling
    def poll(self, ts: dt.datetime | None = None) -> Batch:
        """Read every target once. With `ts`, every row carries it; otherwise each target's read time."""
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        if self._discovered_at is None or time.monotonic() - self._discovered_at >= self.rediscover_s:
            self.discover()
        fixed = None if ts is None else _ns(ts)
        rows = CounterRows()
        inv = self.inventory
        for netdev in inv.netdevs:
            self._poll_netdev(netdev, inv.vendors.get(netdev, "unknown"), rows, fixed)
        for dev, port in inv.rdma_ports:
            self._poll_rdma(dev, port, inv.rdma_vendors.get(dev) or rdma_vendor("", dev), rows, fixed)
        batch = rows.to_batch(self.hostname, _ROLE, "")
        m = self.metrics
        m.poll_seconds.observe(time.perf_counter() - wall0)
        m.poll_cpu_seconds.inc(max(0.0, time.thread_time() - cpu0))
        return batch

    def _poll_netdev(self, netdev: str, vendor: str, rows: CounterRows, fixed: int | None) -> None:
        t0 = time.perf_counter()
        ts_ns = time.time_ns() if fixed is None else fixed
        start, unknown = len(rows.ts), rows.unknown
        try:
            text = self.host.ethtool_stats(netdev)
            stats = parse_ethtool_stats(text, f"ethtool -S {netdev}", logger=None)
            normalize(vendor, stats.values, self.keep_unknown, rows)
            add_link(self.host.link(netdev), rows, "operstate", "speed")
        except (RocescopeError, OSError) as exc:
            self._failed(netdev, rows, start, unknown, exc, t0)
            return
        n = rows.stamp(ts_ns, netdev, "ethtool")
        self.metrics.queue_values.inc(stats.queue_values)
        problem = ""
        if stats.malformed:
            lineno, line = stats.examples[0]
            problem = (
                f"skipped {stats.malformed} malformed line(s) of `ethtool -S`, kept {len(stats.values)} values; "
                f"first at line {lineno}: {line!r}"
            )
        self.targets.succeeded(
            netdev, time.perf_counter() - t0, n, rows.unknown - unknown, stats.malformed, problem=problem
        )

    def _poll_rdma(self, dev: str, port: int, provider: str, rows: CounterRows, fixed: int | None) -> None:
        target = f"{dev}/{port}"
        t0 = time.perf_counter()
        ts_ns = time.time_ns() if fixed is None else fixed
        start, unknown = len(rows.ts), rows.unknown
        bad: list[str] = []
        try:
            # the provider's hw_counters first: a metric they give, the IBTA counters/ do not give again
            first = len(rows.metric)
            normalize(provider, self._rdma_pairs(dev, port, "hw_counters", bad), self.keep_unknown, rows)
            taken = {
                (m, p)
                for m, p in zip(rows.metric[first:], rows.priority[first:], strict=True)
                if not m.startswith(UNKNOWN_PREFIX)
            }
            first = len(rows.metric)
            normalize(IB_PORT_VENDOR, self._rdma_pairs(dev, port, "counters", bad), self.keep_unknown, rows)
            demote_taken(rows, first, taken, IB_PORT_VENDOR, self.keep_unknown)
            add_link(self.host.rdma_link(dev, port), rows, "state", "rate")
        except (RocescopeError, OSError) as exc:
            self._failed(target, rows, start, unknown, exc, t0)
            return
        n = rows.stamp(ts_ns, target, "rdma")
        problem = f"skipped {len(bad)} non-numeric counter(s): {', '.join(bad[:3])}" if bad else ""
        self.targets.succeeded(target, time.perf_counter() - t0, n, rows.unknown - unknown, len(bad), problem=problem)

    def _rdma_pairs(self, dev: str, port: int, group: str, bad: list[str]) -> list[tuple[str, float]]:
        """(name, value) of one counter directory of an RDMA port; non-numeric files are listed in `bad`."""
        pairs: list[tuple[str, float]] = []
        for name, text in self.host.rdma_port_counters(dev, port, group).items():
            if name in RDMA_NOT_COUNTERS:
                continue
            try:
                pairs.append((name, int(text)))
            except ValueError:
                bad.append(f"{group}/{name}={text[:40]!r}")
        return pairs

    def _failed(self, target: str, rows: CounterRows, start: int, unknown: int, exc: Exception, t0: float) -> None:
        """A target that failed half-way: drop what it added, count and log the failure."""
        rows.truncate(start)
        rows.unknown = unknown
        self.targets.failed(target, str(exc).removeprefix(f"{target}: "), time.perf_counter() - t0)

    # --- the loop
    def run(self, interval_s: float, stop_event: threading.Event) -> int:
        """Poll every `interval_s` until `stop_event` is set, publishing each Batch; returns the poll count.

        Ticks are fixed (no drift); a poll that runs past the next tick skips it (counted as overrun).
        A producer that refuses a Batch is logged and counted, and polling goes on.
        """
        return run_ticks(
            lambda: [self.poll(), *filter(None, [self.inventory_batch()])],
            self.producer, interval_s, stop_event, self.metrics, log, self.hostname,
        )  # fmt: skip

    def inventory_batch(self, seen_at: dt.datetime | None = None) -> Batch | None:
        """The RDMA port -> netdev map as `links` rows of source `rdma` (the host to itself), once per discovery
        (every `rediscover_s`: a publish that failed is made good at the next, and its `seen_at` stays fresh):
        analysis names a host's RDMA port after its netdev by it where no job placement does (a host only
        background or storage traffic uses), so a link's downs counted at both are one link. Seen at `seen_at`
        (a poll's stamp), else now."""
        if self._discovered_at is None or self._discovered_at == self._inventoried_at:
            return None
        self._inventoried_at = self._discovered_at
        pairs = sorted((port, netdev) for port, netdev in self.inventory.port_map.items() if netdev)
        rows = [Neighbor(self.hostname, p, self.hostname, nd) for p, nd in pairs]
        return links_batch(rows, seen_at, key=self.hostname, source=RDMA_SOURCE)
