"""SNMP collector: IF-MIB port counters and PFC counters of many switches, one `counters` Batch per poll.

Per device and poll, ONE multi-column walk (see `snmp_agent`) reads:

* IF-MIB ifXTable 64-bit counters: ifHCInOctets, ifHCOutOctets, ifHCInUcastPkts, ifHCOutUcastPkts
  (plus the multicast/broadcast columns when the catalog maps them to a metric), ifTable
  ifInDiscards/ifOutDiscards/ifInErrors/ifOutErrors, ifOperStatus (-> `oper_up` 1/0) and
  ifHighSpeed (Mb/s, scaled to `port_speed_bps` by the catalog);
* ifHighSpeed is a "slow" object: a gauge that moves only when a link renegotiates, so it is read with
  the first poll and then every `slow_every` polls (default 6: once a minute at 10 s), which saves a
  twelfth of the values a 10 s poll decodes (`slow_every=1` reads it every poll);
* "optional" objects, by default IEEE8021-PFC-MIB ieee8021PfcRequests/ieee8021PfcIndications
  (per interface, all priorities together). A device with no rows for an optional object is
  marked unsupported for it (counted once, logged at debug) and asked again only every
  `probe_every` polls.

Vendor per-priority tables (CISCO-PFC-EXT, ARISTA-PFC, MELLANOX-QOS, indexed by ifIndex.priority)
and EtherLike pause counters are known (`OBJECTS`) and can be added by name; their priority column
comes from the row index. Any object whose name the catalog does not know is kept as metric
`raw:<name>` (or dropped with `keep_unknown=False`).

Rows: role `switch`, source `snmp`, port = ifName (ifDescr where the agent has no ifName, and
`ifIndex:<n>` for an index the agent names nowhere), raw_name = the MIB object name, metric and
scale from `rocescope.catalog` (vendor `snmp`), priority -1 or the index's priority. All rows of a
poll share one timestamp: the middle of the walk.

ifIndex -> name: walked with the first poll, again every `names_every` polls, and at once when a
poll meets an ifIndex it cannot name (then the index is remembered as nameless until the next
periodic refresh, so a device with nameless rows does not walk its names every poll).

Many devices: `poll_all()` polls every device concurrently (at most `concurrency` in flight), each
bounded by its own timeout x tries and a per-poll deadline; `arun()`/`run()` give each device its own
fixed-cadence loop (start times spread over the interval) and publish each Batch the moment it is
ready, so a dead device never delays the others. A failure streak logs one warning when it starts
and one line when the device answers again; `health()` tells up/down, last success and consecutive
failures per device, and `SnmpMetrics` exports the same as Prometheus self-metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from rocescope import catalog
from rocescope.collectors.snmp.agent import (
    V3,
    EnginePool,
    Oid,
    PysnmpAgent,
    SnmpAgent,
    SnmpAuthError,
    SnmpError,
    SnmprecAgent,
    SnmpTimeout,
    V2c,
    Value,
    parse_oid,
    run_sync,
)
from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.metrics import SelfMetrics
from rocescope.pipeline.transport import Producer

__all__ = [
    "DEFAULT_OBJECTS",
    "DEFAULT_OPTIONAL",
    "DEFAULT_SLOW",
    "NAME_OBJECTS",
    "OBJECTS",
    "UNKNOWN_PREFIX",
    "V3",
    "DeviceHealth",
    "SnmpAgent",
    "SnmpAuthError",
    "SnmpCollector",
    "SnmpDevice",
    "SnmpError",
    "SnmpMetrics",
    "SnmpObject",
    "SnmpTimeout",
    "SnmprecAgent",
    "V2c",
    "normalize",
]

log = logging.getLogger(__name__)

#: Metric of an object the catalog does not know: `raw:<name>` (the NIC collector's convention).
UNKNOWN_PREFIX = "raw:"
_ROLE = "switch"
_SOURCE = "snmp"
_VENDOR = "snmp"
_OPER_STATUS = "ifOperStatus"
_OPER_UP = 1
_OPER_UNKNOWN = 4  # ifOperStatus unknown(4): no row, like the NIC collector's `unknown` operstate


@dataclass(frozen=True)
class SnmpObject:
    """A MIB table column the collector can poll: its name (kept as raw_name), OID and row index."""

    name: str
    oid: Oid
    #: `ifIndex`: the row index is the ifIndex; `ifIndex.priority`: ifIndex then a priority/queue index.
    index: Literal["ifIndex", "ifIndex.priority"] = "ifIndex"


def _obj(name: str, oid: str, index: Literal["ifIndex", "ifIndex.priority"] = "ifIndex") -> SnmpObject:
    return SnmpObject(name, parse_oid(oid), index)


_IF = "1.3.6.1.2.1.2.2.1"
_IFX = "1.3.6.1.2.1.31.1.1.1"
_PP: Literal["ifIndex.priority"] = "ifIndex.priority"
#: Every object the collector knows, by MIB object name. OIDs from the MIB files in
#: tests/fixtures/realdata/05_snmp (see pfc_qos_mib_oid_table.tsv) and RFC 2863 / RFC 3635.
OBJECTS: Mapping[str, SnmpObject] = {
    o.name: o
    for o in (
        _obj("ifDescr", f"{_IF}.2"),
        _obj("ifOperStatus", f"{_IF}.8"),
        _obj("ifInDiscards", f"{_IF}.13"),
        _obj("ifInErrors", f"{_IF}.14"),
        _obj("ifOutDiscards", f"{_IF}.19"),
        _obj("ifOutErrors", f"{_IF}.20"),
        _obj("ifName", f"{_IFX}.1"),
        _obj("ifHCInOctets", f"{_IFX}.6"),
        _obj("ifHCInUcastPkts", f"{_IFX}.7"),
        _obj("ifHCInMulticastPkts", f"{_IFX}.8"),
        _obj("ifHCInBroadcastPkts", f"{_IFX}.9"),
        _obj("ifHCOutOctets", f"{_IFX}.10"),
        _obj("ifHCOutUcastPkts", f"{_IFX}.11"),
        _obj("ifHCOutMulticastPkts", f"{_IFX}.12"),
        _obj("ifHCOutBroadcastPkts", f"{_IFX}.13"),
        _obj("ifHighSpeed", f"{_IFX}.15"),
        # EtherLike-MIB dot3PauseTable (dot3StatsIndex = ifIndex)
        _obj("dot3InPauseFrames", "1.3.6.1.2.1.10.7.10.1.3"),
        _obj("dot3OutPauseFrames", "1.3.6.1.2.1.10.7.10.1.4"),
        # IEEE8021-PFC-MIB ieee8021PfcIfTable (AUGMENTS ifEntry)
        _obj("ieee8021PfcRequests", "1.3.111.2.802.1.1.21.1.1.1.2"),
        _obj("ieee8021PfcIndications", "1.3.111.2.802.1.1.21.1.1.1.3"),
        # CISCO-PFC-EXT-MIB (also served by SONiC's snmpagent)
        _obj("cpfcIfRequests", "1.3.6.1.4.1.9.9.813.1.1.1.1"),
        _obj("cpfcIfIndications", "1.3.6.1.4.1.9.9.813.1.1.1.2"),
        _obj("cpfcIfPriorityRequests", "1.3.6.1.4.1.9.9.813.1.2.1.2", _PP),
        _obj("cpfcIfPriorityIndications", "1.3.6.1.4.1.9.9.813.1.2.1.3", _PP),
        # ARISTA-PFC-MIB
        _obj("aristaPfcPriorityRequests", "1.3.6.1.4.1.30065.3.11.1.1.1.3", _PP),
        _obj("aristaPfcPriorityIndications", "1.3.6.1.4.1.30065.3.11.1.1.1.4", _PP),
        # MELLANOX-QOS-MIB mellanoxQoSPFCTable (INDEX ifIndex, PFC queue)
        _obj("mellanoxQoSPFCRxPausePkts", "1.3.6.1.4.1.33049.15.1.2.1.3", _PP),
        _obj("mellanoxQoSPFCRxPauseDuration", "1.3.6.1.4.1.33049.15.1.2.1.4", _PP),
        _obj("mellanoxQoSPFCTxPausePkts", "1.3.6.1.4.1.33049.15.1.2.1.5", _PP),
        _obj("mellanoxQoSPFCTxPauseDuration", "1.3.6.1.4.1.33049.15.1.2.1.6", _PP),
    )
}

#: Columns that name an ifIndex (ifName first: it wins where both exist).
NAME_OBJECTS: tuple[str, ...] = ("ifName", "ifDescr")
_ALWAYS = (
    "ifHCInOctets",
    "ifHCOutOctets",
    "ifHCInUcastPkts",
    "ifHCOutUcastPkts",
    "ifInDiscards",
    "ifOutDiscards",
    "ifInErrors",
    "ifOutErrors",
    "ifOperStatus",
    "ifHighSpeed",
)
_CASTS = ("ifHCInMulticastPkts", "ifHCInBroadcastPkts", "ifHCOutMulticastPkts", "ifHCOutBroadcastPkts")


def default_objects() -> tuple[str, ...]:
    """The port columns polled by default: the IF-MIB set, plus the multicast/broadcast columns the
    catalog maps to a metric (read at call time, so a catalog that learns them is picked up)."""
    return _ALWAYS + tuple(n for n in _CASTS if catalog.resolve(_VENDOR, n) is not None)


DEFAULT_OBJECTS: tuple[str, ...] = default_objects()
DEFAULT_OPTIONAL: tuple[str, ...] = ("ieee8021PfcRequests", "ieee8021PfcIndications")
#: Gauges that change only when a link renegotiates: polled with the first poll and every `slow_every`.
DEFAULT_SLOW: tuple[str, ...] = ("ifHighSpeed",)


# --- devices and health --------------------------------------------------------------------------


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


@dataclass
class DeviceHealth:
    """What the collector knows about one device's reachability."""

    device: str
    up: bool | None = None  # None until the first poll ends
    last_success_ts: float | None = None  # epoch seconds
    last_attempt_ts: float | None = None
    consecutive_failures: int = 0
    down_since_ts: float | None = None
    last_error: str | None = None
    last_poll_s: float = 0.0
    polls: int = 0
    failures: int = 0


