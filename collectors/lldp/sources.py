"""Where each device's LLDP neighbors come from (the device seam): a host's lldpcli, a switch over gNMI.

* Hosts: `lldpcli -f json show neighbors` behind the `LldpcliSource` seam (`LldpcliCommand` runs it, or
  anything printing its JSON, e.g. over ssh; `LldpcliOutput` replays a capture); `load_hosts` reads them
  from a targets file.
* Switches: a gNMI Get (or, where Get is not served, a Subscribe ONCE) of the openconfig-lldp
  neighbor state (`GnmiLldpSource`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rocescope.collectors.common.command import Command
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.gnmi.targets import GnmiTarget
from rocescope.collectors.lldp.parse import LLDP_STATE_PATH, Neighbor, links_from_notifications, parse_lldpcli
from rocescope.config import read_yaml
from rocescope.errors import ConfigError, DecodeError

__all__ = [
    "GnmiLldpSource",
    "HostLldp",
    "LldpSource",
    "LldpcliCommand",
    "LldpcliOutput",
    "LldpcliSource",
    "load_hosts",
]

log = logging.getLogger(__name__)


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
class LldpcliCommand(Command):
    """Runs lldpcli (or any command printing its JSON, e.g. over ssh) on each poll."""

    argv: Sequence[str] = ("lldpcli", "-f", "json", "show", "neighbors")


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


def load_hosts(path: Path) -> list[HostLldp]:
    """Hosts from a YAML file: `hosts: [{name, command: [argv...]} | {name, file}]`.

    `command` runs anything that prints lldpcli JSON (`[ssh, gpu-001, lldpcli, -f, json, show, neighbors]`);
    `file` replays a captured output.
    """
    import yaml

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
