"""The SNMP object table: OIDs as the real MIB files resolve them, default objects as the catalog maps them."""

from __future__ import annotations

from pathlib import Path

from rocescope import catalog
from rocescope.collectors.snmp.objects import DEFAULT_OBJECTS, OBJECTS, default_objects, format_oid

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "05_snmp"
OID_TABLE = REAL / "pfc_qos_mib_oid_table.tsv"
CASTS = ("ifHCInMulticastPkts", "ifHCInBroadcastPkts")


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