class SnmpMetrics(SelfMetrics):
    """Self-metrics of one SNMP collector, in its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r = self.registry
        self.polls = Counter("rocescope_snmp_polls", "Device polls that produced a batch.", ["device"], registry=r)
        self.failures = Counter("rocescope_snmp_poll_failures", "Device polls that failed.", ["device"], registry=r)
        self.poll_seconds = Histogram(
            "rocescope_snmp_poll_seconds",
            "Wall time of one device poll (successful or not).",
            registry=r,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.cpu_seconds = Counter(
            "rocescope_snmp_cpu_seconds", "CPU time of the collector's event-loop thread.", registry=r
        )
        self.values = Counter("rocescope_snmp_values", "Values shipped.", ["device"], registry=r)
        self.unknown_values = Counter(
            "rocescope_snmp_unknown_values", "Values of objects the catalog does not know.", ["device"], registry=r
        )
        self.malformed = Counter(
            "rocescope_snmp_malformed_values", "Rows skipped: wrong value type or index.", ["device"], registry=r
        )
        self.nameless = Counter(
            "rocescope_snmp_nameless_ifindex", "Rows whose ifIndex has no ifName/ifDescr.", ["device"], registry=r
        )
        self.name_walks = Counter("rocescope_snmp_name_walks", "ifIndex -> name refreshes.", ["device"], registry=r)
        self.unsupported = Gauge(
            "rocescope_snmp_unsupported_object",
            "1 when the device has no rows for an optional object (e.g. IEEE8021-PFC-MIB).",
            ["device", "object"],
            registry=r,
        )
        self.up = Gauge(
            "rocescope_snmp_device_up", "1 when the last poll of the device worked.", ["device"], registry=r
        )
        self.last_success = Gauge(
            "rocescope_snmp_last_success_timestamp_seconds", "When the device last answered.", ["device"], registry=r
        )
        self.consecutive_failures = Gauge(
            "rocescope_snmp_consecutive_failures", "Failed polls in a row.", ["device"], registry=r
        )
        self.publish_errors = Counter("rocescope_snmp_publish_errors", "Batches the producer refused.", registry=r)
        self.overruns = Counter(
            "rocescope_snmp_overruns", "Poll ticks skipped because a poll ran late.", ["device"], registry=r
        )


# --- normalization -------------------------------------------------------------------------------


@dataclass
class Normalized:
    """Columns of one poll's canonical rows (port still as ifIndex), and what was skipped."""

    ifindex: list[int] = field(default_factory=list)
    priorities: list[int] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    raw_names: list[str] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)  # object name -> rows (before filtering)
    unknown: int = 0
    malformed: int = 0

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class _Column:
    obj: SnmpObject
    metric: str | None  # None: the catalog does not know the object
    factor: float


