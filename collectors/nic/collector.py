"""NIC collector: `ethtool -S` of every RoCE netdev and the RDMA port counters of one host.

One `poll()` reads, through the `NicHost` seam (`LiveHost` or `FixtureHost`, see `nic_host`):

* for each netdev: `ethtool -S` (per-queue statistics skipped, see `ethtool`), and the link state and
  speed from /sys/class/net/<netdev>/{operstate,speed}; port = the netdev, source = `ethtool`;
* for each RDMA device port: /sys/class/infiniband/<dev>/ports/<p>/counters (IBTA PortCounters, vendor
  `ib_port`) and hw_counters (vendor `mlx5_rdma`), and its state and rate; port = `<dev>/<p>`, source
  = `rdma`;

and returns ONE Batch of the `counters` stream for the host, keyed by host name (device = host
name, role = `nic`). `run()` polls on a fixed cadence and publishes each Batch through a Producer.

Names. Each raw name is resolved with `rocescope.catalog.resolve(vendor, raw)` (vendor from the
netdev's driver: mlx5_core -> mlx5, bnxt_en -> bnxt, ice, i40e) and scaled with `catalog.scale`
(IB `port_rcv_data`/`port_xmit_data` count 4-byte words: x4). The raw name is always kept in
`raw_name`. A name the catalog does not know is KEPT (the house rule) under metric
`raw:<name>` with priority -1: the prefix keeps it out of the canonical name space, where it could
otherwise collide (mlx5's software `rx_bytes` is not the port's `rx_bytes`, which comes from
`rx_bytes_phy`); `keep_unknown=False` (default: `KEEP_UNKNOWN`) drops them instead. Link rows use
the canonical `oper_up` (1/0; an `unknown` operstate gives no row) and `port_speed_bps`, raw names
`operstate`/`speed` (netdev) and `state`/`rate` (RDMA port).

Failures. A netdev or RDMA port that cannot be read (ethtool missing, failing or timing out) is
counted and logged once (again only when the error changes, and on recovery), and the others go on;
malformed lines are counted per target and logged the same way; good values around them are kept.

Self-metrics (`NicMetrics`, a private prometheus registry per collector): polls, poll wall and CPU
time, values shipped by source, unknown and per-queue values, errors and malformed lines per target,
per-target up and read duration, publish errors and overruns.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rocescope import catalog
from rocescope.collectors.nic.ethtool import parse_ethtool_stats, vendor_of_driver
from rocescope.collectors.nic.host import (
    RDMA_GROUPS,
    FixtureHost,
    FixtureNic,
    LinkState,
    LiveHost,
    NicHost,
    NicReadError,
)
from rocescope.errors import RocescopeError
from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.metrics import SelfMetrics
from rocescope.pipeline.transport import Producer

__all__ = [
    "KEEP_UNKNOWN",
    "RDMA_VENDORS",
    "UNKNOWN_PREFIX",
    "FixtureHost",
    "FixtureNic",
    "LinkState",
    "LiveHost",
    "NicCollector",
    "NicHost",
    "NicInventory",
    "NicMetrics",
    "NicReadError",
    "Normalized",
    "normalize",
]

log = logging.getLogger(__name__)

#: Metric of a raw name the catalog does not know: `raw:<name>`.
UNKNOWN_PREFIX = "raw:"
#: Default for NicCollector(keep_unknown=...): keep unknown names (as `raw:<name>`) or drop them.
KEEP_UNKNOWN = True
#: RDMA counter directory -> catalog vendor. hw_counters names follow mlx5's (other providers' names
#: mostly miss the catalog and are kept raw).
RDMA_VENDORS: dict[str, str] = {"counters": "ib_port", "hw_counters": "mlx5_rdma"}
#: Files of hw_counters that are settings, not counters (`lifespan`: the counter cache time in ms).
RDMA_NOT_COUNTERS = frozenset({"lifespan"})

_ROLE = "nic"
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MEMO_LIMIT = 20_000
_Hit = tuple[str, int, float]  # (metric, priority, factor)
_MISS: _Hit = ("", 0, 0.0)
# vendor -> raw -> _Hit, or None when unknown; a driver's raw names are a small fixed set.
_memo: dict[str, dict[str, _Hit | None]] = {}


def _resolve_into(table: dict[str, _Hit | None], vendor: str, raw: str) -> _Hit | None:
    hit = catalog.resolve(vendor, raw)
    out = None if hit is None else (hit[0], hit[1], catalog.scale(vendor, raw))
    if len(table) < _MEMO_LIMIT:
        table[raw] = out
    return out


@dataclass
class Normalized:
    """Columns of canonical rows for one target."""

    metrics: list[str] = field(default_factory=list)
    priorities: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    raw_names: list[str] = field(default_factory=list)
    unknown: int = 0


def normalize(
    vendor: str,
    pairs: Iterable[tuple[str, float]],
    keep_unknown: bool = KEEP_UNKNOWN,
    out: Normalized | None = None,
) -> Normalized:
    """Map (raw name, value) pairs to canonical (metric, priority, scaled value, raw name) columns."""
    out = out if out is not None else Normalized()
    metrics, prios, values, raws = out.metrics, out.priorities, out.values, out.raw_names
    table = _memo.setdefault(vendor, {})
    for raw, value in pairs:
        hit = table.get(raw, _MISS)
        if hit is _MISS:
            hit = _resolve_into(table, vendor, raw)
        if hit is None:
            out.unknown += 1
            if not keep_unknown:
                continue
            metrics.append(UNKNOWN_PREFIX + raw)
            prios.append(-1)
            values.append(float(value))
        else:
            metrics.append(hit[0])
            prios.append(hit[1])
            values.append(float(value) * hit[2])
        raws.append(raw)
    return out


def _link_rows(link: LinkState, out: Normalized, state_name: str, speed_name: str) -> None:
    if link.oper_up is not None:
        out.metrics.append("oper_up")
        out.priorities.append(-1)
        out.values.append(1.0 if link.oper_up else 0.0)
        out.raw_names.append(state_name)
    if link.speed_mbps is not None:
        out.metrics.append("port_speed_bps")
        out.priorities.append(-1)
        out.values.append(link.speed_mbps * 1e6)
        out.raw_names.append(speed_name)


class NicMetrics(SelfMetrics):
    """Self-metrics of one NIC collector, in its own registry (several collectors never share counters)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r = self.registry
        self.polls = Counter("rocescope_nic_polls", "Polls of the host.", registry=r)
        self.poll_seconds = Histogram(
            "rocescope_nic_poll_seconds",
            "Wall time of one poll.",
            registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )
        self.poll_cpu_seconds = Counter(
            "rocescope_nic_poll_cpu_seconds", "CPU time spent polling (this thread).", registry=r
        )
        self.values = Counter("rocescope_nic_values", "Values shipped.", ["source"], registry=r)
        self.unknown_values = Counter(
            "rocescope_nic_unknown_values", "Values whose raw name the catalog does not know.", ["source"], registry=r
        )
        self.queue_values = Counter(
            "rocescope_nic_queue_values_skipped", "Per-queue ethtool statistics skipped.", registry=r
        )
        self.errors = Counter("rocescope_nic_errors", "Failed reads of a target.", ["target"], registry=r)
        self.malformed = Counter(
            "rocescope_nic_malformed_lines", "Malformed lines or values skipped.", ["target"], registry=r
        )
        self.target_up = Gauge(
            "rocescope_nic_target_up", "1 when the last read of the target worked.", ["target"], registry=r
        )
        self.target_seconds = Gauge(
            "rocescope_nic_target_read_seconds", "Wall time of the last read of the target.", ["target"], registry=r
        )
        self.publish_errors = Counter("rocescope_nic_publish_errors", "Batches the producer refused.", registry=r)
        self.overruns = Counter("rocescope_nic_overruns", "Poll ticks skipped because a poll ran late.", registry=r)


