"""SNMP collector: IF-MIB port counters and PFC counters of many switches, one `counters` Batch per poll.

Per device and poll, ONE multi-column walk (see `agent.py`) reads the default port columns and the
optional ones (`objects.py`), which `normalize.py` turns into rows: role `switch`, source `snmp`, one
timestamp per poll (the middle of the walk).

* ifHighSpeed is a "slow" object: a gauge that moves only when a link renegotiates, so it is read with
  the first poll and then every `slow_every` polls (default 6: once a minute at 10 s), which saves a
  twelfth of the values a 10 s poll decodes (`slow_every=1` reads it every poll);
* "optional" objects, by default IEEE8021-PFC-MIB ieee8021PfcRequests/ieee8021PfcIndications: a device
  with no rows for one is marked unsupported for it (counted once, logged at debug) and asked again
  only every `probe_every` polls;
* ifIndex -> name: walked with the first poll, again every `names_every` polls, and at once when a poll
  meets an ifIndex it cannot name (then the index is remembered as nameless until the next periodic
  refresh, so a device with nameless rows does not walk its names every poll).

Many devices: `poll_all()` polls every device concurrently (at most `concurrency` in flight), each
bounded by its own timeout x tries and a per-poll deadline; `arun()`/`run()` give each device its own
fixed-cadence loop (start times spread over the interval) and publish each Batch the moment it is
ready, so a dead device never delays the others. Each device is a target of the common `Targets`:
`health()` tells up/down, last success and consecutive failures per device, a new problem is one log
line, and `SnmpMetrics` exports the same as `rocescope_snmp_*` self-metrics (label `target`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge

from rocescope.collectors.common.health import NONNUMERIC, CollectorMetrics, Health, Targets
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.snmp.agent import (
    V3,
    EnginePool,
    PysnmpAgent,
    SnmpAgent,
    SnmpError,
    V2c,
    run_sync,
)
from rocescope.collectors.snmp.normalize import ColumnIndex, SnmpRows, names_from, normalize
from rocescope.collectors.snmp.objects import DEFAULT_OPTIONAL, DEFAULT_SLOW, NAME_OBJECTS, OBJECTS, default_objects
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer

__all__ = ["AgentFactory", "SnmpCollector", "SnmpDevice", "SnmpMetrics", "live_agent"]

log = logging.getLogger(__name__)

_ROLE = "switch"
_SOURCE = "snmp"


@dataclass(frozen=True)
class SnmpDevice:
    """One switch to poll. `name` is the `device` column; `auth` is V2c(community) or V3(user, ...)."""

    name: str
    host: str
    port: int = 161
    auth: V2c | V3 = field(default_factory=lambda: V2c("public"))
    timeout_s: float = 2.0
    retries: int = 1
    max_repetitions: int = 25
    #: Cap on one whole poll (all its requests); default: 4 x timeout x tries.
    poll_deadline_s: float | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.host:
            raise ValueError("an SNMP device needs a name and a host")
        if not 0 < self.port < 65536:
            raise ValueError(f"{self.name}: port {self.port} out of range")
        if self.timeout_s <= 0 or self.retries < 0 or self.max_repetitions < 1:
            raise ValueError(f"{self.name}: timeout_s must be > 0, retries >= 0, max_repetitions >= 1")

    @classmethod
    def from_mapping(cls, spec: Mapping[str, object]) -> SnmpDevice:
        """A device from a config entry: name, host, port, version (`v2c` default, or `v3`), community
        (v2c), user/auth_key/priv_key/auth_protocol/priv_protocol (v3), timeout_s, retries,
        max_repetitions, poll_deadline_s. Raises ValueError naming what is wrong."""
        known = {
            *("name", "host", "port", "version", "community", "user", "auth_key", "priv_key"),
            *("auth_protocol", "priv_protocol", "timeout_s", "retries", "max_repetitions", "poll_deadline_s"),
        }
        extra = sorted(set(spec) - known)
        if extra:
            raise ValueError(f"SNMP device {spec.get('name')!r}: unknown key(s) {extra}")
        version = str(spec.get("version", "v2c")).lower()
        auth: V2c | V3
        if version in ("v2c", "2c", "2"):
            auth = V2c(str(spec.get("community", "public")))
        elif version in ("v3", "3"):
            if "user" not in spec or "auth_key" not in spec:
                raise ValueError(f"SNMP device {spec.get('name')!r}: v3 needs `user` and `auth_key`")
            priv = spec.get("priv_key")
            auth = V3(
                str(spec["user"]),
                str(spec["auth_key"]),
                None if priv is None else str(priv),
                auth_protocol=str(spec.get("auth_protocol", "sha")),  # type: ignore[arg-type]
                priv_protocol=str(spec.get("priv_protocol", "aes128")),  # type: ignore[arg-type]
            )
        else:
            raise ValueError(f"SNMP device {spec.get('name')!r}: version must be v2c or v3, not {version!r}")

        def number(key: str, default: float) -> float:
            value = spec.get(key, default)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"SNMP device {spec.get('name')!r}: {key} must be a number")
            return float(value)

        deadline = spec.get("poll_deadline_s")
        return cls(
            name=str(spec.get("name", "")),
            host=str(spec.get("host", "")),
            port=int(number("port", 161)),
            auth=auth,
            timeout_s=number("timeout_s", 2.0),
            retries=int(number("retries", 1)),
            max_repetitions=int(number("max_repetitions", 25)),
            poll_deadline_s=None if deadline is None else number("poll_deadline_s", 0),
        )

    @property
    def deadline_s(self) -> float:
        if self.poll_deadline_s is not None:
            return self.poll_deadline_s
        return 4 * self.timeout_s * (self.retries + 1)


class SnmpMetrics(CollectorMetrics):
    """`rocescope_snmp_*`: the standard per-target self-metrics, plus what only SNMP has."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__("snmp", registry)
        r, t = self.registry, ["target"]
        self.cpu_seconds = Counter(
            "rocescope_snmp_cpu_seconds", "CPU time of the collector's event-loop thread.", registry=r
        )
        self.nameless = Counter(
            "rocescope_snmp_nameless_ifindex", "Rows whose ifIndex has no ifName/ifDescr.", t, registry=r
        )
        self.name_walks = Counter("rocescope_snmp_name_walks", "ifIndex -> name refreshes.", t, registry=r)
        self.unsupported = Gauge(
            "rocescope_snmp_unsupported_object",
            "1 when the device has no rows for an optional object (e.g. IEEE8021-PFC-MIB).",
            ["target", "object"],
            registry=r,
        )
        self.consecutive_failures = Gauge(
            "rocescope_snmp_consecutive_failures", "Failed polls in a row.", t, registry=r
        )


