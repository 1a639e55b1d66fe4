"""The simulated fabric served over real protocols (gNMI, SNMP, host views) and gathered back by the real
collectors: lockstep delivery at fabric time, equal to the fast path; detectors work on it; paced mode."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import threading
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze
from rocescope.collectors.gnmi.collector import GnmiCollector
from rocescope.collectors.nccl.parse import parse_inspector
from rocescope.collectors.nccl.write import InspectorRecord
from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
from rocescope.config import Settings, StoreConfig, TransportConfig
from rocescope.pipeline.store import open_store
from rocescope.sim.facades.server import FabricServer
from rocescope.sim.facades.snmp import SnmpAgentFacade, SnmpServer
from rocescope.sim.incidents import build_world
from rocescope.sim.run import RunSummary, simulate
from rocescope.sim.scenario import load_scenario
from rocescope.sim.serve import ServeStats, serve_scenario

SCENARIO = "pfc_storm"  # gpu-005 eth0 stuck pausing 60-90 s
SECONDS = 100.0
KEY = ["offset_s", "device", "port", "metric", "priority"]


def settings(tmp: Path) -> Settings:
    return Settings(store=StoreConfig(path=tmp / "chdb", ttl_days=0), transport=TransportConfig(kind="inprocess"))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, RunSummary, ServeStats]:
    tmp = tmp_path_factory.mktemp("served")
    cfg = settings(tmp)
    summary, stats = serve_scenario(cfg, SCENARIO, SECONDS, tmp / "out")  # out: the Inspector files stay
    return cfg, summary, stats


def landed(cfg: Settings, start: dt.datetime) -> pl.DataFrame:
    with open_store(cfg.store) as store:
        table = store.query_arrow(
            "SELECT ts, toString(device) AS device, toString(port) AS port, toString(metric) AS metric, priority, "
            "value, toString(source) AS source FROM counters"
        )
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(((pl.col("ts") - pl.lit(start)).dt.total_milliseconds() / 1000).alias("offset_s"))


def fast_path() -> pl.DataFrame:
    world = build_world(load_scenario(SCENARIO), SECONDS)
    tables: list[pa.Table] = []
    simulate(world, lambda _ts, t: tables.append(t))
    df = pl.from_arrow(pa.concat_tables(tables))
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(pl.col("device", "port", "metric").cast(pl.String))
    return df.with_columns(((pl.col("ts") - pl.lit(world.start)).dt.total_milliseconds() / 1000).alias("offset_s"))


def test_lockstep_delivers_every_poll_once_equal_to_the_fast_path(
    served: tuple[Settings, RunSummary, ServeStats],
) -> None:
    cfg, summary, stats = served
    assert summary.polls == SECONDS and stats.barrier_timeouts == 0
    assert stats.gnmi_values_sent == stats.gnmi_values_decoded > 0
    got = landed(cfg, summary.start)
    assert set(got["source"]) == {"gnmi", "ethtool", "rdma", "snmp"}
    # every value once: no sample dropped or duplicated, stamped at the fabric poll times
    dup = got.group_by([*KEY, "source"]).len().filter(pl.col("len") > 1)
    assert dup.is_empty(), dup
    proto = got.filter(pl.col("source") != "snmp")
    assert sorted(set(proto["offset_s"])) == [float(s) for s in range(1, int(SECONDS) + 1)]
    # SNMP: ifHighSpeed (the one thing gNMI does not serve), walked once at the start
    snmp = got.filter(pl.col("source") == "snmp")
    assert set(snmp["metric"]) == {"port_speed_bps"} and set(snmp["offset_s"]) == {0.0}

    want = fast_path()
    joined = want.join(proto, on=KEY, how="left", suffix="_served")
    missing = joined.filter(pl.col("value_served").is_null())
    # the only fast-path rows the protocols do not carry: switch port speeds (SNMP, once, above) and carrier
    # transitions (SONiC's COUNTERS_DB, which the ideal switches serve as, keeps none)
    assert set(missing["metric"]) == {"port_speed_bps", "carrier_transitions"}, missing
    both = joined.filter(pl.col("value_served").is_not_null())
    diff = both.filter(pl.col("value") != pl.col("value_served"))
    assert diff.is_empty(), diff
    assert both.height == want.height - missing.height
    # what the protocols add is what a real host shows: link state and speed, IBTA counters on the RDMA port
    extra = proto.join(want, on=KEY, how="anti")
    assert set(extra["metric"]) <= {"oper_up", "port_speed_bps", "rdma_tx_bytes", "rdma_rx_bytes"} | {
        "rdma_tx_packets",
        "rdma_rx_packets",
    }
    assert set(extra["source"]) == {"ethtool", "rdma"}


def test_pfc_storm_detector_finds_the_storm_on_served_data(served: tuple[Settings, RunSummary, ServeStats]) -> None:
    cfg, summary, _ = served
    with open_store(cfg.store) as store:
        result = analyze(store, Window(summary.start, summary.end), cfg.analysis, only=["pfc_storm"], write=False)
    storms = [f for f in result.findings if f.kind == "pfc_storm"]
    assert storms, result.findings
    storm = storms[0]
    assert "gpu-005" in storm.devices
    start_s = (storm.start - summary.start).total_seconds()
    end_s = (storm.end - summary.start).total_seconds()
    assert 58 <= start_s <= 63 and 87 <= end_s <= 92, (start_s, end_s)


def test_ranks_write_inspector_files_the_real_parser_reads_as_the_fast_path_lands_them(
    served: tuple[Settings, RunSummary, ServeStats],
) -> None:
    cfg, summary, stats = served
    assert stats.nccl_dir is not None
    files = sorted(stats.nccl_dir.iterdir())
    assert files and all(re.fullmatch(r"gpu-\d{3}-pid\d+\.log", f.name) for f in files)
    parsed = [parse_inspector(f.read_bytes(), f.name) for f in files]
    assert sum(p.malformed for p in parsed) == 0
    assert sum(p.rows for p in parsed) == stats.nccl_records == stats.nccl_rows_collected == summary.rows["collectives"]
    key = ["host", "pid", "rank", "sequence", "bytes", "exec_time_us"]
    with open_store(cfg.store) as store:
        landed = pl.from_arrow(store.query_arrow(f"SELECT {', '.join(key)} FROM collectives"))
    assert isinstance(landed, pl.DataFrame) and landed.height == stats.nccl_records
    world = build_world(load_scenario(SCENARIO), SECONDS)
    records: list[InspectorRecord] = []
    simulate(world, snapshots=False, on_collectives=records.extend)
    fast = pl.DataFrame([{k: getattr(r, k) for k in key} for r in records])
    both = landed.with_columns(pl.col("host").cast(pl.String)).cast(fast.schema).sort(key)
    assert both.equals(fast.sort(key))  # the same collectives, over files and the NCCL collector


def test_snmp_facade_answers_a_real_walk_with_counters_moving() -> None:
    world = build_world(load_scenario(SCENARIO), 10)
    eng = world.engine
    current: dict[str, pa.Table] = {}
    eng.run(2)
    current["t"] = eng.snapshot(devices=["leaf-r0-01"])
    agent = SnmpAgentFacade("leaf-r0-01", lambda: current["t"])
    loop = asyncio.new_event_loop()
    try:
        with SnmpServer([agent]):
            device = SnmpDevice.from_mapping({"name": "leaf-r0-01", "host": agent.host, "port": agent.port})
            collector = SnmpCollector([device], objects=None)

            def out_octets(first: bool) -> dict[str, float]:
                batch = loop.run_until_complete(collector.poll_all())["leaf-r0-01"]
                assert batch is not None
                df = pl.from_arrow(batch.data)
                assert isinstance(df, pl.DataFrame)
                df = df.with_columns(pl.col("port", "metric", "raw_name").cast(pl.String))
                assert {"ifHCOutOctets", "ifHCInOctets", "ifOperStatus", "ieee8021PfcRequests"} <= set(df["raw_name"])
                if first:  # ifHighSpeed is a slow object: read with the first poll
                    assert df.filter(pl.col("raw_name") == "ifHighSpeed")["value"].min() == 400e9
                tx = df.filter(pl.col("raw_name") == "ifHCOutOctets")
                return dict(zip(tx["port"], tx["value"], strict=True))

            first = out_octets(True)
            eng.run(2)
            current["t"] = eng.snapshot(devices=["leaf-r0-01"])
            second = out_octets(False)
            loop.run_until_complete(collector.aclose())
    finally:
        loop.close()
    assert first.keys() == second.keys() and len(first) > 4
    moved = [p for p in first if second[p] > first[p]]
    assert moved, (first, second)
    assert second["Ethernet0"] == eng.counter("leaf-r0-01", "Ethernet0", "tx_bytes")


def test_paced_mode_serves_fabric_time_and_stops_cleanly(tmp_path: Path) -> None:
    stop = threading.Event()
    seen: dict[str, Any] = {}

    def ready(server: FabricServer) -> None:
        seen["server"] = server

        def client() -> None:
            try:
                collector = GnmiCollector(server.gnmi_targets()[:1])
                seen["batches"] = collector.collect_once(timeout_s=20)
            finally:
                stop.set()

        threading.Thread(target=client, daemon=True).start()

    summary, stats = serve_scenario(
        settings(tmp_path), SCENARIO, 60, tmp_path / "out", speed=4.0, collect=False, stop=stop, on_ready=ready
    )
    assert 1 <= summary.polls < 60  # stopped early
    assert (tmp_path / "out" / "targets-gnmi.yaml").is_file() and (tmp_path / "out" / "targets-snmp.yaml").is_file()
    batches = seen["batches"]
    assert batches and all(b.num_rows for b in batches)
    ts = pa.concat_arrays([b.data.column("ts") for b in batches]).to_pylist()
    assert min(ts) >= summary.start + dt.timedelta(seconds=1)  # fabric time, from the first tick on
    server: FabricServer = seen["server"]
    assert all(f._server is None for f in server.gnmi.values())  # every gNMI target stopped
    assert stats.gnmi_values_decoded == 0  # nothing was collected in-process
