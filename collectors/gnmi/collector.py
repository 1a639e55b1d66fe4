"""gNMI collector: Subscribe STREAM/SAMPLE to switches, decode Notifications straight into `counters` Batches.

Per target (one switch) the collector opens one Subscribe stream per gNMI `target` name its paths use
(SONiC wants `COUNTERS_DB` in the prefix, OpenConfig paths want none), each a list of SAMPLE
subscriptions: 1 s for PFC/ECN/queue/watermark paths and 10 s for the rest unless the path says
otherwise. A stream that fails or stalls is reopened with bounded exponential backoff (with jitter),
and `health()` / `GnmiMetrics` tell connected (down since when), last update, errors and reconnects per target.

Paths -> catalog (`rocescope.catalog.resolve`), by shape, whatever the vendor claims:

* SONiC COUNTERS_DB virtual paths (target `*_DB`, or a first element COUNTERS / *_WATERMARKS / RATES):
  the last element is the SAI field (vendor `sonic_sai`), the one before it the object key:
  `Ethernet68` (port) or `Ethernet68:3` (port, queue/PG index). Values come as JSON objects
  (`COUNTERS/Ethernet68` -> `{"SAI_PORT_STAT_...": "12"}`), flattened here, or as leaves.
* OpenConfig `/interfaces/interface[name=X]/...` and `/qos/interfaces/interface[interface-id=X]/
  output/queues/queue[name=Q]/...` (vendor `openconfig`), SR Linux `/interface[name=X]/...` and
  `/qos/interfaces/interface[interface-id=X]/...` (vendor `srlinux`): the path below the interface
  (or queue) list entry is the catalog name; a per-priority metric takes its index from the list key
  (`queue[name=3]`, `pfc-priority[index=3]`). Module prefixes are ignored; JSON lists are keyed by
  their `name`/`index`/`interface-id` member.
* Anything else is KEPT, as the NIC collector keeps unknown names: metric `raw:<name>`, raw_name
  `<name>`, where the name is the SAI field (SONiC), the path below the interface or queue entry
  (OpenConfig, SR Linux) or the whole path with its keys; `keep_unknown=False` drops them.

Decoding is columnar: the stream delivers SubscribeResponse bytes (no per-message Python objects
beyond protobuf's own), each update's path resolves through a per-prefix cache keyed by the path's
serialized bytes (a canonical form that costs one C call, unlike building the string), and a row
is three appends (resolution code, value, timestamp); a flush gathers port/priority/metric/raw
columns from the resolution table with numpy into dictionary-encoded Arrow arrays. Enum strings a
catalog metric needs become numbers (UP/DOWN, true/false -> 1/0); other text values are skipped
and counted. A malformed response or update is skipped, counted and logged (first few per target),
and never stops the stream.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge

from rocescope import catalog
from rocescope.collectors.common.config import load_entries
from rocescope.collectors.common.json_text import may_hold_surrogates, scrub
from rocescope.collectors.gnmi.proto import pb
from rocescope.errors import ConfigError, DecodeError
from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.metrics import SelfMetrics
from rocescope.pipeline.transport import Producer

__all__ = [
    "DEFAULT_PATHS",
    "UNKNOWN_PREFIX",
    "GnmiCollector",
    "GnmiDecoder",
    "GnmiMetrics",
    "GnmiPath",
    "GnmiTarget",
    "TargetHealth",
    "default_interval",
    "load_targets",
    "parse_path",
    "path_elems",
    "path_str",
    "resolve_elems",
]

log = logging.getLogger(__name__)

#: Metric of a path the catalog does not know: `raw:<name>` (the NIC collector's convention).
UNKNOWN_PREFIX = "raw:"
_ROLE = "switch"
_SOURCE = "gnmi"
_SUBSCRIBE = "/gnmi.gNMI/Subscribe"
_MAX_JSON_DEPTH = 64
_CACHE_LIMIT = 200_000  # resolutions kept per decoder; past it the caches start afresh at the next flush
_LOGGED_PROBLEMS = 5  # malformed-data warnings per target; the rest go to debug (all are counted)

Elem = tuple[str, Mapping[str, str]]
_NO_KEYS: Mapping[str, str] = {}

# --- paths ---------------------------------------------------------------------------------------


def parse_path(text: str, target: str = "", origin: str = "") -> Any:
    """`/interfaces/interface[name=Ethernet0]/state` (or `COUNTERS/Ethernet*`) as a gnmi.Path.

    Key values may hold `/` (`name=ethernet-1/1`); `\\]` and `\\\\` escape inside them. Raises ValueError.
    """
    elems: list[tuple[str, dict[str, str]]] = []
    i, n = 0, len(text)
    name: list[str] = []
    keys: dict[str, str] = {}

    def close() -> None:
        if name or keys:
            if not name:
                raise ValueError(f"path {text!r}: a key without an element name")
            elems.append(("".join(name), dict(keys)))
        name.clear()
        keys.clear()

    while i < n:
        ch = text[i]
        if ch == "/":
            close()
            i += 1
        elif ch == "[":
            end = i + 1
            buf: list[str] = []
            while end < n and text[end] != "]":
                if text[end] == "\\" and end + 1 < n:
                    end += 1
                buf.append(text[end])
                end += 1
            if end >= n:
                raise ValueError(f"path {text!r}: unclosed `[`")
            k, sep, v = "".join(buf).partition("=")
            if not sep or not k:
                raise ValueError(f"path {text!r}: key {''.join(buf)!r} is not NAME=VALUE")
            keys[k] = v
            i = end + 1
        else:
            if keys:
                raise ValueError(f"path {text!r}: text after a key in one element")
            name.append(ch)
            i += 1
    close()
    path = pb.Path(origin=origin, target=target)
    for nm, kv in elems:
        elem = path.elem.add(name=nm)
        for k, v in kv.items():
            elem.key[k] = v
    return path


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("]", "\\]")


def elems_str(elems: Iterable[Elem]) -> str:
    """`/a/b[k=v]/c`; keys sorted so one path has one spelling."""
    parts = []
    for name, keys in elems:
        parts.append(name + "".join(f"[{k}={_escape(keys[k])}]" for k in sorted(keys)))
    return "/" + "/".join(parts)


def path_elems(path: Any) -> list[Elem]:
    """(name, keys) of a gnmi.Path; the deprecated `element` strings when it has no `elem`."""
    if len(path.elem):
        return [(e.name, dict(e.key)) for e in path.elem]
    return [(name, _NO_KEYS) for name in path.element]


def path_str(path: Any) -> str:
    """A gnmi.Path as text, with `target:` / `origin:` in front when set (for logs and raw names)."""
    head = "".join(f"{p}:" for p in (path.target, path.origin) if p)
    return head + elems_str(path_elems(path))


# --- resolution ------------------------------------------------------------------------------------

_SONIC_TABLES = frozenset(
    {"COUNTERS", "PERIODIC_WATERMARKS", "USER_WATERMARKS", "PERSISTENT_WATERMARKS", "RATES", "COUNTERS_DB"}
)
_LIST_KEYS = ("name", "index", "interface-id", "queue-name", "id")
_TRAILING_INT = re.compile(r"(\d{1,3})$")
_BOOL_STATES: Mapping[str, float] = {
    "up": 1.0,
    "true": 1.0,
    "down": 0.0,
    "false": 0.0,
    "lower_layer_down": 0.0,
    "not_present": 0.0,
    "dormant": 0.0,
}


@dataclass(frozen=True)
class Resolved:
    """Where one path's values go: port, priority (-1 none), metric (None: unknown), raw name, factor."""

    port: str
    priority: int
    metric: str | None
    raw_name: str
    factor: float = 1.0


