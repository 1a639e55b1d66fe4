"""gnmic captures read in blocks (`importers.gnmic_stream`, `gnmic_file_batches`): whatever the block size, the
same documents, the same damage counted and the same rows as reading the whole text at once, so an import of a
capture larger than memory loses and invents nothing. The blocks cut documents, lines, UTF-8 characters and
`\\ud800` escapes anywhere."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.importers import gnmic_documents, gnmic_file_batches, gnmic_rows, gnmic_stream

SRL = Path(__file__).parent.parent / "fixtures" / "gnmic" / "srl_event.json"
TS = 1_764_000_000_000_000_000


def event(i: int, port: str = "Ethernet0", **values: object) -> dict[str, object]:
    tags = {"interface_name": port, "source": f"leaf-{i % 3}:57400", "subscription-name": "s"}
    return {"name": "s", "timestamp": TS + i, "tags": tags, "values": values or {
        "/interfaces/interface/state/counters/in-octets": 1000 + i,
        "/interfaces/interface/state/counters/out-octets": 2000 + i}}  # fmt: skip


def capture() -> str:
    """NDJSON events, a pretty-printed array of events (gnmic's multiline output), a cut line, a line of
    garbage, a port name with a multi-byte character and one with a lone-surrogate escape, a speed as a word."""
    lines = [json.dumps(event(i)) for i in range(40)]
    lines.insert(5, json.dumps(event(99))[:37])  # a write cut short
    lines.insert(20, "not json at all")
    lines.append(json.dumps([event(100 + i) for i in range(3)], indent=2))
    lines.append(json.dumps(event(200, port="Ethernet0/é")))
    lines.append(json.dumps(event(201, port="Ethernet\ud800bad")))
    lines.append(json.dumps(event(202, **{"/interfaces/interface/ethernet/state/port-speed": "SPEED_400GB"})))
    lines.append(SRL.read_text())
    return "\n".join(lines) + "\n"


def blocks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def plain(rows: CounterRows) -> Counter[tuple[object, ...]]:
    return Counter(zip(rows.ts, rows.device, rows.port, rows.priority, rows.metric, rows.value, strict=True))


@pytest.mark.parametrize("size", [1, 7, 64, 1000, 1 << 20])
def test_blocks_of_any_size_read_as_the_whole_text(size: int) -> None:
    text = capture()
    whole = list(gnmic_documents(text))
    assert whole.count(None) == 2 and len(whole) > 40
    streamed = list(gnmic_stream(blocks(text.encode(), size)))
    assert streamed == whole
    rows, again = gnmic_rows(iter(whole)), CounterRows()
    batches = list(gnmic_file_batches(blocks(text.encode(), size), "", again, every=17))
    assert len(batches) > 3  # sent as the file is read, not at its end
    table = pa.concat_tables(pa.Table.from_batches([b.data]) for b in batches if b.stream == "counters")
    got = Counter(
        zip(table.column("ts").cast(pa.int64()).to_pylist(), table.column("device").to_pylist(),
            table.column("port").to_pylist(), table.column("priority").to_pylist(),
            table.column("metric").to_pylist(), table.column("value").to_pylist(), strict=True)
    )  # fmt: skip
    assert got == plain(rows) and (again.malformed, again.nonnumeric) == (rows.malformed, rows.nonnumeric)
    assert any("\ufffd" in p or "?" in p or "bad" in p for p in table.column("port").to_pylist())


def test_a_capture_without_json_is_refused() -> None:
    from rocescope.errors import DecodeError

    with pytest.raises(DecodeError):
        list(gnmic_stream(blocks(b"no json here\nat all\n", 5)))
