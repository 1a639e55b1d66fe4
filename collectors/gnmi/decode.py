"""gNMI values -> `counters` rows: the decoder (`GnmiDecoder`).

What a path means (port, priority, catalog metric, raw name) is `resolve.resolve_elems`'s job; a path the
catalog does not know is KEPT, as the NIC collector keeps unknown names: metric `raw:<name>`
(`keep_unknown=False` drops them). Values come as leaves or as JSON objects (`COUNTERS/Ethernet68` ->
`{"SAI_PORT_STAT_...": "12"}`), flattened here; JSON lists are keyed by their `name`/`index`/
`interface-id` member.

Decoding is columnar and dictionary-coded, so it does not go through `CounterRows`: the stream delivers
SubscribeResponse bytes (no per-message Python objects beyond protobuf's own), each update's path
resolves through a per-prefix cache keyed by the path's serialized bytes (a canonical form that costs
one C call, unlike building the string), and a row is three appends (resolution code, value,
timestamp); a flush gathers port/priority/metric/raw columns from the resolution table with numpy into
dictionary-encoded Arrow arrays. Words become numbers as `values` says: state words (UP/DOWN,
true/false -> 1/0) anywhere, port speeds (`SPEED_400GB`, `400G`) where the path's metric is a speed; a
speed of 0 is "not known"; other text and unreadable speeds are skipped and counted as non-numeric. A
malformed response or update is skipped, counted and logged (first few per target), and never stops the
stream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.common.rows import constant
from rocescope.collectors.gnmi.paths import NO_KEYS, Elem, elems_str, path_elems
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.gnmi.resolve import (
    DEFAULT_VENDORS,
    Resolved,
    instance_device,
    is_sonic,
    resolve_elems,
    strip_module,
)
from rocescope.collectors.gnmi.values import POSITIVE_ONLY, TEXT_VALUES, number, scalar
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
_LIST_KEYS = ("name", "index", "interface-id", "queue-name", "id")

# --- JSON values -------------------------------------------------------------------------------


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
_Words = tuple[int, Callable[[str], float | None]]  # (resolution code, parser) of a metric reported as words
_INF = float("inf")


class _PathInfo:
    """One (prefix, path) pair: its leaf resolution and, for JSON objects, its members' resolutions."""

    __slots__ = ("_text", "elems", "leaf", "members", "target", "words")

    def __init__(self, target: str, elems: list[Elem]) -> None:
        self.target = target
        self.elems = elems
        self.leaf: _Hit | None = _UNRESOLVED
        self.members: dict[tuple[JsonToken, ...], _Hit | None] = {}
        #: (member tokens, () for the leaf) -> how a word there is read; None: words there are not values
        self.words: dict[tuple[JsonToken, ...], _Words | None] = {}
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
    #: values stamped no later than the previous value of their series (a clock stepped back, a value re-sent
    #: with its old stamp): dropped, never differenced
    stale: int = 0
    #: values stamped more than `MAX_STALE_S` before the previous one of their series: the device's clock was
    #: set back (not a re-send): kept, and the series goes on from them
    clock_resets: int = 0


#: How far back a value's stamp may be from the previous one of its series and still be a stale sample (dropped):
#: NTP steps clocks off by more than 128 ms at once, by seconds where a clock drifted; a stamp further back is a
#: clock set back for good (a device reset to its RTC, a wrong NTP server), whose series must go on, not be lost.
MAX_STALE_S = 60.0
_MAX_STALE_NS = round(MAX_STALE_S * 1e9)


