"""Sampled RoCEv2 packets (data, ACKs, CNPs) from a capture into the `packets` stream.

Capture files that are classic pcap or pcapng take the numpy fast path (`fast.py`); any other format,
and a pyshark live capture, is decoded by tshark (`tshark.py`). Either way each RoCEv2 packet becomes
one row, frames that are not RoCEv2 are skipped and counted by reason, a frame that cannot be decoded
is counted as malformed, and a capture that ends early keeps the packets before the problem.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from rocescope.collectors.common.health import CollectorMetrics
from rocescope.collectors.pcap.fast import batches, decode_pcap
from rocescope.collectors.pcap.framing import UnsupportedCapture
from rocescope.collectors.pcap.tshark import PacketSource, PcapFile, decode_packet
from rocescope.pipeline.batch import Batch, conform

__all__ = ["PcapCollector"]

log = logging.getLogger(__name__)

_COLUMNS = (
    "ts",
    "capture_point",
    "src_ip",
    "dst_ip",
    "udp_sport",
    "dscp",
    "ecn",
    "opcode",
    "dest_qp",
    "psn",
    "pkey",
    "becn",
    "length",
    "sampling_rate",
)


@dataclass
class PcapCollector:
    """Turns a packet source into `packets` Batches, counting what it skips and why."""

    capture_point: str
    sampling_rate: int = 1
    skipped: Counter[str] = field(default_factory=Counter)
    malformed: int = 0
    source_errors: int = 0
    fast_files: bool = True  # pcap/pcapng files take the numpy path (fast.py); other formats stay on tshark
    #: capture interface (pcapng if_name) -> capture point, for captures of several ports (fast path)
    interface_points: Mapping[str, str] = field(default_factory=dict)
    #: `rocescope_pcap_*`: per capture point, packets landed and frames skipped by reason, malformed frames
    metrics: CollectorMetrics = field(default_factory=lambda: CollectorMetrics("pcap"))

    def rows(self, source: PacketSource) -> Iterator[dict[str, Any]]:
        for packet in source.packets():
            try:
                row = decode_packet(packet)
            except (AttributeError, ValueError, KeyError) as exc:
                self.malformed += 1
                log.warning("%s: undecodable frame skipped: %s", self.capture_point, exc)
                continue
            if isinstance(row, str):
                self.skipped[row] += 1
                continue
            yield row
        if source.error:
            self.source_errors += 1
            log.error("%s: capture ended early, %s; the packets before it are kept", self.capture_point, source.error)

    def collect(self, source: PacketSource, batch_rows: int = 10_000) -> Iterator[Batch]:
        """Batches of at most `batch_rows` packets, keyed by capture point; once the source is read, what became
        of its frames is counted in `metrics` (`values_total{outcome,reason}`, `malformed`)."""
        skipped, malformed, landed = Counter(self.skipped), self.malformed, 0
        for batch in self._collect(source, batch_rows):
            landed += batch.num_rows
            yield batch
        self.metrics.count_values(self.capture_point, landed, skipped=self.skipped - skipped)
        if self.malformed > malformed:
            self.metrics.malformed.labels(self.capture_point).inc(self.malformed - malformed)

    def _collect(self, source: PacketSource, batch_rows: int) -> Iterator[Batch]:
        if self.fast_files and isinstance(source, PcapFile):
            fast = self._collect_file(source, batch_rows)
            if fast is not None:
                yield from fast
                return
        pending: list[dict[str, Any]] = []
        for row in self.rows(source):
            pending.append(row)
            if len(pending) >= batch_rows:
                yield self._batch(pending)
                pending = []
        if pending:
            yield self._batch(pending)

    def _collect_file(self, source: PcapFile, batch_rows: int) -> list[Batch] | None:
        """The fast path for a file: None when tshark has to read it instead."""
        try:
            decoded = decode_pcap(Path(source.path).read_bytes())
        except UnsupportedCapture as exc:
            log.info("%s: %s; decoding with tshark", source.path, exc)
            return None
        self.skipped.update(decoded.skipped)
        self.malformed += decoded.malformed
        if decoded.error:
            source.error = decoded.error
            self.source_errors += 1
            log.error("%s: capture ended early, %s; the packets before it are kept", self.capture_point, decoded.error)
        return list(batches(decoded, self.capture_point, self.sampling_rate, batch_rows, self.interface_points))

    def _batch(self, rows: list[dict[str, Any]]) -> Batch:
        columns: dict[str, Any] = {
            name: [r[name] for r in rows] for name in _COLUMNS if name not in ("capture_point", "sampling_rate")
        }
        columns["ts"] = pa.array(columns["ts"], pa.int64()).cast(pa.timestamp("ns", tz="UTC"))
        columns["capture_point"] = [self.capture_point] * len(rows)
        columns["sampling_rate"] = [self.sampling_rate] * len(rows)
        table = pa.table({name: columns[name] for name in _COLUMNS})
        return Batch("packets", conform("packets", table), key=self.capture_point)
