"""gNMI facade: a real grpc gNMI target on loopback serving one simulated switch's counters.

`GnmiFacade(source)` serves whatever `source()` returns: the latest `counters` table of one device
(`engine_source(engine, "leaf-r0-01")` reads a sim Engine, under a lock when another thread steps
it). Each row is served at the paths a device of its kind would use:

* SONiC COUNTERS_DB virtual paths (prefix target `COUNTERS_DB`), from rows whose raw name is a SAI
  field: port fields at `COUNTERS/<port>/<field>`; queue, priority-group and PFC watchdog fields at
  `COUNTERS/<port>/{Queues,PriorityGroups,Pfcwd}/<port>:<index>/<field>`, as sonic-gnmi keys them;
* OpenConfig, from rows whose metric has an OpenConfig name: `/interfaces/interface[name=P]/...`
  (oper-status as UP/DOWN) and `/qos/interfaces/interface[interface-id=P]/output/queues/queue[name=Q]/...`.

Rows with neither (ifHighSpeed) are not served. Subscribe answers STREAM (SAMPLE at the requested
interval) and ONCE; Get and Capabilities too. Values go out as the request's encoding asks: PROTO as
typed leaves (uint/double), JSON/JSON_IETF as sonic-gnmi sends them (one update per subscribed
path, a JSON object of string values keyed by what the wildcards matched; OpenConfig leaves as JSON
scalars, uint64 as strings per RFC 7951). Optional TLS (PEM cert and key) and username/password
metadata (a wrong pair is refused with UNAUTHENTICATED), and `extra()`, a test hook whose items
(Notifications, or raw bytes) are sent after every sample round.

With a `clock` (a `TickClock`, e.g. `rocescope.sim.serve.FabricClock`) SAMPLE runs on FABRIC time:
the stream waits for each published tick, sends each subscription whose fabric-time interval is due
(notification timestamps = the tick's fabric time), then acknowledges the tick to the clock, whose
barrier keeps the simulator from running ahead of the slowest stream; each tick is sent exactly
once. Rendering is then cached per subscription and table layout (only the values change per tick).
"""

from __future__ import annotations

import fnmatch
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import grpc
import numpy as np
import pyarrow as pa

from rocescope import catalog
from rocescope.collectors.gnmi.collector import is_sonic, path_elems
from rocescope.collectors.gnmi.proto import GNMI_VERSION, pb
from rocescope.sim.engine import Engine

__all__ = ["GnmiFacade", "Leaf", "TickClock", "engine_source", "leaves_of", "serve_switches"]

Source = Callable[[], pa.Table]
_Keys = tuple[tuple[str, str], ...]
_Elem = tuple[str, _Keys]
_JSON, _PROTO, _JSON_IETF = 0, 2, 4
_STREAM, _ONCE = 0, 1
_SONIC_TARGET = "COUNTERS_DB"
_MODELS = (
    ("openconfig-interfaces", "OpenConfig working group", "3.0.0"),
    ("openconfig-qos", "OpenConfig working group", "0.11.0"),
    ("sonic-counters-db", "SONiC", "1.0"),
)


@dataclass(frozen=True)
class Leaf:
    """One served value at one path."""

    family: str  # sonic | openconfig
    elems: tuple[_Elem, ...]
    obj_len: int  # SONiC: a subscription must name at least this many elements (the object it reads)
    prefix_len: int  # elements that go into the notification prefix (one notification per object)
    text: str  # how the value is spelled as text ("123", "UP", "true")
    value: float


def _e(elem: str, **keys: str) -> _Elem:
    return elem, tuple(sorted(keys.items()))


def _rest(name: str) -> tuple[_Elem, ...]:
    return tuple((part, ()) for part in name.split("/"))


def _sonic_group(raw: str) -> str:
    if raw.startswith("SAI_INGRESS_PRIORITY_GROUP"):
        return "PriorityGroups"
    return "Pfcwd" if raw.startswith("PFC_WD") else "Queues"


def _specs(port: str, prio: int, metric: str, raw: str) -> list[tuple[str, tuple[_Elem, ...], int, int, str]]:
    """(family, elems, obj_len, prefix_len, text style) of every path one row is served at."""
    out: list[tuple[str, tuple[_Elem, ...], int, int, str]] = []
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


