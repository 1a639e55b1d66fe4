"""Every facade of one simulated world, published tick by tick: gNMI + SNMP per switch, host views, LLDP, pods.

The world's telemetry goes through its deployment profile's gear (`rocescope.sim.gear.Gear`; the `ideal`
profile when none is given): `publish` takes one full engine snapshot per tick, has the gear say which rows
each device reads at that poll (each metric group at its cadence and phase), with what value and stamp, and
hands each switch its reads through the `FabricClock` (which wakes the gNMI streams; SNMP and Get serve the
latest values) and rewrites the host views' value files. It returns who read what at the tick, so the
polling collectors (NICs, SNMP) read those devices with those stamps. Switches serve their rows as their
OS does (`gnmi_paths`); LLDP (`lldpcli -f json` per device, and openconfig-lldp over gNMI per switch where
the profile's switches report it) and the pod list are written once. `write_targets` writes
`targets-gnmi.yaml` / `targets-snmp.yaml` for the collectors.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import yaml

from rocescope.collectors.gnmi.targets import GnmiPath, GnmiTarget
from rocescope.sim.facades.clock import FabricClock, Feed, Reads
from rocescope.sim.facades.gnmi import GnmiFacade
from rocescope.sim.facades.gnmi_lldp import LldpGnmiFacade
from rocescope.sim.facades.gnmi_paths import dialect_of, served, snmp_objects, subscriptions
from rocescope.sim.facades.hostview import HostViews
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.facades.snmp import SnmpAgentFacade, SnmpServer
from rocescope.sim.gear import Gear
from rocescope.sim.incidents import World
from rocescope.sim.profile import load_profile

__all__ = ["OPENCONFIG_PATHS", "SONIC_PATHS", "FabricServer", "TickReads"]

#: What the collectors subscribe per switch of the ideal profile (every path at the poll interval).
SONIC_PATHS = (
    "COUNTERS/*",
    "COUNTERS/Ethernet*/Queues",
    "COUNTERS/Ethernet*/PriorityGroups",
    "COUNTERS/Ethernet*/Pfcwd",  # PFC watchdog counters, where the switches run it
)
OPENCONFIG_PATHS = ("/interfaces/interface/state/oper-status",)
#: The collector's `vendor` for a switch of each dialect.
_VENDOR = {
    "ideal": "sonic",
    "sonic": "sonic",
    "openconfig": "openconfig",
    "srlinux": "srlinux",
    "cumulus": "cumulus",
}
_LAYOUT = ["port", "priority", "metric", "raw_name", "group", "spread_ns"]


@dataclass
class TickReads:
    """Who read what at one tick: hosts whose NIC counters were read, and switches polled over SNMP, each with
    the stamp (ns since the epoch, on its own clock) of that read."""

    hosts: dict[str, int] = field(default_factory=dict)
    snmp: dict[str, int] = field(default_factory=dict)


def _first_per(codes: npt.NDArray[np.int64], stamps: npt.NDArray[np.int64], names: list[str]) -> dict[str, int]:
    """device name -> the earliest stamp of its rows (`codes`: each row's device)."""
    if not len(codes):
        return {}
    order = np.lexsort((stamps, codes))
    codes, stamps = codes[order], stamps[order]
    first = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    return {names[int(c)]: int(s) for c, s in zip(codes[first], stamps[first], strict=True)}


class FabricServer:
    """The facades of one world as its profile's gear reports it; `publish` per tick."""

    def __init__(
        self,
        world: World,
        root: Path,
        *,
        gear: Gear | None = None,
        gnmi: bool = True,
        snmp: bool = True,
        host: str = "127.0.0.1",
        own_subscriptions: bool = False,
    ) -> None:
        self.world = world
        #: the collectors subscribe what they subscribe by default (their vendor's paths at their own intervals),
        #: as in a deployment, instead of each metric group at the cadence the profile reads it
        self.own_subscriptions = own_subscriptions
        self.root = Path(root)
        self.host = host
        self.gear = gear if gear is not None else Gear(load_profile("ideal"), world)
        self.profile = self.gear.profile
        self.dialect = dialect_of(self.profile)
        self.clock = FabricClock()
        #: the switches collectors read (the scenario's unmonitored ones serve nothing)
        self.switches = [d.name for d in world.topology.switches if self.gear.monitored(d.name)]
        self.gnmi: dict[str, GnmiFacade] = {}
        self.snmp: dict[str, SnmpAgentFacade] = {}
        self.lldp: dict[str, LldpGnmiFacade] = {}
        self._snmp_server: SnmpServer | None = None
        self._want_gnmi, self._want_snmp = gnmi, snmp
        self.hostviews: HostViews | None = None
        #: the MIB objects the switches serve over SNMP only (Arista's ARISTA-PFC-MIB), polled when they read them
        self.snmp_objects: list[str] = []

    # --- set up
    def start(self) -> FabricServer:
        eng, topo = self.world.engine, self.world.topology
        first = eng.snapshot(reset_watermarks=False)  # what is served before the first tick
        layout = self.gear.layout()
        self._layout = layout
        rows = layout.column("row").to_numpy()
        self._index = np.full(first.num_rows, -1, np.int64)
        self._index[rows] = np.arange(len(rows))
        devices = layout.column("device").to_pylist()
        self._names = list(dict.fromkeys(devices))
        code = {d: i for i, d in enumerate(self._names)}
        self._code = np.array([code[d] for d in devices], np.int64)
        self._current = first.column("value").to_numpy()[rows].astype(np.float64)
        self._local = np.zeros(len(rows), np.int64)
        feeds: dict[str, Feed] = {}
        self._switch_codes = [code[sw] for sw in self.switches if sw in code]
        for sw in self.switches:
            idx = np.flatnonzero(self._code == code[sw]) if sw in code else np.zeros(0, np.int64)
            self._local[idx] = np.arange(len(idx))
            feeds[sw] = Feed(layout.take(pa.array(idx)).select(_LAYOUT), self._current[idx], eng.time)
        roles = layout.column("role").cast(pa.string()).to_pylist()
        self._is_nic = np.array([r == "nic" for r in roles], bool)
        self._nic_rows = np.flatnonzero(self._is_nic)
        hosts = [d.name for d in topo.devices if d.role == "host" and self.gear.monitored(d.name)]
        self.hostviews = HostViews(
            topo, {h: self.root / "hosts" / h for h in hosts}, layout.take(pa.array(self._nic_rows)),
            self.profile.nic.driver,
        )  # fmt: skip
        keys = first.select(["device", "port", "metric", "priority"]).to_pydict()
        at = {
            k: i for i, k in enumerate(zip(keys["device"], keys["port"], keys["metric"], keys["priority"], strict=True))
        }
        self._oper = np.array([at[(n.nic.leaf, n.nic.leaf_port, "oper_up", -1)] for n in self.hostviews.nics], np.int64)
        self.hostviews.refresh(self._current[self._nic_rows], first.column("value").to_numpy()[self._oper] > 0)
        self._is_snmp = self._snmp_rows(layout)
        self.clock.preset(eng.time, feeds)
        try:
            if self._want_gnmi:
                for sw in self.switches:
                    self.gnmi[sw] = GnmiFacade(
                        self._source(sw),
                        host=self.host,
                        clock=self.clock,
                        max_workers=8,
                        device=sw,
                        dialect=self.dialect,
                        sample=self.profile.switch.sample,
                        send_lag_s=self.world.scenario.poll_interval_s,
                        device_clock=self._device_clock(sw),
                    ).start()
                if not self.gear.identity and self.profile.lldp != "hosts":
                    for sw in self.switches:
                        self.lldp[sw] = LldpGnmiFacade(topo, sw, host=self.host, names=self.gear.names).__enter__()
            if self._want_snmp:
                self.snmp = {sw: SnmpAgentFacade(sw, self._source(sw)) for sw in self.switches}
                self._snmp_server = SnmpServer(list(self.snmp.values()), self.host).start()
            self._write_static()
        except BaseException:
            self.stop()
            raise
        return self

    def _snmp_rows(self, layout: pa.Table) -> npt.NDArray[np.bool_]:
        """Switch rows served over SNMP only (their reads trigger an SNMP poll of the device)."""
        out = np.zeros(layout.num_rows, bool)
        if self.dialect == "ideal":
            return out
        cols = layout.select(["port", "priority", "metric", "raw_name", "group"]).to_pydict()
        self.snmp_objects = snmp_objects(self.dialect, set(cols["raw_name"]))
        objects = set(self.snmp_objects)
        for i, raw in enumerate(cols["raw_name"]):
            out[i] = raw in objects and not self._is_nic[i]
        return out

    def _device_clock(self, device: str) -> Callable[[int], int]:
        gear = self.gear
        return lambda fabric_ns: gear.device_time_ns(device, fabric_ns)

    def _source(self, device: str) -> Callable[[], pa.Table]:
        return lambda: self.clock.table(device)

    # --- per tick
    def publish(self, ts: dt.datetime, table: pa.Table) -> TickReads:
        """One tick from the engine's full snapshot: the gear's reads go to the host views, then to every
        switch's feed (streams wake up); returns which hosts and SNMP switches read, with their stamps."""
        assert self.hostviews is not None
        rows, values, stamps = self.gear.read(ts, table)
        at = self._index[rows]
        self._current[at] = values
        self.hostviews.refresh(self._current[self._nic_rows], table.column("value").to_numpy()[self._oper] > 0)
        codes = self._code[at]
        reads: dict[str, Reads] = {}
        for sw, c in zip(self.switches, self._switch_codes, strict=False):
            mine = codes == c
            if mine.any():
                reads[sw] = (self._local[at[mine]], values[mine], stamps[mine])
        self.clock.publish(ts, reads, self.gear.offline_at(ts))
        nic = self._is_nic[at]
        snmp = self._is_snmp[at]
        return TickReads(
            hosts=_first_per(codes[nic], stamps[nic], self._names),
            snmp=_first_per(codes[snmp], stamps[snmp], self._names),
        )

    def _write_static(self) -> None:
        w = self.world
        lldp = self.root / "lldp"
        lldp.mkdir(parents=True, exist_ok=True)
        names = None if self.gear.names.identity else self.gear.names
        for d in w.topology.devices:
            doc = lldp_neighbors_json(w.topology, d.name, names)
            (lldp / f"{d.name}.json").write_text(json.dumps(doc, indent=1))
        (self.root / "pods.json").write_text(json.dumps(pod_list_json(w.jobs, w.topology, w.start), indent=1))

    # --- what collectors need
    def gnmi_paths(self) -> tuple[GnmiPath, ...]:
        """The SAMPLE subscriptions that read every switch: the ideal profile's SONiC and OpenConfig paths at
        the poll interval, or the profile's OS paths, each at the cadence of the metric groups it carries."""
        poll = self.world.scenario.poll_interval_s
        if self.dialect == "ideal":
            return (
                *(GnmiPath(p, "COUNTERS_DB", interval_s=poll) for p in SONIC_PATHS),
                *(GnmiPath(p, "", interval_s=poll) for p in OPENCONFIG_PATHS),
            )
        cols = self._layout.select(["port", "priority", "metric", "raw_name", "group"]).to_pydict()
        seen = set()
        rows = []
        for i, (port, prio, metric, raw, group) in enumerate(zip(*cols.values(), strict=True)):
            key = (port.startswith("Ethernet"), prio >= 0, metric, raw, group)
            if self._is_nic[i] or key in seen:
                continue
            seen.add(key)
            hit = served(self.dialect, port, prio, metric, raw, group)
            if hit is not None:
                rows.append((hit, self.profile.cadence_s(group, poll)))
        return subscriptions(rows)

    def gnmi_targets(self) -> list[GnmiTarget]:
        """One target per switch: the paths and cadences of `gnmi_paths`, or none (the collector's defaults for
        the vendor) with `own_subscriptions`."""
        paths = () if self.own_subscriptions and self.dialect != "ideal" else self.gnmi_paths()
        vendor = _VENDOR[self.dialect]
        return [GnmiTarget(sw, f.address, vendor=vendor, paths=paths) for sw, f in self.gnmi.items()]

    def lldp_targets(self) -> list[GnmiTarget]:
        """The switches' openconfig-lldp targets (where the profile's switches report LLDP)."""
        return [GnmiTarget(sw, f.address, vendor="openconfig") for sw, f in self.lldp.items()]

    def write_targets(self, out: Path) -> dict[str, Path]:
        """`targets-gnmi.yaml` and `targets-snmp.yaml` for `rocescope collect gnmi|snmp --targets`."""
        out.mkdir(parents=True, exist_ok=True)
        files: dict[str, Path] = {}
        if self.gnmi:
            gnmi = [
                {"name": t.name, "address": t.address, "vendor": t.vendor}
                | ({"paths": [{"path": p.path, "target": p.target, "interval": p.interval_s} for p in t.paths]}
                   if t.paths else {})
                for t in self.gnmi_targets()
            ]  # fmt: skip
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
        for lf in self.lldp.values():
            lf.__exit__()
        self.lldp = {}
        if self._snmp_server is not None:
            self._snmp_server.stop()
            self._snmp_server = None

    def __enter__(self) -> FabricServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