def _index_of(text: str) -> int:
    """A list key as a priority/queue index: its trailing number (0..127), else -1."""
    m = _TRAILING_INT.search(text)
    if m is None:
        return -1
    value = int(m.group(1))
    return value if value < 128 else -1


def _strip(name: str) -> str:
    return name.rpartition(":")[2] if ":" in name else name


def _catalog(vendor: str, name: str) -> tuple[str, int, float] | None:
    hit = catalog.resolve(vendor, name)
    return None if hit is None else (hit[0], hit[1], catalog.scale(vendor, name))


def is_sonic(target: str, elems: Sequence[Elem]) -> bool:
    """SONiC's COUNTERS_DB virtual paths (their element names hold `:` that is not a module prefix)."""
    return target.endswith("_DB") or (bool(elems) and elems[0][0] in _SONIC_TABLES)


def _resolve_sonic(elems: Sequence[Elem]) -> Resolved:
    names = [name for name, _ in elems]
    if len(names) >= 2 and names[-1] == names[-2]:  # a field path answered with {"FIELD": value}
        names.pop()
    field_name = names[-1] if names else ""
    key = names[-2] if len(names) >= 2 else ""
    parts = key.split(":")
    port, prio, odd = parts[0], -1, parts[1:]
    if odd and odd[0].isascii() and odd[0].isdigit() and len(odd[0]) <= 3 and int(odd[0]) < 128:
        prio = int(odd.pop(0))
    raw = field_name if not odd else ":".join(odd) + "/" + field_name
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


def resolve_elems(
    elems: Sequence[Elem], target: str = "", vendors: Sequence[str] = ("openconfig", "srlinux")
) -> Resolved:
    """Map a full path (prefix + path [+ JSON members]) to (port, priority, metric, raw name)."""
    if is_sonic(target, elems):
        return _resolve_sonic(elems)
    names = [_strip(name) for name, _ in elems]
    port = ""
    anchor = -1  # elements [anchor:] form the catalog name
    order: Sequence[str] = vendors
    index_from = 0
    if names[:2] == ["interfaces", "interface"]:
        port, anchor, order, index_from = elems[1][1].get("name", ""), 2, ("openconfig",), 2
    elif names[:1] == ["interface"]:
        port, anchor, order, index_from = elems[0][1].get("name", ""), 1, ("srlinux",), 1
    elif names[:3] == ["qos", "interfaces", "interface"]:
        keys = elems[2][1]
        port = keys.get("interface-id") or keys.get("name") or ""
        index_from = 3
        anchor = 6 if names[3:6] == ["output", "queues", "queue"] else 3
    if anchor < 0 or len(names) <= anchor:
        full = elems_str(elems)
        return Resolved(port, -1, None, full if not port else elems_str((_strip(n), _NO_KEYS) for n, _ in elems))
    rest = "/".join(names[anchor:])
    for vendor in order:
        hit = _catalog(vendor, rest)
        if hit is not None:
            metric, prio, factor = hit
            if prio < 0 and catalog.METRICS_BY_NAME[metric].per_priority:
                prio = _list_index(elems[index_from:])
            return Resolved(port, prio, metric, rest, factor)
    return Resolved(port, -1, None, rest)


# --- values --------------------------------------------------------------------------------------


def _number(text: str | bytes) -> float | None:
    """A numeric string (SONiC and JSON_IETF uint64 come as text) or a known state word, else None."""
    try:
        return float(text)
    except ValueError:
        word = text.decode(errors="replace") if isinstance(text, bytes) else text
        return _BOOL_STATES.get(word.strip().lower())


def _scalar(value: object) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return _number(value)
    return None


JsonToken = str | tuple[str, tuple[tuple[str, str], ...]]


