"""Every facade of one simulated world, published tick by tick: gNMI + SNMP per switch, host views, LLDP, pods.

`FabricServer.publish` takes one full `counters` snapshot per tick: it rewrites the host views'
value files, then hands each switch its rows through the `FabricClock`, which wakes the gNMI
streams; SNMP and Get serve the latest tick. LLDP (`lldpcli -f json` per device) and the pod list are
written once. `write_targets` writes `targets-gnmi.yaml` / `targets-snmp.yaml` for the collectors.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml

from rocescope.collectors.gnmi.targets import GnmiPath, GnmiTarget
from rocescope.sim.facades.clock import FabricClock
from rocescope.sim.facades.gnmi import GnmiFacade
from rocescope.sim.facades.hostview import HostViews
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.facades.snmp import SnmpAgentFacade, SnmpServer
from rocescope.sim.incidents import World

__all__ = ["OPENCONFIG_PATHS", "SONIC_PATHS", "FabricServer"]

#: What the collectors subscribe per switch (every path at the poll interval, so no sample is thinned).
SONIC_PATHS = ("COUNTERS/*", "COUNTERS/Ethernet*/Queues", "COUNTERS/Ethernet*/PriorityGroups")
OPENCONFIG_PATHS = ("/interfaces/interface/state/oper-status",)


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