@dataclass
class _Rows:
    ts: list[int] = field(default_factory=list)
    ports: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    norm: Normalized = field(default_factory=Normalized)
    closed_unknown: int = 0

    def close_target(self, ts_ns: int, port: str, source: str) -> int:
        """Tag the rows added since the last call with their time, port and source; how many they are."""
        k = len(self.norm.values) - len(self.ts)
        self.ts.extend([ts_ns] * k)
        self.ports.extend([port] * k)
        self.sources.extend([source] * k)
        self.closed_unknown = self.norm.unknown
        return k

    def discard_open(self) -> None:
        """Drop rows added since the last close (a target that failed half-way)."""
        n = len(self.ts)
        for column in (self.norm.metrics, self.norm.priorities, self.norm.values, self.norm.raw_names):
            del column[n:]
        self.norm.unknown = self.closed_unknown

    def to_batch(self, device: str) -> Batch:
        n = len(self.ts)
        table = pa.table(
            {
                "ts": pa.array(np.asarray(self.ts, dtype=np.int64), pa.timestamp("ns", tz="UTC")),
                "device": _constant(device, n),
                "role": _constant(_ROLE, n),
                "port": pa.array(self.ports, pa.string()).dictionary_encode(),
                "priority": pa.array(np.asarray(self.norm.priorities, dtype=np.int8), pa.int8()),
                "metric": pa.array(self.norm.metrics, pa.string()).dictionary_encode(),
                "value": pa.array(np.asarray(self.norm.values, dtype=np.float64), pa.float64()),
                "source": pa.array(self.sources, pa.string()).dictionary_encode(),
                "raw_name": pa.array(self.norm.raw_names, pa.string()).dictionary_encode(),
            }
        )
        return Batch("counters", conform("counters", table), key=device)