@dataclass
class _State:
    device: SnmpDevice
    agent: SnmpAgent | None = None
    names: dict[int, str] | None = None
    nameless: set[int] = field(default_factory=set)
    polls_since_names: int = 0
    unsupported: set[str] = field(default_factory=set)
    polls_since_probe: int = 0
    polls_since_slow: int | None = None  # None: never polled them yet


AgentFactory = Callable[[SnmpDevice, EnginePool], SnmpAgent]


def live_agent(device: SnmpDevice, engines: EnginePool) -> SnmpAgent:
    """The default agent factory: pysnmp over UDP, sharing engines across devices."""
    return PysnmpAgent(
        device.host,
        device.port,
        device.auth,
        timeout_s=device.timeout_s,
        retries=device.retries,
        max_repetitions=device.max_repetitions,
        engines=engines,
    )


class SnmpCollector:
    """Polls many SNMP devices into one `counters` Batch per device poll.

    Async API: `poll_device(name)`, `poll_all()`, `arun(interval_s, stop)`, `aclose()`; sync wrappers
    `poll_once()` and `run(interval_s, stop_event)` run their own event loop. Agents (and pysnmp's
    sockets) live in the loop that first used them and are closed by `aclose()`.
    """

    def __init__(
        self,
        devices: Sequence[SnmpDevice],
        producer: Producer | None = None,
        *,
        objects: Sequence[str] | None = None,
        optional_objects: Sequence[str] = DEFAULT_OPTIONAL,
        keep_unknown: bool = True,
        concurrency: int = 64,
        names_every: int = 30,
        probe_every: int = 30,
        slow_objects: Sequence[str] = DEFAULT_SLOW,
        slow_every: int = 6,
        agent_factory: AgentFactory = live_agent,
        metrics: SnmpMetrics | None = None,
    ):
        names = [d.name for d in devices]
        if len(set(names)) != len(names):
            raise ValueError("device names must be unique")
        unknown = [n for n in (*(objects or ()), *optional_objects) if n not in OBJECTS]
        if unknown:
            raise ValueError(f"unknown SNMP object(s) {unknown}; known: {sorted(OBJECTS)}")
        self.devices = {d.name: d for d in devices}
        self.producer = producer
        self.objects = tuple(objects) if objects is not None else default_objects()
        self.optional_objects = tuple(o for o in optional_objects if o not in self.objects)
        self.keep_unknown = keep_unknown
        self.concurrency = concurrency
        self.names_every = max(1, names_every)
        self.probe_every = max(1, probe_every)
        self.slow_objects = tuple(o for o in slow_objects if o in self.objects)
        self.slow_every = max(1, slow_every)
        self.agent_factory = agent_factory
        self.metrics = metrics or SnmpMetrics()
        self.targets = Targets(self.metrics, log, keep_unknown=keep_unknown)
        self.targets.add(*names)
        self._columns = ColumnIndex(
            [OBJECTS[n] for n in (*self.objects, *self.optional_objects)], keep_unknown=keep_unknown
        )
        self._name_roots = [OBJECTS[n].oid for n in NAME_OBJECTS]
        self._states = {d.name: _State(d) for d in devices}
        self._engines: EnginePool | None = None
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- public views
    def health(self) -> dict[str, Health]:
        """A snapshot of every device's health (copies: later polls do not change them)."""
        return {name: dataclasses.replace(self.targets[name]) for name in self._states}

    def names(self, device: str) -> dict[int, str]:
        """The cached ifIndex -> name map of a device (empty before its first successful poll)."""
        return dict(self._states[device].names or {})

    def unsupported(self, device: str) -> set[str]:
        """Optional objects the device had no rows for at the last probe."""
        return set(self._states[device].unsupported)

    # --- loop-bound resources
    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Agents and engines of another (finished) loop cannot be used here: start afresh.
            for st in self._states.values():
                st.agent = None
            self._engines = EnginePool()
            self._sem = asyncio.Semaphore(self.concurrency)
            self._loop = loop

    def _agent(self, st: _State) -> SnmpAgent:
        if st.agent is None:
            assert self._engines is not None
            st.agent = self.agent_factory(st.device, self._engines)
        return st.agent

    async def aclose(self) -> None:
        """Close every agent and pysnmp engine (their sockets)."""
        for st in self._states.values():
            if st.agent is not None:
                try:
                    await st.agent.close()
                except Exception as exc:  # closing must never fail the caller
                    log.debug("snmp %s: closing the agent failed: %s", st.device.name, exc)
                st.agent = None
        if self._engines is not None:
            self._engines.close()
        self._engines = None
        self._loop = None

    # --- polling
    async def poll_device(self, name: str) -> Batch | None:
        """Poll one device; its Batch, or None when the poll failed (see `health()`)."""
        self._bind_loop()
        st = self._states[name]
        assert self._sem is not None
        async with self._sem:
            wall0 = time.perf_counter()
            try:
                batch, rows = await asyncio.wait_for(self._poll(st), st.device.deadline_s)
            except TimeoutError:
                self._failed(st, f"poll did not finish within its {st.device.deadline_s:g} s deadline", wall0)
                return None
            except SnmpError as exc:
                self._failed(st, str(exc), wall0)
                return None
            except Exception as exc:  # a library bug or a response it cannot digest: this device only
                log.debug("snmp %s: poll raised", name, exc_info=True)
                self._failed(st, f"{type(exc).__name__}: {exc}", wall0)
                return None
            elapsed = time.perf_counter() - wall0
            skipped = {NONNUMERIC: rows.nonnumeric}
            self.targets.succeeded(name, elapsed, len(rows), rows.unknown, rows.malformed, skipped=skipped)
            self.metrics.poll_seconds.observe(elapsed)
            self.metrics.consecutive_failures.labels(name).set(0)
            return batch

    async def poll_all(self) -> dict[str, Batch | None]:
        """Poll every device once, concurrently; device name -> Batch (None where the poll failed)."""
        names = list(self._states)
        results = await asyncio.gather(*(self.poll_device(n) for n in names))
        return dict(zip(names, results, strict=True))

    def poll_once(self) -> dict[str, Batch | None]:
        """`poll_all()` in an event loop of its own (for `--once` and scripts)."""

        async def once() -> dict[str, Batch | None]:
            try:
                return await self.poll_all()
            finally:
                await self.aclose()

        return run_sync(once())

    async def _poll(self, st: _State) -> tuple[Batch, CounterRows]:
        agent = self._agent(st)
        dev = st.device.name
        refresh = st.names is None or st.polls_since_names >= self.names_every
        probe = st.polls_since_probe >= self.probe_every
        if probe:
            st.polls_since_probe = 0
        optional = [o for o in self.optional_objects if probe or o not in st.unsupported]
        slow_due = st.polls_since_slow is None or st.polls_since_slow + 1 >= self.slow_every
        objects = self.objects if slow_due else [o for o in self.objects if o not in self.slow_objects]
        roots = [OBJECTS[o].oid for o in (*objects, *optional)]
        if refresh:
            roots += self._name_roots
        t0 = time.time_ns()
        walked = await agent.walk(roots)
        ts_ns = (t0 + time.time_ns()) // 2
        if refresh:
            self._set_names(st, names_from(walked))
        else:
            st.polls_since_names += 1
        st.polls_since_probe += 1
        st.polls_since_slow = 0 if slow_due else (st.polls_since_slow or 0) + 1
        norm = normalize(walked, self._columns)
        names = st.names or {}
        unnamed = {i for i in set(norm.ifindex) if i not in names}
        if unnamed - st.nameless and not refresh:  # a new interface: learn its name now
            self._set_names(st, names_from(await agent.walk(self._name_roots)))
            names = st.names or {}
            unnamed = {i for i in unnamed if i not in names}
        new = unnamed - st.nameless
        if new:  # remembered until the next periodic refresh, so they do not trigger a name walk per poll
            st.nameless |= new
            log.info(
                "snmp %s: %d ifIndex(es) have no ifName/ifDescr (e.g. %s); their rows use port `ifIndex:<n>`",
                dev,
                len(new),
                min(new),
            )
        self._track_optional(st, optional, norm)
        nameless_rows = sum(1 for i in norm.ifindex if i not in names)
        if nameless_rows:
            self.metrics.nameless.labels(dev).inc(nameless_rows)
        counters = norm.name_ports(ts_ns, names)
        return counters.to_batch(dev, _ROLE, _SOURCE), counters

    def _set_names(self, st: _State, names: dict[int, str]) -> None:
        st.names = names
        st.polls_since_names = 0
        st.nameless.clear()
        self.metrics.name_walks.labels(st.device.name).inc()

    def _track_optional(self, st: _State, asked: Sequence[str], norm: SnmpRows) -> None:
        for name in asked:
            if norm.seen.get(name):
                if name in st.unsupported:
                    st.unsupported.discard(name)
                    self.metrics.unsupported.labels(st.device.name, name).set(0)
            elif name not in st.unsupported:
                st.unsupported.add(name)  # counted once; asked again every `probe_every` polls
                self.metrics.unsupported.labels(st.device.name, name).set(1)
                log.debug("snmp %s: no %s rows; asking again in %d polls", st.device.name, name, self.probe_every)

    def _failed(self, st: _State, problem: str, wall0: float) -> None:
        """A failed poll: one log line per new problem, naming the agent where the problem does not."""
        elapsed = time.perf_counter() - wall0
        agent = st.agent.description if st.agent is not None else f"udp:{st.device.host}:{st.device.port}"
        where = "" if problem.startswith(agent) else f"{agent}: "
        h = self.targets.failed(st.device.name, f"poll failed: {where}{problem}", elapsed)
        self.metrics.poll_seconds.observe(elapsed)
        self.metrics.consecutive_failures.labels(st.device.name).set(h.consecutive_failures)

    # --- the loops
    def _publish(self, batch: Batch) -> None:
        if self.producer is None:
            return
        try:
            self.producer.publish(batch)
        except Exception as exc:  # any transport failure: count it, keep polling
            self.metrics.publish_errors.inc()
            log.warning("snmp %s: publishing a batch of %d rows failed: %s", batch.key, batch.num_rows, exc)

    async def _device_loop(self, name: str, interval_s: float, offset_s: float, stop: asyncio.Event) -> int:
        loop = asyncio.get_running_loop()
        polls = 0
        next_tick = loop.time() + offset_s
        while not stop.is_set():
            delay = next_tick - loop.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(stop.wait(), delay)
                    break
                except TimeoutError:
                    pass
            poll = asyncio.create_task(self.poll_device(name))
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait((poll, stopped), return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not poll.done():  # stopping: do not wait out a dead device's timeout
                poll.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poll
                break
            batch = poll.result()
            polls += 1
            if batch is not None:
                self._publish(batch)
            next_tick += interval_s
            now = loop.time()
            if now > next_tick:
                missed = int((now - next_tick) // interval_s) + 1
                self.metrics.overruns.labels(name).inc(missed)
                next_tick += missed * interval_s
        return polls

    async def _cpu_meter(self, stop: asyncio.Event) -> None:
        last = time.thread_time()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            now = time.thread_time()
            self.metrics.cpu_seconds.inc(max(0.0, now - last))
            last = now

    async def arun(self, interval_s: float, stop: asyncio.Event, spread: bool = True) -> int:
        """Poll every device every `interval_s` until `stop` is set, publishing each Batch as soon as it is
        ready; returns the number of device polls that ended. Start times are spread over one interval
        (`spread`); polls still in flight when `stop` is set are abandoned."""
        self._bind_loop()
        names = list(self._states)
        step = interval_s / len(names) if spread and names else 0.0
        meter = asyncio.create_task(self._cpu_meter(stop))
        loops = [asyncio.create_task(self._device_loop(n, interval_s, i * step, stop)) for i, n in enumerate(names)]
        try:
            counts = await asyncio.gather(*loops)
        finally:
            for task in (*loops, meter):
                task.cancel()
            await asyncio.gather(*loops, meter, return_exceptions=True)
        return sum(counts)

    def run(self, interval_s: float, stop_event: threading.Event) -> int:
        """`arun()` in an event loop of its own, stopped by a threading.Event (the CLI's signal handlers)."""

        async def main() -> int:
            stop = asyncio.Event()

            async def watch() -> None:
                while not stop_event.is_set():
                    await asyncio.sleep(0.1)
                stop.set()

            watcher = asyncio.create_task(watch())
            try:
                return await self.arun(interval_s, stop)
            finally:
                watcher.cancel()
                await self.aclose()

        return run_sync(main())
