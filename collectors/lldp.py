"""LLDP collector: which port faces which, into `links` (hosts via lldpcli, switches via gNMI openconfig-lldp).

The detectors join counters across a cable (a leaf port's PFC pauses to the host NIC they stop), so the
adjacency must come from what devices see, not from a drawing.

* Hosts: `lldpcli -f json show neighbors` behind the `LldpcliSource` seam (`LldpcliCommand` runs it,
  `LldpcliOutput` replays a capture). lldpd's JSON has variants, all handled by `parse_lldpcli`:
  `-f json` keys objects by name and writes a key seen once as an object, several times as a list of
  one-key objects (one neighbor: `"interface": {"eth0": {...}}`; several: `[{"eth0": ...}, ...]`); the
  chassis is keyed by its system name (`{"spine-1": {"id": ...}}`), or unkeyed when the neighbor sent
  none; `-f json0` writes every value as a list (`"interface": [{"name": "eth0", ...}]`).
* Switches: a gNMI Get (or, where Get is not served, a Subscribe ONCE) of
  `/lldp/interfaces/interface/neighbors/neighbor/state` (openconfig-lldp), JSON objects or typed
  leaves, decoded by `links_from_notifications`.

The peer port is the LLDP port id when its subtype names an interface (ifname, ifalias, local), and
the port description when the id is a MAC or an address (lldpd's default: id = MAC, descr = ifname).
The peer device is the system name, else the chassis id. A neighbor that cannot be read is skipped
and counted; the others are kept.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from rocescope.collectors.common.health import CollectorMetrics, Health, Targets
from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.common.polling import poll_target, run_polls
from rocescope.collectors.gnmi.collector import GnmiTarget, parse_path, path_elems
from rocescope.collectors.gnmi.proto import pb
from rocescope.config import read_yaml
from rocescope.errors import DecodeError
from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.transport import Producer

__all__ = [
    "LLDP_STATE_PATH",
    "GnmiLldpSource",
    "LldpCollector",
    "LldpcliCommand",
    "LldpcliOutput",
    "LldpcliSource",
    "Neighbor",
    "links_batch",
    "links_from_notifications",
    "parse_lldpcli",
]

log = logging.getLogger(__name__)

LLDP_STATE_PATH = "/lldp/interfaces/interface/neighbors/neighbor/state"
_SOURCE = "lldp"
#: Port id subtypes whose value is not an interface name: the port description names it better.
_ADDRESS_SUBTYPES = frozenset({"mac", "ip", "mac_address", "network_address", "unhandled"})
_MAX_DEPTH = 32


@dataclass(frozen=True, order=True)
class Neighbor:
    """One adjacency as the local device sees it."""

    device: str
    port: str
    peer_device: str
    peer_port: str


def peer_port(subtype: str, value: str, descr: str) -> str:
    kind = subtype.rpartition(":")[2].lower()
    if kind in _ADDRESS_SUBTYPES and descr.strip():
        return descr.strip()
    if kind == "local" and value.isdigit() and descr.strip():
        return descr.strip()  # a local id that is an ifIndex: the description is the name
    return value


# --- lldpcli JSON -----------------------------------------------------------------------------------


def _first(x: object) -> object:
    """json0 wraps every value in a list: take its one element."""
    while isinstance(x, list) and len(x) == 1:
        x = x[0]
    return x


def _text(x: object) -> str:
    """A string whether it comes bare, as {"value": ...} or as [{"value": ...}] (json0)."""
    x = _first(x)
    if isinstance(x, dict):
        x = _first(x.get("value", ""))
    if isinstance(x, str | int | float) and not isinstance(x, bool):
        return str(x)
    if x is None or x == {}:
        return ""
    raise ValueError(f"not a text value: {str(x)[:60]}")


def _interfaces(lldp: object) -> Iterator[tuple[str, object]]:
    """(local interface, neighbor body) whatever the variant."""
    lldp = _first(lldp)
    if not isinstance(lldp, dict):
        raise DecodeError("lldpcli JSON: `lldp` is not an object")
    items = lldp.get("interface", [])
    if isinstance(items, dict):
        items = [items]  # lldpd writes a key seen once as an object
    if not isinstance(items, list):
        raise DecodeError("lldpcli JSON: `interface` is neither an object nor a list")
    for item in items:
        if not isinstance(item, dict):
            yield "", item  # counted as malformed by the caller
            continue
        if "name" in item and not isinstance(item["name"], dict):  # json0: {"name": "eth0", "chassis": [...]}
            yield str(_text(item["name"])), item
            continue
        for name, body in item.items():
            yield str(name), body


def _chassis(body: Mapping[str, Any]) -> tuple[str, str]:
    """(system name, chassis id) of a neighbor body."""
    ch = _first(body.get("chassis"))
    if not isinstance(ch, dict):
        raise ValueError("no chassis")
    cid = _first(ch.get("id"))
    if isinstance(cid, dict) and ("value" in cid or "type" in cid):
        return _text(ch.get("name", "")), _text(cid)  # unkeyed (no sysname) or json0
    if len(ch) != 1:
        raise ValueError(f"chassis with {len(ch)} keys")
    (name, inner), *_ = ch.items()
    inner = _first(inner)
    cid = _text(inner.get("id", "")) if isinstance(inner, dict) else ""
    return str(name), cid


def _port(body: Mapping[str, Any]) -> str:
    port = _first(body.get("port"))
    if not isinstance(port, dict):
        raise ValueError("no port")
    pid = _first(port.get("id"))
    if isinstance(pid, dict):
        subtype, value = _text(pid.get("type", "")), _text(pid.get("value", ""))
    else:
        subtype, value = "", _text(pid)
    return peer_port(subtype, value, _text(port.get("descr", "")))


def parse_lldpcli(output: str | bytes | Mapping[str, Any], device: str) -> tuple[list[Neighbor], int]:
    """(neighbors, malformed neighbors skipped) from `lldpcli -f json|json0 show neighbors`.

    Raises DecodeError when the output is not lldpcli JSON at all; a neighbor that cannot be read is
    skipped and counted.
    """
    if isinstance(output, Mapping):
        doc: object = output
    else:
        doc = load_json(output, f"{device}: lldpcli output")
    if not isinstance(doc, dict) or "lldp" not in doc:
        raise DecodeError(f"{device}: lldpcli output has no `lldp` object")
    out: list[Neighbor] = []
    bad = 0
    for ifname, body in _interfaces(doc["lldp"]):
        try:
            body = _first(body)
            if not ifname or not isinstance(body, dict):
                raise ValueError("interface entry is not an object")
            sysname, cid = _chassis(body)
            peer = sysname or cid
            peer_port = _port(body)
            if not peer or not peer_port:
                raise ValueError("neighbor without a name or port id")
            out.append(Neighbor(device, ifname, peer, peer_port))
        except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as exc:
            bad += 1
            log.debug("%s: lldp neighbor on %r skipped: %s", device, ifname, exc)
    return out, bad


# --- gNMI openconfig-lldp ---------------------------------------------------------------------------

Elem = tuple[str, Mapping[str, str]]


def _strip(name: str) -> str:
    return name.rpartition(":")[2]


def _walk(elems: list[Elem], doc: object, depth: int = 0) -> Iterator[tuple[list[Elem], object]]:
    """(elements, scalar) leaves of a JSON value under `elems`; list entries keyed by `name` or `id`."""
    if depth > _MAX_DEPTH:
        raise DecodeError("JSON nested too deep")
    if isinstance(doc, dict):
        for k, v in doc.items():
            name = _strip(str(k))
            if isinstance(v, list):
                for item in v:
                    if isinstance(item, dict):
                        key = next((k2 for k2 in ("name", "id") if k2 in item), None)
                        keys = {key: str(item[key])} if key is not None else {}
                        yield from _walk([*elems, (name, keys)], item, depth + 1)
            else:
                yield from _walk([*elems, (name, {})], v, depth + 1)
    else:
        yield elems, doc


def _scalar(val: Any) -> Iterator[tuple[list[Elem], object]]:
    kind = val.WhichOneof("value")
    if kind in ("json_ietf_val", "json_val"):
        try:
            doc = json.loads(getattr(val, kind))
        except (ValueError, RecursionError) as exc:
            raise DecodeError(f"bad JSON: {exc}") from None
        yield from _walk([], doc)
    elif kind is None:
        raise DecodeError("update without a value")
    else:
        yield [], getattr(val, kind)


_WANTED = frozenset({"system-name", "port-id", "port-id-type", "port-description", "chassis-id"})


def links_from_notifications(notifications: Iterable[Any], device: str) -> tuple[list[Neighbor], int]:
    """(neighbors, malformed updates or neighbors) from gNMI Notifications of openconfig-lldp state."""
    found: dict[tuple[str, str], dict[str, str]] = {}
    bad = 0
    for n in notifications:
        prefix = path_elems(n.prefix)
        for u in n.update:
            try:
                base = prefix + path_elems(u.path)
                for extra, value in _scalar(u.val):
                    elems = [(_strip(nm), keys) for nm, keys in base] + extra
                    names = [nm for nm, _ in elems]
                    if "interface" not in names or "neighbor" not in names or names[-1] not in _WANTED:
                        continue
                    iface = elems[names.index("interface")][1].get("name", "")
                    nid = elems[names.index("neighbor")][1].get("id", "")
                    if not iface:
                        raise DecodeError(f"{device}: neighbor leaf without an interface name")
                    if isinstance(value, dict | list) or value is None:
                        raise DecodeError(f"{device}: {names[-1]} is not a scalar")
                    found.setdefault((iface, nid), {})[names[-1]] = str(value)
            except (DecodeError, ValueError, TypeError) as exc:
                bad += 1
                log.debug("%s: lldp update skipped: %s", device, exc)
    out: list[Neighbor] = []
    for (iface, _), leaves in sorted(found.items()):
        peer = leaves.get("system-name") or leaves.get("chassis-id", "")
        port = peer_port(leaves.get("port-id-type", ""), leaves.get("port-id", ""), leaves.get("port-description", ""))
        if not peer or not port:
            bad += 1
            continue
        out.append(Neighbor(device, iface, peer, port))
    return out, bad


# --- sources (the device seam) ------------------------------------------------------------------------


class LldpSource(Protocol):
    """Where one device's neighbors come from."""

    @property
    def name(self) -> str: ...

    def neighbors(self) -> tuple[list[Neighbor], int]:
        """(neighbors, malformed records skipped); raises on a failed read."""
        ...