def _text(value: float, style: str) -> str:
    if style == "state":
        return "UP" if value else "DOWN"
    if style == "bool":
        return "true" if value else "false"
    return str(int(value)) if value == int(value) else repr(value)


_spec_cache: dict[tuple[str, int, str, str], list[tuple[str, tuple[_Elem, ...], int, int, str]]] = {}


def leaves_of(table: pa.Table) -> list[Leaf]:
    """Every path the rows of a `counters` table are served at, with their values."""
    cols = table.select(["port", "priority", "metric", "raw_name", "value"]).to_pydict()
    out: list[Leaf] = []
    for port, prio, metric, raw, value in zip(
        cols["port"], cols["priority"], cols["metric"], cols["raw_name"], cols["value"], strict=True
    ):
        key = (port, prio, metric, raw)
        specs = _spec_cache.get(key)
        if specs is None:
            specs = _spec_cache[key] = _specs(port, prio, metric, raw)
        for family, elems, obj_len, prefix_len, style in specs:
            out.append(Leaf(family, elems, obj_len, prefix_len, _text(value, style), float(value)))
    return out


def _ts_ns(table: pa.Table) -> int:
    if table.num_rows == 0:
        return time.time_ns()
    return int(table.column("ts").cast(pa.int64())[0].as_py())


# --- subscriptions -------------------------------------------------------------------------------


@dataclass
class _Sub:
    family: str
    elems: list[tuple[str, Mapping[str, str]]]  # full path (request prefix + subscription path)
    path: Any  # the subscription path as asked (relative to the request prefix)
    interval_s: float


def _strip(name: str) -> str:
    return name.rpartition(":")[2]


def _matches(sub: _Sub, leaf: Leaf) -> list[str] | None:
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


def _path(elems: Iterable[_Elem], target: str = "") -> Any:
    path = pb.Path(target=target)
    for name, keys in elems:
        elem = path.elem.add(name=name)
        for k, v in keys:
            elem.key[k] = v
    return path


def _typed(leaf: Leaf, val: Any) -> None:
    if leaf.text in ("UP", "DOWN"):
        val.string_val = leaf.text
    elif leaf.value >= 0 and leaf.value == int(leaf.value) and leaf.value < 2**64:
        val.uint_val = int(leaf.value)
    else:
        val.double_val = leaf.value


def _notifications(sub: _Sub, leaves: Sequence[Leaf], ts: int, encoding: int, target: str) -> list[Any]:
    matched = [(leaf, wild) for leaf in leaves if (wild := _matches(sub, leaf)) is not None]
    return _encode(sub, matched, ts, encoding, target)


def _encode(sub: _Sub, matched: Sequence[tuple[Leaf, list[str]]], ts: int, encoding: int, target: str) -> list[Any]:
    """The notifications of the leaves a subscription matched (with what its wildcards matched)."""
    if not matched:
        return []
    if encoding == _PROTO:
        groups: dict[tuple[_Elem, ...], Any] = {}
        for leaf, _ in matched:
            head = leaf.elems[: leaf.prefix_len]
            n = groups.get(head)
            if n is None:
                n = groups[head] = pb.Notification(timestamp=ts, prefix=_path(head, target))
            u = n.update.add()
            u.path.CopyFrom(_path(leaf.elems[leaf.prefix_len :]))
            _typed(leaf, u.val)
        return list(groups.values())
    if sub.family == "sonic":  # one update per subscription: sonic-gnmi's JSON objects of strings
        doc: dict[str, Any] = {}
        scalar: str | None = None
        for leaf, wild in matched:
            names = [name for name, _ in leaf.elems]
            depth = len(sub.elems)
            keys = wild + (names[-1:] if depth == len(names) and wild else names[depth:])
            if not keys:
                scalar = leaf.text
                continue
            node = doc
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = leaf.text
        n = pb.Notification(timestamp=ts, prefix=pb.Path(target=target))
        u = n.update.add()
        u.path.CopyFrom(sub.path)
        return [_sonic_json(sub, doc, scalar, ts, encoding, target)]
    out = []
    for leaf, _ in matched:  # OpenConfig leaves as JSON scalars (uint64 as a string, RFC 7951)
        n = pb.Notification(timestamp=ts, prefix=_path(leaf.elems[: leaf.prefix_len], target))
        u = n.update.add()
        u.path.CopyFrom(_path(leaf.elems[leaf.prefix_len :]))
        body = json.dumps(leaf.text).encode()
        if encoding == _JSON:
            u.val.json_val = body
        else:
            u.val.json_ietf_val = body
        out.append(n)
    return out


