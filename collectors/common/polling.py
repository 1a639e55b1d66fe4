"""Polling loops shared by the collectors: one target's failure never stops the others.

Each target (a host's lldpcli, a switch over gNMI, the Kubernetes API, a file) is polled by
`poll_target`, which times it and records the outcome in the collector's `Targets` (health, self-metrics,
one log line per failure), so an operator sees which target is broken and why without one bad device
hiding the rest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import pyarrow as pa

from rocescope.collectors.common.health import Targets
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer

__all__ = ["batches_table", "poll_target", "run_polls"]

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
