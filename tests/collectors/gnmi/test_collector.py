"""The gNMI collector's streams against the simulator's gNMI target (a real grpc server on loopback, the
real stubs) with TLS, credentials, server restarts and malformed data, and `rocescope collect gnmi`.
Nothing on the wire is faked.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import polars as pl
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from rocescope import catalog, schema
from rocescope.cli import app
from rocescope.collectors.common.health import STALE
from rocescope.collectors.gnmi.collector import GnmiCollector
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb, pb_grpc
from rocescope.collectors.gnmi.targets import GnmiTarget
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import InProcessBus
from rocescope.sim.engine import Engine
from rocescope.sim.facades.gnmi import GnmiFacade, engine_source
from rocescope.sim.jobs import Flow, JobSpec, place_jobs
from rocescope.sim.params import EngineParams
from rocescope.sim.roce import QpAllocator, udp_sport
from rocescope.sim.topology import FabricSpec, Topology

from certs import make_pki

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
TS = 1_740_830_400_000_000_000
SWITCH = "leaf-r0-01"


# --- helpers ---------------------------------------------------------------------------------------


def frame(batch: Batch | None) -> pl.DataFrame:
    assert batch is not None
    df = pl.from_arrow(batch.data)
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col("device", "role", "port", "metric", "source", "raw_name").cast(pl.String))


def frames(batches: list[Batch]) -> pl.DataFrame:
    return pl.concat([frame(b) for b in batches])


def rows(df: pl.DataFrame) -> dict[tuple[str, int, str], float]:
    return {(p, q, m): v for p, q, m, v in df.select("port", "priority", "metric", "value").iter_rows()}


def wait_for(check: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- against the simulator's gNMI target ---------------------------------------------------------


@pytest.fixture(scope="module")
def engine() -> Engine:
    """A small fabric with a 3:1 incast (ECN marks, queues, PG watermarks): non-zero switch counters to serve."""
    topo = Topology(FabricSpec(hosts=4, rails=2, spines=1, host_speed_gbps=100, uplink_speed_gbps=100))
    job = place_jobs(topo, [JobSpec("t", 4, "test", compute_ms=1e9)])[0]
    qps = QpAllocator(1)
    dst = topo.nic("gpu-004", 0)
    flows = []
    for host in ("gpu-001", "gpu-002", "gpu-003"):
        src = topo.nic(host, 0)
        sq, dq = qps.allocate(src.host, src.rdma_dev), qps.allocate(dst.host, dst.rdma_dev)
        flows.append(Flow(job.job_id, "ring", src, dst, 0, 1, sq, dq, udp_sport(sq, dq), 10**15))
    eng = Engine(topo, [job], flows, params=EngineParams(), start=T0, stagger=False)
    eng.run(0.1)
    return eng


@pytest.fixture
def served(engine: Engine) -> pl.DataFrame:
    df = pl.from_arrow(engine.snapshot(devices=[SWITCH], reset_watermarks=False))
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col("port", "metric", "raw_name").cast(pl.String))


@pytest.fixture
def facade(engine: Engine) -> Iterator[GnmiFacade]:
    with GnmiFacade(engine_source(engine, SWITCH)) as f:
        yield f


def served_as(served: pl.DataFrame, vendor: str) -> dict[tuple[str, int, str], float]:
    """The rows the facade serves in one path family (SAI raw names, or metrics with an OpenConfig name) that
    the vendor's default subscriptions cover (SONiC: `COUNTERS/Ethernet*...`, so not the buffer pool)."""
    out = {}
    for port, prio, metric, raw, value in served.select("port", "priority", "metric", "raw_name", "value").iter_rows():
        sai = catalog.resolve("sonic_sai", raw) is not None
        oc = bool(catalog.METRICS_BY_NAME[metric].vendor_names.get("openconfig"))
        if (vendor == "sonic" and sai and port.startswith("Ethernet")) or (vendor == "openconfig" and oc):
            out[(port, prio, metric)] = value
    return out


