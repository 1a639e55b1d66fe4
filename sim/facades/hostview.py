"""Host view: one simulated host as a `/sys` tree and an `ethtool` command, for the real NIC collector.

A host view under `root` shows what a host with ConnectX (`mlx5`) or Broadcom Thor (`bnxt`) NICs shows:

* `sys/devices/pci0000:00/0000:BB:00.0/` per NIC (one PCI function each) with its `driver` link
  (`mlx5_core` / `bnxt_en`), PCI `vendor`/`device`, `net/ethN/{operstate,speed,carrier,mtu,address,dev_port}`
  and `device` link, and `infiniband/<rdma>/` (`mlx5_N` / `bnxt_reN`: `node_guid`, `fw_ver`, ...,
  `ports/1/{state,phys_state,rate,link_layer}`, `hw_counters/`, `gids/`, `gid_attrs/{ndevs,types}/`; mlx5
  also the IBTA `counters/`, from the catalog's `ib_port` names and scales, data in 4-byte words);
* `sys/class/net/ethN` and `sys/class/infiniband/<rdma>` as symlinks into them, as the kernel does;
* `bin/ethtool`, a shell script answering `ethtool -S ethN` (`NIC statistics:`, then `     name: value`
  lines, as mlx5_core and bnxt_en print their port statistics) from `ethtool/ethN.stats`.

Values come from rows named as the driver names them (`ethtool -S` names on port `ethN`, RDMA `hw_counters`
names on port `<rdma>/1`): a served run's rows as its deployment profile's gear reports them
(`rocescope.sim.gear`), or an engine's snapshot (`write_host_view`, mlx5). `HostViews` lays every host out
once; each `refresh` then rewrites only the value files whose text changed (each replaced atomically, so a
concurrent reader never sees a partial file), and the link state files when a cable's state changes.
`LiveHost(sysfs_root=root, ethtool=root/bin/ethtool)` reads it.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from rocescope.catalog import METRICS_BY_NAME
from rocescope.sim.engine import Engine
from rocescope.sim.topology import Nic, Topology

__all__ = ["DRIVERS", "ETHTOOL_SCRIPT", "IB_PORT_METRICS", "HostViews", "NicDriver", "ethtool_text", "write_host_view"]

#: IBTA PortCounters the RDMA `counters/` directory holds, from these canonical NIC metrics.
IB_PORT_METRICS: tuple[str, ...] = ("rdma_tx_bytes", "rdma_rx_bytes", "rdma_tx_packets", "rdma_rx_packets")
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


@dataclass(frozen=True)
class NicDriver:
    """How a NIC model shows up in sysfs: its kernel driver, PCI ids, RDMA device name and attributes."""

    driver: str
    pci_vendor: str
    pci_device: str
    rdma: str  # RDMA device of rail N, `{n}` for the rail
    attrs: Mapping[str, str]  # RDMA device attribute files
    ib_counters: bool  # the IBTA `counters/` (PMA) directory on the RDMA port


DRIVERS: Mapping[str, NicDriver] = {
    # ConnectX-7 (MT4129)
    "mlx5": NicDriver(
        "mlx5_core", "0x15b3", "0x1021", "mlx5_{n}",
        {"fw_ver": "28.39.1002", "hca_type": "MT4129", "board_id": "MT_0000000838", "node_type": "1: CA"}, True,
    ),
    # BCM57608 (Thor 2): bnxt_en netdevs, bnxt_re RDMA devices (no PMA `counters/`)
    "bnxt": NicDriver(
        "bnxt_en", "0x14e4", "0x1760", "bnxt_re{n}", {"fw_ver": "230.1.116.0", "node_type": "1: CA"}, False,
    ),
}  # fmt: skip


def _bdf(nic: Nic) -> str:
    return f"0000:{0x18 + nic.rail:02x}:00.0"


def _rate(gbps: int) -> str:
    """IB `rate` text of a RoCE port, as ib_core prints it for 4-lane links."""
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
    """`ethtool -S` port statistics (no trailing newline)."""
    return "\n".join(["NIC statistics:", *(f"     {name}: {value}" for name, value in values)])


def _write_once(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def _symlink(path: Path, target: str) -> None:
    if path.is_symlink():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _lay_out(topology: Topology, host: str, root: Path, driver: NicDriver) -> None:
    """The static part of a host's view: PCI functions, netdev and RDMA device attributes, links, `ethtool`."""
    sys = root / "sys"
    (sys / "bus/pci/drivers" / driver.driver).mkdir(parents=True, exist_ok=True)
    for nic in topology.nics_of(host):
        rdma = driver.rdma.format(n=nic.rail)
        bdf = _bdf(nic)
        dev = sys / "devices" / PCI_ROOT / bdf
        _symlink(dev / "driver", f"../../../bus/pci/drivers/{driver.driver}")
        _write_once(dev / "vendor", driver.pci_vendor)
        _write_once(dev / "device", driver.pci_device)
        net = dev / "net" / nic.netdev
        _write_once(net / "mtu", str(MTU))
        _write_once(net / "address", nic.mac)
        _write_once(net / "dev_port", "0")
        _symlink(net / "device", f"../../../{bdf}")
        _symlink(sys / "class/net" / nic.netdev, f"../../devices/{PCI_ROOT}/{bdf}/net/{nic.netdev}")
        ib = dev / "infiniband" / rdma
        _write_once(ib / "node_guid", _node_guid(nic.mac))
        for name, text in driver.attrs.items():
            _write_once(ib / name, text)
        p1 = ib / "ports" / "1"
        _write_once(p1 / "rate", _rate(topology.port(host, nic.netdev).speed_gbps))
        _write_once(p1 / "link_layer", "Ethernet")
        gids = [_link_local_gid(nic.mac), _link_local_gid(nic.mac), nic.gid, nic.gid]
        for i, (gid, kind) in enumerate(zip(gids, ["IB/RoCE v1", "RoCE v2"] * 2, strict=True)):
            _write_once(p1 / "gids" / str(i), gid)
            _write_once(p1 / "gid_attrs/ndevs" / str(i), nic.netdev)
            _write_once(p1 / "gid_attrs/types" / str(i), kind)
        (p1 / "hw_counters").mkdir(parents=True, exist_ok=True)
        if driver.ib_counters:
            (p1 / "counters").mkdir(parents=True, exist_ok=True)
        _symlink(sys / "class/infiniband" / rdma, f"../../devices/{PCI_ROOT}/{bdf}/infiniband/{rdma}")
    (root / "ethtool").mkdir(parents=True, exist_ok=True)
    exe = root / "bin" / "ethtool"
    if not exe.exists():
        _write_once(exe, ETHTOOL_SCRIPT.rstrip("\n"))
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@dataclass
class _NicFiles:
    nic: Nic
    ethtool: str
    eth_pos: np.ndarray[Any, Any]
    eth_raw: list[str]
    hw_paths: list[str]
    hw_pos: np.ndarray[Any, Any]
    ib_paths: list[str]
    ib_pos: list[int]
    ib_scale: list[float]
    state: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (up text, down text)
    up: bool | None = None


