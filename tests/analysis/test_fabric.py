"""The fabric from whatever LLDP there is: either side, vendor spellings, SONiC aliases, tiers from the graph."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest

from rocescope.analysis.fabric import Fabric, canonical_port, netdev_of
from rocescope.analysis.frames import (
    ALIASES_SCHEMA,
    ENDPOINTS_SCHEMA,
    LINKS_SCHEMA,
    PORTS_SCHEMA,
    QP_PEERS_SCHEMA,
    ROLES_SCHEMA,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def build(
    links: list[tuple[str, str, str, str]],
    roles: dict[str, str],
    ports: dict[str, list[str]],
    placed: list[tuple[object, ...]] | None = None,
) -> Fabric:
    return Fabric.build(
        pl.DataFrame(links, schema=LINKS_SCHEMA, orient="row"),
        pl.DataFrame(placed or [], schema=ENDPOINTS_SCHEMA, orient="row"),
        pl.DataFrame(list(roles.items()), schema=ROLES_SCHEMA, orient="row"),
        pl.DataFrame([(d, p) for d, ps in ports.items() for p in ps], schema=PORTS_SCHEMA, orient="row"),
    )


@pytest.mark.parametrize(
    ("a", "b"),
    [("Ethernet1/1", "ethernet-1/1"), ("Et1/1", "Ethernet1/1"), ("SWP1S0", "swp1s0"), ("Ethernet0", "ethernet0")],
)
def test_vendor_spellings_compare_equal(a: str, b: str) -> None:
    assert canonical_port(a) == canonical_port(b)


def test_rdma_ports_map_to_their_device_and_switch_ports_keep_their_slash() -> None:
    assert netdev_of("mlx5_3/1") == "mlx5_3" and netdev_of("bnxt_re0/1") == "bnxt_re0"
    assert netdev_of("Ethernet1/1") == "Ethernet1/1" and netdev_of("ethernet-1/3/1") == "ethernet-1/3/1"


def test_host_side_lldp_alone_with_sonic_aliases_makes_leaves_and_downlinks() -> None:
    # lldpd on the hosts; the SONiC leaf advertises its aliases (etp1 is its first port, Ethernet0)
    links = [
        ("gpu-1", "eth0", "leaf-a", "etp1"),
        ("gpu-2", "eth0", "leaf-a", "etp2"),
        ("gpu-3", "eth0", "leaf-b", "etp1"),
    ]
    roles = {"gpu-1": "nic", "gpu-2": "nic", "gpu-3": "nic", "leaf-a": "switch", "leaf-b": "switch", "spine": "switch"}
    ports = {
        "leaf-a": ["Ethernet0", "Ethernet8", "Ethernet4", "Ethernet256", "Ethernet264"],
        "leaf-b": ["Ethernet0", "Ethernet256"],
        "spine": ["Ethernet0", "Ethernet4"],
    }
    fab = build(links, roles, ports)
    assert fab.leaves == {"leaf-a", "leaf-b"} and fab.spines == {"spine"} and {"gpu-1", "gpu-3"} <= fab.hosts
    assert fab.peer("leaf-a", "Ethernet0") == ("gpu-1", "eth0")  # etp1 -> the first port in port order
    assert fab.peer("leaf-a", "Ethernet4") == ("gpu-2", "eth0")
    assert fab.port_kind("leaf-a", "Ethernet4") == "downlink"
    assert fab.uplinks("leaf-a") == ["Ethernet8", "Ethernet256", "Ethernet264"]  # the ports facing no host
    assert fab.nic_behind("leaf-b", "Ethernet0") == ("gpu-3", "eth0")


def test_switch_side_lldp_with_another_spelling_than_the_counters() -> None:
    links = [("leaf", "ethernet-1/1", "gpu-1", "eth0"), ("leaf", "Et1/2", "spine", "ethernet-1/9")]
    fab = build(links, {"gpu-1": "nic", "leaf": "switch", "spine": "switch"}, {"leaf": ["Ethernet1/1", "Ethernet1/2"]})
    assert fab.port_kind("leaf", "Ethernet1/1") == "downlink" and fab.port_kind("leaf", "Ethernet1/2") == "uplink"
    assert fab.peer("gpu-1", "eth0") == ("leaf", "Ethernet1/1")  # known from the switch side only
    assert fab.peer("gpu-1", "mlx5_0/1") is None  # no placement names the RDMA device's netdev


def test_a_device_lldp_names_without_counters_is_an_endpoint_unless_switches_sit_behind_two_of_its_ports() -> None:
    """A storage array behind one leaf port (its LLDP says Router: hosts that forward do) is an endpoint nobody
    monitors, the leaf port facing it a downlink, never an uplink to a 'spine'; a spine nobody polls, cabled to
    two leaves, is still a spine."""
    links = [
        ("leaf-a", "Ethernet1/1", "gpu-1", "eth0"),
        ("leaf-a", "Ethernet1/9", "storage-01", "ens1f0"),
        ("leaf-a", "Ethernet2/1", "spine-x", "Ethernet1"),
        ("leaf-b", "Ethernet1/1", "gpu-2", "eth0"),
        ("leaf-b", "Ethernet2/1", "spine-x", "Ethernet2"),
    ]
    roles = {"gpu-1": "nic", "gpu-2": "nic", "leaf-a": "switch", "leaf-b": "switch"}
    ports = {"leaf-a": ["Ethernet1/1", "Ethernet1/9", "Ethernet2/1"], "leaf-b": ["Ethernet1/1", "Ethernet2/1"]}
    fab = build(links, roles, ports)
    assert fab.endpoints == {"storage-01"} and fab.spines == {"spine-x"}
    assert fab.port_kind("leaf-a", "Ethernet1/9") == "downlink" and fab.uplinks("leaf-a") == ["Ethernet2/1"]
    assert fab.nic_behind("leaf-a", "Ethernet1/9") == ("storage-01", "ens1f0")


def test_a_job_under_one_leaf_per_rail_crosses_no_spine() -> None:
    """Rail-optimized: NIC i of every host cabled to a leaf of rail i, two leaves per rail (hosts 1-2, 3-4).
    Job `inside` runs on hosts 1-2 over both rails: each rail's traffic stays under one leaf, so it crosses no
    uplink, though its NICs sit under four leaves. Job `across` spans hosts 2-3: rail 0's ring goes leaf-r0-a
    -> spine -> leaf-r0-b. On a ToR-style fabric (each host under one leaf) any two leaves mean crossing."""
    leaf = {(h, r): f"leaf-r{r}-{'a' if h <= 2 else 'b'}" for h in range(1, 5) for r in range(2)}
    links = [(f"gpu-{h}", f"eth{r}", leaf[(h, r)], f"Ethernet{h}") for h in range(1, 5) for r in range(2)]
    links += [(lf, "Ethernet9", "spine", f"Ethernet{i}") for i, lf in enumerate(sorted(set(leaf.values())))]
    end = T0 + dt.timedelta(hours=1)
    placed = [(job, f"gpu-{h}", f"eth{r}", f"mlx5_{r}", "", 0, T0, end)
              for job, hosts in (("inside", (1, 2)), ("across", (2, 3))) for h in hosts for r in range(2)]  # fmt: skip
    roles = {**{f"gpu-{h}": "nic" for h in range(1, 5)}, **{lf: "switch" for lf in leaf.values()}, "spine": "switch"}
    fab = build(links, roles, {}, placed)
    assert fab.jobs_crossing_leaf("leaf-r0-a", T0, end) == {"across"}
    assert fab.jobs_crossing_leaf("leaf-r1-b", T0, end) == {"across"}
    assert fab.jobs_at("spine", "Ethernet0", T0, end) == {"across"}  # the spine port facing leaf-r0-a
    tor = [(job, f"gpu-{h}", "eth0", "", "", 0, T0, end) for job, hosts in (("inside", (1, 2)), ("across", (2, 3)))
           for h in hosts]  # fmt: skip
    tor_links = [(f"gpu-{h}", "eth0", "tor-a" if h <= 2 else "tor-b", f"Ethernet{h}") for h in range(1, 5)]
    tor_links += [("tor-a", "Ethernet9", "spine", "Ethernet0"), ("tor-b", "Ethernet9", "spine", "Ethernet1")]
    tor_roles = {**{f"gpu-{h}": "nic" for h in range(1, 5)}, "tor-a": "switch", "tor-b": "switch", "spine": "switch"}
    fab = build(tor_links, tor_roles, {}, tor)
    assert fab.jobs_crossing_leaf("tor-a", T0, end) == {"across"}


def test_connections_seen_crossing_leaves_make_a_job_observed_there_and_across_rails_a_candidate() -> None:
    """Rail-optimized as above (NIC i of every host under a leaf of rail i; hosts 1-2 under the `a` leaves, 3-4
    under `b`). `ring` spans hosts 2-3: its placement allows the uplinks of leaf-r0-a (`possible`) and its
    connections (QP owners) are seen there (`observed`). `xrail` runs on gpu-1's rail-0 NIC and gpu-4's rail-1 NIC
    only: no rail has two of its leaves, so its placement allows no uplink, but its connection goes from rail 0 to
    rail 1 over the spines (PXN off): a candidate for both leaves' uplinks. `local` (hosts 1-2 and 3-4 on rail 0)
    connects only under each leaf: still a candidate where its placement allows it, a routing loop carries a leaf's
    own traffic over the spines (where PFC deadlocks come from). A connection to an address no placement holds says
    nothing."""
    leaf = {(h, r): f"leaf-r{r}-{'a' if h <= 2 else 'b'}" for h in range(1, 5) for r in range(2)}
    links = [(f"gpu-{h}", f"eth{r}", leaf[(h, r)], f"Ethernet{h}") for h in range(1, 5) for r in range(2)]
    links += [(lf, "Ethernet9", "spine", f"Ethernet{i}") for i, lf in enumerate(sorted(set(leaf.values())))]
    end = T0 + dt.timedelta(hours=1)
    nics = {"ring": [(2, 0), (3, 0)], "xrail": [(1, 0), (4, 1)], "local": [(1, 0), (2, 0), (3, 0), (4, 0)]}
    placed = [(job, f"gpu-{h}", f"eth{r}", f"mlx5_{r}", f"10.{r}.0.{h}", 0, T0, end)
              for job, at in nics.items() for h, r in at]  # fmt: skip
    roles = {**{f"gpu-{h}": "nic" for h in range(1, 5)}, **{lf: "switch" for lf in leaf.values()}, "spine": "switch"}
    fab = build(links, roles, {}, placed)
    assert fab.jobs_crossing_leaf("leaf-r0-a", T0, end) == {"ring", "local"}  # placements alone
    qps = [("gpu-2", "mlx5_0", "10.0.0.3", "ring"), ("gpu-1", "mlx5_0", "10.1.0.4", "xrail"),
           ("gpu-1", "mlx5_0", "10.0.0.2", "local"), ("gpu-3", "mlx5_0", "10.0.0.4", ""),  # eBPF names a job, or not
           ("gpu-4", "mlx5_1", "10.9.9.9", "")]  # fmt: skip
    fab.observe_paths(pl.DataFrame(qps, schema=QP_PEERS_SCHEMA, orient="row"), build_endpoints(placed))
    assert fab.jobs_crossing_leaf("leaf-r0-a", T0, end) == {"ring", "local", "xrail"}
    assert fab.jobs_crossing_leaf("leaf-r1-b", T0, end) == {"xrail"}
    assert fab.jobs_crossing_leaf("leaf-r1-a", T0, end) == set()
    assert fab.jobs_at("spine", "Ethernet3", T0, end) == {"xrail"}  # the spine port facing leaf-r1-b
    evidence = {job: fab.path_evidence(job, "leaf-r0-a", "Ethernet9") for job in ("ring", "local", "xrail")}
    assert evidence == {"ring": "observed", "local": "possible", "xrail": "observed"}
    assert fab.path_evidence("xrail", "spine", "Ethernet3") == "observed"
    assert fab.path_evidence("ring", "leaf-r0-a", "Ethernet2") == "placed"  # the port facing gpu-2's NIC


def build_endpoints(placed: list[tuple[object, ...]]) -> pl.DataFrame:
    return pl.DataFrame(placed, schema=ENDPOINTS_SCHEMA, orient="row")


def test_breakout_aliases_are_two_ports_only_the_alias_map_resolves() -> None:
    """SONiC names a breakout's lanes `etp1a`, `etp1b`: two ports, and every port after them is shifted, so no
    alias of that switch is read as the N-th port (two hosts would face one port); with the switch's alias map
    (CONFIG_DB `PORT|<name> alias`) each is its own."""
    links = [
        ("gpu-1", "eth0", "leaf-a", "etp1a"),
        ("gpu-2", "eth0", "leaf-a", "etp1b"),
        ("gpu-3", "eth0", "leaf-a", "etp2"),
    ]
    roles = {"gpu-1": "nic", "gpu-2": "nic", "gpu-3": "nic", "leaf-a": "switch"}
    ports = {"leaf-a": ["Ethernet0", "Ethernet4", "Ethernet8", "Ethernet256"]}
    fab = build(links, roles, ports)
    assert fab.peer("leaf-a", "Ethernet0") is None and fab.peer("leaf-a", "Ethernet4") is None
    assert fab.peer("gpu-2", "eth0") == ("leaf-a", "etp1b")
    aliases = pl.DataFrame(
        [("leaf-a", "etp1a", "Ethernet0"), ("leaf-a", "etp1b", "Ethernet4"), ("leaf-a", "etp2", "Ethernet8")],
        schema=ALIASES_SCHEMA,
        orient="row",
    )
    mapped = Fabric.build(
        pl.DataFrame(links, schema=LINKS_SCHEMA, orient="row"),
        pl.DataFrame([], schema=ENDPOINTS_SCHEMA, orient="row"),
        pl.DataFrame(list(roles.items()), schema=ROLES_SCHEMA, orient="row"),
        pl.DataFrame([(d, p) for d, ps in ports.items() for p in ps], schema=PORTS_SCHEMA, orient="row"),
        aliases,
    )
    assert [mapped.peer("leaf-a", p) for p in ("Ethernet0", "Ethernet4", "Ethernet8")] == [
        ("gpu-1", "eth0"), ("gpu-2", "eth0"), ("gpu-3", "eth0")
    ]  # fmt: skip
