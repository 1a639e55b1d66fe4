"""SONiC redis dumps into counter and LLDP rows (`rocescope import --kind sonic-dump`).

`sonic-db-dump [-y]`, whose keys hold `{type, value, ttl, expireat}`, a techsupport's `dump/<DB>.json`, or
sonic-gnmi's full dump (a list of DBs): COUNTERS_DB `COUNTERS:oid:*` and watermark tables, named through
`COUNTERS_*_NAME_MAP` (ports, queues, priority groups, buffer pools), into `counters` through the gNMI catalog's
mapping (`importers.add_value`); a watermark is the peak since the last poll in COUNTERS, PERIODIC_WATERMARKS
stands in where COUNTERS lacks the field, USER_/PERSISTENT_WATERMARKS (peaks since a clear) stay raw
(`raw:USER_WATERMARKS/<field>`); port speed and oper status from APPL_DB `PORT_TABLE:<port>` (STATE_DB's
operational `PORT_TABLE|<port>` wins where both are dumped; CONFIG_DB's `PORT|<port>` speed only where neither
is); APPL_DB `LLDP_ENTRY_TABLE:*` into `links`; `port_aliases` reads the alias of each port (LLDP's port id).
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Mapping
from typing import Any

from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.gnmi.decode import UNKNOWN_PREFIX
from rocescope.collectors.gnmi.resolve import resolve_elems
from rocescope.collectors.gnmi.values import reading
from rocescope.collectors.importers import Elems, add_value
from rocescope.collectors.lldp.parse import Neighbor
from rocescope.collectors.lldp.parse import peer_port as _peer_port
from rocescope.errors import DecodeError

__all__ = ["port_aliases", "sonic_dump"]

log = logging.getLogger(__name__)

#: Watermark tables beside COUNTERS: PERIODIC is cleared by a timer (120 s by default), USER and PERSISTENT
#: only by a `sonic-clear` (their peaks are since then: kept raw, see `resolve`).
_WATERMARK_TABLES = ("PERIODIC_WATERMARKS", "USER_WATERMARKS", "PERSISTENT_WATERMARKS")
#: oid -> object name maps of COUNTERS_DB: ports, queues and PGs (`Ethernet0:3`), buffer pools.
_NAME_MAPS = (
    "COUNTERS_PORT_NAME_MAP",
    "COUNTERS_QUEUE_NAME_MAP",
    "COUNTERS_PG_NAME_MAP",
    "COUNTERS_BUFFER_POOL_NAME_MAP",
)
#: Redis keys are `TABLE:key` (APPL_DB, COUNTERS_DB) or `TABLE|key` (CONFIG_DB, STATE_DB).
_KEY = re.compile(r"([^:|]*)([:|])(.*)", re.DOTALL)
#: Port tables by (table, separator): APPL_DB `PORT_TABLE:`, STATE_DB `PORT_TABLE|`, CONFIG_DB `PORT|`.
_PORT_TABLES = frozenset({("PORT_TABLE", ":"), ("PORT_TABLE", "|"), ("PORT", "|")})
#: Keys of APPL_DB's PORT_TABLE that are portsyncd's progress marks, not ports.
_NOT_PORTS = frozenset({"PortConfigDone", "PortInitDone"})
_DUMP_ENTRY = frozenset({"type", "value", "ttl", "expireat"})
#: IEEE 802.1AB port id subtypes (LLDP-MIB LldpPortIdSubtype) as lldpd names them.
_PORT_SUBTYPES = {"1": "ifalias", "2": "component", "3": "mac", "4": "ip", "5": "ifname", "6": "circuit", "7": "local"}


def _dbs(doc: object) -> list[Mapping[str, Any]]:
    if isinstance(doc, dict):
        return [doc]
    if isinstance(doc, list) and all(isinstance(d, dict) for d in doc):
        return list(doc)
    raise DecodeError("not a SONiC redis dump (an object of keys, or a list of databases)")


def _fields(entry: object) -> Mapping[str, Any] | None:
    """The fields of one dumped key: a plain object (sonic-gnmi, the mocks), or `sonic-db-dump`'s
    `{"type": "hash", "value": {...}, "ttl": ..., "expireat": ...}`; None for another redis type (a
    string, a set). Raises ValueError for what is no object at all."""
    if not isinstance(entry, dict):
        raise ValueError("entry is not an object")
    if "value" in entry and "type" in entry and set(entry) <= _DUMP_ENTRY:
        value = entry["value"]
        return value if entry["type"] == "hash" and isinstance(value, dict) else None
    return entry


def _split(key: object) -> tuple[str, str, str]:
    """(table, separator, rest) of a redis key; separator "" for a key without one."""
    m = _KEY.fullmatch(str(key))
    return (m.group(1), m.group(2), m.group(3)) if m else (str(key), "", "")


def _names(db: Mapping[str, Any]) -> dict[str, str]:
    """oid -> object name (`Ethernet0`, `Ethernet0:3` for a queue / priority group, a buffer pool's name)."""
    out: dict[str, str] = {}
    for table in _NAME_MAPS:
        try:
            mapping = _fields(db.get(table, {}))
        except ValueError:
            continue
        for name, oid in (mapping or {}).items():
            if isinstance(oid, str):
                out.setdefault(oid, str(name))
    return out


def _counters(
    rows: CounterRows, ts: int, device: str, db: Mapping[str, Any], table: str, obj: str, oid: str, fields: Any
) -> None:
    """COUNTERS (or watermark table) fields of one named object. A PERIODIC watermark that COUNTERS also
    holds (the finer reading: peak since the last poll) is kept raw, so one dump gives one reading."""
    polled: Mapping[str, Any] = {}
    if table == "PERIODIC_WATERMARKS":
        polled = _fields(db.get(f"COUNTERS:{oid}", {})) or {}
    for name, value in fields.items():
        elems: Elems = [(table, {}), (obj, {}), (str(name), {})]
        if name not in polled:
            add_value(rows, ts, device, elems, value, "COUNTERS_DB")
            continue
        x = reading(None, value)
        if x is None:
            rows.nonnumeric += 1
            continue
        r, raw = resolve_elems(elems, "COUNTERS_DB"), f"{table}/{name}"
        rows.add(ts, r.port, UNKNOWN_PREFIX + raw, x, raw, r.priority, device)


def _neighbor(device: str, port: str, fields: Mapping[str, Any]) -> Neighbor:
    peer = str(fields.get("lldp_rem_sys_name") or fields.get("lldp_rem_chassis_id") or "")
    subtype = _PORT_SUBTYPES.get(str(fields.get("lldp_rem_port_id_subtype", "")), "")
    peer_port = _peer_port(subtype, str(fields.get("lldp_rem_port_id", "")), str(fields.get("lldp_rem_port_desc", "")))
    if not peer or not peer_port:
        raise ValueError("LLDP entry without a neighbor name or port id")
    return Neighbor(device, port, peer, peer_port)


def sonic_dump(doc: object, device: str, at: dt.datetime | None = None) -> tuple[CounterRows, list[Neighbor], int]:
    """(counter rows, LLDP neighbors, malformed records) of a SONiC redis dump.

    The dump has no sample time: rows take `at` (default now). Objects no name map names (router
    interfaces, system ports) are counted in `unknown` and skipped.
    """
    ts = int((at or dt.datetime.now(dt.UTC)).timestamp() * 1e9)
    rows = CounterRows()
    links: list[Neighbor] = []
    ports: dict[tuple[str, str], dict[str, Any]] = {}  # (table, port) -> fields, STATE_DB over APPL_DB
    bad = 0
    for db in _dbs(doc):
        names = _names(db)
        for key, entry in db.items():
            table, sep, rest = _split(key)
            try:
                if not rest or not (
                    table in ("COUNTERS", "LLDP_ENTRY_TABLE", *_WATERMARK_TABLES) or (table, sep) in _PORT_TABLES
                ):
                    continue
                fields = _fields(entry)
                if fields is None:
                    continue
                if table == "LLDP_ENTRY_TABLE":
                    links.append(_neighbor(device, rest, fields))
                elif (table, sep) in _PORT_TABLES:
                    if rest in _NOT_PORTS:
                        continue
                    merged = ports.setdefault((table, rest), {})
                    for name, value in fields.items():
                        if sep == "|" or name not in merged:  # STATE_DB's (operational) over APPL_DB's
                            merged[name] = value
                elif rest.startswith("oid:"):
                    obj = names.get(rest)
                    if obj is None:
                        rows.unknown += 1
                        continue
                    _counters(rows, ts, device, db, table, obj, rest, fields)
            except (ValueError, TypeError) as exc:
                bad += 1
                log.debug("sonic %s: %s skipped: %s", device, key, exc)
    for (table, port), fields in ports.items():
        for name, value in fields.items():
            if table == "PORT" and name == "speed" and "speed" in ports.get(("PORT_TABLE", port), {}):
                continue  # the configured speed only where no applied (APPL_DB) or operational (STATE_DB) one is
            add_value(rows, ts, device, [(table, {}), (port, {}), (str(name), {})], value, "APPL_DB")
    rows.malformed += bad
    return rows, links, bad


def port_aliases(doc: object) -> dict[str, str]:
    """Port name -> alias (`Ethernet0` -> `etp1`) from CONFIG_DB `PORT|*` or APPL_DB `PORT_TABLE:*`: the
    alias is what SONiC's lldpd advertises as the port id, so LLDP seen from a host names `etp1`."""
    out: dict[str, str] = {}
    for db in _dbs(doc):
        for key, entry in db.items():
            table, sep, port = _split(key)
            if (table, sep) not in _PORT_TABLES or not port or not isinstance(entry, dict):
                continue
            alias = (_fields(entry) or {}).get("alias")
            if isinstance(alias, str) and alias.strip():
                out.setdefault(port, alias.strip())
    return out
