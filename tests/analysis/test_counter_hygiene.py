"""Counters that lie a little: one counter landed by two sources, a clock stepped back, a drop that is no reset,
32-bit wraps only where the counter is 32 bits wide. Each gives the rates the device counted, never a spike."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow as pa
import pytest

from rocescope.analysis.frames import Frames, Window
from rocescope.pipeline.batch import conform
from rocescope.pipeline.store import Store, query_polars

W32 = 2**32


def rows(
    now: dt.datetime,
    samples: list[tuple[float, float]],
    metric: str = "pfc_rx_pause",
    port: str = "Ethernet0",
    source: str = "gnmi",
    raw_name: str = "SAI_PORT_STAT_PFC_3_RX_PKTS",
    priority: int = 3,
) -> pa.Table:
    """(seconds after `now`, value) samples of one series as `source` landed them."""
    table = pa.table(
        {
            "ts": pa.array([now + dt.timedelta(seconds=t) for t, _ in samples], pa.timestamp("ns", tz="UTC")),
            "device": ["leaf-1"] * len(samples),
            "role": ["switch"] * len(samples),
            "port": [port] * len(samples),
            "priority": pa.array([priority] * len(samples), pa.int8()),
            "metric": [metric] * len(samples),
            "value": pa.array([float(v) for _, v in samples], pa.float64()),
            "source": [source] * len(samples),
            "raw_name": [raw_name] * len(samples),
        }
    )
    return pa.Table.from_batches([conform("counters", table)])


def rates(store: Store, now: dt.datetime, metric: str = "pfc_rx_pause") -> tuple[list[float], Frames]:
    frames = Frames(store, Window(now, now + dt.timedelta(seconds=60)))
    r = frames.rates([metric]).sort("ts")
    return r["rate"].to_list(), frames


def test_one_counter_landed_by_two_sources_a_few_counts_apart_is_rated_from_one(
    any_store: Store, now: dt.datetime
) -> None:
    """An idle port's pause counter (1,000,000 pause frames since boot), read over gNMI every second and over
    SNMP every 10 s, 5 counts apart: interleaved, every SNMP sample was a "reset" worth the whole counter."""
    any_store.insert("counters", rows(now, [(t, 1_000_000) for t in range(0, 31)]))
    any_store.insert("counters", rows(now, [(t + 0.3, 999_995) for t in range(0, 31, 10)], source="snmp",
                                      raw_name="cpfcIfPriorityIndications"))  # fmt: skip
    got, frames = rates(any_store, now)
    assert got == [0.0] * 30 and max(got) == 0.0  # the gNMI series (more samples), never both
    assert frames.dropped == {}


def test_a_drop_that_proves_no_reset_is_dropped_and_counted(any_store: Store, now: dt.datetime) -> None:
    """A clock stepped back 2.5 s: samples stamped before ones already landed, a few counts lower. A reset
    restarts the counter from zero; this did not, so the sample gives no rate (and is counted), where it gave the
    whole counter (1.2 million pause frames in a second on a port that paused 100 a second)."""
    steady = [(float(t), 1_200_000 + 100 * t) for t in range(0, 11)]
    stepped = [(t - 2.5, 1_200_000 + 100 * t) for t in range(11, 14)]  # stamped 8.5, 9.5, 10.5
    any_store.insert("counters", rows(now, steady + stepped))
    got, frames = rates(any_store, now)
    assert max(got) < 1_000 and sum(frames.dropped.values()) >= 1


def test_a_counter_that_restarted_from_zero_is_a_reset(any_store: Store, now: dt.datetime) -> None:
    any_store.insert("counters", rows(now, [(0, 5e6), (1, 5.0001e6), (2, 40), (3, 140)]))  # the device rebooted
    got, frames = rates(any_store, now)
    assert got == [100.0, 40.0, 100.0] and frames.dropped == {}


def test_only_a_32_bit_counter_wraps(any_store: Store, now: dt.datetime) -> None:
    """A 64-bit gNMI counter that goes from 3.5e9 to 100 restarted (a reset: 100 counted); the same drop of
    IF-MIB's 32-bit ifInDiscards is a wrap (2^32 - 3.5e9 + 100 counted)."""
    drop = [(0, 3.5e9 - 10), (1, 3.5e9), (2, 100)]
    any_store.insert("counters", rows(now, drop, "rx_discards", "Ethernet0", "gnmi", "in-discards", -1))
    any_store.insert("counters", rows(now, drop, "rx_discards", "Ethernet4", "snmp", "ifInDiscards", -1))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    by_port = {p: g.sort("ts")["rate"].to_list() for (p,), g in frames.rates(["rx_discards"]).group_by("port")}
    assert by_port["Ethernet0"] == [10.0, 100.0]
    assert by_port["Ethernet4"] == [10.0, W32 - 3.5e9 + 100]


