"""Recorded SNMP walks -> `counters` rows, as the SNMP collector reads a live walk: `rocescope import --kind snmp`.

Operators keep SNMP tables as Net-SNMP `snmpwalk` output (`IF-MIB::ifHCInOctets.1 = Counter64: 908950`, or
numeric with `-On`: `.1.3.6.1.2.1.31.1.1.1.6.1 = Counter64: 908950`) or as snmpsim `.snmprec` recordings
(`OID|TYPE|VALUE`, what LibreNMS keeps for its device tests). Both become the (OID, value) rows a walk gives,
then the collector's own `normalize` (the catalog's names and scales, ifIndex named by ifName/ifDescr, status
enums as 1/0). Symbolic names are resolved through the collector's object table (`objects.OBJECTS`, which
names every column it reads), so no MIB files are needed; other objects are counted, not guessed.

Values as `snmpwalk` prints them: integer types (`Counter32/64`, `Gauge32`, `Unsigned32`, `INTEGER` with or
without its enum label `up(1)`, `Timeticks: (375) 0:00:03.75`), `STRING` (quoted or not), `Hex-STRING`
(continued on the next lines when long), `OID`, `IpAddress`; `No Such Object/Instance` and the end-of-MIB
line carry no value. A line that reads as none of these is malformed: counted, the others kept.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.snmp.agent import SnmprecData, Value, parse_snmprec
from rocescope.collectors.snmp.normalize import ColumnIndex, names_from, normalize
from rocescope.collectors.snmp.objects import NAME_OBJECTS, OBJECTS, Oid, parse_oid

__all__ = ["Walk", "parse_walk", "walk_rows"]

_LINE = re.compile(r"^(?P<oid>[^\s=]+)\s+=\s+(?P<rest>.*)$")
_TYPED = re.compile(r"^(?P<type>[A-Za-z][A-Za-z0-9 -]*?):\s?(?P<value>.*)$")
_ENUM = re.compile(r"^[A-Za-z][\w-]*\((-?\d+)\)$")
_TICKS = re.compile(r"^\((\d+)\)")
_INTEGERS = frozenset({"Counter32", "Counter64", "Gauge32", "Unsigned32", "INTEGER", "Integer32", "UInteger32"})
_NO_VALUE = ("No Such Object", "No Such Instance", "No more variables")
#: objects a walk file names that are no counter column but tell the import about the device
_SYSTEM: dict[str, Oid] = {"sysName": (1, 3, 6, 1, 2, 1, 1, 5), "sysUpTimeInstance": (1, 3, 6, 1, 2, 1, 1, 3)}
SYS_NAME = (*_SYSTEM["sysName"], 0)


@dataclass
class Walk(SnmprecData):
    """The rows of a recorded walk, and what it named that no known object is (counted, not read)."""

    unknown_names: int = 0
    no_value: int = 0
    unread_types: int = 0  # values of a type no object is read as (Opaque, a bare OID string...)
    repeated: int = 0  # an OID the walk already gave (two walks concatenated): the later value kept


def _oid(text: str) -> Oid | None:
    """A numeric OID (`.1.3.6...`, `iso.3.6...`) or `MIB::object.index` through the known objects; None for a
    name no known object has."""
    text = text.strip()
    if text.startswith("iso."):
        text = "1." + text[4:]
    if text.lstrip(".")[:1].isdigit():
        return parse_oid(text)
    name = text.rpartition("::")[2]
    obj, _, index = name.partition(".")
    base = OBJECTS[obj].oid if obj in OBJECTS else _SYSTEM.get(obj)
    if base is None:
        return None
    return base + (tuple(int(p) for p in index.split(".")) if index else ())


def _value(rest: str) -> Value | None:
    """A printed value as the agent seam's Value (int, bytes or an OID string); None where the line has none."""
    typed = _TYPED.match(rest)
    kind, text = (typed.group("type"), typed.group("value").strip()) if typed else ("", rest.strip())
    if kind in _INTEGERS:
        enum = _ENUM.match(text)
        return int(enum.group(1) if enum else text)
    if kind == "Timeticks":
        ticks = _TICKS.match(text)
        return int(ticks.group(1) if ticks else text)
    if kind == "Hex-STRING":
        return bytes.fromhex(text)
    if kind in ("STRING", ""):
        return (text[1:-1] if len(text) >= 2 and text[0] == text[-1] == '"' else text).encode()
    if kind == "OID":
        return text
    if kind == "IpAddress":
        return bytes(int(p) for p in text.split("."))
    raise ValueError(f"value type {kind!r}")


def parse_walk(text: str) -> Walk:
    """`snmpwalk` output or an `.snmprec` file -> the walk's (OID, value) rows, sorted, one per OID."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    if lines and "|" in lines[0] and " = " not in lines[0]:
        rec = parse_snmprec(text)
        return Walk(rec.rows, rec.malformed, rec.examples)
    walk, rows = Walk([]), dict[Oid, Value]()
    last: tuple[Oid, str] | None = None  # the Hex-STRING a continuation line extends
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line.strip())
        try:
            if m is None:
                if last is None or not re.fullmatch(r"[0-9A-Fa-f ]+", line.strip()):
                    raise ValueError("no `OID = TYPE: value`")
                hex_text = f"{last[1]} {line.strip()}"
                rows[last[0]], last = bytes.fromhex(hex_text), (last[0], hex_text)
                continue
            last = None
            rest = m.group("rest")
            if rest.startswith(_NO_VALUE) or rest.startswith('"No more'):
                walk.no_value += 1
                continue
            oid = _oid(m.group("oid"))
            if oid is None:
                walk.unknown_names += 1
                continue
            value = _value(rest)
            if value is None:
                walk.unread_types += 1
            else:
                walk.repeated += oid in rows
                rows[oid] = value
                if rest.startswith("Hex-STRING:"):
                    last = (oid, rest.partition(":")[2].strip())
        except (ValueError, OverflowError) as exc:
            walk.malformed += 1
            if len(walk.examples) < 5:
                walk.examples.append((lineno, f"{line[:120]!r}: {exc}"))
    walk.rows = sorted(rows.items())
    return walk


def walk_rows(walk: Walk, ts_ns: int, keep_unknown: bool = True) -> CounterRows:
    """The walk's counters, stamped `ts_ns`, read as the collector reads a poll of every object it knows."""
    columns = ColumnIndex([o for name, o in OBJECTS.items() if name not in NAME_OBJECTS], keep_unknown)
    norm = normalize(walk.rows, columns)
    rows = norm.name_ports(ts_ns, names_from(walk.rows))
    rows.malformed += walk.malformed
    return rows


def device_name(walk: Walk) -> str:
    """The device's sysName.0, where the walk has it."""
    for oid, value in walk.rows:
        if oid == SYS_NAME and isinstance(value, bytes) and value.strip():
            return value.decode("utf-8", "replace").strip()
    return ""
