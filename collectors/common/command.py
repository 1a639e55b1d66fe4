"""A command whose standard output is the data (lldpcli, squeue, anything run over ssh): the device seam's real side.

One clear error per failure (it could not start, it timed out, it exited non-zero, with its last stderr line),
raised as DecodeError for the collector to count against the target and go on.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from rocescope.errors import DecodeError

__all__ = ["Command"]


@dataclass
class Command:
    """Runs `argv` on each read and returns what it printed."""

    argv: Sequence[str]
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
