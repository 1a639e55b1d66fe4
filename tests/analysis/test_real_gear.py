"""The detectors fed telemetry shaped like real gear, directly: skewed device clocks, SONiC's cadences (ports
1 s, queues 10 s, watermarks 60 s), Arista slash port names, LLDP from the hosts only, no port speed
anywhere, no pause duration (Broadcom), PFC watchdog counters. Every case checks one finding per incident,
the right kind and the right port, and no finding of the kinds that look alike."""

from __future__ import annotations

import datetime as dt

import pytest

from rocescope.pipeline.store import Store

from gear import HOSTS, LINE, PORT_CLOCK, PORTS, QUEUE_CLOCK, UPLINKS, WM_CLOCK, fabric, found, nic_clock
from telemetry import Clock, Telemetry, steps

WM_CLOCK_10S = Clock(10.0, 0.42)  # watermarks read every 10 s (Cumulus, SONiC's queue watermark at 10 s)


def test_incast_at_sonic_cadences_with_skewed_clocks_slash_names_and_no_speed(store: Store, now: dt.datetime) -> None:
    t = Telemetry(now, 240)
    fabric(t)
    receiver, senders = "gpu-09", HOSTS[:8]
    on = (60.0, 150.0)
    for host in HOSTS:
        port, i = PORTS[host], HOSTS.index(host) + 1
        tx = steps((*on, 0.98 * LINE), base=0.3 * LINE) if host == receiver else steps(base=0.3 * LINE)
        t.counter("leaf1", "switch", port, "tx_bytes", tx, PORT_CLOCK)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
        if host in senders:  # DCQCN cuts them; PFC holds them back most of the time
            t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*on, 400.0)), nic_clock(i))
            t.counter("leaf1", "switch", port, "pfc_tx_pause", steps((*on, 300.0)), PORT_CLOCK, priority=3)
            t.counter(host, "nic", "eth0", "pfc_rx_pause", steps((*on, 300.0)), nic_clock(i), priority=3)
    t.counter(receiver, "nic", "mlx5_0/1", "cnp_sent", steps((*on, 3200.0)), nic_clock(9))
    t.counter("leaf1", "switch", PORTS[receiver], "queue_ecn_marked_packets", steps((*on, 2e5)), QUEUE_CLOCK, 3)
    t.gauge("leaf1", "switch", PORTS[receiver], "queue_watermark_bytes", steps((*on, 9e6), base=4e4), WM_CLOCK, 3)
    t.land(store)

    (incast,) = found(store, t, "incast")
    assert incast.ports[:2] == ("leaf1:Ethernet1/9", "gpu-09:eth0")
    assert {f"leaf1:{PORTS[h]}" for h in senders} <= set(incast.ports)
    assert incast.evidence["speed_source"] == "inferred" and incast.evidence["utilization"] > 0.9
    assert abs((incast.start - t.window.start).total_seconds() - on[0]) <= 2
    assert abs((incast.end - t.window.start).total_seconds() - on[1]) <= 2
    assert incast.job_ids == ("team-a/train",)
    assert not found(store, t, "microburst") and not found(store, t, "pfc_storm")


