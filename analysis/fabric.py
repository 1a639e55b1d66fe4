"""The fabric as the analysis sees it: who faces whom (LLDP `links`), which tier a switch is in, and
which training job runs behind which port (`endpoints`).

Tiers come from adjacency alone: a switch with a host neighbor is a leaf, any other switch a spine;
a port is a host port, a downlink (leaf to host), an uplink (leaf to spine) or a spine port.

Job attribution without flow paths (which no collector sees) follows what the fabric allows:
* a host NIC port, or the leaf port facing it: the jobs placed on that NIC;
* a leaf uplink, or the spine port facing that leaf: the jobs with a NIC under the leaf AND a NIC
  under another leaf, since only their traffic may leave the leaf (rail-local jobs never do).
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from rocescope.analysis.frames import Frames

PortKind = Literal["host", "downlink", "uplink", "spine", "unknown"]


def split_ref(ref: str) -> tuple[str, str]:
    """`device:port` into its parts (ports may contain '/' but never ':')."""
    device, _, port = ref.partition(":")
    return device, port


def netdev_of(port: str) -> str:
    """The interface a counter port belongs to: RDMA counters come as `mlx5_3/1`."""
    return port.split("/", 1)[0]


@dataclass(frozen=True)
class Placement:
    job_id: str
    host: str
    netdev: str
    rdma_dev: str
    valid_from: dt.datetime
    valid_to: dt.datetime


@dataclass
class Fabric:
    peers: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)
    switches: set[str] = field(default_factory=set)
    placements: list[Placement] = field(default_factory=list)

    @classmethod
    def from_frames(cls, frames: Frames) -> Fabric:
        return cls.build(frames.links(), frames.endpoints(), frames.roles())

    @classmethod
    def build(cls, links: pl.DataFrame, endpoints: pl.DataFrame, roles: pl.DataFrame) -> Fabric:
        fab = cls()
        for d, p, pd_, pp in links.select("device", "port", "peer_device", "peer_port").iter_rows():
            if pd_:
                fab.peers[(d, p)] = (pd_, pp)
        for d, role in roles.iter_rows():
            (fab.switches if role == "switch" else fab.hosts).add(d)
        fab.hosts.update(endpoints["host"].to_list())
        cols = ("job_id", "host", "netdev", "rdma_dev", "valid_from", "valid_to")
        fab.placements = [Placement(*row) for row in endpoints.select(cols).iter_rows()]
        fab._index()
        return fab

    def _index(self) -> None:
        # switches known only from links (no counters in the window) still count as switches
        for (d, _), (pd_, _) in self.peers.items():
            if d not in self.hosts:
                self.switches.add(d)
            if pd_ not in self.hosts:
                self.switches.add(pd_)
        self.switches -= self.hosts
        self.leaves = {d for (d, _), (pd_, _) in self.peers.items() if d in self.switches and pd_ in self.hosts}
        self.spines = self.switches - self.leaves
        self._by_nic: dict[tuple[str, str], list[Placement]] = defaultdict(list)
        for pl_ in self.placements:
            self._by_nic[(pl_.host, pl_.netdev)].append(pl_)
            self._by_nic[(pl_.host, pl_.rdma_dev)].append(pl_)
        self._leaf_of_nic = {
            (pd_, pp): d for (d, _), (pd_, pp) in self.peers.items() if d in self.leaves and pd_ in self.hosts
        }

    # --- topology

    def peer(self, device: str, port: str) -> tuple[str, str] | None:
        return self.peers.get((device, netdev_of(port)))

    def port_kind(self, device: str, port: str) -> PortKind:
        if device in self.hosts:
            return "host"
        peer = self.peer(device, port)
        if device in self.leaves:
            if peer is None:
                return "unknown"
            return "downlink" if peer[0] in self.hosts else "uplink"
        if device in self.spines:
            return "spine"
        return "unknown"

    def leaf_of(self, host: str, netdev: str) -> str | None:
        return self._leaf_of_nic.get((host, netdev_of(netdev)))

    def nic_behind(self, device: str, port: str) -> tuple[str, str] | None:
        """The (host, netdev) a host port or a leaf downlink stands for."""
        kind = self.port_kind(device, port)
        if kind == "host":
            return device, netdev_of(port)
        if kind == "downlink":
            return self.peer(device, port)
        return None

    def ports_of(self, device: str) -> list[str]:
        return sorted(p for d, p in self.peers if d == device)

    # --- jobs

    def jobs_on_nic(self, host: str, iface: str, start: dt.datetime, end: dt.datetime) -> set[str]:
        """Jobs placed on a NIC (netdev or RDMA device name) at some point of [start, end]."""
        return {p.job_id for p in self._by_nic.get((host, netdev_of(iface)), ()) if _overlaps(p, start, end)}

    def jobs_crossing_leaf(self, leaf: str, start: dt.datetime, end: dt.datetime) -> set[str]:
        """Jobs whose NICs sit under `leaf` and under some other leaf: their traffic uses the uplinks."""
        under: dict[str, set[str]] = defaultdict(set)
        for p in self.placements:
            lf = self.leaf_of(p.host, p.netdev)
            if lf is not None and _overlaps(p, start, end):
                under[p.job_id].add(lf)
        return {job for job, leaves in under.items() if leaf in leaves and len(leaves) > 1}

    def jobs_at(self, device: str, port: str, start: dt.datetime, end: dt.datetime) -> set[str]:
        """Jobs whose traffic can pass `device:port` (see the module docstring)."""
        nic = self.nic_behind(device, port)
        if nic is not None:
            return self.jobs_on_nic(*nic, start, end)
        kind = self.port_kind(device, port)
        if kind == "uplink":
            return self.jobs_crossing_leaf(device, start, end)
        if kind == "spine":
            peer = self.peer(device, port)
            return self.jobs_crossing_leaf(peer[0], start, end) if peer else set()
        return set()

    def jobs_at_refs(self, refs: Iterable[str], start: dt.datetime, end: dt.datetime) -> list[str]:
        """Jobs at any of the `device:port` refs, sorted."""
        out: set[str] = set()
        for ref in refs:
            out |= self.jobs_at(*split_ref(ref), start, end)
        return sorted(out)


def _overlaps(p: Placement, start: dt.datetime, end: dt.datetime) -> bool:
    return p.valid_from <= end and p.valid_to >= start
