"""The NIC collector's device seam: what it reads from a host, live or recorded.

`NicHost` is the Protocol. Two implementations share the sysfs logic (`SysfsNicHost`) and differ in
where sysfs and `ethtool -S` come from:

* `LiveHost(sysfs_root="/", ethtool="ethtool")` reads `<sysfs_root>/sys/...` (so a test can point it at
  a directory tree it wrote) and runs `ethtool -S <netdev>` with a timeout. A missing binary, a
  non-zero exit or a timeout raise `NicReadError` for that netdev only.
* `FixtureHost` serves recorded text: `ethtool -S` outputs by netdev and sysfs from memory (for
  example the real `path: value` dump of an mlx5 device). `FixtureHost.from_nics` builds a whole host.

Netdev <-> RDMA device mapping is done the way `show_gids` (MLNX_OFED) does it: the netdev of a RoCE
port is named in `/sys/class/infiniband/<dev>/ports/<p>/gid_attrs/ndevs/<gid index>` (index 0 is the
port's default GID, always the base netdev, not a VLAN on top); when that is not readable, the netdev
whose `/sys/class/net/<netdev>/device/infiniband/<dev>` exists (its `dev_port` breaking ties).
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from rocescope.collectors.nic.sysfs import DirSysfs, MemorySysfs, Sysfs, ib_rate_mbps, ib_state_active, parse_sysfs_dump
from rocescope.errors import NicReadError

__all__ = [
    "RDMA_GROUPS",
    "FixtureHost",
    "FixtureNic",
    "LinkState",
    "LiveHost",
    "NicHost",
    "SysfsNicHost",
    "rerooted",
]

log = logging.getLogger(__name__)

IB = "/sys/class/infiniband"
NET = "/sys/class/net"
#: The per-port counter directories: IBTA PortCounters, and the provider's hardware counters.
RDMA_GROUPS: tuple[str, ...] = ("counters", "hw_counters")
#: A netdev name as the kernel allows it (IFNAMSIZ), never starting with '-' (it goes on a command line).
_NETDEV = re.compile(r"[A-Za-z0-9_.@:+][A-Za-z0-9_.@:+-]{0,14}")


class LinkState(NamedTuple):
    """Link of a netdev or RDMA port. None where the device does not say (speed of a down link)."""

    oper_up: bool | None
    speed_mbps: int | None


class NicHost(Protocol):
    """What the NIC collector reads from one host."""

    def netdevs(self) -> list[str]:
        """The RoCE netdevs to poll with `ethtool -S`."""

    def driver(self, netdev: str) -> str:
        """Kernel driver of a netdev (`mlx5_core`, `bnxt_en`, `ice`, `i40e`...), "" if unknown."""

    def ethtool_stats(self, netdev: str) -> str:
        """Text of `ethtool -S <netdev>`; NicReadError if it cannot be had."""

    def link(self, netdev: str) -> LinkState:
        """From /sys/class/net/<netdev>/{operstate,speed}."""

    def rdma_devices(self) -> list[str]:
        """RDMA devices (`mlx5_0`...)."""

    def rdma_driver(self, rdma_dev: str) -> str:
        """Driver of an RDMA device's parent (`mlx5_core`, `bnxt_en`...), "" if unknown."""

    def rdma_ports(self, rdma_dev: str) -> list[int]:
        """Port numbers of an RDMA device (1-based)."""

    def rdma_port_counters(self, rdma_dev: str, port: int, group: str) -> dict[str, str]:
        """Raw text of each file of ports/<port>/<group>/, group in RDMA_GROUPS; {} if the group is absent."""

    def rdma_link(self, rdma_dev: str, port: int) -> LinkState:
        """From ports/<port>/{state,rate}."""

    def netdev_of(self, rdma_dev: str, port: int) -> str | None:
        """The netdev behind an RDMA port (RoCE), None if there is none (InfiniBand) or it is unknown."""


