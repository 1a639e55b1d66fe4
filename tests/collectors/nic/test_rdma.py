"""RDMA port counters from the real mlx5_0 sysfs dump (prometheus/procfs fixture): parsing and canonical rows."""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocescope.collectors.nic.collector import UNKNOWN_PREFIX, FixtureHost, FixtureNic, LinkState, NicCollector
from rocescope.collectors.nic.host import rerooted
from rocescope.collectors.nic.sysfs import MemorySysfs, ib_rate_mbps, ib_state_active, parse_sysfs_dump

RDMA = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "02_rdma"
DUMP = RDMA / "procfs_fixture_mlx5_0_sysfs.txt"
TS = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def dump_text() -> str:
    return DUMP.read_text()


def test_dump_parses_every_file() -> None:
    dump = parse_sysfs_dump(dump_text())
    assert dump.malformed == 0
    assert len(dump.files) == 54  # 55 lines, one comment
    port = "/sys/class/infiniband/mlx5_0/ports/1"
    assert dump.files[f"{port}/state"] == "4: ACTIVE"
    assert dump.files[f"{port}/rate"] == "25 Gb/sec (1X EDR)"
    assert dump.files[f"{port}/hw_counters/local_ack_timeout_err"] == "131"
    assert dump.files["/sys/class/infiniband/mlx5_0/fw_ver"] == "14.28.2006"


def test_dump_malformed_lines_counted(caplog: pytest.LogCaptureFixture) -> None:
    text = dump_text().replace("/sys/class/infiniband/mlx5_0/hca_type: MT4118", "hca_type MT4118 garbage")
    with caplog.at_level(logging.WARNING):
        dump = parse_sysfs_dump(text + "\nnot a path: 5\n", source="mlx5_0 dump")
    assert dump.malformed == 2 and len(dump.files) == 53
    assert len(caplog.records) == 1 and "mlx5_0 dump: skipped 2 malformed line(s)" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("rate", "mbps"),
    [("25 Gb/sec (1X EDR)", 25000), ("2.5 Gb/sec (1X SDR)", 2500), ("400 Gb/sec (4X NDR)", 400000), ("?", None)],
)
def test_ib_rate(rate: str, mbps: int | None) -> None:
    assert ib_rate_mbps(rate) == mbps


@pytest.mark.parametrize(
    ("state", "up"), [("4: ACTIVE", True), ("1: DOWN", False), ("2: INIT", False), ("3: ARMED", False), ("", None)]
)
def test_ib_state(state: str, up: bool | None) -> None:
    assert ib_state_active(state) is up


def test_memory_sysfs_behaves_like_a_filesystem() -> None:
    fs = MemorySysfs(rerooted(parse_sysfs_dump(dump_text()).files, "mlx5_7"), {"/sys/class/net/eth7/device": "../x"})
    assert fs.listdir("/sys/class/infiniband") == ["mlx5_7"]
    assert fs.listdir("/sys/class/infiniband/mlx5_7/ports") == ["1"]
    assert "port_rcv_data" in fs.listdir("/sys/class/infiniband/mlx5_7/ports/1/counters/")
    assert fs.read("/sys/class/infiniband/mlx5_7/ports/1/counters/port_rcv_data") == "18126345378"
    assert fs.readlink("/sys/class/net/eth7/device") == "../x"
    assert fs.exists("/sys/class/net/eth7") and not fs.exists("/sys/class/net/eth8")
    with pytest.raises(FileNotFoundError):
        fs.read("/sys/class/infiniband/mlx5_7/nope")
    with pytest.raises(NotADirectoryError):
        fs.listdir("/sys/class/infiniband/mlx5_7/fw_ver")
    with pytest.raises(OSError):
        fs.readlink("/sys/class/infiniband/mlx5_7/fw_ver")


def rdma_host() -> FixtureHost:
    return FixtureHost.from_nics([FixtureNic("eth3", "mlx5_core", None, "mlx5_3", 1, dump_text())])


def test_fixture_host_rdma_seam() -> None:
    host = rdma_host()
    assert host.rdma_devices() == ["mlx5_3"]
    assert host.rdma_ports("mlx5_3") == [1]
    assert host.netdev_of("mlx5_3", 1) == "eth3"
    assert host.rdma_link("mlx5_3", 1) == LinkState(True, 25000)
    counters = host.rdma_port_counters("mlx5_3", 1, "counters")
    hw = host.rdma_port_counters("mlx5_3", 1, "hw_counters")
    assert len(counters) == 21 and len(hw) == 25
    assert counters["port_xmit_data"] == "2880761508848" and hw["out_of_sequence"] == "1"
    assert host.rdma_port_counters("mlx5_9", 1, "counters") == {}
    with pytest.raises(ValueError, match="unknown RDMA counter group"):
        host.rdma_port_counters("mlx5_3", 1, "../../../etc")


