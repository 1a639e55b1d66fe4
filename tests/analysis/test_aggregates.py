"""Interfaces as real gear lists them: a switch reports its management, loopback and VLAN interfaces and its
port-channels beside its front-panel ports (IF-MIB and OpenConfig list them all with counters; a port-channel
counts again what its members count), and a host's RoCE LAG (netdev `bond0`, RDMA device `mlx5_bond_0`) runs over
member ports that LLDP sees one by one, dual-homed to two leaves."""

from __future__ import annotations

import datetime as dt

import pytest

from rocescope.analysis.coverage import coverage_at
from rocescope.analysis.fabric import Fabric, netdev_of
from rocescope.analysis.frames import Frames
from rocescope.analysis.names import is_aggregate, is_fabric_port
from rocescope.pipeline.store import Store

from gear import LINE, PORT_CLOCK, QUEUE_CLOCK, UPLINKS, fabric, found, nic_clock
from telemetry import Telemetry, steps


@pytest.mark.parametrize(
    ("port", "aggregate"),
    [
        ("Port-Channel1", True), ("port-channel10", True), ("Po2", True), ("PortChannel0001", True),
        ("ae0", True), ("lag1", True), ("Bundle-Ether7", True), ("bond0", True), ("team0", True),
        ("Port-Channel1.100", True), ("Ethernet1/1", False), ("ethernet-1/1", False), ("swp1", False),
        ("port1", False), ("eth0", False), ("etp1a", False), ("ens1f0np0", False), ("bond", False),
    ],
)  # fmt: skip
def test_aggregates_are_known_by_their_vendors_names(port: str, aggregate: bool) -> None:
    assert is_aggregate(port) is aggregate


@pytest.mark.parametrize(
    "port",
    ["Loopback0", "Management1", "Vlan10", "Port-Channel1", "mgmt0", "mgmt1/1/1", "MgmtEth0/RP0/CPU0/0", "eth0", "lo",
     "lo0", "system0", "irb0.10", "Vxlan1", "nve1", "em0", "fxp0"],
)  # fmt: skip
def test_management_loopback_vlan_overlay_and_aggregate_interfaces_are_no_cables(port: str) -> None:
    assert not is_fabric_port(port)


@pytest.mark.parametrize("port", ["Ethernet1", "Ethernet49/1", "Et1/1", "ethernet-1/1", "swp1s0", "eth1/1/1", "etp1a"])
def test_front_panel_ports_of_every_vendor_are_cables(port: str) -> None:
    assert is_fabric_port(port)


