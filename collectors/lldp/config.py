"""The `collectors.lldp` section: hosts whose lldpcli is read, and whether the gNMI switches are asked too."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from rocescope.collectors.common.config import Entry, Strict


class LldpHostEntry(Entry):
    """A host whose `lldpcli -f json show neighbors` is read by running `command` or reading `file`."""

    command: list[str] | None = None
    file: Path | None = None
    timeout_s: float = Field(10.0, gt=0)


class LldpSection(Strict):
    hosts: list[LldpHostEntry] = Field(default_factory=list)
    gnmi: bool = Field(False, description="Also the switches of collectors.gnmi.targets (openconfig-lldp).")
    gnmi_mode: Literal["get", "once"] = "get"
    local: bool = Field(True, description="This host's lldpcli when no hosts are listed.")
    hostname: str | None = None
    interval_s: float = Field(60.0, gt=0)