def _sonic_json(sub: _Sub, doc: dict[str, Any], scalar: str | None, ts: int, encoding: int, target: str) -> Any:
    n = pb.Notification(timestamp=ts, prefix=pb.Path(target=target))
    u = n.update.add()
    u.path.CopyFrom(sub.path)
    body = json.dumps(doc if scalar is None else scalar).encode()
    if encoding == _JSON:
        u.val.json_val = body
    else:
        u.val.json_ietf_val = body
    return n


def _sonic_keys(sub: _Sub, leaf: Leaf, wild: list[str]) -> list[str]:
    names = [name for name, _ in leaf.elems]
    depth = len(sub.elems)
    return wild + (names[-1:] if depth == len(names) and wild else names[depth:])


# --- fabric-time sampling (the clock seam) -------------------------------------------------------


class TickClock(Protocol):
    """Fabric time as published by a simulator driver, with a barrier its consumers acknowledge."""

    def register(self, name: str) -> int:
        """A consumer id; the driver's barrier waits for every registered consumer."""

    def unregister(self, consumer: int) -> None: ...

    def wait_tick(self, after: int, timeout_s: float) -> int | None:
        """The newest tick number once it is past `after`; None on timeout; -1 once the clock is closed."""

    def done(self, consumer: int, tick: int) -> None:
        """The consumer has finished with `tick`."""


@dataclass
class _Render:
    """A subscription's matches in one table layout: row of each leaf, its spec, and SONiC JSON keys."""

    rows: list[int]
    specs: list[tuple[str, tuple[_Elem, ...], int, int, str]]
    wild: list[list[str]]
    keys: list[list[str]] | None  # SONiC JSON: the member path of each leaf in the document


def _layout_key(table: pa.Table) -> tuple[Any, ...]:
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


def _plan(sub: _Sub, table: pa.Table) -> _Render:
    cols = table.select(["port", "priority", "metric", "raw_name"]).to_pydict()
    rows: list[int] = []
    specs: list[tuple[str, tuple[_Elem, ...], int, int, str]] = []
    wilds: list[list[str]] = []
    keys: list[list[str]] = []
    for r, key in enumerate(zip(cols["port"], cols["priority"], cols["metric"], cols["raw_name"], strict=True)):
        spec_list = _spec_cache.get(key)
        if spec_list is None:
            spec_list = _spec_cache[key] = _specs(*key)
        for spec in spec_list:
            family, elems, obj_len, prefix_len, _style = spec
            probe = Leaf(family, elems, obj_len, prefix_len, "", 0.0)
            wild = _matches(sub, probe)
            if wild is None:
                continue
            rows.append(r)
            specs.append(spec)
            wilds.append(wild)
            keys.append(_sonic_keys(sub, probe, wild))
    return _Render(rows, specs, wilds, keys if sub.family == "sonic" else None)


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


def _rendered(sub: _Sub, plan: _Render, values: np.ndarray[Any, Any], ts: int, encoding: int, target: str) -> list[Any]:
    """What `_notifications` sends for this subscription, from a cached plan and this tick's values."""
    if not plan.rows:
        return []
    vals = values[plan.rows]
    texts = _texts(vals, [spec[4] for spec in plan.specs])
    if plan.keys is not None and encoding != _PROTO:  # the hot path: one SONiC JSON document per subscription
        doc: dict[str, Any] = {}
        scalar: str | None = None
        for keys, text in zip(plan.keys, texts, strict=True):
            if not keys:
                scalar = text
                continue
            node = doc
            for k in keys[:-1]:
                node = node.setdefault(k, {})
            node[keys[-1]] = text
        return [_sonic_json(sub, doc, scalar, ts, encoding, target)]
    matched = [
        (Leaf(family, elems, obj_len, prefix_len, text, float(v)), wild)
        for (family, elems, obj_len, prefix_len, _), text, v, wild in zip(
            plan.specs, texts, vals.tolist(), plan.wild, strict=True
        )
    ]
    return _encode(sub, matched, ts, encoding, target)


def _serialize(message: Any) -> bytes:
    return message if isinstance(message, bytes) else bytes(message.SerializeToString())


