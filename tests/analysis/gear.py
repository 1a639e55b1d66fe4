"""Telemetry shaped like real gear for the detector tests: one leaf of nine hosts with Arista slash names,
LLDP from the hosts only, no port speed, SONiC's cadences, skewed NIC clocks."""

from __future__ import annotations

from rocescope.analysis.findings import Finding
from rocescope.analysis.run import analyze
from rocescope.pipeline.store import Store

from telemetry import Clock, Telemetry, steps

GB = 1e9
LINE = 50 * GB  # 400G in bytes/s; never reported as a speed here
HOSTS = [f"gpu-{i:02d}" for i in range(1, 10)]
PORTS = {h: f"Ethernet1/{i}" for i, h in enumerate(HOSTS, start=1)}  # Arista names
UPLINKS = ["Ethernet2/1", "Ethernet2/2"]
PORT_CLOCK = Clock(1.0, 0.31)  # the leaf's interface counters
QUEUE_CLOCK = Clock(10.0, 0.37)  # queue counters (SONiC counterpoll queue: 10 s)
WM_CLOCK = Clock(60.0, 0.42)  # queue watermarks (60 s, peak since the last read)


def nic_clock(i: int) -> Clock:
    return Clock(1.0, (0.13 * i) % 1.0, skew=((-1) ** i) * 0.05 * i)  # own phase, up to 0.45 s skew


def fabric(t: Telemetry, busy: float = 0.3 * LINE) -> None:
    """One leaf, nine hosts (lldpd on the hosts only), two uplinks; every port moving `busy` bytes/s."""
    for i, host in enumerate(HOSTS, start=1):
        t.link(host, "eth0", "leaf1", PORTS[host])
        t.endpoint("team-a/train", host, "eth0", "mlx5_0", f"10.0.0.{i}", i - 1)
        t.counter(host, "nic", "eth0", "tx_bytes", steps(base=busy), nic_clock(i))
        t.counter(host, "nic", "eth0", "rx_bytes", steps(base=busy), nic_clock(i))
    for port in UPLINKS:
        t.counter("leaf1", "switch", port, "tx_bytes", steps(base=busy), PORT_CLOCK)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(base=busy), PORT_CLOCK)


def found(store: Store, t: Telemetry, kind: str | None = None) -> list[Finding]:
    result = analyze(store, t.window, write=False)
    assert not result.failed, result.failed
    return [f for f in result.findings if kind is None or f.kind == kind]
