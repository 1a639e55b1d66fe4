"""LLDP facade: a device's neighbors in the shape of `lldpcli show neighbors -f json` (lldpd 1.0).

lldpd's JSON keys objects by name: `{"lldp": {"interface": ...}}` where each interface is
`{ifname: {"via": "LLDP", "rid", "age", "chassis": {sysname: {...}}, "port": {...}}}`. As lldpd does
(its "pretty" JSON writer), a key seen once holds an object and a key seen several times holds a list
of single-key objects: one neighbor gives `"interface": {"eth0": {...}}`, several give
`"interface": [{"Ethernet0": {...}}, {"Ethernet4": {...}}]`. `neighbor_interfaces` undoes that.

The neighbor's chassis id is its MAC (a host's first NIC MAC; a switch's base MAC derived from its
name), its port id the interface name (`ifname` subtype, as `portidsubtype ifname` sets it). Under a
deployment profile (`names`, a `rocescope.sim.portnames.PortNames`) ports carry the switch OS's names, and
a SONiC switch advertises its port alias (`etp1`) with subtype `local`, as lldpmgrd configures lldpd
(`configure ports Ethernet0 lldp portidsubtype local etp1`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from rocescope.sim.portnames import PortNames
from rocescope.sim.topology import Device, Port, Topology

__all__ = ["chassis_mac", "lldp_neighbors_json", "neighbor_interfaces", "port_id"]

TTL_S = 120
_DESCR = {
    "host": "Ubuntu 22.04.4 LTS Linux 5.15.0-105-generic #115-Ubuntu SMP x86_64",
    "leaf": "SONiC Software Version: SONiC.202311 - HwSku: Mellanox-SN5600 - ASIC: mellanox",
    "spine": "SONiC Software Version: SONiC.202311 - HwSku: Mellanox-SN5600 - ASIC: mellanox",
}


def chassis_mac(topology: Topology, device: str) -> str:
    """The LLDP chassis id: a host's first NIC MAC, a switch's (stable, locally administered) base MAC."""
    d = topology.device(device)
    if d.role == "host":
        return topology.nics_of(device)[0].mac
    digest = hashlib.sha256(device.encode()).digest()
    return ":".join(f"{b:02x}" for b in (0x02, 0x1C, 0x73, *digest[:3]))


def _mgmt_ip(d: Device) -> str:
    third = {"host": 1, "leaf": 2, "spine": 3}[d.role]
    return f"192.168.{third}.{d.index}" if d.index < 255 else f"192.168.{third}.254"


def port_id(port: Port, names: PortNames | None) -> tuple[str, str]:
    """(subtype, value) of the LLDP port id the peer of `port` advertises: its name (`ifname`) or, where the
    profile says so, its alias (`local`)."""
    if names is None:
        return "ifname", port.peer_port
    advertised = names.lldp_id(port.peer_device, port.peer_port)
    local = names.local(port.peer_device, port.peer_port)
    return ("ifname" if advertised == local else "local"), advertised


def _neighbor(topology: Topology, port: Port, rid: int, names: PortNames | None = None) -> dict[str, Any]:
    peer = topology.device(port.peer_device)
    bridge = peer.role != "host"
    subtype, value = port_id(port, names)
    return {
        "via": "LLDP",
        "rid": str(rid),
        "age": "0 day, 00:10:00",
        "chassis": {
            peer.name: {
                "id": {"type": "mac", "value": chassis_mac(topology, peer.name)},
                "descr": _DESCR[peer.role],
                "mgmt-ip": _mgmt_ip(peer),
                "capability": [
                    {"type": "Bridge", "enabled": bridge},
                    {"type": "Router", "enabled": bridge},
                    {"type": "Wlan", "enabled": False},
                    {"type": "Station", "enabled": not bridge},
                ],
            }
        },
        "port": {
            "id": {"type": subtype, "value": value},
            "descr": value,
            "ttl": str(TTL_S),
            "auto-negotiation": {"supported": False, "enabled": False, "current": "Unknown"},
        },
    }


def lldp_neighbors_json(topology: Topology, device: str, names: PortNames | None = None) -> dict[str, Any]:
    """What `lldpcli show neighbors -f json` prints on `device`: one neighbor per cabled port."""
    rids: dict[str, int] = {}
    local = names.local if names is not None else (lambda _d, p: p)
    items = [
        {local(device, p.name): _neighbor(topology, p, rids.setdefault(p.peer_device, len(rids) + 1), names)}
        for p in topology.ports_of(device)
    ]
    if not items:
        return {"lldp": {}}
    return {"lldp": {"interface": items[0] if len(items) == 1 else items}}


def neighbor_interfaces(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(local interface, neighbor object) pairs from lldpcli's JSON, whether one neighbor or several."""
    interfaces = doc.get("lldp", {}).get("interface", [])
    if isinstance(interfaces, dict):
        interfaces = [interfaces]
    return [(name, body) for item in interfaces for name, body in item.items()]