def test_broadcom_storm_without_pause_duration_mitigated_by_the_watchdog_is_one_storm(
    store: Store, now: dt.datetime
) -> None:
    t = Telemetry(now, 240)
    fabric(t)
    stuck, on = "gpu-03", (60.0, 150.0)
    flicker = (100.0, 101.5)  # the pause frames dip below the floor for a read: still one storm
    for host in HOSTS:
        port = PORTS[host]
        if host == stuck:
            t.counter("leaf1", "switch", port, "tx_bytes", steps((*on, 0.0), base=0.3 * LINE), PORT_CLOCK)
            pauses = steps((*flicker, 20.0), (*on, 20000.0))
            t.counter("leaf1", "switch", port, "pfc_rx_pause", pauses, PORT_CLOCK, priority=3)
            wd = QUEUE_CLOCK
            t.counter("leaf1", "switch", port, "pfcwd_storm_detected", steps((60.2, 60.3, 10.0)), wd, 3)
            t.counter("leaf1", "switch", port, "pfcwd_storm_restored", steps((150.2, 150.3, 10.0)), wd, 3)
            t.counter("leaf1", "switch", port, "pfcwd_tx_dropped_packets", steps((*on, 3e4)), wd, 3)
            t.counter("leaf1", "switch", port, "queue_dropped_packets", steps((*on, 3e4)), wd, 3)
        else:
            t.counter("leaf1", "switch", port, "tx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
    t.land(store)

    (storm,) = found(store, t, "pfc_storm")
    assert storm.evidence["root"] == f"{stuck}:eth0" and "leaf1:Ethernet1/3" in storm.ports
    assert storm.evidence["pause_evidence"] == ["pause_frames"]
    assert storm.evidence["watchdog"]["dropped_packets"] > 0
    assert "mitigated" in storm.summary
    assert abs((storm.start - t.window.start).total_seconds() - on[0]) <= 2
    assert not found(store, t, "pfc_misconfig") and not found(store, t, "incast")


def test_a_32_to_1_incast_whose_senders_are_paused_is_one_incast_not_32_storms(store: Store, now: dt.datetime) -> None:
    t = Telemetry(now, 200)
    hosts = [f"gpu-{i:02d}" for i in range(1, 34)]
    ports = {h: f"ethernet-1/{i}" for i, h in enumerate(hosts, start=1)}  # SR Linux names
    receiver, on = hosts[-1], (50.0, 140.0)
    for i, host in enumerate(hosts, start=1):
        port, clock = ports[host], nic_clock(i)
        t.link(host, "eth0", "leaf1", ports[host])
        t.endpoint("team-b/big", host, "eth0", "mlx5_0", f"10.0.1.{i}", i - 1)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.2 * LINE), PORT_CLOCK)
        t.counter(host, "nic", "eth0", "rx_bytes", steps(base=0.2 * LINE), clock)
        if host == receiver:
            t.counter("leaf1", "switch", port, "tx_bytes", steps((*on, 0.99 * LINE), base=0.2 * LINE), PORT_CLOCK)
            t.counter(host, "nic", "mlx5_0/1", "cnp_sent", steps((*on, 5000.0)), clock)
            t.counter(host, "nic", "eth0", "tx_bytes", steps(base=0.2 * LINE), clock)
            continue
        t.counter("leaf1", "switch", port, "tx_bytes", steps(base=0.2 * LINE), PORT_CLOCK)
        # each sender gets 1/32 of the receiver's link and sits paused 90% of the time
        t.counter(host, "nic", "eth0", "tx_bytes", steps((*on, LINE / 32), base=0.2 * LINE), clock)
        t.counter(host, "nic", "eth0", "pfc_rx_pause_duration_us", steps((*on, 0.9e6)), clock, priority=3)
        t.counter("leaf1", "switch", port, "pfc_tx_pause_duration_us", steps((*on, 0.9e6)), PORT_CLOCK, 3)
    t.counter("leaf1", "switch", ports[receiver], "queue_ecn_marked_packets", steps((*on, 3e5)), QUEUE_CLOCK, 3)
    t.land(store)

    (incast,) = found(store, t, "incast")
    assert incast.evidence["fan_in"] == 32 and incast.ports[0] == f"leaf1:{ports[receiver]}"
    assert found(store, t, "pfc_storm") == []


def bursting(t: Telemetry, spans: list[tuple[float, float]], rate: float = LINE, peak: float = 9e6) -> str:
    """gpu-05's leaf port sending `rate` in `spans` over 10% of its line, its queue peaking at `peak` and marking
    ECN then, on a leaf whose gpu-01 port runs at 95% (the speed every port's is inferred from). Its port."""
    port = PORTS["gpu-05"]
    t.counter(
        "leaf1", "switch", port, "tx_bytes", steps(*[(a, b, rate) for a, b in spans], base=0.1 * LINE), PORT_CLOCK
    )
    t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.1 * LINE), PORT_CLOCK)
    t.gauge("leaf1", "switch", port, "queue_watermark_bytes", steps(*[(a, b, peak) for a, b in spans], base=3e4),
            WM_CLOCK, priority=3)  # fmt: skip
    t.counter("leaf1", "switch", port, "queue_ecn_marked_packets", steps(*[(a, b, 3e6) for a, b in spans]),
              QUEUE_CLOCK, 3)  # fmt: skip
    t.counter("leaf1", "switch", PORTS["gpu-01"], "tx_bytes", steps(base=0.95 * LINE), PORT_CLOCK)
    return port


def test_microbursts_under_60_s_watermarks_are_a_few_readings_not_60_bursts(store: Store, now: dt.datetime) -> None:
    t = Telemetry(now, 300)
    fabric(t, busy=0.1 * LINE)
    port = bursting(t, [(s, s + 0.03) for s in range(60, 180, 2)])  # 30 ms every 2 s for two minutes
    for other in HOSTS:
        if other not in ("gpu-01", "gpu-05"):
            t.counter("leaf1", "switch", PORTS[other], "tx_bytes", steps(base=0.1 * LINE), PORT_CLOCK)
    t.land(store)

    (burst,) = found(store, t, "microburst")
    assert burst.ports[0] == f"leaf1:{port}" and burst.evidence["watermark_reads"] <= 3
    assert 2 <= burst.evidence["bursts"] <= 14  # the 10 s queue reads that marked, not 60 bursts
    assert not found(store, t, "incast")


