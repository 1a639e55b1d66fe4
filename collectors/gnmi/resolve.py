"""gNMI paths -> (port, priority, catalog metric, raw name): what a value at a path means, by the path's shape.

* SONiC database paths (a `*_DB` target such as `COUNTERS_DB` or `APPL_DB/asic0`; or a first element naming
  the DB, `sonic-db:APPL_DB/localhost/...`, whose DB and instance elements are dropped, the instance kept in
  `Resolved.instance`: a multi-ASIC switch's ASICs are devices of their own, `instance_device`; or a first element
  COUNTERS / *_WATERMARKS / RATES). COUNTERS_DB tables: the last element is the SAI field (vendor
  `sonic_sai`), the one before it the object key, `Ethernet68` (port) or `Ethernet68:3` (port, queue/PG
  index). COUNTERS (peak since the last poll) and PERIODIC_WATERMARKS map to the catalog; USER_ and
  PERSISTENT_WATERMARKS hold peaks since a clear and are kept raw as `TABLE/field`. Port tables (APPL_DB or
  STATE_DB `PORT_TABLE/Ethernet0/speed`, CONFIG_DB `PORT/Ethernet0/speed`): `TABLE/field` (vendor
  `sonic_db`), the key is the port.
* OpenConfig `/interfaces/interface[name=X]/...` and `/qos/interfaces/interface[interface-id=X]/
  output/queues/queue[name=Q]/...` (vendor `openconfig`), SR Linux `/interface[name=X]/...` and
  `/qos/interfaces/interface[interface-id=X]/...` (vendor `srlinux`), and the NVIDIA paths Cumulus Linux
  publishes beside OpenConfig's under both (vendor `cumulus`: `switch-priority[priority=3]/state/...`,
  `input/priority-group[pg-id=3]/state/...`, queue `state/instant-queue-len`...): the path below the
  interface (or queue) list entry is the catalog name; a per-priority metric takes its index from the list
  key (`queue[name=3]`, `pfc-priority[index=3]`). Module prefixes are ignored.
* Anything else resolves to metric None (the decoder keeps it as `raw:<name>`), where the name is the SAI
  field (SONiC), `TABLE/field` (SONiC port tables), the path below the interface or queue entry
  (OpenConfig, SR Linux) or the whole path with its keys.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from rocescope import catalog
from rocescope.collectors.gnmi.paths import NO_KEYS, Elem, elems_str

__all__ = ["DEFAULT_VENDORS", "Resolved", "instance_device", "is_sonic", "resolve_elems", "strip_module"]

#: Catalog vendors tried, in order, for a path below an interface or a QoS interface that is not SONiC's.
DEFAULT_VENDORS: tuple[str, ...] = ("openconfig", "srlinux", "cumulus")
#: ... and for one below OpenConfig's /interfaces/interface (Cumulus adds a few leaves of its own there).
_INTERFACE_VENDORS: tuple[str, ...] = ("openconfig", "cumulus")

#: COUNTERS_DB tables of SAI stats (`sonic_sai` fields) keyed by object: `Ethernet68`, `Ethernet68:3` (queue/PG).
#: COUNTERS holds the peak since the last poll (read-and-clear), PERIODIC_WATERMARKS the peak since its timer.
_COUNTER_TABLES = frozenset({"COUNTERS", "PERIODIC_WATERMARKS", "RATES"})
#: Peaks since a user's or the persistent clear, not since the last read: kept raw as `TABLE/field`, so one old
#: burst never passes for a standing queue_watermark_bytes / pg_watermark_bytes peak.
_SINCE_CLEAR_TABLES = frozenset({"USER_WATERMARKS", "PERSISTENT_WATERMARKS"})
_SONIC_TABLES = _COUNTER_TABLES | _SINCE_CLEAR_TABLES | {"COUNTERS_DB"}
#: A SONiC database as a path element (`APPL_DB`, or `sonic-db:APPL_DB` with its origin), and the instance
#: element sonic-gnmi's `sonic-db` paths put after it (`localhost`, `asic0`, `dpu0`).
_DB_NAME = re.compile(r"[A-Z][A-Z0-9_]*_DB")
_INSTANCE = re.compile(r"localhost|asic\d{1,3}|dpu\d{1,3}")
_TRAILING_INT = re.compile(r"(\d{1,3})$")


@dataclass(frozen=True)
class Resolved:
    """Where one path's values go: port, priority (-1 none), metric (None: unknown), raw name, factor."""

    port: str
    priority: int
    metric: str | None
    raw_name: str
    factor: float = 1.0
    #: the SONiC database instance the path names, where it is not the host's (`asic0`, `dpu1`): a multi-ASIC
    #: switch keeps one set of databases per ASIC, each a device of its own (`instance_device`)
    instance: str = ""


def _index_of(text: str) -> int:
    """A list key as a priority/queue index: its trailing number (0..127), else -1."""
    m = _TRAILING_INT.search(text)
    if m is None:
        return -1
    value = int(m.group(1))
    return value if value < 128 else -1


def strip_module(name: str) -> str:
    """`openconfig-interfaces:interfaces` -> `interfaces` (YANG module prefixes do not change the meaning)."""
    return name.rpartition(":")[2] if ":" in name else name


def _catalog(vendor: str, name: str) -> tuple[str, int, float] | None:
    hit = catalog.resolve(vendor, name)
    return None if hit is None else (hit[0], hit[1], catalog.scale(vendor, name))


