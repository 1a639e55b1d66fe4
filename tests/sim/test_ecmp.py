"""ECMP physics: valid paths, even spread with per-switch seeds, polarization with one seed everywhere."""

from __future__ import annotations

import ipaddress
import itertools
import zlib
from collections import Counter

import numpy as np
import pytest

from rocescope.errors import NoRouteError
from rocescope.sim.ecmp import (
    HASH_FUNCTIONS,
    Ecmp,
    HashConfig,
    HashFunction,
    HashingMode,
    Hop,
    fabric_hashing,
    flow_hash,
    imbalance,
    toeplitz,
)
from rocescope.sim.jobs import JobSpec, collective_flows, place_jobs
from rocescope.sim.roce import FiveTuple
from rocescope.sim.topology import FabricSpec, Topology

#: chi-square critical value, 3 degrees of freedom, p = 0.001 (uniform over 4 links)
CHI2_DF3_P001 = 16.27


def two_tier(spines: int = 2, uplinks_per_spine: int = 2) -> Topology:
    """One rail split over two leaves, so traffic between them crosses a spine: 2 tiers choose."""
    return Topology(
        FabricSpec(hosts=64, rails=1, spines=spines, uplinks_per_spine=uplinks_per_spine, leaves_per_rail=2)
    )


def leaf_to_leaf_flows(topo: Topology, n: int = 4096, seed: int = 1) -> list[FiveTuple]:
    """Random RoCE flows from hosts of leaf-r0-01 to hosts of leaf-r0-02."""
    rng = np.random.default_rng(seed)
    flows = []
    for _ in range(n):
        src = topo.nic(f"gpu-{int(rng.integers(1, 33)):03d}", 0)
        dst = topo.nic(f"gpu-{int(rng.integers(33, 65)):03d}", 0)
        flows.append(FiveTuple(src.ip, dst.ip, int(rng.integers(0xC000, 0x10000))))
    return flows


def link_counts(topo: Topology, ecmp: Ecmp, flows: list[FiveTuple]) -> tuple[list[int], list[int]]:
    """Flows per uplink of the source leaf, and per spine link down to the destination leaf."""
    load = ecmp.load(flows)
    up = [load[Hop(p.device, p.name)] for p in topo.uplinks("leaf-r0-01")]
    down = [load[Hop(p.device, p.name)] for s in topo.spines for p in topo.downlinks(s.name, "leaf-r0-02")]
    return up, down


def chi2(counts: list[int]) -> float:
    expected = sum(counts) / len(counts)
    return sum((c - expected) ** 2 / expected for c in counts)


def test_paths_follow_the_cabling() -> None:
    topo = two_tier()
    ecmp = Ecmp(topo)
    a, b, c = topo.nic("gpu-001", 0), topo.nic("gpu-002", 0), topo.nic("gpu-040", 0)
    assert ecmp.route(FiveTuple(a.ip, b.ip, 0xC123)) == [("gpu-001", "eth0"), ("leaf-r0-01", "Ethernet4")]
    path = ecmp.route(FiveTuple(a.ip, c.ip, 0xC123))
    assert [h.device for h in path] == ["gpu-001", "leaf-r0-01", path[2].device, "leaf-r0-02"]
    assert path[2].device.startswith("spine-")
    assert path[-1].port == c.leaf_port
    ports = ecmp.route_ports(FiveTuple(a.ip, c.ip, 0xC123))
    for here, there in itertools.pairwise(ports):
        assert here.peer_device == there.device
    assert ports[-1].peer_device == "gpu-040"


def test_rail_traffic_stays_on_the_rail_leaf_and_cross_rail_climbs() -> None:
    topo = Topology(FabricSpec(hosts=32, rails=4, spines=2))
    job = place_jobs(topo, [JobSpec("llama", 16, cross_rail_flows=8)])[0]
    ecmp = Ecmp(topo)
    for flow in collective_flows(job, topo):
        path = ecmp.route(flow.five_tuple)
        if flow.kind == "ring":
            assert [h.device for h in path] == [flow.src.host, f"leaf-r{flow.src.rail}-01"]
        else:
            assert len(path) == 4 and path[2].device.startswith("spine-")
            assert path[3].device == f"leaf-r{flow.dst.rail}-01"


@pytest.mark.parametrize("function", HASH_FUNCTIONS)
def test_random_seeds_spread_evenly(function: HashFunction) -> None:
    topo = two_tier()
    ecmp = Ecmp(topo, fabric_hashing(topo, "random", function, seed=11))
    up, down = link_counts(topo, ecmp, leaf_to_leaf_flows(topo))
    assert sum(up) == sum(down) == 4096
    for counts in (up, down):
        assert imbalance(counts) < 1.2, counts
        assert chi2(counts) < CHI2_DF3_P001, counts


@pytest.mark.parametrize("function", HASH_FUNCTIONS)
@pytest.mark.parametrize("spines", [2, 4])
def test_same_function_and_seed_polarizes(function: HashFunction, spines: int) -> None:
    topo = two_tier(spines=spines)
    ecmp = Ecmp(topo, fabric_hashing(topo, "same", function, seed=11))
    up, down = link_counts(topo, ecmp, leaf_to_leaf_flows(topo))
    # the first tier alone is fine...
    assert imbalance(up) < 1.2, up
    # ...but each spine only ever uses one of its two links to the destination leaf
    assert down.count(0) == len(down) // 2, down
    assert imbalance(down) > 1.9, down
    for s in range(spines):
        assert sorted(down[2 * s : 2 * s + 2])[0] == 0


