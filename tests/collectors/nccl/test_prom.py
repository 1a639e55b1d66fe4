"""Inspector's Prometheus textfile -> `collectives`: both generations, unfinished sets left for later."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pyarrow as pa
import pytest
from inspector_samples import FIX

from rocescope.collectors.nccl.parse import is_prometheus, parse_inspector
from rocescope.collectors.nccl.prom import message_bytes, parse_prom_text

PER_COLLECTIVE = FIX / "nccl_inspector_metrics_6d1c2a4e-9f3b-5c7d-8e1f-0a2b3c4d5e6f.prom"
README = FIX / "readme-2.30-aggregated.prom"
BLOG = FIX / "blog-2.30-aggregated.prom"
DUMPED = 1_781_000_000_000_000_000  # the file's mtime, for rows that carry no time


def rows(text: bytes, final: bool = True) -> list[dict[str, object]]:
    return pa.Table.from_batches([parse_prom_text(text, DUMPED, final).batch]).to_pylist()


def test_per_collective_series_of_nccl_2_29_become_one_row_each() -> None:
    """Three lines (algorithm and bus bandwidth, execution time) with the same labels are one collective."""
    got = rows(PER_COLLECTIVE.read_bytes())
    assert len(got) == 2
    first = got[0]
    when = dt.datetime(2025, 10, 17, 3, 31, 47, tzinfo=dt.UTC)
    assert first["ts"].timestamp() == when.timestamp()  # type: ignore[attr-defined]
    want = {
        "host": "pool0-0002",
        "communicator": "0xd152c00f111816",
        "rank": 4,
        "ranks": 8,
        "nodes": 1,
        "gpu": 4,
        "collective": "AllReduce",
        "sequence": 228924,
        "bytes": 2 * 1024**3,
        "exec_time_us": 9120.0,
        "algo_bw_gbs": 235.47,
        "bus_bw_gbs": 412.072,
        "pid": 0,
        "slurm_job_id": "",
        "source": "inspector_prom",
    }
    assert {k: first[k] for k in want} == want


@pytest.mark.parametrize("path", [README, BLOG], ids=["nvidia-readme", "nvidia-blog"])
def test_aggregated_series_of_nccl_2_30_are_dated_by_the_file(path: Path) -> None:
    text = path.read_text()
    got = rows(text.encode())
    sets = sum(1 for line in text.splitlines() if "_exec_time_microseconds{" in line)
    assert len(got) == sets
    for row in got:
        assert row["ts"].timestamp() * 1e9 == pytest.approx(DUMPED, abs=1e3)  # type: ignore[attr-defined]
        assert (row["rank"], row["sequence"], row["source"]) == (-1, -1, "inspector_prom_agg")
        assert math.isnan(row["algo_bw_gbs"])  # type: ignore[arg-type]
        assert row["gpu"] == 0 and row["bus_bw_gbs"] > 0  # type: ignore[operator]


def test_blog_sample_values() -> None:
    """NVIDIA's blog sample: the ReduceScatter of 134-135MB on 32 ranks over 4 nodes, Slurm job 1670760."""
    rs = [r for r in rows(BLOG.read_bytes()) if r["collective"] == "ReduceScatter"]
    assert len(rs) == 1
    want = {
        "host": "nvl72033-T01",
        "ranks": 32,
        "nodes": 4,
        "bytes": 134 * 1024**2,
        "exec_time_us": 104164.0,
        "bus_bw_gbs": 44.1181,
        "algorithm": "RING_SIMPLE",
        "slurm_job_id": "1670760",
        "comm_name": "",
        "peer": -1,
    }
    assert {k: rs[0][k] for k in want} == want


def test_an_unfinished_series_set_is_left_for_the_next_read() -> None:
    """The writer may be caught between a set's bandwidth and its execution time: that set (and nothing
    before it) is read again later, so no collective is lost or counted twice."""
    text = PER_COLLECTIVE.read_bytes()
    lines = text.splitlines(keepends=True)
    cut = sum(len(x) for x in lines[:4])  # the first set complete, the second one's first line only
    first = parse_prom_text(text[:cut], DUMPED, final=False)
    assert (first.rows, first.malformed, first.consumed) == (1, 0, sum(len(x) for x in lines[:3]))
    rest = parse_prom_text(text[first.consumed :], DUMPED, final=False)
    assert first.rows + rest.rows == 2 and rest.consumed == len(text) - first.consumed
    final = parse_prom_text(text[:cut], DUMPED, final=True)
    assert (final.rows, final.malformed) == (1, 1)


def test_other_metrics_are_left_alone_and_damage_is_counted() -> None:
    text = (
        b"# HELP node_textfile_scrape_error 1 if there was an error\n"
        b"node_textfile_scrape_error 0\n"
        + README.read_bytes()
        + b'nccl_collective_count{gpu="GPU0",nranks="4",collective="AllReduce",message_size="1-2MB"} 12\n'
        + b'nccl_bus_bandwidth_gbs{node="n",gpu="GPU0",nranks="4",collective="AllReduce",message_size="huge"} 1\n'
        + b'nccl_collective_exec_time_microseconds{node="n",gpu="GPU0",nranks="4",collective="AllReduce",'
        + b'message_size="huge"} 2\n'
        + b"nccl_bus_bandwidth_gbs{broken\n"
    )
    parsed = parse_prom_text(text, DUMPED)
    assert (parsed.rows, parsed.unknown, parsed.malformed) == (2, 2, 2)
    assert "message_size" in parsed.problem


def test_label_values_are_unescaped() -> None:
    labels = 'node="n",gpu="GPU1",comm_name="TP \\"x\\" 0",nranks="2",collective="AllGather",message_size="0B"'
    text = f"nccl_bus_bandwidth_gbs{{{labels}}} 3.5\nnccl_collective_exec_time_microseconds{{{labels}}} 7\n"
    (row,) = rows(text.encode())
    assert (row["comm_name"], row["gpu"], row["bytes"], row["exec_time_us"]) == ('TP "x" 0', 1, 0, 7.0)


@pytest.mark.parametrize(
    ("text", "size"),
    [("2.00GB", 2 * 1024**3), ("64.00MB", 64 * 1024**2), ("512B", 512), ("4-5GB", 4 * 1024**3), ("1-2KB", 1024)],
)
def test_message_sizes_of_both_generations(text: str, size: int) -> None:
    assert message_bytes(text) == size


def test_the_mode_is_told_by_name_or_text() -> None:
    assert is_prometheus("nccl_inspector_metrics_x.prom", b"{")
    assert is_prometheus("dump", b"# HELP x\n")
    assert not is_prometheus("host-pid1.log", b"\x00\x00junk\n")  # damage does not make a JSON file Prometheus
    assert not is_prometheus("", b'\n{"header":')
    assert parse_inspector(README.read_bytes(), "anything", DUMPED).rows == 2
