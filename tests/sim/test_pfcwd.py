"""The PFC watchdog in the engine: storms detected, mitigated (drop, forward, alert) and restored as SONiC
does; congestion that is no storm left alone; off by default."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow.compute as pc

from rocescope.sim.engine import Engine
from rocescope.sim.incidents import build_world
from rocescope.sim.jobs import Flow, JobSpec, place_jobs
from rocescope.sim.params import EngineParams
from rocescope.sim.roce import QpAllocator, udp_sport
from rocescope.sim.scenario import load_scenario
from rocescope.sim.topology import FabricSpec, Nic, Topology

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
LOSSLESS = 3
FOREVER = 10**15
PFCWD = ("pfcwd_storm_detected", "pfcwd_storm_restored", "pfcwd_tx_dropped_packets", "pfcwd_rx_dropped_packets")


def storm_fabric(**params: Any) -> tuple[Engine, list[Nic]]:
    """Eight 100G hosts, four per leaf, one spine; gpu-008 is the NIC that will storm. gpu-001 and gpu-006
    send to it (one across the spine), gpu-001 also to gpu-007 (a victim behind the same NIC), gpu-002 to
    gpu-003 (a bystander); the stuck NIC itself sends to gpu-005."""
    spec = FabricSpec(hosts=8, rails=1, spines=1, host_ports_per_leaf=4, host_speed_gbps=100, uplink_speed_gbps=100)
    topo = Topology(spec)
    job = place_jobs(topo, [JobSpec("t", 8, "test", compute_ms=1e9)])[0]
    qps = QpAllocator(5)
    h = [topo.nic(d.name, 0) for d in topo.hosts]

    def flow(src: Nic, dst: Nic) -> Flow:
        sq, dq = qps.allocate(src.host, src.rdma_dev), qps.allocate(dst.host, dst.rdma_dev)
        return Flow(job.job_id, "ring", src, dst, 0, 1, sq, dq, udp_sport(sq, dq), FOREVER)

    flows = [flow(h[0], h[7]), flow(h[5], h[7]), flow(h[0], h[6]), flow(h[1], h[2]), flow(h[7], h[4])]
    return Engine(topo, [job], flows, params=EngineParams(**params), start=T0, stagger=False), h


def counter(eng: Engine, nic: Nic, metric: str) -> float:
    """A counter of the leaf port facing `nic`, lossless priority."""
    return eng.counter(nic.leaf, nic.leaf_port, metric, LOSSLESS)


def rx_bps(eng: Engine, nic: Nic, seconds: float) -> float:
    before = eng.counter(nic.host, nic.netdev, "rx_bytes")
    eng.run(seconds)
    return (eng.counter(nic.host, nic.netdev, "rx_bytes") - before) * 8 / seconds


def test_a_storm_is_detected_within_two_polls_dropped_and_restored_when_the_pauses_stop() -> None:
    eng, h = storm_fabric(pfcwd=True)
    stuck = h[7]
    eng.pause_storm(stuck.host, stuck.netdev, start=0.1, end=1.5)
    eng.run(0.5)  # the poll at 0.2 s takes the baseline; 0.2-0.4 s is fully paused: stormed at 0.4 s
    assert counter(eng, stuck, "pfcwd_storm_detected") == 1
    edge = eng.port_id((stuck.leaf, stuck.leaf_port))
    assert eng.watchdog is not None and edge in eng.watchdog.stormed_ports()
    eng.run(0.5)
    # the queues upstream, stuck in the pause tree at the same poll, were stormed too; once the edge
    # drops, their pauses stop and they are restored: only the edge stays stormed
    assert eng.watchdog.stormed_ports() == [edge]
    dropped = counter(eng, stuck, "pfcwd_tx_dropped_packets")
    assert dropped > 0
    # SONiC derives the watchdog's drop counts from the queue's own drop counter: both rise together
    assert counter(eng, stuck, "queue_dropped_packets") == dropped
    # what the stuck NIC sends in on the lossless priority is dropped at the stormed port's ingress
    assert counter(eng, stuck, "pfcwd_rx_dropped_packets") == counter(eng, stuck, "pg_dropped_packets") > 0
    # mitigated: the senders' ports are not held by the pause tree, and the victim behind gpu-001 flows again
    assert not eng.is_paused(h[0].host, h[0].netdev)
    assert not eng.is_paused(h[5].host, h[5].netdev)
    assert rx_bps(eng, h[6], 0.2) > 0.3 * 100e9
    assert counter(eng, stuck, "pfcwd_storm_restored") == 0  # pauses keep arriving while it storms
    eng.run(1.0)  # the storm ended at 1.5 s: restored one quiet poll later
    assert counter(eng, stuck, "pfcwd_storm_restored") == 1
    assert eng.watchdog.stormed_ports() == []
    assert rx_bps(eng, stuck, 0.2) > 0.9 * 100e9


def test_without_the_watchdog_the_same_storm_spreads_its_pause_tree() -> None:
    eng, h = storm_fabric()
    eng.pause_storm(h[7].host, h[7].netdev, start=0.1, end=1.5)
    eng.run(1.0)
    assert eng.watchdog is None
    assert eng.is_paused(h[0].host, h[0].netdev) and eng.is_paused(h[5].host, h[5].netdev)
    assert rx_bps(eng, h[6], 0.2) < 1e9


def test_forward_ignores_the_pauses_and_alert_only_counts() -> None:
    fwd, h = storm_fabric(pfcwd=True, pfcwd_action="forward")
    fwd.pause_storm(h[7].host, h[7].netdev, start=0.1)
    fwd.run(1.0)
    assert counter(fwd, h[7], "pfcwd_storm_detected") == 1
    assert counter(fwd, h[7], "pfcwd_tx_dropped_packets") == 0
    assert rx_bps(fwd, h[7], 0.2) > 0.9 * 100e9  # the stuck NIC's queue is sent regardless of its pauses
    alert, h = storm_fabric(pfcwd=True, pfcwd_action="alert")
    alert.pause_storm(h[7].host, h[7].netdev, start=0.1)
    alert.run(1.0)
    assert counter(alert, h[7], "pfcwd_storm_detected") == 1
    assert alert.is_paused(h[0].host, h[0].netdev)  # nothing mitigated
    assert rx_bps(alert, h[7], 0.2) < 1e9


def test_a_longer_detection_time_needs_more_stuck_polls() -> None:
    eng, h = storm_fabric(pfcwd=True, pfcwd_detection_s=1.0)
    eng.pause_storm(h[7].host, h[7].netdev, start=0.1)
    eng.run(0.9)
    assert counter(eng, h[7], "pfcwd_storm_detected") == 0
    eng.run(0.6)
    assert counter(eng, h[7], "pfcwd_storm_detected") == 1


def test_congestion_is_no_storm_and_polling_changes_no_counter() -> None:
    """An incast pauses its senders for a minute, but its queues keep sending: the watchdog stays quiet,
    and the run is bit for bit the run without it (its rows aside)."""
    values = []
    for on in (False, True):
        sc = load_scenario("incast_small").model_copy(update={"params": {"pfcwd": on}})
        world = build_world(sc, 63.0, start=T0)
        polls: list[np.ndarray] = []

        def poll(ts: dt.datetime, eng: Engine, polls: list[np.ndarray] = polls) -> None:
            table = eng.snapshot(ts)
            metric = pc.cast(table.column("metric"), "string")
            watchdog = pc.starts_with(metric, "pfcwd")
            if eng.watchdog is not None:
                assert pc.sum(table.filter(watchdog).column("value")).as_py() == 0
            polls.append(table.filter(pc.invert(watchdog)).column("value").to_numpy())

        world.engine.run(world.duration_s, poll, 1.0)
        assert world.engine.counter("gpu-001", "eth0", "pfc_rx_pause", LOSSLESS) > 0  # the senders were paused
        values.append(np.concatenate(polls))
    assert np.array_equal(values[0], values[1])


def test_watchdog_counters_exist_only_where_it_runs() -> None:
    off, _ = storm_fabric()
    on, _ = storm_fabric(pfcwd=True)
    assert not set(PFCWD) & set(off.snapshot().column("metric").to_pylist())
    rows = on.snapshot().to_pylist()
    watched = {(r["device"], r["priority"]) for r in rows if r["metric"] in PFCWD}
    assert watched == {("leaf-r0-01", LOSSLESS), ("leaf-r0-02", LOSSLESS), ("spine-01", LOSSLESS)}
    raw = {r["raw_name"] for r in rows if r["metric"] in PFCWD}
    assert raw == {
        "PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED",
        "PFC_WD_QUEUE_STATS_DEADLOCK_RESTORED",
        "PFC_WD_QUEUE_STATS_TX_DROPPED_PACKETS",
        "PFC_WD_QUEUE_STATS_RX_DROPPED_PACKETS",
    }
