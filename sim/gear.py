"""A deployment profile applied to one fast-path run: what real gear would have reported, and when.

`Gear` is stateful, one per run. `counters(ts, table)` takes the engine's snapshot of a poll (every
row of every device, one shared timestamp) and returns what the profile's devices report at that poll:

* only the metrics the profile lists (a NIC metric its driver does not expose is missing; bnxt_re's
  `rx_cnp_pkts` counts the CNPs received, handled or ignored, so it is `cnp_received`);
* each (device, group) only at its cadence, at its seeded slot within the interval;
* watermarks as the device would read them: the max of the engine's per-poll peaks since this device's
  last read, reset at the read (SONiC's watermark counters are peak-since-last-read, read and cleared
  by the flex counter poll);
* ports and raw names as the vendor spells them (`rocescope.sim.portnames`, the catalog);
* each row stamped with its device's clock: the poll time + the device's phase within the poll +
  the group's offset + the path's place in the group (+ the host's clock skew on NICs). The values
  are the state at the poll (the fast path snapshots once per poll): only the stamps move.

`links`, `endpoints`, `incidents`, ground truth and mirror capture points are renamed alike, and
`links` keep only the LLDP side the profile has. The scenario's `unmonitored` devices report nothing of
their own (no counters, LLDP, NIC inventory or QP records); their neighbours' LLDP still names them. With
the `ideal` profile and every device monitored, every method returns its input unchanged, so the fast
path is exactly what it was.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rocescope.collectors.nccl.write import InspectorRecord
from rocescope.errors import SimError
from rocescope.pipeline.batch import conform
from rocescope.sim.counters import EPOCH, SERIES, SnapshotPlan
from rocescope.sim.incidents import World
from rocescope.sim.portnames import PortNames
from rocescope.sim.profile import DERIVED, NIC_GROUP, Profile, raw_name
from rocescope.sim.topology import Topology

#: Peak-since-last-read gauges: a slower read sees the max of the peaks in between.
WATERMARKS = frozenset(s.metric for s in SERIES if s.source in ("qwm", "pgwm", "bufwm"))

I64 = npt.NDArray[np.int64]


class Gear:
    """The stateful transform of one run's telemetry under a profile (see the module docstring)."""

    def __init__(self, profile: Profile, world: World) -> None:
        self.profile = profile
        self.world = world
        self.poll_s = world.scenario.poll_interval_s
        self.names = PortNames(world.topology, profile)
        self.identity = profile.is_ideal
        #: devices no collector reads (`Scenario.unmonitored`)
        self.unmonitored = frozenset(world.scenario.unmonitored)
        unknown = self.unmonitored - {d.name for d in world.topology.devices}
        if unknown:
            raise SimError(f"unmonitored: no device {', '.join(sorted(unknown))} in the fabric")
        #: ideal profile: per snapshot row, whether a collector reads it (None: every row)
        self._monitored_rows: npt.NDArray[np.bool_] | None = None
        if self.identity and self.unmonitored:
            plan = SnapshotPlan(world.topology, world.engine.params)
            watched = np.array([d not in self.unmonitored for d in plan.devices], bool)
            self._monitored_rows = watched[plan.row_device]
        #: host -> its clock's skew (seconds): what its processes (NCCL Inspector) stamp their records with
        self.host_skew_s: dict[str, float] = {}
        #: device -> (fabric ns of the step, ns its clock was off by until then): an NTP step (`step_clock`)
        self.clock_steps: dict[str, tuple[int, int]] = {}
        #: device -> (fabric ns it went down, fabric ns it is back): a restart (`restart`)
        self.offline: dict[str, tuple[int, int]] = {}
        self._device_code: dict[str, int] = {}
        if not self.identity:
            self._plan_rows(SnapshotPlan(world.topology, world.engine.params))

    # --- counters

    def _plan_rows(self, plan: SnapshotPlan) -> None:
        """Per row of the engine's snapshot: kept or not, new port/metric/raw name, cadence, slot and stamp."""
        n = plan.n_rows
        self._metric_of = [plan.metric_names[m] for m in plan.row_metric]
        self._port_of = [plan.port_names[p] for p in plan.row_port]
        self._device_of = [plan.devices[d] for d in plan.row_device]
        self._where = {
            (self._device_of[r], self._port_of[r], self._metric_of[r], int(plan.row_prio[r])): r for r in range(n)
        }
        roles = {d.name: d.role for d in self.world.topology.devices}
        self._device_dict = pa.array(plan.devices, pa.string())
        self._device_code = {name: i for i, name in enumerate(plan.devices)}
        self._row_device, self._row_role, self._row_prio = plan.row_device, plan.row_role, plan.row_prio
        ports: dict[str, int] = {}
        metrics: dict[str, int] = {}
        raws: dict[str, int] = {}
        keep = np.zeros(n, bool)
        self._row_port = np.zeros(n, np.int32)
        self._row_metric = np.zeros(n, np.int32)
        self._row_raw = np.zeros(n, np.int32)
        group_of = np.full(n, "", object)
        path_of = np.zeros(n, np.float64)
        self._sums: list[tuple[int, int]] = []
        for r in range(n):
            raw = plan.raw_names[plan.row_raw[r]]
            device = self._device_of[r]
            row = self._switch_row(r, raw) if roles[device] != "host" else self._nic_row(r, raw)
            if row is None or device in self.unmonitored:
                continue
            metric, port, raw, group, path_of[r] = row
            keep[r] = True
            group_of[r] = group
            self._row_port[r] = ports.setdefault(port, len(ports))
            self._row_metric[r] = metrics.setdefault(metric, len(metrics))
            self._row_raw[r] = raws.setdefault(raw, len(raws))
        self._port_dict = pa.array(list(ports), pa.string())
        self._metric_dict = pa.array(list(metrics), pa.string())
        self._raw_dict = pa.array(list(raws), pa.string())
        self._add_dst = np.array([a for a, _ in self._sums], np.int64)
        self._add_src = np.array([b for _, b in self._sums], np.int64)
        self._is_wm = np.array([m in WATERMARKS for m in self._metric_of], bool) & keep
        self._acc = np.zeros(n)
        self._keep, self._group_of = keep, group_of
        self._schedule(plan, keep, group_of, path_of, roles)

    def _switch_row(self, r: int, raw: str) -> tuple[str, str, str, str, float] | None:
        """(metric, port, raw name, group, place of its path in the group) of a switch row; None: not reported."""
        side = self.profile.switch
        device, port, metric, prio = self._device_of[r], self._port_of[r], self._metric_of[r], int(self._row_prio[r])
        group = side.group_of(metric)
        if group is None:
            return None
        if side.groups is None:
            return metric, self.names.local(device, port), raw, group, 0.0
        spec = side.groups[group]  # type: ignore[index]
        if prio >= 0 and spec.priorities is not None and prio not in spec.priorities:
            return None
        template = raw_name(metric, side.vendors, side.raw_names) or raw
        raw = template.replace("{p}", str(prio)) if prio >= 0 else template
        return metric, self.names.local(device, port), raw, group, spec.metrics.index(metric) / len(spec.metrics)

    def _nic_row(self, r: int, raw: str) -> tuple[str, str, str, str, float] | None:
        """(metric, port, raw name, `nic`, 0) of a NIC row as its driver reports it; None: not exposed."""
        nic = self.profile.nic
        device, port, metric, prio = self._device_of[r], self._port_of[r], self._metric_of[r], int(self._row_prio[r])
        listed = nic.metrics
        derived = next((m for m, srcs in DERIVED.items() if listed and m in listed and metric in srcs), None)
        out_metric = metric
        if derived is not None:
            first, *others = DERIVED[derived]
            if metric != first:
                return None  # summed into the first source's row
            out_metric = derived
            self._sums += [(r, self._where[(device, port, src, prio)]) for src in others]
        elif listed is not None and metric not in listed:
            return None
        if listed is None and nic.driver == "mlx5":
            return metric, self.names.local(device, port), raw, NIC_GROUP, 0.0
        named = nic.raw_name(out_metric)
        if named is None:
            return None  # the driver does not expose it
        template, on_rdma = named
        rail = _rail(port)
        out_port = self.names.rdma_port(f"mlx5_{rail}/1") if on_rdma else f"eth{rail}"
        raw = template.replace("{p}", str(prio)) if prio >= 0 else template
        return out_metric, out_port, raw, NIC_GROUP, 0.0

    def _schedule(
        self,
        plan: SnapshotPlan,
        keep: npt.NDArray[np.bool_],
        group_of: npt.NDArray[Any],
        path_of: npt.NDArray[np.float64],
        roles: Mapping[str, str],
    ) -> None:
        """Cadence (in polls), slot and stamp offset of every kept row, from the seeded device clocks."""
        prof, poll = self.profile, self.poll_s
        clocks = prof.clocks
        seed = (self.world.scenario.seed, zlib.crc32(prof.name.encode()))
        rng = np.random.default_rng(seed)
        groups = sorted({str(g) for g in group_of[keep]})
        period = {g: max(1, round(prof.cadence_s(g, poll) / poll)) for g in groups}
        n_dev = len(plan.devices)
        phase = rng.uniform(0.0, poll, n_dev) if clocks.device_phase else np.zeros(n_dev)
        skew = rng.uniform(-clocks.host_skew_max, clocks.host_skew_max, n_dev)
        skew[[roles[d] != "host" for d in plan.devices]] = 0.0
        self.host_skew_s = {d: float(skew[i]) for i, d in enumerate(plan.devices) if roles[d] == "host"}
        slots = {
            g: rng.integers(0, period[g], n_dev) if clocks.device_phase else np.zeros(n_dev, np.int64) for g in groups
        }
        offset_ms = {g: 0.0 for g in groups}
        if prof.switch.groups is not None:
            offset_ms.update({g: grp.offset_ms for g, grp in prof.switch.groups.items() if g in offset_ms})
        stamp_s = phase[plan.row_device] + skew[plan.row_device]
        stamp_s = stamp_s + np.array([offset_ms.get(str(g), 0.0) for g in group_of]) / 1e3
        self._spread_ns = np.round(path_of * clocks.path_spread_ms * 1e6).astype(np.int64)
        stamp_s = stamp_s + path_of * clocks.path_spread_ms / 1e3
        self._stamp_ns = np.round(stamp_s * 1e9).astype(np.int64)
        #: period -> slot -> kept rows read at polls k with k % period == slot
        self._due: dict[int, list[I64]] = {}
        for g in groups:
            rows = np.flatnonzero(keep & (group_of == g))
            p = period[g]
            slot = slots[g][plan.row_device[rows]]
            per = self._due.setdefault(p, [np.zeros(0, np.int64) for _ in range(p)])
            for s in range(p):
                per[s] = np.concatenate([per[s], rows[slot == s]])

    def due_rows(self, k: int) -> I64:
        """Rows the devices read at poll `k` (polls since the run started, from 1), in snapshot order."""
        parts = [per[k % p] for p, per in self._due.items()]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.int64)

    def read(self, ts: dt.datetime, table: pa.Table) -> tuple[I64, npt.NDArray[np.float64], I64]:
        """(rows, values, stamps) the devices read at the poll at `ts` from the engine's snapshot `table` (all
        rows): the snapshot rows due, what each reads (derived metrics summed, a watermark the peak since its
        last read) and each row's stamp on its device's clock (ns since the epoch). Call once per poll."""
        values = table.column("value").to_numpy()
        base_ns = (ts - EPOCH) // dt.timedelta(microseconds=1) * 1000
        if self.identity:
            every = np.arange(len(values), dtype=np.int64)
            rows = every if self._monitored_rows is None else every[self._monitored_rows]
            return rows, values[rows], np.full(len(rows), base_ns, np.int64)
        k = round((ts - self.world.start).total_seconds() / self.poll_s)
        if len(values) != len(self._acc):
            raise SimError(f"a snapshot of {len(values)} rows; the profile planned {len(self._acc)}")
        if self._add_dst.size:
            values = values.copy()
            np.add.at(values, self._add_dst, values[self._add_src])
        acc, wm = self._acc, self._is_wm
        acc[wm] = np.maximum(acc[wm], values[wm])
        rows = self.due_rows(k)
        for device in self.offline_at(ts):  # it reads nothing; the peaks it held are gone with it
            mine = self._row_device == self._device_code[device]
            acc[mine & wm] = 0.0
            rows = rows[~mine[rows]]
        out = values[rows]
        read_wm = wm[rows]
        if read_wm.any():
            hit = rows[read_wm]
            out[read_wm] = acc[hit]
            acc[hit] = 0.0
        stamps = base_ns + self._stamp_ns[rows]
        if self.clock_steps:
            for device, (at_ns, off_ns) in self.clock_steps.items():
                if base_ns < at_ns:
                    stamps[self._row_device[rows] == self._device_code[device]] += off_ns
        return rows, out, stamps

    def step_clock(self, device: str, at: dt.datetime, step_s: float) -> None:
        """`device`'s clock drifted `-step_s` seconds off the truth (a crystal's tens of ppm over hours while NTP
        could not reach a server) and NTP steps it back to the truth at `at` (fabric time): before, it stamps what
        it reads that far off; from then on, right. Its samples after the step come before its last ones."""
        if self.identity:
            raise SimError("the ideal profile has one shared clock: no device's clock steps")
        if device not in self._device_code:
            raise SimError(f"no device {device!r} to step the clock of")
        self.clock_steps[device] = (_ns(at), -round(step_s * 1e9))

    def restart(self, device: str, at: dt.datetime, down_s: float) -> None:
        """`device` restarts at `at` (fabric time) and is back `down_s` later: in between it reads and sends
        nothing, and what it held (watermark peaks, the values its telemetry server would send again) is gone."""
        if self.identity:
            raise SimError("the ideal profile reads every device at every poll: no device restarts")
        if device not in self._device_code:
            raise SimError(f"no device {device!r} to restart")
        self.offline[device] = (_ns(at), _ns(at) + round(down_s * 1e9))

    def offline_at(self, ts: dt.datetime) -> list[str]:
        """The devices down at fabric time `ts` (`restart`)."""
        at = _ns(ts)
        return [d for d, (lo, hi) in self.offline.items() if lo <= at < hi]

    def device_time_ns(self, device: str, fabric_ns: int) -> int:
        """What `device`'s clock reads at fabric time `fabric_ns` (ns since the epoch)."""
        at_ns, off_ns = self.clock_steps.get(device, (0, 0))
        return fabric_ns + (off_ns if fabric_ns < at_ns else 0)

    def layout(self) -> pa.Table:
        """Every row the profile's devices report, in snapshot order: `row` (its index in the engine's
        snapshot), device, role, port, priority, metric, raw name (as the gear names them), `group` (the
        metric group that reads it), `stamp_ns` (its stamp's offset after the poll) and `spread_ns` (the part
        of that offset that spreads the paths of one group apart)."""
        if self.identity:
            plan = SnapshotPlan(self.world.topology, self.world.engine.params)
            n = plan.n_rows
            every = pa.table(
                {
                    "row": pa.array(np.arange(n), pa.int64()),
                    "device": [plan.devices[d] for d in plan.row_device],
                    "role": pa.DictionaryArray.from_arrays(pa.array(plan.row_role, pa.int32()), _ROLES),
                    "port": [plan.port_names[p] for p in plan.row_port],
                    "priority": pa.array(plan.row_prio, pa.int8()),
                    "metric": [plan.metric_names[m] for m in plan.row_metric],
                    "raw_name": [plan.raw_names[r] for r in plan.row_raw],
                    "group": ["ports"] * n,
                    "stamp_ns": pa.array(np.zeros(n, np.int64)),
                    "spread_ns": pa.array(np.zeros(n, np.int64)),
                }
            )
            return every if self._monitored_rows is None else every.filter(pa.array(self._monitored_rows))
        rows = np.flatnonzero(self._keep)
        ports, metrics, raws = (d.to_pylist() for d in (self._port_dict, self._metric_dict, self._raw_dict))
        return pa.table(
            {
                "row": pa.array(rows, pa.int64()),
                "device": [self._device_of[r] for r in rows],
                "role": pa.DictionaryArray.from_arrays(pa.array(self._row_role[rows], pa.int32()), _ROLES),
                "port": [ports[i] for i in self._row_port[rows]],
                "priority": pa.array(self._row_prio[rows], pa.int8()),
                "metric": [metrics[i] for i in self._row_metric[rows]],
                "raw_name": [raws[i] for i in self._row_raw[rows]],
                "group": [str(g) for g in self._group_of[rows]],
                "stamp_ns": pa.array(self._stamp_ns[rows], pa.int64()),
                "spread_ns": pa.array(self._spread_ns[rows], pa.int64()),
            }
        )

    def counters(self, ts: dt.datetime, table: pa.Table) -> pa.Table:
        """What the devices report at the poll at `ts`, from the engine's snapshot `table` (all rows)."""
        if self.identity:
            return table if self._monitored_rows is None else table.filter(pa.array(self._monitored_rows))
        rows, out, stamps = self.read(ts, table)
        n = len(rows)

        def dictionary(idx: npt.NDArray[Any], values: pa.Array) -> pa.DictionaryArray:
            return pa.DictionaryArray.from_arrays(pa.array(idx, pa.int32()), values)

        result = pa.table(
            {
                "ts": pa.array(stamps, pa.int64()).view(pa.timestamp("ns", tz="UTC")),
                "device": dictionary(self._row_device[rows], self._device_dict),
                "role": dictionary(self._row_role[rows], _ROLES),
                "port": dictionary(self._row_port[rows], self._port_dict),
                "priority": pa.array(self._row_prio[rows], pa.int8()),
                "metric": dictionary(self._row_metric[rows], self._metric_dict),
                "value": pa.array(out, pa.float64()),
                "source": dictionary(np.zeros(n, np.int32), _SOURCES),
                "raw_name": dictionary(self._row_raw[rows], self._raw_dict),
            }
        )
        return pa.Table.from_batches([conform("counters", result)])

    # --- the static streams and the ground truth

    def links(self, seen_at: dt.datetime, source: str) -> pa.Table:
        """`links` as the profile's LLDP sees them: local names, the peer's advertised port id, one side or both."""
        topo = self.world.topology
        if self.identity and self.profile.lldp == "both" and not self.unmonitored:
            return topo.links_arrow(seen_at, source)
        side = self.profile.lldp
        roles = {d.name: d.role for d in topo.devices}
        names = self.names
        rows = [
            (p.device, names.local(p.device, p.name), p.peer_device, names.lldp_id(p.peer_device, p.peer_port))
            for p in topo.ports
            if (side == "both" or (side == "hosts") == (roles[p.device] == "host")) and p.device not in self.unmonitored
        ]
        table = pa.table(
            {
                "device": [r[0] for r in rows],
                "port": [r[1] for r in rows],
                "peer_device": [r[2] for r in rows],
                "peer_port": [r[3] for r in rows],
                "source": [source] * len(rows),
                "seen_at": pa.array([seen_at] * len(rows), pa.timestamp("ns", tz="UTC")),
            }
        )
        return pa.Table.from_batches([conform("links", table)])

    def rdma_netdevs(self, seen_at: dt.datetime) -> pa.Table:
        """`links` rows of source `rdma` (the host to itself): each RDMA port's netdev, as the NIC collector's
        inventory reports them, in the driver's names."""
        table = rdma_netdevs_arrow(self.world.topology, seen_at, self.names.rdma_port, self.names.local)
        return self._monitored(table, "device")

    def endpoints(self, table: pa.Table) -> pa.Table:
        """`endpoints` with the driver's RDMA device names."""
        if self.names.identity:
            return table
        return _map_column(table, "endpoints", "rdma_dev", self.names.rdma_device)

    def qp_owners(self, table: pa.Table) -> pa.Table:
        """`qp_owners` of the monitored hosts (`rdma resource show qp` runs on each), with the driver's RDMA device
        names."""
        table = self._monitored(table, "host")
        if self.names.identity:
            return table
        return _map_column(table, "qp_owners", "rdma_dev", self.names.rdma_device)

    def monitored(self, device: str) -> bool:
        return device not in self.unmonitored

    def inspector_records(self, records: list[InspectorRecord]) -> list[InspectorRecord]:
        """NCCL Inspector's records of the monitored hosts (a per-node collector reads each host's dump)."""
        return [r for r in records if r.host not in self.unmonitored] if self.unmonitored else records

    def _monitored(self, table: pa.Table, column: str) -> pa.Table:
        """`table` without the rows of unmonitored devices in `column`."""
        if not self.unmonitored or not table.num_rows:
            return table
        return table.filter(pc.invert(pc.is_in(table.column(column), pa.array(sorted(self.unmonitored)))))

    def incidents(self, table: pa.Table) -> pa.Table:
        """The `incidents` stream with its ports renamed like the telemetry."""
        if self.names.identity:
            return table
        ports = [[self.names.ref(p) for p in refs] for refs in table.column("ports").to_pylist()]
        i = table.schema.get_field_index("ports")
        out = table.set_column(i, table.schema.field(i), pa.array(ports, table.schema.field(i).type))
        return pa.Table.from_batches([conform("incidents", out)])

    def ground_truth(self, truth: dict[str, Any]) -> dict[str, Any]:
        """A ground-truth document (`World.ground_truth()`) with its ports renamed and the profile named."""
        if self.identity:
            return truth
        incidents = [
            {
                **inc,
                "ports": [self.names.ref(p) for p in inc["ports"]],
                "anchor": [self.names.ref(p) for p in inc["anchor"]],
            }
            for inc in truth["incidents"]
        ]
        return {**truth, "profile": self.profile.name, "incidents": incidents}

    def packets(self, table: pa.Table) -> pa.Table:
        """Mirror `packets` with their capture points (`leaf/port`) renamed."""
        if self.names.identity:
            return table
        return _map_column(table, "packets", "capture_point", self.names.capture_point)


