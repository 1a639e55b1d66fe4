"""The `collectors.nic` section: this host's NICs."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rocescope.collectors.common.config import Strict


class NicSection(Strict):
    interval_s: float = Field(1.0, gt=0)
    hostname: str | None = Field(None, description="Device name for the rows (default: this host's).")
    sysfs_root: Path = Path("/")
    netdevs: list[str] = Field(default_factory=list, description="Only these netdevs (default: every RoCE one).")
