"""NicCollector over a FixtureHost made of the real outputs: the Batch, RDMA rows, failures, health and
self-metrics, the run loop."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from pathlib import Path

import polars as pl
import pytest

from rocescope import schema
from rocescope.collectors.nic.collector import NicCollector
from rocescope.collectors.nic.host import FixtureHost, FixtureNic, rerooted
from rocescope.collectors.nic.normalize import UNKNOWN_PREFIX
from rocescope.collectors.nic.sysfs import parse_sysfs_dump
from rocescope.pipeline.batch import Batch, decode, encode
from rocescope.pipeline.transport import InProcessBus

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata"
ETHTOOL = REAL / "01_ethtool"
DUMP = REAL / "02_rdma" / "procfs_fixture_mlx5_0_sysfs.txt"
TS = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def real(name: str) -> str:
    return (ETHTOOL / name).read_text()


def nics(broken: bool = False) -> list[FixtureNic]:
    dump = DUMP.read_text()
    out = [
        FixtureNic("eth3", "mlx5_core", real("ethq_mlx5_core_cx4_ethtool-S.txt"), "mlx5_3", 1, dump, speed_mbps=25000),
        FixtureNic("ens1f0np0", "bnxt_en", real("ethq_bnxt_en_ethtool-S.txt"), speed_mbps=100000),
        FixtureNic("ens2f0", "ice", real("ethq_ice_ethtool-S.txt"), speed_mbps=100000),
        FixtureNic("ens3f0", "i40e", real("ethq_i40e_ethtool-S.txt"), operstate="down"),
    ]
    if broken:
        out.append(FixtureNic("eth9", "mlx5_core", None))  # `ethtool -S eth9` fails
    return out


def frame(batch: Batch) -> pl.DataFrame:
    df = pl.from_arrow(batch.data)
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col("device", "role", "port", "metric", "source", "raw_name").cast(pl.String))


def value(df: pl.DataFrame, port: str, metric: str, priority: int = -1) -> float:
    hit = df.filter((pl.col("port") == port) & (pl.col("metric") == metric) & (pl.col("priority") == priority))
    assert hit.height == 1, f"{port} {metric}/{priority}: {hit.height} rows"
    return float(hit["value"][0])


def test_poll_is_one_conforming_batch_that_round_trips() -> None:
    collector = NicCollector(FixtureHost.from_nics(nics()), "gpu-a01")
    batch = collector.poll(TS)
    assert batch.stream == "counters" and batch.key == "gpu-a01"
    assert batch.data.schema.equals(schema.arrow_schema("counters"))
    for name in ("device", "role", "port", "metric", "source", "raw_name"):
        assert str(batch.data.schema.field(name).type) == "dictionary<values=string, indices=int32, ordered=0>"
    back = decode("counters", encode(batch), key=batch.key)
    assert back.data.equals(batch.data) and back.key == "gpu-a01"
    df = frame(batch)
    assert set(df["device"]) == {"gpu-a01"} and set(df["role"]) == {"nic"} and set(df["ts"]) == {TS}
    assert set(df["port"]) == {"eth3", "ens1f0np0", "ens2f0", "ens3f0", "mlx5_3/1"}
    assert set(df.filter(pl.col("port") == "mlx5_3/1")["source"]) == {"rdma"}
    assert set(df.filter(pl.col("port") != "mlx5_3/1")["source"]) == {"ethtool"}
    assert collector.port_map == {"mlx5_3/1": "eth3"}
    # canonical rows are unique per (port, metric, priority): unknowns never collide with them
    canonical = df.filter(~pl.col("metric").str.starts_with(UNKNOWN_PREFIX))
    assert canonical.select("port", "metric", "priority").is_unique().all()
    assert set(canonical["metric"]) <= set(schema.METRICS_BY_NAME)


def test_values_per_vendor_land_on_their_canonical_names() -> None:
    df = frame(NicCollector(FixtureHost.from_nics(nics()), "gpu-a01").poll(TS))
    assert value(df, "eth3", "rx_bytes") == 2202570777997  # mlx5 rx_bytes_phy
    assert value(df, "ens1f0np0", "rx_out_of_buffer") == 655430134  # bnxt rx_total_ring_discards
    assert value(df, "ens1f0np0", "pfc_rx_pause", 3) == 0  # bnxt rx_pfc_ena_frames_pri3
    assert value(df, "ens2f0", "tx_bytes") == 74057390445  # ice tx_bytes.nic
    assert value(df, "ens3f0", "pfc_tx_pause", 7) == 0  # i40e port.tx_priority_7_xoff
    assert value(df, "mlx5_3/1", "rdma_rx_bytes") == 18126345378 * 4  # IB words x4
    assert value(df, "mlx5_3/1", "local_ack_timeout_err") == 131
    # link state and speed: netdevs from /sys/class/net, RDMA port from state/rate
    assert value(df, "eth3", "oper_up") == 1 and value(df, "eth3", "port_speed_bps") == 25e9
    assert value(df, "ens3f0", "oper_up") == 0
    assert df.filter((pl.col("port") == "ens3f0") & (pl.col("metric") == "port_speed_bps")).height == 0
    assert value(df, "mlx5_3/1", "port_speed_bps") == 25e9
    # per-queue statistics are not shipped
    assert not df.filter(pl.col("raw_name").str.contains(r"^(rx|tx)\d+_|_queue_\d+_|^[rt]x-\d+\.")).height


def test_a_failing_netdev_is_counted_logged_once_and_the_rest_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    collector = NicCollector(FixtureHost.from_nics(nics(broken=True)), "gpu-a01")
    with caplog.at_level(logging.INFO, logger="rocescope.collectors.nic.collector"):
        batches = [collector.poll(TS) for _ in range(3)]
    healthy = NicCollector(FixtureHost.from_nics(nics()), "gpu-a01").poll(TS)
    assert all(b.num_rows == healthy.num_rows for b in batches)
    m = collector.metrics
    assert m.value("rocescope_nic_poll_failures_total", target="eth9") == 3
    assert m.value("rocescope_nic_poll_failures_total") == 3
    assert m.value("rocescope_nic_target_up", target="eth9") == 0
    assert m.value("rocescope_nic_target_up", target="eth3") == 1
    assert m.value("rocescope_nic_polls_total", target="eth3") == 3
    down = collector.health()["eth9"]
    assert (down.up, down.failures, down.consecutive_failures) == (False, 3, 3)
    assert down.last_error == "no `ethtool -S` output recorded"
    assert collector.health()["mlx5_3/1"].up
    assert [r.getMessage() for r in caplog.records] == ["nic gpu-a01 eth9: no `ethtool -S` output recorded"]
    # recovery is said once too
    assert isinstance(collector.host, FixtureHost)
    collector.host.ethtool["eth9"] = real("ethq_mlx5_core_cx4_ethtool-S.txt")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rocescope.collectors.nic.collector"):
        collector.poll(TS)
        collector.poll(TS)
    assert [r.getMessage() for r in caplog.records] == ["nic gpu-a01 eth9: read fine again"]
    assert m.value("rocescope_nic_target_up", target="eth9") == 1


def test_malformed_output_keeps_good_values_and_counts_bad_lines(caplog: pytest.LogCaptureFixture) -> None:
    lines = real("ethq_mlx5_core_cx4_ethtool-S.txt").splitlines()
    lines[10:10] = ["<<< garbage >>>", "rx_bytes_phy: twelve"]
    lines.append("truncated_line_with_no_val")
    host = FixtureHost.from_nics([FixtureNic("eth3", "mlx5_core", "\n".join(lines))])
    collector = NicCollector(host, "gpu-a01")
    with caplog.at_level(logging.WARNING, logger="rocescope.collectors.nic.collector"):
        df = frame(collector.poll(TS))
        collector.poll(TS)
    assert value(df, "eth3", "rx_bytes") == 2202570777997  # the real line further down is still read
    assert value(df, "eth3", "tx_bytes") == 2662454044895
    assert collector.metrics.value("rocescope_nic_malformed_total", target="eth3") == 6  # 3 per poll
    assert collector.metrics.value("rocescope_nic_poll_failures_total") == 0
    assert len(caplog.records) == 1
    assert caplog.records[0].getMessage() == (
        "nic gpu-a01 eth3: skipped 3 malformed line(s) of `ethtool -S`, kept 143 values; "
        "first at line 11: '<<< garbage >>>'"
    )
    assert collector.health()["eth3"].up and collector.health()["eth3"].malformed == 6


def test_unknown_names_kept_raw_or_dropped() -> None:
    keep = frame(NicCollector(FixtureHost.from_nics(nics()), "h").poll(TS))
    dropping = NicCollector(FixtureHost.from_nics(nics()), "h", keep_unknown=False)
    drop = frame(dropping.poll(TS))
    raw = keep.filter(pl.col("metric").str.starts_with(UNKNOWN_PREFIX))
    assert raw.height == keep.height - drop.height > 0
    # dropped names are still counted, as skipped and why
    skipped = dropping.metrics.value("rocescope_nic_values_total", outcome="skipped", reason="name not in the catalog")
    assert skipped == raw.height and dropping.metrics.value("rocescope_nic_values_total", outcome="raw") == 0
    assert dropping.metrics.value("rocescope_nic_values_total", outcome="landed") == drop.height
    assert (raw["metric"] == UNKNOWN_PREFIX + raw["raw_name"]).all()
    assert set(raw["priority"]) == {-1}
    ice_vsi = raw.filter((pl.col("port") == "ens2f0") & (pl.col("raw_name") == "rx_bytes"))
    assert ice_vsi["metric"].to_list() == ["raw:rx_bytes"] and ice_vsi["value"].to_list() == [848243014.0]


def test_self_metrics_count_values_and_time() -> None:
    collector = NicCollector(FixtureHost.from_nics(nics()), "h")
    batch = collector.poll()
    m = collector.metrics
    assert m.value("rocescope_nic_values_total") == batch.num_rows
    assert m.value("rocescope_nic_values_total", target="mlx5_3/1") == 47
    assert m.value("rocescope_nic_queue_values_skipped_total") == 608 + 288 + 512 + 48
    # each value by what became of it: rows under a catalog name, rows kept under their raw name (and why)
    raw = frame(batch).filter(pl.col("metric").str.starts_with(UNKNOWN_PREFIX)).height
    assert raw > 0
    assert m.value("rocescope_nic_values_total", outcome="raw", reason="name not in the catalog") == raw
    assert m.value("rocescope_nic_values_total", outcome="landed") == batch.num_rows - raw
    assert m.value("rocescope_nic_poll_seconds_count") == 1
    assert m.value("rocescope_nic_poll_cpu_seconds_total") > 0
    assert m.value("rocescope_nic_target_seconds", target="eth3") > 0
    assert collector.health()["eth3"].values == m.value("rocescope_nic_values_total", target="eth3") > 0
    # without a fixed ts, each target carries the time it was read
    df = frame(batch)
    assert df["ts"].n_unique() >= 1
    assert abs(df["ts"].max() - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=1)  # type: ignore[operator]


def rdma_host() -> FixtureHost:
    return FixtureHost.from_nics([FixtureNic("eth3", "mlx5_core", None, "mlx5_3", 1, DUMP.read_text())])


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
    files = rerooted(parse_sysfs_dump(DUMP.read_text()).files, "mlx5_3")
    files["/sys/class/infiniband/mlx5_3/ports/1/hw_counters/out_of_sequence"] = "N/A"
    host = FixtureHost({}, files)
    collector = NicCollector(host, "gpu-07")
    with caplog.at_level(logging.WARNING, logger="rocescope.collectors.nic.collector"):
        df = rdma_rows(collector)
        rdma_rows(collector)
    assert "out_of_sequence" not in set(df["metric"])
    assert ("local_ack_timeout_err", 131.0) in set(df.select("metric", "value").iter_rows())
    assert collector.metrics.value("rocescope_nic_malformed_total", target="mlx5_3/1") == 2
    assert collector.metrics.value("rocescope_nic_target_up", target="mlx5_3/1") == 1
    assert [r.getMessage() for r in caplog.records] == [
        "nic gpu-07 mlx5_3/1: skipped 1 non-numeric counter(s): hw_counters/out_of_sequence='N/A'"
    ]  # once, not once per poll


def test_rediscovery_picks_up_a_new_netdev() -> None:
    host = FixtureHost.from_nics(nics())
    collector = NicCollector(host, "h", rediscover_s=0)
    before = set(frame(collector.poll(TS))["port"])
    host._netdevs = [*host.netdevs(), "eth9"]
    host.ethtool["eth9"] = real("ethq_i40e_ethtool-S.txt")
    after = set(frame(collector.poll(TS))["port"])
    assert after - before == {"eth9"}


class RefusingProducer:
    def __init__(self) -> None:
        self.calls = 0

    def publish(self, batch: Batch) -> None:
        self.calls += 1
        raise ConnectionError("broker down")

    def flush(self, timeout: float | None = None) -> None:
        return None

    def close(self) -> None:
        return None


def test_run_publishes_each_poll_through_the_transport() -> None:
    bus = InProcessBus()
    collector = NicCollector(FixtureHost.from_nics(nics()), "gpu-a01", bus.producer())
    stop = threading.Event()
    consumer = bus.consumer("test", ["counters"])
    thread = threading.Thread(target=lambda: collector.run(0.02, stop))
    thread.start()
    got: list[Batch] = []
    for _ in range(50):
        got += [m.batch for m in consumer.poll(timeout_ms=200, max_records=10) if m.batch is not None]
        if len(got) >= 3:
            break
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    rows = NicCollector(FixtureHost.from_nics(nics()), "gpu-a01").poll().num_rows
    assert len(got) >= 3
    assert all(b.key == "gpu-a01" and b.num_rows == rows for b in got)
    assert collector.metrics.value("rocescope_nic_polls_total", target="eth3") >= 3


def test_the_rdma_port_to_netdev_map_is_published_once_per_discovery() -> None:
    """`links` rows of source `rdma` (the host to itself): what names a host's RDMA port after its netdev where no
    job placement does; again after each rediscovery, none between."""
    collector = NicCollector(FixtureHost.from_nics(nics()), "gpu-a01", rediscover_s=3600)
    assert collector.inventory_batch() is None  # nothing discovered yet
    collector.poll(TS)
    batch = collector.inventory_batch()
    assert batch is not None and batch.stream == "links" and batch.key == "gpu-a01"
    rows = batch.data.to_pylist()
    assert [(r["device"], r["port"], r["peer_device"], r["peer_port"], r["source"]) for r in rows] == [
        ("gpu-a01", "mlx5_3/1", "gpu-a01", "eth3", "rdma")
    ]
    collector.poll(TS)
    assert collector.inventory_batch() is None


def test_run_goes_on_when_publishing_fails(caplog: pytest.LogCaptureFixture) -> None:
    producer = RefusingProducer()
    collector = NicCollector(FixtureHost.from_nics(nics()), "gpu-a01", producer)
    stop = threading.Event()
    timer = threading.Timer(0.3, stop.set)
    timer.start()
    with caplog.at_level(logging.WARNING, logger="rocescope.collectors.nic.collector"):
        polls = collector.run(0.05, stop)
    assert polls >= 2 and producer.calls == polls + 1  # each poll, and the RDMA port -> netdev map once
    assert collector.metrics.value("rocescope_nic_publish_errors_total") == polls + 1
    assert "broker down" in caplog.records[0].getMessage()


def test_run_counts_overruns_instead_of_drifting() -> None:
    collector = NicCollector(FixtureHost.from_nics(nics()), "h")
    stop = threading.Event()
    timer = threading.Timer(0.2, stop.set)
    timer.start()
    polls = collector.run(0.0001, stop)  # every poll takes longer than the interval
    assert polls >= 2
    assert collector.metrics.value("rocescope_nic_overruns_total") >= polls - 1
