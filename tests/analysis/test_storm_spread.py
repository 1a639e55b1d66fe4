"""A storm's spread through a switch read slowly: the switch behind it is back-pressured, not a second root.

A real trace of the twin (cumulus, 10 s switch reads, a 10 s NIC storm) showed it: the pause reached a far leaf
through a spine; the leaf's uplink, paused through the storm's whole span, was read as 33 % and 72 % of two
reads straddling it (under the 80 % stall bar), so the leaf, pausing its own hosts throughout, looked like a root
that asserts pause without cause, and the one storm became two findings."""

from __future__ import annotations

import datetime as dt

from rocescope.pipeline.store import Store

from gear import LINE, found, nic_clock
from telemetry import Clock, Telemetry, steps

STORM = (60.0, 70.0)
FAST = Clock(1.0, 0.31)  # the near leaf's and the spine's counters
SLOW = Clock(10.0, 3.0)  # the far leaf read every 10 s: reads at 53 and 63 and 73 s straddle the storm
NEAR = ["gpu-01", "gpu-02"]
FAR = ["gpu-05", "gpu-06"]
LEAF_PORTS = ["Ethernet1/1", "Ethernet1/2", "Ethernet2/1"]
SPINE_PORTS = ["Ethernet1/1", "Ethernet1/2"]


def _host(t: Telemetry, host: str, leaf: str, port: str, i: int, paused: tuple[float, float] | None) -> None:
    t.link(host, "eth0", leaf, port)
    t.endpoint("team-a/train", host, "eth0", "mlx5_0", f"10.0.0.{i}", i - 1)
    flowing = steps((*paused, 0.0), base=0.1 * LINE) if paused else steps(base=0.1 * LINE)
    t.counter(host, "nic", "eth0", "tx_bytes", flowing, nic_clock(i))
    t.counter(host, "nic", "eth0", "rx_bytes", steps(base=0.1 * LINE), nic_clock(i))
    t.gauge(host, "nic", "eth0", "port_speed_bps", steps(base=8 * LINE), nic_clock(i))
    if paused:  # held paused by its leaf: the NIC's own pause timer, read every second
        t.counter(host, "nic", "eth0", "pfc_rx_pause_duration_us", steps((*paused, 1e6)), nic_clock(i), 3)


def test_a_switch_paused_through_a_slow_read_is_the_spread_not_a_second_root(store: Store, now: dt.datetime) -> None:
    """gpu-01 storms leaf1's port for 10 s; leaf1 pauses the spine, the spine pauses leaf2's uplink (read every
    10 s), and leaf2 pauses its hosts gpu-05 and gpu-06 throughout. One storm, rooted at gpu-01, its spread
    reaching leaf2's hosts."""
    t = Telemetry(now, 180)
    spread = (STORM[0] + 0.5, STORM[1])
    for i, host in enumerate(NEAR, start=1):
        _host(t, host, "leaf1", f"Ethernet1/{i}", i, None)
    for i, host in enumerate(FAR, start=5):
        _host(t, host, "leaf2", f"Ethernet1/{i - 4}", i, spread)
    t.link("leaf1", "Ethernet2/1", "spine1", "Ethernet1/1")
    t.link("leaf2", "Ethernet2/1", "spine1", "Ethernet1/2")
    # the root: gpu-01 sends pause to leaf1 without cause (its receive side idle), leaf1's port sends nothing
    t.counter("gpu-01", "nic", "eth0", "pfc_tx_pause_duration_us", steps((*STORM, 1e6)), nic_clock(1), 3)
    t.counter("leaf1", "switch", "Ethernet1/1", "pfc_rx_pause_duration_us", steps((*STORM, 1e6)), FAST, 3)
    t.counter("leaf1", "switch", "Ethernet1/1", "tx_bytes", steps((*STORM, 0.0), base=0.1 * LINE), FAST)
    # the spread: leaf1 pauses the spine's port to it, the spine pauses leaf2's uplink
    t.counter("spine1", "switch", "Ethernet1/1", "pfc_rx_pause_duration_us", steps((*spread, 1e6)), FAST, 3)
    t.counter("spine1", "switch", "Ethernet1/1", "tx_bytes", steps((*spread, 0.0), base=0.1 * LINE), FAST)
    t.counter("leaf2", "switch", "Ethernet2/1", "pfc_rx_pause_duration_us", steps((*spread, 1e6)), SLOW, 3)
    t.counter("leaf2", "switch", "Ethernet2/1", "tx_bytes", steps((*spread, 0.0), base=0.1 * LINE), SLOW)
    for device, ports in (("leaf1", LEAF_PORTS), ("leaf2", LEAF_PORTS), ("spine1", SPINE_PORTS)):
        for port in ports:
            t.gauge(device, "switch", port, "port_speed_bps", steps(base=8 * LINE), FAST)
            t.counter(device, "switch", port, "rx_bytes", steps(base=0.1 * LINE), FAST)
    t.land(store)

    storms = found(store, t, "pfc_storm")
    assert len(storms) == 1, [f.summary for f in storms]
    (storm,) = storms
    assert storm.evidence["root"] == "gpu-01:eth0", storm.evidence["root"]
    paused = {step["paused"] for step in storm.evidence["tree"]}
    assert {"leaf2:Ethernet2/1", "gpu-05:eth0", "gpu-06:eth0"} <= paused, paused