class LldpcliSource(Protocol):
    def output(self) -> bytes: ...


@dataclass
class LldpcliCommand:
    """Runs lldpcli (or any command printing its JSON, e.g. over ssh) on each poll."""

    argv: Sequence[str] = ("lldpcli", "-f", "json", "show", "neighbors")
    timeout_s: float = 10.0

    def output(self) -> bytes:
        try:
            done = subprocess.run(list(self.argv), capture_output=True, timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise DecodeError(f"{' '.join(self.argv)}: {exc}") from exc
        if done.returncode != 0:
            err = done.stderr.decode(errors="replace").strip().splitlines()
            raise DecodeError(f"{' '.join(self.argv)} exited {done.returncode}: {err[-1] if err else ''}")
        return bytes(done.stdout)


@dataclass
class LldpcliOutput:
    """A captured lldpcli output (file or bytes): the fixture side of the seam."""

    data: bytes | Path

    def output(self) -> bytes:
        return self.data.read_bytes() if isinstance(self.data, Path) else self.data


@dataclass
class HostLldp:
    """A host whose neighbors lldpcli reports."""

    name: str
    cli: LldpcliSource

    def neighbors(self) -> tuple[list[Neighbor], int]:
        return parse_lldpcli(self.cli.output(), self.name)


def _channel(t: GnmiTarget) -> Any:
    import grpc

    if not t.tls:
        return grpc.insecure_channel(t.address)

    def read(p: str | None) -> bytes | None:
        return None if p is None else Path(p).read_bytes()

    creds = grpc.ssl_channel_credentials(read(t.ca_cert), read(t.client_key), read(t.client_cert))
    options = [("grpc.ssl_target_name_override", t.server_name)] if t.server_name else []
    return grpc.secure_channel(t.address, creds, options=options)


_GNMI_ENCODINGS = {"json": 0, "bytes": 1, "proto": 2, "ascii": 3, "json_ietf": 4}


@dataclass
class GnmiLldpSource:
    """A switch's LLDP neighbors over gNMI: Get, or Subscribe ONCE where Get is unimplemented (`mode`)."""

    target: GnmiTarget
    mode: str = "get"  # get | once
    path: str = LLDP_STATE_PATH
    used: str = field(default="", init=False)

    @property
    def name(self) -> str:
        return self.target.name

    def _metadata(self) -> list[tuple[str, str]] | None:
        t = self.target
        return [("username", t.username), ("password", t.password or "")] if t.username is not None else None

    def notifications(self) -> list[Any]:
        import grpc

        channel = _channel(self.target)
        try:
            if self.mode == "get":
                try:
                    return self._get(channel)
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                        raise DecodeError(f"gNMI Get: {exc.code().name}: {exc.details()}") from None
            try:
                return self._once(channel)
            except grpc.RpcError as exc:
                raise DecodeError(f"gNMI Subscribe ONCE: {exc.code().name}: {exc.details()}") from None
        finally:
            channel.close()

    def _get(self, channel: Any) -> list[Any]:
        get = channel.unary_unary(
            "/gnmi.gNMI/Get", request_serializer=pb.GetRequest.SerializeToString, response_deserializer=None
        )
        req = pb.GetRequest(encoding=_GNMI_ENCODINGS[self.target.encoding], type=3)  # type 3: OPERATIONAL
        req.path.add().CopyFrom(parse_path(self.path))
        raw = get(req, timeout=self.target.timeout_s, metadata=self._metadata())
        try:
            resp = pb.GetResponse.FromString(raw)
        except Exception as exc:  # protobuf's DecodeError: the answer is not a GetResponse
            raise DecodeError(f"not a gNMI GetResponse ({len(raw)} bytes): {exc}") from exc
        self.used = "get"
        return list(resp.notification)

    def _once(self, channel: Any) -> list[Any]:
        sub = channel.stream_stream(
            "/gnmi.gNMI/Subscribe", request_serializer=pb.SubscribeRequest.SerializeToString, response_deserializer=None
        )
        sl = pb.SubscriptionList(mode=1, encoding=_GNMI_ENCODINGS[self.target.encoding])  # mode 1: ONCE
        sl.subscription.add().path.CopyFrom(parse_path(self.path))
        out: list[Any] = []
        call = sub(iter([pb.SubscribeRequest(subscribe=sl)]), timeout=self.target.timeout_s, metadata=self._metadata())
        for raw in call:
            try:
                resp = pb.SubscribeResponse.FromString(raw)
            except Exception:  # one garbage response: skip it, the next may be fine
                log.debug("%s: a SubscribeResponse did not parse", self.name)
                out.append(None)
                continue
            kind = resp.WhichOneof("response")
            if kind == "update":
                out.append(resp.update)
            elif kind == "sync_response":
                call.cancel()
                break
        self.used = "once"
        return out

    def neighbors(self) -> tuple[list[Neighbor], int]:
        notes = self.notifications()
        garbage = sum(1 for n in notes if n is None)
        found, bad = links_from_notifications([n for n in notes if n is not None], self.name)
        return found, bad + garbage


# --- the collector ------------------------------------------------------------------------------------


def links_batch(neighbors: Sequence[Neighbor], seen_at: dt.datetime | None = None, key: str = "") -> Batch:
    """A `links` Batch of these neighbors, source `lldp`."""
    when = seen_at or dt.datetime.now(dt.UTC)
    n = len(neighbors)
    table = pa.table(
        {
            "device": [x.device for x in neighbors],
            "port": [x.port for x in neighbors],
            "peer_device": [x.peer_device for x in neighbors],
            "peer_port": [x.peer_port for x in neighbors],
            "source": [_SOURCE] * n,
            "seen_at": pa.array([when] * n, pa.timestamp("ns", tz="UTC")),
        }
    )
    return Batch("links", conform("links", table), key=key or (neighbors[0].device if neighbors else ""))


class LldpCollector:
    """Polls every source (hosts, switches), one `links` Batch per source that answered."""

    def __init__(
        self, sources: Sequence[LldpSource], producer: Producer | None = None, metrics: CollectorMetrics | None = None
    ):
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"LLDP source names must be unique: {names}")
        self.sources = list(sources)
        self.producer = producer
        self.metrics = metrics or CollectorMetrics("lldp")
        self.targets = Targets(self.metrics, log)
        self.targets.add(*(s.name for s in sources))

    def health(self) -> dict[str, Health]:
        return dict(self.targets.health)

    def poll_once(self, now: dt.datetime | None = None) -> list[Batch]:
        """One poll of every source; failures are logged and counted, never raised."""
        when = now or dt.datetime.now(dt.UTC)
        out: list[Batch] = []
        for src in self.sources:

            def poll(src: LldpSource = src) -> tuple[list[Neighbor], int, int]:
                found, bad = src.neighbors()
                return found, len(found), bad

            found = poll_target(src.name, poll, self.targets)
            if found:
                out.append(links_batch(found, when, src.name))
        return out

    def run(self, interval_s: float, stop: threading.Event, on_batch: Callable[[Batch], None] | None = None) -> int:
        """Poll and publish every `interval_s` until `stop`; returns the number of polls."""
        return run_polls(self.poll_once, self.producer, interval_s, stop, on_batch)