@pytest.mark.parametrize("marks_per_s", [2e4, 0.0], ids=["marked", "unmarked"])
def test_burst_peaks_below_the_watermark_floor_count_where_their_queue_marked(
    store: Store, now: dt.datetime, marks_per_s: float
) -> None:
    """Bursts whose queue peaks at 600 KB: under the 1 MB watermark floor, above an ECN Kmin of 400 KB. Where the
    queue's own ECN counter marked in the read's interval (600 marks a burst, ~300/s: under the 1000/s that counts
    as marking by itself), the queue passed its Kmin, whatever the operator set it to: microbursts. The same
    peaks without a mark (a standing backlog under a higher Kmin) are none."""
    t = Telemetry(now, 300)
    fabric(t, busy=0.1 * LINE)
    spans = [(s, s + 0.03) for s in range(60, 180, 2)]  # 30 ms every 2 s for two minutes
    port = PORTS["gpu-05"]
    t.counter(
        "leaf1", "switch", port, "tx_bytes", steps(*[(a, b, LINE) for a, b in spans], base=0.1 * LINE), PORT_CLOCK
    )
    t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.1 * LINE), PORT_CLOCK)
    t.gauge("leaf1", "switch", port, "queue_watermark_bytes", steps(*[(a, b, 6e5) for a, b in spans], base=3e4),
            WM_CLOCK, priority=3)  # fmt: skip
    t.counter("leaf1", "switch", port, "queue_ecn_marked_packets", steps(*[(a, b, marks_per_s) for a, b in spans]),
              QUEUE_CLOCK, 3)  # fmt: skip
    t.counter("leaf1", "switch", PORTS["gpu-01"], "tx_bytes", steps(base=0.95 * LINE), PORT_CLOCK)
    t.land(store)

    bursts = found(store, t, "microburst")
    if marks_per_s:
        (burst,) = bursts
        assert burst.ports[0] == f"leaf1:{port}" and burst.evidence["peak_watermark_bytes"] == pytest.approx(6e5)
        began, ended = ((x - now).total_seconds() for x in (burst.start, burst.end))
        assert 0 <= began <= 70 and 170 <= ended <= 200, (began, ended)  # within a 60 s read of the bursts
    else:
        assert bursts == []
    assert not found(store, t, "incast")


def test_microbursts_past_the_last_watermark_read_are_not_the_ports_quiet_rate(store: Store, now: dt.datetime) -> None:
    """Bursts from 30 s to the end of the window: the seconds after the last 60 s watermark read carry bursts
    nobody read yet. Taken for the port's quiet rate, they would make each burst add no bytes (a queue that
    drained in 0.2 ms: no fan-in). The port's ECN-marking samples say they are not quiet."""
    t = Telemetry(now, 300)
    fabric(t, busy=0.1 * LINE)
    port = bursting(t, [(s + 0.5, s + 0.52) for s in range(30, 300)])  # 20 ms every second, as synchronized senders do
    t.land(store)

    (burst,) = found(store, t, "microburst")
    assert burst.ports[0] == f"leaf1:{port}" and burst.evidence["estimated_burst_ms"] >= 1.0


@pytest.mark.parametrize(
    ("occupancy", "phase", "bursts"),
    [("a burst in flight", 2.51, True), ("a standing queue", WM_CLOCK_10S.phase, False)],
    ids=["snapshot_seconds_off", "snapshot_at_the_read"],
)
def test_a_queue_is_drained_or_not_by_a_snapshot_taken_at_its_read(
    store: Store, now: dt.datetime, occupancy: str, phase: float, bursts: bool
) -> None:
    """20 ms bursts every second, watermarks read every 10 s. The queue's occupancy is a snapshot, read in another
    counter group: 2 s after each watermark read it catches a burst in flight, which says nothing about whether the
    read's peak had drained; a snapshot at the read itself holding most of the peak is a standing queue."""
    t = Telemetry(now, 300)
    fabric(t, busy=0.1 * LINE)
    spans = [(s + 0.5, s + 0.52) for s in range(30, 300)]
    port = PORTS["gpu-05"]
    t.counter("leaf1", "switch", port, "tx_bytes", steps(*[(a, b, LINE) for a, b in spans], base=0.1 * LINE),
              PORT_CLOCK)  # fmt: skip
    t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.1 * LINE), PORT_CLOCK)
    t.gauge("leaf1", "switch", port, "queue_watermark_bytes", steps(*[(a, b, 9e6) for a, b in spans], base=3e4),
            WM_CLOCK_10S, priority=3)  # fmt: skip
    t.counter("leaf1", "switch", port, "queue_ecn_marked_packets", steps(*[(a, b, 3e6) for a, b in spans]),
              QUEUE_CLOCK, 3)  # fmt: skip
    held = steps(*[(a, b, 9e6) for a, b in spans]) if bursts else steps((30.0, 300.0, 8e6))
    t.snapshot("leaf1", "switch", port, "queue_occupancy_bytes", held, Clock(10.0, phase), priority=3)
    t.counter("leaf1", "switch", PORTS["gpu-01"], "tx_bytes", steps(base=0.95 * LINE), PORT_CLOCK)
    t.land(store)

    found_bursts = found(store, t, "microburst")
    assert bool(found_bursts) == bursts, occupancy
    assert not found(store, t, "incast")


