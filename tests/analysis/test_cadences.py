"""Each device read at its own cadence: tolerances that hang on "a read" follow the series they judge, never one
fabric-wide poll interval (the median of the first devices' gaps, alphabetically: on most fabrics, the hosts).
Real fabrics mix them: switches polled over SNMP every 30 s beside NICs read every second, or switches streaming
gNMI every second beside hosts that Prometheus scrapes every 15 s."""

from __future__ import annotations

import datetime as dt

import pytest

from rocescope.analysis.frames import Frames, Window
from rocescope.pipeline.store import Store

from gear import HOSTS, LINE, PORTS, UPLINKS, found
from telemetry import Clock, Telemetry, steps


def _fabric(t: Telemetry, host_every: float, switch_every: float) -> Clock:
    """One leaf of nine hosts (LLDP from the hosts), the hosts and the leaf each at their own cadence; the
    leaf's clock."""
    leaf = Clock(switch_every, 0.31)
    for i, host in enumerate(HOSTS, start=1):
        nic = Clock(host_every, (0.13 * i) % 1.0)
        t.link(host, "eth0", "leaf1", PORTS[host])
        t.endpoint("team-a/train", host, "eth0", "mlx5_0", f"10.0.0.{i}", i - 1)
        for metric in ("tx_bytes", "rx_bytes"):
            t.counter(host, "nic", "eth0", metric, steps(base=0.3 * LINE), nic)
            t.counter("leaf1", "switch", PORTS[host], metric, steps(base=0.3 * LINE), leaf)
    for port in UPLINKS:
        for metric in ("tx_bytes", "rx_bytes"):
            t.counter("leaf1", "switch", port, metric, steps(base=0.3 * LINE), leaf)
    return leaf


def test_one_outage_of_a_switch_polled_every_30_s_is_no_flap(store: Store, now: dt.datetime) -> None:
    """A cable pulled for 95 s on a switch read over SNMP every 30 s is down in three reads in a row: one down,
    not three (its hosts are read every second)."""
    t = Telemetry(now, 300)
    leaf = _fabric(t, host_every=1.0, switch_every=30.0)
    t.gauge("leaf1", "switch", UPLINKS[0], "oper_up", steps((100.0, 195.0, 0.0), base=1.0), leaf)
    t.land(store)

    assert not found(store, t, "link_flap")


def test_flaps_of_a_switch_streamed_every_second_beside_hosts_read_every_15_s(store: Store, now: dt.datetime) -> None:
    """Three 3 s downs 10 s apart on an uplink the switch streams every second are three downs, though the hosts
    (read first, alphabetically) are scraped every 15 s."""
    t = Telemetry(now, 240)
    leaf = _fabric(t, host_every=15.0, switch_every=1.0)
    downs = [(60.0 + 10 * k, 63.0 + 10 * k, 0.0) for k in range(3)]
    t.gauge("leaf1", "switch", UPLINKS[0], "oper_up", steps(*downs, base=1.0), leaf)
    t.land(store)

    (flap,) = found(store, t, "link_flap")
    assert flap.ports == (f"leaf1:{UPLINKS[0]}",) and flap.evidence.get("flaps") == 3
    assert abs((flap.start - now).total_seconds() - 60) <= 2 and abs((flap.end - now).total_seconds() - 83) <= 2


def test_a_switch_polled_every_5_minutes_has_its_first_rate_in_every_window(store: Store, now: dt.datetime) -> None:
    """SNMP-only gear polled every 300 s (LibreNMS' default) beside hosts read every second: a 10-minute window holds
    two of its reads, and both get a rate, the first from the read before the window (a look-back of 125 s, two
    reads of a 60 s poll, found none)."""
    t = Telemetry(now, 1500)
    t.counter("leaf1", "switch", UPLINKS[0], "tx_bytes", steps(base=0.5 * LINE), Clock(300.0, 10.0))
    t.counter(HOSTS[0], "nic", "eth0", "tx_bytes", steps(base=0.5 * LINE), Clock(1.0, 0.0))
    t.land(store)

    window = Window(now + dt.timedelta(seconds=600), now + dt.timedelta(seconds=1200))
    rates = Frames(store, window).rates(["tx_bytes"], devices=["leaf1"])
    assert [round((ts - now).total_seconds()) for ts in rates["ts"]] == [610, 910]
    assert rates["rate"].to_list() == [pytest.approx(0.5 * LINE)] * 2
    assert rates["dt_s"].to_list() == [300.0, 300.0]
