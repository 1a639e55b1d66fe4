"""LLDP peers whose names share nothing with the counters' (a gnmic `source` that is an address, a containerlab
node name): each is the counters device at the far end of its cables, by the far end's own LLDP or by traffic."""

from __future__ import annotations

import polars as pl

from rocescope.analysis.names import cabled_peers

COUNTED = {"10.0.0.1", "10.0.0.2", "10.0.0.9", "gpu-1", "gpu-2", "gpu-3"}


def links(*rows: tuple[str, str, str, str]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["device", "port", "peer_device", "peer_port"], orient="row")


def test_the_far_ends_own_lldp_names_the_device() -> None:
    """Hosts call the leaf `leaf1`, the leaf's own LLDP (gNMI, target named by address) comes as 10.0.0.1;
    the spine is called `spine1` by the leaf and reports as 10.0.0.9."""
    lldp = links(
        ("gpu-1", "eth0", "leaf1", "Ethernet0"),
        ("gpu-2", "eth0", "leaf1", "Ethernet4"),
        ("10.0.0.1", "Ethernet0", "gpu-1", "eth0"),
        ("10.0.0.1", "Ethernet4", "gpu-2", "eth0"),
        ("10.0.0.1", "Ethernet32", "spine1", "Ethernet0"),
        ("10.0.0.9", "Ethernet0", "leaf1", "Ethernet32"),
    )
    assert cabled_peers(lldp, COUNTED, {}) == {"leaf1": "10.0.0.1", "spine1": "10.0.0.9"}


def test_traffic_names_the_device_where_lldp_comes_from_hosts_only() -> None:
    lldp = links(
        ("gpu-1", "eth0", "leaf1", "Ethernet0"),
        ("gpu-2", "eth0", "leaf1", "Ethernet4"),
        ("gpu-3", "eth0", "leaf1", "Ethernet8"),  # its traffic fitted no port clearly: no vote
        ("gpu-1", "eth1", "leaf2", "Ethernet0"),
    )
    traffic = {("gpu-1", "eth0"): ("10.0.0.1", "Ethernet0"), ("gpu-2", "eth0"): ("10.0.0.1", "Ethernet4"),
               ("gpu-1", "eth1"): ("10.0.0.2", "Ethernet0")}  # fmt: skip
    assert cabled_peers(lldp, COUNTED, traffic) == {"leaf1": "10.0.0.1", "leaf2": "10.0.0.2"}


def test_split_or_shared_votes_name_nothing() -> None:
    split = links(("gpu-1", "eth0", "leaf1", "Ethernet0"), ("gpu-2", "eth0", "leaf1", "Ethernet4"))
    traffic = {("gpu-1", "eth0"): ("10.0.0.1", "Ethernet0"), ("gpu-2", "eth0"): ("10.0.0.2", "Ethernet4")}
    assert cabled_peers(split, COUNTED, traffic) == {}  # one vote each: not two thirds
    shared = links(("gpu-1", "eth0", "leaf1", "Ethernet0"), ("gpu-2", "eth0", "leaf2", "Ethernet4"))
    traffic = {("gpu-1", "eth0"): ("10.0.0.1", "Ethernet0"), ("gpu-2", "eth0"): ("10.0.0.1", "Ethernet4")}
    assert cabled_peers(shared, COUNTED, traffic) == {}  # two names for one device: which is it?


def test_counted_names_and_uncounted_reporters_are_left_alone() -> None:
    lldp = links(
        ("gpu-1", "eth0", "10.0.0.1", "Ethernet0"),  # already a counters device
        ("nic-less-host", "eth0", "leaf1", "Ethernet4"),  # a reporter without counters votes for nothing
    )
    traffic = {("nic-less-host", "eth0"): ("10.0.0.1", "Ethernet4")}
    assert cabled_peers(lldp, COUNTED, traffic) == {}


def test_a_reporter_named_otherwise_is_found_too() -> None:
    """Switches' LLDP imported from lldpcli files named by system name, their counters from gnmic by address."""
    lldp = links(("leaf1", "Ethernet0", "gpu-1", "eth0"), ("leaf1", "Ethernet4", "gpu-2", "eth0"))
    traffic = {("gpu-1", "eth0"): ("10.0.0.1", "Ethernet0"), ("gpu-2", "eth0"): ("10.0.0.1", "Ethernet4")}
    assert cabled_peers(lldp, COUNTED, traffic) == {"leaf1": "10.0.0.1"}
