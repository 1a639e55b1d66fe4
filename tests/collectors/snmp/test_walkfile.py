"""`rocescope import --kind snmp`: recorded SNMP tables (Net-SNMP `snmpwalk` output, symbolic or numeric, and
snmpsim `.snmprec`) land as the rows the SNMP collector gets from a live walk of the same values. Fixtures: a real
switch's `snmpwalk` (Zyxel XGS1210-12, tests/fixtures/snmp) and LibreNMS' SR Linux recording."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pyarrow as pa

from rocescope.cli import app
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.snmp.agent import SnmprecAgent
from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
from rocescope.collectors.snmp.objects import OBJECTS, format_oid
from rocescope.collectors.snmp.walkfile import device_name, parse_walk, walk_rows

from store_cli import runner, sql_rows, store_config

FIX = Path(__file__).parents[2] / "fixtures"
ZYXEL = FIX / "snmp" / "zyxel_xgs1210_snmpwalk.txt"
SRLINUX = FIX / "realdata" / "05_snmp" / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec"
LINE = re.compile(r"^IF-MIB::(\w+)\.(\d+) = (\w+): (.*)$")


def printed(name: str) -> dict[int, str]:
    """ifIndex -> the value text the walk prints for one IF-MIB column."""
    out = {}
    for line in ZYXEL.read_text().splitlines():
        m = LINE.match(line)
        if m and m.group(1) == name:
            out[int(m.group(2))] = m.group(4)
    return out


def test_a_real_snmpwalk_reads_as_its_lines_say() -> None:
    walk = parse_walk(ZYXEL.read_text())
    rows = walk_rows(walk, 1)
    got = {(p, m): v for p, m, v in zip(rows.port, rows.metric, rows.value, strict=True)}
    names = printed("ifName")
    assert device_name(walk) == "marv-robot-sw" and walk.malformed == 0 and rows.malformed == 0
    for index, text in printed("ifHCInUcastPkts").items():
        assert got[(names[index], "rx_unicast_packets")] == float(text)
    for index, text in printed("ifOperStatus").items():  # up(1) is up; dormant(5) is not
        assert got[(names[index], "oper_up")] == (1.0 if text == "up(1)" else 0.0)
    speeds = printed("ifHighSpeed")
    for index, text in speeds.items():  # Mb/s; 0 is "not known": no row, counted
        assert got.get((names[index], "port_speed_bps")) == (float(text) * 1e6 if text != "0" else None)
    assert rows.nonnumeric == sum(t == "0" for t in speeds.values())
    assert walk.unknown_names > 0  # ifType, ifMtu...: objects the collector does not read, counted


def numeric(text: str) -> str:
    """The walk as `snmpwalk -On` prints it, with what else such output holds: a long Hex-STRING continued on
    the next line, an object the agent lacks, the end of the MIB view, and one garbled line."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^[\w-]+::(\w+)\.([\d.]+) = (.*)$", line)
        if m and m.group(1) in OBJECTS:
            out.append(f".{format_oid(OBJECTS[m.group(1)].oid)}.{m.group(2)} = {m.group(3)}")
    out.insert(3, ".1.3.6.1.2.1.2.2.1.6.1 = Hex-STRING: 00 E0 4C 00 00 01 00 E0 4C 00 00 01 00 E0 4C 00")
    out.insert(4, "00 E0 4C 00 00 01")
    out.insert(5, ".1.3.111.2.802.1.1.21.1.1.1.2 = No Such Object available on this agent at this OID")
    out.insert(9, "garbage without an equals sign")
    out.append(
        ".1.3.6.1.2.1.31.1.1.1.19.12 = No more variables left in this MIB View (It is past the end of the MIB tree)"
    )
    return "\n".join(out) + "\n"


def test_numeric_output_reads_as_the_symbolic_one() -> None:
    symbolic = walk_rows(parse_walk(ZYXEL.read_text()), 1)
    walk = parse_walk(numeric(ZYXEL.read_text()))
    rows = walk_rows(walk, 1)

    def plain(r: CounterRows) -> set[tuple[object, ...]]:
        return set(zip(r.port, r.priority, r.metric, r.value, strict=True))

    assert plain(rows) == plain(symbolic) and len(rows) > 100
    assert (walk.malformed, walk.no_value) == (1, 2)


def test_a_recording_lands_as_the_collector_reads_the_same_walk(tmp_path: Path) -> None:
    """The SR Linux `.snmprec`: imported, the rows of every metric the collector polls equal the collector's own
    poll of the same recording (through its agent seam)."""
    agent = SnmprecAgent.from_file(SRLINUX)
    collector = SnmpCollector([SnmpDevice("sw", "file")], agent_factory=lambda d, e: agent)
    polled = pa.Table.from_batches([collector.poll_once()["sw"].data])  # type: ignore[union-attr]
    want = set(zip(*(polled.column(c).to_pylist() for c in ("port", "priority", "metric", "value")), strict=True))
    cfg = store_config(tmp_path)
    at = "2025-06-01T00:00:00Z"
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "snmp", "--device", "sw", str(SRLINUX), "--at", at])
    assert done.exit_code == 0, done.output
    landed = sql_rows(cfg, "SELECT toString(port), priority, toString(metric), value FROM counters WHERE device = 'sw'")
    got = {(p, int(q), m, float(v)) for p, q, m, v in csv.reader(landed)}
    metrics = {m for _, _, m, _ in want}
    assert want and {r for r in got if r[2] in metrics} == want
