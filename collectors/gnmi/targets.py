"""gNMI targets (one switch each) and their SAMPLE subscriptions: default paths per vendor, intervals.

A target opens one Subscribe stream per gNMI `target` name its paths use (SONiC wants `COUNTERS_DB`
in the prefix, and `APPL_DB` for the port table's speed and oper status; OpenConfig paths want none).
A path samples every 1 s when it names PFC, ECN, queues, watermarks or interface counters (`default_interval`) and
every 10 s otherwise (speeds, status), unless it says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rocescope.collectors.common.config import load_entries
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.errors import ConfigError

__all__ = [
    "DEFAULT_PATHS",
    "ENCODINGS",
    "FAST_INTERVAL_S",
    "SLOW_INTERVAL_S",
    "GnmiPath",
    "GnmiTarget",
    "default_interval",
    "load_targets",
]

# Every second: PFC (Cumulus Linux: `switch-priority`), ECN, queues, priority groups, watermarks, and the
# interface counters (OpenConfig `state/counters`, SR Linux `statistics`, SONiC's octet and packet leaves): the
# detectors judge saturation and stalls per second (an incast is a receiver at line rate for 1 s; a storm or a
# deadlock a port paused with nothing dequeued), which a 10 s read averages away. The link's oper status too (SONiC
# keeps it in APPL_DB's PORT_TABLE): a flap is down for 0.5-3 s (carrier loss, then auto-negotiation and link
# training), which a read every 10 s misses four times in five (ON_CHANGE would catch every one). Static facts
# (speed) every 10 s.
_FAST = re.compile(
    r"pfc|ecn|queue|watermark|priority-?group|switch-priority|counters$|statistics$|SAI_PORT_STAT_IF_"
    r"|oper-status$|oper-state$|^PORT_TABLE$",
    re.IGNORECASE,
)
FAST_INTERVAL_S = 1.0
SLOW_INTERVAL_S = 10.0
#: gNMI Encoding enum values by name.
ENCODINGS = {"json": 0, "bytes": 1, "proto": 2, "ascii": 3, "json_ietf": 4}


def default_interval(path: str) -> float:
    """1 s for counter paths the detectors judge per second (PFC, ECN, queues, watermarks, interface counters) and
    for oper status (flaps), 10 s otherwise (speeds)."""
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
    # the port's octets, packets and discards every second, beside every port field every 10 s (a hundred of them)
    port = [
        f"COUNTERS/Ethernet*/SAI_PORT_STAT_IF_{d}_{what}"
        for d in ("IN", "OUT")
        for what in ("OCTETS", "UCAST_PKTS", "DISCARDS")
    ]
    paths = ["COUNTERS/Ethernet*", *(f"COUNTERS/Ethernet*/{g}" for g in groups), *port, *pfc]
    counters = tuple(GnmiPath(p, target="COUNTERS_DB") for p in paths)
    # port speed (Mb/s) and oper status live in APPL_DB's PORT_TABLE, not in COUNTERS_DB (the whole table: the
    # DB paths of sonic-gnmi take no wildcard key)
    return (*counters, GnmiPath("PORT_TABLE", target="APPL_DB"))


_OPENCONFIG = (
    "/interfaces/interface/state/counters",
    "/interfaces/interface/state/oper-status",
    "/interfaces/interface/ethernet/state/counters",
    "/interfaces/interface/ethernet/state/port-speed",
    "/interfaces/interface/ethernet/state/negotiated-port-speed",
    "/qos/interfaces/interface/output/queues/queue/state",
)
#: Cumulus Linux's gNMI server (5.14+): the OpenConfig paths, and NVIDIA's own PFC (pause frames and durations
#: per switch priority) and priority-group buffer paths beside them, which OpenConfig has no model for.
_CUMULUS = (
    *_OPENCONFIG,
    "/qos/interfaces/interface/switch-priority",
    "/qos/interfaces/interface/input/priority-group",
)

#: Paths subscribed when a target lists none, by `vendor`.
DEFAULT_PATHS: Mapping[str, tuple[GnmiPath, ...]] = {
    "sonic": _sonic_paths((3, 4)),
    "openconfig": tuple(GnmiPath(p) for p in _OPENCONFIG),
    "cumulus": tuple(GnmiPath(p) for p in _CUMULUS),
    "srlinux": tuple(
        GnmiPath(p)
        for p in (
            "/interface/statistics",
            "/interface/oper-state",
            "/interface/ethernet/statistics",
            "/interface/ethernet/port-speed",
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
        if self.encoding not in ENCODINGS:
            raise ValueError(f"{self.name}: encoding must be one of {sorted(ENCODINGS)}, not {self.encoding!r}")
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