def test_a_microburst_lasts_while_its_port_marks_not_from_read_to_read(store: Store, now: dt.datetime) -> None:
    """Bursts from 75 s to 285 s under 60 s watermark reads (at 60.4, 120.4, 180.4, 240.4 s): the reads alone put
    them from 60.4 s (the first bursting read's interval) to 240.4 s (the last read). The queue's 10 s ECN
    samples say when they were, and those after the last read (the window ends before the next) are bursts no
    read saw yet: the finding runs from about 75 s to about 285 s, what a job's loss is measured over."""
    t = Telemetry(now, 300)
    fabric(t, busy=0.1 * LINE)
    bursting(t, [(s + 0.5, s + 0.52) for s in range(75, 285)])
    t.land(store)

    (burst,) = found(store, t, "microburst")
    began, ended = ((x - now).total_seconds() for x in (burst.start, burst.end))
    assert 65 <= began <= 81 and 280 <= ended <= 296, (began, ended)


def test_backlogs_released_for_seconds_are_no_microbursts(store: Store, now: dt.datetime) -> None:
    """A port that drains 2 s of backlog every 30 s (a stalled queue let go, as a PFC watchdog breaking a deadlock
    does) fills its queue between 60 s watermark reads and is not busy on average, but a queue that stands for
    seconds keeps its port at line rate: its own rate samples show it saturated, no burst hidden between reads."""
    t = Telemetry(now, 300)
    fabric(t, busy=0.1 * LINE)
    bursting(t, [(s, s + 2.0) for s in range(40, 290, 30)], rate=LINE, peak=3e6)
    t.land(store)

    assert not {f.kind for f in found(store, t)} & {"microburst", "incast"}


@pytest.mark.parametrize(
    ("paused", "frames_only", "bursts"),
    [(0.01, False, True), (0.3, False, False), (0.01, True, True), (0.3, True, False)],
    ids=["bursts", "deadlock_spread", "bursts_frames_only", "deadlock_spread_frames_only"],
)
def test_bursts_whose_senders_are_held_paused_are_no_microbursts(
    store: Store, now: dt.datetime, paused: float, frames_only: bool, bursts: bool
) -> None:
    """The same queue peaks between 60 s watermark reads: from senders paused 1% of the time (their bursts'
    milliseconds) a microburst; from senders the leaf holds paused 30% of the time (a deadlock or storm upstream
    of them, whose backlog trickles through) none."""
    t = Telemetry(now, 300)
    fabric(t, busy=0.1 * LINE)
    bursting(t, [(s + 0.5, s + 0.52) for s in range(30, 300)])
    for sender in HOSTS[5:9]:
        if frames_only:  # Broadcom: XOFF frames counted, no duration; each holds 0xFFFF quanta (84 us at 400G)
            xoff = paused / (512 * 0xFFFF / (8 * LINE))
            t.counter("leaf1", "switch", PORTS[sender], "pfc_tx_pause", steps((30.0, 300.0, xoff)), PORT_CLOCK, 3)
            t.gauge("leaf1", "switch", PORTS[sender], "port_speed_bps", steps(base=8 * LINE), PORT_CLOCK)
        else:
            t.counter("leaf1", "switch", PORTS[sender], "pfc_tx_pause_duration_us", steps((30.0, 300.0, paused * 1e6)),
                      PORT_CLOCK, priority=3)  # fmt: skip
    t.land(store)

    assert bool(found(store, t, "microburst")) == bursts


