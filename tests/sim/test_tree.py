"""Tree all-reduce (NCCL's double binary tree per rail) and the all-to-all of expert parallelism: their flow patterns,
and a fabric running them."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from rocescope.errors import SimError
from rocescope.sim.engine import Engine
from rocescope.sim.jobs import JobSpec, MiB, btree, collective_flows, dtree, place_jobs, tree_links
from rocescope.sim.params import EngineParams
from rocescope.sim.roce import QpAllocator
from rocescope.sim.scenario import parse_scenario
from rocescope.sim.topology import FabricSpec, Topology

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)


def test_btree_matches_nccl_on_eight_ranks() -> None:
    # ncclGetBtree for 8 ranks: 0 -> 4; 4 -> 2, 6; 2 -> 1, 3; 6 -> 5, 7
    got = {r: btree(8, r) for r in range(8)}
    assert got[0] == (-1, -1, 4)
    assert got[4] == (0, 2, 6)
    assert got[2] == (4, 1, 3) and got[6] == (4, 5, 7)
    assert all(got[r] == (r - 1 if r % 4 == 3 else r + 1, -1, -1) for r in (1, 3, 5, 7))


@pytest.mark.parametrize("n", [2, 3, 5, 6, 8, 13, 16, 24, 31])
def test_double_tree_spans_every_rank_with_fan_in_at_most_two(n: int) -> None:
    for t in (0, 1):
        nodes = [dtree(n, r)[t] for r in range(n)]
        roots = [r for r, node in enumerate(nodes) if node.parent == -1]
        assert len(roots) == 1
        children: dict[int, list[int]] = {
            r: [c for c in (node.child0, node.child1) if c != -1] for r, node in enumerate(nodes)
        }
        assert all(len(c) <= 2 for c in children.values())
        assert len(children[roots[0]]) == 1  # the root has one child, as in NCCL
        for r, kids in children.items():
            assert all(nodes[c].parent == r for c in kids)
        for r in range(n):  # every rank reaches the root: the tree covers all ranks
            seen, x = set(), r
            while nodes[x].parent != -1:
                assert x not in seen
                seen.add(x)
                x = nodes[x].parent
            assert x == roots[0]
    if n % 2 == 0:  # complementary roles: a leaf of one tree is an inner node of the other
        leaves = [{r for r in range(n) if dtree(n, r)[t].child0 == -1 and dtree(n, r)[t].child1 == -1} for t in (0, 1)]
        assert not leaves[0] & leaves[1]


def test_tree_flow_pattern_per_rail() -> None:
    topo = Topology(FabricSpec(hosts=16, rails=2, spines=2, host_ports_per_leaf=8))
    (job,) = place_jobs(topo, [JobSpec("t", 12, "ml", message_bytes=64 * MiB, collective="tree")])
    flows = collective_flows(job, topo, qps=QpAllocator(1))
    links = tree_links(12)
    assert len(links) == 2 * 11  # two trees, n - 1 edges each
    assert len(flows) == 2 * len(links) * len(job.rails)  # each edge both ways, on every rail
    assert {f.kind for f in flows} == {"tree"}
    assert all(f.src.rail == f.dst.rail and f.src.host != f.dst.host for f in flows)
    assert all(f.bytes_per_iteration == 32 * MiB for f in flows)  # each tree carries half the message
    for rail in job.rails:
        out = Counter(f.src_rank for f in flows if f.src.rail == rail)
        into = Counter(f.dst_rank for f in flows if f.src.rail == rail)
        for pod in range(12):
            rank = job.rank(pod, rail)
            degree = sum((node.parent != -1) + (node.child0 != -1) + (node.child1 != -1) for node in dtree(12, pod))
            assert out[rank] == into[rank] == degree  # fan-out = fan-in = tree neighbours over both trees
            assert 2 <= degree <= 6
    assert len({(f.src.host, f.src_qpn) for f in flows}) == len(flows)  # a QP per flow end


def test_tree_jobs_iterate_and_ring_stays_the_default() -> None:
    data = {"name": "t", "fabric": {"hosts": 8, "rails": 1}, "jobs": [{"name": "a", "hosts": 8}]}
    assert parse_scenario(data).jobs[0].collective == "ring"
    data["jobs"] = [{"name": "a", "hosts": 8, "collective": "tree"}]
    assert parse_scenario(data).jobs[0].collective == "tree"
    with pytest.raises(SimError, match="collective"):
        JobSpec("a", 2, collective="star")  # type: ignore[arg-type]
    topo = Topology(FabricSpec(hosts=8, rails=1, spines=2, host_ports_per_leaf=4))
    (job,) = place_jobs(topo, [JobSpec("a", 8, "ml", message_bytes=32 * MiB, compute_ms=5, collective="tree")])
    eng = Engine(topo, [job], collective_flows(job, topo), params=EngineParams(), start=T0, stagger=False)
    eng.run(0.2)
    bal = eng.byte_balance()
    assert abs(bal.error) <= 1e-9 * bal.sent and bal.dropped == 0.0
    assert eng.completed_iterations("ml/a") >= 3


def test_an_all_to_all_job_sends_every_rank_to_every_other_on_its_rail_and_iterates() -> None:
    topo = Topology(FabricSpec(hosts=8, rails=2, spines=2, host_ports_per_leaf=4))
    (job,) = place_jobs(topo, [JobSpec("moe", 6, "ml", message_bytes=60 * MiB, compute_ms=5, collective="alltoall")])
    flows = collective_flows(job, topo, qps=QpAllocator(1))
    assert {f.kind for f in flows} == {"alltoall"} and len(flows) == 6 * 5 * 2  # n(n-1) per rail
    assert all(f.src.rail == f.dst.rail and f.src.host != f.dst.host for f in flows)
    assert all(f.bytes_per_iteration == 10 * MiB for f in flows)  # 1/n of the message to each peer
    for rail in job.rails:
        into = Counter(f.dst.host for f in flows if f.src.rail == rail)
        assert set(into.values()) == {5}  # fan-in n - 1 at every NIC, at once
    eng = Engine(topo, [job], flows, params=EngineParams(), start=T0, stagger=False)
    eng.run(0.3)
    bal = eng.byte_balance()
    assert abs(bal.error) <= 1e-9 * bal.sent and eng.completed_iterations("ml/moe") >= 2
