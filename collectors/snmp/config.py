"""The `collectors.snmp` section: the switches polled over SNMP."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr

from rocescope.collectors.common.config import Entry, Strict, build_entries


class SnmpDeviceEntry(Entry):
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


class SnmpSection(Strict):
    devices: list[SnmpDeviceEntry] = Field(default_factory=list)
    interval_s: float = Field(10.0, gt=0)
    shard: str | None = Field(None, description="This replica's share: i/n or auto (StatefulSet ordinal).")

    def build(self) -> list[Any]:
        from rocescope.collectors.snmp.collector import SnmpDevice

        def make(spec: dict[str, Any]) -> SnmpDevice:
            if isinstance(spec.get("version"), int):
                spec["version"] = str(spec["version"])
            return SnmpDevice.from_mapping(spec)

        return build_entries(self.devices, "collectors.snmp.devices", make)
