"""The `collectors.pcap` section: capture files and live capture."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rocescope.collectors.common.config import Strict
from rocescope.collectors.pcap.tshark import ROCE_CAPTURE_FILTER


class PcapSection(Strict):
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
    bpf_filter: str = Field(ROCE_CAPTURE_FILTER, description="Live: dumpcap's capture filter.")
    file_seconds: float = Field(10.0, gt=0, description="Live: rotate the capture file this often.")
    ring_files: int = Field(4, ge=2, description="Live: at most this many capture files on disk.")
    capture_dir: Path | None = Field(None, description="Live: where the ring files go (default: a temp dir).")
    keep_files: bool = Field(False, description="Live: keep capture files after they landed.")
