"""Raw `ethtool -S` names -> canonical rows over the real mlx5_core, bnxt_en, ice and i40e outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocescope.collectors.nic.ethtool import EthtoolStats, parse_ethtool_stats
from rocescope.collectors.nic.normalize import UNKNOWN_PREFIX, normalize

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
    for metric, prio, value, raw in zip(norm.metric, norm.priority, norm.value, norm.raw_name, strict=True):
        if not metric.startswith(UNKNOWN_PREFIX):
            assert (metric, prio) not in out, f"{vendor}: {metric}/{prio} twice ({raw}, {out.get((metric, prio))})"
            out[(metric, prio)] = (value, raw)
    return out


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
    assert norm.metric == [UNKNOWN_PREFIX + "rx_bytes"] and norm.raw_name == ["rx_bytes"]
    assert norm.priority == [-1] and norm.unknown == 1


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