def test_a_clean_hour_with_a_switch_and_a_nic_reboot_finds_nothing(store: Store, now: dt.datetime) -> None:
    t = Telemetry(now - dt.timedelta(minutes=50), 3600)
    for i, host in enumerate(HOSTS, start=1):
        t.link(host, "eth0", "leaf1", PORTS[host])
        t.endpoint("team-a/train", host, "eth0", "mlx5_0", f"10.0.0.{i}", i - 1)
        resets = (1200.0,) if host == "gpu-04" else ()
        t.counter(host, "nic", "eth0", "tx_bytes", steps(base=0.6 * LINE), Clock(10.0, 0.1 * i, 0.3), resets=resets)
        t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps(base=20.0), Clock(10.0, 0.1 * i), resets=resets)
        t.counter(host, "nic", "mlx5_0/1", "cnp_sent", steps(base=20.0), Clock(10.0, 0.1 * i + 0.05), resets=resets)
        for metric in ("tx_bytes", "rx_bytes"):
            t.counter(
                "leaf1", "switch", PORTS[host], metric, steps(base=0.6 * LINE), Clock(10.0, 0.3), resets=(2400.0,)
            )
        t.gauge("leaf1", "switch", PORTS[host], "queue_watermark_bytes", steps(base=2e5), Clock(60.0, 0.5), 3)
    t.land(store)
    assert found(store, t) == []


def test_receive_discards_are_a_pfc_misconfig_only_where_the_nic_behind_lost_roce_packets(
    store: Store, now: dt.datetime
) -> None:
    """A switch that counts no priority-group drops (Arista over OpenConfig): gpu-03's leaf port discards what it
    receives while gpu-03's NIC sees its RoCE packets go missing (sequence errors): lossless traffic dropped at an
    ingress that sent no pause. gpu-06's port discards as much while its NIC loses nothing (an ACL, a route):
    no finding."""
    t = Telemetry(now, 240)
    fabric(t)
    drops = (80.0, 140.0, 2000.0)
    for host in ("gpu-03", "gpu-06"):
        t.counter("leaf1", "switch", PORTS[host], "rx_discards", steps(drops), PORT_CLOCK)
        t.counter("leaf1", "switch", PORTS[host], "pfc_tx_pause", steps(), PORT_CLOCK, 3)
    for i, host in enumerate(HOSTS, start=1):
        lost = steps(drops) if host == "gpu-03" else steps()
        t.counter(host, "nic", "mlx5_0/1", "packet_seq_err", lost, nic_clock(i))
    t.land(store)

    (f,) = found(store, t, "pfc_misconfig")
    assert f.ports == (f"leaf1:{PORTS['gpu-03']}",) and f.priority == 3
    assert "receive discards" in f.summary and f.evidence["rx_discards"] == pytest.approx(60 * 2000.0, rel=0.05)
    assert 75 <= (f.start - now).total_seconds() <= 82 and 138 <= (f.end - now).total_seconds() <= 142


def test_a_cable_between_switches_without_lldp_flapping_is_one_flap_named_by_both_ends(
    store: Store, now: dt.datetime
) -> None:
    """LLDP from the hosts only says nothing of the leaf-spine cables: the two ends of one are the two ports
    that went down together, down for down, each on its own device's clock. A port that went down together
    with them once only is no partner."""
    t = Telemetry(now, 240)
    fabric(t)
    downs = [(60.0, 63.0, -1.0), (95.0, 98.0, -1.0), (130.0, 133.0, -1.0)]
    t.gauge("leaf1", "switch", UPLINKS[0], "oper_up", steps(*downs, base=1.0), PORT_CLOCK)
    t.gauge("spine1", "switch", "Ethernet1/1", "oper_up", steps(*downs, base=1.0), Clock(1.0, 0.73, 0.2))
    t.gauge("spine1", "switch", "Ethernet1/2", "oper_up", steps(downs[0], base=1.0), Clock(1.0, 0.73, 0.2))
    t.gauge("spine2", "switch", "Ethernet1/1", "oper_up", steps(base=1.0), Clock(1.0, 0.5))
    t.land(store)

    (flap,) = found(store, t, "link_flap")
    assert set(flap.ports) == {f"leaf1:{UPLINKS[0]}", "spine1:Ethernet1/1"} and flap.score == 3


def test_ports_that_go_down_with_several_others_are_not_guessed_into_cables(store: Store, now: dt.datetime) -> None:
    """Three ports of no known peer on three switches going down together each time (a shared power feed, a
    reboot of their line cards): which two share a cable, if any, is a guess, so each stays a link of one end."""
    t = Telemetry(now, 240)
    fabric(t)
    downs = [(60.0, 63.0, -1.0), (95.0, 98.0, -1.0)]
    t.gauge("leaf1", "switch", UPLINKS[0], "oper_up", steps(*downs, base=1.0), PORT_CLOCK)
    for spine in ("spine1", "spine2"):
        t.gauge(spine, "switch", "Ethernet1/1", "oper_up", steps(*downs, base=1.0), Clock(1.0, 0.73, 0.2))
    t.land(store)

    flaps = found(store, t, "link_flap")
    assert sorted(f.ports for f in flaps) == [
        ("leaf1:" + UPLINKS[0],),
        ("spine1:Ethernet1/1",),
        ("spine2:Ethernet1/1",),
    ]


