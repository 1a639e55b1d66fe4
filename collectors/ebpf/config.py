"""The `collectors.ebpf` section: this host's BPF programs."""

from __future__ import annotations

from pydantic import Field

from rocescope.collectors.common.config import Strict


class EbpfSection(Strict):
    interval_s: float = Field(1.0, gt=0)
    hostname: str | None = None
    interfaces: list[str] = Field(default_factory=list, description="Count RoCEv2 packets per QP here (XDP).")
