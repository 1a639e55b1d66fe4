"""The simulated fabric's shape: counts, names like real gear, symmetric cabling, the links stream."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from typing import Any

import pytest

from rocescope import schema
from rocescope.errors import SimError
from rocescope.pipeline.batch import Batch, decode, encode
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.topology import FabricSpec, Topology

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology(FabricSpec(hosts=32, rails=4, spines=2))


def test_rail_optimized_counts_and_names(topo: Topology) -> None:
    assert [d.name for d in topo.leaves] == ["leaf-r0-01", "leaf-r1-01", "leaf-r2-01", "leaf-r3-01"]
    assert [d.name for d in topo.spines] == ["spine-01", "spine-02"]
    assert [d.name for d in topo.hosts] == [f"gpu-{n:03d}" for n in range(1, 33)]
    assert {d.role for d in topo.devices} == {"host", "leaf", "spine"}
    # 32 x 4 NIC cables and 4 leaves x 2 spines uplinks, two ends each
    assert len(topo.ports) == 2 * (32 * 4 + 4 * 2)
    assert [p.id for p in topo.ports] == list(range(len(topo.ports)))


def test_nic_i_of_every_host_is_on_rail_leaf_i(topo: Topology) -> None:
    for host in topo.hosts:
        for rail in range(4):
            nic = topo.nic(host.name, rail)
            assert (nic.rdma_dev, nic.netdev) == (f"mlx5_{rail}", f"eth{rail}")
            assert nic.leaf == f"leaf-r{rail}-01"
            port = topo.attachment(host.name, rail)
            assert (port.device, port.peer_device, port.peer_port) == (nic.leaf, host.name, f"eth{rail}")
    nic = topo.nic("gpu-017", 3)
    assert (nic.ip, nic.leaf_port, nic.mac) == ("10.3.0.17", "Ethernet64", "b8:ce:f6:03:00:11")
    assert nic.gid == "0000:0000:0000:0000:0000:ffff:0a03:0011"
    assert topo.nic_by_ip("10.3.0.17") == nic


def test_port_names_look_like_real_gear(topo: Topology) -> None:
    for port in topo.ports:
        role = topo.device(port.device).role
        if role == "host":
            assert re.fullmatch(r"eth\d+", port.name)
        else:
            m = re.fullmatch(r"Ethernet(\d+)", port.name)
            assert m and int(m.group(1)) % 4 == 0, port.name
    assert [p.name for p in topo.ports_of("leaf-r0-01")][:3] == ["Ethernet0", "Ethernet4", "Ethernet8"]
    # uplinks start after the 32 host ports, round-robin over the spines
    ups = topo.uplinks("leaf-r2-01")
    assert [(p.name, p.peer_device) for p in ups] == [("Ethernet128", "spine-01"), ("Ethernet132", "spine-02")]
    assert [(p.name, p.peer_device) for p in topo.downlinks("spine-02")] == [
        ("Ethernet0", "leaf-r0-01"),
        ("Ethernet4", "leaf-r1-01"),
        ("Ethernet8", "leaf-r2-01"),
        ("Ethernet12", "leaf-r3-01"),
    ]


def test_links_are_symmetric(topo: Topology) -> None:
    links = topo.links()
    assert len(set(links)) == len(links) == len(topo.ports)
    assert {(lk.peer_device, lk.peer_port, lk.device, lk.port) for lk in links} == set(links)
    assert Counter((lk.device, lk.port) for lk in links).most_common(1)[0][1] == 1
    for port in topo.ports:
        peer = topo.peer(port)
        assert topo.peer(peer) == port
        assert peer.speed_gbps == port.speed_gbps
        assert (peer.device, peer.name) == (port.peer_device, port.peer_port)
    assert (topo.peer_ids[topo.peer_ids] == range(len(topo.ports))).all()


def test_addresses_are_unique(topo: Topology) -> None:
    assert len({n.ip for n in topo.nics}) == len({n.mac for n in topo.nics}) == len(topo.nics) == 128


def test_links_arrow_conforms_to_schema(topo: Topology) -> None:
    table = topo.links_arrow(T0)
    assert table.schema.equals(schema.arrow_schema("links"))
    assert table.num_rows == len(topo.ports)
    assert set(table.column("source").to_pylist()) == {"sim"}
    row = table.slice(0, 1).to_pylist()[0]
    assert row["seen_at"] == T0
    batch = Batch("links", table.to_batches()[0], key="sim")
    assert decode("links", encode(batch)).data.equals(batch.data)


def test_links_land_in_the_store(topo: Topology, store: ChdbStore) -> None:
    assert store.insert("links", topo.links_arrow(T0)) == len(topo.ports)
    back = store.query_arrow(
        "SELECT peer_device, peer_port FROM links WHERE device = {d:String} AND port = {p:String}",
        {"d": "leaf-r3-01", "p": "Ethernet64"},
    )
    assert back.to_pylist() == [{"peer_device": "gpu-017", "peer_port": "eth3"}]


def test_big_rails_split_over_several_leaves() -> None:
    topo = Topology(FabricSpec(hosts=128, rails=8, spines=4, uplinks_per_spine=2))
    assert len(topo.leaves) == 32
    assert [d.name for d in topo.leaves_of_rail(5)] == [f"leaf-r5-{i:02d}" for i in range(1, 5)]
    assert topo.nic("gpu-033", 5).leaf == "leaf-r5-02"
    assert topo.nic("gpu-033", 5).leaf_port == "Ethernet0"
    assert topo.nic("gpu-128", 7).leaf == "leaf-r7-04"
    ups = topo.uplinks("leaf-r5-02")
    assert len(ups) == 8
    assert [p.peer_device for p in ups] == ["spine-01", "spine-02", "spine-03", "spine-04"] * 2
    for spine in topo.spines:
        assert len(topo.downlinks(spine.name, "leaf-r5-02")) == 2
        assert len(topo.downlinks(spine.name)) == 64
    assert {p.speed_gbps for p in topo.ports} == {400}


def test_explicit_leaves_per_rail_and_speeds() -> None:
    topo = Topology(FabricSpec(hosts=8, rails=2, leaves_per_rail=2, host_speed_gbps=200, uplink_speed_gbps=400))
    assert [d.name for d in topo.leaves] == ["leaf-r0-01", "leaf-r0-02", "leaf-r1-01", "leaf-r1-02"]
    assert topo.nic("gpu-004", 1).leaf == "leaf-r1-01"
    assert topo.nic("gpu-005", 1).leaf == "leaf-r1-02"
    assert topo.attachment("gpu-005", 1).speed_bps == 200e9
    assert {p.speed_gbps for p in topo.uplinks("leaf-r0-02")} == {400}
    assert sorted(set(topo.speed_bps.tolist())) == [200e9, 400e9]


def test_shared_leaves_hold_all_nics_of_a_host() -> None:
    topo = Topology(FabricSpec(hosts=20, rails=8, rail_optimized=False))
    assert [d.name for d in topo.leaves] == [f"leaf-{i:02d}" for i in range(1, 6)]
    assert all(d.rail == -1 for d in topo.leaves)
    for host in topo.hosts:
        assert len({n.leaf for n in topo.nics_of(host.name)}) == 1
    assert [n.leaf_port for n in topo.nics_of("gpu-002")] == [f"Ethernet{4 * (8 + r)}" for r in range(8)]


def test_deterministic() -> None:
    spec = FabricSpec(hosts=48, rails=4, spines=3, host_ports_per_leaf=16)
    a, b = Topology(spec), Topology(spec)
    assert a.ports == b.ports and a.nics == b.nics and a.devices == b.devices
    assert a.links_arrow(T0).equals(b.links_arrow(T0))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"hosts": 0},
        {"spines": 0},
        {"host_speed_gbps": 250},
        {"hosts": 64, "leaves_per_rail": 1},
        {"rail_optimized": False, "leaves_per_rail": 2},
        {"rails": 40, "rail_optimized": False},
    ],
)
def test_bad_specs_fail_early(kwargs: dict[str, Any]) -> None:
    with pytest.raises(SimError):
        FabricSpec(**kwargs)


def test_unknown_names_are_key_errors(topo: Topology) -> None:
    with pytest.raises(KeyError, match="gpu-999"):
        topo.device("gpu-999")
    with pytest.raises(KeyError):
        topo.port("leaf-r0-01", "Ethernet1")
    with pytest.raises(KeyError):
        topo.nic("gpu-001", 4)
    with pytest.raises(KeyError):
        topo.uplinks("spine-01")
