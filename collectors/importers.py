"""Importers: recorded device output into stream Batches (`rocescope import --kind ...`).

Backfills and incident evidence arrive as files other tools wrote, not as live streams; each importer
turns one format into the same rows a live collector would ship (source `import`), skipping and
counting what it cannot read so one bad record never loses a capture:

* gnmic JSON (`--format event`: `[{name, timestamp, tags, values}]`; and gnmic's default JSON:
  `{source, timestamp, prefix, target, updates: [{Path, values}]}`), from files (one JSON document,
  concatenated documents or NDJSON) or gnmic's Kafka output topic; paths resolve through the gNMI
  collector's catalog mapping (`resolve_elems`), with the list keys gnmic moves into tags
  (`interface_name`, `queue_name`) put back into the path, the prefix's target taken from the `target`
  tag (`COUNTERS_DB`, `APPL_DB`) and an `origin:` in front of the path dropped; values are read as the
  collector reads them (`values.reading`: port speeds as words, an unknown speed skipped);
* SONiC redis dumps: `rocescope.collectors.sonic_dump`, through `add_value`, the mapping here;
* `lldpcli -f json` (-> `links`), `kubectl get pods -o json` (-> `endpoints`), pcap (-> `packets`) and NCCL
  Inspector's JSON or Prometheus files (-> `collectives`, `collectors.nccl.parse`) reuse the collectors' own parsers.
"""

from __future__ import annotations

import codecs
import contextlib
import datetime as dt
import functools
import itertools
import json
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from rocescope.collectors.common.json_text import may_hold_surrogates, scrub
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.gnmi.decode import UNKNOWN_PREFIX
from rocescope.collectors.gnmi.paths import parse_path, path_elems
from rocescope.collectors.gnmi.resolve import instance_device, resolve_elems
from rocescope.collectors.gnmi.values import POSITIVE_ONLY, reading
from rocescope.collectors.lldp.parse import Neighbor
from rocescope.collectors.lldp.parse import peer_port as _peer_port
from rocescope.errors import DecodeError
from rocescope.pipeline.batch import Batch

__all__ = [
    "add_value",
    "gnmic_batches",
    "gnmic_documents",
    "gnmic_note",
    "gnmic_rows",
    "kafka_messages",
    "lldp_neighbors",
    "source_device",
]

log = logging.getLogger(__name__)

_PORT_SUFFIX = re.compile(r":\d{1,5}$")
#: `origin:` in front of a gnmic path: `sonic-db:/APPL_DB/...` (origin in the prefix), `/sonic-db:/APPL_DB/...`
#: (in the update's path: gnmic joins prefix and path with a `/`); a module prefix (`/oc-if:interfaces`) is kept.
_ORIGIN = re.compile(r"^/?[A-Za-z][\w.-]*:(?=/)")
_MAX_DEPTH = 32
_NOT_A_LINE = object()  # a line that is no JSON document by itself
_NOT_KEYS = frozenset({"source", "subscription-name", "target"})

Elems = list[tuple[str, Mapping[str, str]]]


#: openconfig-lldp: /lldp/interfaces/interface[name]/neighbors/neighbor[id]/state/<leaf>, the leaves that name a
#: cable's far end (openconfig-lldp.yang); the neighbour's other state (capabilities, TTL) is no cabling
_LLDP_PATH = ("lldp", "interfaces", "interface", "neighbors", "neighbor", "state")
_LLDP_LEAVES = frozenset({"system-name", "port-id", "port-id-type", "port-description", "chassis-id"})


def _is_lldp(elems: Elems) -> bool:
    """An openconfig-lldp neighbour state path (or one under it)."""
    names = tuple(n.rpartition(":")[2] for n, _ in elems)
    return any(names[i : i + len(_LLDP_PATH)] == _LLDP_PATH for i in range(max(0, len(names) - len(_LLDP_PATH)) + 1))