def _flatten(doc: object) -> Iterator[tuple[tuple[JsonToken, ...], object]]:
    """(member tokens, scalar) of a JSON document; list entries become keyed tokens `name[key=value]`."""
    stack: list[tuple[tuple[JsonToken, ...], object]] = [((), doc)]
    while stack:
        toks, obj = stack.pop()
        if len(toks) > _MAX_JSON_DEPTH:
            raise DecodeError(f"JSON value nested deeper than {_MAX_JSON_DEPTH}")
        if isinstance(obj, dict):
            for k, v in obj.items():
                stack.append(((*toks, str(k)), v))
        elif isinstance(obj, list):
            for item in obj:
                if not isinstance(item, dict) or not toks:
                    continue  # leaf-lists (or a bare list) carry no counter we know
                key = next((k for k in _LIST_KEYS if k in item and not isinstance(item[k], dict | list)), None)
                if key is None:
                    key = next((k for k, v in item.items() if not isinstance(v, dict | list)), None)
                last = toks[-1]
                name = last if isinstance(last, str) else last[0]
                token: JsonToken = (name, ((key, str(item[key])),)) if key is not None else name
                stack.append(((*toks[:-1], token), item))
        else:
            yield toks, obj


def _token_elem(token: JsonToken) -> Elem:
    if isinstance(token, str):
        return token, _NO_KEYS
    return token[0], dict(token[1])


# --- the decoder ---------------------------------------------------------------------------------

_NUMERIC = frozenset({"uint_val", "int_val", "double_val", "float_val"})
_JSON = frozenset({"json_ietf_val", "json_val"})
_TEXT = frozenset({"string_val", "ascii_val"})
_Hit = tuple[int, float]  # (resolution code, factor)
_UNRESOLVED: _Hit = (-1, 0.0)  # a path not resolved yet (None: resolved, unknown and dropped)


class _PathInfo:
    """One (prefix, path) pair: its leaf resolution and, for JSON objects, its members' resolutions."""

    __slots__ = ("elems", "leaf", "members", "target")

    def __init__(self, target: str, elems: list[Elem]) -> None:
        self.target = target
        self.elems = elems
        self.leaf: _Hit | None = _UNRESOLVED
        self.members: dict[tuple[JsonToken, ...], _Hit | None] = {}


@dataclass
class DecodeStats:
    """What one decoder has seen (cumulative)."""

    responses: int = 0
    notifications: int = 0
    updates: int = 0
    values: int = 0
    unknown: int = 0
    nonnumeric: int = 0
    malformed: int = 0
    deletes: int = 0
    syncs: int = 0
    errors: int = 0


