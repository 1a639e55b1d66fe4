"""Host view: one simulated host as a `/sys` tree and an `ethtool` command, for the real NIC collector.

`write_host_view(engine, topology, host, root)` lays out, under `root`, what a ConnectX host shows:

* `sys/devices/pci0000:00/0000:BB:00.0/` per NIC (one PCI function each) with its `driver` link
  (`mlx5_core`), `net/ethN/{operstate,speed,carrier,mtu,address,dev_port}` and `device` link, and
  `infiniband/mlx5_N/` (`node_guid`, `fw_ver`, ..., `ports/1/{state,phys_state,rate,link_layer}`,
  `counters/`, `hw_counters/`, `gids/`, `gid_attrs/{ndevs,types}/`);
* `sys/class/net/ethN` and `sys/class/infiniband/mlx5_N` as symlinks into them, as the kernel does;
* `bin/ethtool`, a shell script answering `ethtool -S ethN` in the mlx5 format (`NIC statistics:`,
  then `     name: value` lines) from `ethtool/ethN.stats`, which the writer refreshes.

Values are the engine's current counters (`Engine.snapshot` of the host, without resetting
watermarks), under the raw names the snapshot carries (mlx5 `ethtool -S` names on `ethN`, RDMA
`hw_counters` names on `mlx5_N/1`); the IBTA `counters/` files (`port_xmit_data`...) use the
catalog's `ib_port` names and scales (data in 4-byte words). Calling it again after more simulated
time rewrites every value file (each replaced atomically, so a concurrent reader never sees a
partial file); the layout is only created once. `LiveHost(sysfs_root=root, ethtool=root/bin/ethtool)`
reads it.

A served run keeps every host's view with `HostViews`: laid out once, then per tick only the value
files whose text changed are rewritten, from the tick's full snapshot (no snapshot per host).
"""

from __future__ import annotations

import math
import os
import stat
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from rocescope.catalog import METRICS_BY_NAME
from rocescope.sim.engine import Engine
from rocescope.sim.topology import Nic, Topology

__all__ = ["ETHTOOL_SCRIPT", "IB_PORT_METRICS", "HostViews", "ethtool_text", "write_host_view"]

#: IBTA PortCounters the RDMA `counters/` directory holds, from these canonical NIC metrics.
IB_PORT_METRICS: tuple[str, ...] = ("rdma_tx_bytes", "rdma_rx_bytes", "rdma_tx_packets", "rdma_rx_packets")
DRIVER = "mlx5_core"
PCI_ROOT = "pci0000:00"
MTU = 9000

#: `ethtool -S <netdev>`: the stats file next to `bin/`, or ethtool's own error for an unknown netdev.
ETHTOOL_SCRIPT = """#!/bin/sh
# rocescope simulated host: `ethtool -S <netdev>` from the host view's refreshed stats files.
if [ "$1" != "-S" ] || [ -z "$2" ]; then
  echo "rocescope sim ethtool: only 'ethtool -S DEVNAME' is supported" >&2
  exit 1
fi
stats="$(dirname "$0")/../ethtool/$2.stats"
case "$2" in */*|.*) stats=/nonexistent ;; esac
if [ ! -r "$stats" ]; then
  echo "Cannot get stats strings information: No such device" >&2
  exit 71
fi
exec cat "$stats"
"""


