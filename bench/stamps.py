"""The edge's stamp guard (`pipeline/stamps.py`): counter rows a live collector ships per second through it.

Polls of a switch's counters (every series once per poll, as a gNMI collector flushes them) pass through a
`StampGuard` in front of a producer that keeps nothing; one poll in ten re-sends the previous poll's stamps (a
clock stepped back), so the dropping path is timed too. Small by default; `--full` for a 128 x 8 fabric's poll.

    python bench/stamps.py [--full]

Headline line: `stamp_guard: N values/s`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import time

import pyarrow as pa

from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.stamps import StampGuard

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Discard:
    def publish(self, batch: Batch) -> None:
        return None

    def flush(self, timeout: float | None = None) -> None:
        return None

    def close(self) -> None:
        return None


def poll(ports: int, metrics: int, second: float) -> Batch:
    n = ports * metrics
    table = pa.table(
        {
            "ts": pa.array([T0 + dt.timedelta(seconds=second)] * n, pa.timestamp("ns", tz="UTC")),
            "device": ["leaf-r0-01"] * n,
            "role": ["switch"] * n,
            "port": [f"Ethernet{4 * (i // metrics)}" for i in range(n)],
            "priority": pa.array([(i % metrics) % 8 for i in range(n)], pa.int8()),
            "metric": [f"m{i % metrics}" for i in range(n)],
            "value": pa.array([float(second)] * n, pa.float64()),
            "source": ["gnmi"] * n,
            "raw_name": ["x"] * n,
        }
    )
    return Batch("counters", conform("counters", table), "leaf-r0-01")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--full", action="store_true", help="a 128 x 8 fabric's leaf poll: 64 ports x 40 metrics, 300 polls"
    )
    args = ap.parse_args()
    ports, metrics, polls = (64, 40, 300) if args.full else (32, 40, 60)
    batches = [poll(ports, metrics, float(s - 1 if s % 10 == 9 else s)) for s in range(polls)]
    guard = StampGuard(Discard())
    t = time.perf_counter()
    for b in batches:
        guard.publish(b)
    seconds = time.perf_counter() - t
    rows = sum(b.num_rows for b in batches)
    print(f"{rows} values in {len(batches)} polls, {guard.dropped} dropped (re-sent stamps)")
    print(f"stamp_guard: {rows / seconds:,.0f} values/s")


if __name__ == "__main__":
    main()
