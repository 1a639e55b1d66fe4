"""gNMI collector: Subscribe STREAM/SAMPLE to switches, decode Notifications straight into `counters` Batches.

Per target (one switch) the collector opens one Subscribe stream per gNMI `target` name its paths use
(`GnmiTarget.groups`), each a list of SAMPLE subscriptions, on its own thread. A stream that fails or
stalls (a half-dead TCP connection never errors: a watchdog cancels a stream quiet for `stall_s`) is
reopened with bounded exponential backoff (with jitter). `health()` says per target whether every stream
is connected (down since when), synced, last update, failed streams and reconnects; `GnmiMetrics`
counts the same.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from rocescope.collectors.common.health import NONNUMERIC, STALE, CollectorMetrics, Health, Targets
from rocescope.collectors.gnmi.decode import LOGGED_PROBLEMS, MAX_STALE_S, DecodeStats, GnmiDecoder
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.gnmi.targets import ENCODINGS, GnmiPath, GnmiTarget
from rocescope.errors import DecodeError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer

__all__ = ["GnmiCollector", "GnmiMetrics"]

log = logging.getLogger(__name__)

_SUBSCRIBE = "/gnmi.gNMI/Subscribe"


class GnmiMetrics(CollectorMetrics):
    """`rocescope_gnmi_*`: the standard per-target set, read for streams (`target_up`: every stream of the
    target is open; `poll_failures`: streams that failed; `last_success_timestamp_seconds`: the last
    notification), plus what only streams have."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__("gnmi", registry)
        r, t = self.registry, ["target"]
        self.reconnects = Counter("rocescope_gnmi_reconnects", "Streams reopened after a failure.", t, registry=r)
        self.sync_seconds = Gauge(
            "rocescope_gnmi_sync_seconds", "From a Subscribe to the target's first full sample.", t, registry=r
        )
        self.responses = Counter("rocescope_gnmi_responses", "SubscribeResponses received.", t, registry=r)
        self.batches = Counter("rocescope_gnmi_batches", "Batches handed to the producer.", registry=r)


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
            prefix=pb.Path(target=self.gnmi_target), mode=0, encoding=ENCODINGS[self.target.encoding]
        )
        for p in self.paths:
            sub = sub_list.subscription.add(mode=2, sample_interval=int(p.interval * 1e9))
            sub.path.CopyFrom(parse_path(p.path, origin=p.origin))
        return pb.SubscribeRequest(subscribe=sub_list)

    def _problem(self, what: str) -> None:
        self._problems += 1
        if self._problems <= LOGGED_PROBLEMS:
            tail = "" if self._problems < LOGGED_PROBLEMS else " (further ones are logged at debug)"
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
                owner._stream_failed(self.target.name, error)
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
        d_stale = s.stale - seen.stale
        m.responses.labels(name).inc(s.responses - seen.responses)
        m.count_values(name, d_values, d_unknown, self.owner.keep_unknown, {NONNUMERIC: d_text, STALE: d_stale})
        if d_bad:
            m.malformed.labels(name).inc(d_bad)
        if s.clock_resets != seen.clock_resets:
            log.warning(
                "gnmi %s: %d values stamped over %g s before the previous of their series: the device's clock was "
                "set back; its series go on from there", name, s.clock_resets - seen.clock_resets, MAX_STALE_S,
            )  # fmt: skip
        if s.notifications != seen.notifications or s.syncs != seen.syncs:
            self.owner._updated(name, d_values, d_unknown, d_bad, synced=s.syncs > 0, stale=d_stale)
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
        self._lock = threading.Lock()  # streams report from their own threads
        self._targets = Targets(self.metrics, log, keep_unknown=keep_unknown)
        for t in targets:
            self._targets.health[t.name] = Health(t.name, connected=False, synced=False)
        self._subscribed_at: dict[str, float] = {}  # monotonic time of each target's latest Subscribe
        self._streams = [_Stream(self, t, g, ps) for t in targets for g, ps in t.groups().items()]
        self._last_flush: dict[str, float] = {}
        self._stalled: dict[str, bool] = {}
        self._collected: list[Batch] | None = None

    # --- public views
    def health(self) -> dict[str, Health]:
        """A snapshot of every target's health (`failures` counts failed streams)."""
        with self._lock:
            return {name: replace(h) for name, h in self._targets.health.items()}

    # --- callbacks from streams
    def _stream_state(self, name: str) -> None:
        up = all(s.open for s in self._streams if s.target.name == name)
        with self._lock:
            h = self._targets[name]
            h.connected = up
            if up:
                h.down_since_ts = None
            elif h.down_since_ts is None:  # the first attempt or stream that ended: down from now
                h.down_since_ts = time.time()
        self.metrics.up.labels(name).set(1 if up else 0)

    def _stream_failed(self, name: str, error: str) -> None:
        """A failed stream: counted, and logged once per new error (the stream reconnects with backoff)."""
        with self._lock:
            self._targets.failed(name, error)

    def _subscribed(self, name: str) -> None:
        with self._lock:
            self._subscribed_at[name] = time.monotonic()

    def _count_reconnect(self, name: str) -> None:
        with self._lock:
            self._targets[name].reconnects += 1
        self.metrics.reconnects.labels(name).inc()

    def _updated(
        self, name: str, values: int, unknown: int, malformed: int, synced: bool, touch: bool = True, stale: int = 0
    ) -> None:
        """Data came (`touch`: a notification or sync; else only malformed data): a streaming target's success."""
        now = time.time()
        with self._lock:
            h = self._targets[name]
            h.values += values
            h.stale += stale
            h.unknown += unknown
            h.malformed += malformed
            took = None
            if synced and not h.synced and name in self._subscribed_at:
                took = h.sync_seconds = time.monotonic() - self._subscribed_at[name]
            h.synced = h.synced or synced
            if touch:
                h.last_update_ts = h.last_success_ts = now
                h.consecutive_failures = 0
                if h.last_error is not None:
                    log.warning("gnmi %s: streaming again", name)
                h.last_error = None
        if took is not None:
            self.metrics.sync_seconds.labels(name).set(took)
        if touch:
            self.metrics.last_success.labels(name).set(now)

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
            for h in self._targets.health.values():
                if not h.synced and h.last_error is None:
                    h.last_error = f"no complete sample within {timeout_s:g} s"
        return out
