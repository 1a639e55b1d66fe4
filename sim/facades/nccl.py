"""NCCL Inspector's dump directory: each simulated rank's process appends its collectives to its own file.

JSON mode, as the plugin writes it (`rocescope.collectors.nccl.write`): `NCCL_INSPECTOR_DUMP_DIR/<hostname>-pid
<pid>.log`, opened once per process and appended to, one line per completed collective, flushed by its dump
thread. Here the directory is one for all hosts (a shared filesystem, as Slurm clusters often give
Inspector); `rocescope collect nccl --dir DIR` tails it, or the served run's own collector does.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import IO

from rocescope.collectors.nccl.write import InspectorRecord, file_name, json_line

__all__ = ["InspectorFiles"]


class InspectorFiles:
    """The dump directory of every rank's process; `write` appends records and flushes (whole lines only)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[tuple[str, int], IO[str]] = {}
        self.records = 0

    def write(self, records: Iterable[InspectorRecord]) -> int:
        """Append each record to its process's file; returns how many were written."""
        lines: dict[tuple[str, int], list[str]] = {}
        for r in records:
            lines.setdefault((r.host, r.pid), []).append(json_line(r))
        for key, text in lines.items():
            f = self._files.get(key)
            if f is None:
                f = self._files[key] = (self.directory / file_name(*key)).open("a", encoding="utf-8")
            f.write("".join(text))
            f.flush()
        n = sum(len(v) for v in lines.values())
        self.records += n
        return n

    @property
    def files(self) -> list[Path]:
        return sorted(self.directory / file_name(*key) for key in self._files)

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()

    def __enter__(self) -> InspectorFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
