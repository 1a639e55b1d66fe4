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
scalars, uint64 as strings per RFC 7951); `gnmi_render` turns rows into notifications, `gnmi_server`
holds the grpc plumbing this target shares with the LLDP one. Optional TLS (PEM cert and key) and
username/password metadata (a wrong pair is refused with UNAUTHENTICATED), and `extra()`, a test hook
whose items (Notifications, or raw bytes) are sent after every sample round.

A deployment profile's switch (`dialect`: `sonic`, `openconfig`, `srlinux`, `cumulus`; see `gnmi_paths`)
serves each row at the one path its OS uses instead.

With a `clock` (a `TickClock`, e.g. `rocescope.sim.facades.clock.FabricClock`) and the `device` it serves,
SAMPLE runs on FABRIC time, on the device's own counter polls: the clock holds, per row, what the device
last read, when (its stamp, on the device's clock) and at which tick. On each published tick a subscription
sends the rows the device read since its previous sample, once its interval has passed since then (a
device's sample timer runs in phase with its counter poll, so every read is sent once, at its own stamp),
one notification per stamp (SONiC: per read of a metric group, one JSON document, stamped when the group
was read; OpenConfig and SR Linux: the leaves of one stamp, each at its full path); then the stream
acknowledges the tick to the clock, whose barrier keeps the simulator from running ahead of the slowest
stream. On the clock's final tick every subscription sends what it still holds. Rendering is cached per
subscription (the layout is fixed; only values change per tick).

That is `sample="reads"`. A profile's switch may instead send what real targets send (`SwitchSide.sample`):
`current`, every path's current value at every interval whether the device read it again or not, stamped
with the send time (`send_lag_s` after the tick's fabric time, so after every read of the tick), as sonic-gnmi
does; `current_read_stamp`, the same values stamped when they were read (repeats of one timestamp).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import grpc
import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocescope.collectors.gnmi.decode import is_sonic
from rocescope.collectors.gnmi.paths import path_elems
from rocescope.collectors.gnmi.proto import pb
from rocescope.sim.engine import Engine
from rocescope.sim.facades.clock import FeedView
from rocescope.sim.facades.gnmi_render import (
    RenderPlan,
    Subscription,
    leaves_of,
    notifications,
    plan_for,
    rendered,
    subplan,
    ts_ns,
)
from rocescope.sim.facades.gnmi_server import ENCODINGS, JSON_IETF, ONCE, STREAM, capabilities, start_server

__all__ = ["GnmiFacade", "TickClock", "engine_source", "serve_switches"]

Source = Callable[[], pa.Table]
_MODELS = (
    ("openconfig-interfaces", "OpenConfig working group", "3.0.0"),
    ("openconfig-qos", "OpenConfig working group", "0.11.0"),
    ("sonic-counters-db", "SONiC", "1.0"),
)


class TickClock(Protocol):
    """Fabric time as published by a simulator driver, with a barrier its consumers acknowledge."""

    def register(self, name: str) -> int:
        """A consumer id; the driver's barrier waits for every registered consumer."""

    def unregister(self, consumer: int) -> None: ...

    def wait_tick(self, after: int, timeout_s: float) -> int | None:
        """The newest tick number once it is past `after`; None on timeout; -1 once the clock is closed."""

    def done(self, consumer: int, tick: int) -> None:
        """The consumer has finished with `tick`."""

    def view(self, device: str) -> FeedView:
        """What `device` has read so far, as of the latest tick."""


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
        device: str = "",
        dialect: str = "ideal",
        sample: str = "reads",
        send_lag_s: float = 0.0,
        device_clock: Callable[[int], int] | None = None,
    ) -> None:
        self.source = source
        self.device = device
        self.dialect = dialect
        self.sample = sample
        #: a clocked sample is sent this long after its tick's fabric time (after every read of the tick)
        self.send_lag_ns = round(send_lag_s * 1e9)
        #: fabric ns -> what the device's clock reads then (send stamps are on the device's clock)
        self.device_clock = device_clock
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
        rpcs = {"Capabilities": self._capabilities, "Get": self._get, "Set": self._set, "Subscribe": self._subscribe}
        server, self.port = start_server(
            rpcs,
            host=self.host,
            port=self.port,
            tls=self.tls,
            max_workers=self.max_workers,
            thread_name_prefix="gnmi-facade",
        )
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
        return capabilities(_MODELS)

    def _set(self, request: Any, context: Any) -> Any:
        self._auth(context)
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "the simulated fabric is read-only")

    def _sub(self, prefix: Any, path: Any, interval_ns: int = 0) -> Subscription:
        elems = path_elems(prefix) + path_elems(path)
        target = path.target or prefix.target
        family = "sonic" if is_sonic(target, elems) else "openconfig"
        interval = interval_ns / 1e9 if interval_ns else 1.0
        return Subscription(family, elems, path, max(interval, self.min_interval_s))

    def _get(self, request: Any, context: Any) -> Any:
        self._auth(context)
        table = self.source()
        leaves, ts = leaves_of(table, self.dialect), ts_ns(table)
        encoding = request.encoding if request.encoding in ENCODINGS else JSON_IETF
        out = []
        for path in request.path:
            sub = self._sub(request.prefix, path)
            out.extend(notifications(sub, leaves, ts, encoding, request.prefix.target))
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
        if sl.mode not in (STREAM, ONCE):
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "POLL subscriptions are not served")
        with self._lock:
            self.subscribes += 1
        encoding = sl.encoding if sl.encoding in ENCODINGS else JSON_IETF
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
                leaves, ts = leaves_of(table, self.dialect), ts_ns(table)
                for i in ready:
                    for n in notifications(subs[i], leaves, ts, encoding, sl.prefix.target):
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
                if sl.mode == ONCE:
                    return
            wait = min(due) - time.monotonic()
            if wait > 0:
                ended.wait(min(wait, 0.1))

    def _subscribe_ticks(
        self,
        clock: TickClock,
        sl: Any,
        subs: list[Subscription],
        encoding: int,
        ended: threading.Event,
        stopping: threading.Event,
    ) -> Iterator[Any]:
        """SAMPLE on fabric time: per published tick, each subscription sends the rows read since its last
        sample once its interval has passed (every pending row on the final tick)."""
        consumer = clock.register(f"gnmi {self.address}")
        try:
            seen = 0
            sent_tick = [0] * len(subs)  # rows read after this tick are pending
            sent_at: list[int | None] = [None] * len(subs)  # fabric time (ns) of the last sample
            plans: list[tuple[RenderPlan, npt.NDArray[np.int64]]] | None = None
            picked: dict[tuple[int, bytes], RenderPlan] = {}
            spread: npt.NDArray[np.int64] | None = None
            synced = False
            while not (ended.is_set() or stopping.is_set()):
                tick = clock.wait_tick(seen, 0.1)
                if tick is None:
                    continue
                if tick < 0:
                    return
                seen = tick
                view = clock.view(self.device)
                if plans is None:
                    made = (plan_for(s, view.layout, self.dialect) for s in subs)
                    plans = [(p, np.asarray(p.rows, np.int64)) for p in made]
                    if self.dialect == "sonic":
                        spread = view.layout.column("spread_ns").to_numpy()
                # a notification per stamp; SONiC: per read of a group (its paths' spread is inside one document)
                notes = view.stamps if spread is None else view.stamps - spread
                sent = 0
                for i, sub in enumerate(subs):
                    plan, rows = plans[i]
                    if not len(rows):
                        continue
                    step = max(1, round(sub.interval_s * 1e9))
                    last = sent_at[i]
                    due = last is None or view.ts_ns >= last + step - step // 1000
                    if self.sample != "reads":  # every path's current value at every interval, read or not
                        pending = view.read_at[rows] >= 0  # a restarted device holds none until it reads it
                        if not due or view.final or not pending.any():
                            continue
                        stamps = notes if self.sample == "current_read_stamp" else self._sent_at(view, len(notes))
                    else:
                        pending = view.read_at[rows] > sent_tick[i]
                        if not pending.any() or not (due or view.final):
                            continue
                        stamps = notes
                    sent_tick[i], sent_at[i] = tick, view.ts_ns
                    for n in self._sample(sub, i, plan, rows, pending, stamps, view.values, encoding, sl, picked):
                        yield pb.SubscribeResponse(update=n)
                    sent += int(pending.sum())
                with self._lock:
                    self.values_sent += sent
                if not synced:
                    synced = True
                    yield pb.SubscribeResponse(sync_response=True)
                clock.done(consumer, tick)  # grpc asked for more: the tick's messages went to the transport
                if sl.mode == ONCE:
                    return
        finally:
            clock.unregister(consumer)

    def _sent_at(self, view: FeedView, n: int) -> npt.NDArray[np.int64]:
        """Every row stamped with the send time on the device's clock: the tick's fabric time plus the lag after
        its reads."""
        sent = view.ts_ns + self.send_lag_ns
        return np.full(n, sent if self.device_clock is None else self.device_clock(sent), np.int64)

    def _sample(
        self,
        sub: Subscription,
        i: int,
        plan: RenderPlan,
        rows: npt.NDArray[np.int64],
        pending: npt.NDArray[np.bool_],
        notes: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
        encoding: int,
        sl: Any,
        picked: dict[tuple[int, bytes], RenderPlan],
    ) -> list[Any]:
        """The notifications of one sample: the pending rows, one notification (or SONiC document) per stamp."""
        stamps = notes[rows]
        out: list[Any] = []
        together = self.dialect != "ideal"  # a profile's device sends each stamp's leaves in one notification
        if pending.all() and (stamps == stamps[0]).all():
            out = rendered(sub, plan, values, int(stamps[0]), encoding, sl.prefix.target, together)
        else:
            picks = np.flatnonzero(pending)
            for stamp in np.unique(stamps[picks]):
                sel = picks[stamps[picks] == stamp]
                key = (i, sel.tobytes())
                part = picked.get(key)
                if part is None:
                    part = subplan(plan, sel.tolist())
                    if len(picked) < 4096:
                        picked[key] = part
                out += rendered(sub, part, values, int(stamp), encoding, sl.prefix.target, together)
        with self._lock:
            self.notifications += len(out)
        return out


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