def _constant(value: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], pa.string()))


def _ns(ts: dt.datetime) -> int:
    if ts.tzinfo is None:
        ts = ts.replace(tzinfo=dt.UTC)
    return (ts - _EPOCH) // dt.timedelta(microseconds=1) * 1000


@dataclass
class NicInventory:
    """What discovery found: netdevs with their catalog vendor, RDMA ports, RDMA port -> netdev."""

    netdevs: list[str] = field(default_factory=list)
    vendors: dict[str, str] = field(default_factory=dict)
    rdma_ports: list[tuple[str, int]] = field(default_factory=list)
    port_map: dict[str, str | None] = field(default_factory=dict)


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
        self.inventory = NicInventory()
        self._discovered_at: float | None = None
        self._problems: dict[str, str] = {}  # target -> last reported problem (log once per change)

    # --- discovery
    def discover(self) -> NicInventory:
        """Find the netdevs (and their drivers), RDMA ports and the RDMA port -> netdev map."""
        try:
            netdevs = self.host.netdevs()
            vendors = {nd: vendor_of_driver(self.host.driver(nd)) for nd in netdevs}
            ports = [(dev, p) for dev in self.host.rdma_devices() for p in self.host.rdma_ports(dev)]
            port_map = {f"{dev}/{p}": self.host.netdev_of(dev, p) for dev, p in ports}
        except (RocescopeError, OSError) as exc:
            self._failed("discovery", f"discovery failed, keeping the previous inventory: {exc}")
            return self.inventory
        self._ok("discovery")
        self.inventory = NicInventory(netdevs, vendors, ports, port_map)
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
        rows = _Rows()
        inv = self.inventory
        for netdev in inv.netdevs:
            self._poll_netdev(netdev, inv.vendors.get(netdev, "unknown"), rows, fixed)
        for dev, port in inv.rdma_ports:
            self._poll_rdma(dev, port, rows, fixed)
        batch = rows.to_batch(self.hostname)
        m = self.metrics
        m.polls.inc()
        m.poll_seconds.observe(time.perf_counter() - wall0)
        m.poll_cpu_seconds.inc(max(0.0, time.thread_time() - cpu0))
        return batch

    def _poll_netdev(self, netdev: str, vendor: str, rows: _Rows, fixed: int | None) -> None:
        t0 = time.perf_counter()
        ts_ns = time.time_ns() if fixed is None else fixed
        try:
            text = self.host.ethtool_stats(netdev)
            stats = parse_ethtool_stats(text, f"ethtool -S {netdev}", logger=None)
            before = rows.norm.unknown
            normalize(vendor, stats.values, self.keep_unknown, rows.norm)
            _link_rows(self.host.link(netdev), rows.norm, "operstate", "speed")
        except (RocescopeError, OSError) as exc:
            rows.discard_open()
            self._failed(netdev, str(exc))
            return
        n = rows.close_target(ts_ns, netdev, "ethtool")
        m = self.metrics
        m.values.labels("ethtool").inc(n)
        m.unknown_values.labels("ethtool").inc(rows.norm.unknown - before)
        m.queue_values.inc(stats.queue_values)
        if stats.malformed:
            m.malformed.labels(netdev).inc(stats.malformed)
            lineno, line = stats.examples[0]
            self._failed(
                netdev,
                f"`ethtool -S {netdev}`: skipped {stats.malformed} malformed line(s), kept {len(stats.values)} "
                f"values; first at line {lineno}: {line!r}",
                count=False,
            )
        else:
            self._ok(netdev)
        m.target_seconds.labels(netdev).set(time.perf_counter() - t0)

    def _poll_rdma(self, dev: str, port: int, rows: _Rows, fixed: int | None) -> None:
        target = f"{dev}/{port}"
        t0 = time.perf_counter()
        ts_ns = time.time_ns() if fixed is None else fixed
        bad: list[str] = []
        before = rows.norm.unknown
        try:
            for group in RDMA_GROUPS:
                raw = self.host.rdma_port_counters(dev, port, group)
                pairs: list[tuple[str, float]] = []
                for name, text in raw.items():
                    if name in RDMA_NOT_COUNTERS:
                        continue
                    try:
                        pairs.append((name, int(text)))
                    except ValueError:
                        bad.append(f"{group}/{name}={text[:40]!r}")
                normalize(RDMA_VENDORS[group], pairs, self.keep_unknown, rows.norm)
            _link_rows(self.host.rdma_link(dev, port), rows.norm, "state", "rate")
        except (RocescopeError, OSError) as exc:
            rows.discard_open()
            self._failed(target, str(exc))
            return
        n = rows.close_target(ts_ns, target, "rdma")
        m = self.metrics
        m.values.labels("rdma").inc(n)
        m.unknown_values.labels("rdma").inc(rows.norm.unknown - before)
        if bad:
            m.malformed.labels(target).inc(len(bad))
            self._failed(target, f"{target}: skipped {len(bad)} non-numeric counter(s): {', '.join(bad[:3])}", False)
        else:
            self._ok(target)
        m.target_seconds.labels(target).set(time.perf_counter() - t0)

    def _failed(self, target: str, problem: str, count: bool = True) -> None:
        """Count a failed read (count=False: the target was read, with problems); log once per new problem."""
        if count:
            self.metrics.errors.labels(target).inc()
            self.metrics.target_up.labels(target).set(0)
        else:
            self.metrics.target_up.labels(target).set(1)
        if self._problems.get(target) != problem:
            self._problems[target] = problem
            log.warning("nic %s: %s", self.hostname, problem)

    def _ok(self, target: str) -> None:
        self.metrics.target_up.labels(target).set(1)
        if self._problems.pop(target, None) is not None:
            log.info("nic %s: %s read fine again", self.hostname, target)

    # --- the loop
    def run(self, interval_s: float, stop_event: threading.Event) -> int:
        """Poll every `interval_s` until `stop_event` is set, publishing each Batch; returns the poll count.

        Ticks are fixed (no drift); a poll that runs past the next tick skips it (counted as overrun).
        A producer that refuses a Batch is logged and counted, and polling goes on.
        """
        polls = 0
        next_tick = time.monotonic()
        while not stop_event.is_set():
            batch = self.poll()
            polls += 1
            if self.producer is not None:
                try:
                    self.producer.publish(batch)
                except Exception as exc:  # any transport failure: count it, keep polling
                    self.metrics.publish_errors.inc()
                    log.warning("nic %s: publishing a batch of %d rows failed: %s", self.hostname, batch.num_rows, exc)
            next_tick += interval_s
            now = time.monotonic()
            if now > next_tick:
                missed = int((now - next_tick) // interval_s) + 1
                self.metrics.overruns.inc(missed)
                next_tick += missed * interval_s
            stop_event.wait(next_tick - now)
        return polls
