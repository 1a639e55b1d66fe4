"""Inspector JSON after v4.0, as NCCL's dev writers lay it out (fixtures `dev-v4.*.log`, each with its source
note): a `dump_stats` marker per communicator and dump (v4.1+), `coll_algo`/`coll_proto` (v4.2+), operation lines
that carry no header or metadata and take the marker's (marker-based v4.3, v4.4), proxy traces (v4.4). Every
operation of every file becomes one row with the header and metadata the writer meant for it, whether the file is
read at once, line by line across reads or together with other files; nothing is silently lost."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from inspector_samples import FIX

from rocescope.collectors.nccl.collector import NcclCollector
from rocescope.collectors.nccl.parse import Parsed, drops_batches, parse_inspector, parse_json_lines
from rocescope.collectors.nccl.tail import InspectorDir

VERSIONS = ["v4.1", "v4.2", "v4.3-usertag", "v4.3", "v4.4", "v4.4-proxy-nested"]
COLUMNS = ("host", "pid", "communicator", "rank", "ranks", "collective", "sequence", "bytes", "exec_time_us")


def operations(text: str) -> tuple[list[tuple[Any, ...]], int, int]:
    """(the rows the writer meant, as COLUMNS, markers, proxy traces): a line without a header takes the last
    marker's header and metadata (inspector_json.cc: "All following records inherit the header/metadata of this
    dump_stats marker until the next marker")."""
    rows, markers, proxies, header, metadata = [], 0, 0, None, None
    for line in text.splitlines():
        doc = json.loads(line)
        if "dump_stats" in doc:
            markers += 1
            header, metadata = doc["header"], doc["metadata"]
            continue
        if "proxy_trace" in doc:
            proxies += 1
            continue
        h, m = doc.get("header", header), doc.get("metadata", metadata)
        kind = "coll" if "coll_perf" in doc else "p2p"
        op = doc[f"{kind}_perf"]
        rows.append((m["hostname"], m["pid"], h["id"], h["rank"], h["n_ranks"], op[kind], op[f"{kind}_sn"],
                     op[f"{kind}_msg_size_bytes"], float(op[f"{kind}_exec_time_us"])))  # fmt: skip
    return rows, markers, proxies


def got(parsed: Parsed) -> list[tuple[Any, ...]]:
    cols = parsed.batch.to_pydict()
    return [tuple(row) for row in zip(*(cols[c] for c in COLUMNS), strict=True)]


@pytest.mark.parametrize("version", VERSIONS)
def test_every_operation_of_each_version_is_one_row_with_its_own_header(version: str) -> None:
    text = (FIX / f"dev-{version}.log").read_text()
    want, markers, proxies = operations(text)
    parsed = parse_json_lines(text)
    assert markers and want
    assert sorted(got(parsed)) == sorted(want)
    assert (parsed.malformed, parsed.refused, parsed.unknown) == (0, 0, proxies), parsed.problem
    # v4.2 names the algorithm and protocol of collectives (`RING_SIMPLE`, as OTLP's `algo_proto` does)
    named = {op[5]: a for op, a in zip(got(parsed), parsed.batch.to_pydict()["algorithm"], strict=True)}
    assert named["Send"] == "" and named["AllReduce"] == ("" if version == "v4.1" else named["AllReduce"])
    assert version == "v4.1" or named["AllReduce"] in ("RING_SIMPLE", "NVLS_SIMPLE")


@pytest.mark.parametrize("version", ["v4.3", "v4.4-proxy-nested"])
def test_a_file_read_a_line_at_a_time_gives_the_same_rows(version: str) -> None:
    """A tailer reads what was written since its last read: a marker in one read, its operations in the next."""
    text = (FIX / f"dev-{version}.log").read_bytes()
    rows, context = [], b""
    for line in text.splitlines(keepends=True):
        parsed = parse_json_lines(line, final=False, context=context)
        assert parsed.malformed == 0 and parsed.consumed == len(line)
        rows += got(parsed)
        context = parsed.context
    assert sorted(rows) == sorted(got(parse_json_lines(text)))