class GnmiDecoder:
    """SubscribeResponse bytes (or messages) of one device -> columns -> `counters` Batches."""

    def __init__(
        self,
        device: str,
        keep_unknown: bool = True,
        vendors: Sequence[str] = ("openconfig", "srlinux"),
        on_problem: Callable[[str], None] | None = None,
    ) -> None:
        self.device = device
        self.keep_unknown = keep_unknown
        self.vendors = tuple(vendors)
        self.stats = DecodeStats()
        self.on_problem = on_problem
        self._unknown_paths: set[str] = set()
        self._reset_cache()
        self._codes: list[int] = []
        self._values: list[float] = []
        self._ts: list[int] = []

    def _reset_cache(self) -> None:
        self._by_prefix: dict[bytes, tuple[Any, dict[bytes, _PathInfo]]] = {}
        self._res: dict[tuple[str, int, str, str], int] = {}
        self._r_port: list[int] = []
        self._r_prio: list[int] = []
        self._r_metric: list[int] = []
        self._r_raw: list[int] = []
        self._ports: dict[str, int] = {}
        self._metrics: dict[str, int] = {}
        self._raws: dict[str, int] = {}

    @property
    def pending(self) -> int:
        """Rows decoded and not flushed yet."""
        return len(self._codes)

    # --- input
    def feed(self, data: bytes, now_ns: int | None = None) -> int:
        """One serialized SubscribeResponse; rows added. Raises DecodeError when it does not parse."""
        try:
            resp = pb.SubscribeResponse.FromString(data)
        except Exception as exc:  # protobuf's DecodeError (and friends): the message is not gNMI
            self.stats.malformed += 1
            raise DecodeError(f"{self.device}: not a gNMI SubscribeResponse ({len(data)} bytes): {exc}") from exc
        return self.add_response(resp, now_ns)

    def add_response(self, resp: Any, now_ns: int | None = None) -> int:
        """One SubscribeResponse message: a notification's rows are added; sync is counted; rows added."""
        self.stats.responses += 1
        kind = resp.WhichOneof("response")
        if kind == "update":
            return self.add_notification(resp.update, now_ns)
        if kind == "sync_response":
            self.stats.syncs += 1
        elif kind == "error":
            self.stats.errors += 1
            self._problem(f"target sent an error: code {resp.error.code}: {resp.error.message[:200]}")
        return 0

    def add_notification(self, n: Any, now_ns: int | None = None) -> int:
        """Rows of one Notification (its timestamp, or `now_ns`/now when it has none)."""
        self.stats.notifications += 1
        ts = n.timestamp
        if ts <= 0:
            ts = now_ns if now_ns is not None else time.time_ns()
        if len(n.delete):
            self.stats.deletes += len(n.delete)
        prefix = n.prefix
        pkey = prefix.SerializeToString()
        entry = self._by_prefix.get(pkey)
        if entry is None:
            entry = self._by_prefix[pkey] = (prefix, {})
        paths = entry[1]
        codes, values, stamps = self._codes, self._values, self._ts
        before = len(codes)
        updates = 0
        for u in n.update:
            updates += 1
            try:
                path = u.path
                key = path.SerializeToString()
                info = paths.get(key)
                if info is None:
                    info = self._info(entry[0], path, paths, key)
                v = u.val
                kind = v.WhichOneof("value")
                if kind in _NUMERIC:
                    x: float | None = float(getattr(v, kind))
                elif kind in _JSON:
                    raw = getattr(v, kind)
                    try:
                        x = float(raw)
                    except ValueError:
                        x = self._json(info, raw, ts)
                        if x is None:
                            continue  # an object (its members are added) or text (counted)
                elif kind in _TEXT:
                    x = _number(getattr(v, kind))
                elif kind == "bool_val":
                    x = 1.0 if v.bool_val else 0.0
                elif kind == "decimal_val":
                    x = v.decimal_val.digits / 10.0**v.decimal_val.precision
                elif kind is None:
                    self._problem(f"update of {elems_str(info.elems)} has no value")
                    continue
                else:
                    x = None
                if x is None:
                    self.stats.nonnumeric += 1
                    continue
                hit = info.leaf
                if hit is _UNRESOLVED:
                    hit = info.leaf = self._hit(resolve_elems(info.elems, info.target, self.vendors))
                if hit is None:
                    continue
                codes.append(hit[0])
                values.append(x * hit[1])
                stamps.append(ts)
            except Exception as exc:  # one bad update (bad JSON, absurd number...) never stops the others
                self._problem(f"skipped an update: {type(exc).__name__}: {str(exc)[:200]}")
        self.stats.updates += updates
        added = len(codes) - before
        self.stats.values += added
        return added

    def _info(self, prefix: Any, path: Any, paths: dict[bytes, _PathInfo], key: bytes) -> _PathInfo:
        target = path.target or prefix.target
        info = _PathInfo(target, path_elems(prefix) + path_elems(path))
        if len(paths) < _CACHE_LIMIT:
            paths[key] = info
        return info

    def _json(self, info: _PathInfo, raw: bytes, ts: int) -> float | None:
        """A JSON value: a number (or state word) is returned; an object's members are added as rows here and
        None returned, as for text (counted)."""
        if raw[:1] == b'"' and raw[-1:] == b'"' and len(raw) >= 2:
            x = _number(raw[1:-1])
            if x is not None:
                return x
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise DecodeError(f"bad JSON at {elems_str(info.elems)}: {exc}") from None
        if may_hold_surrogates(raw):
            doc = scrub(doc)
        if not isinstance(doc, dict | list):
            x = _scalar(doc)
            if x is None:
                self.stats.nonnumeric += 1
            return x
        members = info.members
        sonic = is_sonic(info.target, info.elems)
        for toks, value in _flatten(doc):
            x = _scalar(value)
            if x is None:
                self.stats.nonnumeric += 1
                continue
            hit = members.get(toks, _UNRESOLVED)
            if hit is _UNRESOLVED:
                extra = [_token_elem(t) for t in toks]
                if not sonic:
                    extra = [(_strip(name), keys) for name, keys in extra]
                hit = self._hit(resolve_elems(info.elems + extra, info.target, self.vendors))
                if len(members) < _CACHE_LIMIT:
                    members[toks] = hit
            if hit is None:
                continue
            self._codes.append(hit[0])
            self._values.append(x * hit[1])
            self._ts.append(ts)
        return None

    def _hit(self, r: Resolved) -> _Hit | None:
        metric = r.metric
        if metric is None:
            self.stats.unknown += 1
            if len(self._unknown_paths) < 1000 and r.raw_name not in self._unknown_paths:
                self._unknown_paths.add(r.raw_name)
                log.debug("gnmi %s: unknown path %s (port %r) kept as %s", self.device, r.raw_name, r.port, metric)
            if not self.keep_unknown:
                return None
            metric = UNKNOWN_PREFIX + r.raw_name
        rkey = (r.port, r.priority, metric, r.raw_name)
        code = self._res.get(rkey)
        if code is None:
            code = self._res[rkey] = len(self._r_port)
            self._r_port.append(self._ports.setdefault(r.port, len(self._ports)))
            self._r_prio.append(r.priority)
            self._r_metric.append(self._metrics.setdefault(metric, len(self._metrics)))
            self._r_raw.append(self._raws.setdefault(r.raw_name, len(self._raws)))
        return code, r.factor

    def _problem(self, what: str) -> None:
        self.stats.malformed += 1
        if self.on_problem is not None:
            self.on_problem(what)
        elif self.stats.malformed <= _LOGGED_PROBLEMS:
            log.warning("gnmi %s: %s", self.device, what)
        else:
            log.debug("gnmi %s: %s", self.device, what)

    @property
    def unknown_paths(self) -> set[str]:
        """Distinct unknown names seen (the first thousand)."""
        return set(self._unknown_paths)

    # --- output
    def flush(self) -> Batch | None:
        """The pending rows as one `counters` Batch (None when there are none)."""
        n = len(self._codes)
        if n == 0:
            return None
        codes = np.array(self._codes, dtype=np.int64)
        ts = np.array(self._ts, dtype=np.int64)
        values = np.array(self._values, dtype=np.float64)
        self._codes, self._values, self._ts = [], [], []

        def column(table: list[int], names: dict[str, int]) -> pa.DictionaryArray:
            indices = np.asarray(table, dtype=np.int32)[codes]
            return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), pa.array(list(names), pa.string()))

        table = pa.table(
            {
                "ts": pa.array(ts, pa.int64()).view(pa.timestamp("ns", tz="UTC")),
                "device": _constant(self.device, n),
                "role": _constant(_ROLE, n),
                "port": column(self._r_port, self._ports),
                "priority": pa.array(np.asarray(self._r_prio, dtype=np.int8)[codes], pa.int8()),
                "metric": column(self._r_metric, self._metrics),
                "value": pa.array(values, pa.float64()),
                "source": _constant(_SOURCE, n),
                "raw_name": column(self._r_raw, self._raws),
            }
        )
        batch = Batch("counters", conform("counters", table), key=self.device)
        if len(self._res) > _CACHE_LIMIT:  # garbage paths must not grow memory without bound
            self._reset_cache()
        return batch


def _constant(value: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], pa.string()))


# --- configuration -------------------------------------------------------------------------------

_FAST = re.compile(r"pfc|ecn|queue|watermark|prioritygroup", re.IGNORECASE)
FAST_INTERVAL_S = 1.0
SLOW_INTERVAL_S = 10.0
_ENCODINGS = {"json": 0, "bytes": 1, "proto": 2, "ascii": 3, "json_ietf": 4}


