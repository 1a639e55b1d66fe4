"""SNMP rows -> canonical counters: golden test over the real SR Linux walk, and fuzzing.

The golden rows below are read off the real `.snmprec` excerpt by hand (ifDescr names the ports,
ifHCOutOctets/ifHCInMulticastPkts/ifHCInBroadcastPkts carry the values). The same file served by a
real SNMP agent (snmpsim) must give exactly these rows too: see test_live_agents.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope import catalog
from rocescope.collectors.snmp.agent import SnmprecAgent
from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
from rocescope.collectors.snmp.normalize import normalize
from rocescope.collectors.snmp.objects import DEFAULT_OBJECTS, OBJECTS, SnmpObject, parse_oid
from rocescope.pipeline.batch import Batch
from rocescope.testbed.snmpd import synthetic_snmprec

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "05_snmp"
SRLINUX = REAL / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec"
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
    assert collector.metrics.value("rocescope_snmp_nameless_ifindex_total", target="srl1") == 1


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
    assert ("Ethernet0", "admin_up", 0.0, "ifAdminStatus") in rows  # synthetic port 0 is shut (down(2))
    assert ("Ethernet8", "admin_up", 1.0, "ifAdminStatus") in rows
    assert ("Ethernet8", "port_speed_bps", 400e9, "ifHighSpeed") in rows  # 400000 Mb/s
    assert ("Ethernet8", "pfc_tx_pause_total", 1_001_102.0, "ieee8021PfcRequests") in rows
    assert ("Ethernet8", "pfc_rx_pause_total", 1_001_103.0, "ieee8021PfcIndications") in rows
    assert len(rows) == 8 * (len(DEFAULT_OBJECTS) + 2)
    assert collector.unsupported("srl1") == set()


def test_an_unknown_speed_gives_no_row() -> None:
    """IF-MIB ifHighSpeed is 0 where no speed is known (a port down or without a transceiver): skipped and
    counted, never a 0 b/s speed that would make the port look 100% busy or 0% busy."""
    speed = OBJECTS["ifHighSpeed"]
    norm = normalize([((*speed.oid, 7), 0), ((*speed.oid, 8), 400_000)], [speed])
    assert list(zip(norm.ifindex, norm.rows.metric, norm.rows.value, strict=True)) == [(8, "port_speed_bps", 400e9)]
    assert norm.rows.nonnumeric == 1 and norm.rows.malformed == 0


def test_per_priority_vendor_tables_take_priority_from_the_index() -> None:
    rows = [
        (parse_oid("1.3.6.1.4.1.9.9.813.1.2.1.2.7.3"), 42),  # cpfcIfPriorityRequests ifIndex 7 prio 3
        (parse_oid("1.3.6.1.4.1.30065.3.11.1.1.1.4.7.5"), 9),  # aristaPfcPriorityIndications prio 5
        (parse_oid("1.3.6.1.4.1.9.9.813.1.2.1.2.7"), 1),  # index too short: malformed
        (parse_oid("1.3.6.1.2.1.31.1.1.1.6.7"), b"not a number"),  # wrong type: malformed
    ]
    objects = [OBJECTS["cpfcIfPriorityRequests"], OBJECTS["aristaPfcPriorityIndications"], OBJECTS["ifHCInOctets"]]
    norm = normalize(rows, objects)
    counters = norm.rows
    assert list(zip(counters.metric, counters.priority, counters.value, norm.ifindex, strict=True)) == [
        ("pfc_tx_pause", 3, 42.0, 7),
        ("pfc_rx_pause", 5, 9.0, 7),
    ]
    assert counters.malformed == 2


def test_overlapping_objects_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        normalize([], [SnmpObject("a", (1, 3, 6)), SnmpObject("b", (1, 3, 6, 1))])


# --- fuzzing: garbled rows never crash with anything but the project's errors -------------------------

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
    counters = norm.rows
    assert len(counters.metric) == len(counters.value) == len(counters.priority) == len(norm.ifindex)
    assert all(-1 <= p <= 127 for p in counters.priority)
    agent = SnmprecAgent([(o, v) for o, v in rows if isinstance(v, int | bytes | str) and not isinstance(v, bool)])
    collector = SnmpCollector([SnmpDevice("fz", "recorded")], agent_factory=lambda d, e: agent)
    batch = collector.poll_once()["fz"]
    health = collector.health()["fz"]
    assert (batch is not None) == bool(health.up)
    if batch is None:  # only an out-of-range number may fail the poll, and then as a clear error
        assert health.last_error
