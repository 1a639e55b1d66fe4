"""States the gear reports as words, read as evidence: a port an operator shut (`admin_up` 0) goes down by intent,
not by flapping; a queue SONiC's PFC watchdog holds as stormed (`PFC_WD_STATUS`, `pfcwd_stormed` 1) is a storm
even where no pause counter is read."""

from __future__ import annotations

import datetime as dt

import pytest

from rocescope.pipeline.store import Store

from gear import LINE, PORT_CLOCK, PORTS, QUEUE_CLOCK, UPLINKS, fabric, found, nic_clock
from telemetry import Telemetry, steps

SHUTS = [(60.0, 90.0, 0.0), (120.0, 150.0, 0.0)]


@pytest.mark.parametrize("shut", [True, False], ids=["shut_by_an_operator", "down_by_itself"])
def test_a_port_an_operator_shuts_twice_is_no_flap(store: Store, now: dt.datetime, shut: bool) -> None:
    """Two 30 s downs of leaf1's port to gpu-04, its host's carrier dropping and coming back each time: two
    downs of a link by itself are a flapping link; the same two while the port was administratively down are
    an operator's work (shut, no shut)."""
    t = Telemetry(now, 240)
    fabric(t)
    port = PORTS["gpu-04"]
    t.gauge("leaf1", "switch", port, "oper_up", steps(*SHUTS, base=1.0), PORT_CLOCK)
    t.gauge("leaf1", "switch", port, "admin_up", steps(*(SHUTS if shut else ()), base=1.0), PORT_CLOCK)
    changes = [(edge + 0.5, edge + 0.6, 10.0) for start, end, _ in SHUTS for edge in (start, end + 3.0)]
    t.counter("gpu-04", "nic", "eth0", "carrier_transitions", steps(*changes), nic_clock(4))
    t.land(store)

    flaps = found(store, t, "link_flap")
    if shut:
        assert not flaps, [f.summary for f in flaps]
    else:
        (flap,) = flaps
        assert set(flap.ports) == {f"leaf1:{port}", "gpu-04:eth0"} and flap.evidence["flaps"] == 2


def test_a_queue_the_watchdog_holds_as_stormed_is_a_storm_without_pause_counters(
    store: Store, now: dt.datetime
) -> None:
    """SONiC's watchdog says `stormed` on queue 3 of leaf1's port to gpu-03 for 90 s (read every 10 s with the
    queue counters), the port transmitting nothing meanwhile; the switch's pause counters are not read at all."""
    t = Telemetry(now, 240)
    fabric(t)
    stuck, on = "gpu-03", (60.0, 150.0)
    port = PORTS[stuck]
    t.counter("leaf1", "switch", port, "tx_bytes", steps((*on, 0.0), base=0.3 * 50e9), PORT_CLOCK)
    for prio in (3, 4):
        held = steps((*on, 1.0)) if prio == 3 else steps()
        t.gauge("leaf1", "switch", port, "pfcwd_stormed", held, QUEUE_CLOCK, prio)
    t.land(store)

    (storm,) = found(store, t, "pfc_storm")
    assert f"leaf1:{port}" in storm.ports and storm.priority == 3
    assert storm.evidence["root"] == f"{stuck}:eth0" and storm.evidence["pause_evidence"] == ["watchdog"]
    assert (
        abs((storm.start - now).total_seconds() - on[0]) <= 11 and abs((storm.end - now).total_seconds() - on[1]) <= 11
    )


@pytest.mark.parametrize("links", [11, 3], ids=["a_whole_leaf", "three_cables"])
def test_links_of_one_switch_flapping_together_are_one_device_event(store: Store, now: dt.datetime, links: int) -> None:
    """A leaf rebooting brings its links up, down again while its config loads, and up (two downs each, every
    link at once): one finding at the leaf naming its ports, not one flap per link. Three links flapping together
    are three cables (a breakout carries up to eight): one finding each."""
    t = Telemetry(now, 240)
    fabric(t)
    downs = steps((60.0, 75.0, 0.0), (80.0, 85.0, 0.0), base=1.0)
    ports = [*PORTS.values(), *UPLINKS][:links]
    for port in ports:
        t.gauge("leaf1", "switch", port, "oper_up", downs, PORT_CLOCK)
    t.land(store)

    flaps = found(store, t, "link_flap")
    if links >= 9:
        (event,) = flaps
        assert event.devices == ("leaf1",) and event.severity == "critical"
        assert set(event.ports) == {f"leaf1:{p}" for p in ports} and event.evidence["links"] == links
        assert "team-a/train" in event.job_ids and "device event" in event.summary
    else:
        assert len(flaps) == links and all(f.evidence["flaps"] == 2 for f in flaps)


