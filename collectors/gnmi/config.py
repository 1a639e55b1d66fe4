"""The `collectors.gnmi` section: the switches served over gNMI."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr

from rocescope.collectors.common.config import Entry, Strict, build_entries


class GnmiPathEntry(Strict):
    path: str
    target: str | None = None
    origin: str | None = None
    interval: float | None = Field(None, gt=0, description="Sample interval in seconds.")


class GnmiTargetEntry(Entry):
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


class GnmiSection(Strict):
    targets: list[GnmiTargetEntry] = Field(default_factory=list)
    shard: str | None = Field(None, description="This replica's share: i/n or auto (StatefulSet ordinal).")

    def build(self) -> list[Any]:
        from rocescope.collectors.gnmi.targets import GnmiTarget  # protobuf stubs: only when built

        return build_entries(self.targets, "collectors.gnmi.targets", GnmiTarget.from_mapping)
