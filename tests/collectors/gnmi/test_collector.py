"""The gNMI collector: golden decoding of real sonic-gnmi outputs, path mapping, and streams against the
simulator's gNMI target (a real grpc server on loopback, the real stubs) with TLS, credentials, server
restarts and malformed data. Nothing on the wire is faked.
"""

from __future__ import annotations

import contextlib
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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rocescope import catalog, schema
from rocescope.cli import app
from rocescope.collectors.gnmi.collector import (
    DEFAULT_PATHS,
    GnmiCollector,
    GnmiDecoder,
    GnmiTarget,
    load_targets,
    parse_path,
    path_elems,
    path_str,
    resolve_elems,
)
from rocescope.collectors.gnmi.proto import pb, pb_grpc
from rocescope.errors import ConfigError, DecodeError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import InProcessBus
from rocescope.sim.engine import Engine
from rocescope.sim.facades.gnmi import GnmiFacade, engine_source
from rocescope.sim.jobs import Flow, JobSpec, place_jobs
from rocescope.sim.params import EngineParams
from rocescope.sim.roce import QpAllocator, udp_sport
from rocescope.sim.topology import FabricSpec, Topology

from certs import make_pki

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "04_gnmi_sonic"
T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
TS = 1_740_830_400_000_000_000
SWITCH = "leaf-r0-01"
KEY = ["port", "priority", "metric"]


# --- helpers ---------------------------------------------------------------------------------------


def response(path: str, value: bytes, target: str = "", ts: int = TS) -> bytes:
    """A SubscribeResponse with one JSON_IETF update, serialized: what a target puts on the wire."""
    n = pb.Notification(timestamp=ts, prefix=pb.Path(target=target))
    u = n.update.add()
    u.path.CopyFrom(parse_path(path))
    u.val.json_ietf_val = value
    return bytes(pb.SubscribeResponse(update=n).SerializeToString())


def frame(batch: Batch | None) -> pl.DataFrame:
    assert batch is not None
    df = pl.from_arrow(batch.data)
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col("device", "role", "port", "metric", "source", "raw_name").cast(pl.String))


def frames(batches: list[Batch]) -> pl.DataFrame:
    return pl.concat([frame(b) for b in batches])


def rows(df: pl.DataFrame) -> dict[tuple[str, int, str], float]:
    return {(p, q, m): v for p, q, m, v in df.select("port", "priority", "metric", "value").iter_rows()}


def decode_file(name: str, path: str, target: str = "COUNTERS_DB") -> tuple[GnmiDecoder, pl.DataFrame]:
    dec = GnmiDecoder("sonic-dut")
    dec.feed(response(path, (REAL / name).read_bytes(), target))
    return dec, frame(dec.flush())