@pytest.mark.parametrize("uplinks", [2, 1], ids=["a_spine_restarts", "one_uplink_goes_down_once"])
def test_every_link_of_a_switch_going_down_once_together_is_one_device_event(
    store: Store, now: dt.datetime, uplinks: int
) -> None:
    """A spine with two links (one to each of leaf1's uplinks, LLDP from the spine) restarts, as SONiC's
    fast-reboot does: both links drop for 25 s, once, and the spine reports nothing meanwhile. Each link went down
    once (an outage, not a flap), but every link of the spine went down at once: one device event at the spine; the
    frames one of them failed meanwhile are the event's, no optics finding. One uplink down once is an outage: no
    finding."""
    t = Telemetry(now, 240)
    fabric(t)
    for i, port in enumerate(UPLINKS):
        t.link("spine1", f"Ethernet{i * 8}", "leaf1", port)
    for port in UPLINKS[:uplinks]:
        t.gauge("leaf1", "switch", port, "oper_up", steps((60.0, 85.0, 0.0), base=1.0), PORT_CLOCK)
    t.counter("leaf1", "switch", UPLINKS[-1], "rx_fcs_errors", steps((40.0, 58.0, 50.0)), PORT_CLOCK)
    t.land(store)

    flaps, optics = found(store, t, "link_flap"), found(store, t, "degraded_optics")
    if uplinks == 1:
        assert not flaps, [f.summary for f in flaps]
        assert len(optics) == 1 and optics[0].ports[0].startswith("leaf1:")  # the errors alone are the cable's
        return
    assert not optics, [f.summary for f in optics]
    assert len(flaps) == 1, [f.summary for f in flaps]
    (event,) = flaps
    assert event.devices == ("spine1",) and set(event.ports) == {"spine1:Ethernet0", "spine1:Ethernet8"}
    assert event.evidence["device_event"] and "went down together (once)" in event.summary


def test_links_of_unknown_far_ends_going_down_together_name_no_device(store: Store, now: dt.datetime) -> None:
    """Twelve uplinks of leaf1 go down once together, their far ends unknown (LLDP on the hosts only, the far switch
    silent): a spine restarting, or a line card of the leaf; which one the data cannot say. No device event names
    leaf1 (the exam's served runs on Arista gear named four leaves for one restarting spine) and single outages
    are no flaps."""
    t = Telemetry(now, 240)
    fabric(t)
    for i in range(12):
        port = f"Ethernet3/{i + 1}"
        t.counter("leaf1", "switch", port, "tx_bytes", steps(base=0.3 * 50e9), PORT_CLOCK)
        t.gauge("leaf1", "switch", port, "oper_up", steps((60.0, 85.0, 0.0), base=1.0), PORT_CLOCK)
    t.land(store)
    flaps = found(store, t, "link_flap")
    assert not flaps, [f.summary for f in flaps]


@pytest.mark.parametrize("estimated", [True, False], ids=["with_the_watchdog_estimate", "frames_only"])
def test_pause_time_the_watchdog_estimated_is_read_as_an_estimate(
    store: Store, now: dt.datetime, estimated: bool
) -> None:
    """A Broadcom-based SONiC leaf has no pause timer; with `pfc_stat_history` on, its PFC watchdog estimates
    the pause time (`EST_PORT_STAT_PFC_3_RX_PAUSE_DURATION_US`: each 200 ms poll with pause frames counts whole).
    gpu-03 holds the port paused for 90 s, the port sending nothing, refreshing its pause every 168 us (half the
    time a frame buys at 400G; the speed is never reported). Without a speed the frames prove too little (at the
    fastest speed they buy an eighth of the time); the estimate is the device's own account of the time and
    needs no speed: the storm rests on it, says so, and is never critical on it alone."""
    t = Telemetry(now, 240)
    fabric(t)
    stuck, on = "gpu-03", (60.0, 150.0)
    port = PORTS[stuck]
    t.counter("leaf1", "switch", port, "tx_bytes", steps((*on, 0.0), base=0.3 * 50e9), PORT_CLOCK)
    t.counter("leaf1", "switch", port, "pfc_rx_pause", steps((*on, 1 / 168e-6)), PORT_CLOCK, 3)
    if estimated:
        t.counter("leaf1", "switch", port, "pfc_rx_pause_duration_est_us", steps((*on, 1e6)), PORT_CLOCK, 3)
    t.land(store)

    storms = found(store, t, "pfc_storm")
    if not estimated:
        assert not storms, [f.summary for f in storms]
        return
    (storm,) = storms
    assert f"leaf1:{port}" in storm.ports and storm.priority == 3
    assert storm.evidence["root"] == f"{stuck}:eth0"
    assert storm.evidence["pause_evidence"] == ["pause_duration_estimated"], storm.evidence
    assert storm.severity == "warning" and "severity_capped" in storm.evidence


