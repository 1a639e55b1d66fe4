"""The `collectors.nccl` section: where NCCL Inspector writes (`NCCL_INSPECTOR_DUMP_DIR`) and how it is read."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rocescope.collectors.common.config import Strict
from rocescope.collectors.nccl.tail import DEFAULT_PATTERNS


class NcclSection(Strict):
    dir: Path | None = Field(None, description="NCCL_INSPECTOR_DUMP_DIR of the jobs on this host.")
    patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_PATTERNS), min_length=1)
    recursive: bool = Field(True, description="Also the subdirectories (nccl-inspector-<slurm job id>/).")
    interval_s: float = Field(5.0, gt=0)
    state_file: Path | None = Field(
        None, description="Where the read offsets are kept, so a restart neither re-reads nor skips."
    )
    max_read_mb: int = Field(256, gt=0, description="At most this much per poll, all files together (catching up).")
