"""`counters` rows gathered column by column, then one Arrow batch: the one way collectors build them.

Every source (gNMI, SNMP, ethtool/RDMA, eBPF, imported files) ends with the same narrow rows; building
them here keeps the column types, the dictionary encoding and the conform step in one place. The
columns are plain lists so a hot loop can bind `rows.value.append` once and skip the method call.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from rocescope.pipeline.batch import Batch, conform

#: what makes two imported rows one reading (the same series at the same time with the same value)
DUPLICATE_KEY = ("ts", "device", "port", "priority", "metric", "value")
#: the reason an imported row repeated exactly is skipped under
DUPLICATE = "duplicates (the same series, time and value again)"

__all__ = ["CounterRows", "constant"]


def constant(value: str, n: int) -> pa.DictionaryArray:
    """`n` copies of one string as a dictionary column (one dictionary entry, int32 codes)."""
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], pa.string()))


def _strings(values: list[str]) -> pa.DictionaryArray:
    return pa.array(values, pa.string()).dictionary_encode()


@dataclass(slots=True)
class CounterRows:
    """`counters` rows being gathered, and what was skipped on the way.

    `device` and `source` stay empty while every row has the same one (given to `to_batch`); a builder
    whose rows span devices (an imported file) or sources (ethtool and RDMA of one host) fills them.
    A builder that appends metric, priority, value and raw name first (a normalizer) tags the new rows
    with their time and port afterwards with `stamp`.
    """

    ts: list[int] = field(default_factory=list)
    port: list[str] = field(default_factory=list)
    priority: list[int] = field(default_factory=list)
    metric: list[str] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    raw_name: list[str] = field(default_factory=list)
    device: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    unknown: int = 0  # values the catalog does not know (kept as `unknown:<raw>` or dropped, per source)
    malformed: int = 0  # records skipped as unreadable
    nonnumeric: int = 0  # text or binary values skipped
    #: values an importer read and did not land as counters, by reason (its accounting: landed + these = read)
    skipped: Counter[str] = field(default_factory=Counter)
    #: facts that are no counters, kept for their own table: LLDP neighbour state (openconfig-lldp over gNMI),
    #: (device, local port, neighbour id) -> {leaf: value}, with `ts` the latest time any leaf was stamped
    neighbors: dict[tuple[str, str, str], dict[str, str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.value)

    def add(
        self, ts: int, port: str, metric: str, value: float, raw_name: str, priority: int = -1, device: str = ""
    ) -> None:
        """One row; `device` only when the rows span devices."""
        self.ts.append(ts)
        self.port.append(port)
        self.priority.append(priority)
        self.metric.append(metric)
        self.value.append(value)
        self.raw_name.append(raw_name)
        if device:
            self.device.append(device)

    def stamp(self, ts: int, port: str, source: str = "") -> int:
        """Give the rows appended since the last stamp their time, port (and source); how many they are."""
        k = len(self.value) - len(self.ts)
        self.ts.extend([ts] * k)
        self.port.extend([port] * k)
        if source:
            self.source.extend([source] * k)
        return k

    def truncate(self, n: int) -> None:
        """Keep only the first `n` rows (drop what a target that failed half-way added)."""
        for column in (self.ts, self.port, self.priority, self.metric, self.value, self.raw_name):
            del column[n:]
        del self.device[n:]
        del self.source[n:]

    def clear(self) -> None:
        self.truncate(0)
        self.unknown = self.malformed = self.nonnumeric = 0
        self.neighbors.clear()

    def table(self, device: str, role: str, source: str) -> pa.Table:
        """The rows as a `counters` table; `device`/`source` fill the columns the rows did not set."""
        n = len(self)
        if len(self.ts) != n or len(self.port) != n:
            raise ValueError(f"{n} values but {len(self.ts)} timestamps and {len(self.port)} ports: stamp() missing")
        return pa.table(
            {
                "ts": pa.array(np.asarray(self.ts, dtype=np.int64), pa.timestamp("ns", tz="UTC")),
                "device": _strings(self.device) if self.device else constant(device, n),
                "role": constant(role, n),
                "port": _strings(self.port),
                "priority": pa.array(np.asarray(self.priority, dtype=np.int8), pa.int8()),
                "metric": _strings(self.metric),
                "value": pa.array(np.asarray(self.value, dtype=np.float64), pa.float64()),
                "source": _strings(self.source) if self.source else constant(source, n),
                "raw_name": _strings(self.raw_name),
            }
        )

    def to_batch(self, device: str, role: str, source: str) -> Batch:
        """One `counters` Batch of every row, keyed by `device`."""
        return Batch("counters", conform("counters", self.table(device, role, source)), key=device)

    def to_batches(self, role: str, source: str) -> list[Batch]:
        """One `counters` Batch per device of rows that span devices (each row's `device`): an imported file's.
        A row that repeats an earlier one of these exactly (series, time and value: a notification a capture
        holds twice, two subscriptions to one path) is dropped and counted in `skipped` as a duplicate."""
        if not len(self):
            return []
        table = self.table("", role, source)
        keys = pl.DataFrame(table.select(list(DUPLICATE_KEY)))
        first = keys.select(pl.struct(DUPLICATE_KEY).is_first_distinct()).to_series()
        repeated = table.num_rows - int(first.sum())
        devices = self.device
        if repeated:
            self.skipped[DUPLICATE] += repeated
            table = table.filter(first.to_arrow())
            devices = [str(d) for d in table.column("device").to_pylist()] if self.device else []
        counts = Counter(devices)
        if len(counts) > 1:  # rows of one device together, in their order (a stable sort)
            table = table.take(pc.sort_indices(pa.array(devices, pa.string())))
        out, at = [], 0
        for device in sorted(counts):
            part = table.slice(at, counts[device])
            at += counts[device]
            out.append(Batch("counters", conform("counters", part), key=device))
        return out
