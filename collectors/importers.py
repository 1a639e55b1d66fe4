"""Importers: recorded device output into stream Batches (`rocescope import --kind ...`).

Backfills and incident evidence arrive as files other tools wrote, not as live streams; each importer
turns one format into the same rows a live collector would ship (source `import`), skipping and
counting what it cannot read so one bad record never loses a capture:

* gnmic JSON (`--format event`: `[{name, timestamp, tags, values}]`; and gnmic's default JSON:
  `{source, timestamp, prefix, target, updates: [{Path, values}]}`), from files (one JSON document,
  concatenated documents or NDJSON) or gnmic's Kafka output topic; paths resolve through the gNMI
  collector's catalog mapping (`resolve_elems`), with the list keys gnmic moves into tags
  (`interface_name`, `queue_name`) put back into the path;
* SONiC redis dumps (`sonic-db-dump`, or sonic-gnmi's full dump: a list of DBs): COUNTERS_DB
  `COUNTERS:oid:*` and watermark tables, named through `COUNTERS_*_NAME_MAP`, into `counters`;
  APPL_DB `LLDP_ENTRY_TABLE:*` into `links`;
* `lldpcli -f json` (-> `links`), `kubectl get pods -o json` (-> `endpoints`) and pcap (-> `packets`)
  reuse the collectors' own parsers.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from rocescope.collectors.common.json_text import may_hold_surrogates, scrub
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.gnmi.decode import UNKNOWN_PREFIX, resolve_elems
from rocescope.collectors.gnmi.paths import parse_path, path_elems
from rocescope.collectors.lldp.parse import Neighbor, peer_port
from rocescope.errors import DecodeError

__all__ = [
    "gnmic_documents",
    "gnmic_rows",
    "kafka_messages",
    "sonic_dump",
]

log = logging.getLogger(__name__)

_PORT_SUFFIX = re.compile(r":\d{1,5}$")
_STATES = {"up": 1.0, "true": 1.0, "down": 0.0, "false": 0.0}
_MAX_DEPTH = 32
_NOT_KEYS = frozenset({"source", "subscription-name", "target"})


def _add(
    rows: CounterRows, ts: int, device: str, elems: Sequence[tuple[str, Mapping[str, str]]], value: float, target: str
) -> None:
    """One value at a gNMI path, named through the gNMI collector's catalog mapping."""
    r = resolve_elems(elems, target)
    metric = r.metric if r.metric is not None else UNKNOWN_PREFIX + r.raw_name
    rows.add(ts, r.port, metric, value * r.factor, r.raw_name, r.priority, device)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return _STATES.get(value.strip().lower())
    return None


Elems = list[tuple[str, Mapping[str, str]]]


def _leaves(doc: object, depth: int = 0) -> Iterator[tuple[Elems, object]]:
    """(member elements, scalar) of a JSON value; list entries keyed by `name`, `index` or `id`."""
    if depth > _MAX_DEPTH:
        raise DecodeError("JSON nested too deep")
    if isinstance(doc, dict):
        for k, v in doc.items():
            if isinstance(v, list):
                for item in v:
                    if isinstance(item, dict):
                        key = next((x for x in ("name", "index", "interface-id", "id") if x in item), None)
                        keys: dict[str, str] = {key: str(item[key])} if key is not None else {}
                        for rest, leaf in _leaves(item, depth + 1):
                            yield [(str(k), keys), *rest], leaf
            else:
                for rest, leaf in _leaves(v, depth + 1):
                    yield [(str(k), {}), *rest], leaf
    else:
        yield [], doc


# --- gnmic --------------------------------------------------------------------------------------------


