"""`ethtool -S` parsing and name normalization over the real mlx5_core, bnxt_en, ice and i40e outputs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope.collectors.nic.collector import UNKNOWN_PREFIX, normalize
from rocescope.collectors.nic.ethtool import (
    EthtoolStats,
    is_queue_stat,
    parse_ethtool_stats,
    vendor_of_driver,
)

ETHTOOL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "01_ethtool"
FILES = {
    "mlx5": ETHTOOL / "ethq_mlx5_core_cx4_ethtool-S.txt",
    "bnxt": ETHTOOL / "ethq_bnxt_en_ethtool-S.txt",
    "ice": ETHTOOL / "ethq_ice_ethtool-S.txt",
    "i40e": ETHTOOL / "ethq_i40e_ethtool-S.txt",
}


def text(vendor: str) -> str:
    return FILES[vendor].read_text()


def parsed(vendor: str) -> EthtoolStats:
    return parse_ethtool_stats(text(vendor))


def rows(vendor: str, source: str | None = None) -> dict[tuple[str, int], tuple[float, str]]:
    """(metric, priority) -> (value, raw name) of the canonical rows of a real output."""
    norm = normalize(vendor, parsed(vendor).values if source is None else parse_ethtool_stats(source).values)
    out: dict[tuple[str, int], tuple[float, str]] = {}
    for metric, prio, value, raw in zip(norm.metrics, norm.priorities, norm.values, norm.raw_names, strict=True):
        if not metric.startswith(UNKNOWN_PREFIX):
            assert (metric, prio) not in out, f"{vendor}: {metric}/{prio} twice ({raw}, {out.get((metric, prio))})"
            out[(metric, prio)] = (value, raw)
    return out


@pytest.mark.parametrize(
    ("vendor", "port_values", "queue_values"),
    # Counted in the files: lines - header - per-queue lines (bnxt `[N]:`, mlx5 rxN_/txN_, ice
    # {rx,tx}_queue_N_, i40e {rx,tx}-N.).
    [("mlx5", 143, 608), ("bnxt", 211, 288), ("ice", 90, 512), ("i40e", 154, 48)],
)
def test_real_outputs_parse_without_malformed_lines(vendor: str, port_values: int, queue_values: int) -> None:
    stats = parsed(vendor)
    assert stats.malformed == 0
    assert len(stats.values) == port_values
    assert stats.queue_values == queue_values
    assert not any(is_queue_stat(name) or name.startswith("[") for name, _ in stats.values)


def test_driver_vendors() -> None:
    assert [vendor_of_driver(d) for d in ("mlx5_core", "bnxt_en", "ice", "i40e")] == ["mlx5", "bnxt", "ice", "i40e"]
    assert vendor_of_driver("virtio_net") == "virtio_net"
    assert vendor_of_driver("") == "unknown"


def test_mlx5_port_counters_from_the_phy_names() -> None:
    got = rows("mlx5")
    # ethq_mlx5_core_cx4_ethtool-S.txt lines 63-64, 60-61, 103-106
    assert got[("rx_bytes", -1)] == (2202570777997.0, "rx_bytes_phy")
    assert got[("tx_bytes", -1)] == (2662454044895.0, "tx_bytes_phy")
    assert got[("rx_packets", -1)] == (845715962.0, "rx_packets_phy")
    assert got[("tx_packets", -1)] == (896117891.0, "tx_packets_phy")
    assert got[("rx_prio_bytes", 0)] == (2202570777997.0, "rx_prio0_bytes")
    assert got[("tx_prio_packets", 7)] == (0.0, "tx_prio7_packets")
    assert got[("rx_discards", -1)] == (0.0, "rx_discards_phy")
    assert got[("link_down_events", -1)] == (0.0, "link_down_events_phy")
    assert got[("rdma_rx_bytes", -1)] == (0.0, "rx_vport_rdma_unicast_bytes")
    # the software counter `rx_bytes` (2195783498134) is not the port's: it is kept, but raw
    stats = dict(parsed("mlx5").values)
    assert stats["rx_bytes"] == 2195783498134
    norm = normalize("mlx5", [("rx_bytes", 2195783498134)])
    assert norm.metrics == [UNKNOWN_PREFIX + "rx_bytes"] and norm.raw_names == ["rx_bytes"]
    assert norm.priorities == [-1] and norm.unknown == 1


def test_bnxt_rings_skipped_port_and_pfc_counters_mapped() -> None:
    stats = parsed("bnxt")
    names = dict(stats.values)
    assert "rx_ucast_packets" not in names  # only ever printed per ring: `[0]: rx_ucast_packets: ...`
    assert "rx_discards" not in names
    got = rows("bnxt")
    assert got[("rx_out_of_buffer", -1)] == (655430134.0, "rx_total_ring_discards")
    assert got[("rx_discards", -1)] == (49337.0, "rx_stat_discard")
    assert got[("rx_buffer_passed_threshold", -1)] == (417.0, "rx_buffer_passed_threshold")
    assert got[("rx_bytes", -1)] == (577687185962088.0, "rx_bytes")
    for p in range(8):
        assert got[("pfc_rx_pause", p)] == (0.0, f"rx_pfc_ena_frames_pri{p}")
        assert got[("pfc_tx_pause", p)] == (0.0, f"tx_pfc_ena_frames_pri{p}")
        assert got[("pfc_rx_pause_duration_us", p)] == (0.0, f"pfc_pri{p}_rx_duration_us")
        assert got[("rx_cos_discards", p)] == (0.0, f"rx_discard_packets_cos{p}")
    # every PFC counter of the sample is 0: move one (derived from the real text) to see it land on its priority
    changed = text("bnxt").replace("rx_pfc_ena_frames_pri3: 0", "rx_pfc_ena_frames_pri3: 12345")
    assert rows("bnxt", changed)[("pfc_rx_pause", 3)] == (12345.0, "rx_pfc_ena_frames_pri3")


@pytest.mark.parametrize(("vendor", "prefix", "suffix"), [("ice", "", ".nic"), ("i40e", "port.", "")])
def test_intel_priority_xon_xoff_mapped(vendor: str, prefix: str, suffix: str) -> None:
    got = rows(vendor)
    for p in range(8):
        assert got[("pfc_rx_pause", p)] == (0.0, f"{prefix}rx_priority_{p}_xoff{suffix}")
        assert got[("pfc_tx_pause", p)] == (0.0, f"{prefix}tx_priority_{p}_xoff{suffix}")
        assert got[("pfc_rx_xon", p)] == (0.0, f"{prefix}rx_priority_{p}_xon{suffix}")
        assert got[("pfc_tx_xon", p)] == (0.0, f"{prefix}tx_priority_{p}_xon{suffix}")
    changed = text(vendor).replace(f"{prefix}tx_priority_5_xoff{suffix}: 0", f"{prefix}tx_priority_5_xoff{suffix}: 77")
    assert rows(vendor, changed)[("pfc_tx_pause", 5)] == (77.0, f"{prefix}tx_priority_5_xoff{suffix}")


def test_ice_port_counters_not_the_vsi_ones() -> None:
    got = rows("ice")
    assert got[("rx_bytes", -1)] == (848255752.0, "rx_bytes.nic")  # the VSI `rx_bytes: 848243014` stays raw
    assert got[("tx_bytes", -1)] == (74057390445.0, "tx_bytes.nic")
    assert got[("rx_unicast_packets", -1)] == (12117448.0, "rx_unicast.nic")


def test_i40e_port_counters_and_transitions() -> None:
    got = rows("i40e")
    assert got[("rx_bytes", -1)] == (30388004820195.0, "port.rx_bytes")
    assert got[("tx_bytes", -1)] == (55878809901817.0, "port.tx_bytes")
    for p in range(8):
        assert got[("pfc_rx_pause_transition", p)] == (0.0, f"port.rx_priority_{p}_xon_2_xoff")
    names = dict(parsed("i40e").values)
    assert "tx-0.tx_packets" not in names and names["veb.rx_bytes"] == 0  # queues skipped, VEB kept (raw)


def test_malformed_lines_counted_good_lines_kept(caplog: pytest.LogCaptureFixture) -> None:
    lines = text("mlx5").splitlines()
    garbage = ["this is not a counter", "rx_bytes_phy: 12abc", "tx_bytes_phy:", "[x]: 5", ": 7", "\x00\x01 binary"]
    mixed = lines[:60] + garbage[:3] + lines[60:65] + garbage[3:] + lines[65:]
    with caplog.at_level(logging.WARNING, logger="rocescope.collectors.nic.ethtool"):
        stats = parse_ethtool_stats("\n".join(mixed), source="ethtool -S eth3")
    assert stats.values == parsed("mlx5").values  # every good line kept, in order
    assert stats.malformed == 6  # `tx_bytes_phy:` too: a statistic cut before its value, not a header
    assert stats.examples[0] == (61, "this is not a counter")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "ethtool -S eth3: skipped 6 malformed line(s)" in warnings[0].getMessage()
    assert "line 61" in warnings[0].getMessage()


def test_header_and_blank_lines_and_crlf() -> None:
    stats = parse_ethtool_stats("NIC statistics:\r\n     rx_bytes: 5\r\n\r\n     [3]: rx_ucast_packets: 9\r\n")
    assert stats.values == [("rx_bytes", 5)]
    assert stats.queue_values == 1 and stats.malformed == 0


# --- property tests: truncated and garbled input never crashes, and good lines around bad ones are kept

_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_no_colon_line = st.text(
    st.characters(codec="utf-8", exclude_characters=":" + _LINE_BREAKS), min_size=1, max_size=40
).filter(lambda s: s.strip() != "")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(vendor=st.sampled_from(sorted(FILES)), data=st.data())
def test_garbage_lines_are_counted_and_never_lose_good_ones(vendor: str, data: st.DataObject) -> None:
    lines = text(vendor).splitlines()
    inserts = data.draw(st.lists(st.tuples(st.integers(0, len(lines)), _no_colon_line), max_size=8))
    mixed = list(lines)
    for at, bad in sorted(inserts, reverse=True):
        mixed.insert(at, bad)
    stats = parse_ethtool_stats("\n".join(mixed), logger=None)
    clean = parsed(vendor)
    assert stats.values == clean.values
    assert stats.queue_values == clean.queue_values
    assert stats.malformed == len(inserts)


@settings(max_examples=300, deadline=None)
@given(vendor=st.sampled_from(sorted(FILES)), cut=st.integers(0, 60000), noise=st.text(max_size=200))
def test_truncated_or_garbled_text_never_raises(vendor: str, cut: int, noise: str) -> None:
    original = text(vendor)
    garbled = original[: cut % (len(original) + 1)] + noise
    stats = parse_ethtool_stats(garbled, logger=None)
    assert len(stats.values) + stats.queue_values + stats.malformed <= len(garbled.splitlines())
    good = dict(parsed(vendor).values)
    # whatever survived whole is the real value (the last line may be cut mid-number, so skip it)
    for name, value in stats.values[:-1]:
        if name in good:
            assert value == good[name]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_arbitrary_text_never_raises(blob: str) -> None:
    stats = parse_ethtool_stats(blob, logger=None)
    assert stats.malformed >= len(stats.examples)
    for name, value in stats.values:
        assert isinstance(value, int) and name == name.strip() and ":" not in name
