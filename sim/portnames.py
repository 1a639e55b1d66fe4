"""Port and device names as each switch OS and NIC driver spells them, for one simulated fabric.

The simulator names switch ports SONiC style after their first lane (`Ethernet0`, `Ethernet4`, ...:
front-panel port n is `Ethernet{4n}`) and NICs `mlx5_N` / `ethN`. A profile renames them as the gear
would (front-panel port n, 0-based):

| naming  | port                         | LLDP port id                    |
|---------|------------------------------|---------------------------------|
| sonic   | `Ethernet{4n}`               | the name, or the alias `etp{n+1}` (SONiC's lldpmgrd advertises the alias) |
| eos     | `Ethernet{n+1}/1`            | the name                        |
| srlinux | `ethernet-1/{n+1}`           | the name                        |
| cumulus | `swp{n+1}`; host ports broken out `swp{k+1}s{j}` | the name    |

Hosts keep their netdevs (`eth0`, what lldpd advertises); the RDMA device follows the NIC driver
(`mlx5_0`, `bnxt_re0`). Incident scenarios keep using the simulator's names: only what the gear
reports is renamed, and the ground truth with it.
"""

from __future__ import annotations

import math

from rocescope.errors import SimError
from rocescope.sim.profile import NIC_DRIVERS, Profile
from rocescope.sim.topology import PORT_STEP, Topology

_SIM_PREFIX = "Ethernet"
_SIM_RDMA_PREFIX = "mlx5_"


def front_panel(sim_name: str) -> int:
    """0-based front-panel number of a simulated switch port name (`Ethernet8` -> 2)."""
    if not sim_name.startswith(_SIM_PREFIX):
        raise SimError(f"not a simulated switch port name: {sim_name!r}")
    return int(sim_name.removeprefix(_SIM_PREFIX)) // PORT_STEP


class PortNames:
    """Every switch port's name and LLDP port id under a profile, and the NIC's RDMA device names."""

    def __init__(self, topology: Topology, profile: Profile) -> None:
        self.topology = topology
        side = profile.switch
        self.identity = side.naming == "sonic" and side.lldp_port_id == "name" and profile.nic.driver == "mlx5"
        self._rdma_template = NIC_DRIVERS[profile.nic.driver][2]
        host_ports = topology.spec.host_ports_per_leaf
        self._local: dict[tuple[str, str], str] = {}
        self._lldp: dict[tuple[str, str], str] = {}
        for port in topology.ports:
            if port.kind == "nic":
                continue
            n = front_panel(port.name)
            leaf = topology.device(port.device).role == "leaf"
            self._local[(port.device, port.name)] = _name(side.naming, n, leaf, host_ports, side.breakout)
            alias = f"etp{n + 1}" if side.lldp_port_id == "alias" else None
            self._lldp[(port.device, port.name)] = alias or self._local[(port.device, port.name)]

    def local(self, device: str, port: str) -> str:
        """The device's own name for a port (a NIC netdev, an RDMA `dev/port` or a pool pass through)."""
        hit = self._local.get((device, port))
        if hit is not None:
            return hit
        return self.rdma_port(port) if port.startswith(_SIM_RDMA_PREFIX) else port

    def lldp_id(self, device: str, port: str) -> str:
        """The port id LLDP on `device` advertises for `port`."""
        return self._lldp.get((device, port), port)

    def rdma_device(self, sim_rdma: str) -> str:
        """`mlx5_3` -> the driver's name for the RDMA device of rail 3 (`bnxt_re3`)."""
        if not sim_rdma.startswith(_SIM_RDMA_PREFIX):
            return sim_rdma
        return self._rdma_template.format(n=int(sim_rdma.removeprefix(_SIM_RDMA_PREFIX)))

    def rdma_port(self, sim_port: str) -> str:
        """`mlx5_3/1` -> `bnxt_re3/1` (RDMA device and port number)."""
        dev, _, num = sim_port.partition("/")
        return f"{self.rdma_device(dev)}/{num}" if num else self.rdma_device(dev)

    def ref(self, ref: str) -> str:
        """A `device:port` reference (ground truth, findings) renamed."""
        device, sep, port = ref.partition(":")
        return f"{device}:{self.local(device, port)}" if sep else ref

    def capture_point(self, point: str) -> str:
        """A mirror capture point `leaf/port` renamed."""
        device, sep, port = point.partition("/")
        return f"{device}/{self.local(device, port)}" if sep else point


def _name(naming: str, n: int, leaf: bool, host_ports: int, breakout: int) -> str:
    if naming == "sonic":
        return f"{_SIM_PREFIX}{n * PORT_STEP}"
    if naming == "eos":
        return f"Ethernet{n + 1}/1"
    if naming == "srlinux":
        return f"ethernet-1/{n + 1}"
    if naming == "cumulus":
        if not leaf or breakout == 1:
            return f"swp{n + 1}"
        if n < host_ports:
            return f"swp{n // breakout + 1}s{n % breakout}"
        return f"swp{math.ceil(host_ports / breakout) + n - host_ports + 1}"
    raise SimError(f"unknown port naming {naming!r}")  # pragma: no cover
