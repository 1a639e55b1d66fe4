"""Lossless priorities as the fabric runs them: the config's, and every priority PFC frames are counted on (a
port pauses only the priorities it enables PFC on). SONiC enables PFC on 3 and 4; RoCE storage on 4 is judged
like training traffic on 3 without anyone listing it."""

from __future__ import annotations

import datetime as dt

import pytest

from rocescope.pipeline.store import Store

from gear import PORT_CLOCK, PORTS, fabric, found
from telemetry import Telemetry, steps

STORAGE = 4


@pytest.mark.parametrize("pfc_on_4", [True, False], ids=["pfc_seen_on_4", "no_pfc_on_4"])
def test_drops_on_a_second_lossless_priority_are_a_pfc_misconfig(
    store: Store, now: dt.datetime, pfc_on_4: bool
) -> None:
    """While storage traffic congests leaf1, gpu-05's port pauses its sender on priority 4 (PFC works there) and
    gpu-02's port drops priority-4 packets at its ingress without a single pause (PFC off on that port). Where
    no port ever pauses priority 4, nothing says it is lossless, and drops there are a lossy class's: no finding."""
    t = Telemetry(now, 240)
    fabric(t)
    burst = (80.0, 140.0)
    pauses = steps((*burst, 500.0)) if pfc_on_4 else steps()
    t.counter("leaf1", "switch", PORTS["gpu-05"], "pfc_tx_pause", pauses, PORT_CLOCK, STORAGE)
    t.counter("leaf1", "switch", PORTS["gpu-02"], "pfc_tx_pause", steps(), PORT_CLOCK, STORAGE)
    t.counter("leaf1", "switch", PORTS["gpu-02"], "pg_dropped_packets", steps((*burst, 2000.0)), PORT_CLOCK, STORAGE)
    t.land(store)

    got = found(store, t, "pfc_misconfig")
    if pfc_on_4:
        (f,) = got
        assert f.ports == (f"leaf1:{PORTS['gpu-02']}",) and f.priority == STORAGE
        assert abs((f.start - now).total_seconds() - burst[0]) <= 2
    else:
        assert not got, [f.summary for f in got]


@pytest.mark.parametrize("pauses_after", [False, True], ids=["pfc_turned_off", "pfc_on_headroom_short"])
def test_pauses_before_pfc_was_turned_off_do_not_hide_the_drops_after(
    store: Store, now: dt.datetime, pauses_after: bool
) -> None:
    """gpu-02's port pauses its sender on priority 3 every few seconds until PFC is turned off on it at 134.8 s, and
    drops priority-3 packets from then on: the pauses ended before the first drop, so PFC did not act while it
    dropped (a finding). Where the port keeps pausing while it drops, PFC acted and the buffer's headroom was
    short: no misconfig."""
    t = Telemetry(now, 180)
    fabric(t)
    off = 134.8
    before = [(s, s + 0.05, 360.0) for s in range(4, 134, 3)]  # the last at 133 s, a read before the first drop
    after = [(s, s + 0.05, 360.0) for s in range(136, 180, 3)] if pauses_after else []
    t.counter("leaf1", "switch", PORTS["gpu-02"], "pfc_tx_pause", steps(*before, *after), PORT_CLOCK, 3)
    t.counter("leaf1", "switch", PORTS["gpu-02"], "pg_dropped_packets", steps((off, 180.0, 4000.0)), PORT_CLOCK, 3)
    t.land(store)

    got = found(store, t, "pfc_misconfig")
    if pauses_after:
        assert not got, [f.summary for f in got]
    else:
        (f,) = got
        assert f.ports == (f"leaf1:{PORTS['gpu-02']}",) and abs((f.start - now).total_seconds() - off) <= 2
