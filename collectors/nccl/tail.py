"""The device seam of the NCCL collector: NCCL Inspector's files under a directory, read from where the last
read stopped.

Inspector (NVIDIA/nccl `plugins/profiler/inspector`) writes, in `NCCL_INSPECTOR_DUMP_DIR`:

* `<hostname>-pid<pid>.log` in JSON mode: opened once per process and appended to (a line per operation);
* `nccl_inspector_metrics_<GPU UUID>.prom` in Prometheus mode: truncated and written again every interval
  (fopen "w", at least 30 s apart), appended to within one.

So each file is read from its offset; a file that shrank, was replaced (another inode) or whose first line
changed was rewritten, and is read again from its start. What the parser could not finish (a line still
being written, a Prometheus series set still missing its last line) is left for the next read: nothing is
read twice or lost. The offsets can be kept in a state file, so a restarted collector goes on where it was.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = ["DEFAULT_PATTERNS", "FileChunk", "InspectorDir", "Offset"]

log = logging.getLogger(__name__)

#: Inspector's own file names (JSON mode, its JSON lines renamed, Prometheus mode)
DEFAULT_PATTERNS = ("*-pid*.log", "*.jsonl", "nccl_inspector_metrics_*.prom")
#: Bytes of a file's first line kept to see it rewritten in place (a 2.30 Prometheus line is ~300 bytes)
_HEAD = 4096


@dataclass
class Offset:
    """How far one file was read, and what it looked like then."""

    inode: int
    offset: int
    head: str  # the file's first line (up to _HEAD bytes) as latin-1, once it had one
    #: the last Inspector `dump_stats` marker read (latin-1): lines after it without a header (JSON v4.3+) take
    #: its header and metadata, also in the next read
    marker: str = ""


@dataclass(frozen=True)
class FileChunk:
    """New bytes of one file: `data` starts at `start`; `mtime_ns` dates rows that carry no time."""

    path: Path
    data: bytes
    start: int
    mtime_ns: int
    to_end: bool  # the chunk runs to the end of the file (a read limit did not cut it)
    context: bytes = b""  # the marker the file's lines read before ended with (`Offset.marker`)


def _first_line(fd: int) -> bytes:
    head = os.pread(fd, _HEAD, 0)
    cut = head.find(b"\n")
    return head[: cut + 1] if cut >= 0 else b""


class InspectorDir:
    """Inspector's files under `root` (and its subdirectories when `recursive`: one per Slurm job by default)."""

    def __init__(
        self,
        root: Path,
        patterns: Sequence[str] = DEFAULT_PATTERNS,
        recursive: bool = True,
        max_read_bytes: int = 256 << 20,
        offsets: Mapping[str, Offset] | None = None,
    ):
        self.root = Path(root)
        self.patterns = tuple(patterns)
        self.recursive = recursive
        self.max_read_bytes = max_read_bytes
        self.offsets: dict[str, Offset] = dict(offsets or {})

    @property
    def name(self) -> str:
        return str(self.root)

    def files(self) -> list[Path]:
        """Inspector's files now present, in name order; offsets of files gone are forgotten."""
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root} is not a directory")
        # os.walk, not Path.rglob: a directory removed mid-walk (a finished job's, a store's temporary part) is
        # skipped instead of raising FileNotFoundError out of the whole listing
        matched = set()
        for top, _, names in os.walk(self.root):
            for name in names:
                if any(fnmatch.fnmatchcase(name, pattern) for pattern in self.patterns):
                    path = Path(top, name)
                    if path.is_file():
                        matched.add(path)
            if not self.recursive:
                break
        found = sorted(matched, key=str)
        present = {str(p) for p in found}
        for gone in set(self.offsets) - present:
            del self.offsets[gone]
        return found

    def read(self, path: Path, limit: int | None = None) -> FileChunk | None:
        """The bytes of `path` not yet read (at most `limit`, default `max_read_bytes`); None when none."""
        fd = os.open(path, os.O_RDONLY)
        try:
            st = os.fstat(fd)
            key, was = str(path), self.offsets.get(str(path))
            offset = was.offset if was is not None else 0
            if was is not None and (
                was.inode != st.st_ino
                or st.st_size < was.offset
                or (was.offset > 0 and was.head and _first_line(fd) != was.head.encode("latin-1"))
            ):
                log.debug("%s was rewritten: reading it from the start", path)
                offset, self.offsets[key] = 0, Offset(st.st_ino, 0, "")
            if st.st_size <= offset:
                return None
            size = min(st.st_size - offset, limit or self.max_read_bytes)
            data = os.pread(fd, size, offset)
            kept = self.offsets.get(key)
            head = kept.head if kept is not None else ""
            if not head:
                head = _first_line(fd).decode("latin-1")
            marker = kept.marker if kept is not None else ""
            self.offsets[key] = Offset(st.st_ino, offset, head, marker)
            to_end = offset + len(data) >= st.st_size
            return FileChunk(path, data, offset, st.st_mtime_ns, to_end, marker.encode("latin-1"))
        finally:
            os.close(fd)

    def advance(self, chunk: FileChunk, consumed: int, context: bytes | None = None) -> None:
        """`consumed` bytes of the chunk were read to the end: the next read starts after them (with `context`,
        the marker they ended with, when they held one)."""
        was = self.offsets[str(chunk.path)]
        marker = was.marker if context is None else context.decode("latin-1")
        self.offsets[str(chunk.path)] = Offset(was.inode, chunk.start + consumed, was.head, marker)

    # --- the offsets on disk --------------------------------------------------------------------------------

    def save(self, state_file: Path) -> None:
        """Write the offsets (atomically: a crash leaves the old file or the new one)."""
        state_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = state_file.with_name(state_file.name + ".tmp")
        tmp.write_text(json.dumps({k: asdict(v) for k, v in sorted(self.offsets.items())}, indent=1))
        tmp.replace(state_file)

    @staticmethod
    def load(state_file: Path) -> dict[str, Offset]:
        """The offsets a previous run saved; none (read everything) when the file is missing or damaged."""
        try:
            raw = json.loads(state_file.read_text())
            return {
                str(k): Offset(int(v["inode"]), int(v["offset"]), str(v["head"]), str(v.get("marker", "")))
                for k, v in raw.items()
            }
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("nccl state %s unreadable (%s): files are read from their start", state_file, exc)
            return {}
