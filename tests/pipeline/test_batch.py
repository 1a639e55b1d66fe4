from __future__ import annotations

import pyarrow as pa
import pytest

from rocescope import schema
from rocescope.errors import DecodeError, SchemaError
from rocescope.pipeline.batch import conform, decode, encode

from samples import sample_batch, sample_table


@pytest.mark.parametrize("stream", schema.STREAMS)
def test_encode_decode_round_trip(stream: str) -> None:
    batch = sample_batch(stream, 500, seed=3)
    back = decode(stream, encode(batch))
    assert back.data.equals(batch.data)
    assert back.data.schema.equals(schema.arrow_schema(stream))


def test_conform_reorders_and_casts() -> None:
    table = sample_table("counters", 10)
    shuffled = table.select(list(reversed(table.column_names)))
    plain = shuffled.set_column(
        shuffled.column_names.index("device"), "device", shuffled.column("device").cast(pa.string())
    )
    assert conform("counters", plain).to_pylist() == table.to_pylist()


def test_missing_and_extra_columns_are_named() -> None:
    table = sample_table("counters", 3).drop_columns(["metric"]).append_column("bogus", pa.array([1, 2, 3]))
    with pytest.raises(SchemaError, match=r"missing columns \['metric'\], unexpected columns \['bogus'\]"):
        conform("counters", table)


def test_nulls_are_refused() -> None:
    table = sample_table("counters", 3)
    table = table.set_column(table.column_names.index("value"), "value", pa.array([1.0, None, 2.0]))
    with pytest.raises(SchemaError, match="null"):
        conform("counters", table)


def test_garbage_and_wrong_stream_are_refused() -> None:
    with pytest.raises(DecodeError):
        decode("counters", b"\x00\x01garbage")
    with pytest.raises(SchemaError):
        decode("counters", encode(sample_batch("links", 3)))
