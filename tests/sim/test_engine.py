"""Physics of the dynamic fabric model: conservation, PFC, ECN/RED, CNPs and DCQCN, deadlock, counters."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from rocescope import catalog
from rocescope.pipeline.batch import conform
from rocescope.sim.counters import SWITCH_VENDORS
from rocescope.sim.engine import Engine
from rocescope.sim.jobs import Flow, Job, JobSpec, MiB, collective_flows, place_jobs
from rocescope.sim.kernel import red_probability
from rocescope.sim.params import EngineParams
from rocescope.sim.roce import QpAllocator, udp_sport
from rocescope.sim.topology import FabricSpec, Nic, Topology

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
LOSSLESS = 3
FOREVER = 10**15  # bytes: a flow that never finishes within a test


def fabric(hosts: int, spines: int = 1, gbps: int = 100, rails: int = 1, per_leaf: int = 32) -> Topology:
    return Topology(
        FabricSpec(
            hosts=hosts,
            rails=rails,
            spines=spines,
            host_ports_per_leaf=per_leaf,
            host_speed_gbps=gbps,
            uplink_speed_gbps=gbps,
        )
    )


def one_job(topo: Topology, compute_ms: float = 1e9) -> Job:
    """A job on every host; its flows are built by hand in each test."""
    return place_jobs(topo, [JobSpec("t", len(topo.hosts), "test", compute_ms=compute_ms)])[0]


def flow(job: Job, qps: QpAllocator, src: Nic, dst: Nic, nbytes: int = FOREVER) -> Flow:
    sq, dq = qps.allocate(src.host, src.rdma_dev), qps.allocate(dst.host, dst.rdma_dev)
    return Flow(job.job_id, "ring", src, dst, 0, 1, sq, dq, udp_sport(sq, dq), nbytes)


def nics(topo: Topology) -> list[Nic]:
    return [topo.nic(h.name, 0) for h in topo.hosts]


def engine(topo: Topology, job: Job, flows: Sequence[Flow], **params: Any) -> Engine:
    """The job communicates from t = 0 (its flows never finish unless given a size)."""
    return Engine(topo, [job], flows, params=EngineParams(**params), start=T0, stagger=False)


def incast(n: int, gbps: int = 100, **params: Any) -> tuple[Topology, Engine, list[Flow]]:
    """n senders on one leaf to one receiver on the same leaf."""
    topo = fabric(n + 1, gbps=gbps)
    job = one_job(topo)
    qps = QpAllocator(1)
    hosts = nics(topo)
    flows = [flow(job, qps, hosts[k], hosts[n]) for k in range(n)]
    return topo, engine(topo, job, flows, **params), flows


def value(eng: Engine, device: str, port: str, metric: str, priority: int = -1) -> float:
    return eng.counter(device, port, metric, priority)


def rx_rate_bps(eng: Engine, nic: Nic, seconds: float) -> float:
    before = value(eng, nic.host, nic.netdev, "rx_bytes")
    eng.run(seconds)
    return (value(eng, nic.host, nic.netdev, "rx_bytes") - before) * 8 / seconds


# --- conservation and losslessness


def test_bytes_conserved_every_step_and_over_a_run() -> None:
    topo = fabric(8, spines=2, rails=2, per_leaf=4)
    jobs = place_jobs(topo, [JobSpec("a", 5, "x", cross_rail_flows=4, compute_ms=5), JobSpec("b", 3, "y")])
    qps = QpAllocator(3)
    flows = [f for j in jobs for f in collective_flows(j, topo, qps=qps)]
    extra = [flow(jobs[1], qps, topo.nic(h, 0), topo.nic("gpu-004", 0), 64 * MiB) for h in ("gpu-001", "gpu-006")]
    eng = Engine(topo, jobs, flows + extra, params=EngineParams(), start=T0)
    eng.link_errors("leaf-r1-01", "Ethernet0", 1e-3, start=0.02)
    eng.disable_pfc("leaf-r0-01", "Ethernet12", start=0.03)
    total = 0.0
    for _ in eng.steps(0.3):
        bal = eng.byte_balance()
        assert abs(bal.error) <= 1e-9 * max(bal.sent, 1.0)
        assert bal.queued >= -1e-6
        total = bal.sent
    bal = eng.byte_balance()
    assert total > 1e9 and bal.delivered > 0.9 * bal.sent
    assert len(eng.iterations) > 4


def test_no_lossless_drops_under_heavy_incast() -> None:
    _, eng, flows = incast(12, dcqcn=False, buffer_bytes=16 * MiB)
    eng.run(0.2)
    bal = eng.byte_balance()
    assert bal.dropped == 0.0 and abs(bal.error) < 1e-6 * bal.sent
    snap = eng.snapshot().to_pydict()
    drops = {"rx_discards", "pg_dropped_packets", "queue_dropped_packets", "out_of_sequence"}
    assert all(v == 0 for m, v in zip(snap["metric"], snap["value"], strict=True) if m in drops)
    leaf = flows[0].dst.leaf
    assert eng.buffer_bytes(leaf) <= 16 * MiB
    # the bottleneck still runs at line rate: PFC holds, it does not throttle
    assert rx_rate_bps(eng, flows[0].dst, 0.05) > 0.99 * EngineParams().line_rate(100e9) * 8


def test_pfc_disabled_port_drops_and_the_sender_retransmits() -> None:
    topo, eng, flows = incast(4, dcqcn=False, buffer_bytes=8 * MiB)
    bad = topo.attachment(flows[0].src.host, 0)
    eng.disable_pfc(bad.device, bad.name)
    eng.run(0.1)
    bal = eng.byte_balance()
    assert bal.dropped > 0 and abs(bal.error) < 1e-6 * bal.sent
    assert eng.byte_balance([0]).dropped == bal.dropped  # only the unprotected ingress drops
    assert value(eng, bad.device, bad.name, "rx_discards") > 0
    assert value(eng, bad.device, bad.name, "pg_dropped_packets", LOSSLESS) > 0
    assert value(eng, flows[0].dst.host, "mlx5_0/1", "out_of_sequence") > 0
    assert value(eng, flows[0].src.host, "mlx5_0/1", "packet_seq_err") > 0
    other = topo.attachment(flows[1].src.host, 0)
    assert value(eng, other.device, other.name, "rx_discards") == 0


def test_lossy_priority_tail_drops_without_pausing() -> None:
    topo = fabric(5)
    job = one_job(topo)
    qps = QpAllocator(1)
    hosts = nics(topo)
    flows = [flow(job, qps, hosts[k], hosts[4]) for k in range(4)]
    params = EngineParams(buffer_bytes=8 * MiB)
    eng = Engine(topo, [job], flows, params=params, flow_priorities=[0] * 4, stagger=False)
    eng.run(0.2)
    leaf, port = hosts[4].leaf, hosts[4].leaf_port
    assert value(eng, leaf, port, "queue_dropped_packets", 0) > 0
    assert eng.byte_balance().dropped > 0
    assert value(eng, hosts[0].host, "eth0", "pfc_rx_pause", 0) == 0
    assert value(eng, hosts[0].host, "eth0", "pfc_rx_pause", LOSSLESS) == 0


# --- ECN, CNPs, DCQCN


@pytest.mark.parametrize("target_kb", [200, 600, 1000, 1400, 2400])
def test_ecn_mark_fraction_follows_red_for_a_steady_queue(target_kb: int) -> None:
    """Two line-rate senders, no DCQCN: PFC holds each ingress PG at its XOFF threshold, so the
    egress queue sits at 2 x XOFF; alpha is chosen to put it at `target_kb`."""
    buffer = 64 * MiB
    target = target_kb * 1000.0
    alpha = target / (2 * (buffer - target))  # 2 PGs at alpha x (buffer - queue) each
    _, eng, flows = incast(2, dcqcn=False, pfc_alpha=alpha, buffer_bytes=buffer)
    leaf, port = flows[0].dst.leaf, flows[0].dst.leaf_port
    eng.run(0.05)
    marked0 = value(eng, leaf, port, "queue_ecn_marked_packets", LOSSLESS)
    sent0 = value(eng, leaf, port, "queue_tx_packets", LOSSLESS)
    eng.run(0.2)
    marked = value(eng, leaf, port, "queue_ecn_marked_packets", LOSSLESS) - marked0
    sent = value(eng, leaf, port, "queue_tx_packets", LOSSLESS) - sent0
    q = eng.queue_bytes(leaf, port)
    assert q == pytest.approx(target, rel=0.02)
    p = EngineParams()
    expected = red_probability(q, p.ecn_kmin_bytes, p.ecn_kmax_bytes, p.ecn_pmax)
    assert marked / sent == pytest.approx(expected, abs=0.005)
    # the receiver sees what the switch marked, and answers with CNPs
    ce = value(eng, flows[0].dst.host, "mlx5_0/1", "ecn_marked_roce_packets")
    assert (ce > 0) == (expected > 0)


def test_incast_raises_cnps_at_its_senders_only() -> None:
    topo = fabric(8, spines=2, per_leaf=4)
    job = one_job(topo)
    qps = QpAllocator(2)
    h = nics(topo)
    victim = h[7]
    senders = [h[0], h[1], h[4], h[5]]  # two on the receiver's leaf, two across the spines
    flows = [flow(job, qps, s, victim) for s in senders]
    flows += [flow(job, qps, h[2], h[3]), flow(job, qps, h[6], h[2])]  # unrelated, uncongested
    eng = engine(topo, job, flows)
    eng.run(0.3)
    handled = {n.host: value(eng, n.host, "mlx5_0/1", "cnp_handled") for n in h}
    sent = {n.host: value(eng, n.host, "mlx5_0/1", "cnp_sent") for n in h}
    assert all(handled[s.host] > 0 for s in senders)
    assert all(v == 0 for host, v in handled.items() if host not in {s.host for s in senders})
    assert sent[victim.host] > 0 and sum(sent.values()) == sent[victim.host]
    assert sent[victim.host] == pytest.approx(sum(handled.values()), abs=len(senders))
    # DCQCN shares the bottleneck and keeps it busy
    assert rx_rate_bps(eng, victim, 0.1) > 0.9 * 100e9


def test_dcqcn_rate_drops_on_cnps_and_recovers_when_congestion_ends() -> None:
    _, eng, flows = incast(2, gbps=400)
    line = EngineParams().line_rate(400e9) * 8
    eng.run(0.1)
    assert eng.flow_rate_bps(0) < 0.75 * line and eng.flow_rate_bps(1) < 0.75 * line
    assert value(eng, flows[0].src.host, "mlx5_0/1", "cnp_handled") > 10
    eng.set_rate_limit(1, 1e6)  # the other sender nearly stops: congestion ends
    handled = value(eng, flows[0].src.host, "mlx5_0/1", "cnp_handled")
    eng.run(0.3)
    assert eng.flow_rate_bps(0) == pytest.approx(line, rel=1e-6)
    assert value(eng, flows[0].src.host, "mlx5_0/1", "cnp_handled") - handled < 50


def test_cnp_loss_leaves_the_sender_at_line_rate_and_pfc_takes_over() -> None:
    _, eng, flows = incast(4)
    lossy = flows[0].src
    eng.cnp_loss(lossy.host, lossy.netdev, 1.0, ignored=True)
    eng.run(0.2)
    assert value(eng, lossy.host, "mlx5_0/1", "cnp_handled") == 0
    assert value(eng, lossy.host, "mlx5_0/1", "cnp_ignored") > 0
    assert value(eng, flows[1].src.host, "mlx5_0/1", "cnp_handled") > 0
    assert value(eng, flows[0].dst.host, "mlx5_0/1", "cnp_sent") > 0
    assert eng.flow_rate_bps(0) > 2 * eng.flow_rate_bps(1)
    assert value(eng, lossy.host, "eth0", "pfc_rx_pause_duration_us", LOSSLESS) > 0


# --- PFC propagation, storms, deadlock


def test_pfc_pauses_propagate_upstream_to_the_senders() -> None:
    """Senders on leaf 1 reach a receiver on leaf 2 through the spine: without DCQCN the pause
    climbs from the receiver's leaf port to the spine, to leaf 1's uplink, to the sender NICs."""
    topo = fabric(8, spines=1, per_leaf=4)
    job = one_job(topo)
    qps = QpAllocator(4)
    h = nics(topo)
    flows = [flow(job, qps, h[k], h[7]) for k in range(3)] + [flow(job, qps, h[4], h[7])]
    eng = engine(topo, job, flows, dcqcn=False)
    eng.run(0.1)
    path = eng.flow_path(0)  # NIC -> leaf1 uplink -> spine down -> leaf2 down
    assert [p.kind for p in path] == ["nic", "up", "down", "down"]
    for p in path[:-1]:  # every hop before the bottleneck is held by its downstream neighbour
        assert eng.is_paused(p.device, p.name), p
        assert value(eng, p.device, p.name, "pfc_rx_pause", LOSSLESS) > 0
        assert value(eng, p.peer_device, p.peer_port, "pfc_tx_pause", LOSSLESS) > 0
    nic = h[0]
    assert value(eng, nic.host, "eth0", "pfc_rx_pause_duration_us", LOSSLESS) > 0.3 * 0.1e6
    assert not eng.is_paused(path[-1].device, path[-1].name)  # the receiver does not pause
    assert eng.byte_balance().dropped == 0.0


def test_pause_storm_from_one_nic_spreads_a_pause_tree() -> None:
    topo = fabric(8, spines=1, per_leaf=4)
    job = one_job(topo)
    qps = QpAllocator(5)
    h = nics(topo)
    stuck = h[7]
    flows = [flow(job, qps, h[0], stuck), flow(job, qps, h[5], stuck)]
    flows += [flow(job, qps, h[0], h[6]), flow(job, qps, h[1], h[2])]  # a victim sharing h0's NIC; a bystander
    eng = engine(topo, job, flows)
    eng.run(0.05)
    eng.pause_storm(stuck.host, stuck.netdev, start=0.06, end=0.5)
    eng.run(0.3)
    leaf_port = topo.attachment(stuck.host, 0)
    assert eng.is_pausing(stuck.host, "eth0")
    assert eng.is_paused(leaf_port.device, leaf_port.name)
    assert value(eng, stuck.host, "eth0", "pfc_tx_pause", LOSSLESS) > 0
    assert value(eng, leaf_port.device, leaf_port.name, "pfc_rx_pause_duration_us", LOSSLESS) > 0.2e6
    # the tree: senders towards the stuck NIC are paused, across the spine too
    for p in eng.flow_path(0)[:-1] + eng.flow_path(1)[:-1]:
        assert eng.is_paused(p.device, p.name), p
    # head-of-line blocking: h0's other flow goes nowhere either
    assert rx_rate_bps(eng, h[6], 0.05) < 1e9
    # a bystander on the same leaf is unaffected
    assert rx_rate_bps(eng, h[2], 0.05) > 0.95 * 100e9
    assert not eng.is_paused(h[1].host, "eth0")
    eng.run(0.3)  # the storm ends: traffic resumes
    assert not eng.is_pausing(stuck.host, "eth0")
    assert rx_rate_bps(eng, stuck, 0.1) > 0.9 * 100e9


def cyclic_engine(cyclic: bool) -> tuple[Engine, list[tuple[str, str]]]:
    """Two leaves, two spines, four senders at line rate, routes forced over the four leaf-spine
    links L1->S1->L2->S2. With `cyclic` every flow goes all the way round (as after a bad reroute):
    the buffer dependencies close a loop. Without, each flow crosses two links: same ports, no loop."""
    topo = fabric(4, spines=2, per_leaf=2)
    job = one_job(topo)
    qps = QpAllocator(6)
    h = nics(topo)  # gpu-001, gpu-002 on leaf 1; gpu-003, gpu-004 on leaf 2
    l1, l2 = "leaf-r0-01", "leaf-r0-02"

    def up(leaf: str, spine: str) -> tuple[str, str]:
        return leaf, next(p.name for p in topo.uplinks(leaf) if p.peer_device == spine)

    def down(spine: str, leaf: str) -> tuple[str, str]:
        return spine, topo.downlinks(spine, leaf)[0].name

    ring = [up(l1, "spine-01"), down("spine-01", l2), up(l2, "spine-02"), down("spine-02", l1)]
    turned = ring[2:] + ring[:2]
    if cyclic:
        routes = [(h[0], h[1], ring), (h[1], h[0], ring), (h[2], h[3], turned), (h[3], h[2], turned)]
    else:
        routes = [(h[0], h[2], ring[:2]), (h[1], h[2], ring[:2]), (h[2], h[0], ring[2:]), (h[3], h[0], ring[2:])]
    flows = [flow(job, qps, src, dst) for src, dst, _ in routes]
    eng = engine(topo, job, flows, dcqcn=False)
    for f, (src, dst, hops) in enumerate(routes):
        eng.reroute(f, [(src.host, src.netdev), *hops, (dst.leaf, dst.leaf_port)])
    return eng, ring


def test_cyclic_buffer_dependency_deadlocks_and_never_clears() -> None:
    eng, ring = cyclic_engine(cyclic=True)
    eng.run(0.3)
    assert all(eng.is_paused(d, p) for d, p in ring)
    before = {(d, p): value(eng, d, p, "tx_bytes") for d, p in ring}
    eng.run(0.2)
    moved = max(value(eng, d, p, "tx_bytes") - before[(d, p)] for d, p in ring)
    assert moved < 1e-6 * 0.2 * 12.5e9  # throughput 0 around the loop
    eng.stop_job("test/t")  # the load stops: the deadlock stays
    queued = eng.byte_balance().queued
    eng.run(1.0)
    assert all(eng.is_paused(d, p) for d, p in ring)
    assert eng.byte_balance().queued == pytest.approx(queued, rel=1e-9) and queued > 0
    assert value(eng, *ring[0], "queue_paused", LOSSLESS) == 1


def test_the_same_load_without_a_cycle_keeps_flowing() -> None:
    eng, ring = cyclic_engine(cyclic=False)
    eng.run(0.3)
    before = {(d, p): value(eng, d, p, "tx_bytes") for d, p in ring}
    eng.run(0.1)
    assert min(value(eng, d, p, "tx_bytes") - before[(d, p)] for d, p in ring) > 0.9 * 0.1 * 12.4e9
    eng.stop_job("test/t")
    eng.run(0.2)
    assert eng.byte_balance().queued < 1.0
    assert not any(eng.is_paused(d, p) for d, p in ring)


# --- jobs, links


def test_iterations_slow_down_under_incast_and_recover() -> None:
    topo = fabric(8, per_leaf=8)
    jobs = place_jobs(topo, [JobSpec("ring", 4, "ml", message_bytes=64 * MiB, compute_ms=20)])
    qps = QpAllocator(7)
    flows = collective_flows(jobs[0], topo, qps=qps)
    noisy = place_jobs(topo, [JobSpec("ring", 4, "ml"), JobSpec("noise", 4, "x", compute_ms=1e9)])[1]
    victim = flows[0].dst
    extra = [flow(noisy, qps, topo.nic(h, 0), victim) for h in noisy.hosts[:3]]
    eng = Engine(topo, [jobs[0], noisy], flows + extra, start=T0)
    eng.stop_job(noisy.job_id)
    eng.run(1.0)
    clean = np.median(eng.iteration_times("ml/ring"))
    n = len(eng.iterations)
    eng.resume_job(noisy.job_id)
    eng.run(1.0)
    hurt = np.median(eng.iteration_times("ml/ring")[n:])
    assert clean == pytest.approx(64 * MiB * 2 * 3 / 4 * EngineParams().wire_factor / 12.4e9, rel=0.1)
    assert hurt > 2.5 * clean


def test_link_down_reroutes_and_link_up_restores() -> None:
    topo = fabric(4, spines=2, per_leaf=2)
    job = one_job(topo)
    qps = QpAllocator(8)
    h = nics(topo)
    flows = [flow(job, qps, h[0], h[2]), flow(job, qps, h[1], h[3]), flow(job, qps, h[2], h[0])]
    eng = engine(topo, job, flows)
    eng.run(0.05)
    up = eng.flow_path(0)[1]
    eng.link_down(up.device, up.name, start=0.06, end=0.25)
    eng.run(0.1)
    assert all(p.id != up.id for f in range(3) for p in eng.flow_path(f))
    tx = value(eng, up.device, up.name, "tx_bytes")
    eng.run(0.05)
    assert value(eng, up.device, up.name, "tx_bytes") == tx
    assert value(eng, up.device, up.name, "oper_up") == 0
    assert value(eng, h[0].host, "eth0", "rx_bytes") > 0
    eng.run(0.1)
    assert value(eng, up.device, up.name, "oper_up") == 1
    assert eng.flow_path(0)[1].id == up.id
    bal = eng.byte_balance()
    assert abs(bal.error) < 1e-6 * bal.sent


# --- counters and snapshots


def small_run() -> tuple[Topology, Engine]:
    topo = fabric(6, spines=2, per_leaf=3)
    jobs = place_jobs(topo, [JobSpec("a", 6, "x", message_bytes=32 * MiB, compute_ms=10)])
    flows = collective_flows(jobs[0], topo, qps=QpAllocator(9))
    extra = [flow(jobs[0], QpAllocator(10), topo.nic("gpu-001", 0), topo.nic("gpu-005", 0), 8 * MiB)]
    eng = Engine(topo, jobs, flows + extra, start=T0)
    return topo, eng


def test_counters_are_monotonic_and_gauges_reset_on_read() -> None:
    _, eng = small_run()
    kinds = {m.name: m.kind for m in catalog.METRICS}
    snaps: list[dict[str, list[object]]] = []
    eng.run(1.0, on_poll=lambda ts, e: snaps.append(e.snapshot(ts).to_pydict()), poll_interval_s=0.1)
    assert len(snaps) == 10
    first = snaps[0]
    keys = list(zip(first["device"], first["port"], first["metric"], first["priority"], strict=True))
    counters = np.array([kinds[m] == "counter" for m in first["metric"]])
    values = np.array([s["value"] for s in snaps])
    assert all(s["device"] == first["device"] and s["metric"] == first["metric"] for s in snaps)
    assert (np.diff(values[:, counters], axis=0) >= 0).all()
    assert (values[:, counters] == np.floor(values[:, counters])).all()  # devices count in whole units
    assert values[-1, counters].max() > 1e9
    # watermarks are peaks since the last read: a read right after a read shows the present level
    wm = [k for k, key in enumerate(keys) if key[2] == "queue_watermark_bytes"]
    assert values[:, wm].max() > 0
    again = eng.snapshot().to_pydict()
    occ = {key: v for key, v in zip(keys, again["value"], strict=True) if key[2] == "queue_occupancy_bytes"}
    for k in wm:
        d, p, _, q = keys[k]
        assert again["value"][k] == pytest.approx(occ[(d, p, "queue_occupancy_bytes", q)])


def test_reboot_resets_only_that_device() -> None:
    topo, eng = small_run()
    eng.run(0.5)
    leaf = topo.leaves[0].name
    port = topo.ports_of(leaf)[0].name
    other = topo.hosts[0].name
    before_other = value(eng, other, "eth0", "tx_bytes")
    assert value(eng, leaf, port, "tx_bytes") > 0
    eng.reboot(leaf)
    assert value(eng, leaf, port, "tx_bytes") == 0
    assert value(eng, other, "eth0", "tx_bytes") == before_other
    eng.run(0.5)
    assert value(eng, leaf, port, "tx_bytes") > 0


def test_snapshot_conforms_and_raw_names_resolve_to_their_metric() -> None:
    topo, eng = small_run()
    eng.run(0.3)
    table = eng.snapshot(T0)
    assert table.schema.equals(conform("counters", table).schema)
    assert pa.types.is_dictionary(table.schema.field("device").type)
    d = table.to_pydict()
    assert set(d["source"]) == {"sim"} and set(d["ts"]) == {T0}
    assert set(d["role"]) == {"switch", "nic"}
    assert {h.name for h in topo.hosts} | {s.name for s in topo.switches} == set(d["device"])
    for role, port, metric, prio, raw in zip(d["role"], d["port"], d["metric"], d["priority"], d["raw_name"],
                                             strict=True):  # fmt: skip
        if role == "switch":
            vendors: tuple[str, ...] = SWITCH_VENDORS
        else:
            vendors = ("mlx5_rdma",) if port.startswith("mlx5_") else ("mlx5",)
        resolved = next(r for v in vendors if (r := catalog.resolve(v, raw)) is not None)
        # the priority is in the name ({p}) or, for queue and PG objects, in the key (the row's priority)
        assert resolved == (metric, prio if "{p}" in _template(metric, vendors) else -1)
    names = set(d["raw_name"])
    assert {"SAI_PORT_STAT_PFC_3_RX_PKTS", "rx_prio3_pause_duration", "np_cnp_sent", "rp_cnp_handled"} <= names
    assert {"SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS", "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES"} <= names
    # one device only, built the same way
    one = eng.snapshot(T0, devices=[topo.hosts[0].name])
    assert set(one.column("device").to_pylist()) == {topo.hosts[0].name} and one.num_rows > 20


def _template(metric: str, vendors: tuple[str, ...]) -> str:
    names = catalog.METRICS_BY_NAME[metric].vendor_names
    return next(names[v][0] for v in vendors if names.get(v))


def test_runs_are_reproducible_from_the_seed() -> None:
    def run(seed: int) -> list[float]:
        topo = fabric(6, spines=2, per_leaf=3)
        jobs = place_jobs(topo, [JobSpec("a", 3, "x"), JobSpec("b", 3, "y")])
        qps = QpAllocator(seed)
        flows = [f for j in jobs for f in collective_flows(j, topo, qps=qps)]
        eng = Engine(topo, jobs, flows, seed=seed, start=T0)
        eng.run(0.5)
        return eng.snapshot().column("value").to_pylist()

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_idle_time_is_skipped_and_time_advances_exactly() -> None:
    _, eng, _ = incast(2)
    eng.stop_job("test/t")
    eng.run(0.05)
    polls: list[dt.datetime] = []
    eng.run(30.0, on_poll=lambda ts, e: polls.append(ts))
    assert eng.now == pytest.approx(30.05)
    assert [p - T0 for p in polls] == [dt.timedelta(seconds=s) for s in range(1, 31)]
    assert eng.step_stats()["skipped"] > 29_000
    assert [round(t, 3) for t in eng.steps(0.003)] == [30.051, 30.052, 30.053]


def test_forced_routes_are_validated() -> None:
    topo, eng, flows = incast(2)
    src, dst = flows[0].src, flows[0].dst
    with pytest.raises(ValueError, match="source NIC"):
        eng.reroute(0, [(dst.leaf, dst.leaf_port)])
    with pytest.raises(ValueError, match="not cabled"):
        eng.reroute(0, [(src.host, src.netdev), (src.host, src.netdev)])
    with pytest.raises(ValueError, match="receiver"):
        eng.reroute(0, [(src.host, src.netdev), topo.attachment(flows[1].src.host, 0)])
    eng.reroute(0, [(src.host, src.netdev), (dst.leaf, dst.leaf_port)])
    assert [p.kind for p in eng.flow_path(0)] == ["nic", "down"]