def test_three_spines_do_not_polarize_even_with_one_seed() -> None:
    # h mod 3 (which spine) says nothing about h mod 2 (which of its links): numbers matter, as in the field
    topo = two_tier(spines=3)
    ecmp = Ecmp(topo, fabric_hashing(topo, "same", "crc32", seed=11))
    _, down = link_counts(topo, ecmp, leaf_to_leaf_flows(topo))
    assert imbalance(down) < 1.2, down


def test_a_bare_crc_seed_would_not_decorrelate_the_tiers() -> None:
    # Why crc32_hash avalanches: a CRC's initial value only XORs a constant into same-length results,
    # so `mod 2` picks under two seeds agree (or disagree) on every flow.
    flows = leaf_to_leaf_flows(two_tier(), n=256)
    xors = {zlib.crc32(f.packed(), 1) ^ zlib.crc32(f.packed(), 2) for f in flows}
    assert len(xors) == 1
    picks = {(flow_hash(f, HashConfig("crc32", 1)) ^ flow_hash(f, HashConfig("crc32", 2))) & 1 for f in flows}
    assert picks == {0, 1}


def test_toeplitz_matches_the_rss_verification_vector() -> None:
    key = bytes.fromhex(
        "6d5a56da255b0ec24167253d43a38fb0d0ca2bcbae7b30b477cb2da38030f20c6a42b73bbeac01fa"
    )  # the Microsoft RSS default key and its published IPv4/TCP test value
    data = (
        ipaddress.IPv4Address("66.9.149.187").packed
        + ipaddress.IPv4Address("161.142.100.80").packed
        + (2794).to_bytes(2, "big")
        + (1766).to_bytes(2, "big")
    )
    assert toeplitz(data, key) == 0x51CCC178
    assert toeplitz(data[:8], key) == 0x323E8FC2


def test_deterministic_from_seed() -> None:
    topo = two_tier()
    flows = leaf_to_leaf_flows(topo, n=512)
    a = fabric_hashing(topo, "random", "toeplitz", seed=3)
    assert a == fabric_hashing(topo, "random", "toeplitz", seed=3)
    assert len({c.seed for c in a.values()}) == len(topo.switches)
    routes = [Ecmp(topo, a).route(f) for f in flows]
    assert routes == [Ecmp(topo, fabric_hashing(topo, "random", "toeplitz", seed=3)).route(f) for f in flows]
    other = [Ecmp(topo, fabric_hashing(topo, "random", "toeplitz", seed=4)).route(f) for f in flows]
    assert other != routes
    assert Ecmp(topo).hashing == fabric_hashing(topo)  # default: random per-switch seeds from seed 0


def test_down_links_are_routed_around() -> None:
    topo = two_tier()
    flows = leaf_to_leaf_flows(topo, n=1024)
    # spine-01 loses both links to leaf-r0-02: leaf-r0-01 withdraws spine-01 for that leaf
    cut = [(p.device, p.name) for p in topo.downlinks("spine-01", "leaf-r0-02")]
    ecmp = Ecmp(topo, down=cut)
    load = ecmp.load(flows)
    per_spine: Counter[str] = Counter()
    for p in topo.uplinks("leaf-r0-01"):
        per_spine[p.peer_device] += load[Hop(p.device, p.name)]
    assert per_spine == {"spine-01": 0, "spine-02": 1024}
    # one of spine-02's two links down (named from the leaf side): the other carries everything
    leaf_end = topo.peer(topo.downlinks("spine-02", "leaf-r0-02")[0])
    ecmp = Ecmp(topo, down=[*cut, (leaf_end.device, leaf_end.name)])
    _, down = link_counts(topo, ecmp, flows)
    assert down == [0, 0, 0, 1024]
    # nothing left: no route; a dead NIC: no route
    everything = [(p.device, p.name) for p in topo.uplinks("leaf-r0-01")]
    with pytest.raises(NoRouteError):
        Ecmp(topo, down=everything).route(flows[0])
    src = topo.nic_by_ip(flows[0].src_ip)
    with pytest.raises(NoRouteError):
        Ecmp(topo, down=[(src.host, src.netdev)]).route(flows[0])


def test_imbalance() -> None:
    assert imbalance([10, 10, 10, 10]) == 1.0
    assert imbalance([20, 0, 0, 20]) == 2.0
    assert imbalance([0, 0]) == float("inf")


@pytest.mark.parametrize("mode", ["same", "random"])
def test_job_traffic_polarizes_only_with_one_seed(mode: HashingMode) -> None:
    # real ring traffic (UDP ports from QPNs) on rails split over two leaves each, dual uplinks
    topo = Topology(FabricSpec(hosts=64, rails=2, spines=2, uplinks_per_spine=2, leaves_per_rail=2))
    job = place_jobs(topo, [JobSpec("gpt", 64, qps_per_connection=4)], "scattered", seed=1)[0]
    ecmp = Ecmp(topo, fabric_hashing(topo, mode, "crc32", seed=5))
    load = ecmp.load(f.five_tuple for f in collective_flows(job, topo, seed=1))
    spine_down = [load[Hop(p.device, p.name)] for s in topo.spines for p in topo.downlinks(s.name)]
    assert len(spine_down) == 2 * 4 * 2 and sum(spine_down) > 100
    if mode == "same":
        assert spine_down.count(0) == len(spine_down) // 2, spine_down
    else:
        assert 0 not in spine_down and imbalance(spine_down) < 1.6, spine_down