def test_operations_without_a_marker_before_them_are_malformed_and_counted() -> None:
    """The tail of a v4.4 file without its marker (a reader started mid-file with no state): no header to give the
    lines, so they are counted as malformed, never given another communicator's."""
    lines = (FIX / "dev-v4.4.log").read_text().splitlines(keepends=True)
    headless = [line for line in lines[1:] if "dump_stats" not in line][:3]
    parsed = parse_json_lines("".join(headless))
    assert parsed.rows == 0 and parsed.malformed == 3 and "header" in parsed.problem


def test_other_major_versions_are_refused_and_counted() -> None:
    text = (FIX / "dev-v4.2.log").read_text().replace('"v4.2"', '"v5.0"')
    parsed = parse_json_lines(text)
    want, _, _ = operations(text)
    assert parsed.rows == 0 and parsed.refused == len(want) and parsed.malformed == 0
    assert "v5.0" in parsed.problem


def test_records_the_writer_dropped_are_counted_once() -> None:
    """`dump_stats` says how many records the ring buffer overwrote since the last dump; a marker carried into the
    next read as context does not count them again."""
    lines = (FIX / "dev-v4.4.log").read_text().splitlines(keepends=True)
    doc = json.loads(lines[0])
    doc["dump_stats"].update(coll_dropped_since_last_dump=5, p2p_dropped_since_last_dump=2)
    first = parse_json_lines(json.dumps(doc) + "\n" + lines[1])
    second = parse_json_lines("".join(lines[2:4]), context=first.context)
    assert first.writer_dropped == 7 and second.writer_dropped == 0
    assert first.rows == 1 and second.rows == 2 and second.malformed == 0
    # ... and land as the host's `nccl_records_dropped` at the dump's time, for the impact to read beside the job
    meta = doc["metadata"]
    assert first.drops == [(meta["dump_timestamp_us"] * 1000, meta["hostname"], meta["pid"], 7)]
    (batch,) = drops_batches(first.drops)
    row = batch.data.to_pylist()[0]
    assert (row["device"], row["role"], row["port"], row["metric"], row["value"]) == (
        meta["hostname"], "host", f"nccl:{meta['pid']}", "nccl_records_dropped", 7.0
    )  # fmt: skip


def test_the_collector_carries_each_files_marker_across_polls_and_restarts(tmp_path: Path) -> None:
    """Two ranks' v4.4 files, each written in two dumps' halves: the first poll reads the markers, the second the
    operations after them (read together), a restarted collector the rest from its state file. Every operation
    arrives once, with its own file's header; nothing is malformed."""
    root, state = tmp_path / "inspector", tmp_path / "state.json"
    root.mkdir()
    text = (FIX / "dev-v4.4.log").read_text()
    files = {root / f"gpu-node-0{i}-pid{100 + i}.log": text.replace("gpu-node-01", f"gpu-node-0{i}") for i in (1, 2)}
    old = 1_700_000_000
    want: list[tuple[Any, ...]] = []
    for path, body in files.items():
        want += operations(body)[0]
        path.write_text("".join(body.splitlines(keepends=True)[:2]))
        os.utime(path, (old, old))
    rows: list[tuple[Any, ...]] = []

    def poll(collector: NcclCollector) -> None:
        for batch in collector.poll():
            cols = batch.data.to_pydict()
            rows.extend(tuple(r) for r in zip(*(cols[c] for c in COLUMNS), strict=True))

    collector = NcclCollector(InspectorDir(root), state_file=state, settle_s=0.0)
    poll(collector)
    for path, body in files.items():
        lines = body.splitlines(keepends=True)
        path.write_text("".join(lines[:5]))
        os.utime(path, (old + 1, old + 1))
    poll(collector)
    collector.save_state()
    restarted = NcclCollector(InspectorDir(root), state_file=state, settle_s=0.0)
    for path, body in files.items():
        path.write_text(body)
        os.utime(path, (old + 2, old + 2))
    poll(restarted)
    assert sorted(rows) == sorted(want)
    assert {h.malformed for h in [*collector.health().values(), *restarted.health().values()]} == {0}