class _ColumnIndex:
    """Finds the polled column an OID belongs to: one dict lookup per distinct root length."""

    def __init__(self, objects: Iterable[SnmpObject], keep_unknown: bool = True):
        self.by_len: dict[int, dict[Oid, _Column]] = {}
        self.keep_unknown = keep_unknown
        roots: list[Oid] = []
        for obj in objects:
            hit = catalog.resolve(_VENDOR, obj.name)
            column = _Column(obj, None if hit is None else hit[0], catalog.scale(_VENDOR, obj.name))
            self.by_len.setdefault(len(obj.oid), {})[obj.oid] = column
            roots.append(obj.oid)
        for a in roots:
            for b in roots:
                if a != b and b[: len(a)] == a:
                    raise ValueError(f"object OIDs overlap: {a} is a prefix of {b}")
        self.lengths = sorted(self.by_len)

    def column(self, oid: Oid) -> _Column | None:
        for length in self.lengths:
            hit = self.by_len[length].get(oid[:length])
            if hit is not None:
                return hit
        return None


#: InterfaceIndex is 1..2147483647 (IF-MIB); a bigger arc (BER allows any) would fail the whole poll's batch.
_MAX_IFINDEX = 2**31 - 1


def normalize(
    rows: Iterable[tuple[Oid, Value]],
    objects: Iterable[SnmpObject] | _ColumnIndex,
    keep_unknown: bool = True,
    out: Normalized | None = None,
) -> Normalized:
    """Walk rows -> canonical columns. Rows of other objects (e.g. ifName) are ignored; a row with a
    non-integer value or a bad index is skipped and counted as malformed; the good rows are kept."""
    index = objects if isinstance(objects, _ColumnIndex) else _ColumnIndex(objects, keep_unknown)
    out = out if out is not None else Normalized()
    for oid, value in rows:
        col = index.column(oid)
        if col is None:
            continue
        obj = col.obj
        out.seen[obj.name] = out.seen.get(obj.name, 0) + 1
        suffix = oid[len(obj.oid) :]
        if obj.index == "ifIndex":
            if len(suffix) != 1 or suffix[0] > _MAX_IFINDEX:
                out.malformed += 1
                continue
            prio = -1
        else:
            if len(suffix) != 2 or suffix[1] > 127 or suffix[0] > _MAX_IFINDEX:
                out.malformed += 1
                continue
            prio = suffix[1]
        if type(value) is not int:
            out.malformed += 1
            continue
        if obj.name == _OPER_STATUS:
            if value == _OPER_UNKNOWN:
                continue
            number = 1.0 if value == _OPER_UP else 0.0
        else:
            number = float(value) * col.factor
        if col.metric is None:
            out.unknown += 1
            if not index.keep_unknown:
                continue
            metric = UNKNOWN_PREFIX + obj.name
        else:
            metric = col.metric
        out.ifindex.append(suffix[0])
        out.priorities.append(prio)
        out.metrics.append(metric)
        out.values.append(number)
        out.raw_names.append(obj.name)
    return out


