"""Jobs on the fabric: placement, the endpoints stream, ring flows per rail, QPs and UDP ports."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from rocescope import schema
from rocescope.errors import SimError
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.jobs import (
    FAR_FUTURE,
    JobSpec,
    MiB,
    Placement,
    collective_flows,
    endpoints_arrow,
    place_jobs,
    ring_flows,
)
from rocescope.sim.roce import UDP_SPORT_MIN, QpAllocator, udp_sport
from rocescope.sim.topology import FabricSpec, Topology

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
SPECS = [JobSpec("llama-70b", 16, "ml", cross_rail_flows=6), JobSpec("bert-large", 8, "research")]


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology(FabricSpec(hosts=32, rails=4, spines=2))


def test_contiguous_placement(topo: Topology) -> None:
    llama, bert = place_jobs(topo, SPECS)
    assert llama.job_id == "ml/llama-70b" and bert.job_id == "research/bert-large"
    assert llama.hosts == tuple(f"gpu-{n:03d}" for n in range(1, 17))
    assert bert.hosts == tuple(f"gpu-{n:03d}" for n in range(17, 25))
    assert [p.name for p in bert.pods][:2] == ["bert-large-worker-0", "bert-large-worker-1"]
    assert [p.rank for p in bert.pods] == list(range(8))
    assert llama.rails == (0, 1, 2, 3) and llama.world_size == 64
    eps = llama.endpoints(topo)
    assert [e.rank for e in eps] == list(range(64))
    assert (eps[6].pod.name, eps[6].nic.host, eps[6].nic.rdma_dev) == ("llama-70b-worker-1", "gpu-002", "mlx5_2")


def test_scattered_placement_is_seeded_and_disjoint(topo: Topology) -> None:
    a = place_jobs(topo, SPECS, "scattered", seed=5)
    assert a == place_jobs(topo, SPECS, "scattered", seed=5)
    assert a != place_jobs(topo, SPECS, "scattered", seed=6)
    hosts = [h for job in a for h in job.hosts]
    assert len(set(hosts)) == len(hosts) == 24
    assert a[0].hosts != tuple(sorted(a[0].hosts))  # ranks follow the scheduler's picks


def test_placement_errors(topo: Topology) -> None:
    with pytest.raises(SimError, match="need 40 hosts"):
        place_jobs(topo, [JobSpec("a", 20), JobSpec("b", 20)])
    with pytest.raises(SimError, match="unique"):
        place_jobs(topo, [JobSpec("a", 2), JobSpec("a", 2)])
    with pytest.raises(SimError, match="rails"):
        place_jobs(topo, [JobSpec("a", 2, rails=(0, 7))])
    with pytest.raises(SimError, match="Kubernetes"):
        JobSpec("Bad_Name", 2)


def test_endpoints_arrow_conforms(topo: Topology) -> None:
    jobs = place_jobs(topo, [*SPECS, JobSpec("small", 2, rails=(1, 3))])
    table = endpoints_arrow(jobs, topo, T0)
    assert table.schema.equals(schema.arrow_schema("endpoints"))
    assert table.num_rows == 64 + 32 + 4
    rows = table.to_pylist()
    assert rows[-1] == {
        "job_id": "default/small",
        "job_name": "small",
        "namespace": "default",
        "pod": "small-worker-1",
        "rank": 3,
        "host": "gpu-026",
        "netdev": "eth3",
        "rdma_dev": "mlx5_3",
        "ip": "10.3.0.26",
        "gid": "0000:0000:0000:0000:0000:ffff:0a03:001a",
        "valid_from": T0,
        "valid_to": FAR_FUTURE,
    }
    assert endpoints_arrow([], topo, T0).num_rows == 0


def test_endpoints_land_in_the_store(topo: Topology, store: ChdbStore) -> None:
    jobs = place_jobs(topo, SPECS)
    store.insert("endpoints", endpoints_arrow(jobs, topo, T0))
    back = store.query_arrow(
        "SELECT job_id, rank FROM endpoints WHERE ip = {ip:String}",
        {"ip": "10.2.0.18"},
    )
    assert back.to_pylist() == [{"job_id": "research/bert-large", "rank": 6}]


@pytest.mark.parametrize("placement", ["contiguous", "scattered"])
def test_ring_per_rail_is_a_ring_over_the_job(topo: Topology, placement: Placement) -> None:
    job = place_jobs(topo, SPECS, placement, seed=2)[0]
    flows = ring_flows(job, topo, QpAllocator(0))
    assert len(flows) == 16 * 4
    for rail in job.rails:
        ring = [f for f in flows if f.src.rail == rail]
        assert len(ring) == 16
        assert all(f.dst.rail == rail and f.kind == "ring" for f in ring)
        nxt = {f.src.host: f.dst.host for f in ring}
        assert set(nxt) == set(job.hosts)  # every host sends once...
        assert Counter(nxt.values()) == Counter(job.hosts)  # ...and receives once
        host, seen = job.hosts[0], []
        for _ in range(16):  # one cycle through all of them, in rank order
            seen.append(host)
            host = nxt[host]
        assert seen == list(job.hosts)
        ranks = {(f.src_rank, f.dst_rank) for f in ring}
        assert ranks == {(k * 4 + rail, (k + 1) % 16 * 4 + rail) for k in range(16)}
    # ring all-reduce: each rank sends 2(n-1)/n of the message
    assert {f.bytes_per_iteration for f in flows} == {2 * 15 * 256 * MiB // 16}


def test_qps_and_udp_ports(topo: Topology) -> None:
    jobs = place_jobs(topo, [JobSpec("llama-70b", 16, "ml", qps_per_connection=2, cross_rail_flows=5)])
    flows = collective_flows(jobs[0], topo, seed=9)
    assert len(flows) == 16 * 4 * 2 + 5
    qps_per_dev: Counter[tuple[str, str, int]] = Counter()
    for f in flows:
        qps_per_dev[(f.src.host, f.src.rdma_dev, f.src_qpn)] += 1
        qps_per_dev[(f.dst.host, f.dst.rdma_dev, f.dst_qpn)] += 1
        assert UDP_SPORT_MIN <= f.udp_sport <= 0xFFFF
        assert f.udp_sport == udp_sport(f.src_qpn, f.dst_qpn) == udp_sport(f.dst_qpn, f.src_qpn)
        assert f.five_tuple == (f.src.ip, f.dst.ip, f.udp_sport, 4791, 17)
    assert max(qps_per_dev.values()) == 1  # no QPN is used twice on a device
    assert len({f.udp_sport for f in flows}) > 0.9 * len(flows)
    # the split of bytes over the two QPs of a connection adds up
    ring = [f for f in flows if f.kind == "ring"]
    assert sum(f.bytes_per_iteration for f in ring) == 16 * 4 * (2 * 15 * 256 * MiB // 16)
    cross = [f for f in flows if f.kind == "cross_rail"]
    assert len(cross) == 5
    assert all(f.src.rail != f.dst.rail and f.src.host != f.dst.host for f in cross)
    assert collective_flows(jobs[0], topo, seed=9) == flows
    assert collective_flows(jobs[0], topo, seed=10) != flows


def test_udp_sport_matches_the_kernel_formula() -> None:
    # rdma_calc_flow_label + rdma_flow_label_to_udp_sport, worked by hand:
    # 0x1234 * 0x5678 = 0x06260060; ^>>20 -> 0x06260060 ^ 0x62 = 0x06260002; & 0xFFFFF = 0x60002
    # low 0x0002 ^ (0x60000 >> 14 = 0x18) = 0x1A; | 0xC000 = 0xC01A
    assert udp_sport(0x1234, 0x5678) == 0xC01A


def test_small_jobs_and_cross_rail_limits(topo: Topology) -> None:
    one, single_rail = place_jobs(topo, [JobSpec("one", 1), JobSpec("r", 4, rails=(2,), cross_rail_flows=1)])
    assert collective_flows(one, topo) == []  # one pod reduces over NVLink
    with pytest.raises(SimError, match="cross-rail"):
        collective_flows(single_rail, topo)
