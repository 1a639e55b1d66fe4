"""The fabric clock of a served run: what each device has read so far, the tick the facades serve, and the
barrier that keeps the driver in lockstep with the consumers (gNMI streams) of each tick. It is the
`TickClock` `gnmi.GnmiFacade` samples on.

Each switch is a `Feed`: a fixed row layout (port, priority, metric, raw name, metric group as its gear names
them) and, per row, the last value the device read, that read's stamp on the device's own clock and the tick
it happened at. `publish` applies one tick's reads (only the rows the device read at that poll: each metric
group at its own cadence and phase); a stream sends the rows read since its last sample. The arrays are
replaced, never written in place, so a stream always sees one whole tick.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocescope.sim.counters import EPOCH

__all__ = ["FabricClock", "Feed", "FeedView", "Reads"]

log = logging.getLogger(__name__)

#: One device's reads at a tick: (positions in its layout, values, stamps in ns since the epoch).
Reads = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.int64]]


@dataclass(frozen=True)
class FeedView:
    """One device as of one tick: values, stamps (ns) and the tick of each row's last read."""

    layout: pa.Table
    values: npt.NDArray[np.float64]
    stamps: npt.NDArray[np.int64]
    read_at: npt.NDArray[np.int64]
    tick: int
    ts_ns: int
    final: bool


class Feed:
    """One device's rows: a fixed layout, and what the device last read into each (tick 0: never read, the value
    it held before the run; -1: gone, the device restarted and has not read it since)."""

    def __init__(self, layout: pa.Table, values: npt.NDArray[np.float64], ts: dt.datetime) -> None:
        self.layout = layout
        self.values = np.asarray(values, np.float64).copy()
        self.stamps = np.full(len(self.values), _ns(ts), np.int64)
        self.read_at = np.zeros(len(self.values), np.int64)

    def apply(self, tick: int, reads: Reads) -> None:
        pos, values, stamps = reads
        if not len(pos):
            return
        self.values, self.stamps, self.read_at = self.values.copy(), self.stamps.copy(), self.read_at.copy()
        self.values[pos], self.stamps[pos], self.read_at[pos] = values, stamps, tick

    def forget(self) -> None:
        """The device restarted: it holds no value until it reads each again."""
        self.read_at = np.full(len(self.values), -1, np.int64)


def _ns(ts: dt.datetime) -> int:
    return (ts - EPOCH) // dt.timedelta(microseconds=1) * 1000


class FabricClock:
    """The fabric time the facades serve: the last published tick, every device's feed, and a barrier.

    Consumers (gNMI streams) `register`, wait for ticks and acknowledge each with `done`; the driver's
    `barrier()` returns once every registered consumer acknowledged the latest tick. `finish()` publishes a
    last tick with no reads, on which streams send whatever they still hold, whatever their interval.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.tick = 0
        self.ts: dt.datetime | None = None
        self.final = False
        self._feeds: dict[str, Feed] = {}
        self._tables: dict[str, tuple[int, pa.Table]] = {}
        self._acked: dict[int, int] = {}
        self._names: dict[int, str] = {}
        self._next = 0
        self._closed = False

    def preset(self, ts: dt.datetime, feeds: dict[str, Feed]) -> None:
        """The devices, with what Get and SNMP serve before the first tick (no stream samples it)."""
        with self._cond:
            self.ts = ts
            self._feeds = feeds

    def publish(self, ts: dt.datetime, reads: dict[str, Reads], down: Collection[str] = ()) -> int:
        """One tick: each device's reads applied (devices not named read nothing; devices `down` hold nothing);
        streams wake up."""
        with self._cond:
            self.tick += 1
            self.ts = ts
            for device in down:
                self._feeds[device].forget()
            for device, r in reads.items():
                self._feeds[device].apply(self.tick, r)
            self._cond.notify_all()
            return self.tick

    def finish(self) -> int:
        """The last tick: nothing new is read; streams flush what they hold."""
        with self._cond:
            self.tick += 1
            self.final = True
            self._cond.notify_all()
            return self.tick

    def view(self, device: str) -> FeedView:
        with self._cond:
            f = self._feeds[device]
            ts = _ns(self.ts) if self.ts is not None else 0
            return FeedView(f.layout, f.values, f.stamps, f.read_at, self.tick, ts, self.final)

    def table(self, device: str) -> pa.Table:
        """The device's rows with their latest values, stamped at the tick (what Get and SNMP serve)."""
        with self._cond:
            cached = self._tables.get(device)
            if cached is not None and cached[0] == self.tick:
                return cached[1]
            f = self._feeds[device]
            ts = pa.array(np.full(len(f.values), _ns(self.ts) if self.ts else 0, np.int64)).view(
                pa.timestamp("ns", tz="UTC")
            )
            table = f.layout.append_column("value", pa.array(f.values, pa.float64())).append_column("ts", ts)
            self._tables[device] = (self.tick, table)
            return table

    def register(self, name: str) -> int:
        with self._cond:
            self._next += 1
            self._acked[self._next] = max(0, self.tick - 1)
            self._names[self._next] = name
            self._cond.notify_all()
            return self._next

    def unregister(self, consumer: int) -> None:
        with self._cond:
            self._acked.pop(consumer, None)
            self._names.pop(consumer, None)
            self._cond.notify_all()

    @property
    def consumers(self) -> int:
        with self._cond:
            return len(self._acked)

    def wait_consumers(self, n: int, timeout_s: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self._acked) >= n, timeout_s)

    def wait_tick(self, after: int, timeout_s: float) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self.tick > after, timeout_s)
            if self._closed:
                return -1
            return self.tick if self.tick > after else None

    def done(self, consumer: int, tick: int) -> None:
        with self._cond:
            if consumer in self._acked:
                self._acked[consumer] = max(self._acked[consumer], tick)
                self._cond.notify_all()

    def barrier(self, timeout_s: float = 60.0) -> bool:
        """Wait until every consumer is done with the latest tick; False (and a warning) on timeout."""
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._closed or all(a >= self.tick for a in self._acked.values()), timeout_s
            )
            if not ok:
                late = [self._names[c] for c, a in self._acked.items() if a < self.tick]
                log.warning("fabric clock: tick %d not acknowledged within %g s by %s", self.tick, timeout_s, late)
            return ok

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