def gnmic_documents(text: str | bytes) -> Iterator[object | None]:
    """JSON values of a gnmic output file: one document, concatenated documents or NDJSON.

    A value that does not parse yields None (counted by the caller) and reading resumes at the next
    line that opens a document; text that holds no JSON at all raises DecodeError.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    dec = json.JSONDecoder()
    dirty = may_hold_surrogates(text)
    i, n, good, held = 0, len(text), 0, 0
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            break
        try:
            doc, i = dec.raw_decode(text, i)
            good += 1
            yield from [None] * held  # failures before the first document, counted only if the input had one
            held = 0
            yield scrub(doc) if dirty else doc
        except (ValueError, RecursionError):
            if good:
                yield None
            else:
                held += 1
            nxt = [p for p in (text.find("\n{", i + 1), text.find("\n[", i + 1)) if p >= 0]
            if not nxt:
                break
            i = min(nxt) + 1
    if not good:
        raise DecodeError("no JSON document in the input")


def _timestamp(value: Any) -> int:
    """A gnmic timestamp (ns since the epoch) that fits the `ts` column; ValueError otherwise, so one
    absurd record is skipped instead of failing the whole import when the batch is built."""
    try:
        ts = int(value)
    except OverflowError:  # float infinity
        raise ValueError(f"timestamp {value!r} is not a time") from None
    if not 0 <= ts < 2**63:
        raise ValueError(f"timestamp {ts} is out of range")
    return ts


def _device(name: str) -> str:
    return _PORT_SUFFIX.sub("", name) if name else name


def _event(ev: Mapping[str, Any], rows: CounterRows, device: str) -> None:
    """One gnmic event: `values` paths (list keys in `tags`)."""
    tags = ev.get("tags") or {}
    if not isinstance(tags, dict) or not isinstance(ev.get("values"), dict):
        raise ValueError("event without tags/values objects")
    ts = _timestamp(ev["timestamp"])
    dev = device or _device(str(tags.get("source", "")))
    if not dev:
        raise ValueError("event without tags.source (give --device)")
    target = str(tags.get("target", ""))
    for path, value in ev["values"].items():
        base = path_elems(parse_path(str(path)))
        elems: Elems = []
        for name, keys in base:
            short = name.rpartition(":")[2]
            found = dict(keys)
            for tag, tv in tags.items():
                if tag not in _NOT_KEYS and str(tag).startswith(short + "_"):
                    found[str(tag)[len(short) + 1 :]] = str(tv)
            elems.append((name, found))
        for extra, leaf in _leaves(value):
            x = _number(leaf)
            if x is None:
                rows.nonnumeric += 1
                continue
            _add(rows, ts, dev, elems + extra, x, target)


def _json_format(doc: Mapping[str, Any], rows: CounterRows, device: str) -> None:
    """One message of gnmic's default JSON output: `updates: [{Path, values}]` under an optional prefix."""
    ts = _timestamp(doc["timestamp"])
    dev = device or _device(str(doc.get("source", "")))
    if not dev:
        raise ValueError("message without a source (give --device)")
    target = str(doc.get("target", ""))
    prefix: Elems = path_elems(parse_path(str(doc.get("prefix", ""))))
    for upd in doc.get("updates") or []:
        keyed: Elems = path_elems(parse_path(str(upd.get("Path", ""))))
        for _, value in (upd.get("values") or {}).items():
            for extra, leaf in _leaves(value):
                x = _number(leaf)
                if x is None:
                    rows.nonnumeric += 1
                    continue
                _add(rows, ts, dev, prefix + keyed + extra, x, target)


def gnmic_rows(docs: Iterator[object | None], device: str = "", rows: CounterRows | None = None) -> CounterRows:
    """Counter rows of gnmic documents (events, lists of events, or JSON-format messages)."""
    out = rows if rows is not None else CounterRows()
    for doc in docs:
        items = doc if isinstance(doc, list) else [doc]
        for item in items:
            if isinstance(item, dict) and ("sync-response" in item or "sync_response" in item):
                continue
            try:
                if not isinstance(item, dict):
                    raise ValueError(f"not an event object: {str(item)[:60]}")
                before = len(out)
                if "values" in item:
                    _event(item, out, device)
                elif "updates" in item:
                    _json_format(item, out, device)
                else:
                    raise ValueError("neither an event (values) nor a message (updates)")
            except (ValueError, TypeError, KeyError, AttributeError, DecodeError, RecursionError) as exc:
                out.truncate(before if isinstance(item, dict) else len(out))
                out.malformed += 1
                log.debug("gnmic record skipped: %s: %s", type(exc).__name__, exc)
    return out