def default_interval(path: str) -> float:
    """1 s for PFC/ECN/queue/watermark paths (microbursts and pause storms live there), 10 s otherwise."""
    return FAST_INTERVAL_S if _FAST.search(path) else SLOW_INTERVAL_S


@dataclass(frozen=True)
class GnmiPath:
    """One SAMPLE subscription: path text, gNMI target name (`COUNTERS_DB` for SONiC), origin, interval."""

    path: str
    target: str = ""
    origin: str = ""
    interval_s: float | None = None

    @property
    def interval(self) -> float:
        return self.interval_s if self.interval_s is not None else default_interval(self.path)


def _sonic_paths(priorities: Sequence[int]) -> tuple[GnmiPath, ...]:
    pfc = [
        f"COUNTERS/Ethernet*/SAI_PORT_STAT_PFC_{p}_{what}"
        for p in priorities
        for what in ("RX_PKTS", "TX_PKTS", "RX_PAUSE_DURATION_US", "TX_PAUSE_DURATION_US")
    ]
    groups = ("Queues", "PriorityGroups", "Pfcwd")
    paths = ["COUNTERS/Ethernet*", *(f"COUNTERS/Ethernet*/{g}" for g in groups), *pfc]
    return tuple(GnmiPath(p, target="COUNTERS_DB") for p in paths)


#: Paths subscribed when a target lists none, by `vendor`.
DEFAULT_PATHS: Mapping[str, tuple[GnmiPath, ...]] = {
    "sonic": _sonic_paths((3, 4)),
    "openconfig": tuple(
        GnmiPath(p)
        for p in (
            "/interfaces/interface/state/counters",
            "/interfaces/interface/state/oper-status",
            "/interfaces/interface/ethernet/state/counters",
            "/qos/interfaces/interface/output/queues/queue/state",
        )
    ),
    "srlinux": tuple(
        GnmiPath(p)
        for p in (
            "/interface/statistics",
            "/interface/oper-state",
            "/interface/ethernet/statistics",
            "/qos/interfaces/interface/pfc",
            "/qos/interfaces/interface/output/queues/queue/queue-depth",
        )
    ),
}


@dataclass(frozen=True)
class GnmiTarget:
    """One switch: `name` is the `device` column, `address` host:port of its gNMI server."""

    name: str
    address: str
    vendor: str = "openconfig"
    paths: tuple[GnmiPath, ...] = ()
    tls: bool = False
    ca_cert: str | None = None  # PEM file; None with tls: the system's roots
    client_cert: str | None = None
    client_key: str | None = None
    server_name: str | None = None  # TLS name to check instead of the address's host
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    encoding: str = "json_ietf"
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.name or not self.address:
            raise ValueError("a gNMI target needs a name and an address")
        host, sep, port = self.address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{self.name}: address {self.address!r} is not host:port")
        if self.vendor not in DEFAULT_PATHS:
            raise ValueError(f"{self.name}: vendor must be one of {sorted(DEFAULT_PATHS)}, not {self.vendor!r}")
        if self.encoding not in _ENCODINGS:
            raise ValueError(f"{self.name}: encoding must be one of {sorted(_ENCODINGS)}, not {self.encoding!r}")
        if (self.username is None) != (self.password is None):
            raise ValueError(f"{self.name}: give both username and password, or neither")
        if bool(self.client_cert) != bool(self.client_key):
            raise ValueError(f"{self.name}: client_cert and client_key go together")
        if self.timeout_s <= 0:
            raise ValueError(f"{self.name}: timeout_s must be > 0")
        for p in self.subscriptions:
            parse_path(p.path)  # raises ValueError naming the path
            if p.interval <= 0:
                raise ValueError(f"{self.name}: interval of {p.path} must be > 0")

    @property
    def subscriptions(self) -> tuple[GnmiPath, ...]:
        return self.paths or DEFAULT_PATHS[self.vendor]

    def groups(self) -> dict[str, list[GnmiPath]]:
        """Subscriptions by gNMI target name: one Subscribe stream each (a prefix has one target)."""
        out: dict[str, list[GnmiPath]] = {}
        for p in self.subscriptions:
            out.setdefault(p.target, []).append(p)
        return out

    @classmethod
    def from_mapping(cls, spec: Mapping[str, object]) -> GnmiTarget:
        """A target from a config entry; raises ValueError naming what is wrong."""
        known = {
            *("name", "address", "vendor", "paths", "tls", "ca_cert", "client_cert", "client_key"),
            *("server_name", "username", "password", "encoding", "timeout_s", "target", "pfc_priorities"),
        }
        who = spec.get("name")
        extra = sorted(set(spec) - known)
        if extra:
            raise ValueError(f"gNMI target {who!r}: unknown key(s) {extra}")
        vendor = str(spec.get("vendor", "openconfig"))
        default_target = str(spec.get("target", "COUNTERS_DB" if vendor == "sonic" else ""))
        paths: list[GnmiPath] = []
        raw_paths = spec.get("paths")
        if raw_paths is not None:
            if not isinstance(raw_paths, list):
                raise ValueError(f"gNMI target {who!r}: paths must be a list")
            for item in raw_paths:
                if isinstance(item, str):
                    paths.append(GnmiPath(item, default_target))
                elif isinstance(item, dict) and isinstance(item.get("path"), str):
                    bad = sorted(set(item) - {"path", "target", "origin", "interval"})
                    if bad:
                        raise ValueError(f"gNMI target {who!r}: path {item['path']!r}: unknown key(s) {bad}")
                    interval = item.get("interval")
                    if interval is not None and (not isinstance(interval, int | float) or isinstance(interval, bool)):
                        raise ValueError(f"gNMI target {who!r}: interval of {item['path']!r} must be seconds")
                    paths.append(
                        GnmiPath(
                            str(item["path"]),
                            str(item.get("target", default_target)),
                            str(item.get("origin", "")),
                            None if interval is None else float(interval),
                        )
                    )
                else:
                    raise ValueError(f"gNMI target {who!r}: a path is a string or {{path, target, origin, interval}}")
        elif vendor == "sonic" and "pfc_priorities" in spec:
            prios = spec["pfc_priorities"]
            if not isinstance(prios, list) or not all(isinstance(p, int) and 0 <= p <= 7 for p in prios):
                raise ValueError(f"gNMI target {who!r}: pfc_priorities must be a list of 0..7")
            paths = [replace(p, target=default_target) for p in _sonic_paths(prios)]
        elif default_target and vendor in DEFAULT_PATHS:
            paths = [replace(p, target=default_target) for p in DEFAULT_PATHS[vendor]]
        timeout = spec.get("timeout_s", 10.0)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool):
            raise ValueError(f"gNMI target {who!r}: timeout_s must be a number")

        def text(key: str) -> str | None:
            value = spec.get(key)
            return None if value is None else str(value)

        return cls(
            name=str(spec.get("name", "")),
            address=str(spec.get("address", "")),
            vendor=vendor,
            paths=tuple(paths),
            tls=bool(spec.get("tls", False)),
            ca_cert=text("ca_cert"),
            client_cert=text("client_cert"),
            client_key=text("client_key"),
            server_name=text("server_name"),
            username=text("username"),
            password=text("password"),
            encoding=str(spec.get("encoding", "json_ietf")).lower(),
            timeout_s=float(timeout),
        )