def _ns(ts: dt.datetime) -> int:
    return (ts - EPOCH) // dt.timedelta(microseconds=1) * 1000


def _rail(nic_port: str) -> int:
    """The rail of a simulated NIC port: `eth3` or `mlx5_3/1` -> 3."""
    return int(nic_port.removeprefix("eth")) if nic_port.startswith("eth") else int(nic_port[5:].split("/")[0])


_ROLES = pa.array(["switch", "nic"], pa.string())
_SOURCES = pa.array(["sim"], pa.string())


def rdma_netdevs_arrow(
    topo: Topology,
    seen_at: dt.datetime,
    rdma_port: Callable[[str], str] = str,
    netdev: Callable[[str, str], str] = lambda _host, name: name,
) -> pa.Table:
    """Every host NIC's RDMA port -> netdev as `links` rows of source `rdma` (what `NicCollector.inventory_batch`
    publishes), named by `rdma_port` and `netdev` (the profile's driver names)."""
    nics = [nic for host in topo.hosts for nic in topo.nics_of(host.name)]
    table = pa.table(
        {
            "device": [n.host for n in nics],
            "port": [rdma_port(f"{n.rdma_dev}/1") for n in nics],
            "peer_device": [n.host for n in nics],
            "peer_port": [netdev(n.host, n.netdev) for n in nics],
            "source": ["rdma"] * len(nics),
            "seen_at": pa.array([seen_at] * len(nics), pa.timestamp("ns", tz="UTC")),
        }
    )
    return pa.Table.from_batches([conform("links", table)])


def _map_column(table: pa.Table, stream: str, column: str, rename: Any) -> pa.Table:
    """`table` with a string column renamed value by value (through its dictionary when encoded)."""
    i = table.schema.get_field_index(column)
    col = table.column(i).combine_chunks()
    if pa.types.is_dictionary(col.type):
        col = pa.DictionaryArray.from_arrays(col.indices, pa.array([rename(v) for v in col.dictionary.to_pylist()]))
    else:
        col = pa.array([rename(v) for v in col.to_pylist()], pa.string())
    out = table.set_column(i, pa.field(column, col.type), col)
    return pa.Table.from_batches([conform(stream, out)]) if out.num_rows else out


__all__ = ["WATERMARKS", "Gear"]