def _names_from(rows: Iterable[tuple[Oid, Value]]) -> dict[int, str]:
    """ifIndex -> ifName, falling back to ifDescr; empty or non-text names are ignored."""
    name_oid, descr_oid = OBJECTS["ifName"].oid, OBJECTS["ifDescr"].oid
    names: dict[int, str] = {}
    descrs: dict[int, str] = {}
    for oid, value in rows:
        table = names if oid[:-1] == name_oid else descrs if oid[:-1] == descr_oid else None
        if table is None or not isinstance(value, bytes | str):
            continue
        text = (value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value).strip()
        if text:
            table[oid[-1]] = text
    return descrs | names


def _constant(value: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], pa.string()))


def _batch(device: str, ts_ns: int, norm: Normalized, names: Mapping[int, str]) -> Batch:
    n = len(norm)
    indexes = pa.array(norm.ifindex, pa.int64()).dictionary_encode()
    port_names = [names.get(i) or f"ifIndex:{i}" for i in indexes.dictionary.to_pylist()]
    ports = pa.DictionaryArray.from_arrays(indexes.indices, pa.array(port_names, pa.string()))
    table = pa.table(
        {
            "ts": pa.array(np.full(n, ts_ns, dtype=np.int64), pa.timestamp("ns", tz="UTC")),
            "device": _constant(device, n),
            "role": _constant(_ROLE, n),
            "port": ports,
            "priority": pa.array(np.asarray(norm.priorities, dtype=np.int8), pa.int8()),
            "metric": pa.array(norm.metrics, pa.string()).dictionary_encode(),
            "value": pa.array(np.asarray(norm.values, dtype=np.float64), pa.float64()),
            "source": _constant(_SOURCE, n),
            "raw_name": pa.array(norm.raw_names, pa.string()).dictionary_encode(),
        }
    )
    return Batch("counters", conform("counters", table), key=device)


# --- the collector -------------------------------------------------------------------------------


