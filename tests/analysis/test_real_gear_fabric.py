"""The ECMP and CNP detectors fed telemetry shaped like real gear, directly (see `test_real_gear.py`): uplink
groups whose members' 1 s samples show communication phases, spines nobody polls, the CNP loop's balance where
the fabric drops CNPs, where a NIC drops them, and where the peers are not monitored at all."""

from __future__ import annotations

import datetime as dt
import math

import pytest

from rocescope.analysis.coverage import coverage
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.report.topology import topology_figure
from rocescope.analysis.run import analyze
from rocescope.pipeline.store import Store

from gear import HOSTS, LINE, PORT_CLOCK, PORTS, QUEUE_CLOCK, UPLINKS, fabric, found, nic_clock
from telemetry import Clock, Telemetry, steps


def two_leaves(t: Telemetry) -> None:
    """leaf1 with the nine hosts, leaf2 with nine more of the same job, their host ports 40% busy."""
    for i, host in enumerate(HOSTS, start=1):
        t.link(host, "eth0", "leaf1", PORTS[host])
        t.endpoint("team-a/train", host, "eth0", "mlx5_0", f"10.0.0.{i}", i - 1)
        t.endpoint("team-a/train", f"far-{i}", "eth0", "mlx5_0", f"10.0.2.{i}", 100 + i)
        t.link(f"far-{i}", "eth0", "leaf2", f"Ethernet1/{i}")
        for d in ("leaf1", "leaf2"):
            t.counter(d, "switch", f"Ethernet1/{i}", "tx_bytes", steps(base=0.4 * LINE), PORT_CLOCK)


def test_ecmp_imbalance_on_a_single_link_fabric(store: Store, now: dt.datetime) -> None:
    t = Telemetry(now, 240)
    two_leaves(t)
    for k, port in enumerate(UPLINKS, start=1):  # switch-side LLDP on the uplinks, spines nobody polls
        t.link("leaf1", port, f"spine{k}", "Ethernet1/1")
        t.link("leaf2", port, f"spine{k}", "Ethernet1/2")
        during = 0.97 * LINE if k == 1 else 0.04 * LINE  # elephants collide on the first uplink
        shape = steps((60.0, 180.0, during), base=0.45 * LINE)
        t.counter("leaf1", "switch", port, "tx_bytes", shape, Clock(1.0, 0.2 + 0.3 * k))
    t.land(store)

    (imb,) = found(store, t, "ecmp_imbalance")
    assert imb.ports[0] == "leaf1:Ethernet2/1" and imb.devices == ("leaf1", "spine1")
    assert imb.evidence["hot_share"] > 0.9 and imb.evidence["speed_source"] == "inferred"
    assert abs((imb.start - t.window.start).total_seconds() - 60) <= 10
    assert imb.job_ids == ("team-a/train",)


def test_an_imbalance_that_dips_below_its_bar_for_a_while_is_one_finding(store: Store, now: dt.datetime) -> None:
    """Elephants collide on the first uplink at 97% of line rate, ease to 85% for 40 s (still four packets of queue
    short of nothing: M/D/1 queues one at 75%) and come back: one imbalance, not two (hysteresis)."""
    t = Telemetry(now, 240)
    two_leaves(t)
    for k, port in enumerate(UPLINKS, start=1):
        t.link("leaf1", port, f"spine{k}", "Ethernet1/1")
        t.link("leaf2", port, f"spine{k}", "Ethernet1/2")
        hot = [(30.0, 90.0, 0.97 * LINE), (90.0, 130.0, 0.85 * LINE), (130.0, 190.0, 0.97 * LINE)]
        shape = steps(*hot, base=0.45 * LINE) if k == 1 else steps((30.0, 190.0, 0.04 * LINE), base=0.45 * LINE)
        t.counter("leaf1", "switch", port, "tx_bytes", shape, Clock(1.0, 0.2 + 0.3 * k))
    t.land(store)

    (imb,) = found(store, t, "ecmp_imbalance")
    assert imb.ports[0] == "leaf1:Ethernet2/1"
    assert abs((imb.start - t.window.start).total_seconds() - 30) <= 10
    assert abs((imb.end - t.window.start).total_seconds() - 190) <= 10