@pytest.mark.parametrize("encoding", ["json_ietf", "proto"])
@pytest.mark.parametrize("vendor", ["sonic", "openconfig"])
def test_subscribe_stream_values_match_what_was_served(
    facade: GnmiFacade, served: pl.DataFrame, vendor: str, encoding: str
) -> None:
    """STREAM/SAMPLE over real grpc: batches reach the producer, and every value is the one served."""
    assert served.filter(pl.col("metric") == "queue_ecn_marked_packets")["value"].sum() > 0  # the incast marked ECN
    bus = InProcessBus()
    collector = GnmiCollector(
        [GnmiTarget(SWITCH, facade.address, vendor=vendor, encoding=encoding)], bus.producer(), flush_s=0.2
    )
    stop = threading.Event()
    worker = threading.Thread(target=collector.run, args=(stop,))
    worker.start()
    expected = served_as(served, vendor)
    try:
        wait_for(lambda: collector.health()[SWITCH].synced, what="first sample")
        # every path's first sample decoded (later samples re-send its stamps: stale, dropped)
        wait_for(lambda: collector.health()[SWITCH].values >= len(expected), what="the first sample of every path")
        wait_for(lambda: bus.end_offset(schema.topic("counters")) > 0, what="a published batch")
        health = collector.health()[SWITCH]
        assert health.connected and health.last_error is None and health.failures == 0
    finally:
        stop.set()
        worker.join(10)
    assert not worker.is_alive()
    batches = [m.batch for m in bus.messages(schema.topic("counters")) if m.batch is not None]
    df = frames(batches)
    assert set(df["device"]) == {SWITCH} and set(df["source"]) == {"gnmi"}
    got = rows(df)
    assert got == expected  # every served value arrived, under the same port/priority/metric, unchanged
    assert df["ts"].dt.epoch("ns").unique().to_list() == [int(served["ts"].dt.epoch("ns")[0])]
    assert collector.metrics.value("rocescope_gnmi_values_total", target=SWITCH, outcome="landed") == df.height
    # the facade serves one snapshot, so every sample after the first re-sends its stamp: dropped, and counted
    stale = collector.metrics.value("rocescope_gnmi_values_total", target=SWITCH, outcome="skipped", reason=STALE)
    assert stale == collector.health()[SWITCH].stale
    assert collector.metrics.value("rocescope_gnmi_target_up", target=SWITCH) == 0  # closed on stop


def test_get_and_capabilities(facade: GnmiFacade, served: pl.DataFrame) -> None:
    with grpc.insecure_channel(facade.address) as channel:
        stub = pb_grpc.gNMIStub(channel)
        caps = stub.Capabilities(pb.CapabilityRequest(), timeout=5)
        assert caps.gNMI_version == "0.8.0" and {m.name for m in caps.supported_models} >= {"openconfig-interfaces"}
        req = pb.GetRequest(prefix=pb.Path(target="COUNTERS_DB"), path=[parse_path("COUNTERS/Ethernet0")], encoding=4)
        got = stub.Get(req, timeout=5)
    (n,) = got.notification
    doc = json.loads(n.update[0].val.json_ietf_val)
    want = served.filter((pl.col("port") == "Ethernet0") & pl.col("raw_name").str.starts_with("SAI_PORT_STAT"))
    assert doc == {raw: str(int(v)) for raw, v in want.select("raw_name", "value").iter_rows()}


def test_tls_and_credentials(engine: Engine, served: pl.DataFrame, tmp_path: Path) -> None:
    """TLS with the target's CA and username/password metadata; wrong credentials are refused and the
    collector's health says so; a plaintext client cannot talk to a TLS target."""
    pki = make_pki(tmp_path / "pki")
    ca, cert, key = pki.ca, pki.cert.read_bytes(), pki.key.read_bytes()
    with GnmiFacade(engine_source(engine, SWITCH), tls=(cert, key), username="admin", password="s3cret") as f:
        good = GnmiTarget(
            "a", f.address, vendor="sonic", tls=True, ca_cert=str(ca), username="admin", password="s3cret"
        )
        bad = GnmiTarget("b", f.address, vendor="sonic", tls=True, ca_cert=str(ca), username="admin", password="nope")
        plain = GnmiTarget("c", f.address, vendor="sonic", username="admin", password="s3cret", timeout_s=1)
        collector = GnmiCollector([good, bad, plain])
        df = frames(collector.collect_once(timeout_s=10))
        health = collector.health()
    assert set(df["device"]) == {"a"}
    assert rows(df) == served_as(served, "sonic")
    assert health["a"].synced and health["a"].last_error is None
    assert not health["b"].synced and health["b"].failures == len(bad.groups())  # each stream (COUNTERS_DB, APPL_DB)
    assert "UNAUTHENTICATED" in (health["b"].last_error or "")
    assert not health["c"].synced and health["c"].last_error
    assert f.rejected >= 1