def test_a_finding_that_rests_on_an_estimate_is_never_critical() -> None:
    from rocescope.analysis.findings import Finding
    from rocescope.analysis.run import capped_on_estimates

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)

    def incast(source: str) -> Finding:
        return Finding("incast", "critical", now, now, ("leaf-1",), ("leaf-1:Ethernet0",), 3, 1.0, "incast",
                       {"speed_source": source})  # fmt: skip

    assert capped_on_estimates(incast("reported")).severity == "critical"
    capped = capped_on_estimates(incast("inferred"))
    assert capped.severity == "warning" and "inferred" in capped.evidence["severity_capped"]
    storm = incast("reported").with_(kind="pfc_storm", evidence={"pause_evidence": ["pause_frames_no_speed"]})
    assert capped_on_estimates(storm).severity == "warning"


def test_a_series_read_every_minute_has_its_first_rate_in_the_window(any_store: Store, now: dt.datetime) -> None:
    """The sample before the window gives the first rate, even at a 60 s cadence read at its own phase."""
    any_store.insert("counters", rows(now, [(-110.0, 0.0), (-50.0, 6000.0), (10.0, 12_000.0)]))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    assert frames.rates(["pfc_rx_pause"])["rate"].to_list() == [100.0]
    assert Frames(any_store, Window(now + dt.timedelta(seconds=5), now + dt.timedelta(seconds=60))).rates(
        ["pfc_rx_pause"]
    )["rate"].to_list() == [100.0]