def rdma_rows(collector: NicCollector) -> pl.DataFrame:
    batch = collector.poll(TS)
    df = pl.from_arrow(batch.data)
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(pl.col("port", "metric", "raw_name", "source").cast(pl.String))
    return df.filter(pl.col("port") == "mlx5_3/1")


def test_rdma_rows_canonical_scaled_and_raw() -> None:
    df = rdma_rows(NicCollector(rdma_host(), "gpu-07"))
    assert set(df["source"]) == {"rdma"} and set(df["priority"]) == {-1}
    got = {m: (v, r) for m, v, r in df.select("metric", "value", "raw_name").iter_rows()}
    # hw_counters (vendor mlx5_rdma), values as in the dump
    assert got["out_of_sequence"] == (1.0, "out_of_sequence")
    assert got["local_ack_timeout_err"] == (131.0, "local_ack_timeout_err")
    assert got["packet_seq_err"] == (1.0, "packet_seq_err")
    assert got["duplicate_request"] == (41.0, "duplicate_request")
    assert got["req_cqe_error"] == (3481.0, "req_cqe_error")
    assert got["rx_read_requests"] == (175528982.0, "rx_read_requests")
    assert got["roce_adp_retrans"] == (99.0, "roce_adp_retrans")
    # IB PortCounters (vendor ib_port): data counters are 4-byte words, scaled x4
    assert got["rdma_rx_bytes"] == (18126345378 * 4.0, "port_rcv_data")
    assert got["rdma_tx_bytes"] == (2880761508848 * 4.0, "port_xmit_data")
    assert got["rdma_rx_packets"] == (541889824.0, "port_rcv_packets")
    assert got["link_down_events"] == (0.0, "link_downed")
    # link state and rate
    assert got["oper_up"] == (1.0, "state")
    assert got["port_speed_bps"] == (25e9, "rate")
    # unknown names kept raw; `lifespan` (a setting, not a counter) dropped
    assert got[UNKNOWN_PREFIX + "req_cqe_flush_error"] == (80.0, "req_cqe_flush_error")
    assert got[UNKNOWN_PREFIX + "unicast_xmit_packets"] == (10907922116.0, "unicast_xmit_packets")
    assert "lifespan" not in set(df["raw_name"])
    assert df.height == 21 + 24 + 2
    assert set(df["ts"]) == {TS}


def test_rdma_unknown_names_can_be_dropped() -> None:
    df = rdma_rows(NicCollector(rdma_host(), "gpu-07", keep_unknown=False))
    assert not df.filter(pl.col("metric").str.starts_with(UNKNOWN_PREFIX)).height
    assert df.height == 28  # 9 IB PortCounters + 17 hw_counters in the catalog, + state and rate


def test_non_numeric_counter_counted_others_kept(caplog: pytest.LogCaptureFixture) -> None:
    files = rerooted(parse_sysfs_dump(dump_text()).files, "mlx5_3")
    files["/sys/class/infiniband/mlx5_3/ports/1/hw_counters/out_of_sequence"] = "N/A"
    host = FixtureHost({}, files)
    collector = NicCollector(host, "gpu-07")
    with caplog.at_level(logging.WARNING, logger="rocescope.collectors.nic.collector"):
        df = rdma_rows(collector)
        rdma_rows(collector)
    assert "out_of_sequence" not in set(df["metric"])
    assert ("local_ack_timeout_err", 131.0) in set(df.select("metric", "value").iter_rows())
    assert collector.metrics.value("rocescope_nic_malformed_lines_total", target="mlx5_3/1") == 2
    assert collector.metrics.value("rocescope_nic_target_up", target="mlx5_3/1") == 1
    assert [r.getMessage() for r in caplog.records] == [
        "nic gpu-07: mlx5_3/1: skipped 1 non-numeric counter(s): hw_counters/out_of_sequence='N/A'"
    ]  # once, not once per poll


# --- property test: a garbled dump never crashes the parser and keeps the good lines

_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_garbled_dump_keeps_good_lines(data: st.DataObject) -> None:
    lines = dump_text().splitlines()
    bad = st.text(st.characters(codec="utf-8", exclude_characters="/#" + _LINE_BREAKS), min_size=1)
    inserts = data.draw(st.lists(st.tuples(st.integers(0, len(lines)), bad.filter(str.strip)), max_size=6))
    mixed = list(lines)
    for at, line in sorted(inserts, reverse=True):
        mixed.insert(at, line)
    dump = parse_sysfs_dump("\n".join(mixed), logger=None)
    assert dump.files == parse_sysfs_dump(dump_text()).files
    assert dump.malformed == len(inserts)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_dump_never_raises(blob: str) -> None:
    dump = parse_sysfs_dump(blob, logger=None)
    assert all(path.startswith("/") for path in dump.files)