def wait_for(check: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# --- golden: real sonic-gnmi outputs -------------------------------------------------------------


def test_golden_sonic_port_counters() -> None:
    """COUNTERS/Ethernet68 as sonic-gnmi serves it: every numeric field becomes one row, canonical where the
    catalog knows the SAI name and `raw:<field>` otherwise; PFC priority from the field name."""
    doc = json.loads((REAL / "sonic-gnmi_COUNTERS_Ethernet68.txt").read_text())
    dec, df = decode_file("sonic-gnmi_COUNTERS_Ethernet68.txt", "COUNTERS/Ethernet68")
    expected = {}
    for field, text in doc.items():
        hit = catalog.resolve("sonic_sai", field)
        metric, prio = hit if hit is not None else (f"raw:{field}", -1)
        expected[("Ethernet68", prio, metric)] = float(text)
    assert rows(df) == expected
    assert rows(df)[("Ethernet68", 7, "pfc_rx_pause")] == 2.0  # the test-edited value in the real file
    assert set(df["raw_name"]) == set(doc)
    assert set(df["source"]) == {"gnmi"} and set(df["role"]) == {"switch"} and set(df["device"]) == {"sonic-dut"}
    assert df["ts"].dt.epoch("ns").to_list() == [TS] * df.height
    assert dec.stats.malformed == 0 and dec.stats.unknown == sum(1 for k in expected if k[2].startswith("raw:"))


def test_golden_sonic_queues_and_pfcwd() -> None:
    """COUNTERS/Ethernet68/Queues: the index comes from the object key `Ethernet68:3`; text fields
    (PFC_WD_STATUS) are skipped, pause status true/false becomes 1/0; `Ethernet68:1:periodic` is kept raw."""
    dec, df = decode_file("sonic-gnmi_COUNTERS_Ethernet68_Queues.txt", "COUNTERS/Ethernet68/Queues")
    got = rows(df)
    assert got[("Ethernet68", 1, "queue_watermark_bytes")] == 64.0
    assert got[("Ethernet68", 3, "queue_paused")] == 0.0
    assert got[("Ethernet68", 4, "pfcwd_storm_detected")] == 0.0
    assert got[("Ethernet68", 3, "queue_occupancy_bytes")] == 0.0
    assert got[("Ethernet68", 1, "raw:periodic/SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES")] == 192.0
    assert set(df["port"]) == {"Ethernet68"}
    assert dec.stats.nonnumeric == 2 * 2  # PFC_WD_ACTION, PFC_WD_STATUS on queues 3 and 4
    _, wd = decode_file("sonic-gnmi_COUNTERS_Ethernet68_Pfcwd.txt", "COUNTERS/Ethernet68/Pfcwd")
    assert {k for k in rows(wd) if not k[2].startswith("raw:")} == {
        ("Ethernet68", q, m)
        for q in (3, 4)
        for m in (
            "pfcwd_storm_detected",
            "pfcwd_storm_restored",
            "queue_paused",
            "queue_tx_bytes",
            "queue_occupancy_bytes",
            "queue_dropped_bytes",
            "queue_dropped_packets",
            "queue_tx_packets",
        )
    }


def test_golden_sonic_wildcard_and_priority_groups() -> None:
    _, df = decode_file(
        "sonic-gnmi_COUNTERS_Ethernet_wildcard_PFC_7_RX.txt", "COUNTERS/Ethernet*/SAI_PORT_STAT_PFC_7_RX_PKTS"
    )
    assert rows(df) == {("Ethernet1", 7, "pfc_rx_pause"): 1.0, ("Ethernet68", 7, "pfc_rx_pause"): 2.0}
    _, pg = decode_file(
        "sonic-gnmi_PERIODIC_WATERMARKS_Ethernet16_PriorityGroups.txt", "PERIODIC_WATERMARKS/Ethernet16/PriorityGroups"
    )
    assert rows(pg) == {
        ("Ethernet16", 5, "pg_watermark_bytes"): 0.0,
        ("Ethernet16", 5, "pg_headroom_watermark_bytes"): 0.0,
    }


def test_golden_openconfig_interfaces_json() -> None:
    """sonic-gnmi's openconfig-interfaces JSON (keyed lists): one port per list entry, counters mapped,
    oper-status DOWN -> 0, config leaves kept raw, names and text skipped."""
    doc = json.loads((REAL / "sonic-gnmi_interfaces.json").read_text())
    interfaces = doc["openconfig-interfaces:interfaces"]["interface"]
    dec, df = decode_file("sonic-gnmi_interfaces.json", "/", target="")
    with_counters = {i["name"] for i in interfaces if "counters" in i.get("state", {})}
    got = rows(df)
    assert {p for p, _, m in got if m == "rx_bytes"} == with_counters
    assert got[("Ethernet0", -1, "oper_up")] == 0.0
    assert got[("Ethernet0", -1, "raw:config/mtu")] == 9100.0
    first = next(i for i in interfaces if i["name"] == "Ethernet0")["state"]["counters"]
    for leaf, value in first.items():
        hit = catalog.resolve("openconfig", f"state/counters/{leaf}")
        metric = hit[0] if hit else f"raw:state/counters/{leaf}"
        assert got[("Ethernet0", -1, metric)] == float(value)
    assert dec.stats.malformed == 0


# --- path mapping --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "path", "expected"),
    [
        ("", "/interfaces/interface[name=Ethernet0]/state/counters/in-octets", ("Ethernet0", -1, "rx_bytes")),
        ("", "/openconfig-interfaces:interfaces/interface[name=Ethernet8]/state/counters/out-octets",
         ("Ethernet8", -1, "tx_bytes")),
        ("", "/interfaces/interface[name=Ethernet0]/ethernet/state/counters/in-mac-pause-frames",
         ("Ethernet0", -1, "link_rx_pause")),
        ("", "/qos/interfaces/interface[interface-id=Ethernet4]/output/queues/queue[name=3]/state/transmit-octets",
         ("Ethernet4", 3, "queue_tx_bytes")),
        ("", "/qos/interfaces/interface[interface-id=Ethernet4]/output/queues/queue[name=UC3]/state/ecn-marked-pkts",
         ("Ethernet4", 3, "queue_ecn_marked_packets")),
        ("COUNTERS_DB", "COUNTERS/Ethernet0/SAI_PORT_STAT_PFC_3_RX_PKTS", ("Ethernet0", 3, "pfc_rx_pause")),
        ("COUNTERS_DB", "COUNTERS/Ethernet0/Queues/Ethernet0:3/SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",
         ("Ethernet0", 3, "queue_ecn_marked_packets")),
        ("", "/interface[name=ethernet-1/1]/statistics/in-octets", ("ethernet-1/1", -1, "rx_bytes")),
        ("", "/srl_nokia-interfaces:interface[name=ethernet-1/2]/oper-state", ("ethernet-1/2", -1, "oper_up")),
        ("", "/qos/interfaces/interface[interface-id=ethernet-1/1]/pfc/statistics/pfc-priority[index=3]"
             "/pfc-pause-frames-received", ("ethernet-1/1", 3, "pfc_rx_pause")),
        ("", "/qos/interfaces/interface[interface-id=ethernet-1/1]/output/queues/queue[queue-name=4]"
             "/queue-depth/high-watermark-1", ("ethernet-1/1", 4, "queue_watermark_bytes")),
    ],
)  # fmt: skip
def test_paths_resolve(target: str, path: str, expected: tuple[str, int, str]) -> None:
    r = resolve_elems(path_elems(parse_path(path)), target)
    assert (r.port, r.priority, r.metric) == expected