def load_targets(path: Path) -> list[GnmiTarget]:
    """Targets from a YAML file (`targets: [{name, address, ...}]`); a value `env:NAME` is read from the
    environment, so passwords stay out of the file. Raises ConfigError naming the entry and the key."""
    targets = load_entries(path, "gNMI targets", "targets", GnmiTarget.from_mapping)
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError(f"gNMI targets {path}: target names must be unique")
    return targets


# --- health and self-metrics ---------------------------------------------------------------------


@dataclass
class TargetHealth:
    """What the collector knows about one target's streams."""

    target: str
    connected: bool = False  # every stream of the target is open
    synced: bool = False  # a sync_response came (the first full sample arrived)
    last_update_ts: float | None = None  # epoch seconds of the last notification
    down_since_ts: float | None = None  # epoch seconds the target's streams were lost (None while connected)
    last_error: str | None = None
    errors: int = 0  # streams that failed (connect, auth, stall, server gone)
    reconnects: int = 0
    values: int = 0
    unknown: int = 0
    malformed: int = 0
    sync_seconds: float | None = None  # from the Subscribe to the first full sample (sync_response)


class GnmiMetrics(SelfMetrics):
    """Self-metrics of one gNMI collector, in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r = self.registry
        t = ["target"]
        self.connected = Gauge("rocescope_gnmi_connected", "1 while the target's streams are open.", t, registry=r)
        self.last_update = Gauge(
            "rocescope_gnmi_last_update_timestamp_seconds", "When the target last sent a notification.", t, registry=r
        )
        self.errors = Counter("rocescope_gnmi_stream_errors", "Streams that failed.", t, registry=r)
        self.sync_seconds = Gauge(
            "rocescope_gnmi_sync_seconds", "From a Subscribe to the target's first full sample.", t, registry=r
        )
        self.reconnects = Counter("rocescope_gnmi_reconnects", "Streams reopened after a failure.", t, registry=r)
        self.responses = Counter("rocescope_gnmi_responses", "SubscribeResponses received.", ["target"], registry=r)
        self.values = Counter("rocescope_gnmi_values", "Values decoded into rows.", ["target"], registry=r)
        self.unknown = Counter(
            "rocescope_gnmi_unknown_paths", "Paths resolved that the catalog does not know.", ["target"], registry=r
        )
        self.nonnumeric = Counter(
            "rocescope_gnmi_nonnumeric_values", "Text or binary values skipped.", ["target"], registry=r
        )
        self.malformed = Counter(
            "rocescope_gnmi_malformed", "Responses or updates skipped as malformed.", ["target"], registry=r
        )
        self.batches = Counter("rocescope_gnmi_batches", "Batches handed to the producer.", registry=r)
        self.publish_errors = Counter("rocescope_gnmi_publish_errors", "Batches the producer refused.", registry=r)


# --- streams -------------------------------------------------------------------------------------


def _read(path: str | None) -> bytes | None:
    return None if path is None else Path(path).read_bytes()


class _Stream:
    """One Subscribe stream of one target (one gNMI target name); runs on its own thread."""

    def __init__(self, owner: GnmiCollector, target: GnmiTarget, gnmi_target: str, paths: Sequence[GnmiPath]):
        self.owner = owner
        self.target = target
        self.paths = list(paths)
        self.gnmi_target = gnmi_target
        self.decoder = GnmiDecoder(target.name, owner.keep_unknown, on_problem=self._problem)
        self.label = target.name if not gnmi_target else f"{target.name}/{gnmi_target}"
        self.request = self._request()
        self.stall_s = max(owner.stall_s, 3 * max(p.interval for p in self.paths))
        self._lock = threading.Lock()
        self._call: Any = None
        self.last_rx = time.monotonic()
        self.open = False
        self._problems = 0
        self._seen = DecodeStats()

    def _request(self) -> Any:
        sub_list = pb.SubscriptionList(
            prefix=pb.Path(target=self.gnmi_target), mode=0, encoding=_ENCODINGS[self.target.encoding]
        )
        for p in self.paths:
            sub = sub_list.subscription.add(mode=2, sample_interval=int(p.interval * 1e9))
            sub.path.CopyFrom(parse_path(p.path, origin=p.origin))
        return pb.SubscribeRequest(subscribe=sub_list)

    def _problem(self, what: str) -> None:
        self._problems += 1
        if self._problems <= _LOGGED_PROBLEMS:
            tail = "" if self._problems < _LOGGED_PROBLEMS else " (further ones are logged at debug)"
            log.warning("gnmi %s: %s%s", self.label, what, tail)
        else:
            log.debug("gnmi %s: %s", self.label, what)

    def _channel(self) -> Any:
        import grpc

        t = self.target
        owner = self.owner
        # grpc retries a refused connect inside one attempt with its own backoff (1 s growing to 120 s), which
        # would hide a restarted target for longer than the collector's bound: use the collector's backoff.
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", 64 << 20),
            ("grpc.initial_reconnect_backoff_ms", max(1, int(owner.backoff_initial_s * 1000))),
            ("grpc.max_reconnect_backoff_ms", max(1, int(owner.backoff_max_s * 1000))),
        ]
        if not t.tls:
            return grpc.insecure_channel(t.address, options=options)
        creds = grpc.ssl_channel_credentials(
            root_certificates=_read(t.ca_cert), private_key=_read(t.client_key), certificate_chain=_read(t.client_cert)
        )
        if t.server_name:
            options.append(("grpc.ssl_target_name_override", t.server_name))
        return grpc.secure_channel(t.address, creds, options=options)

    def cancel(self) -> None:
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()

    def run(self, stop: threading.Event, once: bool = False) -> None:
        """Subscribe until `stop` (or, with `once`, until the first sync); reconnect with backoff."""
        owner = self.owner
        backoff = owner.backoff_initial_s
        attempts = 0
        while not stop.is_set():
            if attempts:
                owner._count_reconnect(self.target.name)
            attempts += 1
            got_data, error = self._attempt(stop, once)
            self.open = False
            owner._stream_state(self.target.name)
            self._ship()
            if stop.is_set() and error is None:
                return
            if error is not None:
                owner._stream_failed(self.target.name, self.label, error)
            if once or stop.is_set():
                return
            if got_data:
                backoff = owner.backoff_initial_s
            delay = min(backoff, owner.backoff_max_s) * random.uniform(0.8, 1.2)  # jitter: no thundering herd
            backoff = min(backoff * 2, owner.backoff_max_s)
            stop.wait(delay)

    def _attempt(self, stop: threading.Event, once: bool) -> tuple[bool, str | None]:
        """One stream: (whether data came, the error that ended it or None)."""
        import grpc

        t = self.target
        got_data = False
        done = threading.Event()

        def requests() -> Iterator[Any]:
            yield self.request
            done.wait()  # the client keeps its side open: some targets end the stream on half-close

        channel = self._channel()
        try:
            ready = grpc.channel_ready_future(channel)
            deadline = time.monotonic() + t.timeout_s
            while True:  # in small steps, so a stop is not held up by a dead address
                try:
                    ready.result(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
                    break
                except grpc.FutureTimeoutError:
                    if stop.is_set():
                        ready.cancel()
                        return False, None
                    if time.monotonic() >= deadline:
                        ready.cancel()
                        return False, f"could not connect to {t.address} within {t.timeout_s:g} s"
            metadata = [("username", t.username), ("password", t.password or "")] if t.username is not None else None
            subscribe = channel.stream_stream(
                _SUBSCRIBE, request_serializer=pb.SubscribeRequest.SerializeToString, response_deserializer=None
            )
            call = subscribe(requests(), metadata=metadata)
            self.owner._subscribed(t.name)
            with self._lock:
                self._call = call
            self.last_rx = self.owner._last_flush[self.label] = time.monotonic()
            try:
                for data in call:
                    self.last_rx = time.monotonic()
                    if not self.open:
                        self.open = True
                        self.owner._stream_state(t.name)
                    got_data = True
                    try:
                        self.decoder.feed(data)
                    except DecodeError as exc:
                        self._problem(str(exc))
                    self._account()
                    if once and self.decoder.stats.syncs:
                        call.cancel()
                        break
                    if self.decoder.pending and (
                        self.decoder.pending >= self.owner.max_rows
                        or time.monotonic() - self.owner._last_flush.get(self.label, 0.0) >= self.owner.flush_s
                    ):
                        self._ship()
            except grpc.RpcError as exc:
                if stop.is_set() or (once and self.decoder.stats.syncs):
                    return got_data, None
                if exc.code() == grpc.StatusCode.CANCELLED and self.owner._stalled.pop(self.label, False):
                    return got_data, f"no data for {self.stall_s:g} s: stream reopened"
                return got_data, f"{exc.code().name}: {exc.details()}"
            if stop.is_set() or once:
                return got_data, None
            return got_data, "the target ended the stream"
        finally:
            done.set()
            with self._lock:
                self._call = None
            channel.close()

    def _account(self) -> None:
        """Move the decoder's new counts into health and self-metrics (per response, not per value)."""
        s, seen, name, m = self.decoder.stats, self._seen, self.target.name, self.owner.metrics
        d_values, d_unknown = s.values - seen.values, s.unknown - seen.unknown
        d_bad, d_text = s.malformed - seen.malformed, s.nonnumeric - seen.nonnumeric
        m.responses.labels(name).inc(s.responses - seen.responses)
        if d_values:
            m.values.labels(name).inc(d_values)
        if d_unknown:
            m.unknown.labels(name).inc(d_unknown)
        if d_bad:
            m.malformed.labels(name).inc(d_bad)
        if d_text:
            m.nonnumeric.labels(name).inc(d_text)
        if s.notifications != seen.notifications or s.syncs != seen.syncs:
            self.owner._updated(name, d_values, d_unknown, d_bad, synced=s.syncs > 0)
        elif d_bad:
            self.owner._updated(name, 0, 0, d_bad, synced=s.syncs > 0, touch=False)
        self._seen = replace(s)

    def _ship(self) -> None:
        batch = self.decoder.flush()
        self.owner._last_flush[self.label] = time.monotonic()
        if batch is not None:
            self.owner._ship(batch)