class _Writer:
    """Writes value files atomically: staged under `root/.staging` (never in a directory a reader lists)."""

    def __init__(self, root: Path) -> None:
        self.staging = root / ".staging"
        self.staging.mkdir(parents=True, exist_ok=True)
        self._n = 0

    def __call__(self, path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._n += 1
        tmp = self.staging / f"{os.getpid()}.{self._n}"
        tmp.write_text(text + "\n")
        os.replace(tmp, path)


def _symlink(path: Path, target: str) -> None:
    if path.is_symlink():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _bdf(nic: Nic) -> str:
    return f"0000:{0x18 + nic.rail:02x}:00.0"


def _rate(gbps: int) -> str:
    """IB `rate` text of a RoCE port, as mlx5 reports it for 4-lane links."""
    lane = {100: "EDR", 200: "HDR", 400: "NDR", 800: "XDR"}.get(gbps, "EDR")
    return f"{gbps} Gb/sec (4X {lane})"


def _link_local_gid(mac: str) -> str:
    """fe80::/64 GID with the MAC's modified EUI-64, as GID index 0 of a RoCE port."""
    b = [int(x, 16) for x in mac.split(":")]
    eui = [b[0] ^ 0x02, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]
    return "fe80:0000:0000:0000:" + ":".join(f"{eui[i]:02x}{eui[i + 1]:02x}" for i in range(0, 8, 2))


def _node_guid(mac: str) -> str:
    b = mac.split(":")
    return f"{b[0]}{b[1]}:{b[2]}03:00{b[3]}:{b[4]}{b[5]}"


def ethtool_text(values: list[tuple[str, int]]) -> str:
    """`ethtool -S` output in the mlx5 layout (no trailing newline)."""
    return "\n".join(["NIC statistics:", *(f"     {name}: {value}" for name, value in values)])


def _host_values(engine: Engine, host: str) -> dict[str, list[tuple[str, str, int]]]:
    """Per snapshot port (`ethN`, `mlx5_N/1`): (canonical metric, raw name, value) in plan order."""
    df = pl.from_arrow(engine.snapshot(devices=[host], reset_watermarks=False))
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(pl.col("port", "metric", "raw_name").cast(pl.String))
    out: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for port, metric, raw, value in df.select("port", "metric", "raw_name", "value").iter_rows():
        out[port].append((metric, raw, int(value)))
    return out


def write_host_view(engine: Engine, topology: Topology, host: str, root: Path) -> Path:
    """Write (or refresh) `host`'s sysfs tree and `ethtool` under `root`; returns `root`."""
    if topology.device(host).role != "host":
        raise ValueError(f"{host} is not a host")
    root = Path(root)
    values = _host_values(engine, host)
    _write = _Writer(root)
    sys = root / "sys"
    (sys / "bus/pci/drivers" / DRIVER).mkdir(parents=True, exist_ok=True)
    for nic in topology.nics_of(host):
        port = topology.port(host, nic.netdev)
        up = engine.counter(nic.leaf, nic.leaf_port, "oper_up") > 0  # the cable's state, seen at the leaf
        bdf = _bdf(nic)
        dev = sys / "devices" / PCI_ROOT / bdf
        _symlink(dev / "driver", f"../../../bus/pci/drivers/{DRIVER}")
        _write(dev / "vendor", "0x15b3")
        _write(dev / "device", "0x1021")
        # netdev
        net = dev / "net" / nic.netdev
        _write(net / "operstate", "up" if up else "down")
        _write(net / "carrier", "1" if up else "0")
        _write(net / "speed", str(port.speed_gbps * 1000 if up else -1))
        _write(net / "mtu", str(MTU))
        _write(net / "address", nic.mac)
        _write(net / "dev_port", "0")
        _symlink(net / "device", f"../../../{bdf}")
        _symlink(sys / "class/net" / nic.netdev, f"../../devices/{PCI_ROOT}/{bdf}/net/{nic.netdev}")
        # RDMA device
        ib = dev / "infiniband" / nic.rdma_dev
        _write(ib / "node_guid", _node_guid(nic.mac))
        _write(ib / "fw_ver", "28.39.1002")
        _write(ib / "hca_type", "MT4129")
        _write(ib / "board_id", "MT_0000000838")
        _write(ib / "node_type", "1: CA")
        p1 = ib / "ports" / "1"
        _write(p1 / "state", "4: ACTIVE" if up else "1: DOWN")
        _write(p1 / "phys_state", "5: LinkUp" if up else "3: Disabled")
        _write(p1 / "rate", _rate(port.speed_gbps))
        _write(p1 / "link_layer", "Ethernet")
        gids = [_link_local_gid(nic.mac), _link_local_gid(nic.mac), nic.gid, nic.gid]
        for i, (gid, kind) in enumerate(zip(gids, ["IB/RoCE v1", "RoCE v2"] * 2, strict=True)):
            _write(p1 / "gids" / str(i), gid)
            _write(p1 / "gid_attrs/ndevs" / str(i), nic.netdev)
            _write(p1 / "gid_attrs/types" / str(i), kind)
        rdma_rows = values.get(f"{nic.rdma_dev}/1", [])
        for _metric, raw, value in rdma_rows:
            _write(p1 / "hw_counters" / raw, str(value))
        eth_rows = values.get(nic.netdev, [])
        by_metric = {m: v for m, _raw, v in eth_rows}
        for metric in IB_PORT_METRICS:
            meta = METRICS_BY_NAME[metric]
            for raw in meta.vendor_names.get("ib_port", ())[:1]:
                scale = meta.scales.get(raw, 1.0)
                _write(p1 / "counters" / raw, str(math.floor(by_metric.get(metric, 0) / scale)))
        _symlink(sys / "class/infiniband" / nic.rdma_dev, f"../../devices/{PCI_ROOT}/{bdf}/infiniband/{nic.rdma_dev}")
        # ethtool -S
        _write(root / "ethtool" / f"{nic.netdev}.stats", ethtool_text([(raw, v) for _m, raw, v in eth_rows]))
    exe = root / "bin" / "ethtool"
    if not exe.exists():
        _write(exe, ETHTOOL_SCRIPT.rstrip("\n"))
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return root


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
