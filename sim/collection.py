"""The collection side of a served run: the real collectors, set up to read the facades in lockstep.

`HostViewHost` reads a host view as a live host; `NicFleet` runs a NIC collector per host in a child
process (as on real hosts, they do not share the simulator's CPU); `SnmpSpeeds` walks ifHighSpeed of
every switch (rows re-stamped with the fabric tick the agents served); `publish_links` runs the LLDP
collector over each device's lldpcli JSON; `collect_pcap` lands a rotated mirror file as
`rocescope collect pcap FILE --sampling-rate N` would.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rocescope.collectors.nic.collector import NicCollector
from rocescope.collectors.nic.host import SysfsNicHost
from rocescope.collectors.nic.sysfs import DirSysfs
from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.tshark import PcapFile
from rocescope.errors import NicReadError, SimError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.facades.server import FabricServer
from rocescope.sim.incidents import World
from rocescope.sim.run import SOURCE, publish_table
from rocescope.sim.scenario import Mirror

__all__ = ["HostViewHost", "NicFleet", "SnmpSpeeds", "collect_pcap", "epoch_ns", "publish_links"]


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


class SnmpSpeeds:
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
            stamp = pa.array(np.full(batch.num_rows, epoch_ns(ts), np.int64), pa.int64()).view(
                data.schema.field("ts").type
            )
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


class NicFleet:
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
        self._conn.send(epoch_ns(ts))
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


def epoch_ns(ts: dt.datetime) -> int:
    """Nanoseconds since the epoch, at microsecond precision (what the pipe to the NIC worker carries)."""
    return (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1) * 1000


def publish_links(world: World, producer: Producer, rows: dict[str, int]) -> str:
    """`links` through the LLDP collector over each device's lldpcli JSON (falls back to the topology)."""
    try:
        from rocescope.collectors.lldp.collector import LldpCollector
        from rocescope.collectors.lldp.sources import HostLldp, LldpcliOutput
    except ImportError:
        publish_table(producer, "links", world.topology.links_arrow(world.start, SOURCE), SOURCE, rows)
        return "topology"
    sources = [
        HostLldp(d.name, LldpcliOutput(json.dumps(lldp_neighbors_json(world.topology, d.name)).encode()))
        for d in world.topology.devices
    ]
    for batch in LldpCollector(sources).poll_once(world.start):
        producer.publish(batch)
        rows["links"] = rows.get("links", 0) + batch.num_rows
    return "lldp"


def collect_pcap(path: Path, spec: Mirror, producer: Producer) -> int:
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