def test_reconnects_after_the_target_restarts(engine: Engine) -> None:
    source = engine_source(engine, SWITCH)
    f = GnmiFacade(source).start()
    port = f.port
    target = GnmiTarget(SWITCH, f.address, vendor="sonic", encoding="proto", timeout_s=1)
    collector = GnmiCollector([target], backoff_initial_s=0.1, backoff_max_s=0.4, flush_s=0.1)
    stop = threading.Event()
    worker = threading.Thread(target=collector.run, args=(stop,))
    worker.start()
    try:
        wait_for(lambda: collector.health()[SWITCH].connected, what="connected")
        before = collector.health()[SWITCH]
        f.stop()
        wait_for(lambda: not collector.health()[SWITCH].connected, what="disconnected")
        wait_for(lambda: collector.health()[SWITCH].reconnects >= 2, what="reconnect attempts while down")
        down = collector.health()[SWITCH]
        assert down.failures >= 1 and down.last_error
        f2 = GnmiFacade(source, port=port).start()
        try:
            wait_for(lambda: collector.health()[SWITCH].connected, what="reconnected")
            # the engine stands still: what comes after the restart re-sends the stamps before it (decoded, stale)
            decoded = before.values + before.stale + 100
            wait_for(lambda: (h := collector.health()[SWITCH]).values + h.stale > decoded, what="values after restart")
            up = collector.health()[SWITCH]
            assert up.last_error is None and up.last_update_ts and up.last_update_ts > (before.last_update_ts or 0)
            assert collector.metrics.value("rocescope_gnmi_reconnects_total", target=SWITCH) == up.reconnects
        finally:
            stop.set()
            worker.join(10)
            f2.stop()
    finally:
        stop.set()
        f.stop()
    assert not worker.is_alive()


def test_malformed_data_on_the_stream_is_counted_not_fatal(engine: Engine, served: pl.DataFrame) -> None:
    """A target sending garbage bytes and a notification with broken JSON between good ones: both
    counted, the good values still land."""
    bad = pb.Notification(timestamp=TS, prefix=pb.Path(target="COUNTERS_DB"))
    u = bad.update.add()
    u.path.CopyFrom(parse_path("COUNTERS/Ethernet0"))
    u.val.json_ietf_val = b'{"SAI_PORT_STAT_IF_IN_OCTETS": '
    text = pb.Notification(timestamp=TS, prefix=pb.Path(target="COUNTERS_DB"))
    t = text.update.add()  # SONiC's PFC watchdog action on a queue: a word no metric reads
    t.path.CopyFrom(parse_path("COUNTERS/Ethernet0:3/PFC_WD_ACTION"))
    t.val.string_val = "drop"

    def extra() -> list[Any]:
        return [b"\x0a\xff\xff\xff\xff garbage", bad, text]

    with GnmiFacade(engine_source(engine, SWITCH), extra=extra) as f:
        collector = GnmiCollector([GnmiTarget(SWITCH, f.address, vendor="sonic")])
        df = frames(collector.collect_once(timeout_s=10))
    health = collector.health()[SWITCH]
    assert health.synced and health.last_error is None and health.failures == 0
    assert health.malformed >= 2
    assert collector.metrics.value("rocescope_gnmi_malformed_total", target=SWITCH) >= 2
    assert rows(df) == served_as(served, "sonic")
    # every value by what became of it: the word skipped and counted as such, the numbers landed
    m = collector.metrics
    assert m.value("rocescope_gnmi_values_total", target=SWITCH, outcome="skipped", reason="non-numeric") >= 1
    assert m.value("rocescope_gnmi_values_total", target=SWITCH, outcome="landed") == df.height