def test_a_storm_the_switchs_30_s_counters_average_away_is_found_by_the_nics_own_second_by_second_counters(
    store: Store, now: dt.datetime
) -> None:
    """Arista reports PFC over SNMP every 30 s: an 8 s storm from a NIC is 27% of a read, below any stall bar. The
    NIC's own pause duration, read every second, shows it whole: one storm, rooted at the NIC."""
    t = Telemetry(now, 120)
    fabric(t)
    stuck, on = "gpu-04", (40.0, 48.0)
    snmp = Clock(30.0, 0.6)
    for i, host in enumerate(HOSTS, start=1):
        port = PORTS[host]
        stalled = steps((*on, 0.0), base=0.3 * LINE) if host == stuck else steps(base=0.3 * LINE)
        t.counter("leaf1", "switch", port, "tx_bytes", stalled, PORT_CLOCK)
        t.counter("leaf1", "switch", port, "pfc_rx_pause", steps((*on, 20000.0)) if host == stuck else steps(), snmp, 3)
        paused = steps((*on, 1e6)) if host == stuck else steps()
        t.counter(host, "nic", "eth0", "pfc_tx_pause_duration_us", paused, nic_clock(i), priority=3)
    t.land(store)
    (storm,) = found(store, t, "pfc_storm")
    assert storm.evidence["root"] == f"{stuck}:eth0" and f"leaf1:{PORTS[stuck]}" in storm.ports
    assert "nic_pause_duration" in storm.evidence["pause_evidence"]
    assert abs((storm.start - t.window.start).total_seconds() - on[0]) <= 1.5


def test_a_storm_the_nics_stall_prevention_broke_is_critical_and_says_so(store: Store, now: dt.datetime) -> None:
    """mlx5's device-stall prevention at its defaults (kernel mlx5 en_ethtool.c: an 8 s timeout, the warning at
    85% of it): a NIC that sent pause without a break counts a warning at 6.8 s and an error at 8 s, when it stops
    sending pause (its lossless traffic may then drop). An 8 s storm is short of the 10 s critical bar; the
    NIC's own word that it had to break the storm makes it critical."""
    t = Telemetry(now, 120)
    fabric(t)
    stuck, on = "gpu-04", (40.0, 48.0)
    for i, host in enumerate(HOSTS, start=1):
        port, clock = PORTS[host], nic_clock(i)
        t.counter("leaf1", "switch", port, "tx_bytes", steps((*on, 0.0), base=0.3 * LINE) if host == stuck else
                  steps(base=0.3 * LINE), PORT_CLOCK)  # fmt: skip
        t.counter("leaf1", "switch", port, "pfc_rx_pause", steps((*on, 20000.0)) if host == stuck else steps(),
                  PORT_CLOCK, 3)  # fmt: skip
        warned = steps((46.8, 46.9, 10.0)) if host == stuck else steps()
        broke = steps((48.0, 48.1, 10.0)) if host == stuck else steps()
        t.counter(host, "nic", "eth0", "pause_storm_warning_events", warned, clock)
        t.counter(host, "nic", "eth0", "pause_storm_error_events", broke, clock)
    t.land(store)
    (storm,) = found(store, t, "pfc_storm")
    assert storm.evidence["root"] == f"{stuck}:eth0" and storm.severity == "critical"
    assert storm.evidence["nic_stall_prevention"] == {"warning_events": 1.0, "error_events": 1.0}
    assert "stall prevention stopped its pause" in storm.summary
    assert (storm.end - storm.start).total_seconds() < 10


def test_uplinks_held_paused_by_switches_no_lldp_names_are_no_storm_of_unknown_root(
    store: Store, now: dt.datetime
) -> None:
    """LLDP from the hosts only: a leaf's uplinks held paused by spines nobody names are a spread or a loop among
    switches (the deadlock detector's business), not a storm from an unmonitored neighbour."""
    t = Telemetry(now, 120)
    fabric(t)
    held = (30.0, 110.0)
    for port in ("Ethernet3/1", "Ethernet3/2"):  # two more uplinks (the fabric's own carry traffic)
        t.counter("leaf1", "switch", port, "pfc_rx_pause_duration_us", steps((*held, 1e6)), PORT_CLOCK, priority=3)
        t.counter("leaf1", "switch", port, "tx_bytes", steps((*held, 0.0), base=0.3 * LINE), PORT_CLOCK)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
    t.land(store)
    assert found(store, t, "pfc_storm") == []


