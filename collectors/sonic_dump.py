"""SONiC redis dumps into counter and LLDP rows (`rocescope import --kind sonic-dump`).

`sonic-db-dump [-y]`, whose keys hold `{type, value, ttl, expireat}`, a techsupport's `dump/<DB>.json`, or
sonic-gnmi's full dump (a list of DBs): COUNTERS_DB `COUNTERS:oid:*` and watermark tables, named through
`COUNTERS_*_NAME_MAP` (ports, queues, priority groups, buffer pools), into `counters` through the gNMI catalog's
mapping (`importers.add_value`); a watermark is the peak since the last poll in COUNTERS, PERIODIC_WATERMARKS
stands in where COUNTERS lacks the field, USER_/PERSISTENT_WATERMARKS (peaks since a clear) stay raw
(`raw:USER_WATERMARKS/<field>`); port speed and oper status from APPL_DB `PORT_TABLE:<port>` (STATE_DB's
operational `PORT_TABLE|<port>` wins where both are dumped; CONFIG_DB's `PORT|<port>` speed only where neither
is); APPL_DB `LLDP_ENTRY_TABLE:*` into `links`; `port_links` reads the alias of each port (LLDP's port id).

A multi-ASIC switch keeps one set of databases per ASIC (linux namespaces `asic0`, `asic1`...; a techsupport
names their dumps `dump/<DB>.json.<n>`). Each ASIC is a device of its own (`<switch>-asic<n>`): it has its own
buffers, PFC and ECMP, and a chassis of front-end and back-end ASICs is a leaf-spine fabric in a box, cabled by
the back-plane ports CONFIG_DB describes (`PORT|Ethernet-BP0` `description: ASIC1:Eth0-ASIC1`). Its neighbours'
LLDP names the switch and a front-panel port: `chassis` rows map those to the ASIC that owns the port.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.gnmi.decode import UNKNOWN_PREFIX
from rocescope.collectors.gnmi.resolve import instance_device, resolve_elems
from rocescope.collectors.gnmi.values import reading
from rocescope.collectors.importers import AS_LINKS, Elems, add_value
from rocescope.collectors.lldp.parse import Neighbor
from rocescope.collectors.lldp.parse import peer_port as _peer_port
from rocescope.errors import DecodeError

__all__ = ["Namespace", "device_name", "namespace_of", "port_links", "sonic_dump"]

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
#: a techsupport's dump of ASIC n's namespace (scripts/generate_dump `save_cmd_all_ns`: `<file>.<n>`)
_NAMESPACE_SUFFIX = re.compile(r"\.json\.(\d+)$")
#: a techsupport's folder, `sonic_dump_<hostname>_<YYYYmmdd>_<HHMMSS>`, which holds `dump/<DB>.json`
_TECHSUPPORT = re.compile(r"sonic_dump_(.+)_\d{8}_\d{6}")
#: a back-plane port's CONFIG_DB description: the peer ASIC and its port's `asic_port_name`
_BACKPLANE_PEER = re.compile(r"ASIC(\d+):(\S+)")
#: SONiC port roles (sonic-buildimage port_config.ini `role`) of ports on the front panel; the others are
#: back-plane (`Int`), in-band (`Inb`), recirculation (`Rec`) and DPU (`Dpc`) ports inside the box
_FRONT_PANEL_ROLES = frozenset({"", "Ext"})
#: names SONiC gives ports inside the box (back-plane, in-band, recirculation), whatever a table's `role` says
_INTERNAL_PORT = re.compile(r"Ethernet-(BP|IB|Rec)\d+")
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


def _values(entry: object) -> int:
    """How many values one dumped key holds: its fields (a hash), else one (a string, a set, a broken entry)."""
    try:
        fields = _fields(entry)
    except ValueError:
        return 1
    return len(fields) if fields is not None else 1


#: why a dump's values are read and not landed as counters (`CounterRows.skipped`: landed + these = the dump's)
NAME_MAP, NOT_READ, NOT_HASH = (
    "oid map entries (names, types, indexes: no values)",
    "tables not read",
    "not a hash (a string or a set)",
)
UNNAMED, NOT_PORT, SUPERSEDED, BROKEN = (
    "objects without a name map",
    "not a port (PortConfigDone, PortInitDone)",
    "superseded (STATE_DB over APPL_DB, the applied speed over the configured)",
    "in malformed keys",
)


def sonic_dump(doc: object, device: str, at: dt.datetime | None = None) -> tuple[CounterRows, list[Neighbor], int]:
    """(counter rows, LLDP neighbors, malformed records) of a SONiC redis dump.

    The dump has no sample time: rows take `at` (default now). Objects no name map names (router
    interfaces, system ports) are counted in `unknown` and skipped. Every value of the dump (a hash's field) is
    landed, counted non-numeric, or counted in `rows.skipped` by why it was not landed.
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
                    rows.skipped[NAME_MAP if not rest and table.endswith("_MAP") else NOT_READ] += _values(entry)
                    continue
                fields = _fields(entry)
                if fields is None:
                    rows.skipped[NOT_HASH] += 1
                    continue
                if table == "LLDP_ENTRY_TABLE":
                    links.append(_neighbor(device, rest, fields))
                    rows.skipped[AS_LINKS] += len(fields)
                elif (table, sep) in _PORT_TABLES:
                    if rest in _NOT_PORTS:
                        rows.skipped[NOT_PORT] += len(fields)
                        continue
                    merged = ports.setdefault((table, rest), {})
                    for name, value in fields.items():
                        rows.skipped[SUPERSEDED] += name in merged  # one of the two is landed
                        if sep == "|" or name not in merged:  # STATE_DB's (operational) over APPL_DB's
                            merged[name] = value
                elif rest.startswith("oid:"):
                    obj = names.get(rest)
                    if obj is None:
                        rows.unknown += 1
                        rows.skipped[UNNAMED] += len(fields)
                        continue
                    _counters(rows, ts, device, db, table, obj, rest, fields)
                else:
                    rows.skipped[NOT_READ] += len(fields)  # a counters key by name, not oid
            except (ValueError, TypeError) as exc:
                bad += 1
                rows.skipped[BROKEN] += _values(entry)
                log.debug("sonic %s: %s skipped: %s", device, key, exc)
    for (table, port), fields in ports.items():
        for name, value in fields.items():
            if table == "PORT" and name == "speed" and "speed" in ports.get(("PORT_TABLE", port), {}):
                rows.skipped[SUPERSEDED] += 1
                continue  # the configured speed only where no applied (APPL_DB) or operational (STATE_DB) one is
            add_value(rows, ts, device, [(table, {}), (port, {}), (str(name), {})], value, "APPL_DB")
    rows.malformed += bad
    return rows, links, bad


@dataclass(frozen=True)
class Namespace:
    """One ASIC of a multi-ASIC switch: `chassis` is the switch's name, `index` the ASIC's number."""

    chassis: str
    index: int

    @property
    def device(self) -> str:
        return asic_device(self.chassis, self.index)


def asic_device(chassis: str, index: int) -> str:
    """The device name of ASIC `index` of the switch `chassis`, as SONiC names its namespace (`asic0`)."""
    return instance_device(chassis, f"asic{index}")


def _port_fields(doc: object) -> dict[str, dict[str, str]]:
    """Port name -> its string fields, from CONFIG_DB `PORT|*`, APPL_DB `PORT_TABLE:*`, STATE_DB `PORT_TABLE|*`
    (the first table that has a field gives it)."""
    out: dict[str, dict[str, str]] = {}
    for db in _dbs(doc):
        for key, entry in db.items():
            table, sep, port = _split(key)
            if (table, sep) not in _PORT_TABLES or not port or port in _NOT_PORTS or not isinstance(entry, dict):
                continue
            fields = out.setdefault(port, {})
            for name, value in (_fields(entry) or {}).items():
                if isinstance(value, str) and value.strip():
                    fields.setdefault(str(name), value.strip())
    return out


def namespace_index(name: str) -> int:
    """The ASIC number of a namespace as SONiC names it (`asic0` -> 0); ValueError for any other name."""
    m = re.fullmatch(r"asic(\d+)", name.strip())
    if not m:
        raise ValueError(f"not a SONiC ASIC namespace: {name!r} (want asic<N>, as `sonic-db-dump -n asic0`)")
    return int(m.group(1))


def namespace_of(path: Path, doc: object, chassis: str, given: int | None = None) -> Namespace | None:
    """The ASIC whose namespace a dump is of: `given` (the operator says), else a techsupport's `<DB>.json.<n>`,
    else CONFIG_DB's `DEVICE_METADATA|localhost` `asic_name` (`asic0`); None for a single-ASIC switch or the host
    namespace."""
    if given is not None:
        return Namespace(chassis, given)
    m = _NAMESPACE_SUFFIX.search(path.name)
    if m:
        return Namespace(chassis, int(m.group(1)))
    for db in _dbs(doc):
        try:
            meta = _fields(db.get("DEVICE_METADATA|localhost", {})) or {}
        except ValueError:
            continue
        asic = re.fullmatch(r"asic(\d+)", str(meta.get("asic_name", "")))
        if asic:
            return Namespace(chassis, int(asic.group(1)))
    return None


def device_name(path: Path, device: str | None) -> str:
    """The switch a dump is of: `device` if given, else the hostname in a techsupport's folder name
    (`sonic_dump_<hostname>_<date>_<time>/dump/COUNTERS_DB.json`), else the file name up to its first dot."""
    if device:
        return device
    for folder in path.parents[:2]:
        m = _TECHSUPPORT.fullmatch(folder.name)
        if m:
            return m.group(1)
    return path.name.split(".")[0]


def port_links(doc: object, device: str, ns: Namespace | None = None) -> dict[str, list[Neighbor]]:
    """`links` rows a dump's port tables give, by source:

    - `alias`: the alias of each port (`Ethernet0` -> `etp1`), which SONiC's lldpd advertises as the port id,
      so LLDP seen from a host names `etp1`; on a multi-ASIC switch also its `asic_port_name` (`Eth0-ASIC1`),
      which back-plane descriptions name (one naming two ports is no name: dropped);
    - `config`: the back-plane cables CONFIG_DB describes, to the peer ASIC's port by its `asic_port_name`;
    - `chassis`: each front-panel port (by name and by alias) as the switch's neighbours name it, mapped to
      this ASIC's device."""
    fields = _port_fields(doc)
    aliases = [Neighbor(device, f["alias"], device, port) for port, f in fields.items() if "alias" in f]
    out: dict[str, list[Neighbor]] = {"alias": aliases, "config": [], "chassis": []}
    if ns is None:
        return out
    named = Counter(f["asic_port_name"] for f in fields.values() if "asic_port_name" in f)
    for name, n in named.items():
        if n > 1:
            log.info("sonic %s: asic_port_name %s names %d ports: no alias", device, name, n)
    aliases += [
        Neighbor(device, f["asic_port_name"], device, port)
        for port, f in fields.items()
        if named.get(f.get("asic_port_name", ""), 0) == 1 and f["asic_port_name"] != f.get("alias")
    ]
    for port, f in fields.items():
        peer = _BACKPLANE_PEER.fullmatch(f.get("description", ""))
        if peer:
            out["config"].append(Neighbor(device, port, asic_device(ns.chassis, int(peer.group(1))), peer.group(2)))
        elif f.get("role", "") in _FRONT_PANEL_ROLES and not _INTERNAL_PORT.fullmatch(port):
            names = {port, f.get("alias", port)}
            out["chassis"] += [Neighbor(ns.chassis, name, device, port) for name in sorted(names)]
    return out
