"""SNMP rows -> canonical counters: golden test over the real SR Linux walk, and fuzzing.

The golden rows below are read off the real `.snmprec` excerpt by hand (ifDescr names the ports,
ifHCOutOctets/ifHCInMulticastPkts/ifHCInBroadcastPkts carry the values). The same file served by a
real SNMP agent (snmpsim) must give exactly these rows too: see test_snmp_agents.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope import catalog
from rocescope.collectors.snmp.agent import (
    SnmprecAgent,
    format_oid,
    parse_oid,
    parse_snmprec,
    run_sync,
)
from rocescope.collectors.snmp.collector import (
    DEFAULT_OBJECTS,
    OBJECTS,
    V3,
    SnmpCollector,
    SnmpDevice,
    SnmpObject,
    V2c,
    default_objects,
    normalize,
)
from rocescope.errors import DecodeError
from rocescope.pipeline.batch import Batch
from rocescope.testbed.snmpd import synthetic_snmprec

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "05_snmp"
SRLINUX = REAL / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec"
OID_TABLE = REAL / "pfc_qos_mib_oid_table.tsv"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pysnmp.*")
CASTS = ("ifHCInMulticastPkts", "ifHCInBroadcastPkts")

#: (port, raw_name, value): every counter row of the excerpt, by hand from the file.
SRLINUX_GOLDEN = {
    ('ethernet-1/1, "device1"', "ifHCOutOctets", 2420798923),
    ("ethernet-1/4.39", "ifHCOutOctets", 3578532550),
    ('ethernet-1/4, "device2"', "ifHCOutOctets", 3996281826),
    ('ethernet-1/5, "device3"', "ifHCOutOctets", 59369953751),
    ('ethernet-1/9, "device5"', "ifHCOutOctets", 53336620998),
    ('ethernet-1/10, "device6"', "ifHCOutOctets", 68917492838),
    ("ethernet-1/11.44", "ifHCOutOctets", 5445907159),
    ('lag49, "device17"', "ifHCInMulticastPkts", 14301303),
    ("ifIndex:537706494", "ifHCInMulticastPkts", 12983131),  # no ifDescr for it in the excerpt
    ("mgmt0", "ifHCInMulticastPkts", 17053369),
    ('ethernet-1/1, "device1"', "ifHCInBroadcastPkts", 2038),
    ('ethernet-1/4, "device2"', "ifHCInBroadcastPkts", 51),
    ('ethernet-1/5, "device3"', "ifHCInBroadcastPkts", 28868),
    ('ethernet-1/9, "device5"', "ifHCInBroadcastPkts", 22762),
    ('ethernet-1/10, "device6"', "ifHCInBroadcastPkts", 29710),
    ('ethernet-1/22, "device9"', "ifHCInBroadcastPkts", 1079970),
    ("lag1", "ifHCInBroadcastPkts", 2038),
    ("mgmt0", "ifHCInBroadcastPkts", 5898496),
}


def metric_of(raw: str) -> str:
    hit = catalog.resolve("snmp", raw)
    return hit[0] if hit is not None else f"raw:{raw}"


def rows_of(batch: Batch) -> set[tuple[str, str, str, int, int]]:
    d = batch.data.to_pydict()
    columns = (d["port"], d["raw_name"], d["metric"], d["value"], d["priority"])
    return {(p, r, m, int(v), pr) for p, r, m, v, pr in zip(*columns, strict=True)}


def golden_rows() -> set[tuple[str, str, str, int, int]]:
    return {(port, raw, metric_of(raw), value, -1) for port, raw, value in SRLINUX_GOLDEN}


def snmprec_collector(path: Path, **kwargs: object) -> SnmpCollector:
    agent = SnmprecAgent.from_file(path)
    return SnmpCollector(
        [SnmpDevice("srl1", "recorded")],
        agent_factory=lambda device, engines: agent,
        **kwargs,  # type: ignore[arg-type]
    )


def test_object_oids_match_the_mib_oid_table() -> None:
    """Every vendor/PFC OID the collector knows is the one resolved from the real MIB files."""
    table = {}
    for line in OID_TABLE.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split("\t")
        table[fields[1]] = fields[2]
    checked = 0
    for name, obj in OBJECTS.items():
        if name in table:
            assert format_oid(obj.oid) == table[name], name
            checked += 1
    assert checked >= 20


def test_default_objects_follow_the_catalog() -> None:
    assert default_objects() == DEFAULT_OBJECTS
    for name in DEFAULT_OBJECTS:
        assert catalog.resolve("snmp", name) is not None, name
    mapped_casts = [n for n in CASTS if catalog.resolve("snmp", n) is not None]
    assert all(n in DEFAULT_OBJECTS for n in mapped_casts)


def test_parse_real_snmprec() -> None:
    data = parse_snmprec(SRLINUX.read_text())
    assert data.malformed == 0
    assert len(data.rows) == 34
    assert data.rows[0] == (parse_oid("1.3.6.1.2.1.1.1.0"), data.rows[0][1])
    values = dict(data.rows)
    assert values[parse_oid("1.3.6.1.2.1.2.2.1.2.16382")] == b'ethernet-1/1, "device1"'
    assert values[parse_oid("1.3.6.1.2.1.31.1.1.1.10.147454")] == 59369953751
    assert values[parse_oid("1.3.6.1.2.1.1.2.0")] == "1.3.6.1.4.1.6527.1.20.26"


def test_real_walk_golden_rows() -> None:
    collector = snmprec_collector(SRLINUX, objects=(*DEFAULT_OBJECTS, *CASTS))
    batch = collector.poll_once()["srl1"]
    assert batch is not None
    assert batch.stream == "counters" and batch.key == "srl1"
    assert rows_of(batch) == golden_rows()
    d = batch.data.to_pydict()
    assert set(d["device"]) == {"srl1"} and set(d["role"]) == {"switch"} and set(d["source"]) == {"snmp"}
    assert len(set(d["ts"])) == 1
    # the catalog maps ifHCOutOctets; the multicast/broadcast columns are kept raw while it does not
    assert metric_of("ifHCOutOctets") == "tx_bytes"
    health = collector.health()["srl1"]
    assert health.up and health.consecutive_failures == 0
    assert collector.unsupported("srl1") == {"ieee8021PfcRequests", "ieee8021PfcIndications"}
    assert collector.metrics.value("rocescope_snmp_nameless_ifindex_total", device="srl1") == 1


def test_default_poll_of_the_real_walk() -> None:
    batch = snmprec_collector(SRLINUX).poll_once()["srl1"]
    assert batch is not None
    expected = {r for r in golden_rows() if r[1] in DEFAULT_OBJECTS}
    assert rows_of(batch) == expected
    assert {r[1] for r in expected} >= {"ifHCOutOctets"}


def test_keep_unknown_false_drops_raw_objects() -> None:
    batch = snmprec_collector(SRLINUX, objects=(*DEFAULT_OBJECTS, *CASTS), keep_unknown=False).poll_once()["srl1"]
    assert batch is not None
    assert all(not m.startswith("raw:") for m in batch.data.column("metric").to_pylist())


def test_synthetic_switch_pfc_oper_speed(tmp_path: Path) -> None:
    path = tmp_path / "sw.snmprec"
    path.write_text(synthetic_snmprec(8, pfc=True))
    collector = snmprec_collector(path)
    batch = collector.poll_once()["srl1"]
    assert batch is not None
    d = batch.data.to_pydict()
    rows = list(zip(d["port"], d["metric"], d["value"], d["raw_name"], strict=True))
    assert ("Ethernet0", "oper_up", 0.0, "ifOperStatus") in rows  # synthetic port 0 is down(2)
    assert ("Ethernet8", "oper_up", 1.0, "ifOperStatus") in rows
    assert ("Ethernet8", "port_speed_bps", 400e9, "ifHighSpeed") in rows  # 400000 Mb/s
    assert ("Ethernet8", "pfc_tx_pause_total", 1_001_102.0, "ieee8021PfcRequests") in rows
    assert ("Ethernet8", "pfc_rx_pause_total", 1_001_103.0, "ieee8021PfcIndications") in rows
    assert len(rows) == 8 * (len(DEFAULT_OBJECTS) + 2)
    assert collector.unsupported("srl1") == set()


def test_slow_objects_are_read_every_nth_poll(tmp_path: Path) -> None:
    path = tmp_path / "sw.snmprec"
    path.write_text(synthetic_snmprec(2, pfc=False))
    agent = SnmprecAgent.from_file(path)
    collector = SnmpCollector([SnmpDevice("sw", "file")], agent_factory=lambda d, e: agent, slow_every=3)

    async def polls(n: int) -> list[int]:
        out = []
        for _ in range(n):
            batch = await collector.poll_device("sw")
            assert batch is not None
            out.append(batch.data.column("metric").to_pylist().count("port_speed_bps"))
        return out

    assert run_sync(polls(7)) == [2, 0, 0, 2, 0, 0, 2]
    every = SnmpCollector([SnmpDevice("sw", "file")], agent_factory=lambda d, e: agent, slow_every=1)
    batches = [every.poll_once()["sw"] for _ in range(3)]
    assert all(b is not None and b.data.column("metric").to_pylist().count("port_speed_bps") == 2 for b in batches)


def test_per_priority_vendor_tables_take_priority_from_the_index() -> None:
    rows = [
        (parse_oid("1.3.6.1.4.1.9.9.813.1.2.1.2.7.3"), 42),  # cpfcIfPriorityRequests ifIndex 7 prio 3
        (parse_oid("1.3.6.1.4.1.30065.3.11.1.1.1.4.7.5"), 9),  # aristaPfcPriorityIndications prio 5
        (parse_oid("1.3.6.1.4.1.9.9.813.1.2.1.2.7"), 1),  # index too short: malformed
        (parse_oid("1.3.6.1.2.1.31.1.1.1.6.7"), b"not a number"),  # wrong type: malformed
    ]
    objects = [OBJECTS["cpfcIfPriorityRequests"], OBJECTS["aristaPfcPriorityIndications"], OBJECTS["ifHCInOctets"]]
    norm = normalize(rows, objects)
    assert list(zip(norm.metrics, norm.priorities, norm.values, norm.ifindex, strict=True)) == [
        ("pfc_tx_pause", 3, 42.0, 7),
        ("pfc_rx_pause", 5, 9.0, 7),
    ]
    assert norm.malformed == 2


def test_overlapping_objects_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        normalize([], [SnmpObject("a", (1, 3, 6)), SnmpObject("b", (1, 3, 6, 1))])


def test_unknown_object_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown SNMP object"):
        SnmpCollector([SnmpDevice("x", "h")], objects=("ifHCInOctetz",))


def test_snmprec_from_missing_or_garbage_file(tmp_path: Path) -> None:
    with pytest.raises(DecodeError):
        SnmprecAgent.from_file(tmp_path / "missing.snmprec")
    bad = tmp_path / "bad.snmprec"
    bad.write_text("this is not|a walk\n1.3.6|999|x\n")
    with pytest.raises(DecodeError, match="no readable line"):
        SnmprecAgent.from_file(bad)


def test_snmprec_types() -> None:
    text = "\n".join(
        [
            "1.3.6.1.2.1.2.2.1.2.1|4x|657468302f31",  # hex OCTET STRING "eth0/1"
            "1.3.6.1.2.1.2.2.1.8.1|2|1",
            "1.3.6.1.2.1.4.20.1.1.10.0.0.1|64|10.0.0.1",
            "1.3.6.1.2.1.1.3.0|67|12345",
            "1.3.6.1.2.1.31.1.1.1.6.1|70x|ff",
            "1.3.6.1.2.1.31.1.1.1.7.1|130|",  # endOfMibView: no value
            "1.3.6.1.2.1.31.1.1.1.8.1|2:numeric|x",  # variation module: unsupported, counted
        ]
    )
    data = parse_snmprec(text)
    values = dict(data.rows)
    assert values[parse_oid("1.3.6.1.2.1.2.2.1.2.1")] == b"eth0/1"
    assert values[parse_oid("1.3.6.1.2.1.4.20.1.1.10.0.0.1")] == bytes([10, 0, 0, 1])
    assert values[parse_oid("1.3.6.1.2.1.31.1.1.1.6.1")] == 255
    assert len(data.rows) == 5 and data.malformed == 1


# --- fuzzing: garbled input never crashes with anything but the project's errors ---------------------

REAL_TEXT = SRLINUX.read_text()


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(0, len(REAL_TEXT)), noise=st.text(max_size=300), at=st.integers(0, len(REAL_TEXT)))
def test_parse_snmprec_garbled_keeps_good_lines(cut: int, noise: str, at: int) -> None:
    garbled = REAL_TEXT[:at] + noise + REAL_TEXT[at:cut] if at < cut else REAL_TEXT[:cut] + noise
    data = parse_snmprec(garbled)
    good = parse_snmprec(REAL_TEXT)
    intact = {line for line in garbled.splitlines() if line in REAL_TEXT.splitlines()}
    kept = dict(data.rows)
    for oid, value in good.rows:
        line = next(line for line in REAL_TEXT.splitlines() if line.startswith(format_oid(oid) + "|"))
        if line in intact:
            assert kept.get(oid) == value


_values = st.one_of(st.integers(-(2**70), 2**70), st.binary(max_size=20), st.text(max_size=10), st.none(), st.floats())
_oids = st.one_of(
    st.sampled_from([o.oid for o in OBJECTS.values()]).flatmap(
        lambda root: st.lists(st.integers(0, 2**32), max_size=3).map(lambda s: root + tuple(s))
    ),
    st.lists(st.integers(0, 2**32), min_size=2, max_size=14).map(tuple),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(_oids, _values), max_size=60))
def test_normalize_garbage_rows(rows: list[tuple[tuple[int, ...], object]]) -> None:
    norm = normalize(rows, list(OBJECTS.values()))  # type: ignore[arg-type]
    assert len(norm.metrics) == len(norm.values) == len(norm.priorities) == len(norm.ifindex)
    assert all(-1 <= p <= 127 for p in norm.priorities)
    agent = SnmprecAgent([(o, v) for o, v in rows if isinstance(v, int | bytes | str) and not isinstance(v, bool)])
    collector = SnmpCollector([SnmpDevice("fz", "recorded")], agent_factory=lambda d, e: agent)
    batch = collector.poll_once()["fz"]
    health = collector.health()["fz"]
    assert (batch is not None) == bool(health.up)
    if batch is None:  # only an out-of-range number may fail the poll, and then as a clear error
        assert health.last_error


def test_snmprec_agent_walks_like_an_agent() -> None:
    agent = SnmprecAgent.from_file(SRLINUX)
    rows = run_sync(agent.walk([parse_oid("1.3.6.1.2.1.31.1.1.1.9"), parse_oid("1.3.6.1.2.1.2.2.1.3")]))
    assert [oid[-1] for oid, _ in rows] == [
        16382,
        114686,
        147454,
        278526,
        311294,
        704510,
        536887294,
        1077952510,
        16382,
        1606336,
        536887294,
    ]


def test_device_from_config_mapping() -> None:
    spec = {"name": "leaf1", "host": "10.0.0.1", "version": "v3", "user": "mon", "auth_key": "authpass1"}
    v3 = SnmpDevice.from_mapping({**spec, "priv_key": "x" * 8})
    assert isinstance(v3.auth, V3) and v3.auth.level == "authPriv" and v3.auth.priv_protocol == "aes128"
    assert "authpass1" not in repr(v3) and "xxxxxxxx" not in repr(v3)  # secrets stay out of logs
    v2 = SnmpDevice.from_mapping({"name": "leaf2", "host": "10.0.0.2", "community": "s3cret", "timeout_s": 1})
    assert v2.auth == V2c("s3cret") and v2.timeout_s == 1.0 and v2.port == 161 and "s3cret" not in repr(v2)
    assert v2.deadline_s == 4 * 1.0 * 2
    for bad in (
        {"name": "x", "host": "h", "bogus": 1},
        {"name": "x", "host": "h", "version": "v1"},
        {"name": "x", "host": "h", "version": "v3", "user": "u", "auth_key": "short"},
        {"name": "x", "host": "h", "version": "v3", "user": "u", "auth_key": "authpass1", "auth_protocol": "sha1"},
        {"name": "x", "host": "h", "port": 0},
        {"name": "x", "host": "h", "timeout_s": "soon"},
        {"name": "", "host": "h"},
    ):
        with pytest.raises(ValueError):
            SnmpDevice.from_mapping(bad)
