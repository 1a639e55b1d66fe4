"""The Batch: the unit that crosses every boundary (an Arrow record batch of one stream).

On the wire a Batch is one Arrow IPC stream holding one record batch, the format ClickHouse's
own Kafka engine reads as `ArrowStream`. Decoding checks the schema against `rocescope.schema`,
so a message from a stale or foreign producer is refused with a reason instead of landing wrong.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from rocescope import schema
from rocescope.errors import DecodeError, SchemaError

HEADER_SCHEMA_VERSION = "rocescope-schema-version"
HEADER_STREAM = "rocescope-stream"
HEADER_MESSAGE_ID = "rocescope-id"


@dataclass(frozen=True)
class Batch:
    """Rows of one stream, conforming to `schema.arrow_schema(stream)`."""

    stream: str
    data: pa.RecordBatch
    key: str = ""

    @property
    def num_rows(self) -> int:
        return int(self.data.num_rows)


def conform(stream: str, data: pa.RecordBatch | pa.Table) -> pa.RecordBatch:
    """Cast `data` to the stream's schema (column order, dictionary encoding), or raise SchemaError."""
    target = schema.arrow_schema(stream)
    names = set(data.schema.names)
    missing = [n for n in target.names if n not in names]
    extra = [n for n in data.schema.names if n not in target.names]
    if missing or extra:
        raise SchemaError(f"{stream}: missing columns {missing}, unexpected columns {extra}")
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    table = table.select(target.names)
    for name in target.names:
        if table.column(name).null_count:
            raise SchemaError(f"{stream}.{name}: null values are not allowed")
    try:
        table = table.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise SchemaError(f"{stream}: cannot cast to schema v{schema.SCHEMA_VERSION}: {exc}") from exc
    return table.combine_chunks().to_batches()[0] if table.num_rows else _empty(target)


def _empty(target: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=target)


def make_batch(stream: str, columns: Mapping[str, Sequence[Any] | pa.Array], key: str = "") -> Batch:
    """Build a Batch from columns (Python sequences or Arrow arrays), cast to the schema."""
    target = schema.arrow_schema(stream)
    arrays = {}
    for name, values in columns.items():
        typ = target.field(name).type if name in target.names else None
        if isinstance(values, pa.Array | pa.ChunkedArray):
            arrays[name] = values
        elif typ is not None and pa.types.is_dictionary(typ):
            arrays[name] = pa.array(values, pa.string()).dictionary_encode()
        else:
            arrays[name] = pa.array(values, typ)
    return Batch(stream, conform(stream, pa.table(arrays)), key)


def encode(batch: Batch) -> bytes:
    """One Arrow IPC stream holding the one record batch."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.data.schema) as writer:
        writer.write_batch(batch.data)
    return bytes(sink.getvalue())


def decode(stream: str, payload: bytes, key: str = "") -> Batch:
    """Inverse of `encode`; raises DecodeError (undecodable) or SchemaError (wrong columns)."""
    try:
        reader = pa.ipc.open_stream(payload)
        table = reader.read_all()
        # Reading checks the framing only: out-of-range offsets or dictionary indices would reach the store.
        table.validate(full=True)
    except (pa.ArrowInvalid, pa.ArrowException, OSError, ValueError) as exc:
        raise DecodeError(f"{stream}: not an Arrow IPC stream: {exc}") from exc
    version = (table.schema.metadata or {}).get(b"rocescope.schema_version")
    if version is not None and version != str(schema.SCHEMA_VERSION).encode():
        shown = version.decode(errors="replace")[:40]
        raise SchemaError(f"{stream}: schema version {shown!r} != {schema.SCHEMA_VERSION}")
    return Batch(stream, conform(stream, table), key)


def headers(with_id: bool = True) -> list[tuple[str, bytes]]:
    """The schema version, and an id unique to this message: a producer's retry that the broker logs
    twice carries the same id, and the sink takes it once (brokers without working idempotence). A
    transport that cannot log a message twice (in-process) leaves the id out."""
    out = [(HEADER_SCHEMA_VERSION, str(schema.SCHEMA_VERSION).encode())]
    return [*out, (HEADER_MESSAGE_ID, uuid.uuid4().bytes)] if with_id else out


def message_id(hdrs: Sequence[tuple[str, bytes]]) -> int | None:
    """The producer-given id of a message as 64 bits (its first 8 random bytes: two messages of one
    partition's remembered window share them with a chance below 1e-9), None when the producer gives none."""
    for name, value in hdrs:
        if name == HEADER_MESSAGE_ID and value:
            return int.from_bytes(value[:8], "big")
    return None


def concat(stream: str, batches: Sequence[pa.RecordBatch]) -> pa.Table:
    """Many batches of one stream as one table, for a single bulk insert."""
    return pa.Table.from_batches(list(batches), schema=schema.arrow_schema(stream))