def _lldp_leaf(rows: CounterRows, ts: int, device: str, elems: Elems, value: object) -> bool:
    """Keep an openconfig-lldp neighbour state leaf in `rows.neighbors` (True), or say it is none (False)."""
    if len(elems) < 7 or tuple(n.rpartition(":")[2] for n, _ in elems[-7:-1]) != _LLDP_PATH:
        return False
    leaf = elems[-1][0].rpartition(":")[2]
    if leaf not in _LLDP_LEAVES:
        return False
    port, neighbor = elems[-5][1].get("name", ""), elems[-3][1].get("id", "")
    state = rows.neighbors.setdefault((device, port, neighbor), {})
    state[leaf] = str(value)
    state["ts"] = str(max(ts, int(state.get("ts", "0"))))
    return True


def lldp_neighbors(rows: CounterRows) -> list[tuple[Neighbor, int]]:
    """The cables the gathered LLDP neighbour state names (a far end with a system name), with the latest time
    each was stamped; the far port as lldpcli reads it (the description where the id is an address)."""
    out = []
    for (device, port, _), state in sorted(rows.neighbors.items()):
        peer = state.get("system-name", "")
        far = _peer_port(state.get("port-id-type", ""), state.get("port-id", ""), state.get("port-description", ""))
        if device and port and peer and far:
            out.append((Neighbor(device, port, peer, far), int(state["ts"])))
    return out


def gnmic_batches(rows: CounterRows) -> list[Batch]:
    """The counters of gnmic output, and the cables its openconfig-lldp neighbour state names (`links`, source
    gnmi, seen when the device stamped them)."""
    return [*rows.to_batches("switch", "import"), *gnmic_links(rows)]


def gnmic_links(rows: CounterRows) -> list[Batch]:
    """The cables the openconfig-lldp neighbour state gathered in `rows` names, as `links` batches."""
    from rocescope.collectors.lldp.collector import links_batch

    by_time: dict[int, list[Neighbor]] = {}
    for neighbor, ts in lldp_neighbors(rows):
        by_time.setdefault(ts, []).append(neighbor)
    return [
        links_batch(found, dt.datetime.fromtimestamp(ts / 1e9, dt.UTC), found[0].device, source="gnmi")
        for ts, found in sorted(by_time.items())
    ]


def gnmic_note(rows: CounterRows) -> str:
    """What an import of gnmic output left out of the counters, for its summary line."""
    return f", {rows.nonnumeric} non-numeric, {len(lldp_neighbors(rows))} LLDP neighbour(s) as links"


#: why a value read is no counter row but cabling (openconfig-lldp neighbour state, SONiC's LLDP_ENTRY_TABLE)
AS_LINKS = "LLDP fields (read as links)"


def add_value(rows: CounterRows, ts: int, device: str, elems: Elems, value: object, target: str) -> None:
    """One value at a gNMI path, named through the gNMI collector's catalog mapping and read as it reads it
    (a word that is no value, or an unknown speed, is counted as non-numeric); LLDP neighbour state is kept as
    cabling (`lldp_neighbors`)."""
    if _lldp_leaf(rows, ts, device, elems, value):
        rows.skipped[AS_LINKS] += 1
        return
    r = resolve_elems(elems, target)
    x = reading(r.metric, value, r.factor)
    if x is None:
        rows.nonnumeric += 1
        return
    metric = r.metric if r.metric is not None else UNKNOWN_PREFIX + r.raw_name
    rows.add(ts, r.port, metric, x, r.raw_name, r.priority, instance_device(device, r.instance))


def _path(text: object) -> Elems:
    """A gnmic path (`origin:` dropped) as elements (a list the caller must not change: it may be shared)."""
    return _parsed_path(str(text))


@functools.lru_cache(maxsize=1 << 14)
def _parsed_path(text: str) -> Elems:
    """A capture names a few dozen paths, each at every interface and queue: parsed once each."""
    return path_elems(parse_path(_ORIGIN.sub("", text, count=1)))


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
    return gnmic_stream([text])


