"""The gNMI decoder: golden decoding of real sonic-gnmi outputs, path -> catalog mapping, and bad input
(malformed updates, unknown paths, random notifications) that is counted and never fatal."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope import catalog, schema
from rocescope.collectors.gnmi.decode import GnmiDecoder, resolve_elems
from rocescope.collectors.gnmi.paths import parse_path, path_elems
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.sonic_dump import asic_device
from rocescope.errors import DecodeError
from rocescope.pipeline.batch import Batch

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "04_gnmi_sonic"
SONIC = Path(__file__).resolve().parents[2] / "fixtures" / "sonic"
TS = 1_740_830_400_000_000_000


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


def rows(df: pl.DataFrame) -> dict[tuple[str, int, str], float]:
    return {(p, q, m): v for p, q, m, v in df.select("port", "priority", "metric", "value").iter_rows()}


def decode_file(name: str, path: str, target: str = "COUNTERS_DB") -> tuple[GnmiDecoder, pl.DataFrame]:
    dec = GnmiDecoder("sonic-dut")
    dec.feed(response(path, (REAL / name).read_bytes(), target))
    return dec, frame(dec.flush())


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
    """COUNTERS/Ethernet68/Queues: the index comes from the object key `Ethernet68:3`; the watchdog's status
    (PFC_WD_STATUS `operational`) becomes `pfcwd_stormed` 0, its action (`drop`, a setting) is skipped, pause
    status true/false becomes 1/0; `Ethernet68:1:periodic` is kept raw."""
    dec, df = decode_file("sonic-gnmi_COUNTERS_Ethernet68_Queues.txt", "COUNTERS/Ethernet68/Queues")
    got = rows(df)
    assert got[("Ethernet68", 1, "queue_watermark_bytes")] == 64.0
    assert got[("Ethernet68", 3, "queue_paused")] == 0.0
    assert got[("Ethernet68", 4, "pfcwd_storm_detected")] == 0.0
    assert got[("Ethernet68", 3, "queue_occupancy_bytes")] == 0.0
    assert got[("Ethernet68", 1, "raw:periodic/SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES")] == 192.0
    assert set(df["port"]) == {"Ethernet68"}
    assert got[("Ethernet68", 3, "pfcwd_stormed")] == 0.0 and got[("Ethernet68", 4, "pfcwd_stormed")] == 0.0
    assert dec.stats.nonnumeric == 2  # PFC_WD_ACTION on queues 3 and 4
    _, wd = decode_file("sonic-gnmi_COUNTERS_Ethernet68_Pfcwd.txt", "COUNTERS/Ethernet68/Pfcwd")
    assert {k for k in rows(wd) if not k[2].startswith("raw:")} == {
        ("Ethernet68", q, m)
        for q in (3, 4)
        for m in (
            "pfcwd_storm_detected",
            "pfcwd_storm_restored",
            "pfcwd_stormed",
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


def test_golden_sonic_pfc_watchdog_in_vendor_alias_mode() -> None:
    """sonic-gnmi's alias mode names queues `Ethernet68/1:3`: the port keeps its slash, the queue is the
    priority of every PFC watchdog counter."""
    n = pb.Notification(timestamp=TS, prefix=pb.Path(target="COUNTERS_DB"))
    u = n.update.add()
    for name in ("COUNTERS", "Ethernet68/1", "Pfcwd"):  # the alias is one element, slash included
        u.path.elem.add(name=name)
    u.val.json_ietf_val = (SONIC / "sonic-gnmi_COUNTERS_Ethernet68_Pfcwd_alias.json").read_bytes()
    dec = GnmiDecoder("sonic-dut")
    dec.feed(pb.SubscribeResponse(update=n).SerializeToString())
    got = rows(frame(dec.flush()))
    for q in (3, 4):
        for metric in ("pfcwd_storm_detected", "pfcwd_storm_restored", "queue_paused"):
            assert got[("Ethernet68/1", q, metric)] == 0.0
    assert {p for p, _, _ in got} == {"Ethernet68/1"}


# --- port speed from every source -------------------------------------------------------------------


def notification(*updates: tuple[str, str, object], target: str = "", origin: str = "") -> bytes:
    """A SubscribeResponse of (path, value kind, value) updates: what a target puts on the wire."""
    n = pb.Notification(timestamp=TS, prefix=pb.Path(target=target, origin=origin))
    for path, kind, value in updates:
        u = n.update.add()
        u.path.CopyFrom(parse_path(path))
        setattr(u.val, kind, value)
    return bytes(pb.SubscribeResponse(update=n).SerializeToString())


def speeds(dec: GnmiDecoder) -> dict[tuple[str, str], float]:
    df = frame(dec.flush()).filter(pl.col("metric") == "port_speed_bps")
    return {(p, r): v for p, r, v in df.select("port", "raw_name", "value").iter_rows()}


def test_openconfig_port_speed_identities_become_bits_per_second() -> None:
    """Arista/OpenConfig: `ethernet/state/(negotiated-)port-speed` identities as string, JSON_IETF leaf or
    JSON object member; SPEED_UNKNOWN is counted as non-numeric and gives no row (never a zero). The
    negotiated speed is the running speed (`port_speed_bps`), `port-speed` the configured one."""
    eth = "/interfaces/interface[name=Ethernet1/1]/ethernet/state"
    oc_state = {
        "openconfig-if-ethernet:port-speed": "openconfig-if-ethernet:SPEED_UNKNOWN",
        "openconfig-if-ethernet:negotiated-port-speed": "openconfig-if-ethernet:SPEED_400GB",
        "openconfig-if-ethernet:counters": {"in-mac-pause-frames": "7"},
    }
    dec = GnmiDecoder("arista")
    dec.feed(notification(
        (f"{eth}/negotiated-port-speed", "string_val", "SPEED_100GB"),
        ("/interfaces/interface[name=Ethernet2/1]/ethernet/state/port-speed", "json_ietf_val",
         b'"openconfig-if-ethernet:SPEED_2500MB"'),
    ))  # fmt: skip
    dec.feed(notification(("/interfaces/interface[name=Ethernet3/1]/ethernet/state", "json_ietf_val",
                           json.dumps(oc_state).encode())))  # fmt: skip
    df = frame(dec.flush())
    got = {(p, m, r): v for p, m, r, v in df.select("port", "metric", "raw_name", "value").iter_rows()}
    assert got == {
        ("Ethernet1/1", "port_speed_bps", "ethernet/state/negotiated-port-speed"): 100e9,
        ("Ethernet2/1", "port_speed_configured_bps", "ethernet/state/port-speed"): 2.5e9,
        ("Ethernet3/1", "port_speed_bps", "ethernet/state/negotiated-port-speed"): 400e9,
        ("Ethernet3/1", "link_rx_pause", "ethernet/state/counters/in-mac-pause-frames"): 7.0,
    }
    assert dec.stats.nonnumeric == 1 and dec.stats.malformed == 0  # SPEED_UNKNOWN
    again = GnmiDecoder("arista")  # a text value at a path whose metric is no speed stays non-numeric
    again.feed(notification((f"{eth}/counters/in-mac-pause-frames", "string_val", "SPEED_100GB")))
    assert again.flush() is None and again.stats.nonnumeric == 1 and again.stats.unknown == 0


def test_srlinux_port_speed_enum() -> None:
    dec = GnmiDecoder("srl")
    dec.feed(notification(
        ("/interface[name=ethernet-1/1]/ethernet/port-speed", "string_val", "400G"),
        ("/srl_nokia-interfaces:interface[name=ethernet-1/2]/ethernet", "json_ietf_val",
         b'{"srl_nokia-interfaces:port-speed": "25G", "auto-negotiate": false}'),
    ))  # fmt: skip
    raw = "ethernet/port-speed"
    assert speeds(dec) == {("ethernet-1/1", raw): 400e9, ("ethernet-1/2", raw): 25e9}


def test_sonic_port_table_speed_in_every_path_form() -> None:
    """APPL_DB PORT_TABLE as sonic-gnmi serves it (the real table): the whole table (target APPL_DB), one
    port under `sonic-db:APPL_DB/localhost`, one field of a multi-ASIC target; Mb/s -> bits/s; oper_status."""
    table = json.loads((SONIC / "sonic-gnmi_APPL_DB_PORT_TABLE.json").read_text())
    by_port = {key.partition(":")[2]: fields for key, fields in table.items()}
    dec = GnmiDecoder("sonic")
    dec.feed(response("PORT_TABLE", json.dumps(by_port).encode(), target="APPL_DB"))
    df = frame(dec.flush())
    got = rows(df)
    for port, fields in by_port.items():
        assert got[(port, -1, "port_speed_bps")] == float(fields["speed"]) * 1e6
        assert got[(port, -1, "oper_up")] == (1.0 if fields["oper_status"] == "up" else 0.0)
    assert got[("Ethernet0", -1, "raw:PORT_TABLE/mtu")] == 9100.0  # other fields are kept raw, named by table
    assert set(df.filter(pl.col("metric") == "port_speed_bps")["raw_name"]) == {"PORT_TABLE/speed"}
    assert dec.stats.malformed == 0 and dec.stats.nonnumeric > 0  # alias, lanes, description... are text

    dec = GnmiDecoder("sonic")
    dec.feed(notification(("APPL_DB/localhost/PORT_TABLE/Ethernet40", "json_ietf_val",
                           json.dumps(by_port["Ethernet40"]).encode()), origin="sonic-db"))  # fmt: skip
    dec.feed(notification(("PORT_TABLE/Ethernet80/speed", "string_val", "400000"), target="APPL_DB/asic1"))
    dec.feed(notification(("PORT/Ethernet0/speed", "string_val", "100000"), target="CONFIG_DB"))
    assert speeds(dec) == {
        ("Ethernet40", "PORT_TABLE/speed"): 100e9,
        ("Ethernet80", "PORT_TABLE/speed"): 400e9,
        ("Ethernet0", "PORT/speed"): 100e9,
    }


def test_a_multi_asic_switchs_instances_are_devices_of_their_own() -> None:
    """A multi-ASIC SONiC switch keeps one COUNTERS_DB per ASIC; sonic-gnmi names the instance after the DB
    (`sonic-db:COUNTERS_DB/asic2`, as sonic-mgmt's gNMI tests subscribe) or in the target (`COUNTERS_DB/asic1`).
    Back-plane ports repeat their names on every ASIC: each instance's values land on `<switch>-asic<n>`, the
    name `import --kind sonic --namespace` gives them, never summed into one series of the switch."""
    octets = "SAI_PORT_STAT_IF_IN_OCTETS"
    dec = GnmiDecoder("sw1")
    dec.feed(
        notification(
            (f"COUNTERS_DB/asic0/COUNTERS/Ethernet-BP0/{octets}", "uint_val", 100),
            (f"COUNTERS_DB/asic2/COUNTERS/Ethernet-BP0/{octets}", "uint_val", 300),
            (f"COUNTERS_DB/localhost/COUNTERS/Ethernet0/{octets}", "uint_val", 7),
            origin="sonic-db",
        )
    )
    dec.feed(notification((f"COUNTERS/Ethernet-BP0/{octets}", "uint_val", 200), target="COUNTERS_DB/asic1"))
    dec.feed(notification((f"asic3/COUNTERS/Ethernet-BP0/{octets}", "uint_val", 400), target="COUNTERS_DB"))
    df = frame(dec.flush())
    got = {(d, p): v for d, p, v in df.select("device", "port", "value").iter_rows()}
    assert got == {
        (asic_device("sw1", 0), "Ethernet-BP0"): 100.0,
        ("sw1-asic1", "Ethernet-BP0"): 200.0,
        ("sw1-asic2", "Ethernet-BP0"): 300.0,
        ("sw1-asic3", "Ethernet-BP0"): 400.0,
        ("sw1", "Ethernet0"): 7.0,
    }
    assert set(df["metric"]) == {"rx_bytes"}


def test_sonic_state_db_speed_and_unknown_speeds_give_no_row() -> None:
    """STATE_DB's operational speed (real table): `rmt_adv_speeds: N/A` is text; a speed of 0 or N/A is
    skipped and counted as non-numeric, never stored as a zero."""
    table = json.loads((SONIC / "sonic-gnmi_STATE_DB_PORT_TABLE.json").read_text())
    dec = GnmiDecoder("sonic")
    dec.feed(response("PORT_TABLE", json.dumps({k.partition("|")[2]: v for k, v in table.items()}).encode(),
                      target="STATE_DB"))  # fmt: skip
    assert set(speeds(dec).values()) == {200e9}
    dec = GnmiDecoder("sonic")
    dec.feed(notification(
        ("PORT_TABLE/Ethernet0/speed", "string_val", "0"),
        ("PORT_TABLE/Ethernet4/speed", "string_val", "N/A"),
        ("PORT_TABLE/Ethernet8/speed", "uint_val", 0),
        ("PORT_TABLE/Ethernet12/speed", "json_ietf_val", b'"0"'),
        target="APPL_DB",
    ))  # fmt: skip
    dec.feed(notification(("/interfaces/interface[name=Ethernet1/1]/ethernet/state/port-speed", "uint_val", 0)))
    assert dec.flush() is None and dec.stats.nonnumeric == 5


def test_sonic_since_clear_watermarks_stay_raw() -> None:
    """USER_/PERSISTENT_WATERMARKS hold peaks since a clear: kept raw (with port and queue), never a
    queue_watermark_bytes reading; PERIODIC_WATERMARKS (cleared by its timer) is one."""
    value = b'{"Ethernet16:3": {"SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES": "1024"}}'
    got = {}
    for table in ("USER_WATERMARKS", "PERSISTENT_WATERMARKS", "PERIODIC_WATERMARKS"):
        dec = GnmiDecoder("sonic")
        dec.feed(response(f"{table}/Ethernet16/PriorityGroups", value, "COUNTERS_DB"))
        got[table] = rows(frame(dec.flush()))
    field = "SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES"
    assert got["USER_WATERMARKS"] == {("Ethernet16", 3, f"raw:USER_WATERMARKS/{field}"): 1024.0}
    assert got["PERSISTENT_WATERMARKS"] == {("Ethernet16", 3, f"raw:PERSISTENT_WATERMARKS/{field}"): 1024.0}
    assert got["PERIODIC_WATERMARKS"] == {("Ethernet16", 3, "pg_watermark_bytes"): 1024.0}


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
        ("", "/interfaces/interface[name=Ethernet1/1]/ethernet/state/negotiated-port-speed",
         ("Ethernet1/1", -1, "port_speed_bps")),
        ("", "/interface[name=ethernet-1/3]/ethernet/port-speed", ("ethernet-1/3", -1, "port_speed_bps")),
        ("APPL_DB", "PORT_TABLE/Ethernet8/speed", ("Ethernet8", -1, "port_speed_bps")),
        ("APPL_DB/asic0", "PORT_TABLE/Ethernet8/oper_status", ("Ethernet8", -1, "oper_up")),
        ("", "sonic-db:STATE_DB/localhost/PORT_TABLE/Ethernet8/speed", ("Ethernet8", -1, "port_speed_bps")),
        ("", "CONFIG_DB/PORT/Ethernet8/speed", ("Ethernet8", -1, "port_speed_bps")),
        ("", "CONFIG_DB/localhost/PORT/Ethernet0/speed", ("Ethernet0", -1, "port_speed_bps")),
        ("", "APPL_DB/PORT_TABLE/Ethernet0/speed", ("Ethernet0", -1, "port_speed_bps")),
        ("", "APPL_DB/asic2/PORT_TABLE/Ethernet0/oper_status", ("Ethernet0", -1, "oper_up")),
        ("COUNTERS_DB", "COUNTERS/Ethernet0/PriorityGroups/Ethernet0:3/SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS",
         ("Ethernet0", 3, "pg_dropped_packets")),
        ("", "COUNTERS_DB/COUNTERS/Ethernet0/Pfcwd/Ethernet0:4/PFC_WD_QUEUE_STATS_TX_DROPPED_PACKETS",
         ("Ethernet0", 4, "pfcwd_tx_dropped_packets")),
        ("COUNTERS_DB", "COUNTERS/Ethernet0/Pfcwd/Ethernet0:3/PFC_WD_QUEUE_STATS_RX_DROPPED_PACKETS",
         ("Ethernet0", 3, "pfcwd_rx_dropped_packets")),
        ("COUNTERS_DB", "PERIODIC_WATERMARKS/Ethernet0/Queues/Ethernet0:3/SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",
         ("Ethernet0", 3, "queue_watermark_bytes")),
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


def test_a_value_stamped_no_later_than_its_series_last_is_dropped_and_counted() -> None:
    """A switch whose clock NTP steps back 2.5 s sends its next samples stamped before the last ones, and EOS
    re-sends an unchanged value with its old stamp: neither is a new read (differenced, one is a counter running
    backwards). A clock set back by hours is no stale sample: its series go on, counted."""
    dec = GnmiDecoder("leaf-1")
    path = "COUNTERS/Ethernet0/SAI_PORT_STAT_PFC_3_RX_PKTS"
    s = 1_000_000_000
    stamps = [TS, TS + s, TS + 2 * s, TS - s // 2, TS + s + s // 2, TS + 2 * s, TS + 3 * s - s // 2, TS - 3600 * s]
    for k, ts in enumerate(stamps):
        dec.feed(response(path, json.dumps(str(100 + k)).encode(), "COUNTERS_DB", ts))
    df = frame(dec.flush())
    assert df["value"].to_list() == [100.0, 101.0, 102.0, 106.0, 107.0]
    assert dec.stats.stale == 3 and dec.stats.clock_resets == 1 and dec.stats.values == 5


def test_stale_members_of_a_sonic_json_document_are_dropped_too() -> None:
    """sonic-gnmi sends a port's counters as one JSON document; its members are series like any leaf."""
    dec = GnmiDecoder("leaf-1")
    s = 1_000_000_000
    for k, ts in enumerate((TS, TS + s, TS + s // 2)):
        doc = json.dumps({"SAI_PORT_STAT_IF_IN_OCTETS": str(1000 + k), "SAI_PORT_STAT_IF_OUT_OCTETS": str(k)})
        dec.feed(response("COUNTERS/Ethernet0", doc.encode(), "COUNTERS_DB", ts))
    df = frame(dec.flush())
    assert sorted(df.filter(df["metric"] == "rx_bytes")["value"].to_list()) == [1000.0, 1001.0]
    assert dec.stats.stale == 2
