"""Valid rows for any stream, generated from the schema alone (so new columns are covered)."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

from rocescope import schema
from rocescope.pipeline.batch import Batch, conform


def sample_table(stream: str, n: int, seed: int = 0, start: dt.datetime | None = None, device: str = "") -> pa.Table:
    rng = np.random.default_rng(seed)
    start = start or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    base_ns = int(start.timestamp() * 1e9)
    columns: dict[str, pa.Array] = {}
    for field in schema.arrow_schema(stream):
        t = field.type
        if pa.types.is_timestamp(t):
            arr = pa.array(base_ns + np.arange(n, dtype="int64") * 1_000_000 + seed, pa.timestamp("ns", tz="UTC"))
        elif pa.types.is_dictionary(t) or pa.types.is_string(t):
            if field.name == "device" and device:
                values = [device] * n
            else:
                values = [f"{field.name}-{int(v)}" for v in rng.integers(0, 17, n)]
            arr = pa.array(values)
        elif pa.types.is_list(t):
            arr = pa.array([[f"{field.name}-{int(v)}"] for v in rng.integers(0, 5, n)], t)
        elif pa.types.is_floating(t):
            arr = pa.array(rng.uniform(0, 1e12, n).round(3), t)
        elif pa.types.is_signed_integer(t):
            arr = pa.array(rng.integers(-1, 8, n), t)
        else:
            arr = pa.array(rng.integers(0, 2 ** min(t.bit_width, 16), n), t)
        columns[field.name] = arr
    return pa.Table.from_batches([conform(stream, pa.table(columns))])


def sample_batch(stream: str, n: int, seed: int = 0, device: str = "dev-0") -> Batch:
    table = sample_table(stream, n, seed, device=device)
    return Batch(stream, table.to_batches()[0], key=device)
