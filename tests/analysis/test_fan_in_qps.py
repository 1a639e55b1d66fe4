"""Fan-in senders where queue pairs are collected (`qp_owners`, from eBPF or `rdma resource show qp`): a NIC
handling CNPs is the receiver's sender when its pairs reach the receiver's address, whatever its jobs, and no
sender when its pairs are collected and all go elsewhere, job-mate or not. Telemetry shaped as in
`test_real_gear.py` (leaf ports read every second, NICs on their own clocks)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from rocescope.pipeline.store import Store

from gear import HOSTS, LINE, PORT_CLOCK, PORTS, found, nic_clock
from telemetry import Telemetry, steps


def incast_into_gpu09(
    store: Store, now: dt.datetime, job_of: Callable[[str], str], qp_to: Callable[[int], str]
) -> Telemetry:
    """gpu-09's port saturated for 90 s while every other NIC handles CNPs; `job_of(host)` places each host,
    `qp_to(i)` is the address the i-th host's queue pair goes to ("" for none collected)."""
    t = Telemetry(now, 200)
    for i, host in enumerate(HOSTS, start=1):
        t.link(host, "eth0", "leaf1", PORTS[host])
        t.endpoint(job_of(host), host, "eth0", "mlx5_0", f"10.0.0.{i}", i - 1)
        t.counter("leaf1", "switch", PORTS[host], "rx_bytes", steps(base=0.2 * LINE), PORT_CLOCK)
    receiver, on = "gpu-09", (50.0, 140.0)
    for i, host in enumerate(HOSTS, start=1):
        tx = steps((*on, 0.97 * LINE), base=0.2 * LINE) if host == receiver else steps(base=0.2 * LINE)
        t.counter("leaf1", "switch", PORTS[host], "tx_bytes", tx, PORT_CLOCK)
        if host != receiver:
            t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*on, 300.0)), nic_clock(i))
            if qp_to(i):
                t.qp(host, "mlx5_0", qp_to(i))
    t.counter(receiver, "nic", "mlx5_0/1", "cnp_sent", steps((*on, 2500.0)), nic_clock(9))
    t.land(store)
    return t


def test_senders_of_another_job_count_when_their_qps_reach_the_receiver(store: Store, now: dt.datetime) -> None:
    t = incast_into_gpu09(
        store,
        now,
        lambda host: "team-a/train" if host == "gpu-09" else "team-s/storage",  # checkpoint readers of another team
        lambda i: "10.0.0.9" if i <= 5 else "",  # only five of them talk to the receiver
    )

    (incast,) = found(store, t, "incast")
    assert {s["nic"] for s in incast.evidence["senders"]} == {f"gpu-0{i}:eth0" for i in range(1, 6)}
    assert "qp_owners" in incast.evidence["sender_sources"]


def test_a_job_mate_whose_collected_qps_never_reach_the_receiver_is_no_sender(store: Store, now: dt.datetime) -> None:
    """One busy job on every host, all of whose NICs handle CNPs (an all-to-all marks everywhere): where a NIC's queue
    pairs are collected and none goes to the receiver's address, it sends its RoCE elsewhere and is no sender of this
    incast, job-mate or not; a NIC whose QPs nobody collects stays a candidate (fan-in never from "the job's peers"
    alone, issue 29.1)."""
    t = incast_into_gpu09(
        store,
        now,
        lambda host: "team-a/train",
        # gpu-04..06's pairs go to gpu-01 (collected, never the receiver); gpu-07 and gpu-08 collect none
        lambda i: "10.0.0.9" if i <= 3 else "10.0.0.1" if i <= 6 else "",
    )
    (incast,) = found(store, t, "incast")
    senders = {s["nic"] for s in incast.evidence["senders"]}
    assert senders == {f"gpu-0{i}:eth0" for i in (1, 2, 3, 7, 8)}  # gpu-07, gpu-08: no QP collected, kept