class GnmiDecoder:
    """SubscribeResponse bytes (or messages) of one device -> columns -> `counters` Batches."""

    def __init__(
        self,
        device: str,
        keep_unknown: bool = True,
        vendors: Sequence[str] = DEFAULT_VENDORS,
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
        self._positive: set[int] = set()  # codes of POSITIVE_ONLY metrics (a zero speed is "unknown")
        self._res: dict[tuple[str, str, int, str, str], int] = {}
        self._r_device: list[int] = []
        self._devices: dict[str, int] = {}
        self._r_port: list[int] = []
        self._r_prio: list[int] = []
        self._r_metric: list[int] = []
        self._r_raw: list[int] = []
        self._ports: dict[str, int] = {}
        self._metrics: dict[str, int] = {}
        self._raws: dict[str, int] = {}
        self._last_ts: dict[int, int] = {}  # series code -> stamp of its last value (arrival order)

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
        positive = self._positive
        last_ts = self._last_ts
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
                    text = getattr(v, kind)
                    x = number(text)
                    if x is None:
                        self._add_word(info, (), text, ts)
                        continue
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
                x *= hit[1]
                code = hit[0]
                if positive and code in positive and not 0.0 < x < _INF:
                    self.stats.nonnumeric += 1  # a speed of 0: not known
                    continue
                prev = last_ts.get(code)
                if prev is not None and ts <= prev and not self._clock_set_back(ts, prev):
                    continue
                last_ts[code] = ts
                codes.append(code)
                values.append(x)
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
        """A JSON value: a number (or state word) is returned; an object's members, and a word that is a value
        (a port speed), are added as rows here and None returned, as for other text (counted)."""
        if raw[:1] == b'"' and raw[-1:] == b'"' and len(raw) >= 2:
            x = number(raw[1:-1])
            if x is not None:
                return x
        doc = load_json(raw, f"the value at {info.text}")
        if not isinstance(doc, dict | list):
            x = scalar(doc)
            if x is None:
                if isinstance(doc, str):
                    self._add_word(info, (), doc, ts)
                else:
                    self.stats.nonnumeric += 1
            return x
        members = info.members
        positive = self._positive
        for toks, value in _flatten(doc):
            x = scalar(value)
            if x is None:
                if isinstance(value, str):
                    self._add_word(info, toks, value, ts)
                else:
                    self.stats.nonnumeric += 1
                continue
            hit = members.get(toks, _UNRESOLVED)
            if hit is _UNRESOLVED:
                hit = self._hit(resolve_elems(self._member_elems(info, toks), info.target, self.vendors))
                if len(members) < _CACHE_LIMIT:
                    members[toks] = hit
            if hit is None:
                continue
            x *= hit[1]
            if positive and hit[0] in positive and not 0.0 < x < _INF:
                self.stats.nonnumeric += 1
                continue
            if not self._fresh(hit[0], ts):
                continue
            self._codes.append(hit[0])
            self._values.append(x)
            self._ts.append(ts)
        return None

    def _member_elems(self, info: _PathInfo, toks: tuple[JsonToken, ...]) -> list[Elem]:
        """The full path of a JSON member (module prefixes dropped, except on SONiC paths)."""
        extra = [_token_elem(t) for t in toks]
        if not is_sonic(info.target, info.elems):
            extra = [(strip_module(name), keys) for name, keys in extra]
        return info.elems + extra

    def _add_word(self, info: _PathInfo, toks: tuple[JsonToken, ...], text: str, ts: int) -> None:
        """A word at a path (`toks`: a JSON member, () the leaf): a row when the path's metric is reported as
        words (a port speed: `SPEED_400GB`, `400G`), else counted as non-numeric, like an unreadable speed."""
        if toks in info.words:
            words = info.words[toks]
        else:
            words = None
            r = resolve_elems(self._member_elems(info, toks) if toks else info.elems, info.target, self.vendors)
            parse = TEXT_VALUES.get(r.metric) if r.metric is not None else None
            hit = self._hit(r) if parse is not None else None
            if hit is not None and parse is not None:
                words = (hit[0], parse)
            if len(info.words) < _CACHE_LIMIT:
                info.words[toks] = words
        x = None if words is None else words[1](text)
        if words is None or x is None:
            self.stats.nonnumeric += 1
            return
        if not self._fresh(words[0], ts):
            return
        self._codes.append(words[0])
        self._values.append(x)
        self._ts.append(ts)

    def _fresh(self, code: int, ts: int) -> bool:
        """Whether a value of series `code` stamped `ts` is a new read (recorded as its series' last); a value stamped
        no later than the last one is stale (dropped, counted), unless it is so far back that the clock was set back
        (`MAX_STALE_S`: kept, counted)."""
        prev = self._last_ts.get(code)
        if prev is not None and ts <= prev and not self._clock_set_back(ts, prev):
            return False
        self._last_ts[code] = ts
        return True

    def _clock_set_back(self, ts: int, prev: int) -> bool:
        """Of a stamp `ts` at or before its series' last `prev`: whether the device's clock was set back (more than
        `MAX_STALE_S` back: the value is kept, counted as a clock reset) rather than the value re-sent (stale,
        counted)."""
        if prev - ts <= _MAX_STALE_NS:
            self.stats.stale += 1
            return False
        self.stats.clock_resets += 1
        return True

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
        rkey = (r.instance, r.port, r.priority, metric, r.raw_name)
        code = self._res.get(rkey)
        if code is None:
            code = self._res[rkey] = len(self._r_port)
            if metric in POSITIVE_ONLY:
                self._positive.add(code)
            device = instance_device(self.device, r.instance)
            self._r_device.append(self._devices.setdefault(device, len(self._devices)))
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
                "device": column(self._r_device, self._devices),
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
