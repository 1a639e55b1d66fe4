"""What the simulated devices report: canonical metrics, their vendor names, and columnar snapshots.

A switch reports like SONiC (COUNTERS_DB SAI stat names; OpenConfig or IF-MIB names where SAI has
none), a host NIC like mlx5: `ethtool -S ethN` names on port `ethN`, RDMA `hw_counters` names on port
`mlx5_N/1`. Every raw name is looked up in `rocescope.catalog`, never spelled here, so it always
resolves back to its canonical metric.

The plan (which row reads which array cell) is built once per engine with numpy; a snapshot is then
a handful of vectorized gathers into Arrow arrays with dictionary-encoded strings.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocescope.catalog import METRICS_BY_NAME
from rocescope.pipeline.batch import conform
from rocescope.sim import kernel as K
from rocescope.sim.params import EngineParams
from rocescope.sim.topology import Topology

#: Where a value lives: a counter cell (`pc`, `pq`) or a gauge computed at snapshot time.
Source = Literal["pc", "pq", "qlen", "qwm", "pgwm", "paused", "oper", "speed", "bufwm"]
PortStyle = Literal["switch", "ethtool", "rdma", "pool"]

SWITCH_VENDORS = ("sonic_sai", "openconfig", "snmp")
POOL_NAME = "ingress_lossless_pool"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class Series:
    """One metric family a device reports: canonical name, where the value lives, how the port is named."""

    metric: str
    source: Source
    slot: int
    style: PortStyle


SERIES: tuple[Series, ...] = (
    # switch ports (SONiC)
    Series("tx_bytes", "pc", K.C_TX_BYTES, "switch"),
    Series("rx_bytes", "pc", K.C_RX_BYTES, "switch"),
    Series("tx_unicast_packets", "pc", K.C_TX_PKTS, "switch"),
    Series("rx_unicast_packets", "pc", K.C_RX_PKTS, "switch"),
    Series("rx_discards", "pc", K.C_RX_DISCARDS, "switch"),
    Series("tx_discards", "pc", K.C_TX_DISCARDS, "switch"),
    Series("rx_fcs_errors", "pc", K.C_FCS_ERRORS, "switch"),
    Series("tx_ecn_marked_packets", "pc", K.C_ECN_MARKED, "switch"),
    Series("oper_up", "oper", 0, "switch"),
    Series("carrier_transitions", "pc", K.C_CARRIER, "switch"),
    Series("port_speed_bps", "speed", 0, "switch"),
    Series("pfc_rx_pause", "pq", K.Q_PFC_RX, "switch"),
    Series("pfc_tx_pause", "pq", K.Q_PFC_TX, "switch"),
    Series("pfc_rx_pause_duration_us", "pq", K.Q_PFC_RX_US, "switch"),
    Series("pfc_tx_pause_duration_us", "pq", K.Q_PFC_TX_US, "switch"),
    Series("pfc_rx_pause_transition", "pq", K.Q_PFC_RX_TRANS, "switch"),
    Series("queue_tx_bytes", "pq", K.Q_TX_BYTES, "switch"),
    Series("queue_tx_packets", "pq", K.Q_TX_PKTS, "switch"),
    Series("queue_dropped_packets", "pq", K.Q_DROP_PKTS, "switch"),
    Series("queue_dropped_bytes", "pq", K.Q_DROP_BYTES, "switch"),
    Series("queue_ecn_marked_packets", "pq", K.Q_ECN_MARKED, "switch"),
    Series("queue_watermark_bytes", "qwm", 0, "switch"),
    Series("queue_occupancy_bytes", "qlen", 0, "switch"),
    Series("queue_paused", "paused", 0, "switch"),
    Series("pg_watermark_bytes", "pgwm", 0, "switch"),
    Series("pg_dropped_packets", "pq", K.Q_PG_DROP, "switch"),
    Series("buffer_pool_watermark_bytes", "bufwm", 0, "pool"),
    # NIC, ethtool -S
    Series("tx_bytes", "pc", K.C_TX_BYTES, "ethtool"),
    Series("rx_bytes", "pc", K.C_RX_BYTES, "ethtool"),
    Series("tx_packets", "pc", K.C_TX_PKTS, "ethtool"),
    Series("rx_packets", "pc", K.C_RX_PKTS, "ethtool"),
    Series("rx_fcs_errors", "pc", K.C_FCS_ERRORS, "ethtool"),
    Series("link_down_events", "pc", K.C_LINK_DOWN, "ethtool"),
    Series("rdma_tx_bytes", "pc", K.C_RDMA_TX_BYTES, "ethtool"),
    Series("rdma_rx_bytes", "pc", K.C_RDMA_RX_BYTES, "ethtool"),
    Series("rdma_tx_packets", "pc", K.C_RDMA_TX_PKTS, "ethtool"),
    Series("rdma_rx_packets", "pc", K.C_RDMA_RX_PKTS, "ethtool"),
    Series("tx_prio_bytes", "pq", K.Q_TX_BYTES, "ethtool"),
    Series("rx_prio_bytes", "pq", K.Q_RX_BYTES, "ethtool"),
    Series("tx_prio_packets", "pq", K.Q_TX_PKTS, "ethtool"),
    Series("rx_prio_packets", "pq", K.Q_RX_PKTS, "ethtool"),
    Series("pfc_rx_pause", "pq", K.Q_PFC_RX, "ethtool"),
    Series("pfc_tx_pause", "pq", K.Q_PFC_TX, "ethtool"),
    Series("pfc_rx_pause_duration_us", "pq", K.Q_PFC_RX_US, "ethtool"),
    Series("pfc_tx_pause_duration_us", "pq", K.Q_PFC_TX_US, "ethtool"),
    Series("pfc_rx_pause_transition", "pq", K.Q_PFC_RX_TRANS, "ethtool"),
    # NIC, RDMA hw_counters
    Series("cnp_sent", "pc", K.C_CNP_SENT, "rdma"),
    Series("cnp_handled", "pc", K.C_CNP_HANDLED, "rdma"),
    Series("cnp_ignored", "pc", K.C_CNP_IGNORED, "rdma"),
    Series("ecn_marked_roce_packets", "pc", K.C_ECN_ROCE, "rdma"),
    Series("out_of_sequence", "pc", K.C_OOS, "rdma"),
    Series("packet_seq_err", "pc", K.C_SEQ_ERR, "rdma"),
)
#: SONiC's PFC watchdog counters (COUNTERS_DB `PFC_WD_QUEUE_STATS_*` of each lossless queue): reported only
#: where the watchdog runs (`EngineParams.pfcwd`), as SONiC creates them only for watched queues.
PFCWD_SERIES: tuple[Series, ...] = (
    Series("pfcwd_storm_detected", "pq", K.Q_WD_DETECTED, "switch"),
    Series("pfcwd_storm_restored", "pq", K.Q_WD_RESTORED, "switch"),
    Series("pfcwd_tx_dropped_packets", "pq", K.Q_WD_TX_DROP, "switch"),
    Series("pfcwd_rx_dropped_packets", "pq", K.Q_WD_RX_DROP, "switch"),
)


def raw_name_template(metric: str, style: PortStyle) -> tuple[str, str]:
    """(vendor, raw name template with `{p}`) a device of this kind reports `metric` under."""
    vendors = {"switch": SWITCH_VENDORS, "pool": SWITCH_VENDORS, "ethtool": ("mlx5",), "rdma": ("mlx5_rdma",)}[style]
    names = METRICS_BY_NAME[metric].vendor_names
    for vendor in vendors:
        if names.get(vendor):
            return vendor, names[vendor][0]
    raise KeyError(f"the catalog has no {'/'.join(vendors)} name for {metric}")


class SnapshotPlan:
    """Row layout of one engine's `counters` snapshots, with the array cell each row reads."""

    def __init__(self, topology: Topology, params: EngineParams) -> None:
        ports = topology.ports
        n_ports = len(ports)
        self.n_ports = n_ports
        self.n_switches = len(topology.switches)
        switch_ids = np.array([p.id for p in ports if p.kind != "nic"], dtype=np.int64)
        nic_ids = np.array([p.id for p in ports if p.kind == "nic"], dtype=np.int64)

        self.devices: list[str] = [d.name for d in topology.devices]
        dev_code = {name: i for i, name in enumerate(self.devices)}
        port_dev = np.array([dev_code[p.device] for p in ports], dtype=np.int32)
        names: dict[str, int] = {}

        def code(name: str) -> int:
            return names.setdefault(name, len(names))

        iface = np.array([code(p.name) for p in ports], dtype=np.int32)
        rdma = np.array(
            [code(f"mlx5_{p.name.removeprefix('eth')}/1") if p.kind == "nic" else -1 for p in ports], dtype=np.int32
        )
        pool = code(POOL_NAME)
        metrics: dict[str, int] = {}
        raws: dict[str, int] = {}

        # gauge vector layout (built at snapshot time)
        q_cells = n_ports * K.NPRIO
        self.g_qlen, self.g_qwm, self.g_pgwm, self.g_paused = 0, q_cells, 2 * q_cells, 3 * q_cells
        self.g_oper, self.g_speed = 4 * q_cells, 4 * q_cells + n_ports
        self.g_bufwm = 4 * q_cells + 2 * n_ports
        self.g_size = self.g_bufwm + self.n_switches
        pq_base = n_ports * K.NPC

        cols: dict[str, list[npt.NDArray[np.int64]]] = {
            k: [] for k in ("device", "role", "port", "prio", "metric", "raw", "counter", "idx")
        }

        def add(dev: npt.NDArray[np.integer[Any]], role: int, port: npt.NDArray[np.integer[Any]], prio: int,
                metric: str, raw: str, counter: bool, idx: npt.NDArray[np.int64]) -> None:  # fmt: skip
            n = len(idx)
            cols["device"].append(dev.astype(np.int64))
            cols["role"].append(np.full(n, role, np.int64))
            cols["port"].append(port.astype(np.int64))
            cols["prio"].append(np.full(n, prio, np.int64))
            cols["metric"].append(np.full(n, metrics.setdefault(metric, len(metrics)), np.int64))
            cols["raw"].append(np.full(n, raws.setdefault(raw, len(raws)), np.int64))
            cols["counter"].append(np.full(n, 1 if counter else 0, np.int64))
            cols["idx"].append(idx.astype(np.int64))

        for s in SERIES + (PFCWD_SERIES if params.pfcwd else ()):
            meta = METRICS_BY_NAME[s.metric]
            _, template = raw_name_template(s.metric, s.style)
            counter = meta.kind == "counter"
            if s.style == "pool":
                sw_devs = np.array([dev_code[d.name] for d in topology.switches], dtype=np.int64)
                idx = self.g_bufwm + np.arange(self.n_switches, dtype=np.int64)
                add(sw_devs, 0, np.full(len(sw_devs), pool, np.int64), -1, s.metric, template, counter, idx)
                continue
            ids = switch_ids if s.style == "switch" else nic_ids
            role = 0 if s.style == "switch" else 1
            port_codes = (rdma if s.style == "rdma" else iface)[ids]
            prios = params.report_priorities if meta.per_priority else (-1,)
            if s in PFCWD_SERIES:
                prios = (params.lossless_priority,)
            for q in prios:
                raw = template.replace("{p}", str(q)) if q >= 0 else template
                qq = max(q, 0)
                if s.source == "pc":
                    idx = ids * K.NPC + s.slot
                elif s.source == "pq":
                    idx = pq_base + (ids * K.NPRIO + qq) * K.NQC + s.slot
                elif s.source in ("qlen", "qwm", "pgwm", "paused"):
                    offset = {"qlen": self.g_qlen, "qwm": self.g_qwm, "pgwm": self.g_pgwm, "paused": self.g_paused}
                    idx = offset[s.source] + ids * K.NPRIO + qq
                else:
                    idx = (self.g_oper if s.source == "oper" else self.g_speed) + ids
                add(port_dev[ids], role, port_codes, q, s.metric, raw, counter, idx)
        cat = {k: np.concatenate(v) for k, v in cols.items()}
        self.n_rows = len(cat["idx"])
        self.row_device = cat["device"].astype(np.int32)
        self.row_role = cat["role"].astype(np.int32)
        self.row_port = cat["port"].astype(np.int32)
        self.row_prio = cat["prio"].astype(np.int8)
        self.row_metric = cat["metric"].astype(np.int32)
        self.row_raw = cat["raw"].astype(np.int32)
        self.row_counter = cat["counter"].astype(bool)
        self.row_idx = cat["idx"]
        self.port_names = list(names)
        self.metric_names = list(metrics)
        self.raw_names = list(raws)
        self._dicts = {
            "device": pa.array(self.devices, pa.string()),
            "role": pa.array(["switch", "nic"], pa.string()),
            "port": pa.array(self.port_names, pa.string()),
            "metric": pa.array(self.metric_names, pa.string()),
            "raw_name": pa.array(self.raw_names, pa.string()),
            "source": pa.array(["sim"], pa.string()),
        }
        self._lookup: dict[tuple[str, str, str, int], int] | None = None

    def rows_of(self, devices: Iterable[str]) -> npt.NDArray[np.int64]:
        """Row numbers of the given devices, in plan order."""
        codes = [self.devices.index(d) for d in devices]
        return np.flatnonzero(np.isin(self.row_device, codes))

    def row(self, device: str, port: str, metric: str, priority: int = -1) -> int:
        """The row of one value (KeyError if the device does not report it)."""
        if self._lookup is None:
            self._lookup = {
                (self.devices[d], self.port_names[p], self.metric_names[m], int(q)): r
                for r, (d, p, m, q) in enumerate(
                    zip(self.row_device, self.row_port, self.row_metric, self.row_prio, strict=True)
                )
            }
        return self._lookup[(device, port, metric, priority)]

    def values(
        self,
        counters: npt.NDArray[np.float64],
        base: npt.NDArray[np.float64],
        gauges: npt.NDArray[np.float64],
        rows: npt.NDArray[np.int64] | None = None,
    ) -> npt.NDArray[np.float64]:
        """Row values in whole units, as devices report them: counters since the last reset; gauges now."""
        idx = self.row_idx if rows is None else self.row_idx[rows]
        is_counter = self.row_counter if rows is None else self.row_counter[rows]
        out = np.empty(len(idx))
        ci = idx[is_counter]
        out[is_counter] = counters[ci] - base[ci]
        out[~is_counter] = gauges[idx[~is_counter]]
        return np.floor(out + 1e-6)

    def table(self, ts: dt.datetime, values: npt.NDArray[np.float64], rows: npt.NDArray[np.int64] | None) -> pa.Table:
        """The `counters` stream for these rows, conformed to the schema."""

        def pick(a: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
            return a if rows is None else a[rows]

        def dictionary(a: npt.NDArray[np.int32], name: str) -> pa.DictionaryArray:
            return pa.DictionaryArray.from_arrays(pa.array(a, pa.int32()), self._dicts[name])

        n = len(values)
        ts_ns = (ts - EPOCH) // dt.timedelta(microseconds=1) * 1000
        table = pa.table(
            {
                "ts": pa.array(np.full(n, ts_ns, np.int64), pa.int64()).view(pa.timestamp("ns", tz="UTC")),
                "device": dictionary(pick(self.row_device), "device"),
                "role": dictionary(pick(self.row_role), "role"),
                "port": dictionary(pick(self.row_port), "port"),
                "priority": pa.array(self.row_prio if rows is None else self.row_prio[rows], pa.int8()),
                "metric": dictionary(pick(self.row_metric), "metric"),
                "value": pa.array(values, pa.float64()),
                "source": dictionary(np.zeros(n, np.int32), "source"),
                "raw_name": dictionary(pick(self.row_raw), "raw_name"),
            }
        )
        return pa.Table.from_batches([conform("counters", table)])
