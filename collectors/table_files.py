"""Files shaped like a stream table as other tools write them (`rocescope import --table T FILE`): a pandas or
Spark export leaves out the columns that mean "not given" (a counter's priority, its raw name), writes nulls
in them, and writes times as epoch numbers. Such a file is completed from the schema, never guessed at: a
column the schema gives no "not given" value for must be in the file, except a counters file's `role`, which
`--role` names for the whole file. A cabling plan (device, port, peer_device, peer_port) is a `links` file."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from rocescope import schema
from rocescope.errors import SchemaError

__all__ = ["completed", "epoch_unit"]

#: Upper bounds of epoch magnitudes per unit: today is ~1.8e9 s, 1.8e12 ms, 1.8e15 us, 1.8e18 ns; each bound
#: leaves three orders of magnitude on either side, so no date from 1973 to 5138 is read in the wrong unit.
_UNITS = ((1e11, "s"), (1e14, "ms"), (1e17, "us"))


def epoch_unit(largest: float) -> str:
    """The unit an epoch number this large counts in."""
    for bound, unit in _UNITS:
        if abs(largest) < bound:
            return unit
    return "ns"


def _epoch(values: pa.ChunkedArray) -> pa.ChunkedArray:
    """Epoch numbers as UTC timestamps, in the unit their magnitude shows: integers exactly, floats to the
    microsecond (a float of seconds since 1970 holds no finer time)."""
    largest = pc.max(pc.abs(values)).as_py() or 0
    per_second = {"s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}[epoch_unit(largest)]
    if pa.types.is_integer(values.type):
        ns = pc.multiply_checked(values.cast(pa.int64()), per_second)
    else:
        grain = min(per_second, 1_000)
        grains = pc.round(pc.multiply(values.cast(pa.float64()), per_second / grain)).cast(pa.int64())
        ns = pc.multiply_checked(grains, grain)
    return ns.cast(pa.int64()).cast(pa.timestamp("ns", tz="UTC"))


def completed(stream: str, table: pa.Table, role: str | None = None, at: dt.datetime | None = None) -> pa.Table:
    """`table` with the stream's "not given" columns added or their nulls filled (an observation time: `at`,
    else now: a cabling plan's links), epoch numbers as times and, for counters, `role` where the file has
    none; raises SchemaError naming what is still missing."""
    spec = schema.TABLES[stream]
    now = at or dt.datetime.now(dt.UTC)
    for col in spec.columns:
        fill = now if col.unknown == schema.IMPORT_TIME else col.unknown
        if col.name in table.column_names:
            data = table.column(col.name)
            if pa.types.is_timestamp(col.arrow_type) and (
                pa.types.is_integer(data.type) or pa.types.is_floating(data.type)
            ):
                try:
                    data = _epoch(data)
                except pa.ArrowInvalid as exc:  # beyond what a nanosecond timestamp holds (after 2262)
                    raise SchemaError(f"{stream}.{col.name}: epoch numbers out of range: {exc}") from None
            elif col.name == "role" and role and data.null_count:
                data = pc.fill_null(data.cast(pa.string()), role)
            elif fill is not None and pa.types.is_null(data.type):
                data = pa.chunked_array([pa.repeat(fill, len(data))])
            elif fill is not None and data.null_count:
                if pa.types.is_dictionary(data.type):
                    data = data.cast(data.type.value_type)
                data = pc.fill_null(data, pa.scalar(fill).cast(data.type))
            table = table.set_column(table.column_names.index(col.name), col.name, data)
        elif fill is not None or (stream == "counters" and col.name == "role" and role):
            table = table.append_column(col.name, pa.repeat(role if fill is None else fill, table.num_rows))
    if stream == "counters" and "role" not in table.column_names:
        raise SchemaError("counters: the file has no `role` column: give --role switch|nic|host for its rows")
    return table