def _resent(now: dt.datetime, port: str, rate: float, refresh: int, offset: float, seconds: int = 60) -> pa.Table:
    """A SONiC queue counter as its gNMI server sends it under SAMPLE every second: the value COUNTERS_DB last
    refreshed (every `refresh` s, `offset` into the second the read lands in), stamped with the send time."""
    samples = [(t + offset, 5e6 + rate * refresh * (t // refresh)) for t in range(seconds + 1)]
    return rows(now, samples, "queue_ecn_marked_packets", port, raw_name="SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS")


def test_values_re_sent_between_refreshes_are_no_reads(any_store: Store, now: dt.datetime) -> None:
    """Queue counters refreshed every 10 s and sent every second: read as nine zeros and one 10x jump, a steady
    1,000 marks/s was a "burst" of 10,000/s every 10 s. The re-sends are no reads: every rate is the steady one.
    A port that stops marking reads zero a refresh after its last change (a real read of a still counter)."""
    for i in range(4):
        any_store.insert("counters", _resent(now, f"Ethernet{i}", 1000.0, 10, 0.2 + 0.05 * i))
    still = [(t + 0.3, 7e6 + (1000.0 * 10 * min(t // 10, 3))) for t in range(61)]  # stops after 30 s
    any_store.insert("counters", rows(now, still, "queue_ecn_marked_packets", "Ethernet9"))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    got = frames.rates(["queue_ecn_marked_packets"]).sort("ts")
    busy = got.filter(pl.col("port") != "Ethernet9")
    assert busy.height >= 4 * 5 and busy["rate"].min() == pytest.approx(1000.0, rel=0.15)
    assert busy["rate"].max() == pytest.approx(1000.0, rel=0.15)
    stopped = got.filter(pl.col("port") == "Ethernet9").sort("ts")
    assert stopped["rate"].max() == pytest.approx(1000.0, rel=0.15)
    assert stopped.filter(pl.col("ts") > now + dt.timedelta(seconds=45))["rate"].to_list()[:1] == [0.0]


def test_re_sends_are_recognised_when_a_busy_series_of_their_group_is_rated_from_another_source(
    any_store: Store, now: dt.datetime
) -> None:
    """Four queue counters re-sent every second between 10 s refreshes, as in the test above, and in their refresh
    group a fifth queue whose gNMI reads (every 2 s) change at every read, which SNMP also lands, more often. Counted
    over every source, the group has a series changing too often to re-send; rated from one source per series, it
    has not, and its re-sends are still no reads."""
    for i in range(4):
        any_store.insert("counters", _resent(now, f"Ethernet{i}", 1000.0, 10, 0.2 + 0.05 * i))
    busy = [(t + 0.4, 5e6 + 2000.0 * t) for t in range(61)]
    any_store.insert("counters", rows(now, busy[::2], "queue_ecn_marked_packets", "Ethernet8"))
    any_store.insert("counters", rows(now, busy, "queue_ecn_marked_packets", "Ethernet8", source="snmp"))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    resent = frames.rates(["queue_ecn_marked_packets"]).filter(pl.col("port") != "Ethernet8")
    assert resent.height >= 4 * 5 and resent["rate"].max() == pytest.approx(1000.0, rel=0.15)


def test_a_counter_refreshed_as_often_as_it_is_read_keeps_every_read(any_store: Store, now: dt.datetime) -> None:
    """Port counters refreshed every second and read every second: an idle spell's unchanged reads are reads
    (a stalled port's transmit counter is the stall's evidence), and rare errors, whatever their spacing, keep
    the second they came in."""
    stall = [(t + 0.3, 1e9 + 5e9 * min(t, 20) + 5e9 * max(0, t - 40)) for t in range(61)]  # still from 20 to 40 s
    any_store.insert("counters", rows(now, stall, "tx_bytes", "Ethernet0", raw_name="SAI_PORT_STAT_IF_OUT_OCTETS"))
    errors = [(t + 0.3, 10 * sum(1 for e in (7, 19, 33, 46, 52, 55) if e <= t)) for t in range(61)]
    for i in range(1, 9):  # rare error bursts, a few seconds apart, on eight ports
        any_store.insert("counters", rows(now, errors, "fcs_errors", f"Ethernet{i}", raw_name="SAI_PORT_STAT_X"))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    tx = frames.rates(["tx_bytes"])
    assert tx.height == 59 and tx.filter(pl.col("rate") == 0).height == 20  # 60 reads in the window
    fcs = frames.rates(["fcs_errors"]).filter(pl.col("port") == "Ethernet1")
    assert fcs.height == 59 and sorted(fcs["rate"].to_list())[-6:] == [10.0] * 6


def test_a_link_flapping_on_a_steady_period_keeps_each_transition_at_its_read(
    any_store: Store, now: dt.datetime
) -> None:
    """A link down 2 s every 10 s (an auto-negotiation loop) changes its carrier transitions at spacings of 2 and 8 s,
    as regular as a 2 s refresh; the port counts them as they happen and is read every second, so the first flap
    is read in the second it came, not spread back over the 20 quiet seconds before it."""
    flaps = [(20 + 10 * k, 20 + 10 * k + 2) for k in range(4)]
    samples = [(t + 0.3, float(sum((down <= t) + (up <= t) for down, up in flaps))) for t in range(61)]
    any_store.insert("counters", rows(now, samples, "carrier_transitions", raw_name="carrier-transitions", priority=-1))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    got = frames.rates(["carrier_transitions"], min_rate=1e-9).sort("ts")
    assert got.height == 8 and got["dt_s"].to_list() == pytest.approx([1.0] * 8)
    assert got["ts"][0] == now + dt.timedelta(seconds=20.3)
    assert not frames.resent_groups()


def fresh_rates(store: Store, now: dt.datetime, metric: str) -> pl.DataFrame:
    """The `port_rates_fresh` view over the test's minute, as SQL queries it; and `port_rates_fresh_of`, as the
    dashboards do (naming the metric): the same rows."""
    window = f"""start = fromUnixTimestamp64Milli({int(now.timestamp() * 1000)}),
        end = fromUnixTimestamp64Milli({int(now.timestamp() * 1000) + 61_000})"""
    every = query_polars(
        store,
        f"SELECT ts, port, source, rate FROM port_rates_fresh({window}) WHERE metric = {{metric:String}} "
        "ORDER BY port, ts",
        {"metric": metric},
    )
    named = query_polars(
        store,
        f"SELECT ts, port, source, rate FROM port_rates_fresh_of({window}, metrics = [{{metric:String}}]) "
        "ORDER BY port, ts",
        {"metric": metric},
    )
    assert named.equals(every)
    return every


def test_the_fresh_rates_view_reads_counters_as_the_detectors_do(any_store: Store, now: dt.datetime) -> None:
    """Dashboards and SQL read `port_rates_fresh`: a 10 s queue counter sent every second is a steady rate, not
    nine zeros and a 10x jump, and a counter two sources land is rated once (a sum over `port_rates` counts
    it twice, a few counts apart as a "reset" worth the whole counter)."""
    for i in range(4):
        any_store.insert("counters", _resent(now, f"Ethernet{i}", 1000.0, 10, 0.2 + 0.05 * i))
    marks = fresh_rates(any_store, now, "queue_ecn_marked_packets")
    assert marks.height >= 4 * 5 and marks["rate"].min() == pytest.approx(1000.0, rel=0.15)
    assert marks["rate"].max() == pytest.approx(1000.0, rel=0.15)
    plain = query_polars(any_store, "SELECT rate FROM port_rates WHERE metric = 'queue_ecn_marked_packets'")
    assert plain["rate"].max() > 5 * 1000.0  # the raw view keeps what was sent: a jump every refresh

    any_store.insert("counters", rows(now, [(t, 1_000_000 + 50 * t) for t in range(0, 31)]))
    any_store.insert("counters", rows(now, [(t + 0.3, 999_995 + 50 * t) for t in range(0, 31, 10)], source="snmp",
                                      raw_name="cpfcIfPriorityIndications"))  # fmt: skip
    pauses = fresh_rates(any_store, now, "pfc_rx_pause")
    assert pauses["source"].unique().to_list() == ["gnmi"] and pauses.height == 30
    assert pauses["rate"].to_list() == [pytest.approx(50.0)] * 30


def test_a_watermark_sent_again_between_refreshes_is_one_peak(any_store: Store, now: dt.datetime) -> None:
    """SONiC's queue watermarks are peaks since the last flex counter read (60 s), and its gNMI server sends them
    every second: one 2 MB burst came back 60 times, "a microburst" from a single peak. Ports refreshed every
    10 s with one burst per refresh keep each peak once; a still queue's zero a refresh later is a real read."""
    for i in range(10):
        wm = [(t + 0.4, 2e6 * (i + 1) if 10 * (t // 10) in (10, 30) else 0.0) for t in range(61)]
        any_store.insert("counters", rows(now, wm, "queue_watermark_bytes", f"Ethernet{i}", raw_name="SAI_QUEUE_X"))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    peaks = frames.gauges(["queue_watermark_bytes"], min_value=1e6)
    assert peaks.group_by("port").len()["len"].to_list() == [2] * 10  # two bursts per port, each read once
    still = frames.gauges(["queue_watermark_bytes"]).filter(pl.col("port") == "Ethernet0", pl.col("value") == 0)
    assert 3 <= still.height <= 5  # 0-10, 20-30, 40-60 s: each zero a refresh after the last change


def test_a_lone_watermark_on_a_target_that_re_sends_is_read_once(any_store: Store, now: dt.datetime) -> None:
    """One queue's single burst in a quiet minute: too few changes to time its 60 s refresh, but the target's queue
    counters show it re-sends (10 s counters sent every second), so the peak sent 50 times is one read."""
    for i in range(4):
        any_store.insert("counters", _resent(now, f"Ethernet{i}", 1000.0, 10, 0.2))
    wm = [(t + 0.2, 3e7 if t >= 10 else 0.0) for t in range(61)]
    any_store.insert("counters", rows(now, wm, "queue_watermark_bytes", "Ethernet7", raw_name="SAI_QUEUE_X"))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    assert frames.gauges(["queue_watermark_bytes"], min_value=1e6).height == 1


def test_re_sends_are_recognised_across_a_clock_step(any_store: Store, now: dt.datetime) -> None:
    """A switch re-sending 10 s queue counters every second has its clock stepped back 2.5 s at 35 s (the collector
    drops the two samples stamped before its last): one spacing between changes is 7.5 s, not the refresh. The
    re-sends are still no reads, and every rate is the steady one."""
    for i in range(4):
        sent = [(t + 0.2, 5e6 + 1000.0 * 10 * (t // 10)) for t in range(61)]
        stepped = [(s - 2.5 if s > 35 else s, v) for s, v in sent]
        kept = [(s, v) for k, (s, v) in enumerate(stepped) if s > max(x for x, _ in stepped[:k] or [(-1.0, 0)])]
        any_store.insert("counters", rows(now, kept, "queue_ecn_marked_packets", f"Ethernet{i}",
                                          raw_name="SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS"))  # fmt: skip
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=60)))
    assert any(r == pytest.approx(10.0) for r, _ in frames.resent_groups().values())
    got = frames.rates(["queue_ecn_marked_packets"])["rate"]
    assert (
        got.len() <= 4 * 7
        and got.min() == pytest.approx(1000.0, rel=0.35)
        and got.max() == pytest.approx(1000.0, rel=0.35)
    )