def test_srlinux_real_paths_resolve_under_their_anchor() -> None:
    """Every mapped leaf of the real SR Linux path list resolves from a full keyed path too."""
    lines = (REAL / "nokia_srlinux_v25.3.1_qos_pfc_state_paths.csv").read_text().splitlines()
    paths = [ln.split(",")[0] for ln in lines[2:] if ln.startswith("/")]
    mapped = 0
    for xpath in paths:
        keyed = xpath.replace("/interface/", "/interface[name=ethernet-1/1]/", 1)
        keyed = keyed.replace(
            "qos/interfaces/interface[name=ethernet-1/1]", "qos/interfaces/interface[interface-id=e1]"
        )
        r = resolve_elems(path_elems(parse_path(keyed)))
        mapped += r.metric is not None
    assert mapped >= 8


def test_parse_path_keys_with_slashes_and_escapes() -> None:
    p = parse_path(r"/a/b[name=ethernet-1/1][k=x\]y]/c", target="T")
    assert path_elems(p) == [("a", {}), ("b", {"name": "ethernet-1/1", "k": "x]y"}), ("c", {})]
    assert path_str(p) == r"T:/a/b[k=x\]y][name=ethernet-1/1]/c"
    assert path_elems(parse_path(path_str(pb.Path(elem=p.elem)))) == path_elems(p)
    for bad in ("/a/[k=v]", "/a/b[k=v", "/a/b[kv]"):
        with pytest.raises(ValueError):
            parse_path(bad)


# --- decoder robustness ----------------------------------------------------------------------------


def test_unknown_path_kept_raw_or_dropped() -> None:
    n = pb.Notification(timestamp=TS)
    for path, value in (("/system/cpu[index=0]/state/total", 7), ("/interfaces/interface[name=E1]/state/foo", 3)):
        u = n.update.add()
        u.path.CopyFrom(parse_path(path))
        u.val.uint_val = value
    data = pb.SubscribeResponse(update=n).SerializeToString()
    dec = GnmiDecoder("d")
    dec.feed(data)
    assert rows(frame(dec.flush())) == {
        ("", -1, "raw:/system/cpu[index=0]/state/total"): 7.0,
        ("E1", -1, "raw:state/foo"): 3.0,
    }
    assert dec.stats.unknown == 2
    strict = GnmiDecoder("d", keep_unknown=False)
    strict.feed(data)
    assert strict.flush() is None and strict.stats.unknown == 2


