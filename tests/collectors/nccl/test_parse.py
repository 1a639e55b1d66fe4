"""NCCL Inspector JSON lines -> `collectives`: real records field for field, damage counted, good lines kept.

The expected rows are read from each line with `json.loads` by the rules the columns document (ts = the
last kernel stop where traced, else the dump time; "nan" and absent bandwidths are NaN; an unnamed
communicator, "unknown", is empty), so every field of every record is checked against its source.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inspector_samples import FIX, record

from rocescope import schema
from rocescope.collectors.nccl.parse import Parsed, collectives_batches, parse_inspector, parse_json_lines
from rocescope.collectors.nccl.write import json_line

REAL = FIX / "readme-v4.0.log"
CODE = FIX / "gpu-node-07-pid4242.log"


def rows_of(parsed: Parsed) -> list[dict[str, Any]]:
    """The rows with times as int nanoseconds and NaN as the string "nan" (comparable)."""
    table = pa.Table.from_batches([parsed.batch])
    assert table.schema == schema.arrow_schema("collectives")
    plain = {
        n: c.cast(pa.int64())
        if pa.types.is_timestamp(c.type)
        else c.cast(pa.string())
        if pa.types.is_dictionary(c.type)
        else c
        for n, c in zip(table.column_names, table.columns, strict=True)
    }
    return [
        {k: "nan" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
        for r in pa.table(plain).to_pylist()
    ]


def expected(line: bytes) -> dict[str, Any]:
    """The row a record means, read with json.loads."""
    doc = json.loads(line)
    head, meta = doc["header"], doc["metadata"]
    p = "coll" if "coll_perf" in doc else "p2p"
    perf = doc[f"{p}_perf"]
    start = stop = 0
    if "event_trace_ts" in perf:
        trace = perf["event_trace_ts"]
        start = trace[f"{p}_start_ts"]
        stop = max((k["kernel_stop_ts"] for k in trace["kernel_events"]), default=trace[f"{p}_stop_ts"])

    def bw(name: str) -> object:
        value = perf.get(f"{p}_{name}_gbs")
        return "nan" if value in (None, "nan") else value

    name = head.get("comm_name", "unknown")
    return {
        "ts": (stop or meta["dump_timestamp_us"]) * 1000,
        "host": meta["hostname"],
        "pid": meta["pid"],
        "gpu": -1,
        "communicator": head["id"],
        "comm_name": "" if name == "unknown" else name,
        "rank": head["rank"],
        "ranks": head["n_ranks"],
        "nodes": head["nnodes"],
        "collective": perf[p],
        "peer": perf.get("p2p_peer", -1),
        "sequence": perf[f"{p}_sn"],
        "bytes": perf[f"{p}_msg_size_bytes"],
        "exec_time_us": float(perf[f"{p}_exec_time_us"]),
        "algo_bw_gbs": bw("algobw"),
        "bus_bw_gbs": bw("busbw"),
        "timing_source": perf.get(f"{p}_timing_source", ""),
        "algorithm": "",
        "start_ts": start * 1000,
        "stop_ts": stop * 1000,
        "slurm_job_id": "",
        "source": "inspector_json",
    }


@pytest.mark.parametrize("path", [REAL, CODE], ids=["nvidia-readme-records", "as-the-plugin-prints"])
def test_every_field_of_every_record_matches_its_source(path: Path) -> None:
    data = path.read_bytes()
    parsed = parse_inspector(data, path.name)
    assert (parsed.malformed, parsed.consumed) == (0, len(data))
    assert rows_of(parsed) == [expected(line) for line in data.splitlines()]


def test_verbose_record_takes_its_last_kernel_stop_as_its_time() -> None:
    """README's verbose ReduceScatter: issued at coll_start_ts, its one kernel stopped 40.6 ms later."""
    row = rows_of(parse_inspector(REAL.read_bytes(), REAL.name))[1]
    assert row["start_ts"] == 1752867229235059_000 and row["stop_ts"] == row["ts"] == 1752867229275811_000
    assert row["exec_time_us"] == 41057.0 and row["timing_source"] == "kernel_gpu"


