"""Per-target polling for the slow collectors (LLDP, jobs, imports): one target's failure never stops the others.

Each target (a host's lldpcli, a switch over gNMI, the Kubernetes API, a file) is polled by
`poll_target`, which times it, counts success/failure/malformed records into `PollMetrics` (a private
Prometheus registry, as every collector keeps) and logs one line per failure, so an operator sees
which target is broken and why without one bad device hiding the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from prometheus_client import CollectorRegistry, Counter, Gauge

from rocescope.pipeline.batch import Batch
from rocescope.pipeline.metrics import SelfMetrics
from rocescope.pipeline.transport import Producer

__all__ = ["PollMetrics", "TargetHealth", "batches_table", "poll_target", "run_polls"]

T = TypeVar("T")


@dataclass
class TargetHealth:
    """What one target's polls did (cumulative)."""

    target: str
    polls: int = 0
    failures: int = 0
    rows: int = 0
    malformed: int = 0
    last_seconds: float = 0.0
    last_error: str | None = None

    @property
    def up(self) -> bool:
        return self.polls > 0 and self.last_error is None


class PollMetrics(SelfMetrics):
    """`rocescope_<kind>_*`: polls, failures, duration, last success, rows and malformed records per target."""

    def __init__(self, kind: str, registry: CollectorRegistry | None = None):
        super().__init__(registry)
        r, t = self.registry, ["target"]
        self.polls = Counter(f"rocescope_{kind}_polls", "Target polls that succeeded.", t, registry=r)
        self.failures = Counter(f"rocescope_{kind}_poll_failures", "Target polls that failed.", t, registry=r)
        self.seconds = Gauge(f"rocescope_{kind}_poll_seconds", "Wall time of the target's last poll.", t, registry=r)
        self.last_success = Gauge(
            f"rocescope_{kind}_last_success_timestamp_seconds", "When the target was last polled fine.", t, registry=r
        )
        self.rows = Counter(f"rocescope_{kind}_rows", "Rows produced.", t, registry=r)
        self.malformed = Counter(
            f"rocescope_{kind}_malformed", "Records skipped as malformed (the others are kept).", t, registry=r
        )


def poll_target(
    name: str,
    poll: Callable[[], tuple[T, int, int]],
    metrics: PollMetrics,
    health: TargetHealth,
    log: logging.Logger,
) -> T | None:
    """Run `poll` (-> (result, rows, malformed records)) for one target; None when it failed.

    Any exception is this target's failure: counted, logged once as one line, never raised, so the
    caller goes on with the next target.
    """
    t0 = time.monotonic()
    try:
        result, rows, malformed = poll()
    except Exception as exc:  # one target's failure (I/O, protocol, garbage) must not stop the others
        took = time.monotonic() - t0
        health.failures += 1
        health.last_seconds = took
        problem = f"{type(exc).__name__}: {str(exc)[:300]}"
        if health.last_error != problem:
            log.warning("%s: poll failed after %.2f s: %s", name, took, problem)
        health.last_error = problem
        metrics.failures.labels(name).inc()
        metrics.seconds.labels(name).set(took)
        return None
    took = time.monotonic() - t0
    health.polls += 1
    health.rows += rows
    health.malformed += malformed
    health.last_seconds = took
    if health.last_error is not None:
        log.warning("%s: polled fine again", name)
    health.last_error = None
    metrics.polls.labels(name).inc()
    metrics.seconds.labels(name).set(took)
    metrics.last_success.labels(name).set(time.time())
    if rows:
        metrics.rows.labels(name).inc(rows)
    if malformed:
        metrics.malformed.labels(name).inc(malformed)
        log.warning("%s: %d malformed record(s) skipped, the others kept", name, malformed)
    return result


def batches_table(batches: Sequence[Batch], sort: Sequence[str] = ()) -> pa.Table:
    """Batches of one stream as one plain-string table (dictionary columns decoded), for `--once` output."""
    table = pa.Table.from_batches([b.data for b in batches])
    cols = {
        n: c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c
        for n, c in zip(table.column_names, table.columns, strict=True)
    }
    plain = pa.table(cols)
    return plain.sort_by([(s, "ascending") for s in sort]) if sort and plain.num_rows else plain


def run_polls(
    poll_once: Callable[[], Sequence[Batch]],
    producer: Producer | None,
    interval_s: float,
    stop: threading.Event,
    on_batch: Callable[[Batch], None] | None = None,
) -> int:
    """Poll and publish (to `on_batch`, else the producer) every `interval_s` until `stop`; returns polls."""
    polls = 0
    while not stop.is_set():
        for batch in poll_once():
            if on_batch is not None:
                on_batch(batch)
            elif producer is not None:
                producer.publish(batch)
        polls += 1
        if stop.wait(interval_s):
            break
    return polls
