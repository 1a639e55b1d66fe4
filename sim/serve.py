"""Serve a running simulated fabric over real protocols, and collect it back with the real collectors.

`FabricServer` publishes each poll of the engine (one `Engine.snapshot` per poll, FABRIC time) to
every facade through a `FabricClock`:

* a gNMI target per switch (`GnmiFacade` with the clock: SAMPLE runs on fabric time, notification
  timestamps are the tick's fabric time);
* an SNMP v2c agent per switch (`sim.facades.snmp`: IF-MIB ifTable/ifXTable, ifHighSpeed, PFC MIBs);
* a host-view directory per host (`write_host_view` lays it out once; each tick rewrites only the
  value files: `ethtool -S` text, RDMA `hw_counters/` and `counters/`, link state when it changes);
* LLDP (`lldpcli -f json` per device) and the pod list, static for a run;
* a mirror port (`sim.mirror.MirrorFiles`): the packet mirror's sampled RoCEv2 packets as rotating
  pcapng files in `<root>/mirror/` (with `out_dir`: `out_dir/served/mirror/`), one interface per mirrored
  leaf port, for `rocescope collect pcap FILES --sampling-rate N` or `rocescope import --kind pcap`.
  With `collect`, the pcap collector reads each file as it is rotated: the rows the fast path lands,
  each named by its interface.

`serve_scenario` runs a scenario through them. Lockstep (`speed=None`, the demo): the engine advances
one poll, publishes it, and waits at the clock's barrier until every gNMI stream has sent that tick
(grpc flow control holds a stream whose collector lags), the NIC collectors read the host views with
rows stamped at the tick, and the gNMI collector streams into the transport; at the end it waits
until the collector decoded every value the facades sent. So no sample is dropped or duplicated and
the run goes as fast as the pipeline allows. Paced (`speed` = fabric seconds per wall second) serves
for external tools (gnmic, snmpwalk, `rocescope collect gnmi --targets <file>`) with the addresses in
`targets-gnmi.yaml` / `targets-snmp.yaml`, until stopped or the scenario ends.

What the protocols lose against the fast path (`sim.run`): gNMI serves no port speed (SONiC keeps it
outside COUNTERS_DB), so switch `port_speed_bps` comes from an SNMP ifHighSpeed walk at the start
(and every `snmp_every_s` of fabric time if given; the SNMP collector stamps wall time, so its rows
are re-stamped with the fabric time the agents served); NIC rows carry source ethtool/rdma and add
what a real host shows (link state/speed of the netdev and RDMA port, IBTA `counters/` on the RDMA
port). The NIC collectors run in a child process, as on real hosts they do not share the simulator's
CPU; `links` come through the LLDP collector over each device's lldpcli JSON; `endpoints` (no jobs
collector yet) and `incidents` (ground truth) are published as the fast path does.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import yaml

from rocescope.catalog import METRICS_BY_NAME
from rocescope.collectors.gnmi.collector import GnmiCollector, GnmiPath, GnmiTarget
from rocescope.collectors.nic.collector import NicCollector
from rocescope.collectors.nic.host import SysfsNicHost
from rocescope.collectors.nic.sysfs import DirSysfs
from rocescope.collectors.pcap.collector import PcapCollector, PcapFile
from rocescope.config import Settings
from rocescope.errors import NicReadError, SimError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.runner import publishing
from rocescope.pipeline.transport import Producer
from rocescope.sim.engine import Engine
from rocescope.sim.facades.gnmi import GnmiFacade
from rocescope.sim.facades.hostview import IB_PORT_METRICS, ethtool_text, write_host_view
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.facades.snmp import SnmpAgentFacade, SnmpServer
from rocescope.sim.incidents import World, build_world
from rocescope.sim.mirror import MirrorFiles, PacketMirror
from rocescope.sim.run import SOURCE, RunSummary, _progress, _publish, static_tables, summarize
from rocescope.sim.scenario import Mirror, Scenario, load_scenario
from rocescope.sim.topology import Topology

__all__ = ["FabricClock", "FabricServer", "HostViewHost", "HostViews", "serve_scenario"]

log = logging.getLogger(__name__)

#: What the collectors subscribe per switch (every path at the poll interval, so no sample is thinned).
SONIC_PATHS = ("COUNTERS/*", "COUNTERS/Ethernet*/Queues", "COUNTERS/Ethernet*/PriorityGroups")
OPENCONFIG_PATHS = ("/interfaces/interface/state/oper-status",)


# --- the clock -----------------------------------------------------------------------------------


class FabricClock:
    """The fabric time the facades serve: the last published tick, its tables, and a barrier.

    Consumers (gNMI streams) `register`, wait for ticks and acknowledge each with `done`; the driver's
    `barrier()` returns once every registered consumer acknowledged the latest tick.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.tick = 0
        self.ts: dt.datetime | None = None
        self._tables: dict[str, pa.Table] = {}
        self._acked: dict[int, int] = {}
        self._names: dict[int, str] = {}
        self._next = 0
        self._closed = False

    def preset(self, ts: dt.datetime, tables: dict[str, pa.Table]) -> None:
        """What Get and SNMP serve before the first tick (no stream samples it)."""
        with self._cond:
            self.ts = ts
            self._tables = tables

    def publish(self, ts: dt.datetime, tables: dict[str, pa.Table]) -> int:
        with self._cond:
            self.tick += 1
            self.ts = ts
            self._tables = tables
            self._cond.notify_all()
            return self.tick

    def table(self, device: str) -> pa.Table:
        with self._cond:
            return self._tables[device]

    def register(self, name: str) -> int:
        with self._cond:
            self._next += 1
            self._acked[self._next] = max(0, self.tick - 1)
            self._names[self._next] = name
            self._cond.notify_all()
            return self._next

    def unregister(self, consumer: int) -> None:
        with self._cond:
            self._acked.pop(consumer, None)
            self._names.pop(consumer, None)
            self._cond.notify_all()

    @property
    def consumers(self) -> int:
        with self._cond:
            return len(self._acked)

    def wait_consumers(self, n: int, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self._acked) >= n, timeout_s)

    def wait_tick(self, after: int, timeout_s: float) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self.tick > after, timeout_s)
            if self._closed:
                return -1
            return self.tick if self.tick > after else None

    def done(self, consumer: int, tick: int) -> None:
        with self._cond:
            if consumer in self._acked:
                self._acked[consumer] = max(self._acked[consumer], tick)
                self._cond.notify_all()

    def barrier(self, timeout_s: float = 60.0) -> bool:
        """Wait until every consumer is done with the latest tick; False (and a warning) on timeout."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._closed or all(a >= self.tick for a in self._acked.values()), timeout_s
            )
            if not ok:
                late = [self._names[c] for c, a in self._acked.items() if a < self.tick]
                log.warning("fabric clock: tick %d not acknowledged within %g s by %s", self.tick, timeout_s, late)
            return ok

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


# --- host views ----------------------------------------------------------------------------------


class HostViewHost(SysfsNicHost):
    """A host view read as a live host: sysfs from its directory, `ethtool -S` from the stats file its
    `bin/ethtool` would print (the same bytes, without a process spawn per netdev and poll)."""

    def __init__(self, root: Path) -> None:
        super().__init__(DirSysfs(root))
        self.root = Path(root)

    def ethtool_stats(self, netdev: str) -> str:
        try:
            return (self.root / "ethtool" / f"{netdev}.stats").read_text()
        except OSError as exc:
            raise NicReadError(f"{netdev}: Cannot get stats strings information: No such device") from exc


@dataclass
class _NicFiles:
    host: str
    ethtool: str
    eth_rows: np.ndarray[Any, Any]
    eth_raw: list[str]
    hw_paths: list[str]
    hw_rows: np.ndarray[Any, Any]
    ib_paths: list[str]
    ib_rows: list[int]
    ib_scale: list[float]
    oper_row: int
    state: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (up text, down text)
    up: bool | None = None


def _rows_by_key(table: pa.Table) -> dict[tuple[str, str, str, int], int]:
    cols = table.select(["device", "port", "metric", "priority"]).to_pydict()
    return {
        (d, p, m, q): i
        for i, (d, p, m, q) in enumerate(
            zip(cols["device"], cols["port"], cols["metric"], cols["priority"], strict=True)
        )
    }


class HostViews:
    """Every host's view under `root/<host>`, refreshed from each tick's snapshot (value files only)."""

    def __init__(self, engine: Engine, topology: Topology, root: Path, table: pa.Table) -> None:
        self.root = Path(root)
        self.hosts = [d.name for d in topology.devices if d.role == "host"]
        for h in self.hosts:
            write_host_view(engine, topology, h, self.root / h)
        self._staging = self.root / ".staging"
        self._staging.mkdir(parents=True, exist_ok=True)
        self._n = 0
        self._last: dict[str, str] = {}
        at = _rows_by_key(table)
        cols = table.select(["device", "port", "raw_name"]).to_pydict()
        self._nics: list[_NicFiles] = []
        for h in self.hosts:
            base = self.root / h / "sys/class"
            for nic in topology.nics_of(h):
                eth = sorted(i for (d, p, _m, _q), i in at.items() if d == h and p == nic.netdev)
                rdma = sorted(i for (d, p, _m, _q), i in at.items() if d == h and p == f"{nic.rdma_dev}/1")
                p1 = base / "infiniband" / nic.rdma_dev / "ports/1"
                ib_paths, ib_rows, ib_scale = [], [], []
                for metric in IB_PORT_METRICS:
                    meta = METRICS_BY_NAME[metric]
                    for raw in meta.vendor_names.get("ib_port", ())[:1]:
                        ib_paths.append(str(p1 / "counters" / raw))
                        ib_rows.append(at.get((h, nic.netdev, metric, -1), -1))
                        ib_scale.append(meta.scales.get(raw, 1.0))
                net = base / "net" / nic.netdev
                speed = str(topology.port(h, nic.netdev).speed_gbps * 1000)
                state = {
                    str(net / "operstate"): ("up", "down"),
                    str(net / "carrier"): ("1", "0"),
                    str(net / "speed"): (speed, "-1"),
                    str(p1 / "state"): ("4: ACTIVE", "1: DOWN"),
                    str(p1 / "phys_state"): ("5: LinkUp", "3: Disabled"),
                }
                self._nics.append(
                    _NicFiles(
                        host=h,
                        ethtool=str(self.root / h / "ethtool" / f"{nic.netdev}.stats"),
                        eth_rows=np.array(eth, dtype=np.int64),
                        eth_raw=[cols["raw_name"][i] for i in eth],
                        hw_paths=[str(p1 / "hw_counters" / cols["raw_name"][i]) for i in rdma],
                        hw_rows=np.array(rdma, dtype=np.int64),
                        ib_paths=ib_paths,
                        ib_rows=ib_rows,
                        ib_scale=ib_scale,
                        oper_row=at[(nic.leaf, nic.leaf_port, "oper_up", -1)],
                        state=state,
                    )
                )

    def _write(self, path: str, text: str) -> None:
        if self._last.get(path) == text:
            return  # unchanged since the last tick: a reader sees the same bytes either way
        self._last[path] = text
        self._n += 1
        tmp = f"{self._staging}/{self._n}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, (text + "\n").encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def refresh(self, table: pa.Table) -> None:
        """Rewrite every value file from this tick's full snapshot (same row layout as at construction)."""
        values = np.floor(table.column("value").to_numpy()).astype(np.int64)
        for nic in self._nics:
            eth = values[nic.eth_rows].tolist()
            self._write(nic.ethtool, ethtool_text(list(zip(nic.eth_raw, eth, strict=True))))
            for path, v in zip(nic.hw_paths, values[nic.hw_rows].tolist(), strict=True):
                self._write(path, str(v))
            for path, row, scale in zip(nic.ib_paths, nic.ib_rows, nic.ib_scale, strict=True):
                self._write(path, str(int(values[row] // scale) if row >= 0 else 0))
            up = bool(values[nic.oper_row] > 0)
            if up != nic.up:
                for path, (on, off) in nic.state.items():
                    self._write(path, on if up else off)
                nic.up = up

    def host_root(self, host: str) -> Path:
        return self.root / host


# --- the server ----------------------------------------------------------------------------------


class FabricServer:
    """The facades of one world: gNMI + SNMP per switch, host views, LLDP and pods; `publish` per tick."""

    def __init__(
        self, world: World, root: Path, *, gnmi: bool = True, snmp: bool = True, host: str = "127.0.0.1"
    ) -> None:
        self.world = world
        self.root = Path(root)
        self.host = host
        self.clock = FabricClock()
        self.switches = [d.name for d in world.topology.switches]
        self.gnmi: dict[str, GnmiFacade] = {}
        self.snmp: dict[str, SnmpAgentFacade] = {}
        self._snmp_server: SnmpServer | None = None
        self._want_gnmi, self._want_snmp = gnmi, snmp
        self.hostviews: HostViews | None = None
        self._device_rows: dict[str, pa.Array] = {}

    def start(self) -> FabricServer:
        eng = self.world.engine
        first = eng.snapshot(reset_watermarks=False)  # row layout only
        dev = first.column("device").combine_chunks()
        names = dev.dictionary.to_pylist()
        codes = dev.indices.to_numpy()
        for sw in self.switches:
            self._device_rows[sw] = pa.array(np.flatnonzero(codes == names.index(sw)))
        self.hostviews = HostViews(eng, self.world.topology, self.root / "hosts", first)
        self.clock.preset(eng.time, self._split(first))
        try:
            if self._want_gnmi:
                for sw in self.switches:
                    source = self._source(sw)
                    self.gnmi[sw] = GnmiFacade(source, host=self.host, clock=self.clock, max_workers=8).start()
            if self._want_snmp:
                self.snmp = {sw: SnmpAgentFacade(sw, self._source(sw)) for sw in self.switches}
                self._snmp_server = SnmpServer(list(self.snmp.values()), self.host).start()
            self._write_static()
        except BaseException:
            self.stop()
            raise
        return self

    def _source(self, device: str) -> Callable[[], pa.Table]:
        return lambda: self.clock.table(device)

    def _split(self, table: pa.Table) -> dict[str, pa.Table]:
        return {sw: table.take(rows) for sw, rows in self._device_rows.items()}

    def publish(self, ts: dt.datetime, table: pa.Table) -> int:
        """One tick: host views rewritten, then every switch's table published (streams wake up)."""
        assert self.hostviews is not None
        self.hostviews.refresh(table)
        return self.clock.publish(ts, self._split(table))

    def _write_static(self) -> None:
        w = self.world
        lldp = self.root / "lldp"
        lldp.mkdir(parents=True, exist_ok=True)
        for d in w.topology.devices:
            (lldp / f"{d.name}.json").write_text(json.dumps(lldp_neighbors_json(w.topology, d.name), indent=1))
        (self.root / "pods.json").write_text(json.dumps(pod_list_json(w.jobs, w.topology, w.start), indent=1))

    def gnmi_targets(self) -> list[GnmiTarget]:
        """The collector's targets: SONiC COUNTERS_DB and OpenConfig oper-status, all at the poll interval."""
        poll = self.world.scenario.poll_interval_s
        paths = (
            *(GnmiPath(p, "COUNTERS_DB", interval_s=poll) for p in SONIC_PATHS),
            *(GnmiPath(p, "", interval_s=poll) for p in OPENCONFIG_PATHS),
        )
        return [GnmiTarget(sw, f.address, vendor="sonic", paths=paths) for sw, f in self.gnmi.items()]

    def write_targets(self, out: Path) -> dict[str, Path]:
        """`targets-gnmi.yaml` and `targets-snmp.yaml` for `rocescope collect gnmi|snmp --targets`."""
        out.mkdir(parents=True, exist_ok=True)
        files: dict[str, Path] = {}
        if self.gnmi:
            gnmi = [
                {
                    "name": t.name,
                    "address": t.address,
                    "vendor": "sonic",
                    "paths": [{"path": p.path, "target": p.target, "interval": p.interval_s} for p in t.subscriptions],
                }
                for t in self.gnmi_targets()
            ]
            files["gnmi"] = out / "targets-gnmi.yaml"
            files["gnmi"].write_text(yaml.safe_dump({"targets": gnmi}, sort_keys=False))
        if self.snmp:
            snmp = [{"name": n, "host": a.host, "port": a.port, "community": a.community} for n, a in self.snmp.items()]
            files["snmp"] = out / "targets-snmp.yaml"
            files["snmp"].write_text(yaml.safe_dump({"targets": snmp}, sort_keys=False))
        return files

    def values_sent(self) -> dict[str, int]:
        return {sw: f.values_sent for sw, f in self.gnmi.items()}

    def stop(self) -> None:
        self.clock.close()
        for f in self.gnmi.values():
            f.stop(0)
        if self._snmp_server is not None:
            self._snmp_server.stop()
            self._snmp_server = None

    def __enter__(self) -> FabricServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- collection side -----------------------------------------------------------------------------


class _SnmpSpeeds:
    """ifHighSpeed of every switch over SNMP, on a loop of its own; rows re-stamped with the fabric tick."""

    def __init__(self, server: FabricServer) -> None:
        from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice

        devices = [
            SnmpDevice.from_mapping({"name": n, "host": a.host, "port": a.port, "community": a.community})
            for n, a in server.snmp.items()
        ]
        self.collector = SnmpCollector(devices, objects=("ifHighSpeed",), optional_objects=(), slow_objects=())
        self.loop = asyncio.new_event_loop()

    def poll(self, ts: dt.datetime) -> list[Batch]:
        out = []
        for batch in self.loop.run_until_complete(self.collector.poll_all()).values():
            if batch is None:
                continue
            data = batch.data
            stamp = pa.array(np.full(batch.num_rows, _ns(ts), np.int64), pa.int64()).view(data.schema.field("ts").type)
            cols = [stamp if name == "ts" else data.column(name) for name in data.schema.names]
            out.append(Batch(batch.stream, pa.RecordBatch.from_arrays(cols, schema=data.schema), batch.key))
        return out

    def close(self) -> None:
        loop = self.loop
        loop.run_until_complete(self.collector.aclose())
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


class _NicFleet:
    """The hosts' NIC collectors in a child process (as on real hosts, they do not share the simulator's
    CPU): `poll(ts)` asks for one round over the host views, `collect()` returns its Batches. The
    driver rewrites the host views only after `collect()`, so a round always reads one tick."""

    def __init__(self, roots: dict[str, Path]) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_nic_worker, args=(child, {h: str(r) for h, r in roots.items()}), daemon=True)
        self._proc.start()
        child.close()
        self._pending = False

    def poll(self, ts: dt.datetime) -> None:
        self._conn.send(_ns(ts))
        self._pending = True

    def collect(self) -> list[Batch]:
        if not self._pending:
            return []
        self._pending = False
        try:
            got = self._conn.recv()
        except EOFError:
            raise SimError("the NIC collector process died") from None
        if isinstance(got, str):
            raise SimError(f"the NIC collector process failed: {got}")
        return [Batch("counters", rb, key) for key, rb in got]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.terminate()
        self._conn.close()


def _nic_worker(conn: Any, roots: dict[str, str]) -> None:
    """Child process: a NicCollector per host view; per request, one poll of each stamped at the tick."""
    collectors = [NicCollector(HostViewHost(Path(r)), h) for h, r in roots.items()]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    while True:
        try:
            ts_ns = conn.recv()
        except EOFError:
            return
        if ts_ns is None:
            return
        ts = epoch + dt.timedelta(microseconds=ts_ns // 1000)
        try:
            out = [(c.hostname, c.poll(ts).data) for c in collectors]
        except Exception as exc:  # reported to the driver, which fails the run
            conn.send(f"{type(exc).__name__}: {exc}")
            return
        conn.send(out)


def _ns(ts: dt.datetime) -> int:
    return (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1) * 1000


def _static_links(world: World, producer: Producer, rows: dict[str, int]) -> str:
    """`links` through the LLDP collector over each device's lldpcli JSON (falls back to the topology)."""
    try:
        from rocescope.collectors.lldp import HostLldp, LldpcliOutput, LldpCollector
    except ImportError:
        _publish(producer, "links", world.topology.links_arrow(world.start, SOURCE), SOURCE, rows)
        return "topology"
    sources = [
        HostLldp(d.name, LldpcliOutput(json.dumps(lldp_neighbors_json(world.topology, d.name)).encode()))
        for d in world.topology.devices
    ]
    for batch in LldpCollector(sources).poll_once(world.start):
        producer.publish(batch)
        rows["links"] = rows.get("links", 0) + batch.num_rows
    return "lldp"


@dataclass
class ServeStats:
    """What a served run did beyond `RunSummary`: per-protocol values, barrier waits, where things are."""

    gnmi_values_sent: int = 0
    gnmi_values_decoded: int = 0
    nic_polls: int = 0
    snmp_polls: int = 0
    barrier_timeouts: int = 0
    #: wall seconds of the driver's parts: step, snapshot, hostviews, nic, snmp, barrier (waiting on streams)
    seconds: dict[str, float] = field(default_factory=dict)
    root: Path | None = None
    targets: dict[str, Path] = field(default_factory=dict)
    #: the packet mirror's rotating pcap files (`root/mirror`), and the packets they hold
    mirror_dir: Path | None = None
    mirror_files: list[Path] = field(default_factory=list)
    mirror_packets: int = 0
    #: RoCEv2 packets the pcap collector decoded from those files (with `collect`)
    mirror_packets_collected: int = 0


def serve_scenario(
    settings: Settings,
    scenario: str | Path | Scenario,
    duration_s: float | None = None,
    out_dir: Path | None = None,
    progress: bool = False,
    *,
    speed: float | None = None,
    collect: bool = True,
    stop: threading.Event | None = None,
    snmp_every_s: float | None = None,
    on_ready: Callable[[FabricServer], None] | None = None,
) -> tuple[RunSummary, ServeStats]:
    """Run a scenario with its facades served; lockstep with the collectors (`speed=None`), or paced.

    With `collect`, the gNMI, NIC, SNMP (ifHighSpeed) and LLDP collectors gather over the protocols and
    publish through the configured transport into the store, with the `endpoints` and `incidents`
    (ground truth) streams. The lockstep run ends now (as the fast path); a paced run starts now.
    """
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    duration = float(duration_s if duration_s is not None else sc.duration)
    if speed is not None and speed <= 0:
        raise SimError("speed must be positive (fabric seconds per wall second)")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    start = now - dt.timedelta(seconds=duration) if speed is None else now
    world = build_world(sc, duration, start)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "ground_truth.json").write_text(json.dumps(world.ground_truth(), indent=2) + "\n")
        root = out_dir / "served"
        shutil.rmtree(root, ignore_errors=True)
        cleanup = None
    else:
        shm = Path("/dev/shm")
        cleanup = Path(tempfile.mkdtemp(prefix="rocescope-serve-", dir=shm if shm.is_dir() else None))
        root = cleanup
    stats = ServeStats(root=root)
    rows: dict[str, int] = {s: 0 for s in ("links", "endpoints", "incidents", "counters")}
    stop = stop or threading.Event()
    t0 = time.perf_counter()
    try:
        with publishing(settings) if collect else _no_publishing() as (producer, _metrics):
            counting = _Counting(producer, rows) if producer is not None else None
            if producer is not None:
                _static_links(world, producer, rows)
                tables = static_tables(world)
                for stream in ("endpoints", "incidents"):
                    _publish(producer, stream, tables[stream], SOURCE, rows)
            with FabricServer(world, root) as server:
                stats.targets = server.write_targets(out_dir or root)
                if on_ready is not None:
                    on_ready(server)
                polls = _drive(world, server, counting, stats, progress, speed, stop, snmp_every_s)
    finally:
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)
    wall = time.perf_counter() - t0
    return summarize(world, world.engine.now, wall, polls, rows, out_dir), stats


class _no_publishing:
    def __enter__(self) -> tuple[None, None]:
        return None, None

    def __exit__(self, *exc: object) -> None:
        return None


class _Counting:
    """A Producer that counts the rows it forwards per stream (thread-safe: collectors publish from threads)."""

    def __init__(self, inner: Producer, rows: dict[str, int]) -> None:
        self.inner = inner
        self.rows = rows
        self._lock = threading.Lock()

    def publish(self, batch: Batch) -> None:
        self.inner.publish(batch)
        with self._lock:
            self.rows[batch.stream] = self.rows.get(batch.stream, 0) + batch.num_rows

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def close(self) -> None:
        self.inner.close()


def _drive(
    world: World,
    server: FabricServer,
    producer: _Counting | None,
    stats: ServeStats,
    progress: bool,
    speed: float | None,
    stop: threading.Event,
    snmp_every_s: float | None,
) -> int:
    """The tick loop; returns the number of polls published."""
    eng, poll = world.engine, world.scenario.poll_interval_s
    gnmi: GnmiCollector | None = None
    gstop = threading.Event()
    gthread: threading.Thread | None = None
    nics: _NicFleet | None = None
    speeds: _SnmpSpeeds | None = None
    if producer is not None:
        targets = server.gnmi_targets()
        gnmi = GnmiCollector(targets, producer, flush_s=1.0, stall_s=3600.0)
        gthread = threading.Thread(target=gnmi.run, args=(gstop,), name="served-gnmi", daemon=True)
        gthread.start()
        streams = sum(len(t.groups()) for t in targets)
        if not server.clock.wait_consumers(streams, 30.0):
            raise SimError(f"gNMI collector: {server.clock.consumers} of {streams} streams subscribed within 30 s")
        assert server.hostviews is not None
        nics = _NicFleet({h: server.hostviews.host_root(h) for h in server.hostviews.hosts})
        speeds = _SnmpSpeeds(server) if server.snmp else None
        if speeds is not None and server.clock.ts is not None:  # port speeds, before the streams load the CPU
            for b in speeds.poll(server.clock.ts):
                producer.publish(b)
            stats.snmp_polls += 1
    pcaps = None
    if world.scenario.mirror.enabled:
        pcaps = MirrorFiles(PacketMirror(eng, world.scenario.mirror, world.scenario.seed), server.root / "mirror")
        stats.mirror_dir = pcaps.directory
    polls = 0
    next_snmp = snmp_every_s or 0.0
    wall0 = time.monotonic()
    try:
        with _progress(progress, world.duration_s, world.scenario.name) as bar:
            task = bar.add_task(world.scenario.name, total=world.duration_s) if bar is not None else None
            secs = stats.seconds
            clock = time.perf_counter
            while polls * poll < world.duration_s - 1e-9 and not stop.is_set():
                t = clock()
                eng.run(min(poll, world.duration_s - eng.now))
                ts = eng.time
                t, secs["step"] = clock(), secs.get("step", 0.0) + clock() - t
                if speed is None:
                    if not server.clock.barrier(60.0):  # the previous tick is out of every stream
                        stats.barrier_timeouts += 1
                elif stop.wait(max(0.0, wall0 + eng.now / speed - time.monotonic())):
                    break
                t, secs["barrier"] = clock(), secs.get("barrier", 0.0) + clock() - t
                if nics is not None and producer is not None:  # the previous tick's host reads, before rewriting
                    batches = nics.collect()
                    for b in batches:
                        producer.publish(b)
                    stats.nic_polls += len(batches)
                    t, secs["nic"] = clock(), secs.get("nic", 0.0) + clock() - t
                table = eng.snapshot(ts)
                t, secs["snapshot"] = clock(), secs.get("snapshot", 0.0) + clock() - t
                server.publish(ts, table)
                t, secs["publish"] = clock(), secs.get("publish", 0.0) + clock() - t
                if pcaps is not None:
                    written = pcaps.add(pcaps.mirror.sample(), ts)
                    if written is not None and producer is not None:
                        stats.mirror_packets_collected += _collect_pcap(written, pcaps.mirror.spec, producer)
                    t, secs["mirror"] = clock(), secs.get("mirror", 0.0) + clock() - t
                polls += 1
                if nics is not None:
                    nics.poll(ts)
                if producer is not None and speeds is not None and snmp_every_s and eng.now + 1e-9 >= next_snmp:
                    for b in speeds.poll(ts):
                        producer.publish(b)
                    stats.snmp_polls += 1
                    next_snmp = eng.now + snmp_every_s
                    secs["snmp"] = secs.get("snmp", 0.0) + clock() - t
                if bar is not None:
                    bar.update(task, completed=min(eng.now, world.duration_s))
        server.clock.barrier(60.0)
        if pcaps is not None:
            written = pcaps.flush()
            if written is not None and producer is not None:
                stats.mirror_packets_collected += _collect_pcap(written, pcaps.mirror.spec, producer)
            stats.mirror_files, stats.mirror_packets = list(pcaps.files), pcaps.packets
        if nics is not None and producer is not None:
            batches = nics.collect()
            for b in batches:
                producer.publish(b)
            stats.nic_polls += len(batches)
        if gnmi is not None:
            _drain(server, gnmi, 120.0)
    finally:
        gstop.set()
        server.clock.close()
        if gthread is not None:
            gthread.join(30)
        if speeds is not None:
            speeds.close()
        if nics is not None:
            nics.close()
    stats.gnmi_values_sent = sum(server.values_sent().values())
    if gnmi is not None:
        stats.gnmi_values_decoded = sum(h.values for h in gnmi.health().values())
    return polls


def _collect_pcap(path: Path, spec: Mirror, producer: Producer) -> int:
    """What `rocescope collect pcap FILE --sampling-rate N` does (capture points from the interfaces); packets."""
    collector = PcapCollector("mirror", spec.sampling_rate)
    source = PcapFile(path)
    try:
        batches = list(collector.collect(source))
    finally:
        source.close()
    for batch in batches:
        producer.publish(batch)
    return sum(b.num_rows for b in batches)


def _drain(server: FabricServer, gnmi: GnmiCollector, timeout_s: float) -> None:
    """Wait until the collector decoded every value the facades sent (then stopping loses nothing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sent = server.values_sent()
        got = {n: h.values for n, h in gnmi.health().items()}
        if all(got.get(n, 0) >= v for n, v in sent.items()):
            return
        time.sleep(0.02)
    log.warning("gNMI collector did not catch up within %g s: sent %s, decoded %s", timeout_s, sent, got)


def served_paths(root: Path, hosts: Sequence[str]) -> dict[str, Path]:
    """Where each host's view lives (for `LiveHost(sysfs_root=..., ethtool=.../bin/ethtool)`)."""
    return {h: root / "hosts" / h for h in hosts}
