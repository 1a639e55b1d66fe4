"""The bugs the fuzzers found, one small example each (the fix is named in each test)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from rocescope import config
from rocescope.collectors import importers, sonic_dump
from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.gnmi.decode import GnmiDecoder
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.jobs.placement import Inventory, parse_pods
from rocescope.collectors.lldp.collector import links_batch
from rocescope.collectors.lldp.parse import parse_lldpcli
from rocescope.collectors.snmp.normalize import normalize
from rocescope.collectors.snmp.objects import OBJECTS
from rocescope.errors import ConfigError

AT = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
GOOD = {"name": "s", "timestamp": 5, "tags": {"source": "leaf1"}, "values": {"/interface/statistics/in-octets": "1"}}


@pytest.mark.parametrize("ts", [2**70, -1, 1e309, "1e309"])
def test_gnmic_absurd_timestamp_skips_one_event(ts: object) -> None:
    """importers._timestamp: an out-of-range timestamp failed the whole import when the batch was built
    (OverflowError), and infinity escaped gnmic_rows (OverflowError is no ValueError)."""
    later = {**GOOD, "timestamp": 6}  # another read: the same one twice would land once, as a duplicate
    text = json.dumps([GOOD, {**GOOD, "timestamp": ts}, later]).replace('"1e309"', "1e309")
    rows = importers.gnmic_rows(importers.gnmic_documents(text))
    assert rows.malformed == 1 and len(rows) == 2
    assert sum(b.num_rows for b in rows.to_batches("switch", "import")) == 2 and not rows.skipped


def test_lone_surrogates_do_not_fail_the_batch() -> None:
    """collectors/common/json_text.py: JSON `\\ud800` (or its UTF-8 bytes) decoded to a str Arrow cannot encode,
    so one garbled name failed the batch with every good row in it; now replaced by '?'."""
    event = json.dumps([GOOD, {**GOOD, "tags": {"source": "leaf\\ud800"}}]).replace("\\\\ud800", "\\ud800")
    rows = importers.gnmic_rows(importers.gnmic_documents(event.encode()))
    assert {b.key for b in rows.to_batches("switch", "import")} == {"leaf1", "leaf?"}

    dump = b'{"COUNTERS_PORT_NAME_MAP": {"Ethernet0": "oid:0x1"}, "COUNTERS:oid:0x1": {"SAI_\xed\xa0\x80": "7"}}'
    rows, _, _ = sonic_dump.sonic_dump(load_json(dump, "dump"), "sw", AT)
    assert sum(b.num_rows for b in rows.to_batches("switch", "import")) == 1

    lldp = {
        "lldp": {
            "interface": {
                "eth0": {"chassis": {"sw\\udc80": {}}, "port": {"id": {"type": "ifname", "value": "Ethernet1"}}}
            }
        }
    }
    found, bad = parse_lldpcli(json.dumps(lldp).replace("\\\\udc80", "\\udc80"), "gpu-1")
    assert bad == 0 and links_batch(found, AT, "gpu-1").num_rows == 1

    pods = json.dumps({"items": [{"metadata": {"name": "p\\ud800"}}]}).replace("\\\\ud800", "\\ud800")
    parse_pods(pods, Inventory(), AT)  # a pod without the job label: skipped, no exception

    n = pb.Notification(timestamp=1, prefix=pb.Path(target="COUNTERS_DB"))
    u = n.update.add()
    u.path.CopyFrom(parse_path("COUNTERS/Ethernet0"))
    u.val.json_ietf_val = b'{"SAI_PORT_STAT_IF_IN_OCTETS": "3", "X\\udfff": "4"}'
    dec = GnmiDecoder("sw", on_problem=lambda _what: None)
    dec.feed(bytes(pb.SubscribeResponse(update=n).SerializeToString()))
    batch = dec.flush()
    assert batch is not None and batch.num_rows == 2


def test_snmp_index_beyond_ifindex_range_is_malformed() -> None:
    """snmp/normalize.py _MAX_IFINDEX: an OID arc past int64 failed the whole poll's batch (OverflowError)."""
    root = OBJECTS["ifHCInOctets"].oid
    rows = [((*root, 5), 10), ((*root, 2**64), 11), ((*root, 2**31), 12)]
    norm = normalize(rows, [OBJECTS["ifHCInOctets"]])
    assert norm.rows.malformed == 2 and norm.ifindex == [5]
    assert norm.name_ports(1, {5: "Ethernet5"}).to_batch("sw", "switch", "snmp").num_rows == 1


@pytest.mark.parametrize(
    "content", [b"store: {path: \xff\xfe}\n", b"1: x\n", b"? [a]\n: b\n"], ids=["not-utf8", "int-key", "list-key"]
)
def test_config_file_errors_are_config_errors(tmp_path: Path, content: bytes) -> None:
    """rocescope/config.py: a non-UTF-8 file raised UnicodeDecodeError, a non-string top-level key TypeError."""
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError):
        config.load(path)


def test_config_path_that_is_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        config.load(tmp_path)


def test_arrow_message_with_a_garbled_schema_version_is_refused() -> None:
    """pipeline/batch.py decode (found by atheris): a schema-version metadata value that is not UTF-8 raised
    UnicodeDecodeError, which the sink does not catch (it dead-letters DecodeError/SchemaError): one such
    Kafka message stopped the sink. Now a SchemaError like any other foreign version."""
    from rocescope.errors import SchemaError
    from rocescope.pipeline.batch import decode, encode

    from samples import sample_batch

    good = sample_batch("counters", 3)
    data = good.data.replace_schema_metadata({b"rocescope.schema_version": b"\xac\xff"})
    with pytest.raises(SchemaError, match="schema version"):
        decode("counters", encode(type(good)("counters", data, good.key)))