@pytest.mark.parametrize("hashing", ["colliding", "even"])
def test_an_uplink_saturated_in_every_communication_phase_is_an_imbalance_whatever_its_mean(
    store: Store, now: dt.datetime, hashing: str
) -> None:
    """Training alternates communication (3.2 s at line rate) and compute (1.8 s idle): the hot uplink carries 7x
    each sibling's bytes and is saturated at its 90th percentile, its queue marking, while its mean is 64%. An
    imbalance relative to its group. The same phases spread evenly over four uplinks saturate all of them in
    every phase: demand, not hashing, no imbalance."""
    t = Telemetry(now, 240)
    two_leaves(t)
    uplinks = [*UPLINKS, "Ethernet2/3", "Ethernet2/4"]
    phases = [(float(s), s + 3.2) for s in range(0, 240, 5)]
    for k, port in enumerate(uplinks, start=1):
        t.link("leaf1", port, f"spine{k}", "Ethernet1/1")
        t.link("leaf2", port, f"spine{k}", "Ethernet1/2")
        rate = LINE if k == 1 or hashing == "even" else LINE / 7
        t.counter("leaf1", "switch", port, "tx_bytes", steps(*[(a, b, rate) for a, b in phases]), Clock(1.0, 0.2))
        marks = steps(*[(a, b, 1e5) for a, b in phases]) if rate == LINE else steps()
        t.counter("leaf1", "switch", port, "queue_ecn_marked_packets", marks, QUEUE_CLOCK, priority=3)
    t.land(store)

    found_ = found(store, t, "ecmp_imbalance")
    if hashing == "even":
        assert found_ == []
        return
    (imb,) = found_
    assert imb.ports[0] == "leaf1:Ethernet2/1" and imb.evidence["hot_p90_utilization"] > 0.9
    assert 0.55 < imb.evidence["hot_utilization"] < 0.75 and imb.evidence["sibling_p90_utilization"] < 0.2


def unhandled_cnps(now: dt.datetime) -> tuple[Telemetry, tuple[float, float]]:
    """gpu-05 and gpu-06 send 1500 CNPs/s from 60 s to 170 s that no NIC handles; every NIC counts both."""
    t = Telemetry(now, 240)
    fabric(t)
    on = (60.0, 170.0)
    for i, host in enumerate(HOSTS, start=1):
        sent = steps((*on, 1500.0)) if host in ("gpu-05", "gpu-06") else steps()
        t.counter(host, "nic", "mlx5_0/1", "cnp_sent", sent, nic_clock(i))
        t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps(), nic_clock(i))
    return t, on


@pytest.mark.parametrize("counted_as", ["lossy queue drops", "port out-discards only"])
def test_cnps_lost_in_the_fabric_are_one_finding_at_the_receivers_and_the_dropping_queue(
    store: Store, now: dt.datetime, counted_as: str
) -> None:
    """Where the switch counts no lossy queue (Cumulus counts the RoCE class only, SR Linux no queue drops at
    all), the port's out-discards point at the dropping port."""
    t, on = unhandled_cnps(now)
    if counted_as == "lossy queue drops":
        drops = steps((*on, 3000.0))
        t.counter("leaf1", "switch", "Ethernet2/1", "queue_dropped_packets", drops, QUEUE_CLOCK, priority=6)
    else:
        t.counter("leaf1", "switch", "Ethernet2/1", "tx_discards", steps((*on, 3000.0)), PORT_CLOCK)
        t.counter("leaf1", "switch", "Ethernet2/2", "tx_discards", steps(), PORT_CLOCK)
    for receiver in ("gpu-05", "gpu-06"):  # their QPs: the CNPs go to job-mates that count what they handle
        for peer in range(1, 5):
            t.qp(receiver, "mlx5_0", f"10.0.0.{peer}")
    t.land(store)

    (loss,) = found(store, t, "cnp_loss")
    assert loss.evidence["where"] == "fabric" and loss.evidence["verifiable"] and loss.severity == "critical"
    assert {"gpu-05:eth0", "gpu-06:eth0", "leaf1:Ethernet2/1"} <= set(loss.ports)
    assert abs((loss.start - t.window.start).total_seconds() - on[0]) <= 10
    items = {it.where: it for it in coverage(Frames(store, t.window)).items if it.kind == "cnp_loss"}
    assert items["gpu-05:eth0"].state == "judged"  # its CNPs go to NICs that count them


@pytest.mark.parametrize("peers", ["a storage array nobody monitors", "unknown"])
def test_cnps_to_peers_nobody_counts_are_unverifiable_not_lost(store: Store, now: dt.datetime, peers: str) -> None:
    """Two NICs send CNPs for 110 s that no monitored NIC handles: their QPs go to a storage array that reports
    no CNP counters (or nothing says where they go). Whether the CNPs were lost or handled where nobody counts
    cannot be told: one finding, info, unverifiable, never a critical CNP loss."""
    t, _ = unhandled_cnps(now)
    for host in ("gpu-05", "gpu-06"):
        if peers != "unknown":
            t.qp(host, "mlx5_0", "10.0.9.99")
    t.land(store)

    (loss,) = found(store, t, "cnp_loss")
    assert loss.severity == "info" and not loss.evidence["verifiable"] and "unverifiable" in loss.summary
    assert loss.evidence["unmonitored_peers"] == (None if peers == "unknown" else ["10.0.9.99"])
    # the coverage map says so of the NIC for the whole window, whether or not a deficit showed (issue 32)
    items = {it.where: it for it in coverage(Frames(store, t.window)).items if it.kind == "cnp_loss"}
    nic = items["gpu-05:eth0"]
    assert nic.state == "judged_with_caveat" and "unverifiable" in nic.reason
    assert ("unknown" if peers == "unknown" else "10.0.9.99") in nic.reason