@dataclass
class _State:
    device: SnmpDevice
    health: DeviceHealth
    agent: SnmpAgent | None = None
    names: dict[int, str] | None = None
    nameless: set[int] = field(default_factory=set)
    polls_since_names: int = 0
    unsupported: set[str] = field(default_factory=set)
    polls_since_probe: int = 0
    polls_since_slow: int | None = None  # None: never polled them yet
    streak_logged: bool = False


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
        self._columns = _ColumnIndex(
            [OBJECTS[n] for n in (*self.objects, *self.optional_objects)], keep_unknown=keep_unknown
        )
        self._name_roots = [OBJECTS[n].oid for n in NAME_OBJECTS]
        self._states = {d.name: _State(d, DeviceHealth(d.name)) for d in devices}
        self._engines: EnginePool | None = None
        self._sem: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # --- public views
    def health(self) -> dict[str, DeviceHealth]:
        """A snapshot of every device's health."""
        return {name: DeviceHealth(**vars(st.health)) for name, st in self._states.items()}

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
            started, wall0 = time.time(), time.perf_counter()
            st.health.last_attempt_ts = started
            try:
                batch = await asyncio.wait_for(self._poll(st), st.device.deadline_s)
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
            self._succeeded(st, wall0)
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

    async def _poll(self, st: _State) -> Batch:
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
        rows = await agent.walk(roots)
        ts_ns = (t0 + time.time_ns()) // 2
        if refresh:
            self._set_names(st, _names_from(rows))
        else:
            st.polls_since_names += 1
        st.polls_since_probe += 1
        st.polls_since_slow = 0 if slow_due else (st.polls_since_slow or 0) + 1
        norm = normalize(rows, self._columns)
        names = st.names or {}
        unnamed = {i for i in set(norm.ifindex) if i not in names}
        if unnamed - st.nameless and not refresh:  # a new interface: learn its name now
            self._set_names(st, _names_from(await agent.walk(self._name_roots)))
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
        m = self.metrics
        nameless_rows = sum(1 for i in norm.ifindex if i not in names)
        if nameless_rows:
            m.nameless.labels(dev).inc(nameless_rows)
        if norm.unknown:
            m.unknown_values.labels(dev).inc(norm.unknown)
        if norm.malformed:
            m.malformed.labels(dev).inc(norm.malformed)
        m.values.labels(dev).inc(len(norm))
        return _batch(dev, ts_ns, norm, names)

    def _set_names(self, st: _State, names: dict[int, str]) -> None:
        st.names = names
        st.polls_since_names = 0
        st.nameless.clear()
        self.metrics.name_walks.labels(st.device.name).inc()

    def _track_optional(self, st: _State, asked: Sequence[str], norm: Normalized) -> None:
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
        h, m, dev = st.health, self.metrics, st.device.name
        elapsed = time.perf_counter() - wall0
        h.last_poll_s = elapsed
        h.polls += 1
        h.failures += 1
        h.consecutive_failures += 1
        h.last_error = problem
        if h.up is not False:
            h.down_since_ts = h.last_attempt_ts
        h.up = False
        m.failures.labels(dev).inc()
        m.poll_seconds.observe(elapsed)
        m.up.labels(dev).set(0)
        m.consecutive_failures.labels(dev).set(h.consecutive_failures)
        if not st.streak_logged:
            st.streak_logged = True
            agent = st.agent.description if st.agent is not None else f"udp:{st.device.host}:{st.device.port}"
            where = "" if problem.startswith(agent) else f"{agent}: "
            log.warning("snmp %s: poll failed: %s%s; retrying every poll, next log on recovery", dev, where, problem)

    def _succeeded(self, st: _State, wall0: float) -> None:
        h, m, dev = st.health, self.metrics, st.device.name
        elapsed = time.perf_counter() - wall0
        if st.streak_logged:
            down = time.time() - (h.down_since_ts or time.time())
            log.warning(
                "snmp %s: answering again after %d failed poll(s), down %.0f s", dev, h.consecutive_failures, down
            )
            st.streak_logged = False
        h.up = True
        h.last_success_ts = time.time()
        h.last_poll_s = elapsed
        h.polls += 1
        h.consecutive_failures = 0
        h.down_since_ts = None
        h.last_error = None
        m.polls.labels(dev).inc()
        m.poll_seconds.observe(elapsed)
        m.up.labels(dev).set(1)
        m.last_success.labels(dev).set(h.last_success_ts)
        m.consecutive_failures.labels(dev).set(0)

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
