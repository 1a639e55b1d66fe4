"""How the simulated gNMI target renders a switch's `counters` rows as gNMI notifications.

Each row is served at the paths a device of its kind would use (see `gnmi.GnmiFacade`): SONiC
COUNTERS_DB virtual paths from rows whose raw name is a SAI field, OpenConfig paths from rows whose
metric has an OpenConfig name. `leaves_of` lists them with their values; `notifications` answers one
subscription (or Get path) from them, in the encoding asked: PROTO typed leaves, or JSON/JSON_IETF as
sonic-gnmi sends them (one JSON object of string values per subscription, keyed by what the wildcards
matched; OpenConfig leaves as JSON scalars, uint64 as strings per RFC 7951).

A deployment profile's switch (`dialect` other than `ideal`) serves each row at the one path its OS
uses (`gnmi_paths.served`: SONiC, OpenConfig, SR Linux), its values spelled as that OS spells them
(`up`/`down`, speeds in Mb/s or as `SPEED_400GB` / `400G`).

The fabric-time streams render every tick: `plan_for` matches a subscription against a table's row
layout once, `rendered` then builds the tick's notifications from its values only (`subplan`: of the
rows a device read since the subscription's last sample).
"""

from __future__ import annotations

import fnmatch
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from rocescope import catalog
from rocescope.collectors.gnmi.proto import pb
from rocescope.sim.facades.gnmi_paths import served
from rocescope.sim.facades.gnmi_server import PROTO, Elem, gnmi_path, set_json

_Spec = tuple[str, tuple[Elem, ...], int, int, str]


@dataclass(frozen=True)
class Leaf:
    """One served value at one path."""

    family: str  # sonic | openconfig
    elems: tuple[Elem, ...]
    obj_len: int  # SONiC: a subscription must name at least this many elements (the object it reads)
    prefix_len: int  # elements that go into the notification prefix (one notification per object)
    text: str  # how the value is spelled as text ("123", "UP", "true")
    value: float
    style: str = "number"  # how `text` spells `value` (see `_text`)


def _e(elem: str, **keys: str) -> Elem:
    return elem, tuple(sorted(keys.items()))


def _rest(name: str) -> tuple[Elem, ...]:
    return tuple((part, ()) for part in name.split("/"))


def _sonic_group(raw: str) -> str:
    if raw.startswith("SAI_INGRESS_PRIORITY_GROUP"):
        return "PriorityGroups"
    return "Pfcwd" if raw.startswith("PFC_WD") else "Queues"


def _specs(port: str, prio: int, metric: str, raw: str, dialect: str = "ideal", group: str = "ports") -> list[_Spec]:
    """(family, elems, obj_len, prefix_len, text style) of every path one row is served at."""
    if dialect != "ideal":
        hit = served(dialect, port, prio, metric, raw, group)
        return [] if hit is None else [(hit.family, hit.elems, hit.obj_len, hit.prefix_len, hit.style)]
    out: list[_Spec] = []
    sai = catalog.resolve("sonic_sai", raw)
    if sai is not None:
        style = "bool" if raw == "SAI_QUEUE_ATTR_PAUSE_STATUS" else "number"
        if prio < 0 or sai[1] >= 0:
            out.append(("sonic", (_e("COUNTERS"), _e(port), _e(raw)), 2, 2, style))
        else:
            elems = (_e("COUNTERS"), _e(port), _e(_sonic_group(raw)), _e(f"{port}:{prio}"), _e(raw))
            out.append(("sonic", elems, 3, 2, style))
    meta = catalog.METRICS_BY_NAME.get(metric)
    oc = meta.vendor_names.get("openconfig", ()) if meta is not None else ()
    if oc:
        style = "state" if metric == "oper_up" else "number"
        if prio < 0 and not meta.per_priority:  # type: ignore[union-attr]
            out.append(("openconfig", (_e("interfaces"), _e("interface", name=port), *_rest(oc[0])), 0, 2, style))
        elif prio >= 0 and oc[0].startswith("state/"):
            head = (_e("qos"), _e("interfaces"), _e("interface", **{"interface-id": port}), _e("output"), _e("queues"))
            out.append(("openconfig", (*head, _e("queue", name=str(prio)), *_rest(oc[0])), 0, 6, style))
    return out