class GnmiCollector:
    """Streams from many gNMI targets into `counters` Batches, published as they fill.

    `run(stop_event)` streams until the event is set; `collect_once()` takes the first full sample of
    every target (STREAM until its sync_response) and returns the Batches instead of publishing them.
    """

    def __init__(
        self,
        targets: Sequence[GnmiTarget],
        producer: Producer | None = None,
        *,
        keep_unknown: bool = True,
        flush_s: float = 1.0,
        max_rows: int = 100_000,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 60.0,
        stall_s: float = 30.0,
        metrics: GnmiMetrics | None = None,
    ):
        names = [t.name for t in targets]
        if len(set(names)) != len(names):
            raise ValueError("target names must be unique")
        if backoff_initial_s <= 0 or backoff_max_s < backoff_initial_s:
            raise ValueError("backoff wants 0 < backoff_initial_s <= backoff_max_s")
        self.targets = {t.name: t for t in targets}
        self.producer = producer
        self.keep_unknown = keep_unknown
        self.flush_s = flush_s
        self.max_rows = max_rows
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.stall_s = stall_s
        self.metrics = metrics or GnmiMetrics()
        self._lock = threading.Lock()
        self._health = {t.name: TargetHealth(t.name) for t in targets}
        self._subscribed_at: dict[str, float] = {}  # monotonic time of each target's latest Subscribe
        self._streams = [_Stream(self, t, g, ps) for t in targets for g, ps in t.groups().items()]
        self._last_flush: dict[str, float] = {}
        self._stalled: dict[str, bool] = {}
        self._collected: list[Batch] | None = None

    # --- public views
    def health(self) -> dict[str, TargetHealth]:
        """A snapshot of every target's health."""
        with self._lock:
            return {name: replace(h) for name, h in self._health.items()}

    # --- callbacks from streams
    def _stream_state(self, name: str) -> None:
        up = all(s.open for s in self._streams if s.target.name == name)
        with self._lock:
            h = self._health[name]
            h.connected = up
            if up:
                h.down_since_ts = None
            elif h.down_since_ts is None:  # the first attempt or stream that ended: down from now
                h.down_since_ts = time.time()
        self.metrics.connected.labels(name).set(1 if up else 0)

    def _stream_failed(self, name: str, label: str, error: str) -> None:
        with self._lock:
            h = self._health[name]
            h.errors += 1
            first = h.last_error != error
            h.last_error = error
        self.metrics.errors.labels(name).inc()
        if first:
            log.warning("gnmi %s: stream failed: %s; reconnecting with backoff", label, error)
        else:
            log.debug("gnmi %s: stream failed again: %s", label, error)

    def _subscribed(self, name: str) -> None:
        with self._lock:
            self._subscribed_at[name] = time.monotonic()

    def _count_reconnect(self, name: str) -> None:
        with self._lock:
            self._health[name].reconnects += 1
        self.metrics.reconnects.labels(name).inc()

    def _updated(self, name: str, values: int, unknown: int, malformed: int, synced: bool, touch: bool = True) -> None:
        now = time.time()
        with self._lock:
            h = self._health[name]
            h.values += values
            h.unknown += unknown
            h.malformed += malformed
            took = None
            if synced and not h.synced and name in self._subscribed_at:
                took = h.sync_seconds = time.monotonic() - self._subscribed_at[name]
            h.synced = h.synced or synced
            if touch:
                h.last_update_ts = now
                if h.last_error is not None:
                    log.warning("gnmi %s: streaming again", name)
                h.last_error = None
        if took is not None:
            self.metrics.sync_seconds.labels(name).set(took)
        if touch:
            self.metrics.last_update.labels(name).set(now)

    def _ship(self, batch: Batch) -> None:
        if self._collected is not None:
            with self._lock:
                self._collected.append(batch)
            return
        if self.producer is None:
            return
        try:
            self.producer.publish(batch)
            self.metrics.batches.inc()
        except Exception as exc:  # any transport failure: count it, keep streaming
            self.metrics.publish_errors.inc()
            log.warning("gnmi %s: publishing a batch of %d rows failed: %s", batch.key, batch.num_rows, exc)

    # --- the loops
    def _watch(self, stop: threading.Event, threads: Sequence[threading.Thread]) -> None:
        """Cancel streams that went quiet (a half-dead TCP connection never errors) and, on stop, all."""
        while not stop.wait(0.25):
            if not any(t.is_alive() for t in threads):
                return
            now = time.monotonic()
            for s in self._streams:
                if s.open and now - s.last_rx > s.stall_s:
                    self._stalled[s.label] = True
                    s.cancel()
        for s in self._streams:
            s.cancel()

    def run(self, stop_event: threading.Event) -> None:
        """Stream from every target until `stop_event` is set; pending rows are published on the way out."""
        threads = [
            threading.Thread(target=s.run, args=(stop_event,), name=f"gnmi-{s.label}", daemon=True)
            for s in self._streams
        ]
        for t in threads:
            t.start()
        self._watch(stop_event, threads)
        for t in threads:
            t.join()

    def collect_once(self, timeout_s: float = 30.0) -> list[Batch]:
        """The first full sample of every target (STREAM until sync_response), as Batches, not published."""
        self._collected = []
        stop = threading.Event()
        threads = [
            threading.Thread(target=s.run, args=(stop, True), name=f"gnmi-once-{s.label}", daemon=True)
            for s in self._streams
        ]
        for t in threads:
            t.start()
        timer = threading.Timer(timeout_s, stop.set)
        timer.daemon = True
        timer.start()
        try:
            self._watch(stop, threads)
            stop.set()
            for t in threads:
                t.join()
        finally:
            timer.cancel()
        out, self._collected = self._collected, None
        with self._lock:
            for h in self._health.values():
                if not h.synced and h.last_error is None:
                    h.last_error = f"no complete sample within {timeout_s:g} s"
        return out
