"""The fabric's topology from telemetry shaped like real gear: port speeds from whichever source reports one,
and cables no LLDP names (LLDP from the hosts only) found from what they carry, never guessed where the
counters cannot tell them apart."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from rocescope.analysis.fabric import Fabric
from rocescope.analysis.frames import Frames
from rocescope.analysis.speeds import PortSpeeds, Speed
from rocescope.collectors.sonic_dump import namespace_of, port_links
from rocescope.pipeline.store import Store

from gear import HOSTS, LINE, PORT_CLOCK, PORTS, UPLINKS, fabric, nic_clock
from telemetry import Clock, Telemetry, steps

MULTI_ASIC = Path(__file__).parent.parent / "fixtures" / "sonic" / "multi_asic" / "dump"


def test_a_port_configured_for_400g_that_came_up_at_200g_runs_at_200g(store: Store, now: dt.datetime) -> None:
    """OpenConfig gives a port's configured `port-speed` beside its `negotiated-port-speed`: the running speed
    wins (its own, else its peer's: both ends run at what they negotiated); configured only where neither
    end reports one; inferred from the traffic where nothing is reported at all."""
    t = Telemetry(now, 60)
    fabric(t)
    configured, running = steps(base=400e9), steps(base=200e9)
    t.gauge("leaf1", "switch", PORTS["gpu-01"], "port_speed_configured_bps", configured, PORT_CLOCK)
    t.gauge("leaf1", "switch", PORTS["gpu-01"], "port_speed_bps", running, PORT_CLOCK)
    t.gauge("leaf1", "switch", PORTS["gpu-02"], "port_speed_configured_bps", configured, PORT_CLOCK)
    t.gauge("gpu-02", "nic", "eth0", "port_speed_bps", running, nic_clock(2))
    t.gauge("leaf1", "switch", PORTS["gpu-03"], "port_speed_configured_bps", configured, PORT_CLOCK)
    t.counter("leaf1", "switch", PORTS["gpu-04"], "tx_bytes", steps(base=0.3 * LINE), PORT_CLOCK)
    t.land(store)
    frames = Frames(store, t.window)
    speeds = PortSpeeds(frames, Fabric.from_frames(frames))
    assert speeds.of("leaf1", PORTS["gpu-01"]) == Speed(200e9, "reported")
    assert speeds.of("leaf1", PORTS["gpu-02"]) == Speed(200e9, "peer")
    assert speeds.of("leaf1", PORTS["gpu-03"]) == Speed(400e9, "configured")
    assert speeds.of("leaf1", PORTS["gpu-04"]) == Speed(200e9, "inferred")  # 0.3 x 400G moved: 120G fits 200G


def test_parallel_cables_no_lldp_names_pair_by_device_and_never_leaf_to_leaf(store: Store, now: dt.datetime) -> None:
    """LLDP from the hosts only; two leaves with two cables each to one spine, all four carrying the same bytes,
    deadlocked from 60 s (the spine pauses leaf1's uplinks, leaf2 pauses the spine). The parallel cables of a
    leaf cannot be told apart, but they go to the spine: each pairs with a spine port (port order, the only
    guess), never with the other leaf's port that sends the same pauses at the same times."""
    t = Telemetry(now, 180)
    ups = ["Ethernet9/1", "Ethernet11/1"]
    spine_ports = {"leaf1": ["Ethernet1/1", "Ethernet2/1"], "leaf2": ["Ethernet3/1", "Ethernet4/1"]}
    flowing = steps((0.0, 60.0, 0.4 * LINE))
    pauses = steps((60.0, 180.0, 2000.0))
    for k, leaf in enumerate(("leaf1", "leaf2")):
        for i, host in enumerate(HOSTS[4 * k : 4 * k + 4], start=1):
            t.link(host, "eth0", leaf, PORTS[host])
            t.counter(leaf, "switch", PORTS[host], "tx_bytes", flowing, PORT_CLOCK)
            t.counter(host, "nic", "eth0", "tx_bytes", flowing, nic_clock(i))
        for up, down in zip(ups, spine_ports[leaf], strict=True):
            for a, b in ((leaf, "spine1"), ("spine1", leaf)):
                port_a, port_b = (up, down) if a == leaf else (down, up)
                t.counter(a, "switch", port_a, "tx_bytes", flowing, PORT_CLOCK)
                t.counter(b, "switch", port_b, "rx_bytes", flowing, Clock(1.0, 0.77))
            sender, receiver = (("spine1", down), (leaf, up)) if leaf == "leaf1" else ((leaf, up), ("spine1", down))
            t.counter(*sender[:1], "switch", sender[1], "pfc_tx_pause", pauses, Clock(10.0, 0.04), priority=3)
            t.counter(*receiver[:1], "switch", receiver[1], "pfc_rx_pause", pauses, Clock(10.0, 0.06), priority=3)
    t.land(store)
    fab = Fabric.from_frames(Frames(store, t.window))
    for leaf in ("leaf1", "leaf2"):
        peers = [fab.peer(leaf, up) for up in ups]
        assert sorted(p for p in peers if p is not None) == [("spine1", p) for p in spine_ports[leaf]], (leaf, peers)
    assert fab.leaves == {"leaf1", "leaf2"} and fab.spines == {"spine1"}


def test_deadlocked_cables_are_not_crossed_between_spines_against_the_clos_shape(
    store: Store, now: dt.datetime
) -> None:
    """LLDP from the hosts only; two leaves cabled twice to each of two spines. Six cables carry bytes (each its
    own rate); two, one per leaf, are deadlocked from 60 s: no bytes, the spine pausing the leaf, both at the
    same rate. Each paused end is read in phase with the far end of the *other* deadlocked cable (10 s reads),
    so the pause counts alone fit the crossed pairs better. A Clos cables each leaf alike to every spine: the
    cables that carry bytes already join each leaf twice to one spine and once to the other, so each deadlocked
    cable goes to the other spine, its true peer."""
    t = Telemetry(now, 180)
    ups = ["Ethernet9/1", "Ethernet10/1", "Ethernet11/1", "Ethernet12/1"]
    spine_of = {"Ethernet9/1": "spine1", "Ethernet10/1": "spine2", "Ethernet11/1": "spine1", "Ethernet12/1": "spine2"}
    cables, rate = {}, 0.1
    for k, leaf in enumerate(("leaf1", "leaf2")):
        for host in HOSTS[4 * k : 4 * k + 4]:
            t.link(host, "eth0", leaf, PORTS[host])
        for j, up in enumerate(ups):
            spine = spine_of[up]
            cables[(leaf, up)] = (spine, f"Ethernet{2 * k + 1 + j // 2}/1")
    dead = {("leaf1", "Ethernet9/1"): Clock(10.0, 0.04), ("leaf2", "Ethernet10/1"): Clock(10.0, 5.04)}
    pauses = steps((60.0, 120.0, 2000.0), (120.0, 180.0, 3000.0))
    for (leaf, up), (spine, down) in cables.items():
        if (leaf, up) in dead:
            other = next(clock for end, clock in dead.items() if end != (leaf, up))
            t.counter(spine, "switch", down, "pfc_tx_pause", pauses, other, priority=3)
            t.counter(leaf, "switch", up, "pfc_rx_pause", pauses, dead[(leaf, up)], priority=3)
            continue
        flowing = steps(base=rate * LINE)
        rate *= 1.3
        for a, port_a, b, port_b in ((leaf, up, spine, down), (spine, down, leaf, up)):
            t.counter(a, "switch", port_a, "tx_bytes", flowing, PORT_CLOCK)
            t.counter(b, "switch", port_b, "rx_bytes", flowing, Clock(1.0, 0.77))
    t.land(store)
    fab = Fabric.from_frames(Frames(store, t.window))
    assert {end: fab.peer(*end) for end in cables} == cables


def test_cables_that_tie_exactly_stay_unpaired_not_crossed(store: Store, now: dt.datetime) -> None:
    """LLDP from the hosts only; leaf1's two uplinks go to two spines and each carries one flow of a synchronized
    ring: the same bytes at the same times on both cables. Each uplink fits both spines' ports exactly as well
    (an exact tie, not merely a close one): no reading tells which spine it goes to, so neither is paired (a
    guess would cross them between the spines half of the time)."""
    t = Telemetry(now, 120)
    ring = steps((0.0, 120.0, 0.4 * LINE))
    for i, host in enumerate(HOSTS[:4], start=1):
        t.link(host, "eth0", "leaf1", PORTS[host])
        t.counter("leaf1", "switch", PORTS[host], "tx_bytes", ring, PORT_CLOCK)
        t.counter(host, "nic", "eth0", "tx_bytes", ring, nic_clock(i))
    for up, spine in zip(UPLINKS, ("spine1", "spine2"), strict=True):
        for a, port_a, b, port_b in (("leaf1", up, spine, "Ethernet1/1"), (spine, "Ethernet1/1", "leaf1", up)):
            t.counter(a, "switch", port_a, "tx_bytes", ring, PORT_CLOCK)
            t.counter(b, "switch", port_b, "rx_bytes", ring, PORT_CLOCK)
    t.land(store)
    fab = Fabric.from_frames(Frames(store, t.window))
    assert [fab.peer("leaf1", up) for up in UPLINKS] == [None, None]


def test_a_speed_reported_days_before_the_window_is_still_the_ports_speed(store: Store, now: dt.datetime) -> None:
    """Arista stamps static values with their last change: a 400G uplink's speed, reported once three days ago,
    is its speed in this window (not inferred from its 30% load as 200G, which would double its utilization)."""
    t = Telemetry(now, 60)
    fabric(t)
    days_ago = now - dt.timedelta(days=3)
    t.counters.append((days_ago, "leaf1", "switch", UPLINKS[0], -1, "port_speed_bps", 400e9))
    t.land(store)
    frames = Frames(store, t.window)
    speeds = PortSpeeds(frames, Fabric.from_frames(frames))
    assert speeds.of("leaf1", UPLINKS[0]) == Speed(400e9, "reported")
    assert speeds.of("leaf1", UPLINKS[1]) == Speed(200e9, "inferred")  # never reported: 0.3 x 400G fits 200G


def test_a_multi_asic_switch_is_a_fabric_in_a_box_its_neighbours_name_by_the_chassis(
    store: Store, now: dt.datetime
) -> None:
    """sonic-utilities' two-ASIC mock, its port tables as the import gives them: hosts' LLDP names the switch and
    a front-panel alias (`sonic`, `Ethernet1/1`); the counters come per ASIC. The front-end ASIC with the hosts is
    a leaf, the back-end ASIC behind its back-plane a spine, and each back-plane cable joins the two ASICs' ports
    (the mock gives two asic1 ports one `asic_port_name`: that side's description resolves nothing and leaves
    the cable as the other side names it)."""
    t = Telemetry(now, 60)
    for path in sorted(MULTI_ASIC.glob("[AC][PO]*_DB.json.[01]")):  # APPL_DB, CONFIG_DB of each namespace
        doc = json.loads(path.read_text())
        ns = namespace_of(path, doc, "sonic")
        assert ns is not None
        for source, rows in port_links(doc, ns.device, ns).items():
            for n in rows:
                t.link(n.device, n.port, n.peer_device, n.peer_port, source=source)
    flowing = steps(base=0.2 * LINE)
    for device, port in [("sonic-asic0", p) for p in ("Ethernet0", "Ethernet4", "Ethernet-BP0", "Ethernet-BP4")] + [
        ("sonic-asic1", p) for p in ("Ethernet64", "Ethernet-BP256", "Ethernet-BP260")
    ]:
        t.counter(device, "switch", port, "tx_bytes", flowing, PORT_CLOCK)
    for i, (host, alias) in enumerate((("gpu-01", "Ethernet1/1"), ("gpu-02", "ethernet1/2")), start=1):
        t.link(host, "eth0", "sonic", alias)  # matched whatever its case
        t.counter(host, "nic", "eth0", "tx_bytes", flowing, nic_clock(i))
    t.land(store)
    fab = Fabric.from_frames(Frames(store, t.window))
    assert fab.peer("gpu-01", "eth0") == ("sonic-asic0", "Ethernet0")
    assert fab.peer("sonic-asic0", "Ethernet4") == ("gpu-02", "eth0")
    assert fab.peer("sonic-asic0", "Ethernet-BP0") == ("sonic-asic1", "Ethernet-BP256")
    assert fab.peer("sonic-asic1", "Ethernet-BP260") == ("sonic-asic0", "Ethernet-BP4")
    assert fab.leaves == {"sonic-asic0"} and fab.spines == {"sonic-asic1"}
    assert "sonic" not in fab.switches | fab.hosts  # the chassis is no device of its own