def instance_device(device: str, instance: str) -> str:
    """The device an instance of a SONiC switch's databases counts for: the switch itself for the host's
    (`localhost`, or none), else `<switch>-<instance>` (`sw1-asic0`), as a multi-ASIC switch's dumps are named."""
    return device if instance in ("", "localhost") else f"{device}-{instance}"


def _is_db(name: str) -> bool:
    return _DB_NAME.fullmatch(name.rpartition(":")[2]) is not None


def is_sonic(target: str, elems: Sequence[Elem]) -> bool:
    """SONiC database paths (their element names hold `:` that is not a module prefix): a `*_DB` target
    (`APPL_DB`, `COUNTERS_DB/asic0`), a first element naming the DB (`sonic-db:APPL_DB/localhost/...`) or a
    COUNTERS_DB table."""
    if target.partition("/")[0].endswith("_DB"):
        return True
    return bool(elems) and (elems[0][0] in _SONIC_TABLES or _is_db(elems[0][0]))


def _sonic_names(elems: Sequence[Elem], target: str) -> tuple[list[str], str]:
    """Element names from the table on, and the database instance: a leading DB element and the instance after it
    are dropped (`sonic-db:COUNTERS_DB/asic2/...`), as is an instance leading the path under a DB target
    (`COUNTERS_DB`: `asic2/COUNTERS/...`); a target may name the instance too (`COUNTERS_DB/asic2`)."""
    names = [name for name, _ in elems]
    instance = target.partition("/")[2] if _INSTANCE.fullmatch(target.partition("/")[2]) else ""
    if names and _is_db(names[0]):
        del names[0]
    if names and _INSTANCE.fullmatch(names[0]):
        instance = names.pop(0)
    if len(names) >= 2 and names[-1] == names[-2]:  # a field path answered with {"FIELD": value}
        names.pop()
    return names, instance


def _resolve_sonic(elems: Sequence[Elem], target: str) -> Resolved:
    names, instance = _sonic_names(elems, target)
    return replace(_resolve_sonic_names(names), instance=instance)


def _resolve_sonic_names(names: list[str]) -> Resolved:
    table = names[0] if names else ""
    field_name = names[-1] if names else ""
    key = names[-2] if len(names) >= 2 else ""
    if table not in _COUNTER_TABLES and table not in _SINCE_CLEAR_TABLES and len(names) >= 3:
        # a table keyed by port (APPL_DB/STATE_DB PORT_TABLE, CONFIG_DB PORT): `TABLE/field`
        raw = f"{table}/{field_name}"
        port_hit = _catalog("sonic_db", raw)
        if port_hit is None:
            return Resolved(key, -1, None, raw)
        return Resolved(key, port_hit[1], port_hit[0], raw, port_hit[2])
    parts = key.split(":")
    port, prio, odd = parts[0], -1, parts[1:]
    if odd and odd[0].isascii() and odd[0].isdigit() and len(odd[0]) <= 3 and int(odd[0]) < 128:
        prio = int(odd.pop(0))
    raw = field_name if not odd else ":".join(odd) + "/" + field_name
    if table in _SINCE_CLEAR_TABLES:
        return Resolved(port, prio, None, f"{table}/{raw}")
    hit = None if odd else _catalog("sonic_sai", field_name)
    if hit is None:
        return Resolved(port, prio, None, raw)
    metric, p, factor = hit
    return Resolved(port, p if p >= 0 else prio, metric, raw, factor)


def _list_index(elems: Sequence[Elem]) -> int:
    for _, keys in elems:
        for value in keys.values():
            return _index_of(value)
    return -1


def resolve_elems(elems: Sequence[Elem], target: str = "", vendors: Sequence[str] = DEFAULT_VENDORS) -> Resolved:
    """Map a full path (prefix + path [+ JSON members]) to (port, priority, metric, raw name)."""
    if is_sonic(target, elems):
        return _resolve_sonic(elems, target)
    names = [strip_module(name) for name, _ in elems]
    port = ""
    anchor = -1  # elements [anchor:] form the catalog name
    order: Sequence[str] = vendors
    index_from = 0
    if names[:2] == ["interfaces", "interface"]:
        port, anchor, order, index_from = elems[1][1].get("name", ""), 2, _INTERFACE_VENDORS, 2
    elif names[:1] == ["interface"]:
        port, anchor, order, index_from = elems[0][1].get("name", ""), 1, ("srlinux",), 1
    elif names[:3] == ["qos", "interfaces", "interface"]:
        keys = elems[2][1]
        port = keys.get("interface-id") or keys.get("name") or ""
        index_from = 3
        anchor = 6 if names[3:6] == ["output", "queues", "queue"] else 3
    if anchor < 0 or len(names) <= anchor:
        full = elems_str(elems)
        return Resolved(port, -1, None, full if not port else elems_str((strip_module(n), NO_KEYS) for n, _ in elems))
    rest = "/".join(names[anchor:])
    for vendor in order:
        hit = _catalog(vendor, rest)
        if hit is not None:
            metric, prio, factor = hit
            if prio < 0 and catalog.METRICS_BY_NAME[metric].per_priority:
                prio = _list_index(elems[index_from:])
            return Resolved(port, prio, metric, rest, factor)
    return Resolved(port, -1, None, rest)
