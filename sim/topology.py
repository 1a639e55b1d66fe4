"""The simulated fabric's static shape: a leaf-spine built from a few numbers, named like real gear.

Everything else in the simulator (routes, queues, counters, LLDP and the protocol facades) stands on
this, so it is pure data: the same `FabricSpec` always gives the same devices, port names, addresses
and cabling, and every port carries a dense integer id so the time-stepped parts can keep their
state in numpy arrays indexed by port.

Conventions (chosen to look like the fabrics operators run):

* Rail-optimized by default: NIC i of every host is cabled to a leaf of rail i (`leaf-r2-03` is leaf
  3 of rail 2). When a rail has more hosts than a leaf has host ports it is split over several leaves.
  With `rail_optimized=False` all NICs of a host go to one shared leaf (`leaf-03`), ToR style.
* Every leaf connects to every spine (`spine-01`) with `uplinks_per_spine` parallel links. Uplinks
  are cabled round-robin over the spines (uplink 0 to spine-01, uplink 1 to spine-02, ...), the
  common cabling plan; with dual uplinks the second pass starts again at spine-01.
* Switch ports are SONiC style, one name per 4 lanes: `Ethernet0`, `Ethernet4`, ... Host-facing
  ports come first; uplinks start after the last host port (`Ethernet128` on a 32-port-down leaf).
  Spine port k faces leaf k // uplinks_per_spine.
* Hosts are `gpu-001`...; NIC i is `mlx5_i` with netdev `eth_i`, address `10.<rail>.<n/256>.<n%256>`
  (n = host number, one /16 per rail) and a Mellanox-OUI MAC.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocescope.errors import SimError
from rocescope.pipeline.batch import conform
from rocescope.sim.roce import gid_from_ipv4

SPEEDS_GBPS: tuple[int, ...] = (100, 200, 400, 800)
#: SONiC names a port after its first lane; a 400G port uses 4 lanes of a 64x400G switch's 256.
PORT_STEP = 4
#: Mellanox/NVIDIA OUI, so MACs look like ConnectX NICs in captures and LLDP.
_NIC_OUI = "b8:ce:f6"

Role = Literal["host", "leaf", "spine"]
#: nic: host NIC towards its leaf; down: switch port towards the tier below; up: leaf towards a spine.
PortKind = Literal["nic", "down", "up"]


@dataclass(frozen=True)
class FabricSpec:
    """The few numbers a fabric is built from. Validated at construction: a bad spec fails early."""

    hosts: int = 32
    rails: int = 4
    spines: int = 2
    #: None: as few leaves per rail as the host ports allow (1 unless hosts > host_ports_per_leaf).
    leaves_per_rail: int | None = None
    #: Host-facing ports per leaf (a 64-port leaf: 32 down, 32 up).
    host_ports_per_leaf: int = 32
    host_speed_gbps: int = 400
    uplink_speed_gbps: int = 400
    #: Parallel links from each leaf to each spine (2 = dual uplinks).
    uplinks_per_spine: int = 1
    #: False: shared (ToR) leaves, all NICs of a host on one leaf.
    rail_optimized: bool = True

    def __post_init__(self) -> None:
        for name in ("hosts", "rails", "spines", "host_ports_per_leaf", "uplinks_per_spine"):
            if getattr(self, name) < 1:
                raise SimError(f"FabricSpec.{name} must be >= 1, got {getattr(self, name)}")
        if self.hosts > 0xFFFF or self.rails > 255:
            raise SimError("at most 65535 hosts and 255 rails (one 10.<rail>.0.0/16 per rail)")
        for name in ("host_speed_gbps", "uplink_speed_gbps"):
            if getattr(self, name) not in SPEEDS_GBPS:
                raise SimError(f"FabricSpec.{name} must be one of {SPEEDS_GBPS}, got {getattr(self, name)}")
        if self.leaves_per_rail is not None:
            if not self.rail_optimized:
                raise SimError("leaves_per_rail applies to rail-optimized fabrics only")
            if not 1 <= self.leaves_per_rail <= self.hosts:
                raise SimError(f"leaves_per_rail must be in 1..hosts, got {self.leaves_per_rail}")
        if not self.rail_optimized and self.rails > self.host_ports_per_leaf:
            raise SimError("a shared leaf must have room for all NICs of one host")
        if self.hosts_per_leaf > self.host_ports_per_leaf:
            raise SimError(
                f"{self.hosts_per_leaf} hosts per leaf exceed its {self.host_ports_per_leaf} host ports; "
                "raise leaves_per_rail or leave it unset"
            )

    @property
    def rail_leaves(self) -> int:
        """Leaves per rail (rail-optimized), or 0 for a shared-leaf fabric."""
        if not self.rail_optimized:
            return 0
        if self.leaves_per_rail is not None:
            return self.leaves_per_rail
        return math.ceil(self.hosts / self.host_ports_per_leaf)

    @property
    def leaf_count(self) -> int:
        if self.rail_optimized:
            return self.rails * self.rail_leaves
        return math.ceil(self.hosts / (self.host_ports_per_leaf // self.rails))

    @property
    def hosts_per_leaf(self) -> int:
        """Hosts cabled to one leaf; hosts are spread evenly, consecutive hosts on the same leaf."""
        groups = self.rail_leaves if self.rail_optimized else self.leaf_count
        return math.ceil(self.hosts / groups)


@dataclass(frozen=True)
class Device:
    """A switch or a host. `index` is the number in its name; `rail` is -1 unless a rail leaf."""

    name: str
    role: Role
    index: int
    rail: int = -1


@dataclass(frozen=True)
class Port:
    """One end of a cable. `id` is dense (0..n-1) so per-port state can live in numpy arrays."""

    id: int
    device: str
    name: str
    kind: PortKind
    speed_gbps: int
    peer_device: str
    peer_port: str

    @property
    def speed_bps(self) -> int:
        return self.speed_gbps * 1_000_000_000


@dataclass(frozen=True)
class Nic:
    """A host NIC on one rail: its names, addresses and the leaf port it is cabled to."""

    host: str
    rail: int
    rdma_dev: str
    netdev: str
    ip: str
    mac: str
    gid: str
    leaf: str
    leaf_port: str


class Link(NamedTuple):
    """One direction of an adjacency, as LLDP on `device` reports it."""

    device: str
    port: str
    peer_device: str
    peer_port: str


def host_name(number: int) -> str:
    """The n-th host of a fabric (1-based), as every simulated fabric names it."""
    return f"gpu-{number:03d}"


def switch_port_name(number: int) -> str:
    """SONiC name of front-panel port `number` (0-based): Ethernet0, Ethernet4, ..."""
    return f"Ethernet{number * PORT_STEP}"


class Topology:
    """Devices, ports, NICs and cabling of one fabric, with the lookups the simulator needs."""

    def __init__(self, spec: FabricSpec | None = None) -> None:
        self.spec = spec or FabricSpec()
        s = self.spec
        self.spines: tuple[Device, ...] = tuple(Device(f"spine-{i + 1:02d}", "spine", i + 1) for i in range(s.spines))
        if s.rail_optimized:
            self.leaves: tuple[Device, ...] = tuple(
                Device(f"leaf-r{r}-{i + 1:02d}", "leaf", i + 1, r) for r in range(s.rails) for i in range(s.rail_leaves)
            )
        else:
            self.leaves = tuple(Device(f"leaf-{i + 1:02d}", "leaf", i + 1) for i in range(s.leaf_count))
        self.hosts: tuple[Device, ...] = tuple(Device(host_name(n), "host", n) for n in range(1, s.hosts + 1))
        self._devices = {d.name: d for d in (*self.spines, *self.leaves, *self.hosts)}

        # (device, port number, kind, peer device, peer port number, speed): both ends of every cable
        ends: list[tuple[str, int, PortKind, str, int, int]] = []

        def cable(a: str, a_num: int, a_kind: PortKind, b: str, b_num: int, b_kind: PortKind, gbps: int) -> None:
            ends.append((a, a_num, a_kind, b, b_num, gbps))
            ends.append((b, b_num, b_kind, a, a_num, gbps))

        nics: list[Nic] = []
        for h, host in enumerate(self.hosts):
            for r in range(s.rails):
                leaf, slot = self._leaf_slot(h, r)
                cable(host.name, r, "nic", leaf.name, slot, "down", s.host_speed_gbps)
                ip = f"10.{r}.{host.index >> 8}.{host.index & 0xFF}"
                mac = f"{_NIC_OUI}:{r:02x}:{host.index >> 8:02x}:{host.index & 0xFF:02x}"
                port = switch_port_name(slot)
                nics.append(Nic(host.name, r, f"mlx5_{r}", f"eth{r}", ip, mac, gid_from_ipv4(ip), leaf.name, port))
        per_spine = s.uplinks_per_spine
        for li, leaf in enumerate(self.leaves):
            for u in range(per_spine):
                for si, spine in enumerate(self.spines):
                    j = u * s.spines + si  # round-robin over spines: the leaf's j-th uplink
                    leaf_num, spine_num = s.host_ports_per_leaf + j, li * per_spine + u
                    cable(leaf.name, leaf_num, "up", spine.name, spine_num, "down", s.uplink_speed_gbps)

        order = {name: i for i, name in enumerate(self._devices)}
        ends.sort(key=lambda e: (order[e[0]], e[1]))

        def pname(device: str, number: int) -> str:
            return f"eth{number}" if self._devices[device].role == "host" else switch_port_name(number)

        self.ports: tuple[Port, ...] = tuple(
            Port(i, dev, pname(dev, num), kind, gbps, peer, pname(peer, peer_num))
            for i, (dev, num, kind, peer, peer_num, gbps) in enumerate(ends)
        )
        self._ports = {(p.device, p.name): p for p in self.ports}
        self._by_device: dict[str, list[Port]] = {name: [] for name in self._devices}
        for p in self.ports:
            self._by_device[p.device].append(p)
        self.nics: tuple[Nic, ...] = tuple(nics)
        self._nics = {(n.host, n.rail): n for n in nics}
        self._nics_by_ip = {n.ip: n for n in nics}
        #: Per port id: the id of the port at the other end of the cable.
        self.peer_ids: npt.NDArray[np.int64] = np.array(
            [self._ports[(p.peer_device, p.peer_port)].id for p in self.ports], dtype=np.int64
        )
        #: Per port id: line rate in bits per second.
        self.speed_bps: npt.NDArray[np.float64] = np.array([p.speed_bps for p in self.ports], dtype=np.float64)

    def _leaf_slot(self, h: int, rail: int) -> tuple[Device, int]:
        """The leaf a host's NIC on `rail` is cabled to, and the leaf's port number for it."""
        per = self.spec.hosts_per_leaf
        if self.spec.rail_optimized:
            return self.leaves[rail * self.spec.rail_leaves + h // per], h % per
        return self.leaves[h // per], (h % per) * self.spec.rails + rail

    # --- lookups

    @property
    def devices(self) -> tuple[Device, ...]:
        """All devices: spines, then leaves, then hosts (the order port ids follow)."""
        return tuple(self._devices.values())

    @property
    def switches(self) -> tuple[Device, ...]:
        return (*self.spines, *self.leaves)

    def device(self, name: str) -> Device:
        try:
            return self._devices[name]
        except KeyError:
            raise KeyError(f"no device {name!r} in this fabric") from None

    def port(self, device: str, name: str) -> Port:
        try:
            return self._ports[(device, name)]
        except KeyError:
            raise KeyError(f"no port {device}:{name} in this fabric") from None

    def ports_of(self, device: str) -> tuple[Port, ...]:
        """A device's ports in front-panel order."""
        self.device(device)
        return tuple(self._by_device[device])

    def peer(self, port: Port) -> Port:
        """The port at the other end of the cable."""
        return self.ports[int(self.peer_ids[port.id])]

    def leaves_of_rail(self, rail: int) -> tuple[Device, ...]:
        """The leaves of one rail, in order (empty for a shared-leaf fabric)."""
        return tuple(leaf for leaf in self.leaves if leaf.rail == rail)

    def nic(self, host: str, rail: int) -> Nic:
        try:
            return self._nics[(host, rail)]
        except KeyError:
            raise KeyError(f"no NIC on rail {rail} of {host!r}") from None

    def nics_of(self, host: str) -> tuple[Nic, ...]:
        """A host's NICs by rail."""
        return tuple(self.nic(host, r) for r in range(self.spec.rails))

    def nic_by_ip(self, ip: str) -> Nic:
        try:
            return self._nics_by_ip[ip]
        except KeyError:
            raise KeyError(f"no NIC has address {ip}") from None

    def attachment(self, host: str, rail: int) -> Port:
        """The leaf port a host's NIC on `rail` is cabled to."""
        nic = self.nic(host, rail)
        return self._ports[(nic.leaf, nic.leaf_port)]

    def uplinks(self, leaf: str) -> tuple[Port, ...]:
        """A leaf's uplinks in port order: the members of its ECMP group towards the spines."""
        if self.device(leaf).role != "leaf":
            raise KeyError(f"{leaf!r} is not a leaf")
        return tuple(p for p in self._by_device[leaf] if p.kind == "up")

    def downlinks(self, switch: str, to: str | None = None) -> tuple[Port, ...]:
        """A switch's ports towards the tier below, or only those facing device `to`."""
        self.device(switch)
        return tuple(p for p in self._by_device[switch] if p.kind == "down" and (to is None or p.peer_device == to))

    # --- export

    def links(self) -> list[Link]:
        """Every adjacency in both directions, as LLDP on each side would report it."""
        return [Link(p.device, p.name, p.peer_device, p.peer_port) for p in self.ports]

    def links_arrow(self, seen_at: dt.datetime | None = None, source: str = "sim") -> pa.Table:
        """The `links` stream (rocescope.schema) for this fabric, conformed: ready to insert or batch."""
        when = seen_at or dt.datetime.now(dt.UTC)
        n = len(self.ports)
        table = pa.table(
            {
                "device": [p.device for p in self.ports],
                "port": [p.name for p in self.ports],
                "peer_device": [p.peer_device for p in self.ports],
                "peer_port": [p.peer_port for p in self.ports],
                "source": [source] * n,
                "seen_at": pa.array([when] * n, pa.timestamp("ns", tz="UTC")),
            }
        )
        return pa.Table.from_batches([conform("links", table)])

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"Topology({s.hosts} hosts x {s.rails} rails, {len(self.leaves)} leaves, {len(self.spines)} spines, "
            f"{len(self.ports)} ports)"
        )