def test_malformed_update_counted_not_fatal() -> None:
    n = pb.Notification(timestamp=TS, prefix=parse_path("/interfaces/interface[name=Ethernet0]/state/counters"))
    for leaf, setter in (
        ("in-octets", lambda v: setattr(v, "json_ietf_val", b"{not json")),
        ("out-octets", lambda v: None),  # no value at all
        ("in-pkts", lambda v: setattr(v, "json_ietf_val", b"[" * 5000 + b"]" * 5000)),
        ("out-pkts", lambda v: setattr(v, "uint_val", 42)),
        ("in-errors", lambda v: setattr(v, "bytes_val", b"\x00")),
    ):
        u = n.update.add()
        u.path.CopyFrom(parse_path(leaf))
        setter(u.val)
    dec = GnmiDecoder("d")
    assert dec.feed(pb.SubscribeResponse(update=n).SerializeToString()) == 1
    assert rows(frame(dec.flush())) == {("Ethernet0", -1, "tx_packets"): 42.0}
    assert dec.stats.malformed == 3 and dec.stats.nonnumeric == 1  # bad JSON, no value, JSON nested too deep; bytes
    with pytest.raises(DecodeError):
        dec.feed(b"\xff\xff\xff not protobuf")
    assert dec.stats.malformed == 4


_names = st.text(alphabet="abcXYZ019-_:*/[]=\\Ethernet", min_size=0, max_size=12)
_json_docs = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_names, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def notifications(draw: st.DrawFn) -> bytes:
    n = pb.Notification(timestamp=draw(st.integers(-(2**63), 2**63 - 1)))
    for path in (n.prefix, *[None] * draw(st.integers(0, 5))):
        if path is None:
            path = n.update.add().path
        path.target = draw(st.sampled_from(["", "COUNTERS_DB", "X_DB", draw(_names)]))
        for _ in range(draw(st.integers(0, 6))):
            elem = path.elem.add(
                name=draw(st.sampled_from(["COUNTERS", "interfaces", "interface", "queue", "qos"]) | _names)
            )
            for k, v in draw(
                st.dictionaries(st.sampled_from(["name", "index", "interface-id"]) | _names, _names, max_size=2)
            ).items():
                elem.key[k] = v
    for u in n.update:
        kind = draw(
            st.sampled_from(["uint", "int", "double", "string", "json", "jsonraw", "bool", "decimal", "none", "bytes"])
        )
        if kind == "uint":
            u.val.uint_val = draw(st.integers(0, 2**64 - 1))
        elif kind == "int":
            u.val.int_val = draw(st.integers(-(2**63), 2**63 - 1))
        elif kind == "double":
            u.val.double_val = draw(st.floats())
        elif kind == "string":
            u.val.string_val = draw(st.text(max_size=20))
        elif kind == "json":
            u.val.json_ietf_val = json.dumps(draw(_json_docs)).encode()
        elif kind == "jsonraw":
            u.val.json_val = draw(st.binary(max_size=30))
        elif kind == "bool":
            u.val.bool_val = draw(st.booleans())
        elif kind == "decimal":
            u.val.decimal_val.digits = draw(st.integers(-(2**63), 2**63 - 1))
            u.val.decimal_val.precision = draw(st.integers(0, 2**32 - 1))
        elif kind == "bytes":
            u.val.bytes_val = draw(st.binary(max_size=8))
    data = bytes(pb.SubscribeResponse(update=n).SerializeToString())
    if draw(st.booleans()):  # garble it
        i = draw(st.integers(0, max(0, len(data) - 1)))
        data = data[:i] + draw(st.binary(max_size=8)) + data[i + 1 :]
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(notifications(), min_size=1, max_size=4))
def test_random_notifications_raise_only_decode_errors(messages: list[bytes]) -> None:
    dec = GnmiDecoder("fuzz")
    for data in messages:
        with contextlib.suppress(DecodeError):
            dec.feed(data)
    batch = dec.flush()
    if batch is not None:
        assert batch.data.schema.equals(schema.arrow_schema("counters"), check_metadata=False)
        assert batch.num_rows == dec.stats.values


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
    try:
        wait_for(lambda: collector.health()[SWITCH].synced, what="first sample")
        wait_for(lambda: bus.end_offset(schema.topic("counters")) > 0, what="a published batch")
        health = collector.health()[SWITCH]
        assert health.connected and health.last_error is None and health.errors == 0
    finally:
        stop.set()
        worker.join(10)
    assert not worker.is_alive()
    batches = [m.batch for m in bus.messages(schema.topic("counters")) if m.batch is not None]
    df = frames(batches)
    assert set(df["device"]) == {SWITCH} and set(df["source"]) == {"gnmi"}
    expected = served_as(served, vendor)
    got = rows(df)
    assert got == expected  # every served value arrived, under the same port/priority/metric, unchanged
    assert df["ts"].dt.epoch("ns").unique().to_list() == [int(served["ts"].dt.epoch("ns")[0])]
    assert collector.metrics.value("rocescope_gnmi_values_total", target=SWITCH) == df.height
    assert collector.metrics.value("rocescope_gnmi_connected", target=SWITCH) == 0  # closed on stop


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
    assert not health["b"].synced and health["b"].errors == 1
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
        assert down.errors >= 1 and down.last_error
        f2 = GnmiFacade(source, port=port).start()
        try:
            wait_for(lambda: collector.health()[SWITCH].connected, what="reconnected")
            wait_for(lambda: collector.health()[SWITCH].values > before.values + 100, what="values after restart")
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

    def extra() -> list[Any]:
        return [b"\x0a\xff\xff\xff\xff garbage", bad]

    with GnmiFacade(engine_source(engine, SWITCH), extra=extra) as f:
        collector = GnmiCollector([GnmiTarget(SWITCH, f.address, vendor="sonic")])
        df = frames(collector.collect_once(timeout_s=10))
    health = collector.health()[SWITCH]
    assert health.synced and health.last_error is None and health.errors == 0
    assert health.malformed >= 2
    assert collector.metrics.value("rocescope_gnmi_malformed_total", target=SWITCH) >= 2
    assert rows(df) == served_as(served, "sonic")