class SysfsNicHost:
    """NicHost over a `Sysfs`; subclasses supply `ethtool_stats`."""

    def __init__(self, sysfs: Sysfs, netdevs: Sequence[str] | None = None):
        self.sysfs = sysfs
        self._netdevs = list(netdevs) if netdevs is not None else None

    # --- netdevs
    def netdevs(self) -> list[str]:
        """The configured netdevs, or else every netdev that backs an RDMA port (the RoCE netdevs)."""
        if self._netdevs is not None:
            return list(self._netdevs)
        found = {
            nd
            for dev in self.rdma_devices()
            for port in self.rdma_ports(dev)
            if (nd := self.netdev_of(dev, port)) is not None
        }
        return sorted(found)

    def driver(self, netdev: str) -> str:
        try:
            return posixpath.basename(self.sysfs.readlink(f"{NET}/{netdev}/device/driver"))
        except OSError:
            return ""

    def ethtool_stats(self, netdev: str) -> str:
        raise NotImplementedError

    def link(self, netdev: str) -> LinkState:
        base = f"{NET}/{netdev}"
        try:
            state = self.sysfs.read(f"{base}/operstate").strip()
        except OSError:
            return LinkState(None, None)
        oper_up = True if state == "up" else None if state == "unknown" else False
        try:
            speed = int(self.sysfs.read(f"{base}/speed"))
        except (OSError, ValueError):  # EINVAL while the link is down
            speed = -1
        return LinkState(oper_up, speed if speed > 0 else None)

    # --- RDMA
    def rdma_devices(self) -> list[str]:
        try:
            return self.sysfs.listdir(IB)
        except OSError:
            return []

    def rdma_driver(self, rdma_dev: str) -> str:
        """From the `device` link of the class device, or its parent directory where that link is missing."""
        for parent in (f"{IB}/{rdma_dev}/device", f"{IB}/{rdma_dev}/../.."):
            try:
                return posixpath.basename(self.sysfs.readlink(f"{parent}/driver"))
            except OSError:
                continue
        return ""

    def rdma_ports(self, rdma_dev: str) -> list[int]:
        try:
            names = self.sysfs.listdir(f"{IB}/{rdma_dev}/ports")
        except OSError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def rdma_port_counters(self, rdma_dev: str, port: int, group: str) -> dict[str, str]:
        if group not in RDMA_GROUPS:
            raise ValueError(f"unknown RDMA counter group {group!r}; choose from {RDMA_GROUPS}")
        base = f"{IB}/{rdma_dev}/ports/{port}/{group}"
        try:
            names = self.sysfs.listdir(base)
        except OSError:
            return {}
        out: dict[str, str] = {}
        read = self.sysfs.read
        for name in names:
            try:
                out[name] = read(f"{base}/{name}")
            except OSError as exc:  # some firmware refuses single counters (EINVAL/EOPNOTSUPP)
                log.debug("%s/%s: %s", base, name, exc)
        return out

    def rdma_link(self, rdma_dev: str, port: int) -> LinkState:
        base = f"{IB}/{rdma_dev}/ports/{port}"
        try:
            up = ib_state_active(self.sysfs.read(f"{base}/state"))
        except OSError:
            up = None
        try:
            speed = ib_rate_mbps(self.sysfs.read(f"{base}/rate"))
        except OSError:
            speed = None
        return LinkState(up, speed)

    def netdev_of(self, rdma_dev: str, port: int) -> str | None:
        ndevs = f"{IB}/{rdma_dev}/ports/{port}/gid_attrs/ndevs"
        name = self._read_ndev(f"{ndevs}/0")
        if name is None:
            try:
                indexes = sorted(int(i) for i in self.sysfs.listdir(ndevs) if i.isdigit())
            except OSError:
                indexes = []
            for index in indexes[1:] if indexes and indexes[0] == 0 else indexes:
                name = self._read_ndev(f"{ndevs}/{index}")
                if name is not None:
                    break
        return name if name is not None else self._netdev_by_device(rdma_dev, port)

    def _read_ndev(self, path: str) -> str | None:
        try:
            name = self.sysfs.read(path).strip()
        except OSError:  # unused GID entries read as EINVAL
            return None
        return name or None

    def _netdev_by_device(self, rdma_dev: str, port: int) -> str | None:
        try:
            netdevs = self.sysfs.listdir(NET)
        except OSError:
            return None
        candidates = [nd for nd in netdevs if self.sysfs.exists(f"{NET}/{nd}/device/infiniband/{rdma_dev}")]
        for nd in candidates:
            try:
                if int(self.sysfs.read(f"{NET}/{nd}/dev_port")) + 1 == port:
                    return nd
            except (OSError, ValueError):
                continue
        return candidates[0] if candidates else None


