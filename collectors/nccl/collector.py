"""NCCL collector: collective timings from NCCL Inspector's files into `collectives`.

Every poll reads what Inspector appended (or rewrote) in its dump directory since the last one (`tail.py`),
parses it (`parse.py`, `prom.py`) and ships `collectives` batches keyed by host. A malformed line is
counted and logged once per file, and the good lines around it are kept; a line still being written is
read at a later poll. A poll reads at most `max_read_bytes` of all files together, so a backlog of big logs
at start is read over several polls with bounded memory. The directory is the collector's one target (its
health and self-metrics); a file that cannot be read is logged once and skipped, the others are read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import Counter

from rocescope.collectors.common.health import CollectorMetrics, Health, Targets
from rocescope.collectors.common.polling import run_polls, run_ticks
from rocescope.collectors.nccl.parse import (
    NO_MARKER,
    Parsed,
    collectives_batches,
    drops_batches,
    is_prometheus,
    last_marker,
    parse_inspector,
    parse_json_lines,
)
from rocescope.collectors.nccl.tail import FileChunk, InspectorDir
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer

__all__ = ["NcclCollector"]

log = logging.getLogger(__name__)


class NcclCollector:
    """Polls one Inspector directory; `poll()` returns the batches of what is new."""

    def __init__(
        self,
        directory: InspectorDir,
        producer: Producer | None = None,
        metrics: CollectorMetrics | None = None,
        state_file: Path | None = None,
        max_rows: int = 10_000,
        settle_s: float = 30.0,
    ):
        self.directory = directory
        self.producer = producer
        self.metrics = metrics or CollectorMetrics("nccl")
        self.targets = Targets(self.metrics, log)
        self.targets.add(directory.name)
        self.state_file = state_file
        self.max_rows = max_rows
        self.settle_s = settle_s
        if state_file is not None:
            directory.offsets.update(InspectorDir.load(state_file))
        r, t = self.metrics.registry, ["target"]
        self.writer_dropped = Counter(
            "rocescope_nccl_writer_dropped_records",
            "Records Inspector's ring buffers overwrote before it wrote them (its dump_stats markers say so).",
            t,
            registry=r,
        )
        self.refused = Counter(
            "rocescope_nccl_refused_records", "Records of an Inspector format version not read.", t, registry=r
        )
        self._warned: set[str] = set()  # files whose malformed lines were logged (once per file)
        self._unreadable: dict[str, str] = {}  # file -> its read error (logged once per error)
        self._resume: str | None = None  # the file the next poll starts with
        self.rows = 0

    def health(self) -> dict[str, Health]:
        return dict(self.targets.health)

    def save_state(self) -> None:
        """Persist the offsets reached (call once their batches are published)."""
        if self.state_file is not None:
            self.directory.save(self.state_file)

    def _settled(self, chunk: FileChunk) -> bool:
        """Read to the end of a file that has not changed for `settle_s`: an unfinished last line stays so."""
        return chunk.to_end and time.time_ns() - chunk.mtime_ns > self.settle_s * 1e9

    def _complete(self, chunk: FileChunk) -> int:
        """How many bytes of a JSON chunk are whole records to read now (see `_parse`)."""
        cut = len(chunk.data) if self._settled(chunk) else chunk.data.rfind(b"\n") + 1
        return cut or (len(chunk.data) if len(chunk.data) >= self.directory.max_read_bytes else 0)

    def _parse_together(self, chunks: list[FileChunk]) -> Parsed | None:
        """The whole records of many JSON files in one read (a parse costs milliseconds per call, whatever its
        size, and a busy directory has a few new lines in each of hundreds of files per poll); None when one
        record is malformed, so the files are read one by one and each damaged file is named."""
        cuts = [self._complete(c) for c in chunks]
        # each file's lines after its own marker (v4.3+ lines take their header from it), never another file's;
        # one join of the pieces, no copy per file
        parts: list[bytes | memoryview] = []
        for c, cut in zip(chunks, cuts, strict=True):
            if cut:
                parts += [c.context or NO_MARKER, memoryview(c.data)[:cut]]
                if c.data[cut - 1 : cut] != b"\n":
                    parts.append(b"\n")
        parsed = parse_json_lines(b"".join(parts), final=True)
        if parsed.malformed:
            return None
        for chunk, cut in zip(chunks, cuts, strict=True):
            marker = last_marker(chunk.data, cut) if parsed.markers else None  # no file had one: none to look for
            self.directory.advance(chunk, cut, marker)
        return parsed

    def _parse(self, chunk: FileChunk) -> Parsed:
        # An unfinished record is left for the next poll, unless the file has not changed for `settle_s` (its
        # writer died mid-line, or a snapshot lost a line) or it fills a whole read (no writer makes one): then
        # it is counted as malformed, so the records after it are not held back.
        name, dated, context = chunk.path.name, chunk.mtime_ns, chunk.context
        parsed = parse_inspector(chunk.data, name, dated, final=self._settled(chunk), context=context)
        if not parsed.consumed and len(chunk.data) >= self.directory.max_read_bytes:
            parsed = parse_inspector(chunk.data, name, dated, final=True, context=context)
        self.directory.advance(chunk, parsed.consumed, parsed.context or None)
        if parsed.malformed:
            self.metrics.malformed.labels(self.directory.name).inc(parsed.malformed)
            self.targets[self.directory.name].malformed += parsed.malformed
            if str(chunk.path) not in self._warned:
                self._warned.add(str(chunk.path))
                log.warning(
                    "nccl %s: %d malformed record(s) skipped, the others kept (first: %s); later ones are only counted",
                    chunk.path,
                    parsed.malformed,
                    parsed.problem,
                )
        return parsed

    def _count(self, parsed: Parsed) -> None:
        """What a read gave besides rows, malformed records and unknown lines: records of a version not read, and
        records the writer itself dropped (its collectives are missing)."""
        target = self.directory.name
        if parsed.refused:
            self.refused.labels(target).inc(parsed.refused)
        if parsed.writer_dropped:
            self.writer_dropped.labels(target).inc(parsed.writer_dropped)
            log.info("nccl %s: Inspector dropped %d record(s) before writing them", target, parsed.writer_dropped)

    def poll(self) -> list[Batch]:
        """One read of the directory; failures are logged and counted, never raised."""
        self.save_state()  # the previous poll's batches are published by now
        t0, out, rows, unknown = time.monotonic(), [], 0, 0
        try:
            paths = self.directory.files()
        except OSError as exc:
            self.targets.failed(self.directory.name, f"{type(exc).__name__}: {exc}", time.monotonic() - t0)
            return []
        self._warned &= {str(p) for p in paths}
        # the read budget is shared by the files; the next poll goes on with the file this one did not finish
        budget, resume = self.directory.max_read_bytes, self._resume
        start = next((i for i, p in enumerate(paths) if resume is not None and str(p) >= resume), 0)
        chunks: list[FileChunk] = []
        self._resume = None
        for path in paths[start:] + paths[:start]:
            if budget <= 0:
                self._resume = self._resume or str(path)
                break
            try:
                chunk = self.directory.read(path, budget)
            except OSError as exc:  # gone between the listing and the read, or not ours to read
                problem = f"{type(exc).__name__}: {exc}"
                if self._unreadable.get(str(path)) != problem:
                    log.warning("nccl %s: %s (skipped; the other files are read)", path, problem)
                self._unreadable[str(path)] = problem
                continue
            self._unreadable.pop(str(path), None)
            if chunk is None:
                continue
            budget -= len(chunk.data)
            if budget <= 0:
                self._resume = str(path)  # it may have more
            chunks.append(chunk)
        prom = [is_prometheus(c.path.name, c.data) for c in chunks]
        json_chunks = [c for c, is_prom in zip(chunks, prom, strict=True) if not is_prom]
        together = self._parse_together(json_chunks) if len(json_chunks) > 1 else None
        alone = chunks if together is None else [c for c, is_prom in zip(chunks, prom, strict=True) if is_prom]
        for parsed in ([together] if together else []) + [self._parse(c) for c in alone]:
            rows, unknown = rows + parsed.rows, unknown + parsed.unknown
            self._count(parsed)
            out += collectives_batches(parsed.batch, self.max_rows) + drops_batches(parsed.drops)
        self.rows += rows
        problem = f"{len(self._unreadable)} file(s) unreadable" if self._unreadable else ""
        took = time.monotonic() - t0
        self.targets.succeeded(self.directory.name, took, values=rows, unknown=unknown, problem=problem)
        return out

    def run(self, interval_s: float, stop: threading.Event, on_batch: Callable[[Batch], None] | None = None) -> int:
        """Poll and publish every `interval_s` until `stop`; the offsets are saved at every poll and at the end."""
        try:
            if on_batch is not None:
                return run_polls(self.poll, None, interval_s, stop, on_batch)
            return run_ticks(self.poll, self.producer, interval_s, stop, self.metrics, log, self.directory.name)
        finally:
            self.save_state()
