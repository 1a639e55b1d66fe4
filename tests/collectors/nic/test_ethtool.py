"""`ethtool -S` parsing over the real mlx5_core, bnxt_en, ice and i40e outputs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
