"""Counter samples stamped no later than the sample before them of their series, dropped at the edge.

A collector receives each series' samples in the order the device sent them. When a device's clock steps back
(NTP correcting a few seconds), its next samples carry stamps earlier than ones already shipped; in the store,
sorted by stamp, they interleave with them and every other difference is a drop or a burst. Only here, where
the arrival order is still known, can they be told apart: `StampGuard` wraps a collector's producer and drops
(and counts) every `counters` row stamped at or before the last one of its (device, port, priority, metric,
source) this producer shipped. A re-sent sample with the same stamp is dropped the same way. Imports are not
guarded: files may come in any order.
"""

from __future__ import annotations

import logging

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer

__all__ = ["StampGuard"]

log = logging.getLogger(__name__)


def _series_keys(data: pa.RecordBatch) -> list[str]:
    """One string per row naming its series as one source shipped it."""
    parts = [pc.cast(data.column(c), pa.string()) for c in ("device", "port", "metric", "source")]
    priority = pc.cast(data.column("priority"), pa.string())
    return pc.binary_join_element_wise(*parts, priority, "\x1f").to_pylist()  # type: ignore[no-any-return]


class StampGuard:
    """A Producer that drops counter rows not stamped after their series' last shipped row (module docstring)."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        #: rows dropped, stamped at or before their series' previous row
        self.dropped = 0
        self._last: dict[str, int] = {}

    def publish(self, batch: Batch) -> None:
        if batch.stream != "counters" or batch.num_rows == 0:
            self.producer.publish(batch)
            return
        data = batch.data
        stamps = data.column("ts").cast(pa.int64()).to_numpy(zero_copy_only=False)
        keep = np.ones(len(stamps), dtype=bool)
        last = self._last
        for i, (key, ts) in enumerate(zip(_series_keys(data), stamps.tolist(), strict=True)):
            before = last.get(key)
            if before is not None and ts <= before:
                keep[i] = False
            else:
                last[key] = ts
        dropped = int(len(keep) - keep.sum())
        if dropped:
            self.dropped += dropped
            log.info(
                "%d counter samples dropped: stamped no later than their series' previous (a clock stepped back, a "
                "value re-sent with its old stamp)",
                dropped,
            )
            if dropped == len(keep):
                return
            batch = Batch(batch.stream, data.filter(pa.array(keep)), batch.key)
        self.producer.publish(batch)

    def flush(self, timeout: float | None = None) -> None:
        self.producer.flush(timeout)

    def close(self) -> None:
        self.producer.close()