def test_a_leafs_management_loopback_and_vlan_interfaces_are_no_uplinks(store: Store, now: dt.datetime) -> None:
    """An EOS leaf over SNMP lists Loopback0, Management1 and Vlan10 with counters beside its two uplinks, and
    speaks LLDP on Management1 to the management network's switch (which sees every leaf there); the hosts speak
    LLDP too. Communication phases saturate both uplinks evenly, marking: demand, not hashing. Taken for three more
    uplinks (idle siblings), the logical interfaces made each busy uplink an ECMP imbalance."""
    t = Telemetry(now, 240)
    fabric(t)
    phases = [(float(s), s + 3.2) for s in range(0, 240, 5)]
    for port in UPLINKS:
        t.counter("leaf1", "switch", port, "tx_bytes", steps(*[(a, b, LINE) for a, b in phases]), PORT_CLOCK)
        marks = steps(*[(a, b, 1e5) for a, b in phases])
        t.counter("leaf1", "switch", port, "queue_ecn_marked_packets", marks, QUEUE_CLOCK, priority=3)
    for port, rate in (("Management1", 2e5), ("Loopback0", 0.0), ("Vlan10", 1e6)):
        t.counter("leaf1", "switch", port, "tx_bytes", steps(base=rate), PORT_CLOCK)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(base=rate), PORT_CLOCK)
    t.link("leaf1", "Management1", "oob-mgmt-sw", "GigabitEthernet1/0/1")
    t.link("leaf2", "Management1", "oob-mgmt-sw", "GigabitEthernet1/0/2")
    t.counter("leaf2", "switch", "Ethernet1/1", "tx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
    t.land(store)

    fab = Fabric.from_frames(Frames(store, t.window))
    assert fab.uplinks("leaf1") == UPLINKS and "oob-mgmt-sw" not in fab.switches | fab.hosts
    assert not found(store, t, "ecmp_imbalance")


def test_a_roce_lag_rdma_port_is_its_bond() -> None:
    assert netdev_of("mlx5_bond_0/1") == "mlx5_bond_0" and netdev_of("mlx5_0/1") == "mlx5_0"


def test_a_port_channel_is_no_uplink_and_no_second_optics_finding(store: Store, now: dt.datetime) -> None:
    """A member uplink takes frame errors; the port-channel over both uplinks counts them again, with the
    members' bytes. One degraded-optics finding, at the member; the leaf (LLDP from its hosts only) keeps its
    two physical uplinks; the coverage map judges the members, not the port-channel."""
    t = Telemetry(now, 240)
    fabric(t)
    errors = steps((60.0, 200.0, 50.0))
    t.counter("leaf1", "switch", "Ethernet2/1", "rx_fcs_errors", errors, PORT_CLOCK)
    t.counter("leaf1", "switch", "Port-Channel1", "rx_fcs_errors", errors, PORT_CLOCK)
    for metric in ("tx_bytes", "rx_bytes"):
        t.counter("leaf1", "switch", "Port-Channel1", metric, steps(base=0.6 * LINE), PORT_CLOCK)
    t.land(store)

    (optics,) = found(store, t, "degraded_optics")
    assert optics.ports[0] == "leaf1:Ethernet2/1"
    assert Fabric.from_frames(Frames(store, t.window)).uplinks("leaf1") == UPLINKS
    places = {it.where for it in coverage_at(store, t.window.start, t.window.end).items}
    assert "leaf1:Ethernet2/1" in places and "leaf1:Port-Channel1" not in places  # judged through its members


def test_a_dual_homed_roce_lag_is_its_members_on_both_leaves(store: Store, now: dt.datetime) -> None:
    """Four hosts, each a RoCE LAG over eth0 (to leaf1) and eth1 (to leaf2), LLDP from the hosts; the job is
    placed on bond0 / mlx5_bond_0. Frame errors on leaf2's port facing gpu-02's eth1 reach the job, and the job
    has NICs under both leaves."""
    t = Telemetry(now, 240)
    hosts = [f"gpu-{i:02d}" for i in range(1, 5)]
    for i, host in enumerate(hosts, start=1):
        for leaf, member in (("leaf1", "eth0"), ("leaf2", "eth1")):
            t.link(host, member, leaf, f"Ethernet1/{i}")
            t.counter(host, "nic", member, "tx_bytes", steps(base=0.3 * LINE), nic_clock(i))
            t.counter(leaf, "switch", f"Ethernet1/{i}", "tx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
            t.counter(leaf, "switch", f"Ethernet1/{i}", "rx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
        t.counter(host, "nic", "mlx5_bond_0/1", "rdma_tx_bytes", steps(base=0.6 * LINE), nic_clock(i))
        t.endpoint("team-a/train", host, "bond0", "mlx5_bond_0", f"10.0.0.{i}", i - 1)
    t.counter("leaf2", "switch", "Ethernet1/2", "rx_fcs_errors", steps((60.0, 200.0, 50.0)), PORT_CLOCK)
    t.land(store)

    fab = Fabric.from_frames(Frames(store, t.window))
    assert fab.leaves_of("gpu-02", "bond0") == {"leaf1", "leaf2"}
    assert fab.leaves_of("gpu-02", "mlx5_bond_0/1") == {"leaf1", "leaf2"}  # the RDMA port is its bond's
    assert fab.jobs_crossing_leaf("leaf1", t.window.start, t.window.end) == {"team-a/train"}
    (optics,) = found(store, t, "degraded_optics")
    assert optics.ports[0] == "leaf2:Ethernet1/2" and optics.job_ids == ("team-a/train",)