def test_partial_cnp_loss_at_one_nic(store: Store, now: dt.datetime) -> None:
    t = Telemetry(now, 240)
    fabric(t)
    on, senders = (60.0, 170.0), HOSTS[:4]
    for i, host in enumerate(HOSTS, start=1):
        handled = 500.0 if host in senders else 0.0
        if host == "gpu-02":
            handled = 150.0  # it handles 30% of what it is sent
        t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*on, handled)), nic_clock(i))
        t.counter(
            host, "nic", "mlx5_0/1", "cnp_sent", steps((*on, 2000.0)) if host == "gpu-09" else steps(), nic_clock(i)
        )
    t.land(store)

    (loss,) = found(store, t, "cnp_loss")
    assert loss.evidence["where"] == "nic" and loss.ports == ("gpu-02:mlx5_0/1", "gpu-02:eth0")
    assert 0.2 < loss.evidence["handled_share"] < 0.4


@pytest.mark.parametrize("healthy", [1, 6])
def test_a_deaf_sender_of_a_short_incast_that_pfc_never_paused(store: Store, now: dt.datetime, healthy: int) -> None:
    """A 5 s incast into gpu-09 (one 10 s bucket): gpu-02 handles none of its CNPs. With one other sender, DCQCN
    backs that one off and gpu-02 takes the line rate: it is never paused, and what shows it in the congestion is
    its queue pair to gpu-09, which sends CNPs meanwhile. gpu-03 has a queue pair to gpu-09 too and handles nearly
    none, but the lost CNPs are gpu-02's shortfall; none are left to explain gpu-03's. The loss lasts one bucket:
    it is a finding only where it exceeds what the NICs' reads at the bucket's edges could move (1 s reads: a fifth
    of what was sent and handled), in any window; among seven senders the same deficit could be read skew, and with
    nothing but a queue pair to show gpu-02 in the congestion, one bucket's loss that the reads settle could be any
    sender's (an exam draw, 60631f4 cumulus incast_large 997590630014: gpu-003 mlx5_3, paired only, took one)."""
    t = Telemetry(now, 240)
    fabric(t)
    first = math.ceil(t.window.start.timestamp() / 10) * 10 - t.window.start.timestamp()
    on = (first + 102.0, first + 107.0)
    senders = ["gpu-01", *HOSTS[3 : 3 + healthy - 1]]
    for i, host in enumerate(HOSTS, start=1):
        handled = 1000.0 if host in senders else 2.0 if host == "gpu-03" else 0.0
        sent = (1000.0 * healthy + 600.0) if host == "gpu-09" else 0.0
        t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*on, handled)), nic_clock(i))
        t.counter(host, "nic", "mlx5_0/1", "cnp_sent", steps((*on, sent)), nic_clock(i))
        t.counter(host, "nic", "mlx5_0/1", "pfc_rx_pause", steps(), nic_clock(i), priority=3)
        if host in (*senders, "gpu-02", "gpu-03"):  # the incast's senders and gpu-03: queue pairs to gpu-09
            t.qp(host, "mlx5_0", "10.0.0.9")
    t.land(store)

    at = t.window.start + dt.timedelta(seconds=first)
    for window in (
        t.window,
        Window(t.window.start, at + dt.timedelta(seconds=110.5)),  # ends at the bucket's edge
        Window(at + dt.timedelta(seconds=100), t.window.end),  # starts there
    ):
        losses = [f for f in analyze(store, window, write=False).findings if f.kind == "cnp_loss"]
        assert [f.ports for f in losses] == ([("gpu-02:mlx5_0/1", "gpu-02:eth0")] if healthy == 1 else []), window
        assert all((f.end - f.start).total_seconds() <= 10.0 + 1e-6 and f.evidence["where"] == "nic" for f in losses)


