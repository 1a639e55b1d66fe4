"""gNMI values -> `counters` rows: which port, priority and metric a path means, and the decoder.

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

Decoding is columnar and dictionary-coded, so it does not go through `CounterRows`: the stream delivers
SubscribeResponse bytes (no per-message Python objects beyond protobuf's own), each update's path
resolves through a per-prefix cache keyed by the path's serialized bytes (a canonical form that costs
one C call, unlike building the string), and a row is three appends (resolution code, value,
timestamp); a flush gathers port/priority/metric/raw columns from the resolution table with numpy into
dictionary-encoded Arrow arrays. Enum strings a catalog metric needs become numbers (UP/DOWN,
true/false -> 1/0); other text values are skipped and counted. A malformed response or update is
skipped, counted and logged (first few per target), and never stops the stream.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from rocescope import catalog
from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.common.rows import constant
from rocescope.collectors.gnmi.paths import NO_KEYS, Elem, elems_str, path_elems
from rocescope.collectors.gnmi.proto import pb
from rocescope.errors import DecodeError
from rocescope.pipeline.batch import Batch, conform

__all__ = ["LOGGED_PROBLEMS", "UNKNOWN_PREFIX", "DecodeStats", "GnmiDecoder", "Resolved", "is_sonic", "resolve_elems"]

log = logging.getLogger(__name__)

#: Metric of a path the catalog does not know: `raw:<name>` (the NIC collector's convention).
UNKNOWN_PREFIX = "raw:"
#: Malformed-data warnings per decoder (or stream); the rest go to debug (all are counted).
LOGGED_PROBLEMS = 5
_ROLE = "switch"
_SOURCE = "gnmi"
_MAX_JSON_DEPTH = 64
_CACHE_LIMIT = 200_000  # resolutions kept per decoder; past it the caches start afresh at the next flush

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
        return Resolved(port, -1, None, full if not port else elems_str((_strip(n), NO_KEYS) for n, _ in elems))
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
        return token, NO_KEYS
    return token[0], dict(token[1])


# --- the decoder ---------------------------------------------------------------------------------

_NUMERIC = frozenset({"uint_val", "int_val", "double_val", "float_val"})
_JSON = frozenset({"json_ietf_val", "json_val"})
_TEXT = frozenset({"string_val", "ascii_val"})
_Hit = tuple[int, float]  # (resolution code, factor)
_UNRESOLVED: _Hit = (-1, 0.0)  # a path not resolved yet (None: resolved, unknown and dropped)


class _PathInfo:
    """One (prefix, path) pair: its leaf resolution and, for JSON objects, its members' resolutions."""

    __slots__ = ("_text", "elems", "leaf", "members", "target")

    def __init__(self, target: str, elems: list[Elem]) -> None:
        self.target = target
        self.elems = elems
        self.leaf: _Hit | None = _UNRESOLVED
        self.members: dict[tuple[JsonToken, ...], _Hit | None] = {}
        self._text: str | None = None

    @property
    def text(self) -> str:
        """The path as text, for messages (built on first use: the hot path never needs it)."""
        if self._text is None:
            self._text = elems_str(self.elems)
        return self._text


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
                    self._problem(f"update of {info.text} has no value")
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
        doc = load_json(raw, f"the value at {info.text}")
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
        elif self.stats.malformed <= LOGGED_PROBLEMS:
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
                "device": constant(self.device, n),
                "role": constant(_ROLE, n),
                "port": column(self._r_port, self._ports),
                "priority": pa.array(np.asarray(self._r_prio, dtype=np.int8)[codes], pa.int8()),
                "metric": column(self._r_metric, self._metrics),
                "value": pa.array(values, pa.float64()),
                "source": constant(_SOURCE, n),
                "raw_name": column(self._r_raw, self._raws),
            }
        )
        batch = Batch("counters", conform("counters", table), key=self.device)
        if len(self._res) > _CACHE_LIMIT:  # garbage paths must not grow memory without bound
            self._reset_cache()
        return batch
