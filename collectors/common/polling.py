"""Polling loops shared by the collectors: one target's failure never stops the others.

Each target (a host's lldpcli, a switch over gNMI, the Kubernetes API, a file) is polled by
`poll_target`, which times it and records the outcome in the collector's `Targets` (health, self-metrics,
one log line per failure), so an operator sees which target is broken and why without one bad device
hiding the rest.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa

from rocescope.collectors.common.health import CollectorMetrics, Targets
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer

__all__ = ["batches_table", "poll_target", "run_polls", "run_ticks"]

T = TypeVar("T")


def poll_target(name: str, poll: Callable[[], tuple[T, int, int]], targets: Targets) -> T | None:
    """Run `poll` (-> (result, rows, malformed records)) for one target; None when it failed.

    Any exception is this target's failure: counted, logged once as one line, never raised, so the
    caller goes on with the next target.
    """
    t0 = time.monotonic()
    try:
        result, rows, malformed = poll()
    except Exception as exc:  # one target's failure (I/O, protocol, garbage) must not stop the others
        targets.failed(name, f"poll failed: {type(exc).__name__}: {str(exc)[:300]}", time.monotonic() - t0)
        return None
    targets.succeeded(name, time.monotonic() - t0, values=rows, malformed=malformed)
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


def run_ticks(
    poll: Callable[[], Sequence[Batch]],
    producer: Producer | None,
    interval_s: float,
    stop: threading.Event,
    metrics: CollectorMetrics,
    log: logging.Logger,
    target: str,
    first_tick_now: bool = True,
) -> int:
    """Poll on fixed ticks every `interval_s` until `stop`, publishing each non-empty Batch; returns polls.

    Ticks do not drift with the poll's own duration; a poll that runs past the next tick skips it,
    counted in `overruns` of `target` (what one poll reads: the host). A producer that refuses a Batch
    is logged and counted in `publish_errors`, and polling goes on. `first_tick_now=False` waits one
    interval before the first poll (for counters that need time to count, such as BPF maps).
    """
    polls = 0
    next_tick = time.monotonic() + (0.0 if first_tick_now else interval_s)
    while not stop.wait(max(0.0, next_tick - time.monotonic())):
        for batch in poll():
            if producer is None or not batch.num_rows:
                continue
            try:
                producer.publish(batch)
            except Exception as exc:  # any transport failure: count it, keep polling
                metrics.publish_errors.inc()
                log.warning(
                    "%s %s: publishing %d %s rows failed: %s", metrics.kind, target, batch.num_rows, batch.stream, exc
                )
        polls += 1
        next_tick += interval_s
        now = time.monotonic()
        if now > next_tick:
            missed = int((now - next_tick) // interval_s) + 1
            metrics.overruns.labels(target).inc(missed)
            next_tick += missed * interval_s
    return polls
