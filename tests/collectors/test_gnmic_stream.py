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


def test_what_is_no_single_line_document_is_read_as_the_standard_decoder_reads_it() -> None:
    """Whole lines go to orjson; everything else falls back to `json`: NaN and Infinity, two documents on one line,
    a document over several lines and one at the end of the file without a newline read exactly as
    `json.JSONDecoder.raw_decode` reads them. An integer beyond 64 bits is read as the float it lands as (the store's
    values are float64)."""
    docs: list[object] = [
        {"values": {"a": float("nan"), "b": float("inf")}},
        {"values": {"a": 2**70}},
        {"values": {"a": 1}},
        {"values": {"a": 2}},
        [event(1), event(2)],
        {"values": {"a": -(2**65)}, "tags": {"k": "é"}},
    ]
    text = (
        json.dumps(docs[0]) + "\n" + json.dumps(docs[1]) + "\n" + json.dumps(docs[2]) + " " + json.dumps(docs[3])
        + "\n" + json.dumps(docs[4], indent=1) + "\n" + json.dumps(docs[5])
    )  # fmt: skip
    dec, i, expected = json.JSONDecoder(), 0, []
    while i < len(text):
        doc, i = dec.raw_decode(text, i)
        expected.append(doc)
        while i < len(text) and text[i] in " \n":
            i += 1
    expected[1] = {"values": {"a": float(2**70)}}
    for size in (3, 1 << 20):
        got = list(gnmic_stream(blocks(text.encode(), size)))
        assert json.dumps(got) == json.dumps(expected)  # NaN != NaN: compared as text


def test_an_event_shape_read_as_a_template_still_reads_each_value() -> None:
    """A poll's events repeat one shape (tags and paths), landed from a template; an event of that shape whose values
    are words, booleans or numbers in strings is read value by value, as the gNMI collector reads them (a boolean as
    0 or 1)."""
    octets = "/interfaces/interface/state/counters/in-octets"
    speed = "/interfaces/interface/ethernet/state/port-speed"
    shaped = [event(i, **{octets: 1000 + i}) for i in range(3)]
    odd = [event(3, **{octets: "1003"}), event(4, **{octets: True}), event(5, **{octets: None})]
    speeds = [event(6, **{speed: 400_000_000_000}), event(7, **{speed: 0}), event(8, **{speed: "SPEED_100GB"})]
    rows = gnmic_rows(iter([*shaped, *odd, *speeds]))
    got = sorted((ts - TS, metric, value) for ts, metric, value in zip(rows.ts, rows.metric, rows.value, strict=True))
    in_octets = next(m for _, m, _ in got)
    read = [(t, v) for t, m, v in got if m == in_octets]
    assert read == [(0, 1000.0), (1, 1001.0), (2, 1002.0), (3, 1003.0), (4, 1.0)]
    assert [(t, v) for t, m, v in got if m != in_octets] == [(6, 400e9), (8, 100e9)]
    assert rows.nonnumeric == 2  # a null and a speed of 0 ("not known") are no readings; a boolean is 0 or 1
