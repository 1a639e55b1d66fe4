"""One device, one name: what LLDP and Kubernetes call a device that reports counters under another name.

A switch's gNMI target and a host's collector name it by its short hostname (`leaf-01`, `gpu-001`), while
LLDP's system name and a Kubernetes node name are often the FQDN (`leaf-01.dc1.example.com`: EOS appends
its `ip domain-name`, lldpd advertises the resolvable FQDN) or another case (`LEAF-01`); the reverse
happens too. Names are compared by their first DNS label, case-insensitively; a name maps to the one
counters device with that label, and is left alone when none or several have it, or when it is an address.

Some names share nothing: a gnmic `source` given as an address (`10.0.0.1:57400`), a containerlab node
(`clab-fabric-leaf1`) that LLDP calls `leaf1`. Such an LLDP peer is the counters device on the other end of
the same cables (`cabled_peers`): the one whose own LLDP says its port faces the same neighbor port, or whose
port's traffic is that neighbor port's (`links.spelled_far_ends`).
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence

import polars as pl

__all__ = ["NON_FABRIC_PORT", "cabled_peers", "is_aggregate", "is_fabric_port", "renamed", "same_devices"]

Port = tuple[str, str]

#: Link aggregates as their vendors name them (sub-interfaces `.100` too): EOS and NX-OS `Port-Channel1` (`Po1`),
#: SONiC `PortChannel0001`, Junos `ae0`, SR Linux `lag1`, IOS-XR `Bundle-Ether1`, Linux and Cumulus `bond0`,
#: `team0`. A switch's aggregate counts again what its member ports count (IF-MIB and OpenConfig report both), and
#: has no optics, no queues and no LLDP of its own; a host's bond carries the RDMA device of a RoCE LAG
#: (`mlx5_bond_0`) over its member ports. RE2 syntax too (ClickHouse's `match`).
_AGGREGATES = r"(port-?channel|po|ae|lag|bundle-ether|bond|team)\d+(\.\d+)?"
_AGGREGATE = re.compile(rf"(?i)^{_AGGREGATES}$")


#: A switch's interfaces that are no cable of the fabric, which IF-MIB and OpenConfig list with counters beside
#: the front-panel ports (a real EOS `show interfaces`: Ethernet1, Ethernet49/1, Loopback0, Management1,
#: Port-Channel1, Vlan10): management (EOS `Management1`, NX-OS and SR Linux `mgmt0`, Dell OS10 `mgmt1/1/1`, IOS-XR
#: `MgmtEth0/RP0/CPU0/0`, Junos `em0` `fxp0` `me0` `vme`, SONiC's and Cumulus' `eth0`), loopbacks (`Loopback0`,
#: `lo`, `lo0`), VLAN and routed interfaces (`Vlan10`, `vlan10`, `irb0.1`, SR Linux `system0`), overlays (`Vxlan1`,
#: NX-OS `nve1`, `Tunnel1`), bridges, the CPU, and link aggregates (`_AGGREGATES`). Taken for uplinks, an idle
#: Loopback0 beside two busy uplinks made each of them "imbalanced"; their LLDP (a management switch that sees
#: every leaf's Management1) made a spine. Front-panel names never look like these (FBOSS `eth1/1/1` has slashes).
NON_FABRIC_PORT = (
    rf"(?i)^({_AGGREGATES}|management\d+(/\d+)*|mgmt\S*|mgmteth\S*"
    r"|em\d+|fxp\d+|me\d+|vme\d*|eth\d+|loopback\d+|lo\d*|vlan\d+(\.\d+)?|irb\d*(\.\d+)?|system\d+(\.\d+)?"
    r"|vxlan\d*|nve\d+|tunnel\d+|bridge\d*|br\d+|docker\d*|cpu\d*|null\d+)$"
)
_NON_FABRIC = re.compile(NON_FABRIC_PORT)


def is_aggregate(port: str) -> bool:
    """Whether `port` names a link aggregate (`_AGGREGATES`), not a physical port."""
    return _AGGREGATE.match(port.strip()) is not None


def is_fabric_port(port: str) -> bool:
    """Whether a switch's `port` may be a cable of the fabric (`NON_FABRIC_PORT`: not management, loopback, VLAN,
    overlay or aggregate)."""
    return _NON_FABRIC.match(port.strip()) is None


def _label(name: str) -> str | None:
    text = name.strip().lower()
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return text.split(".", 1)[0] or None
    return None


def same_devices(known: Iterable[str], names: Iterable[str]) -> dict[str, str]:
    """name -> the `known` device it stands for, for each of `names` that is not known itself."""
    by_label: dict[str, list[str]] = {}
    known = set(known)
    for device in known:
        label = _label(device)
        if label is not None:
            by_label.setdefault(label, []).append(device)
    out = {}
    for name in set(names) - known:
        label = _label(name)
        hits = by_label.get(label, []) if label is not None else []
        if len(hits) == 1:
            out[name] = hits[0]
    return out


def renamed(frame: pl.DataFrame, columns: Sequence[str], mapping: Mapping[str, str]) -> pl.DataFrame:
    """`frame` with the names in `columns` that `mapping` knows replaced."""
    if not mapping or frame.is_empty():
        return frame
    return frame.with_columns(pl.col(c).replace(dict(mapping)) for c in columns)


def cabled_peers(links: pl.DataFrame, counted: Collection[str], traffic: Mapping[Port, Port]) -> dict[str, str]:
    """LLDP names that no counters device carries (as a neighbor, or as the reporting device) -> the counters
    device that bears the name.

    Each LLDP row is a cable with one end on such a name and the other, `near`, on a counters device; it votes
    for the device at the far end of `near`'s cable: the counters device whose own LLDP row says its port
    faces `near`, else the one `traffic` (port -> the port its cable's far end is, by what the cable carries)
    pairs `near` with. A name takes the device that at least two thirds of its votes name, and that no other
    name takes; otherwise it is left alone (an unresolved name is a gap, a wrong one would be a false cable).
    Names found let more be found (a spine's LLDP names the leaf by the name its hosts use), so the votes are
    counted again until nothing changes."""
    counted = set(counted)
    rows = list(links.select("device", "port", "peer_device", "peer_port").iter_rows())
    found: dict[str, str] = {}
    for _ in range(len(rows)):
        named = [(found.get(d, d), p, found.get(peer, peer), x) for d, p, peer, x in rows]
        facing = {(peer, x): d for d, _, peer, x in named if d in counted and peer}
        votes: dict[str, Counter[str]] = defaultdict(Counter)
        for d, p, peer, x in named:
            if d in counted and peer and peer not in counted:
                name, near = peer, (d, p)
            elif peer in counted and d and d not in counted:
                name, near = d, (peer, x)
            else:
                continue
            far = facing.get(near) or traffic.get(near, ("", ""))[0]
            if far and far != near[0] and far not in found.values():
                votes[name][far] += 1
        chosen = {}
        for name, tally in votes.items():
            (device, n), *_ = tally.most_common(1)
            if 3 * n >= 2 * sum(tally.values()):
                chosen[name] = device
        taken = Counter(chosen.values())
        more = {name: d for name, d in chosen.items() if taken[d] == 1}
        if not more:
            break
        found |= more
    return found
