"""The `collectors:` section of the one config file: one typed sub-section per collector.

Targets are written inline with the same entry shapes as the `--targets` files. A string value
`env:NAME` stays a reference in the loaded settings and is read from the environment only when that
collector builds its targets, so pods that never poll switches (sink, analysis) need no switch
credentials. Secrets are `SecretStr` and print redacted in `rocescope config --dump`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from rocescope.errors import ConfigError

T = TypeVar("T")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def resolve_env(value: str, where: str) -> str:
    """`env:NAME` -> the variable's value; anything else unchanged. Raises ConfigError naming `where`."""
    if not value.startswith("env:"):
        return value
    name = value[4:]
    if name not in os.environ:
        raise ConfigError(f"{where} names unset variable {name}")
    return os.environ[name]


class _Entry(_Strict):
    """One target; `mapping()` is the entry as the collector's own `from_mapping` takes it."""

    name: str = Field(min_length=1)

    def mapping(self, where: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.model_dump(exclude_unset=True, exclude_none=True).items():
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            out[key] = resolve_env(value, f"{where}.{key}") if isinstance(value, str) else value
        return out


def build_entries(entries: Sequence[_Entry], section: str, build: Callable[[dict[str, Any]], T]) -> list[T]:
    """Each entry built by the collector's `build` (ValueError on a bad one): errors name entry and key."""
    built: list[T] = []
    for i, entry in enumerate(entries):
        where = f"{section}[{i}] ({entry.name})"
        try:
            built.append(build(entry.mapping(where)))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConfigError(f"{section}: names must be unique")
    return built


class GnmiPathEntry(_Strict):
    path: str
    target: str | None = None
    origin: str | None = None
    interval: float | None = Field(None, gt=0, description="Sample interval in seconds.")


class GnmiTargetEntry(_Entry):
    """A switch served over gNMI (see `rocescope collect gnmi`)."""

    address: str = Field(description="host:port of the gNMI server.")
    vendor: Literal["openconfig", "sonic", "srlinux"] = "openconfig"
    paths: list[str | GnmiPathEntry] | None = None
    target: str | None = None
    pfc_priorities: list[int] | None = None
    tls: bool = False
    ca_cert: str | None = None
    client_cert: str | None = None
    client_key: str | None = None
    server_name: str | None = None
    username: str | None = None
    password: SecretStr | None = None
    encoding: str = "json_ietf"
    timeout_s: float = Field(10.0, gt=0)


class GnmiSection(_Strict):
    targets: list[GnmiTargetEntry] = Field(default_factory=list)
    shard: str | None = Field(None, description="This replica's share: i/n or auto (StatefulSet ordinal).")

    def build(self) -> list[Any]:
        from rocescope.collectors.gnmi import GnmiTarget

        return build_entries(self.targets, "collectors.gnmi.targets", GnmiTarget.from_mapping)


class SnmpDeviceEntry(_Entry):
    """A switch polled over SNMP v2c or v3 (see `rocescope collect snmp`)."""

    host: str
    port: int = Field(161, gt=0, lt=65536)
    version: Literal["v2c", "2c", "2", "v3", "3"] | int = "v2c"
    community: SecretStr | None = None
    user: str | None = None
    auth_key: SecretStr | None = None
    priv_key: SecretStr | None = None
    auth_protocol: str | None = None
    priv_protocol: str | None = None
    timeout_s: float = Field(2.0, gt=0)
    retries: int = Field(1, ge=0)
    max_repetitions: int = Field(25, ge=1)
    poll_deadline_s: float | None = Field(None, gt=0)


class SnmpSection(_Strict):
    devices: list[SnmpDeviceEntry] = Field(default_factory=list)
    interval_s: float = Field(10.0, gt=0)
    shard: str | None = Field(None, description="This replica's share: i/n or auto (StatefulSet ordinal).")

    def build(self) -> list[Any]:
        from rocescope.collectors.snmp import SnmpDevice

        def make(spec: dict[str, Any]) -> SnmpDevice:
            if isinstance(spec.get("version"), int):
                spec["version"] = str(spec["version"])
            return SnmpDevice.from_mapping(spec)

        return build_entries(self.devices, "collectors.snmp.devices", make)


class NicSection(_Strict):
    interval_s: float = Field(1.0, gt=0)
    hostname: str | None = Field(None, description="Device name for the rows (default: this host's).")
    sysfs_root: Path = Path("/")
    netdevs: list[str] = Field(default_factory=list, description="Only these netdevs (default: every RoCE one).")


class EbpfSection(_Strict):
    interval_s: float = Field(1.0, gt=0)
    hostname: str | None = None
    interfaces: list[str] = Field(default_factory=list, description="Count RoCEv2 packets per QP here (XDP).")


class PcapSection(_Strict):
    interface: str | list[str] | None = Field(
        None, description="Capture live here, one interface or several (default: only files given on the CLI)."
    )
    capture_point: str = ""
    capture_points: dict[str, str] = Field(
        default_factory=dict,
        description="Capture interface -> capture point, e.g. {mirror0: leaf-r0-01/Ethernet0}, for captures of "
        "several ports (without it, several interfaces name their packets by interface).",
    )
    sampling_rate: int = Field(1, ge=1, description="Keep 1 in N packets.")
    bpf_filter: str = "udp port 4791"
    file_seconds: float = Field(10.0, gt=0, description="Live: rotate the capture file this often.")
    ring_files: int = Field(4, ge=2, description="Live: at most this many capture files on disk.")
    capture_dir: Path | None = Field(None, description="Live: where the ring files go (default: a temp dir).")
    keep_files: bool = Field(False, description="Live: keep capture files after they landed.")


class LldpHostEntry(_Entry):
    """A host whose `lldpcli -f json show neighbors` is read by running `command` or reading `file`."""

    command: list[str] | None = None
    file: Path | None = None
    timeout_s: float = Field(10.0, gt=0)


class LldpSection(_Strict):
    hosts: list[LldpHostEntry] = Field(default_factory=list)
    gnmi: bool = Field(False, description="Also the switches of collectors.gnmi.targets (openconfig-lldp).")
    gnmi_mode: Literal["get", "once"] = "get"
    local: bool = Field(True, description="This host's lldpcli when no hosts are listed.")
    hostname: str | None = None
    interval_s: float = Field(60.0, gt=0)


class JobsSection(_Strict):
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    static: Path | None = Field(None, description="YAML `jobs: [{name, namespace, hosts, nics}]`.")
    pods: Path | None = Field(None, description="`kubectl get pods -A -o json` output.")
    inventory: Path | None = Field(None, description="Host NIC inventory YAML.")
    interval_s: float = Field(30.0, gt=0)


class CollectorsConfig(_Strict):
    """Per-collector settings; each `rocescope collect <x>` flag overrides its key here."""

    gnmi: GnmiSection = GnmiSection()
    snmp: SnmpSection = SnmpSection()
    nic: NicSection = NicSection()
    ebpf: EbpfSection = EbpfSection()
    pcap: PcapSection = PcapSection()
    lldp: LldpSection = LldpSection()
    jobs: JobsSection = JobsSection()