def test_otlp_per_operation_points_are_the_operations_the_json_output_has() -> None:
    """`NCCL_INSPECTOR_OTEL_VERBOSE=1` (v5.2) exports each operation as a point set: the same operations as the
    JSON output of that run (no rank or pid in OTLP); per-GPU totals are no rows, and their drop totals count."""
    parsed = parse_inspector((FIX / "dev-otlp-v5.2-verbose.json").read_bytes(), "metrics.json")
    want, _, _ = operations((FIX / "dev-v4.2.log").read_text())
    same = ("host", "communicator", "collective", "sequence", "bytes", "exec_time_us")
    cols = parsed.batch.to_pydict()
    assert sorted(zip(*(cols[c] for c in same), strict=True)) == sorted((r[0], r[2], *r[5:]) for r in want)
    assert set(cols["source"]) == {"inspector_otlp"} and set(cols["rank"]) == {-1}
    assert {a for a, c in zip(cols["algorithm"], cols["collective"], strict=True) if c == "AllReduce"} <= {
        "RING_SIMPLE", "NVLS_SIMPLE"}  # fmt: skip
    assert (parsed.malformed, parsed.refused, parsed.unknown, parsed.writer_dropped) == (0, 0, 0, 0)
    doc = json.loads((FIX / "dev-otlp-v5.2-verbose.json").read_text())
    for metric in doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]:
        if metric["name"] == "nccl_collectives_dropped_total":
            metric["gauge"]["dataPoints"][0]["asDouble"] = 12
    # the Collector's file exporter writes a body per line; a body sent twice (a retry) is the same operations,
    # and cumulative totals are not added up
    one_per_line = (json.dumps(doc) + "\n") * 2
    again = parse_inspector(one_per_line.encode(), "metrics.json")
    assert again.writer_dropped == 12 and again.rows == parsed.rows


def test_otlp_interval_means_are_rows_of_their_own_source() -> None:
    """The default export (v5.1): means per interval and message-size bucket, like 2.30's Prometheus output; the
    bucket's lower bound is the size, rank and sequence are unknown, and impact leaves such rows out."""
    parsed = parse_inspector((FIX / "dev-otlp-v5.1-aggregated.json").read_bytes(), "metrics.json")
    cols = parsed.batch.to_pydict()
    assert parsed.rows == 3 and parsed.malformed == 0 and set(cols["source"]) == {"inspector_otlp_agg"}
    assert set(cols["sequence"]) == {-1} and 64 * 2**20 in cols["bytes"] and "NVLS_SIMPLE" in cols["algorithm"]
    refused = parse_inspector((FIX / "dev-otlp-v5.1-aggregated.json").read_bytes().replace(b'"v5.1"', b'"v6.0"'))
    assert refused.rows == 0 and refused.refused == 6 and "v6.0" in refused.problem


@pytest.mark.parametrize(
    "body",
    [
        b'{"resourceMetrics": [null]}',
        b'{"resourceMetrics": "x"}',
        b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [1]}]}]}',
        b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "nccl_bus_bandwidth_gbs", "gauge": 3}]}]}]}',
        b'{"resourceMetrics": [{"scopeMetrics": [{"metrics": [{"name": "nccl_bus_bandwidth_gbs",'
        b' "gauge": {"dataPoints": [{"attributes": 5, "asDouble": "x"}]}}]}]}]}',
        b'{"resourceMetrics": []}\n{"resourceMetrics": [oops\n',
    ],
)
def test_broken_otlp_bodies_are_counted_never_raised(body: bytes) -> None:
    parsed = parse_inspector(body, "metrics.json")
    assert parsed.rows == 0 and (parsed.malformed > 0 or "gauge" in body.decode())