def gnmic_stream(chunks: Iterable[str | bytes]) -> Iterator[object | None]:
    """`gnmic_documents` over a file read in blocks: documents are decoded as the blocks arrive, so a capture
    larger than memory is read in the memory of a few blocks (one document spanning the whole file, a pretty
    JSON array, is held whole). A document a block cuts short is read on into the next block; one that fails
    with the next document's start in view is damage: None, and reading goes on there."""
    decode = codecs.getincrementaldecoder("utf-8")("replace").decode
    dec = json.JSONDecoder()
    parts = iter(chunks)
    buf, i, ended, dirty, good, held = "", 0, False, False, 0, 0

    def more() -> bool:
        nonlocal buf, i, ended, dirty
        if ended:
            return False
        chunk = next(parts, None)
        text = decode(b"", final=True) if chunk is None else chunk if isinstance(chunk, str) else decode(chunk)
        ended = chunk is None
        dirty = dirty or may_hold_surrogates(buf[-12:] + text)  # an escape may straddle two blocks
        buf, i = buf[i:] + text, 0
        return bool(text) or not ended

    while True:
        n = len(buf)
        while i < n and buf[i] in " \t\r\n,":
            i += 1
        if i >= n:
            if more():
                continue
            break
        # NDJSON, the common case: a whole line is one document, decoded by orjson; anything else (a document over
        # several lines, two on one line, NaN, a number beyond 64 bits, a line the block cut) by the standard decoder
        end, doc = buf.find("\n", i), _NOT_A_LINE
        if end > i:
            with contextlib.suppress(orjson.JSONDecodeError):
                doc, i = orjson.loads(buf[i:end]), end + 1
        try:
            if doc is _NOT_A_LINE:
                doc, i = dec.raw_decode(buf, i)
        except (ValueError, RecursionError):
            nxt = [p for p in (buf.find("\n{", i + 1), buf.find("\n[", i + 1)) if p >= 0]
            if not nxt and more():
                continue  # cut short by the block, or damage: the next block tells
            if good:
                yield None
            else:
                held += 1
            if not nxt:
                break
            i = min(nxt) + 1
            continue
        good += 1
        yield from [None] * held  # failures before the first document, counted only if the input had one
        held = 0
        yield scrub(doc) if dirty else doc
    if not good:
        raise DecodeError("no JSON document in the input")


def gnmic_file_batches(
    chunks: Iterable[str | bytes], device: str, rows: CounterRows, every: int = 250_000
) -> Iterator[Batch]:
    """The `counters` batches of a gnmic capture read in blocks, `every` rows at a time (memory stays bounded
    whatever the file's size), then its LLDP neighbours as `links`; `rows` keeps the counts of what was skipped
    and the neighbour state."""
    docs, taken = gnmic_stream(chunks), 0

    def some() -> Iterator[object | None]:
        nonlocal taken
        for doc in itertools.islice(docs, 1024):
            taken += 1
            yield doc

    while True:
        taken = 0
        gnmic_rows(some(), device, rows)
        if len(rows) >= every or taken < 1024:
            yield from rows.to_batches("switch", "import")
            rows.truncate(0)
        if taken < 1024:
            break
    yield from gnmic_links(rows)


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


def source_device(source: str) -> str:
    """The device a gnmic `source` (the target's name, else its address) names: without the port gnmic keeps
    (`leaf-01:57400`, `10.0.0.1:57400`, `[fd00::1]:57400`); a bare IPv6 address has no port to lose."""
    if source.startswith("[") and "]" in source:
        return source[1 : source.index("]")]
    if source.count(":") > 1:
        return source  # `fd00::1`: an IPv6 address, its last group no port
    return _PORT_SUFFIX.sub("", source)