@pytest.mark.parametrize("named_by", ["placement", "nic_inventory"])
def test_a_hosts_flaps_seen_at_its_netdev_and_its_rdma_port_are_one_finding(
    store: Store, now: dt.datetime, named_by: str
) -> None:
    """mlx5 counts a link's downs at the netdev (`link_down_events_phy`) and the RDMA port counts them again
    (`link_downed` of mlx5_0/1): one cable, one flapping link, named by its netdev where a job's placement maps
    the RDMA device to it, or, on a host no job is placed on, the NIC collector's inventory."""
    t = Telemetry(now, 240)
    fabric(t)
    if named_by == "nic_inventory":
        t.endpoints = [e for e in t.endpoints if e[1] != "gpu-04"]
        t.rdma_netdev("gpu-04", "mlx5_0/1", "eth0")
    downs = steps(*[(60.0 + 15 * k, 60.2 + 15 * k, 5.0) for k in range(4)])
    t.counter("gpu-04", "nic", "eth0", "link_down_events", downs, nic_clock(4))
    t.counter("gpu-04", "nic", "mlx5_0/1", "link_down_events", downs, nic_clock(4))
    t.land(store)

    (flap,) = found(store, t, "link_flap")
    assert set(flap.ports) == {f"leaf1:{PORTS['gpu-04']}", "gpu-04:eth0"} and flap.evidence["flaps"] == 4


@pytest.mark.parametrize(
    ("case", "busy"),
    [("restarts", 0.3), ("restarts", 0.0), ("some_far_ends_known", 0.3), ("counters_cleared", 0.3)],
    ids=["busy_spine_restarts", "idle_spine_restarts", "some_far_ends_known", "counters_cleared"],
)
def test_a_spine_no_lldp_names_restarting_is_one_event_at_the_spine(
    store: Store, now: dt.datetime, case: str, busy: float
) -> None:
    """LLDP on the hosts only (Arista over OpenConfig): nobody names the far ends of the leaves' uplinks. The spine
    goes silent for 90 s and comes back counting from zero on every port (an idle one counts nothing either side),
    while two uplinks of each leaf went down for 25 s meanwhile: one event, at the spine, also where LLDP names the
    far ends of some (they group at the spine by themselves). Counters an operator cleared, no link down, are none."""
    restarted = case != "counters_cleared"
    t = Telemetry(now, 300)
    fabric(t)
    if case == "some_far_ends_known":  # leaf2's uplinks are cabled by LLDP: their downs group at the spine apart
        t.link("leaf2", UPLINKS[0], "spine1", "Ethernet3/1")
        t.link("leaf2", UPLINKS[1], "spine1", "Ethernet4/1")
    spine_ports = [f"Ethernet{i}/1" for i in range(1, 5)]
    for port in spine_ports:
        t.counter("spine1", "switch", port, "tx_bytes", steps(base=busy * LINE), PORT_CLOCK, resets=(100.0,))
    for leaf in ("leaf1", "leaf2"):
        for port in UPLINKS:
            if leaf == "leaf2":
                t.counter(leaf, "switch", port, "tx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
            t.gauge(leaf, "switch", port, "oper_up", steps(*([(100.0, 125.0, 0.0)] if restarted else ()), base=1.0),
                    PORT_CLOCK)  # fmt: skip
    if restarted:  # silent while it restarts
        t.counters = [r for r in t.counters if not (r[1] == "spine1" and 100 <= (r[0] - now).total_seconds() < 190)]
    if not busy:  # a port nothing crosses counts nothing, before the restart or after
        t.counters = [(*r[:6], 0.0) if r[1] == "spine1" else r for r in t.counters]
    t.land(store)

    flaps = found(store, t, "link_flap")
    if not restarted:
        assert not flaps, [f.summary for f in flaps]
        return
    assert len(flaps) == 1, [f.summary for f in flaps]
    (event,) = flaps
    assert event.devices == ("spine1",), event.summary
    assert event.evidence["went_away"] == ("restarted" if busy else "silent"), event.summary
    assert set(event.ports) == {f"spine1:{p}" for p in spine_ports}
    assert set(event.evidence["peers"]) == {f"{leaf}:{p}" for leaf in ("leaf1", "leaf2") for p in UPLINKS}
