"""The collection side of a served run: the real collectors, set up to read the facades in lockstep.

`HostViewHost` reads a host view as a live host; `NicFleet` runs a NIC collector per host in a child
process (as on real hosts, they do not share the simulator's CPU), each host polled when its NIC counters
are read and its rows stamped on that host's clock; `SnmpPolls` polls switches over SNMP for some objects
(ifHighSpeed of every switch, or the objects a profile's switches serve over SNMP only, such as Arista's
ARISTA-PFC-MIB), rows re-stamped with the device's stamp of the read the agents served; `publish_links`
runs the LLDP collector over the side the profile's LLDP comes from (each host's lldpcli JSON; each switch's
openconfig-lldp over gNMI; the ideal profile: every device's lldpcli JSON); `collect_pcap` lands a rotated
mirror file as `rocescope collect pcap FILE --sampling-rate N` would.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
from collections.abc import Mapping, Sequence
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
from rocescope.sim.scenario import Mirror

__all__ = ["HostViewHost", "NicFleet", "SnmpPolls", "collect_pcap", "epoch_ns", "publish_links"]


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


class SnmpPolls:
    """Switches polled over SNMP for some MIB objects, on a loop of its own; each device's rows re-stamped with
    the stamp (ns) of the read the agent served (a real poller stamps when the answer arrives)."""

    def __init__(self, server: FabricServer, objects: Sequence[str]) -> None:
        from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice

        devices = [
            SnmpDevice.from_mapping({"name": n, "host": a.host, "port": a.port, "community": a.community})
            for n, a in server.snmp.items()
        ]
        self.collector = SnmpCollector(devices, objects=tuple(objects), optional_objects=(), slow_objects=())
        self.loop = asyncio.new_event_loop()

    def poll(self, stamps: Mapping[str, int]) -> list[Batch]:
        """One poll of these devices (name -> stamp of the read, ns since the epoch)."""

        async def all_of() -> list[Batch | None]:
            return list(await asyncio.gather(*(self.collector.poll_device(n) for n in stamps)))

        out = []
        for name, batch in zip(stamps, self.loop.run_until_complete(all_of()), strict=True):
            if batch is None:
                continue
            data = batch.data
            stamp = pa.array(np.full(batch.num_rows, stamps[name], np.int64), pa.int64()).view(
                data.schema.field("ts").type
            )
            cols = [stamp if col == "ts" else data.column(col) for col in data.schema.names]
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
    CPU): `poll(stamps)` asks for one round over the host views of these hosts (host -> the stamp of its read,
    ns since the epoch, on its own clock), `collect()` returns its Batches. The driver rewrites the host views
    only after `collect()`, so a round always reads one tick."""

    def __init__(self, roots: dict[str, Path]) -> None:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_nic_worker, args=(child, {h: str(r) for h, r in roots.items()}), daemon=True)
        self._proc.start()
        child.close()
        self._pending = False

    def poll(self, stamps: Mapping[str, int]) -> None:
        if not stamps:
            return
        self._conn.send(dict(stamps))
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
        return [Batch(stream, rb, key) for stream, key, rb in got]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.terminate()
        self._conn.close()


def _nic_worker(conn: Any, roots: dict[str, str]) -> None:
    """Child process: a NicCollector per host view; per request (host -> stamp), one poll of each host named,
    its rows stamped with its stamp, and its RDMA port -> netdev inventory after each discovery."""
    collectors = {h: NicCollector(HostViewHost(Path(r)), h) for h, r in roots.items()}
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    while True:
        try:
            stamps = conn.recv()
        except EOFError:
            return
        if stamps is None:
            return
        try:
            out = []
            for h, ns in stamps.items():
                at = epoch + dt.timedelta(microseconds=ns // 1000)  # the host's clock, as its rows are stamped
                batch, inventory = collectors[h].poll(at), collectors[h].inventory_batch(at)
                out += [(b.stream, b.key, b.data) for b in (batch, inventory) if b is not None]
        except Exception as exc:  # reported to the driver, which fails the run
            conn.send(f"{type(exc).__name__}: {exc}")
            return
        conn.send(out)


def epoch_ns(ts: dt.datetime) -> int:
    """Nanoseconds since the epoch, at microsecond precision (what the pipe to the NIC worker carries)."""
    return (ts - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1) * 1000


def publish_links(server: FabricServer, producer: Producer, rows: dict[str, int]) -> str:
    """`links` through the LLDP collector, from the side the profile's LLDP comes from: each host's lldpcli
    JSON and each switch's openconfig-lldp over gNMI (the ideal profile: every device's lldpcli JSON);
    returns where they came from."""
    from rocescope.collectors.lldp.collector import LldpCollector
    from rocescope.collectors.lldp.sources import GnmiLldpSource, HostLldp, LldpcliOutput, LldpSource

    world, gear = server.world, server.gear
    topo = world.topology
    names = None if gear.names.identity else gear.names
    if gear.identity:
        side, cli = "every device", [d.name for d in topo.devices]
    else:
        side = gear.profile.lldp
        cli = [d.name for d in topo.devices if d.role == "host"] if side in ("both", "hosts") else []
    sources: list[LldpSource] = [
        HostLldp(d, LldpcliOutput(json.dumps(lldp_neighbors_json(topo, d, names)).encode()))
        for d in cli
        if gear.monitored(d)
    ]
    sources += [GnmiLldpSource(t) for t in server.lldp_targets()]
    for batch in LldpCollector(sources).poll_once(world.start):
        producer.publish(batch)
        rows["links"] = rows.get("links", 0) + batch.num_rows
    return side


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