def test_a_storm_on_gear_that_counts_pfc_per_interface_only_is_found(store: Store, now: dt.datetime) -> None:
    """Arista over SNMP: IEEE8021-PFC-MIB counts the pause frames a port received per interface
    (`ieee8021PfcIndications`), no priority, no pause duration, read every 30 s. A NIC stuck asserting pause holds
    its leaf port stalled for 90 s: one storm on the lossless priority, said to be assumed."""
    t = Telemetry(now, 240)
    fabric(t)
    snmp = Clock(30.0, 0.2)
    stuck, on = "gpu-03", (60.0, 150.0)
    for host in HOSTS:
        port = PORTS[host]
        tx = steps((*on, 0.0), base=0.3 * LINE) if host == stuck else steps(base=0.3 * LINE)
        t.counter("leaf1", "switch", port, "tx_bytes", tx, snmp)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(base=0.3 * LINE), snmp)
        t.counter(
            "leaf1", "switch", port, "pfc_rx_pause_total", steps((*on, 20000.0)) if host == stuck else steps(), snmp
        )
    t.land(store)

    (storm,) = found(store, t, "pfc_storm")
    assert storm.evidence["root"] == f"{stuck}:eth0" and f"leaf1:{PORTS[stuck]}" in storm.ports
    assert storm.priority == 3 and storm.evidence["pause_evidence"] == ["port_pause_frames"]
    assert "assumed" in storm.summary
    assert abs((storm.start - t.window.start).total_seconds() - on[0]) <= 31


@pytest.mark.parametrize(("outages", "flaps"), [(1, 0), (3, 3)], ids=["one_outage", "three_flaps"])
def test_a_hosts_carrier_changes_count_an_outage_once(store: Store, now: dt.datetime, outages: int, flaps: int) -> None:
    """Linux counts `carrier_changes` both ways, read every second: one 20 s outage is a down in one read and an
    up in another, one down (no flap); three outages within a minute are three downs (a flapping link)."""
    t = Telemetry(now, 240)
    fabric(t)
    starts = [60.0 + 25 * k for k in range(outages)]
    spans = [(s + d, s + d + 0.1, 10.0) for s in starts for d in (0.5, 20.5)]  # each change counted once
    t.counter("gpu-04", "nic", "eth0", "carrier_transitions", steps(*spans), nic_clock(4))
    t.land(store)

    got = found(store, t, "link_flap")
    assert [f.evidence.get("flaps") for f in got] == ([flaps] if flaps else []), [f.summary for f in got]


def test_job_mates_that_handle_few_cnps_are_not_blamed_for_a_loss_one_nic_explains(
    store: Store, now: dt.datetime
) -> None:
    """Under training traffic every NIC handles some CNPs, at rates its flows' paths spread over decades: a job-mate
    handling 3% of the median, barely paused, is not a suspect; the NIC PFC holds back while it handles none is."""
    t = Telemetry(now, 240)
    fabric(t)
    dropper, on = "gpu-03", (60.0, 150.0)
    rates = {h: (300.0 if i % 2 else 8.0) for i, h in enumerate(HOSTS)}  # half the job marked hard, half barely
    for i, host in enumerate(HOSTS, start=1):
        if host == dropper:  # handles none; PFC holds it back: ~500 XOFFs a second
            t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps(), nic_clock(i))
            t.counter(host, "nic", "eth0", "pfc_rx_pause", steps((*on, 500.0)), nic_clock(i), priority=3)
            continue
        t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*on, rates[host])), nic_clock(i))
        t.counter(host, "nic", "eth0", "pfc_rx_pause", steps((*on, 2.0)), nic_clock(i), priority=3)
    # the receivers sent what the job handled plus the 3000/s the dropper never acted on
    sent = sum(r for h, r in rates.items() if h != dropper) + 3000.0
    t.counter("gpu-09", "nic", "mlx5_0/1", "cnp_sent", steps((*on, sent)), nic_clock(9))
    t.land(store)

    (loss,) = found(store, t, "cnp_loss")
    assert loss.devices == (dropper,) and loss.evidence["cnp_handled"] == 0


