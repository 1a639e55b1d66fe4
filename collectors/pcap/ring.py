"""Live capture in rotating files: dumpcap's ring buffer, each closed file decoded and shipped, then removed.

pyshark's live capture decodes a few hundred packets/s; a mirror port carries far more. dumpcap
(Wireshark's capture engine, which tshark itself uses) writes RoCEv2 frames and the tunnels mirrors send them
in (BPF `ROCE_CAPTURE_FILTER`) to a ring of files (`-b duration:N -b files:M`); every file it has closed is
decoded by the fast path (`fast.py`, pcap and pcapng) and shipped, then removed unless `keep_files`. A file is
closed once dumpcap has started a newer one, or dumpcap has exited. Sampling keeps 1 in N packets, counted
across files. The ring bounds the disk: if decoding falls behind, dumpcap drops the oldest file.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.tshark import ROCE_CAPTURE_FILTER, PcapFile
from rocescope.errors import DecodeError, RocescopeError
from rocescope.pipeline.batch import Batch

log = logging.getLogger(__name__)

_STEM = "roce"


class CaptureError(RocescopeError):
    """dumpcap could not capture (no such interface, no permission)."""


@dataclass
class RingCapture:
    """dumpcap writing `files` files of `file_seconds` each into `directory` (a temp dir when None), from one
    interface or several (one pcapng, each packet on its interface: see `PcapCollector.interface_points`).

    `command_prefix` runs dumpcap through something else (`ip netns exec NS`, `nsenter ...`): the seam
    tests use to capture inside a namespace they own."""

    interface: str | Sequence[str]
    directory: Path | None = None
    file_seconds: float = 10.0
    files: int = 4
    bpf_filter: str = ROCE_CAPTURE_FILTER
    keep_files: bool = False
    command_prefix: Sequence[str] = ()
    dumpcap: str | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _tempdir: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False, repr=False)

    def argv(self, directory: Path) -> list[str]:
        binary = self.dumpcap or shutil.which("dumpcap") or "dumpcap"
        seconds = max(1, round(self.file_seconds))  # dumpcap takes whole seconds
        interfaces = [a for name in self.interfaces for a in ("-i", name)]
        return [
            *self.command_prefix,
            *(binary, "-q", "-f", self.bpf_filter, *interfaces),  # a filter before the first -i applies to all
            *("-b", f"duration:{seconds}", "-b", f"files:{self.files}", "-w", str(directory / f"{_STEM}.pcapng")),
        ]

    @property
    def interfaces(self) -> list[str]:
        return [self.interface] if isinstance(self.interface, str) else list(self.interface)

    @property
    def label(self) -> str:
        return ", ".join(self.interfaces)

    @property
    def path(self) -> Path:
        if self.directory is not None:
            return self.directory
        if self._tempdir is None:
            self._tempdir = tempfile.TemporaryDirectory(prefix="rocescope-capture-")
        return Path(self._tempdir.name)

    def start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        argv = self.argv(self.path)
        try:
            self._process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        except OSError as exc:
            raise CaptureError(f"{' '.join(argv)}: {exc}") from exc
        log.info("capturing on %s into %s (%s)", self.label, self.path, " ".join(argv))

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def closed_files(self) -> list[Path]:
        """Ring files dumpcap is done with, oldest first (its names carry a sequence number)."""
        found = sorted(self.path.glob(f"{_STEM}_*.pcapng"))
        return found[:-1] if self.running else found

    def landed(self, path: Path) -> None:
        """A file's packets are shipped: remove it unless told to keep files."""
        if not self.keep_files:
            path.unlink(missing_ok=True)

    def stop(self) -> str | None:
        """Stop dumpcap (it closes its last file); its error, if it failed."""
        process, self._process = self._process, None
        if process is None:
            return None
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        err = ""
        if process.stderr is not None:
            err = process.stderr.read().decode(errors="replace").strip()
            process.stderr.close()
        if process.returncode not in (0, -15, 143):
            return err.splitlines()[-1] if err else f"dumpcap exited {process.returncode}"
        return None

    def cleanup(self) -> None:
        if self._tempdir is not None and not self.keep_files:
            self._tempdir.cleanup()
            self._tempdir = None


@dataclass
class Sampler:
    """Keeps 1 in `rate` packets, counting across batches so a file boundary does not reset the phase."""

    rate: int
    seen: int = 0

    def __call__(self, batch: Batch) -> Batch:
        if self.rate <= 1:
            return batch
        n = batch.num_rows
        first = (-self.seen) % self.rate
        self.seen += n
        keep = pa.array(range(first, n, self.rate), pa.int64())
        return Batch(batch.stream, batch.data.take(keep), key=batch.key)


def land_file(path: Path, collector: PcapCollector, ship: Callable[[Batch], None], sample: Sampler) -> int:
    """Decode one closed capture file and ship its (sampled) packets; the number shipped."""
    shipped = 0
    try:
        source = PcapFile(path)
    except DecodeError as exc:
        collector.source_errors += 1
        log.error("%s: %s", collector.capture_point, exc)
        return 0
    try:
        for batch in collector.collect(source):
            kept = sample(batch)
            if kept.num_rows:
                ship(kept)
                shipped += kept.num_rows
    finally:
        source.close()
    return shipped


def capture_live(
    ring: RingCapture,
    collector: PcapCollector,
    ship: Callable[[Batch], None],
    stop: threading.Event,
    on_file: Callable[[Path, int], None] | None = None,
) -> int:
    """Capture until `stop`, shipping each closed file (then `on_file(path, packets shipped)`); returns
    the number of files landed.

    Raises CaptureError when dumpcap fails before any file landed (bad interface, no permission)."""
    sample = Sampler(collector.sampling_rate)
    landed = 0
    ring.start()
    try:
        while True:
            stopping = stop.wait(min(1.0, ring.file_seconds / 4))
            if stopping or not ring.running:
                error = ring.stop()
                if error:
                    if landed == 0 and not ring.closed_files():
                        raise CaptureError(f"capture on {ring.label} failed: {error}")
                    collector.source_errors += 1
                    log.error("capture on %s ended: %s; the files before it are kept", ring.label, error)
                stopping = True
            for path in ring.closed_files():
                n = land_file(path, collector, ship, sample)
                if on_file is not None:
                    on_file(path, n)
                ring.landed(path)
                landed += 1
            if stopping:
                return landed
    finally:
        ring.stop()
        ring.cleanup()
