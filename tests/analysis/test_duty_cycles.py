"""Microburst or incast, told apart by physics on ports that carry training traffic: compute and communication
alternate every half second, so a port's 1 s samples read its duty cycle, from 5% to 95% busy. Bursts of 20 ms
(a queue above the ECN threshold for milliseconds) leave the port idle part of every sample whatever its duty
cycle: microbursts. A minute of overload keeps the receiver's port at line rate, its queue standing: an incast.
Each at every duty cycle, one finding of the right kind, none of the other (SONiC's cadences, skewed clocks, no
port speed reported)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from rocescope.pipeline.store import Store

from gear import HOSTS, LINE, PORT_CLOCK, PORTS, QUEUE_CLOCK, WM_CLOCK, fabric, found, nic_clock
from telemetry import Telemetry, steps

#: one compute/communication iteration; a ring's communication runs short of line rate (its bus bandwidth)
PERIOD_S, COMM_RATE = 0.5, 0.85 * LINE
BURSTS = [(s + 0.3, s + 0.32) for s in range(60, 240, 2)]  # 20 ms every 2 s for three minutes
INCAST = (90.0, 150.0)
BURST_RX, INCAST_RX, INCAST_TX = "gpu-05", "gpu-09", HOSTS[:4]


def training(duty: float, *extra: tuple[float, float, float]) -> list[tuple[float, float, float]]:
    """The communication phases of a job at `duty`, then `extra` spans (later spans win)."""
    phases = [(float(t), float(t) + duty * PERIOD_S, COMM_RATE) for t in np.arange(0.0, 300.0, PERIOD_S)]
    return [*phases, *extra]


@pytest.mark.parametrize("duty", [0.05, 0.25, 0.5, 0.75, 0.95])
def test_bursts_are_microbursts_and_overload_is_an_incast_at_every_duty_cycle(
    store: Store, now: dt.datetime, duty: float
) -> None:
    t = Telemetry(now, 300)
    fabric(t, busy=duty * COMM_RATE)
    for host in HOSTS:
        port = PORTS[host]
        extra = [(a, b, LINE) for a, b in BURSTS] if host == BURST_RX else []
        if host == INCAST_RX:
            extra = [(*INCAST, LINE)]
        t.counter("leaf1", "switch", port, "tx_bytes", steps(*training(duty, *extra)), PORT_CLOCK)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(*training(duty)), PORT_CLOCK)
    burst = PORTS[BURST_RX]
    t.gauge("leaf1", "switch", burst, "queue_watermark_bytes", steps(*[(a, b, 5e6) for a, b in BURSTS], base=3e4),
            WM_CLOCK, priority=3)  # fmt: skip
    t.counter("leaf1", "switch", burst, "queue_ecn_marked_packets", steps(*[(a, b, 3e6) for a, b in BURSTS]),
              QUEUE_CLOCK, 3)  # fmt: skip
    sink = PORTS[INCAST_RX]
    t.gauge("leaf1", "switch", sink, "queue_watermark_bytes", steps((*INCAST, 9e6), base=3e4), WM_CLOCK, priority=3)
    t.counter("leaf1", "switch", sink, "queue_ecn_marked_packets", steps((*INCAST, 2e5)), QUEUE_CLOCK, 3)
    t.counter(INCAST_RX, "nic", "mlx5_0/1", "cnp_sent", steps((*INCAST, 3200.0)), nic_clock(9))
    for i, host in enumerate(INCAST_TX, start=1):  # DCQCN cuts the senders
        t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*INCAST, 800.0)), nic_clock(i))
    t.land(store)

    findings = found(store, t)
    bursts = [f for f in findings if f.kind == "microburst"]
    incasts = [f for f in findings if f.kind == "incast"]
    assert [f.ports[0] for f in bursts] == [f"leaf1:{burst}"], [f.summary for f in findings]
    assert [f.ports[0] for f in incasts] == [f"leaf1:{sink}"], [f.summary for f in findings]
    (incast,) = incasts
    assert {f"leaf1:{PORTS[h]}" for h in INCAST_TX} <= set(incast.ports)
    began, ended = ((x - now).total_seconds() for x in (incast.start, incast.end))
    assert abs(began - INCAST[0]) <= 2 and abs(ended - INCAST[1]) <= 2, (began, ended)


def test_an_incast_dcqcn_holds_below_line_rate_for_seconds_is_one_incast(store: Store, now: dt.datetime) -> None:
    """DCQCN's cuts dip a 28-to-1 incast's port to 60-70% of line rate for 4-5 s at a time, its queue still marking
    (an exam draw: one incast reported as four, 2.4 findings per incident). It is one incast; a second one after
    the port fell back to its training traffic (a quarter busy, no marks) is another."""
    first, second = (90.0, 150.0), (200.0, 230.0)
    dips = [(100.0, 105.0, 0.7 * LINE), (120.0, 124.0, 0.6 * LINE)]
    t = Telemetry(now, 300)
    fabric(t, busy=0.25 * COMM_RATE)
    for host in HOSTS:
        port = PORTS[host]
        extra = [(*first, LINE), *dips, (*second, LINE)] if host == INCAST_RX else []
        t.counter("leaf1", "switch", port, "tx_bytes", steps(*training(0.25, *extra)), PORT_CLOCK)
        t.counter("leaf1", "switch", port, "rx_bytes", steps(*training(0.25)), PORT_CLOCK)
    sink = PORTS[INCAST_RX]
    t.gauge("leaf1", "switch", sink, "queue_watermark_bytes", steps((*first, 9e6), (*second, 9e6), base=3e4),
            WM_CLOCK, priority=3)  # fmt: skip
    t.counter("leaf1", "switch", sink, "queue_ecn_marked_packets", steps((*first, 2e5), (*second, 2e5)), QUEUE_CLOCK,
              3)  # fmt: skip
    t.counter(INCAST_RX, "nic", "mlx5_0/1", "cnp_sent", steps((*first, 3200.0), (*second, 3200.0)), nic_clock(9))
    for i, host in enumerate(INCAST_TX, start=1):
        t.counter(host, "nic", "mlx5_0/1", "cnp_handled", steps((*first, 800.0), (*second, 800.0)), nic_clock(i))
    t.land(store)

    incasts = sorted((f for f in found(store, t) if f.kind == "incast"), key=lambda f: f.start)
    spans = [tuple(round((x - now).total_seconds()) for x in (f.start, f.end)) for f in incasts]
    assert len(spans) == 2, [f.summary for f in incasts]
    for (began, ended), (a, b) in zip(spans, (first, second), strict=True):
        assert abs(began - a) <= 2 and abs(ended - b) <= 2, spans


def test_cnps_a_receiver_sends_alike_whatever_its_ports_watermark_are_marks_made_upstream(
    store: Store, now: dt.datetime
) -> None:
    """SR Linux-shaped: queue watermarks read every minute and no queue ECN counters, so a receiver's CNPs are the
    only marking evidence, and they answer marks made at any hop of its flows. gpu-05 sends 355 CNPs/s all along
    (a spine's queue marks its flows); its own port's queue rose to 2.7 MB once, in the first minute, and stayed at
    30 KB since: the CNPs inside that minute's read are no bursts of its queue, as the same CNPs go on through
    four reads that saw none (an exam draw, 0692696 srlinux baseline 9269464023: 15 ports' start-up peaks, spread
    over the CNPs of the first minute, made false microbursts). gpu-06's queue bursts through the second and third
    minutes, its CNPs five times the rate its quiet reads show: microbursts then, not from the window's start."""
    t = Telemetry(now, 300)
    fabric(t)
    quiet, bursty = PORTS["gpu-05"], PORTS["gpu-06"]
    t.gauge("leaf1", "switch", quiet, "queue_watermark_bytes", steps((30.2, 30.4, 2.7e6), base=3e4), WM_CLOCK, 3)
    t.counter("gpu-05", "nic", "mlx5_0/1", "cnp_sent", steps(base=355.0), nic_clock(5))
    spikes = [(s + 0.3, s + 0.32) for s in range(60, 180, 2)]
    t.gauge("leaf1", "switch", bursty, "queue_watermark_bytes", steps(*[(a, b, 4e6) for a, b in spikes], base=3e4),
            WM_CLOCK, 3)  # fmt: skip
    t.counter("gpu-06", "nic", "mlx5_0/1", "cnp_sent", steps((60.0, 180.0, 1800.0), base=355.0), nic_clock(6))
    t.land(store)

    bursts = found(store, t, "microburst")
    assert [f.ports[0] for f in bursts] == [f"leaf1:{bursty}"], [f.summary for f in bursts]
    began, ended = ((x - now).total_seconds() for x in (bursts[0].start, bursts[0].end))
    assert 55 <= began <= 65 and 175 <= ended <= 185, (began, ended)


@pytest.mark.parametrize("marked", [True, False])
def test_one_burst_its_queue_marked_is_a_microburst_one_unmarked_peak_is_not(
    store: Store, now: dt.datetime, marked: bool
) -> None:
    """One 20 ms burst on a half-busy port (an exam dev draw: a job's first synchronized step queued 8 receivers'
    ports at once, never again). A queue above Kmin marks, so where its own ECN marks fall in the read's interval
    the peak passed the ECN threshold: one burst is a microburst by the definition. A peak no mark corroborates is
    one read a stray backlog can make: two burst intervals are needed (`min_bursts`)."""
    once = (120.3, 120.32)
    t = Telemetry(now, 300)
    fabric(t, busy=0.5 * COMM_RATE)
    for host in HOSTS:
        extra = [(*once, LINE)] if host == BURST_RX else []
        t.counter("leaf1", "switch", PORTS[host], "tx_bytes", steps(*training(0.5, *extra)), PORT_CLOCK)
        t.counter("leaf1", "switch", PORTS[host], "rx_bytes", steps(*training(0.5)), PORT_CLOCK)
    burst = PORTS[BURST_RX]
    t.gauge("leaf1", "switch", burst, "queue_watermark_bytes", steps((*once, 5e6), base=3e4), WM_CLOCK, priority=3)
    if marked:
        t.counter("leaf1", "switch", burst, "queue_ecn_marked_packets", steps((*once, 3e6)), QUEUE_CLOCK, 3)
    t.land(store)

    bursts = [f for f in found(store, t) if f.kind == "microburst"]
    assert [f.ports[0] for f in bursts] == ([f"leaf1:{burst}"] if marked else []), [f.summary for f in bursts]
    assert all(f.severity == "info" and f.evidence["bursts"] == 1 for f in bursts)