def load_hosts(path: Path) -> list[HostLldp]:
    """Hosts from a YAML file: `hosts: [{name, command: [argv...]} | {name, file}]`.

    `command` runs anything that prints lldpcli JSON (`[ssh, gpu-001, lldpcli, -f, json, show, neighbors]`);
    `file` replays a captured output.
    """
    import yaml

    from rocescope.errors import ConfigError

    try:
        raw = read_yaml(path.read_text())
    except (OSError, yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"LLDP targets {path}: {exc}") from exc
    entries = raw.get("hosts", []) if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise ConfigError(f"LLDP targets {path}: want `hosts:` with a list of {{name, command | file}}")
    out: list[HostLldp] = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"]:
            raise ConfigError(f"LLDP targets {path}: hosts[{i}] needs a name")
        extra = sorted(set(e) - {"name", "command", "file", "timeout_s"})
        if extra:
            raise ConfigError(f"LLDP targets {path}: hosts[{i}]: unknown key(s) {extra}")
        if "file" in e:
            cli: LldpcliSource = LldpcliOutput(path.parent / str(e["file"]))
        else:
            argv = e.get("command", list(LldpcliCommand.argv))
            if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
                raise ConfigError(f"LLDP targets {path}: hosts[{i}].command must be a list of strings")
            cli = LldpcliCommand(tuple(argv), float(e.get("timeout_s", 10.0)))
        out.append(HostLldp(e["name"], cli))
    return out