def test_a_multi_asic_switchs_instances_land_on_their_asics_over_grpc(engine: Engine, served: pl.DataFrame) -> None:
    """A multi-ASIC SONiC target sends its ASICs' COUNTERS_DB values under `sonic-db:COUNTERS_DB/asic<n>`: over
    the real gNMI stream they land on `<switch>-asic<n>`, each back-plane port its own series, beside the
    switch's own values."""
    updates = []
    for n, value in ((0, 100), (1, 200)):
        note = pb.Notification(timestamp=TS, prefix=pb.Path(origin="sonic-db", target="COUNTERS_DB"))
        u = note.update.add()
        u.path.CopyFrom(parse_path(f"COUNTERS_DB/asic{n}/COUNTERS/Ethernet-BP0/SAI_PORT_STAT_IF_IN_OCTETS"))
        u.val.uint_val = value
        updates.append(note)

    with GnmiFacade(engine_source(engine, SWITCH), extra=lambda: updates) as f:
        collector = GnmiCollector([GnmiTarget(SWITCH, f.address, vendor="sonic")])
        df = frames(collector.collect_once(timeout_s=10))
    asics = df.filter(pl.col("port") == "Ethernet-BP0").select("device", "metric", "value").unique().rows()
    assert sorted(asics) == [(f"{SWITCH}-asic0", "rx_bytes", 100.0), (f"{SWITCH}-asic1", "rx_bytes", 200.0)]
    assert rows(df.filter(pl.col("device") == SWITCH)) == served_as(served, "sonic")


# --- the command ---------------------------------------------------------------------------------------


def test_cli_collect_gnmi_once(facade: GnmiFacade, tmp_path: Path) -> None:
    targets = tmp_path / "targets.yaml"
    targets.write_text(f"targets:\n  - {{name: {SWITCH}, address: '{facade.address}', vendor: sonic}}\n")
    result = CliRunner().invoke(app, ["collect", "gnmi", "--targets", str(targets), "--once", "--limit", "500"])
    assert result.exit_code == 0, result.output
    shown = re.search(r"(\d+) rows", result.output)
    assert shown is not None and int(shown.group(1)) > 100  # the table of what would be shipped
    assert re.search(rf"{SWITCH}: up, {int(shown.group(1)):,} values \(0 unknown, 0 malformed\)", result.output)
    targets.write_text("targets:\n  - {name: dead, address: '127.0.0.1:1', timeout_s: 0.5}\n")
    result = CliRunner().invoke(app, ["collect", "gnmi", "--targets", str(targets), "--once"])
    assert result.exit_code == 1 and "dead: DOWN" in result.output


def test_served_table_is_a_counters_table(engine: Engine) -> None:
    """The facade's source contract: a `counters` table of one device."""
    table = engine_source(engine, SWITCH)()
    assert isinstance(table, pa.Table) and table.schema.equals(schema.arrow_schema("counters"), check_metadata=False)
    assert set(table.column("device").to_pylist()) == {SWITCH}


def test_cli_collect_gnmi_once_from_the_config(facade: GnmiFacade, tmp_path: Path) -> None:
    """Targets inline in collectors.gnmi; the per-target line says how long the first full sample took."""
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(
        f"collectors:\n  gnmi:\n    targets:\n      - {{name: {SWITCH}, address: '{facade.address}', vendor: sonic}}\n"
    )
    result = CliRunner().invoke(app, ["--config", str(cfg), "collect", "gnmi", "--once"])
    assert result.exit_code == 0, result.output
    assert re.search(rf"{SWITCH}: up, \d+ values .*synced in\s+\d+\.\d+ s", result.output, re.S), result.output
    cfg.write_text("collectors:\n  gnmi:\n    targets: []\n")
    result = CliRunner().invoke(app, ["--config", str(cfg), "collect", "gnmi", "--once"])
    assert result.exit_code == 1 and "no gNMI targets" in result.output