def _keyed(path: str, tags: Mapping[str, Any]) -> Elems:
    """An event's path with the list keys gnmic moved into its tags (`interface_name` -> interface[name])."""
    elems: Elems = []
    for name, keys in _path(path):
        short = name.rpartition(":")[2]
        found = dict(keys)
        for tag, tv in tags.items():
            if tag not in _NOT_KEYS and str(tag).startswith(short + "_"):
                found[str(tag)[len(short) + 1 :]] = str(tv)
        elems.append((name, found))
    return elems


#: (tags, target) -> path -> (the path's elements, where its scalar values go: None to read value by value).
#: A capture repeats the same series every poll: parsing and resolving a path costs ten times reading its value,
#: and a path string (its hash kept by Python) is the cheapest key per value.
_Series = tuple[Elems, "_Target | None"]
_SERIES: dict[tuple[tuple[tuple[str, Any], ...], str], _Book] = {}
_SERIES_MAX = 1 << 16  # tag sets (interfaces x queues x devices) before the cache starts over
_NUMBERS = frozenset({int, float})  # not bool: `reading` reads a bool as no number


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a path's scalar values go, prepared once: the row's port, priority, metric and raw name."""

    port: str
    priority: int
    metric: str  # the catalog's name, or `unknown:<raw>`
    raw_name: str
    known: str | None  # the catalog's name (None: unknown), as `reading` takes it
    factor: float
    plain: bool  # a number read as number x factor (no word to parse, no zero that means "not known")
    instance: str  # a SONiC database instance that is a device of its own (`asic0`: `instance_device`), or ""


def _series(path: str, tags: Mapping[str, Any], target: str) -> _Series:
    """A path under an event's tags, resolved once per (path, list keys, target): the same interface's and queue's
    paths recur on every switch, whose `source` tags differ."""
    keys = tuple((str(tag), str(tv)) for tag, tv in tags.items() if tag not in _NOT_KEYS)
    return _resolved(str(path), keys, target)


@functools.lru_cache(maxsize=1 << 16)
def _resolved(path: str, keys: tuple[tuple[str, str], ...], target: str) -> _Series:
    elems = _keyed(path, dict(keys))
    if _is_lldp(elems):
        return elems, None
    r = resolve_elems(elems, target)
    metric = r.metric if r.metric is not None else UNKNOWN_PREFIX + r.raw_name
    plain = r.metric not in POSITIVE_ONLY
    return elems, _Target(r.port, r.priority, metric, r.raw_name, r.metric, r.factor, plain, r.instance)


@dataclass(frozen=True, slots=True)
class _Template:
    """The columns an event's values fill, prepared once per (tag set, the event's paths in order) where every
    path is a plain number's: a poll's event then lands as a few list extends instead of a loop over its values."""

    port: list[str]
    priority: list[int]
    metric: list[str]
    raw_name: list[str]
    factors: tuple[float, ...] | None  # None: every factor is 1


@dataclass(slots=True)
class _Book:
    """What one tag set's events resolve to: per path, and per event shape (its paths in order; None where a
    path of it is no plain number, so its values are read one by one)."""

    paths: dict[str, _Series]
    templates: dict[tuple[str, ...], _Template | None]


def _paths_of(tags: Mapping[str, Any], target: str) -> _Book:
    """The cache of one tag set (a fresh one, uncached, when a tag value is a list or an object)."""
    try:
        key = (tuple(tags.items()), target)
        hit = _SERIES.get(key)
    except TypeError:
        return _Book({}, {})
    if hit is None:
        if len(_SERIES) >= _SERIES_MAX:
            _SERIES.clear()
        hit = _SERIES[key] = _Book({}, {})
    return hit


def _template(book: _Book, shape: tuple[str, ...], tags: Mapping[str, Any], target: str) -> _Template | None:
    """The columns of an event whose values are at the paths `shape`, None where one of them is not a plain number
    (LLDP state, a speed as a word, a metric whose zero means "not known")."""
    targets = []
    for path in shape:
        hit = book.paths.get(path)
        if hit is None:
            hit = book.paths[path] = _series(str(path), tags, target)
        if hit[1] is None or not hit[1].plain or hit[1].instance:
            return None  # (values of a multi-ASIC switch's instances land on their ASICs, one by one)
        targets.append(hit[1])
    factors = tuple(t.factor for t in targets)
    return _Template(
        [t.port for t in targets],
        [t.priority for t in targets],
        [t.metric for t in targets],
        [t.raw_name for t in targets],
        None if all(f == 1.0 for f in factors) else factors,
    )


@functools.lru_cache(maxsize=4096)
def _source_device(source: str) -> str:
    return source_device(source)


def _event(ev: Mapping[str, Any], rows: CounterRows, device: str) -> None:
    """One gnmic event: `values` paths (list keys in `tags`)."""
    tags = ev.get("tags") or {}
    if not isinstance(tags, dict) or not isinstance(ev.get("values"), dict):
        raise ValueError("event without tags/values objects")
    ts = _timestamp(ev["timestamp"])
    dev = device or _source_device(str(tags.get("source", "")))
    if not dev:
        raise ValueError("event without tags.source (give --device)")
    target = str(tags.get("target", ""))
    book = _paths_of(tags, target)
    values = ev["values"]
    shape = tuple(values)
    tpl = book.templates[shape] if shape in book.templates else book.templates.setdefault(
        shape, _template(book, shape, tags, target))  # fmt: skip
    if tpl is not None:
        numbers = list(values.values())
        if set(map(type, numbers)) <= _NUMBERS:  # every value a number: the event lands as its template says
            n = len(numbers)
            rows.value.extend(
                map(float, numbers)
                if tpl.factors is None
                else [float(v * f) for v, f in zip(numbers, tpl.factors, strict=True)]
            )
            rows.ts.extend([ts] * n)
            rows.device.extend([dev] * n)
            rows.port.extend(tpl.port)
            rows.priority.extend(tpl.priority)
            rows.metric.extend(tpl.metric)
            rows.raw_name.extend(tpl.raw_name)
            return
    paths = book.paths
    # the columns' appends bound once per event: this loop runs for every value of a capture
    at, port, prio, metric, number, raw, device_of = (
        rows.ts.append, rows.port.append, rows.priority.append, rows.metric.append, rows.value.append,
        rows.raw_name.append, rows.device.append)  # fmt: skip
    for path, value in values.items():
        hit = paths.get(path)
        if hit is None:
            hit = paths[path] = _series(str(path), tags, target)
        elems, r = hit
        kind = type(value)
        if r is None or kind is dict or kind is list:
            for extra, leaf in _leaves(value):
                add_value(rows, ts, dev, elems + extra, leaf, target)
            continue
        if r.plain and (kind is int or kind is float):  # the common case, read as `reading` reads it
            x = float(value * r.factor)
        else:
            read = reading(r.known, value, r.factor)
            if read is None:
                rows.nonnumeric += 1
                continue
            x = read
        at(ts)
        port(r.port)
        prio(r.priority)
        metric(r.metric)
        number(x)
        raw(r.raw_name)
        device_of(instance_device(dev, r.instance) if r.instance else dev)


def _json_format(doc: Mapping[str, Any], rows: CounterRows, device: str) -> None:
    """One message of gnmic's default JSON output: `updates: [{Path, values}]` under an optional prefix."""
    ts = _timestamp(doc["timestamp"])
    dev = device or source_device(str(doc.get("source", "")))
    if not dev:
        raise ValueError("message without a source (give --device)")
    target = str(doc.get("target", ""))
    prefix = _path(doc.get("prefix", ""))
    for upd in doc.get("updates") or []:
        keyed = _path(upd.get("Path", ""))
        for _, value in (upd.get("values") or {}).items():
            for extra, leaf in _leaves(value):
                add_value(rows, ts, dev, prefix + keyed + extra, leaf, target)


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