def test_the_writer_prints_what_the_plugin_prints() -> None:
    """`write.json_line` reproduces the lines laid out from inspector_json.cc and json.cc (the NaN line
    aside: the plugin's own bandwidth formula never gives NaN)."""
    lines = CODE.read_text().splitlines(keepends=True)
    parsed = rows_of(parse_inspector(CODE.read_bytes(), CODE.name))
    for line, row in zip(lines, parsed, strict=True):
        if row["bus_bw_gbs"] == "nan":
            continue
        from rocescope.collectors.nccl.write import InspectorRecord

        doc = json.loads(line)
        p = "coll" if "coll_perf" in doc else "p2p"
        perf = doc[f"{p}_perf"]
        trace = perf.get("event_trace_ts")
        rec = InspectorRecord(
            row["host"],
            row["pid"],
            row["communicator"],
            row["rank"],
            row["ranks"],
            row["nodes"],
            row["collective"],
            row["sequence"],
            row["bytes"],
            int(row["exec_time_us"]),
            doc["metadata"]["dump_timestamp_us"],
            comm_name=row["comm_name"],
            peer=row["peer"],
            timing_source=row["timing_source"],
            trace=None
            if trace is None
            else (
                trace[f"{p}_start_ts"],
                trace[f"{p}_stop_ts"],
                tuple((k["kernel_start_ts"], k["kernel_stop_ts"]) for k in trace["kernel_events"]),
            ),
        )
        assert json_line(rec) == line


GOOD = [
    json_line(record(i, op, traced=i % 3 == 0)).encode() for i, op in enumerate(["AllReduce", "Send", "AllGather"] * 4)
]
DAMAGE = [
    b"\n",  # a blank line is no record, and no damage
    b'{"header":{"id":"0x1","rank":0,"n_ranks":8,"nnodes":1},"metadata":{"dump_ti\n',  # cut mid-record
    b"\x00\x00\x00\x00garbage\n",  # a filesystem's zero fill, junk
    b"[1, 2, 3]\n",  # JSON but no object
    GOOD[0].replace(b'"rank":3', b'"rank":"3"'),  # a field of the wrong type
    GOOD[1].replace(b'"n_ranks":16', b'"n_ranks":0'),  # impossible values
    GOOD[2].replace(b'"hostname":"gpu-node-07"', b'"hostname":"gpu\\ud800"'),  # a lone surrogate
    GOOD[3].replace(b"gpu-node-07", b"gpu-\xff\xfe-07"),  # not UTF-8
    b'{"header":{"id":"0x1","rank":0,"n_ranks":8},"metadata":{"dump_timestamp_us":1,"hostname":"h","pid":1}}\n',
]


def test_malformed_lines_are_counted_and_every_good_line_kept() -> None:
    mixed = b"".join(part for pair in zip(GOOD, DAMAGE + [b""] * len(GOOD), strict=False) for part in pair)
    parsed = parse_json_lines(mixed)
    assert parsed.malformed == len(DAMAGE) - 1  # the blank line is not counted
    assert parsed.problem
    assert rows_of(parsed) == rows_of(parse_json_lines(b"".join(GOOD)))


def test_an_unfinished_last_line_is_left_to_be_read_again() -> None:
    text = b"".join(GOOD[:3])
    cut = len(text) - 40
    first = parse_json_lines(text[:cut], final=False)
    assert first.rows == 2 and first.malformed == 0
    assert first.consumed == len(GOOD[0]) + len(GOOD[1])
    rest = parse_json_lines(text[first.consumed :], final=False)
    assert rows_of(first) + rows_of(rest) == rows_of(parse_json_lines(text))


def test_batches_stay_small_and_keyed_by_host() -> None:
    text = b"".join(json_line(record(i, host=f"h{i // 700}")).encode() for i in range(2500))
    batches = collectives_batches(parse_json_lines(text).batch, max_rows=1000)
    assert [b.num_rows for b in batches] == [1000, 1000, 500]
    assert [b.key for b in batches] == ["h0", "h1", "h2"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.tuples(st.integers(0, len(GOOD) - 1), st.integers(1, 200), st.binary(max_size=12)), max_size=4))
def test_fuzz_damaged_lines_never_cost_an_intact_one(cuts: list[tuple[int, int, bytes]]) -> None:
    """Lines cut short or with junk spliced in are skipped; every intact line still lands."""
    lines = list(GOOD)
    for i, at, junk in cuts:
        lines[i] = lines[i][: at % len(lines[i])] + junk + b"\n"
    parsed = parse_json_lines(b"".join(lines))
    intact = [line for line in lines if line in GOOD]
    got = rows_of(parsed)
    for row in rows_of(parse_json_lines(b"".join(intact))):
        assert row in got
    assert parsed.rows + parsed.malformed >= len(intact)
