"""The fabric clock of a served run: the tick the facades serve, and the barrier that keeps the driver in
lockstep with the consumers (gNMI streams) of each tick. It is the `TickClock` `gnmi.GnmiFacade` samples on."""

from __future__ import annotations

import datetime as dt
import logging
import threading

import pyarrow as pa

__all__ = ["FabricClock"]

log = logging.getLogger(__name__)


class FabricClock:
    """The fabric time the facades serve: the last published tick, its tables, and a barrier.

    Consumers (gNMI streams) `register`, wait for ticks and acknowledge each with `done`; the driver's
    `barrier()` returns once every registered consumer acknowledged the latest tick.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.tick = 0
        self.ts: dt.datetime | None = None
        self._tables: dict[str, pa.Table] = {}
        self._acked: dict[int, int] = {}
        self._names: dict[int, str] = {}
        self._next = 0
        self._closed = False

    def preset(self, ts: dt.datetime, tables: dict[str, pa.Table]) -> None:
        """What Get and SNMP serve before the first tick (no stream samples it)."""
        with self._cond:
            self.ts = ts
            self._tables = tables

    def publish(self, ts: dt.datetime, tables: dict[str, pa.Table]) -> int:
        with self._cond:
            self.tick += 1
            self.ts = ts
            self._tables = tables
            self._cond.notify_all()
            return self.tick

    def table(self, device: str) -> pa.Table:
        with self._cond:
            return self._tables[device]

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