@pytest.mark.parametrize("peer", ["a storage array nobody monitors", "a monitored host no inventory names"])
def test_cnps_a_peer_nobody_counts_may_have_handled_do_not_make_a_nic_that_handles_fewer_a_suspect(
    store: Store, now: dt.datetime, peer: str
) -> None:
    """As `test_partial_cnp_loss_at_one_nic`, but gpu-09 also has a QP to 10.0.9.99: where that is a storage array
    nobody monitors, the 350 CNPs/s the job's NICs do not handle may be the ones gpu-09 sent the array, so gpu-02
    handling fewer than its job-mates is no evidence of loss. Where the other end of that QP reports it (gpu-01's
    QP numbered as its remote, pointing back), 10.0.9.99 is gpu-01's, which counts CNPs: the loss is gpu-02's.
    The incast begins a second before a 10 s bucket's edge, the hardest place for read skew: the first bucket holds a
    second of it, and NICs whose reads straddle the edge put that second's CNPs in either bucket (a one-bucket "loss"
    at gpu-01 there while read skew was taken from the quiet bucket's average instead of the incast's rate)."""
    now = now.replace(second=now.second // 10 * 10) - dt.timedelta(seconds=1)  # `on` starts at second 9 of 10
    t = Telemetry(now, 240)
    fabric(t)
    on, senders = (60.0, 170.0), HOSTS[:4]
    for i, host in enumerate(HOSTS, start=1):
        handled = 150.0 if host == "gpu-02" else 500.0 if host in senders else 0.0
        t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*on, handled)), nic_clock(i))
        t.counter(
            host, "nic", "mlx5_0/1", "cnp_sent", steps((*on, 2000.0)) if host == "gpu-09" else steps(), nic_clock(i)
        )
    t.qp("gpu-09", "mlx5_0", "10.0.9.99", qpn=7001, dest_qpn=7002)
    if peer == "a monitored host no inventory names":
        t.qp("gpu-01", "mlx5_0", "10.0.0.9", qpn=7002, dest_qpn=7001)
    t.land(store)
    loss = found(store, t, "cnp_loss")
    if peer == "a storage array nobody monitors":
        assert loss == []
    else:
        assert [f.ports for f in loss] == [("gpu-02:mlx5_0/1", "gpu-02:eth0")]


def test_a_spine_uplink_imbalanced_towards_the_super_spines_of_a_three_tier_fabric(
    store: Store, now: dt.datetime
) -> None:
    """A 3-tier fabric: leaf1 and leaf2 under spine1 and spine2, each spine with two uplinks to the super-spines
    ss1 and ss2 (switch-side LLDP, super-spines nobody polls). In every communication phase spine1's uplink to
    ss1 is saturated, marking, at 7x its sibling's bytes: an imbalance at the spine tier, towards the super-spines.
    The super-spines are the top tier, not spines facing leaves."""
    t = Telemetry(now, 240)
    two_leaves(t)
    phases = [(float(s), s + 3.2) for s in range(0, 240, 5)]
    for k, spine in enumerate(("spine1", "spine2"), start=1):
        t.link("leaf1", UPLINKS[k - 1], spine, "Ethernet1/1")
        t.link("leaf2", UPLINKS[k - 1], spine, "Ethernet1/2")
        for j, top in enumerate(("ss1", "ss2"), start=1):
            t.link(spine, f"Ethernet3/{j}", top, f"Ethernet1/{k}")
            rate = LINE if (spine, top) == ("spine1", "ss1") else LINE / 7
            busy = steps(*[(a, b, rate) for a, b in phases])
            t.counter(spine, "switch", f"Ethernet3/{j}", "tx_bytes", busy, Clock(1.0, 0.2 + 0.1 * j))
            marks = steps(*[(a, b, 1e5) for a, b in phases]) if rate == LINE else steps()
            t.counter(spine, "switch", f"Ethernet3/{j}", "queue_ecn_marked_packets", marks, QUEUE_CLOCK, priority=3)
        for port in ("Ethernet1/1", "Ethernet1/2"):
            t.counter(spine, "switch", port, "tx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
    t.land(store)

    fab = Fabric.from_frames(Frames(store, t.window))
    assert fab.super_spines == {"ss1", "ss2"} and fab.spines - fab.super_spines == {"spine1", "spine2"}
    (imb,) = found(store, t, "ecmp_imbalance")
    assert imb.ports[0] == "spine1:Ethernet3/1" and imb.devices == ("spine1", "ss1")
    assert imb.evidence["hot_p90_utilization"] > 0.9
    # the report's topology draws the super-spines as a row of their own, named on its axis
    figure = topology_figure(fab, [], "3-tier")
    (axes,) = figure.axes
    assert [x.get_text() for x in axes.get_yticklabels()] == ["hosts", "leaves", "spines", "super-spines"]
    assert {x.get_text() for x in axes.texts} >= {"ss1", "ss2", "spine1"}