@pytest.mark.parametrize("every", [1.0, 10.0], ids=["watermarks_every_second", "watermarks_every_10_s"])
def test_training_traffic_that_bunches_at_the_receiver_is_a_microburst_at_any_read_interval(
    store: Store, now: dt.datetime, every: float
) -> None:
    """Duty-cycled all-reduce phases from many peers meet at a receiver's port: its queue peaks at 4 MB (far above
    Kmin, marking ECN) in every read while the port sends its usual 3% of line rate, no bytes beyond it. The peak
    drains in 80 us at 400G: a queue above Kmin for less than a read, a microburst by the definition, whether the
    watermark is read every second or every 10 s (Cumulus), not a burst too short to count."""
    t = Telemetry(now, 240)
    fabric(t, busy=0.03 * LINE)
    port = PORTS["gpu-05"]
    t.gauge("leaf1", "switch", port, "port_speed_bps", steps(base=8 * LINE), PORT_CLOCK)
    t.counter("leaf1", "switch", port, "tx_bytes", steps(base=0.03 * LINE), PORT_CLOCK)
    t.gauge("leaf1", "switch", port, "queue_watermark_bytes", steps((30.0, 210.0, 4e6), base=2e4), Clock(every, 0.42),
            priority=3)  # fmt: skip
    t.counter("leaf1", "switch", port, "queue_ecn_marked_packets", steps((30.0, 210.0, 1e4)), QUEUE_CLOCK, 3)
    t.land(store)

    (burst,) = found(store, t, "microburst")
    assert burst.ports[0] == f"leaf1:{port}", burst.summary
    assert burst.evidence["estimated_burst_ms"] < 1.0, burst.evidence
    assert "us each" in burst.summary


@pytest.mark.parametrize("lost_per_s", [15.0, 2000.0], ids=["within_the_reads", "beyond_them"])
def test_a_balance_off_by_less_than_its_reads_can_move_is_no_cnp_loss(
    store: Store, now: dt.datetime, lost_per_s: float
) -> None:
    """An incast's two senders handle 20,000 CNPs/s each, five job-mates 24/s and gpu-01, paused now and then, none.
    Where the receiver's count runs 15/s (0.04 %) ahead of what the senders handled, 1,350 CNPs "lost" in 90 s of
    3.6 million is less than one read at each end of the span can move: no finding (an exam draw, 3bffac8 arista
    incast_medium: "641 of 1,026,377 CNPs never handled", precision 0). Where it runs 2,000/s ahead, gpu-01 drops
    them: one finding at gpu-01."""
    t = Telemetry(now, 240)
    fabric(t)
    on, heavy, light = (60.0, 150.0), ("gpu-07", "gpu-08"), ("gpu-02", "gpu-03", "gpu-04", "gpu-05", "gpu-06")
    for i, host in enumerate(HOSTS, start=1):
        rate = 20_000.0 if host in heavy else 24.0 if host in light else 0.0
        if host != "gpu-09":
            t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*on, rate)), nic_clock(i))
    t.counter("gpu-01", "nic", "eth0", "pfc_rx_pause_duration_us", steps((*on, 1e4)), nic_clock(1), priority=3)
    sent = 2 * 20_000.0 + 5 * 24.0 + lost_per_s
    t.counter("gpu-09", "nic", "mlx5_0/1", "cnp_sent", steps((*on, sent)), nic_clock(9))
    t.land(store)

    losses = found(store, t, "cnp_loss")
    if lost_per_s < 100:
        assert not losses, [f.summary for f in losses]
    else:
        (loss,) = losses
        assert loss.devices == ("gpu-01",) and loss.evidence["cnp_handled"] == 0, loss.summary


def test_a_partial_loss_in_the_only_bucket_with_cnps_is_found(store: Store, now: dt.datetime) -> None:
    """A short incast whose CNPs all fall in one 10 s bucket: gpu-01 handles a tenth of what it is sent, gpu-02
    all of it. That bucket's loss is the only imbalance the window has, so it is no measure of the balance's jitter
    (an exam draw, af9a3ee arista cnp_loss_partial: the loss was its own "jitter" and the finding was dropped)."""
    t = Telemetry(now.replace(second=now.second - now.second % 10), 180)
    fabric(t)
    on = (61.0, 69.0)  # inside the bucket from 60 s
    t.counter("gpu-09", "nic", "mlx5_0/1", "cnp_sent", steps((*on, 4000.0)), nic_clock(9))
    t.counter("gpu-01", "nic", "mlx5_0/1", "cnp_handled", steps((*on, 200.0)), nic_clock(1))
    t.counter("gpu-02", "nic", "mlx5_0/1", "cnp_handled", steps((*on, 2000.0)), nic_clock(2))
    t.counter("gpu-01", "nic", "eth0", "pfc_rx_pause_duration_us", steps((*on, 1e4)), nic_clock(1), priority=3)
    t.land(store)

    (loss,) = found(store, t, "cnp_loss")
    assert loss.devices == ("gpu-01",) and loss.evidence["handled_share"] < 0.2, loss.summary