class LiveHost(SysfsNicHost):
    """This host: sysfs under `sysfs_root` and the `ethtool` command (`timeout_s` per netdev)."""

    def __init__(
        self,
        sysfs_root: str | os.PathLike[str] = "/",
        ethtool: str = "ethtool",
        timeout_s: float = 2.0,
        netdevs: Sequence[str] | None = None,
    ):
        super().__init__(DirSysfs(sysfs_root), netdevs)
        self.ethtool = ethtool
        self.timeout_s = timeout_s

    def ethtool_stats(self, netdev: str) -> str:
        if not _NETDEV.fullmatch(netdev):
            raise NicReadError(f"{netdev!r}: not a netdev name")
        cmd = [self.ethtool, "-S", netdev]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except FileNotFoundError as exc:
            raise NicReadError(f"{netdev}: {self.ethtool!r} not found ({exc.strerror})") from exc
        except subprocess.TimeoutExpired as exc:
            raise NicReadError(f"{netdev}: `{' '.join(cmd)}` timed out after {self.timeout_s:g} s") from exc
        except OSError as exc:
            raise NicReadError(f"{netdev}: cannot run {self.ethtool!r}: {exc}") from exc
        if done.returncode != 0:
            err = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise NicReadError(f"{netdev}: `{' '.join(cmd)}` exited {done.returncode}: {err}")
        return done.stdout


@dataclass(frozen=True)
class FixtureNic:
    """One recorded NIC: its `ethtool -S` text (None: ethtool fails for it) and optionally its RDMA port."""

    netdev: str
    driver: str
    ethtool_text: str | None
    rdma_dev: str | None = None
    rdma_port: int = 1
    #: A `path: value` dump of one device under /sys/class/infiniband/<any name>/; re-rooted at `rdma_dev`.
    rdma_sysfs: str | None = None
    operstate: str = "up"
    speed_mbps: int = 100_000


class FixtureHost(SysfsNicHost):
    """A host made of recorded text: `ethtool -S` outputs by netdev, and sysfs files (and links) in memory."""

    def __init__(
        self,
        ethtool: Mapping[str, str | None],
        files: Mapping[str, str] | None = None,
        links: Mapping[str, str] | None = None,
        netdevs: Sequence[str] | None = None,
    ):
        super().__init__(MemorySysfs(files or {}, links), list(netdevs) if netdevs is not None else sorted(ethtool))
        self.ethtool = dict(ethtool)

    def ethtool_stats(self, netdev: str) -> str:
        text = self.ethtool.get(netdev)
        if text is None:
            raise NicReadError(f"{netdev}: no `ethtool -S` output recorded")
        return text

    @classmethod
    def from_nics(cls, nics: Iterable[FixtureNic]) -> FixtureHost:
        """Lay out sysfs as the kernel does for each NIC (driver link, operstate, speed, GID netdev)."""
        files: dict[str, str] = {}
        links: dict[str, str] = {}
        ethtool: dict[str, str | None] = {}
        for nic in nics:
            ethtool[nic.netdev] = nic.ethtool_text
            net = f"{NET}/{nic.netdev}"
            files[f"{net}/operstate"] = nic.operstate
            files[f"{net}/speed"] = str(nic.speed_mbps if nic.operstate == "up" else -1)
            files[f"{net}/dev_port"] = "0"
            links[f"{net}/device/driver"] = f"../../../../bus/pci/drivers/{nic.driver}"
            if nic.rdma_dev is None:
                continue
            if nic.rdma_sysfs is not None:
                files.update(rerooted(parse_sysfs_dump(nic.rdma_sysfs, f"{nic.rdma_dev} dump").files, nic.rdma_dev))
            files[f"{IB}/{nic.rdma_dev}/ports/{nic.rdma_port}/gid_attrs/ndevs/0"] = nic.netdev
            links[f"{IB}/{nic.rdma_dev}/device/driver"] = f"../../../../bus/pci/drivers/{nic.driver}"
        return cls(ethtool, files, links)


def rerooted(files: Mapping[str, str], rdma_dev: str) -> dict[str, str]:
    """Dump paths `/sys/class/infiniband/<any>/...` moved under `/sys/class/infiniband/<rdma_dev>/`."""
    out: dict[str, str] = {}
    prefix = f"{IB}/"
    for path, value in files.items():
        if path.startswith(prefix):
            rest = path[len(prefix) :].partition("/")[2]
            out[f"{IB}/{rdma_dev}/{rest}" if rest else f"{IB}/{rdma_dev}"] = value
        else:
            out[path] = value
    return out