def _speed_words(bps: float) -> tuple[str, str]:
    """(OpenConfig ETHERNET_SPEED identity, SR Linux port-speed enum) of a speed in bits/s."""
    gb = bps / 1e9
    if gb >= 1 and gb == int(gb):
        return f"openconfig-if-ethernet:SPEED_{int(gb)}GB", (f"{int(gb)}G" if gb < 1000 else f"{int(gb) // 1000}T")
    mb = int(bps / 1e6)
    return f"openconfig-if-ethernet:SPEED_{mb}MB", f"{mb}M"


def _text(value: float, style: str) -> str:
    """A value as the device spells it: `state` UP/DOWN, `updown` up/down, `bool` true/false, `mbps` a speed
    in Mb/s (SONiC PORT_TABLE), `oc_speed` / `srl_speed` a speed as an OpenConfig identity / SR Linux enum."""
    if style == "state":
        return "UP" if value else "DOWN"
    if style == "updown":
        return "up" if value else "down"
    if style == "bool":
        return "true" if value else "false"
    if style == "mbps":
        return str(int(value // 1e6))
    if style in ("oc_speed", "srl_speed"):
        return _speed_words(value)[style == "srl_speed"]
    return str(int(value)) if value == int(value) else repr(value)


_spec_cache: dict[tuple[str, int, str, str, str, str], list[_Spec]] = {}


def _cached_specs(port: str, prio: int, metric: str, raw: str, dialect: str, group: str) -> list[_Spec]:
    key = (port, prio, metric, raw, dialect, group)
    specs = _spec_cache.get(key)
    if specs is None:
        specs = _spec_cache[key] = _specs(*key)
    return specs


def _groups(table: pa.Table) -> list[str]:
    """Each row's metric group (a profile's layout has them; a bare snapshot is all `ports`)."""
    if "group" in table.schema.names:
        return [str(g) for g in table.column("group").to_pylist()]
    return ["ports"] * table.num_rows


def leaves_of(table: pa.Table, dialect: str = "ideal") -> list[Leaf]:
    """Every path the rows of a `counters` table are served at, with their values."""
    cols = table.select(["port", "priority", "metric", "raw_name", "value"]).to_pydict()
    out: list[Leaf] = []
    for port, prio, metric, raw, value, group in zip(
        cols["port"], cols["priority"], cols["metric"], cols["raw_name"], cols["value"], _groups(table), strict=True
    ):
        for family, elems, obj_len, prefix_len, style in _cached_specs(port, prio, metric, raw, dialect, group):
            out.append(Leaf(family, elems, obj_len, prefix_len, _text(value, style), float(value), style))
    return out


def ts_ns(table: pa.Table) -> int:
    if table.num_rows == 0:
        return time.time_ns()
    return int(table.column("ts").cast(pa.int64())[0].as_py())


@dataclass
class Subscription:
    family: str
    elems: list[tuple[str, Mapping[str, str]]]  # full path (request prefix + subscription path)
    path: Any  # the subscription path as asked (relative to the request prefix)
    interval_s: float


def _strip(name: str) -> str:
    return name.rpartition(":")[2]


def _matches(sub: Subscription, leaf: Leaf) -> list[str] | None:
    """The leaf element names the subscription's wildcards matched, or None when it does not match."""
    if leaf.family != sub.family or len(sub.elems) > len(leaf.elems):
        return None
    if leaf.family == "sonic" and len(sub.elems) < leaf.obj_len:
        return None
    wild: list[str] = []
    for (sname, skeys), (lname, lkeys) in zip(sub.elems, leaf.elems, strict=False):
        if leaf.family != "sonic":
            sname = _strip(sname)
        if sname != lname:
            if "*" not in sname or not fnmatch.fnmatchcase(lname, sname):
                return None
            wild.append(lname)
        lk = dict(lkeys)
        for k, v in skeys.items():
            if v != "*" and lk.get(k) != v:
                return None
    return wild


def _typed(leaf: Leaf, val: Any) -> None:
    if leaf.style in ("state", "updown", "oc_speed", "srl_speed"):
        val.string_val = leaf.text
    elif leaf.style == "mbps":
        val.uint_val = int(leaf.text)
    elif leaf.value >= 0 and leaf.value == int(leaf.value) and leaf.value < 2**64:
        val.uint_val = int(leaf.value)
    else:
        val.double_val = leaf.value


def notifications(sub: Subscription, leaves: Sequence[Leaf], ts: int, encoding: int, target: str) -> list[Any]:
    """What a subscription (or a Get path) answers from these leaves."""
    matched = [(leaf, wild) for leaf in leaves if (wild := _matches(sub, leaf)) is not None]
    return _encode(sub, matched, ts, encoding, target)


def _encode(
    sub: Subscription,
    matched: Sequence[tuple[Leaf, list[str]]],
    ts: int,
    encoding: int,
    target: str,
    together: bool = False,
) -> list[Any]:
    """The notifications of the leaves a subscription matched (with what its wildcards matched); `together`:
    OpenConfig leaves (of one stamp) in one notification, each update at its full path (an empty prefix)."""
    if not matched:
        return []
    if together and sub.family != "sonic":
        n = pb.Notification(timestamp=ts, prefix=pb.Path(target=target))
        for leaf, _ in matched:
            u = n.update.add()
            u.path.CopyFrom(gnmi_path(leaf.elems))
            if encoding == PROTO:
                _typed(leaf, u.val)
            else:
                set_json(u.val, json.dumps(leaf.text).encode(), encoding)
        return [n]
    if encoding == PROTO:
        groups: dict[tuple[Elem, ...], Any] = {}
        for leaf, _ in matched:
            head = leaf.elems[: leaf.prefix_len]
            n = groups.get(head)
            if n is None:
                n = groups[head] = pb.Notification(timestamp=ts, prefix=gnmi_path(head, target))
            u = n.update.add()
            u.path.CopyFrom(gnmi_path(leaf.elems[leaf.prefix_len :]))
            _typed(leaf, u.val)
        return list(groups.values())
    if sub.family == "sonic":  # one update per subscription: sonic-gnmi's JSON objects of strings
        members = [(_sonic_keys(sub, leaf, wild), leaf.text) for leaf, wild in matched]
        return [_sonic_json(sub, members, ts, encoding, target)]
    out = []
    for leaf, _ in matched:  # OpenConfig leaves as JSON scalars (uint64 as a string, RFC 7951)
        n = pb.Notification(timestamp=ts, prefix=gnmi_path(leaf.elems[: leaf.prefix_len], target))
        u = n.update.add()
        u.path.CopyFrom(gnmi_path(leaf.elems[leaf.prefix_len :]))
        set_json(u.val, json.dumps(leaf.text).encode(), encoding)
        out.append(n)
    return out


def _sonic_json(
    sub: Subscription, members: Iterable[tuple[list[str], str]], ts: int, encoding: int, target: str
) -> Any:
    """One notification holding the subscription's JSON document: each text at its member path (keys), or
    the bare value when a subscription names one field."""
    doc: dict[str, Any] = {}
    scalar: str | None = None
    for keys, text in members:
        if not keys:
            scalar = text
            continue
        node = doc
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = text
    n = pb.Notification(timestamp=ts, prefix=pb.Path(target=target))
    u = n.update.add()
    u.path.CopyFrom(sub.path)
    set_json(u.val, json.dumps(doc if scalar is None else scalar).encode(), encoding)
    return n


def _sonic_keys(sub: Subscription, leaf: Leaf, wild: list[str]) -> list[str]:
    names = [name for name, _ in leaf.elems]
    depth = len(sub.elems)
    return wild + (names[-1:] if depth == len(names) and wild else names[depth:])


@dataclass
class RenderPlan:
    """A subscription's matches in one table layout: row of each leaf, its spec, and SONiC JSON keys."""

    rows: list[int]
    specs: list[_Spec]
    wild: list[list[str]]
    keys: list[list[str]] | None  # SONiC JSON: the member path of each leaf in the document


def layout_key(table: pa.Table) -> tuple[Any, ...]:
    """A cheap fingerprint of the rows' identities (port, priority, metric, raw name), not their values."""
    parts: list[Any] = [table.num_rows]
    for name in ("port", "priority", "metric", "raw_name"):
        for chunk in table.column(name).chunks:
            if pa.types.is_dictionary(chunk.type):
                parts.append(hash(chunk.indices.to_numpy(zero_copy_only=False).tobytes()))
                parts.append(hash(tuple(chunk.dictionary.to_pylist())))
            else:
                parts.append(hash(tuple(chunk.to_pylist())))
    return tuple(parts)


def plan_for(sub: Subscription, table: pa.Table, dialect: str = "ideal") -> RenderPlan:
    cols = table.select(["port", "priority", "metric", "raw_name"]).to_pydict()
    rows: list[int] = []
    specs: list[_Spec] = []
    wilds: list[list[str]] = []
    keys: list[list[str]] = []
    for r, (port, prio, metric, raw, group) in enumerate(
        zip(cols["port"], cols["priority"], cols["metric"], cols["raw_name"], _groups(table), strict=True)
    ):
        for spec in _cached_specs(port, prio, metric, raw, dialect, group):
            family, elems, obj_len, prefix_len, _style = spec
            probe = Leaf(family, elems, obj_len, prefix_len, "", 0.0)
            wild = _matches(sub, probe)
            if wild is None:
                continue
            rows.append(r)
            specs.append(spec)
            wilds.append(wild)
            keys.append(_sonic_keys(sub, probe, wild))
    return RenderPlan(rows, specs, wilds, keys if sub.family == "sonic" else None)


def subplan(plan: RenderPlan, picks: Sequence[int]) -> RenderPlan:
    """The plan of some of its leaves (`picks`: their positions in `plan`)."""
    return RenderPlan(
        [plan.rows[i] for i in picks],
        [plan.specs[i] for i in picks],
        [plan.wild[i] for i in picks],
        None if plan.keys is None else [plan.keys[i] for i in picks],
    )


def _texts(values: np.ndarray[Any, Any], styles: Sequence[str]) -> list[str]:
    ints = np.floor(values)
    if (ints == values).all() and np.abs(values).max(initial=0) < 2**62:
        text = [str(v) for v in values.astype(np.int64).tolist()]
    else:
        text = [str(int(v)) if v == int(v) else repr(v) for v in values.tolist()]
    for i, style in enumerate(styles):
        if style != "number":
            text[i] = _text(float(values[i]), style)
    return text


def rendered(
    sub: Subscription,
    plan: RenderPlan,
    values: np.ndarray[Any, Any],
    ts: int,
    encoding: int,
    target: str,
    together: bool = False,
) -> list[Any]:
    """What `notifications` sends for this subscription, from a cached plan and this tick's values (`together`:
    see `_encode`)."""
    if not plan.rows:
        return []
    vals = values[plan.rows]
    texts = _texts(vals, [spec[4] for spec in plan.specs])
    if plan.keys is not None and encoding != PROTO:  # the hot path: one SONiC JSON document per subscription
        return [_sonic_json(sub, zip(plan.keys, texts, strict=True), ts, encoding, target)]
    matched = [
        (Leaf(family, elems, obj_len, prefix_len, text, float(v), style), wild)
        for (family, elems, obj_len, prefix_len, style), text, v, wild in zip(
            plan.specs, texts, vals.tolist(), plan.wild, strict=True
        )
    ]
    return _encode(sub, matched, ts, encoding, target, together)