# --- configuration and the command -----------------------------------------------------------------


def test_targets_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GNMI_PW", "pw")
    f = tmp_path / "targets.yaml"
    f.write_text(
        "targets:\n"
        "  - {name: leaf1, address: '10.0.0.1:50051', vendor: sonic, username: admin, password: env:GNMI_PW,\n"
        "     tls: true, ca_cert: /etc/ca.pem, pfc_priorities: [3]}\n"
        "  - name: spine1\n"
        "    address: spine1:57400\n"
        "    vendor: srlinux\n"
        "    encoding: proto\n"
        "    paths: [/interface/statistics, {path: /qos/interfaces/interface/pfc, interval: 0.5}]\n"
        "  - {name: oc1, address: 'oc1:9339'}\n"
    )
    leaf, spine, oc = load_targets(f)
    assert leaf.password == "pw" and leaf.tls and leaf.ca_cert == "/etc/ca.pem"
    assert {p.target for p in leaf.subscriptions} == {"COUNTERS_DB"}
    intervals = {p.path: p.interval for p in leaf.subscriptions}
    assert intervals["COUNTERS/Ethernet*"] == 10.0
    assert intervals["COUNTERS/Ethernet*/Queues"] == 1.0
    assert intervals["COUNTERS/Ethernet*/SAI_PORT_STAT_PFC_3_RX_PKTS"] == 1.0
    assert [(p.path, p.interval) for p in spine.subscriptions] == [
        ("/interface/statistics", 10.0),
        ("/qos/interfaces/interface/pfc", 0.5),
    ]
    assert oc.subscriptions == DEFAULT_PATHS["openconfig"]
    assert {p.path: p.interval for p in oc.subscriptions}["/qos/interfaces/interface/output/queues/queue/state"] == 1
    assert "pw" not in repr(leaf)
    for bad in (
        "targets: [{name: a, address: 'x:1', colour: red}]",
        "targets: [{name: a, address: nowhere}]",
        "targets: [{name: a, address: 'x:1', vendor: junos}]",
        "targets: [{name: a, address: 'x:1', password: env:GNMI_UNSET_VARIABLE}]",
        "targets: [{name: a, address: 'x:1', paths: ['/a/b[k']}]",
        "targets: []",
    ):
        f.write_text(bad)
        with pytest.raises(ConfigError):
            load_targets(f)


def test_cli_collect_gnmi_once(facade: GnmiFacade, tmp_path: Path) -> None:
    targets = tmp_path / "targets.yaml"
    targets.write_text(f"targets:\n  - {{name: {SWITCH}, address: '{facade.address}', vendor: sonic}}\n")
    result = CliRunner().invoke(app, ["collect", "gnmi", "--targets", str(targets), "--once", "--limit", "500"])
    assert result.exit_code == 0, result.output
    shown = re.search(r"(\d+) rows", result.output)
    assert shown is not None and int(shown.group(1)) > 100  # the table of what would be shipped
    assert re.search(rf"{SWITCH}: up, {shown.group(1)} values \(0 unknown, 0 malformed\)", result.output)
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