# --- the server ----------------------------------------------------------------------------------


class GnmiFacade:
    """A gNMI target (grpc server on `host`, a free port unless `port` is given) serving `source()`."""

    def __init__(
        self,
        source: Source,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: tuple[bytes, bytes] | None = None,  # (certificate chain PEM, private key PEM)
        username: str | None = None,
        password: str | None = None,
        min_interval_s: float = 0.01,
        extra: Callable[[], Iterable[Any]] | None = None,
        max_workers: int = 16,
        clock: TickClock | None = None,
    ) -> None:
        self.source = source
        self.host = host
        self.port = port
        self.tls = tls
        self.username = username
        self.password = password
        self.min_interval_s = min_interval_s
        self.extra = extra
        self.max_workers = max_workers
        self.subscribes = 0
        self.rejected = 0
        self.notifications = 0
        self.clock = clock
        self.values_sent = 0  # clocked streams: values sent (a collector that decoded as many has them all)
        self._server: Any = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self) -> GnmiFacade:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> GnmiFacade:
        """Serve (again, on the same port after a stop)."""
        self._stopping = threading.Event()
        server = grpc.server(ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="gnmi-facade"))
        handlers = {
            "Capabilities": grpc.unary_unary_rpc_method_handler(
                self._capabilities, pb.CapabilityRequest.FromString, _serialize
            ),
            "Get": grpc.unary_unary_rpc_method_handler(self._get, pb.GetRequest.FromString, _serialize),
            "Set": grpc.unary_unary_rpc_method_handler(self._set, pb.SetRequest.FromString, _serialize),
            "Subscribe": grpc.stream_stream_rpc_method_handler(
                self._subscribe, pb.SubscribeRequest.FromString, _serialize
            ),
        }
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("gnmi.gNMI", handlers),))
        bind = f"{self.host}:{self.port}"
        if self.tls is None:
            port = server.add_insecure_port(bind)
        else:
            creds = grpc.ssl_server_credentials([(self.tls[1], self.tls[0])])
            port = server.add_secure_port(bind, creds)
        if not port:
            raise OSError(f"gNMI facade: cannot listen on {bind}")
        self.port = port
        server.start()
        self._server = server
        return self

    def stop(self, grace: float | None = None) -> None:
        """Stop serving: open streams end (clients see the connection go)."""
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None

    # --- RPCs
    def _auth(self, context: Any) -> None:
        if self.username is None:
            return
        md = dict(context.invocation_metadata())
        if md.get("username") != self.username or md.get("password") != self.password:
            with self._lock:
                self.rejected += 1
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid username or password")

    def _capabilities(self, request: Any, context: Any) -> Any:
        self._auth(context)
        return pb.CapabilityResponse(
            supported_models=[pb.ModelData(name=n, organization=o, version=v) for n, o, v in _MODELS],
            supported_encodings=[_JSON, _PROTO, _JSON_IETF],
            gNMI_version=GNMI_VERSION,
        )

    def _set(self, request: Any, context: Any) -> Any:
        self._auth(context)
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the simulated fabric is read-only")

    def _sub(self, prefix: Any, path: Any, interval_ns: int = 0) -> _Sub:
        elems = path_elems(prefix) + path_elems(path)
        target = path.target or prefix.target
        family = "sonic" if is_sonic(target, elems) else "openconfig"
        interval = interval_ns / 1e9 if interval_ns else 1.0
        return _Sub(family, elems, path, max(interval, self.min_interval_s))

    def _get(self, request: Any, context: Any) -> Any:
        self._auth(context)
        table = self.source()
        leaves, ts = leaves_of(table), _ts_ns(table)
        encoding = request.encoding if request.encoding in (_JSON, _PROTO, _JSON_IETF) else _JSON_IETF
        out = []
        for path in request.path:
            sub = self._sub(request.prefix, path)
            out.extend(_notifications(sub, leaves, ts, encoding, request.prefix.target))
        return pb.GetResponse(notification=out)

    def _subscribe(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        self._auth(context)
        try:
            first = next(requests)
        except StopIteration:
            return
        if first.WhichOneof("request") != "subscribe":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first SubscribeRequest must hold a subscription list")
        sl = first.subscribe
        if sl.mode not in (_STREAM, _ONCE):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "POLL subscriptions are not served")
        with self._lock:
            self.subscribes += 1
        encoding = sl.encoding if sl.encoding in (_JSON, _PROTO, _JSON_IETF) else _JSON_IETF
        subs = [self._sub(sl.prefix, s.path, s.sample_interval) for s in sl.subscription]
        if not subs:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no subscriptions")
        ended = threading.Event()
        context.add_callback(ended.set)
        stopping = self._stopping
        if self.clock is not None:
            yield from self._subscribe_ticks(self.clock, sl, subs, encoding, ended, stopping)
            return
        due = [time.monotonic()] * len(subs)
        synced = False
        while not (ended.is_set() or stopping.is_set()):
            now = time.monotonic()
            ready = [i for i, t in enumerate(due) if t <= now]
            if ready:
                table = self.source()
                leaves, ts = leaves_of(table), _ts_ns(table)
                for i in ready:
                    for n in _notifications(subs[i], leaves, ts, encoding, sl.prefix.target):
                        with self._lock:
                            self.notifications += 1
                        yield pb.SubscribeResponse(update=n)
                    due[i] = max(due[i] + subs[i].interval_s, now)
                if self.extra is not None:
                    for item in self.extra():
                        yield item if isinstance(item, bytes) else pb.SubscribeResponse(update=item)
                if not synced:
                    synced = True
                    yield pb.SubscribeResponse(sync_response=True)
                if sl.mode == _ONCE:
                    return
            wait = min(due) - time.monotonic()
            if wait > 0:
                ended.wait(min(wait, 0.1))

    def _subscribe_ticks(
        self,
        clock: TickClock,
        sl: Any,
        subs: list[_Sub],
        encoding: int,
        ended: threading.Event,
        stopping: threading.Event,
    ) -> Iterator[Any]:
        """SAMPLE on fabric time: one round per published tick, each subscription when its interval is due."""
        consumer = clock.register(f"gnmi {self.address}")
        try:
            seen = 0
            due: list[int | None] = [None] * len(subs)
            plans: dict[tuple[int, tuple[Any, ...]], _Render] = {}
            synced = False
            while not (ended.is_set() or stopping.is_set()):
                tick = clock.wait_tick(seen, 0.1)
                if tick is None:
                    continue
                if tick < 0:
                    return
                seen = tick
                table = self.source()
                ts = _ts_ns(table)
                layout = _layout_key(table)
                values = table.column("value").to_numpy()
                sent = 0
                for i, sub in enumerate(subs):
                    step = max(1, round(sub.interval_s * 1e9))
                    when = due[i]
                    if when is not None and ts < when - step // 1000:  # (a microsecond of slack per interval)
                        continue
                    due[i] = (ts if when is None else when) + step
                    plan = plans.get((i, layout))
                    if plan is None:
                        plan = plans[(i, layout)] = _plan(sub, table)
                    sent += len(plan.rows)
                    for n in _rendered(sub, plan, values, ts, encoding, sl.prefix.target):
                        with self._lock:
                            self.notifications += 1
                        yield pb.SubscribeResponse(update=n)
                with self._lock:
                    self.values_sent += sent
                if not synced:
                    synced = True
                    yield pb.SubscribeResponse(sync_response=True)
                clock.done(consumer, tick)  # grpc asked for more: the tick's messages went to the transport
                if sl.mode == _ONCE:
                    return
        finally:
            clock.unregister(consumer)


def engine_source(
    engine: Engine, device: str, lock: threading.Lock | None = None, reset_watermarks: bool = False
) -> Source:
    """`source` for a facade: the device's counters now (under `lock` when another thread steps the engine).

    Watermarks are left alone by default, so a facade never changes what other readers see.
    """
    guard = lock or threading.Lock()

    def read() -> pa.Table:
        with guard:
            return engine.snapshot(devices=[device], reset_watermarks=reset_watermarks)

    return read


def serve_switches(engine: Engine, lock: threading.Lock | None = None, **kwargs: Any) -> dict[str, GnmiFacade]:
    """One started facade per switch of the engine's fabric (a switch is one gNMI target)."""
    guard = lock or threading.Lock()
    out: dict[str, GnmiFacade] = {}
    try:
        for sw in engine.topology.switches:
            out[sw.name] = GnmiFacade(engine_source(engine, sw.name, guard), **kwargs).start()
    except BaseException:
        for facade in out.values():
            facade.stop()
        raise
    return out
