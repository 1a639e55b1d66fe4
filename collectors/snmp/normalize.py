"""Walked varbinds -> canonical `counters` rows (the common `CounterRows`); ifIndex -> port name.

A row's metric and scale come from `rocescope.catalog` (vendor `snmp`), its raw_name is the MIB object
name, its priority -1 or, for a per-priority table, the index's priority. ifOperStatus and ifAdminStatus
become `oper_up` and `admin_up` 1/0 (oper unknown(4) gives no row); an ifHighSpeed of 0 (no speed known)
gives no row and is counted as non-numeric (the catalog's `zero_is_unknown`). An object the catalog does not
know is kept as metric `raw:<name>` (or dropped with `keep_unknown=False`). A row with a non-integer value or
a bad index is skipped and counted as malformed; the good rows around it are kept.

Ports are named last (`SnmpRows.name_ports`), because a poll that meets an ifIndex it cannot name walks
the names before it ships: ifName, ifDescr where the agent has no ifName, and `ifIndex:<n>` for an index
the agent names nowhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rocescope import catalog
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.snmp.agent import Value
from rocescope.collectors.snmp.objects import OBJECTS, VENDOR, Oid, SnmpObject

__all__ = ["UNKNOWN_PREFIX", "ColumnIndex", "SnmpRows", "names_from", "normalize"]

#: Why a walked value is no row: an object that is no polled column (names such as ifName and sysName, read apart)
NOT_A_COLUMN = "not a counter column (names such as ifName, sysName: read apart)"
#: ... or an ifOperStatus of unknown(4), as the NIC collector's `unknown` operstate gives no row
STATUS_UNKNOWN = "status unknown(4)"
#: Metric of an object the catalog does not know: `raw:<name>` (the NIC collector's convention).
UNKNOWN_PREFIX = "raw:"
#: IF-MIB status enums as 1/0: up(1) is 1, anything else 0; ifOperStatus unknown(4) gives no row, like the NIC
#: collector's `unknown` operstate
_STATUS = {"ifOperStatus": frozenset({4}), "ifAdminStatus": frozenset()}
_STATUS_UP = 1
#: InterfaceIndex is 1..2147483647 (IF-MIB); a bigger arc (BER allows any) would fail the whole poll's batch.
_MAX_IFINDEX = 2**31 - 1


@dataclass(slots=True)
class SnmpRows:
    """One walk's canonical rows, with each row's ifIndex beside them until `name_ports` names the ports,
    and how many rows each object had (an optional object with none is one the device does not serve)."""

    rows: CounterRows = field(default_factory=CounterRows)
    ifindex: list[int] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)  # object name -> rows (before filtering)

    def __len__(self) -> int:
        return len(self.rows)

    def name_ports(self, ts_ns: int, names: Mapping[int, str]) -> CounterRows:
        """The rows stamped with one time and each row's port name (`ifIndex:<n>` where `names` has none)."""
        port_of = {i: names.get(i) or f"ifIndex:{i}" for i in set(self.ifindex)}
        rows = self.rows
        rows.port = list(map(port_of.__getitem__, self.ifindex))
        rows.ts = [ts_ns] * len(rows.port)
        return rows


@dataclass(frozen=True, slots=True)
class _Column:
    obj: SnmpObject
    metric: str | None  # None: the catalog does not know the object
    factor: float
    zero_is_unknown: bool = False  # ifHighSpeed 0: no speed known, no row


class ColumnIndex:
    """Finds the polled column an OID belongs to: one dict lookup per distinct root length."""

    def __init__(self, objects: Iterable[SnmpObject], keep_unknown: bool = True):
        self.by_len: dict[int, dict[Oid, _Column]] = {}
        self.keep_unknown = keep_unknown
        roots: list[Oid] = []
        for obj in objects:
            hit = catalog.resolve(VENDOR, obj.name)
            unknown_at_zero = hit is not None and catalog.METRICS_BY_NAME[hit[0]].zero_is_unknown
            column = _Column(obj, None if hit is None else hit[0], catalog.scale(VENDOR, obj.name), unknown_at_zero)
            self.by_len.setdefault(len(obj.oid), {})[obj.oid] = column
            roots.append(obj.oid)
        for a in roots:
            for b in roots:
                if a != b and b[: len(a)] == a:
                    raise ValueError(f"object OIDs overlap: {a} is a prefix of {b}")
        self.lengths = sorted(self.by_len)

    def column(self, oid: Oid) -> _Column | None:
        for length in self.lengths:
            hit = self.by_len[length].get(oid[:length])
            if hit is not None:
                return hit
        return None


def normalize(
    rows: Iterable[tuple[Oid, Value]], objects: Iterable[SnmpObject] | ColumnIndex, keep_unknown: bool = True
) -> SnmpRows:
    """Walk rows -> canonical rows (ports still as ifIndex). Rows of other objects (e.g. ifName) are
    ignored; a row with a non-integer value or a bad index is skipped and counted as malformed."""
    index = objects if isinstance(objects, ColumnIndex) else ColumnIndex(objects, keep_unknown)
    out = SnmpRows()
    counters, seen = out.rows, out.seen
    add_ifindex, add_priority = out.ifindex.append, counters.priority.append
    add_metric, add_value, add_raw = counters.metric.append, counters.value.append, counters.raw_name.append
    for oid, value in rows:
        col = index.column(oid)
        if col is None:
            counters.skipped[NOT_A_COLUMN] += 1
            continue
        obj = col.obj
        seen[obj.name] = seen.get(obj.name, 0) + 1
        suffix = oid[len(obj.oid) :]
        if obj.index == "ifIndex":
            if len(suffix) != 1 or suffix[0] > _MAX_IFINDEX:
                counters.malformed += 1
                continue
            prio = -1
        else:
            if len(suffix) != 2 or suffix[1] > 127 or suffix[0] > _MAX_IFINDEX:
                counters.malformed += 1
                continue
            prio = suffix[1]
        if type(value) is not int:
            counters.malformed += 1
            continue
        no_row = _STATUS.get(obj.name)
        if no_row is not None:
            if value in no_row:
                counters.skipped[STATUS_UNKNOWN] += 1
                continue
            number = 1.0 if value == _STATUS_UP else 0.0
        else:
            number = float(value) * col.factor
            if col.zero_is_unknown and number <= 0:
                counters.nonnumeric += 1  # an interface without a known speed says 0
                continue
        if col.metric is None:
            counters.unknown += 1
            if not index.keep_unknown:
                continue
            metric = UNKNOWN_PREFIX + obj.name
        else:
            metric = col.metric
        add_ifindex(suffix[0])
        add_priority(prio)
        add_metric(metric)
        add_value(number)
        add_raw(obj.name)
    return out


def names_from(rows: Iterable[tuple[Oid, Value]]) -> dict[int, str]:
    """ifIndex -> ifName, falling back to ifDescr; empty or non-text names are ignored."""
    name_oid, descr_oid = OBJECTS["ifName"].oid, OBJECTS["ifDescr"].oid
    names: dict[int, str] = {}
    descrs: dict[int, str] = {}
    for oid, value in rows:
        table = names if oid[:-1] == name_oid else descrs if oid[:-1] == descr_oid else None
        if table is None or not isinstance(value, bytes | str):
            continue
        text = (value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value).strip()
        if text:
            table[oid[-1]] = text
    return descrs | names
