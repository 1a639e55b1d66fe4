"""Shared by the LLDP tests: the simulator's fabric and the adjacency it means (the ground truth)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rocescope.collectors.lldp.parse import Neighbor
from rocescope.sim.topology import FabricSpec, Topology


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology(FabricSpec(hosts=4, rails=2))


@pytest.fixture(scope="module")
def truth() -> Callable[[Topology, str], list[Neighbor]]:
    """A device's neighbors as the topology says, sorted."""
    return lambda topo, device: sorted(
        Neighbor(p.device, p.name, p.peer_device, p.peer_port) for p in topo.ports_of(device)
    )