def kafka_messages(
    bootstrap: Sequence[str], topic: str, idle_s: float = 5.0, max_messages: int | None = None, group: str | None = None
) -> Iterator[bytes]:
    """Message values of a Kafka topic (gnmic's Kafka output) from the beginning, until it is idle for `idle_s`.

    Without `group` every partition is read from the start and nothing is committed; with it, the group's
    committed offsets are where reading starts and where it is committed at the end.
    """
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError

    try:
        consumer = KafkaConsumer(
            bootstrap_servers=list(bootstrap),
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=int(idle_s * 1000),
        )
    except KafkaError as exc:
        raise DecodeError(f"Kafka {','.join(bootstrap)}: {exc}") from exc
    try:
        if group is None:
            parts = consumer.partitions_for_topic(topic)
            if not parts:
                raise DecodeError(f"Kafka topic {topic!r} does not exist or has no partitions")
            tps = [TopicPartition(topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
        else:
            consumer.subscribe([topic])
        for count, msg in enumerate(consumer, 1):
            if msg.value is not None:
                yield bytes(msg.value)
            if max_messages is not None and count >= max_messages:
                break
        if group is not None:
            consumer.commit()
    finally:
        consumer.close()


# --- SONiC redis dumps ------------------------------------------------------------------------------

_WATERMARK_TABLES = ("PERIODIC_WATERMARKS", "USER_WATERMARKS", "PERSISTENT_WATERMARKS")
#: IEEE 802.1AB port id subtypes (LLDP-MIB LldpPortIdSubtype) as lldpd names them.
_PORT_SUBTYPES = {"1": "ifalias", "2": "component", "3": "mac", "4": "ip", "5": "ifname", "6": "circuit", "7": "local"}


def _dbs(doc: object) -> list[Mapping[str, Any]]:
    if isinstance(doc, dict):
        return [doc]
    if isinstance(doc, list) and all(isinstance(d, dict) for d in doc):
        return list(doc)
    raise DecodeError("not a SONiC redis dump (an object of keys, or a list of databases)")


def _names(db: Mapping[str, Any]) -> dict[str, str]:
    """oid -> object name (`Ethernet0`, or `Ethernet0:3` for a queue / priority group)."""
    out: dict[str, str] = {}
    for table in ("COUNTERS_PORT_NAME_MAP", "COUNTERS_QUEUE_NAME_MAP", "COUNTERS_PG_NAME_MAP"):
        mapping = db.get(table)
        if isinstance(mapping, dict):
            for name, oid in mapping.items():
                if isinstance(oid, str):
                    out.setdefault(oid, str(name))
    return out


def sonic_dump(doc: object, device: str, at: dt.datetime | None = None) -> tuple[CounterRows, list[Neighbor], int]:
    """(counter rows, LLDP neighbors, malformed records) of a SONiC redis dump.

    The dump has no sample time: rows take `at` (default now). Objects no name map names (buffer
    pools, router interfaces) are counted in `unknown` and skipped.
    """
    ts = int((at or dt.datetime.now(dt.UTC)).timestamp() * 1e9)
    rows = CounterRows()
    links: list[Neighbor] = []
    bad = 0
    for db in _dbs(doc):
        names = _names(db)
        for key, fields in db.items():
            table, _, rest = str(key).partition(":")
            try:
                if table == "LLDP_ENTRY_TABLE" and rest:
                    if not isinstance(fields, dict):
                        raise ValueError("LLDP entry is not an object")
                    peer = str(fields.get("lldp_rem_sys_name") or fields.get("lldp_rem_chassis_id") or "")
                    subtype = _PORT_SUBTYPES.get(str(fields.get("lldp_rem_port_id_subtype", "")), "")
                    port = peer_port(
                        subtype, str(fields.get("lldp_rem_port_id", "")), str(fields.get("lldp_rem_port_desc", ""))
                    )
                    if not peer or not port:
                        raise ValueError("LLDP entry without a neighbor name or port id")
                    links.append(Neighbor(device, rest, peer, port))
                elif (table == "COUNTERS" or table in _WATERMARK_TABLES) and rest.startswith("oid:"):
                    if not isinstance(fields, dict):
                        raise ValueError("counter entry is not an object")
                    obj = names.get(rest)
                    if obj is None:
                        rows.unknown += 1
                        continue
                    for name, value in fields.items():
                        x = _number(value)
                        if x is None:
                            rows.nonnumeric += 1
                            continue
                        elems: Elems = [(table, {}), (obj, {}), (str(name), {})]
                        _add(rows, ts, device, elems, x, "COUNTERS_DB")
            except (ValueError, TypeError) as exc:
                bad += 1
                log.debug("sonic %s: %s skipped: %s", device, key, exc)
    rows.malformed += bad
    return rows, links, bad
