"""The fabric as the analysis sees it: who faces whom (LLDP `links`, from either side), which tier a switch is
in, and which training job runs behind which port (`endpoints`).

Real gear names ports its own way and LLDP is often one-sided, so:

* port names are compared in a canonical form (`canonical_port`): case, `Ethernet1/1` = `Et1/1` =
  `ethernet-1/1`; a SONiC switch advertises its port *alias* (`etp1`) as its LLDP port id, which is mapped
  to the counters' name (`Ethernet0`) through the switch's alias map where one was collected (CONFIG_DB
  `PORT|Ethernet0 alias`, landed as `links` rows of source `alias`), else as the N-th port of the switch
  in port order (the numbering of NVIDIA platforms' `etpN`; other platforms count from 0 or name aliases
  otherwise, so collect the map); never on a switch with breakouts (`etp1a`, `etp1b` are two ports, and
  shift every port after them), whose aliases only the map resolves (else the cables are found by traffic);
* an adjacency seen from either side is known from both (host-side `lldpcli` alone is enough), and cables
  no LLDP names are recognised from the bytes they carry (`links.py`: what one end sends, the other
  receives, minute by minute);
* tiers come from the graph, never from device names: hosts are devices with NIC or host counters or job
  placements; a device with no counters that LLDP names is a switch when a host names it or switches sit behind
  two or more of its ports, else an endpoint nobody monitors (a storage array), host-like; leaves are switches
  with a host neighbour; spines are the other switches. On a leaf, a port
  that faces a host is a downlink, one that faces a switch an uplink; with LLDP from the hosts only, the
  leaf's other ports (those with traffic counters) are its uplinks.

Job attribution without flow paths (which no collector sees) follows what the fabric allows:
* a host NIC port, or the leaf port facing it: the jobs placed on that NIC;
* a leaf uplink, or the spine port facing that leaf: the jobs with a NIC under the leaf AND a NIC
  under another leaf, since only their traffic may leave the leaf (rail-local jobs never do): `possible`;
  where a job's RDMA connections are known (`qp_owners`: eBPF or `rdma resource show qp`), those whose two ends
  sit under different leaves are seen to leave both (`observed`, `observe_paths`), rails crossed over the fabric
  too. Connections seen to stay under a leaf rule nothing out: a routing loop or a failover carries a leaf's own
  traffic over the spines, and that is where PFC deadlocks come from.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from rocescope.analysis.frames import Frames
from rocescope.analysis.names import cabled_peers, is_aggregate, is_fabric_port, renamed

log = logging.getLogger(__name__)

PortKind = Literal["host", "downlink", "uplink", "spine", "unknown"]

#: RDMA device names (a counter port `mlx5_3/1` is RDMA port 1 of mlx5_3); switch ports never look like these.
_RDMA_PORT = re.compile(
    r"^(?P<dev>mlx\d+_(?:bond_)?\d+|bnxt_re\d+|irdma\d+|rxe\w+|siw\w+|qedr\d+|hns_?\d+|efa_\d+|erdma_\d+|ionic_\d+|roce[po]\w+)"
    r"/\d+$"
)
_ALIAS = re.compile(r"^etp(\d+)$")  # SONiC port aliases: etp1
_BREAKOUT_ALIAS = re.compile(r"^etp\d+[a-z]$")  # a breakout's lanes: etp1a, etp1b are two ports
_ABBREVIATED = re.compile(r"^(eth|et|e)(?=\d)")  # Arista `Et1/1`; never a host's `eth0` (hosts keep theirs)
_SEPARATOR = re.compile(r"(?<=[a-z])[-_ ](?=\d)")  # SR Linux `ethernet-1/1`


def split_ref(ref: str) -> tuple[str, str]:
    """`device:port` into its parts (ports may contain '/' but never ':')."""
    device, _, port = ref.partition(":")
    return device, port


def netdev_of(port: str) -> str:
    """The interface a counter port belongs to: RDMA counters come as `mlx5_3/1` (RDMA device / port), every
    other port (switch ports such as `Ethernet1/1` included) is its own interface."""
    m = _RDMA_PORT.match(port)
    return m.group("dev") if m else port


def canonical_port(name: str, switch: bool = True) -> str:
    """The form port names are compared in: lower case, SR Linux and Arista spellings made one."""
    s = name.strip().lower()
    if switch:
        s = _ABBREVIATED.sub("ethernet", s)
    return _SEPARATOR.sub("", s)


def port_order(name: str) -> tuple[tuple[int, int | str], ...]:
    """Natural order of port names (`Ethernet8` before `Ethernet64`, `swp2` before `swp10`)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", name.lower()) if p)


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
    #: devices LLDP names that send no counters and are no switch (`_silent`): a storage array, an unmonitored host;
    #: counted among the hosts (the ports facing them are downlinks)
    endpoints: set[str] = field(default_factory=set)
    placements: list[Placement] = field(default_factory=list)
    #: device -> the port names its counters use (to resolve LLDP's spellings and aliases)
    counter_ports: dict[str, set[str]] = field(default_factory=dict)
    #: (switch, alias in lower case) -> port, where a switch's alias map was collected (SONiC CONFIG_DB PORT)
    aliases: dict[tuple[str, str], str] = field(default_factory=dict)
    #: switches whose LLDP port aliases name breakouts (`etp1a`): no alias of theirs is the N-th port
    broken_out: set[str] = field(default_factory=set)
    #: (host, RDMA device) -> netdev, as the NIC collector's inventory reports it (placements name them too)
    rdma_inventory: dict[tuple[str, str], str] = field(default_factory=dict)
    #: job -> the leaves its RDMA connections were seen to leave (`observe_paths`)
    crossed: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def from_frames(cls, frames: Frames) -> Fabric:
        from rocescope.analysis.links import infer_links

        links, endpoints, roles, ports, aliases, rdma = (
            frames.links(), frames.endpoints(), frames.roles(), frames.ports(), frames.port_aliases(),
            frames.rdma_netdevs(),
        )  # fmt: skip
        fab = cls.build(links, endpoints, roles, ports, aliases, rdma_netdevs=rdma)
        links, found = fab._found_names(frames, links, set(roles["device"].to_list()))
        if found:
            fab = cls.build(links, endpoints, roles, ports, aliases, rdma_netdevs=rdma)
        known = set(fab.peers) | set(fab._leaves_of_nic)
        inferred = infer_links(frames, known, fab.switches, fab.leaves)
        if not inferred.is_empty():
            fab = cls.build(links, endpoints, roles, ports, aliases, inferred, rdma_netdevs=rdma)
        fab.observe_paths(frames.qp_peers(), endpoints)
        return fab

    def observe_paths(self, qps: pl.DataFrame, endpoints: pl.DataFrame) -> None:
        """Which leaves each job's RDMA connections leave (`crossed`): a connection (QP_PEERS_SCHEMA: host,
        rdma_dev, dest_ip, job_id) from a NIC under one set of leaves to an address (ENDPOINTS_SCHEMA's `ip`) whose
        NIC is under none of them crosses the spines from both; one under a shared leaf stays there. The job is
        the connection's own (eBPF names it) or the one placed on its NIC. Connections with an end the fabric
        cannot place say nothing."""
        nic_of_ip = {ip: (h, n) for h, n, ip in endpoints.select("host", "netdev", "ip").iter_rows() if ip}
        placed = {p.job_id for p in self.placements}
        for host, rdma, ip, job in qps.select("host", "rdma_dev", "dest_ip", "job_id").iter_rows():
            far = nic_of_ip.get(ip)
            near = self.leaves_of(host, f"{rdma}/1")
            there = self.leaves_of(*far) if far else set()
            if not near or not there:
                continue
            jobs = {job} & placed or {p.job_id for p in self._by_nic.get((host, rdma), ())}
            for j in jobs:
                self.crossed.setdefault(j, set()).update(() if near & there else near | there)

    def _found_names(
        self, frames: Frames, links: pl.DataFrame, counted: set[str]
    ) -> tuple[pl.DataFrame, dict[str, str]]:
        """`links` with the names no counters device carries replaced by the devices at their cables' far ends
        (`names.cabled_peers`; the candidates: counted switches no LLDP row names), round after round (a leaf
        found lets its LLDP towards spines named otherwise be followed), and what was found."""
        from rocescope.analysis.links import spelled_far_ends

        unknown = {n for d, _, peer, _ in links.iter_rows() for n in (d, peer) if n and n not in counted}
        found: dict[str, str] = {}
        for _ in range(len(unknown)):
            faced = {}  # LLDP's port facing a name no counters carry -> (its counters name, that neighbor's port)
            for d, p, peer, x in links.iter_rows():
                if d in counted and peer and peer not in counted:
                    faced[(d, p)] = ((d, self._name(d, p)), x)
                elif peer in counted and d not in counted:
                    faced[(peer, x)] = ((peer, self._name(peer, x)), p)
            if not faced:
                break
            named = set(links["device"].to_list()) | set(links["peer_device"].to_list())
            far = spelled_far_ends(frames, dict(faced.values()), (self.switches & counted) - named, self._name)
            names = cabled_peers(links, counted, {lldp: far[at] for lldp, (at, _) in faced.items() if at in far})
            if not names:
                break
            found |= names
            links = renamed(links, ("device", "peer_device"), names)
        if unknown:  # unmonitored neighbors stay unknown every run: a line only when a name was found
            level = logging.INFO if found else logging.DEBUG
            log.log(level, "LLDP names no counters device carries: %d; found at their cables' ends: %s", len(unknown),
                    found)  # fmt: skip
        return links, found

    @classmethod
    def build(
        cls,
        links: pl.DataFrame,
        endpoints: pl.DataFrame,
        roles: pl.DataFrame,
        ports: pl.DataFrame | None = None,
        aliases: pl.DataFrame | None = None,
        inferred: pl.DataFrame | None = None,
        rdma_netdevs: pl.DataFrame | None = None,
    ) -> Fabric:
        """`inferred`: cables recognised from traffic (`links.py`), in the links' shape; `rdma_netdevs`: the NIC
        inventory's RDMA port -> netdev (`Frames.rdma_netdevs`)."""
        fab = cls()
        if rdma_netdevs is not None:
            fab.rdma_inventory = {
                (d, netdev_of(rdma_port)): netdev
                for d, rdma_port, netdev in rdma_netdevs.select("device", "alias", "port").iter_rows()
            }
        if aliases is not None:
            fab.aliases = {(d, a.lower()): p for d, a, p in aliases.select("device", "alias", "port").iter_rows()}
        for d, role in roles.iter_rows():
            (fab.switches if role == "switch" else fab.hosts).add(d)
        fab.hosts.update(endpoints["host"].to_list())
        cols = ("job_id", "host", "netdev", "rdma_dev", "valid_from", "valid_to")
        fab.placements = [Placement(*row) for row in endpoints.select(cols).iter_rows()]
        if ports is not None:
            for d, p in ports.select("device", "port").iter_rows():
                fab.counter_ports.setdefault(d, set()).add(p)
        # LLDP a switch speaks on an interface that is no cable of the fabric (its Management1 to the management
        # network's switch, which would become a "spine" seeing every leaf) is no adjacency of the fabric
        rows = [
            (d, p, pd_, pp)
            for d, p, pd_, pp in links.select("device", "port", "peer_device", "peer_port").iter_rows()
            if pd_ and not any(x in fab.switches and not is_fabric_port(y) for x, y in ((d, p), (pd_, pp)))
        ]
        lldp_rows = len(rows)
        if inferred is not None:
            rows += list(inferred.select("device", "port", "peer_device", "peer_port").iter_rows())
        fab.broken_out = {
            device
            for d, p, pd_, pp in rows
            for device, port in ((d, p), (pd_, pp))
            if _BREAKOUT_ALIAS.match(port.lower())
        }
        fab._silent(rows[:lldp_rows])
        for d, _, pd_, _ in rows[lldp_rows:]:  # cables recognised from traffic join devices with counters
            fab.switches.update(x for x in (d, pd_) if x not in fab.hosts and x not in fab.endpoints)
        fab.switches -= fab.hosts
        switch_lldp: set[str] = set()
        ends = [((d, fab._name(d, p)), (pd_, fab._name(pd_, pp))) for d, p, pd_, pp in rows]
        # a row whose far port is none the far switch counts (a name no alias resolves) never overrides what the
        # far end's own row says: those rows go last, and fill only what no other row gave
        named = {k for k, (_, (fd, fp)) in enumerate(ends) if fp in fab.counter_ports.get(fd, (fp,))}
        for k in sorted(range(len(ends)), key=lambda k: k not in named):
            near, far = ends[k]
            if k in named:
                fab.peers[near] = far
            else:
                fab.peers.setdefault(near, far)
            fab.peers.setdefault(far, near)  # one-sided LLDP: the other side is known too
            if k < lldp_rows and near[0] in fab.switches and far[0] in fab.switches:
                switch_lldp.update((near[0], far[0]))
        fab._index(switch_lldp)
        return fab

    def _silent(self, rows: Sequence[tuple[str, str, str, str]]) -> None:
        """Devices LLDP names that send no counters: a switch when a host names it (hosts hang off switches: a
        leaf nobody polls) or switches sit behind two or more of its ports (a spine nobody polls), else an
        endpoint nobody monitors (a storage array), host-like: never a spine because a switch's LLDP names it
        (capabilities cannot tell: hosts with IP forwarding advertise Router)."""
        known = self.switches | self.hosts
        behind: dict[str, set[str]] = defaultdict(set)
        under_host: set[str] = set()
        for d, p, pd_, pp in rows:
            for me, port, other in ((d, p, pd_), (pd_, pp, d)):
                if me in known or other not in known:
                    continue
                if other in self.hosts:
                    under_host.add(me)
                else:
                    behind[me].add(port)
        self.switches |= under_host
        for device, ports in behind.items():
            if device not in under_host:
                (self.switches if len(ports) >= 2 else self.endpoints).add(device)
        self.hosts |= self.endpoints

    def _name(self, device: str, port: str) -> str:
        """A port as `device`'s counters name it (LLDP may spell it another way, or give a SONiC alias)."""
        if device in self.hosts:
            return netdev_of(port)
        mapped = self.aliases.get((device, port.strip().lower()))
        if mapped is not None:
            return mapped
        known = self.counter_ports.get(device)
        if not known:
            return port
        if port in known:
            return port
        by_form = {canonical_port(k): k for k in known}
        hit = by_form.get(canonical_port(port))
        if hit is not None:
            return hit
        alias = _ALIAS.match(port.strip().lower())
        if alias is not None and device not in self.broken_out:
            ordered = sorted(known, key=port_order)
            n = int(alias.group(1))
            if 1 <= n <= len(ordered):
                return ordered[n - 1]
        return port

    def _index(self, switch_lldp: set[str]) -> None:
        self._canonical = {(d, canonical_port(p, d not in self.hosts)): (d, p) for d, p in self.peers}
        self.leaves = {d for (d, _), (pd_, _) in self.peers.items() if d in self.switches and pd_ in self.hosts}
        self.spines = self.switches - self.leaves
        #: a 3-tier fabric's top: switches cabled to spines and to no leaf (among `spines`, whose ports keep kind
        #: "spine"); a spine with no known cable at all stays a spine
        faced: dict[str, set[str]] = defaultdict(set)
        for (d, _), (pd_, _) in self.peers.items():
            faced[d].add(pd_)
        self.super_spines = {s for s in self.spines if faced[s] and faced[s] <= self.spines}
        self._by_nic: dict[tuple[str, str], list[Placement]] = defaultdict(list)
        for pl_ in self.placements:
            self._by_nic[(pl_.host, pl_.netdev)].append(pl_)
            self._by_nic[(pl_.host, pl_.rdma_dev)].append(pl_)
        self._leaves_of_nic: dict[tuple[str, str], set[str]] = defaultdict(set)
        for (d, _), (pd_, pp) in self.peers.items():
            if d in self.leaves and pd_ in self.hosts:
                self._leaves_of_nic[(pd_, pp)].add(d)
        self._bonds()
        placed = {(p.host, p.rdma_dev): p.netdev for p in self.placements if p.rdma_dev}
        self._netdev_of_rdma = {**self.rdma_inventory, **placed}
        #: leaves no LLDP links to a switch: their uplinks are the ports that face no host (traffic may have
        #: recognised some of their cables, not all: an idle or a damaged cable conserves nothing to match)
        self._blind_leaves = self.leaves - switch_lldp

    # --- topology

    def iface(self, device: str, port: str) -> str:
        """The interface a counter port stands for: a host's RDMA port as its netdev where a placement or the NIC
        inventory names it."""
        if device in self.hosts:
            dev = netdev_of(port)
            return self._netdev_of_rdma.get((device, dev), dev)
        return port

    def peer(self, device: str, port: str) -> tuple[str, str] | None:
        key = (device, self.iface(device, port))
        hit = self.peers.get(key)
        if hit is None:
            known = self._canonical.get((device, canonical_port(key[1], device not in self.hosts)))
            hit = self.peers.get(known) if known is not None else None
        return hit

    def port_kind(self, device: str, port: str) -> PortKind:
        if device in self.hosts:
            return "host"
        peer = self.peer(device, port)
        if device in self.leaves:
            if peer is not None:
                return "downlink" if peer[0] in self.hosts else "uplink"
            if device in self._blind_leaves and port in self.counter_ports.get(device, ()):
                return "uplink"
            return "unknown"
        if device in self.spines:
            return "spine"
        return "unknown"

    def _bonds(self) -> None:
        """A placement on a host's link aggregate (a RoCE LAG: netdev `bond0`, RDMA device `mlx5_bond_0`) runs over
        its members, which are what LLDP sees: the host's ports cabled to leaves that no placement names itself
        (Linux keeps the membership in `/sys/class/net/bond0/bonding/slaves`, which nothing collects). Its jobs
        are the members' jobs, and its leaves their leaves (two, for a NIC dual-homed to two ToRs)."""
        named = {(p.host, p.netdev) for p in self.placements if not is_aggregate(p.netdev)}
        for p in self.placements:
            if not is_aggregate(p.netdev):
                continue
            members = [
                nic for nic in self._leaves_of_nic if nic[0] == p.host and nic not in named and not is_aggregate(nic[1])
            ]
            for member in members:
                self._by_nic[member].append(p)
                self._leaves_of_nic[(p.host, p.netdev)] |= self._leaves_of_nic[member]

    def leaves_of(self, host: str, netdev: str) -> set[str]:
        """The leaves a host's NIC is cabled to (two where it is dual-homed)."""
        return self._leaves_of_nic.get((host, self.iface(host, netdev)), set())

    def leaf_of(self, host: str, netdev: str) -> str | None:
        """One leaf of the NIC (`leaves_of`), the first by name."""
        return min(self.leaves_of(host, netdev), default=None)

    def nic_behind(self, device: str, port: str) -> tuple[str, str] | None:
        """The (host, netdev) a host port or a leaf downlink stands for."""
        kind = self.port_kind(device, port)
        if kind == "host":
            return device, self.iface(device, port)
        if kind == "downlink":
            return self.peer(device, port)
        return None

    def ports_of(self, device: str) -> list[str]:
        """The device's ports known from LLDP or (for a leaf without switch-side LLDP) its counters."""
        ports = {p for d, p in self.peers if d == device}
        if device in self._blind_leaves:
            ports |= self.counter_ports.get(device, set())
        return sorted(ports, key=port_order)

    def uplinks(self, leaf: str) -> list[str]:
        """A leaf's ports towards the spines."""
        return [p for p in self.ports_of(leaf) if self.port_kind(leaf, p) == "uplink"]

    def parallel_links(self, device: str, towards: set[str]) -> dict[str, list[str]]:
        """Per neighbour among `towards`, the device's ports cabled to it (an ECMP group where two or more)."""
        out: dict[str, list[str]] = defaultdict(list)
        for port in self.ports_of(device):
            peer = self.peer(device, port)
            if peer is not None and peer[0] in towards:
                out[peer[0]].append(port)
        return dict(out)

    # --- jobs

    def jobs_on_nic(self, host: str, iface: str, start: dt.datetime, end: dt.datetime) -> set[str]:
        """Jobs placed on a NIC (netdev or RDMA device name) at some point of [start, end]."""
        places = self._by_nic.get((host, netdev_of(iface)), ()) or self._by_nic.get((host, iface), ())
        return {p.job_id for p in places if _overlaps(p, start, end)}

    def jobs_crossing_leaf(self, leaf: str, start: dt.datetime, end: dt.datetime) -> set[str]:
        """Jobs whose traffic can use the leaf's uplinks: a NIC of the job under `leaf` and a NIC of the same rail
        under another leaf. NCCL keeps each rail's traffic on that rail's NICs (ring and tree channels run per
        NIC; PXN moves data over NVLink to the GPU whose NIC is on the destination's rail), so on a rail-optimized
        fabric a job whose hosts sit under one leaf per rail never crosses a spine, however many rails it spans.
        A rail is a NIC name (`mlx5_0`, `eth2`) across hosts; placements naming no NIC are one rail, as are the
        NICs of a ToR-style fabric (each host under one leaf): there this is every job with NICs under two leaves.
        Jobs whose traffic crosses rails over the fabric (PXN off) are seen only by their connections (`crossed`)."""
        under: dict[tuple[str, str], set[str]] = defaultdict(set)  # (job, rail) -> leaves
        for p in self.placements:
            if _overlaps(p, start, end):
                under[(p.job_id, _rail(p))] |= self.leaves_of(p.host, p.netdev)
        possible = {job for (job, _), leaves in under.items() if leaf in leaves and len(leaves) > 1}
        placed = {job for job, _ in under}
        return possible | {job for job, leaves in self.crossed.items() if leaf in leaves and job in placed}

    def path_evidence(self, job: str, device: str, port: str) -> str:
        """How `job` is known to pass `device:port`: `placed` (on the NIC behind it), `observed` (its connections
        leave the leaf the port belongs to, `observe_paths`) or `possible` (only its placement allows it)."""
        if self.nic_behind(device, port) is not None:
            return "placed"
        peer = self.peer(device, port)
        leaf = peer[0] if self.port_kind(device, port) == "spine" and peer else device
        return "observed" if leaf in self.crossed.get(job, ()) else "possible"

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


def _rail(p: Placement) -> str:
    """The rail a placement's NIC is on, by the NIC's name (its RDMA device, else its netdev)."""
    return p.rdma_dev or p.netdev


def _overlaps(p: Placement, start: dt.datetime, end: dt.datetime) -> bool:
    return p.valid_from <= end and p.valid_to >= start


def with_ifaces(frame: pl.DataFrame, fabric: Fabric, port: str = "port", out: str = "iface") -> pl.DataFrame:
    """`frame` with column `out`: the interface each (device, port) counter row stands for (`Fabric.iface`)."""
    pairs = frame.select("device", port).unique()
    mapping = pl.DataFrame(
        [(d, p, fabric.iface(d, p)) for d, p in pairs.iter_rows()],
        schema={"device": pl.String, port: pl.String, out: pl.String},
        orient="row",
    )
    return frame.join(mapping, on=["device", port], how="left")
