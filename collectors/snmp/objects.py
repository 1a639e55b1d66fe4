"""The MIB table columns the SNMP collector knows, by object name: OIDs, row index shapes, defaults.

IF-MIB ifXTable 64-bit counters and ifTable discards/errors/oper status, ifHighSpeed, EtherLike pause
counters, IEEE8021-PFC-MIB and the vendor per-priority PFC tables (CISCO-PFC-EXT, ARISTA-PFC,
MELLANOX-QOS, indexed by ifIndex.priority). Which of them a poll reads by default, which are optional
(asked again only now and then where a device has no rows) and which are slow (read every few polls)
is decided here; what each means (metric, scale) is the catalog's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from rocescope import catalog

__all__ = [
    "DEFAULT_OBJECTS",
    "DEFAULT_OPTIONAL",
    "DEFAULT_SLOW",
    "NAME_OBJECTS",
    "OBJECTS",
    "VENDOR",
    "Oid",
    "SnmpObject",
    "default_objects",
    "format_oid",
    "parse_oid",
]

Oid = tuple[int, ...]
#: The catalog's vendor for MIB object names.
VENDOR = "snmp"


def parse_oid(text: str) -> Oid:
    """`1.3.6.1.2.1` or `.1.3.6.1.2.1` -> (1, 3, 6, 1, 2, 1); raises ValueError on anything else."""
    parts = text.strip().lstrip(".").split(".")
    oid = tuple(int(p) for p in parts)
    if len(oid) < 2 or any(p < 0 or p > 0xFFFFFFFF for p in oid):
        raise ValueError(f"not an OID: {text!r}")
    return oid


def format_oid(oid: Oid) -> str:
    return ".".join(map(str, oid))


@dataclass(frozen=True)
class SnmpObject:
    """A MIB table column the collector can poll: its name (kept as raw_name), OID and row index."""

    name: str
    oid: Oid
    #: `ifIndex`: the row index is the ifIndex; `ifIndex.priority`: ifIndex then a priority/queue index.
    index: Literal["ifIndex", "ifIndex.priority"] = "ifIndex"


def _obj(name: str, oid: str, index: Literal["ifIndex", "ifIndex.priority"] = "ifIndex") -> SnmpObject:
    return SnmpObject(name, parse_oid(oid), index)


_IF = "1.3.6.1.2.1.2.2.1"
_IFX = "1.3.6.1.2.1.31.1.1.1"
_PP: Literal["ifIndex.priority"] = "ifIndex.priority"
#: Every object the collector knows, by MIB object name. OIDs from the MIB files in
#: tests/fixtures/realdata/05_snmp (see pfc_qos_mib_oid_table.tsv) and RFC 2863 / RFC 3635.
OBJECTS: Mapping[str, SnmpObject] = {
    o.name: o
    for o in (
        _obj("ifDescr", f"{_IF}.2"),
        _obj("ifAdminStatus", f"{_IF}.7"),
        _obj("ifOperStatus", f"{_IF}.8"),
        _obj("ifInDiscards", f"{_IF}.13"),
        _obj("ifInErrors", f"{_IF}.14"),
        _obj("ifOutDiscards", f"{_IF}.19"),
        _obj("ifOutErrors", f"{_IF}.20"),
        _obj("ifName", f"{_IFX}.1"),
        _obj("ifHCInOctets", f"{_IFX}.6"),
        _obj("ifHCInUcastPkts", f"{_IFX}.7"),
        _obj("ifHCInMulticastPkts", f"{_IFX}.8"),
        _obj("ifHCInBroadcastPkts", f"{_IFX}.9"),
        _obj("ifHCOutOctets", f"{_IFX}.10"),
        _obj("ifHCOutUcastPkts", f"{_IFX}.11"),
        _obj("ifHCOutMulticastPkts", f"{_IFX}.12"),
        _obj("ifHCOutBroadcastPkts", f"{_IFX}.13"),
        _obj("ifHighSpeed", f"{_IFX}.15"),
        # EtherLike-MIB dot3PauseTable (dot3StatsIndex = ifIndex)
        _obj("dot3InPauseFrames", "1.3.6.1.2.1.10.7.10.1.3"),
        _obj("dot3OutPauseFrames", "1.3.6.1.2.1.10.7.10.1.4"),
        # IEEE8021-PFC-MIB ieee8021PfcIfTable (AUGMENTS ifEntry)
        _obj("ieee8021PfcRequests", "1.3.111.2.802.1.1.21.1.1.1.2"),
        _obj("ieee8021PfcIndications", "1.3.111.2.802.1.1.21.1.1.1.3"),
        # CISCO-PFC-EXT-MIB (also served by SONiC's snmpagent)
        _obj("cpfcIfRequests", "1.3.6.1.4.1.9.9.813.1.1.1.1"),
        _obj("cpfcIfIndications", "1.3.6.1.4.1.9.9.813.1.1.1.2"),
        _obj("cpfcIfPriorityRequests", "1.3.6.1.4.1.9.9.813.1.2.1.2", _PP),
        _obj("cpfcIfPriorityIndications", "1.3.6.1.4.1.9.9.813.1.2.1.3", _PP),
        # ARISTA-PFC-MIB
        _obj("aristaPfcPriorityRequests", "1.3.6.1.4.1.30065.3.11.1.1.1.3", _PP),
        _obj("aristaPfcPriorityIndications", "1.3.6.1.4.1.30065.3.11.1.1.1.4", _PP),
        # MELLANOX-QOS-MIB mellanoxQoSPFCTable (INDEX ifIndex, PFC queue)
        _obj("mellanoxQoSPFCRxPausePkts", "1.3.6.1.4.1.33049.15.1.2.1.3", _PP),
        _obj("mellanoxQoSPFCRxPauseDuration", "1.3.6.1.4.1.33049.15.1.2.1.4", _PP),
        _obj("mellanoxQoSPFCTxPausePkts", "1.3.6.1.4.1.33049.15.1.2.1.5", _PP),
        _obj("mellanoxQoSPFCTxPauseDuration", "1.3.6.1.4.1.33049.15.1.2.1.6", _PP),
    )
}

#: Columns that name an ifIndex (ifName first: it wins where both exist).
NAME_OBJECTS: tuple[str, ...] = ("ifName", "ifDescr")
_ALWAYS = (
    "ifHCInOctets",
    "ifHCOutOctets",
    "ifHCInUcastPkts",
    "ifHCOutUcastPkts",
    "ifInDiscards",
    "ifOutDiscards",
    "ifInErrors",
    "ifOutErrors",
    "ifAdminStatus",
    "ifOperStatus",
    "ifHighSpeed",
)
_CASTS = ("ifHCInMulticastPkts", "ifHCInBroadcastPkts", "ifHCOutMulticastPkts", "ifHCOutBroadcastPkts")


def default_objects() -> tuple[str, ...]:
    """The port columns polled by default: the IF-MIB set, plus the multicast/broadcast columns the
    catalog maps to a metric (read at call time, so a catalog that learns them is picked up)."""
    return _ALWAYS + tuple(n for n in _CASTS if catalog.resolve(VENDOR, n) is not None)


DEFAULT_OBJECTS: tuple[str, ...] = default_objects()
DEFAULT_OPTIONAL: tuple[str, ...] = ("ieee8021PfcRequests", "ieee8021PfcIndications")
#: Gauges that change only when a link renegotiates: polled with the first poll and every `slow_every`.
DEFAULT_SLOW: tuple[str, ...] = ("ifHighSpeed",)