class HostViews:
    """Host views (`roots`: host -> its directory), laid out once, refreshed from rows named as the driver
    names them: `layout` holds the hosts' rows (device, port, metric, raw_name, priority) in the order of the
    values `refresh` is given."""

    def __init__(self, topology: Topology, roots: Mapping[str, Path], layout: pa.Table, driver: str = "mlx5") -> None:
        self.roots = {h: Path(r) for h, r in roots.items()}
        self.hosts = list(self.roots)
        self.driver = DRIVERS[driver]
        cols = layout.select(["device", "port", "metric", "raw_name", "priority"]).to_pydict()
        at: dict[tuple[str, str], list[int]] = {}
        for i, (d, p) in enumerate(zip(cols["device"], cols["port"], strict=True)):
            at.setdefault((d, p), []).append(i)
        keys = zip(cols["device"], cols["port"], cols["metric"], cols["priority"], strict=True)
        by_metric = {key: i for i, key in enumerate(keys)}
        self._staging: dict[str, Path] = {}
        self._n = 0
        self._last: dict[str, str] = {}
        self.nics: list[_NicFiles] = []
        for h, root in self.roots.items():
            _lay_out(topology, h, root, self.driver)
            self._staging[h] = root / ".staging"
            self._staging[h].mkdir(parents=True, exist_ok=True)
            base = root / "sys/class"
            for nic in topology.nics_of(h):
                rdma = self.driver.rdma.format(n=nic.rail)
                eth = at.get((h, nic.netdev), [])
                hw = at.get((h, f"{rdma}/1"), [])
                p1 = base / "infiniband" / rdma / "ports/1"
                ib_paths, ib_pos, ib_scale = [], [], []
                for metric in IB_PORT_METRICS if self.driver.ib_counters else ():
                    meta = METRICS_BY_NAME[metric]
                    for raw in meta.vendor_names.get("ib_port", ())[:1]:
                        ib_paths.append(str(p1 / "counters" / raw))
                        ib_pos.append(by_metric.get((h, nic.netdev, metric, -1), -1))
                        ib_scale.append(meta.scales.get(raw, 1.0))
                net = base / "net" / nic.netdev
                speed = str(topology.port(h, nic.netdev).speed_gbps * 1000)
                self.nics.append(
                    _NicFiles(
                        nic=nic,
                        ethtool=str(root / "ethtool" / f"{nic.netdev}.stats"),
                        eth_pos=np.array(eth, dtype=np.int64),
                        eth_raw=[cols["raw_name"][i] for i in eth],
                        hw_paths=[str(p1 / "hw_counters" / cols["raw_name"][i]) for i in hw],
                        hw_pos=np.array(hw, dtype=np.int64),
                        ib_paths=ib_paths,
                        ib_pos=ib_pos,
                        ib_scale=ib_scale,
                        state={
                            str(net / "operstate"): ("up", "down"),
                            str(net / "carrier"): ("1", "0"),
                            str(net / "speed"): (speed, "-1"),
                            str(p1 / "state"): ("4: ACTIVE", "1: DOWN"),
                            str(p1 / "phys_state"): ("5: LinkUp", "3: Disabled"),
                        },
                    )
                )

    def _write(self, host: str, path: str, text: str) -> None:
        if self._last.get(path) == text:
            return  # unchanged since the last tick: a reader sees the same bytes either way
        self._last[path] = text
        self._n += 1
        tmp = f"{self._staging[host]}/{self._n}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, (text + "\n").encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def refresh(self, values: np.ndarray[Any, Any], up: Sequence[bool] | None = None) -> None:
        """Rewrite the value files from `values` (one per layout row) and, with `up` (one per NIC, in `nics`
        order: its cable's state), the link state files."""
        for k, nic in enumerate(self.nics):
            h = nic.nic.host
            eth = values[nic.eth_pos]
            self._write(
                h, nic.ethtool, ethtool_text([(r, int(v)) for r, v in zip(nic.eth_raw, eth.tolist(), strict=True)])
            )
            for path, v in zip(nic.hw_paths, values[nic.hw_pos].tolist(), strict=True):
                self._write(h, path, str(int(v)))
            for path, pos, scale in zip(nic.ib_paths, nic.ib_pos, nic.ib_scale, strict=True):
                self._write(h, path, str(math.floor(values[pos] / scale) if pos >= 0 else 0))
            link = True if up is None else bool(up[k])
            if link != nic.up:
                for path, (on, off) in nic.state.items():
                    self._write(h, path, on if link else off)
                nic.up = link

    def host_root(self, host: str) -> Path:
        return self.roots[host]


def write_host_view(engine: Engine, topology: Topology, host: str, root: Path) -> Path:
    """Write (or refresh) `host`'s sysfs tree and `ethtool` under `root` from the engine's counters now, as
    ConnectX NICs show them; returns `root`."""
    if topology.device(host).role != "host":
        raise ValueError(f"{host} is not a host")
    table = engine.snapshot(devices=[host], reset_watermarks=False)
    views = HostViews(topology, {host: Path(root)}, table)
    up = [engine.counter(n.nic.leaf, n.nic.leaf_port, "oper_up") > 0 for n in views.nics]
    views.refresh(table.column("value").to_numpy(), up)
    return Path(root)
