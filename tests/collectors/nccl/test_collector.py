"""`rocescope collect nccl`: Inspector's directory tailed into a real store, every record once.

Files are written the way the plugin writes them: JSON lines appended (possibly caught mid-line), the
Prometheus file truncated and written again each interval, in place.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pytest
from inspector_samples import FIX, record
from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.collectors.nccl.collector import NcclCollector
from rocescope.collectors.nccl.tail import InspectorDir
from rocescope.collectors.nccl.write import file_name, json_line
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.store import ChdbStore

runner = CliRunner()
PROM = FIX / "nccl_inspector_metrics_6d1c2a4e-9f3b-5c7d-8e1f-0a2b3c4d5e6f.prom"


def land(store: ChdbStore, batches: list[Batch]) -> int:
    for b in batches:
        store.insert("collectives", pa.Table.from_batches([b.data]))
    return sum(b.num_rows for b in batches)


def sequences(store: ChdbStore) -> list[int]:
    got = store.query_arrow("SELECT sequence FROM collectives ORDER BY sequence").column(0).to_pylist()
    return [int(x) for x in got]


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as out:
        out.write(data)


def test_a_file_written_in_pieces_lands_every_record_once(tmp_path: Path, keeping_store: ChdbStore) -> None:
    dump = tmp_path / "nccl-inspector-4242"
    dump.mkdir()
    log = dump / file_name("gpu-node-07", 4242)
    text = b"".join(json_line(record(i, traced=i % 4 == 0)).encode() for i in range(60))
    collector = NcclCollector(InspectorDir(tmp_path))
    landed = 0
    for cut in (0, 1, 700, 701, 5000, 5001, len(text) - 3, len(text)):  # mid-line, line ends, empty reads
        append(log, text[log.stat().st_size if log.exists() else 0 : cut])
        landed += land(keeping_store, collector.poll())
    assert landed == 60
    assert sequences(keeping_store) == list(range(60))
    health = collector.health()[str(tmp_path)]
    assert health.up and health.values == 60 and health.malformed == 0


def test_many_files_caught_mid_line_are_read_together_every_record_once(
    tmp_path: Path, keeping_store: ChdbStore
) -> None:
    """A busy directory (a line or two new in each of many ranks' files per poll, some caught mid-line, and a
    Prometheus file beside them) is read in one parse per poll and lands every record once."""
    dump = tmp_path / "inspector"
    dump.mkdir()
    logs = [dump / file_name(f"gpu-{h:03d}", 100 + h) for h in range(12)]
    texts = [b"".join(json_line(record(100 * h + i)).encode() for i in range(9)) for h in range(len(logs))]
    collector = NcclCollector(InspectorDir(dump))
    (dump / PROM.name).write_bytes(PROM.read_bytes())
    landed = 0
    for step in range(1, 8):
        for log, text in zip(logs, texts, strict=True):
            cut = len(text) if step == 7 else len(text) * step // 7 + 11  # mid-line but the last
            append(log, text[log.stat().st_size if log.exists() else 0 : cut])
        landed += land(keeping_store, collector.poll())
    prom_rows = (
        keeping_store.query_arrow("SELECT count() FROM collectives WHERE source != 'inspector_json'")
        .column(0)[0]
        .as_py()
    )
    assert prom_rows > 0
    assert landed - prom_rows == 12 * 9
    got = (
        keeping_store.query_arrow("SELECT sequence FROM collectives WHERE source = 'inspector_json' ORDER BY sequence")
        .column(0)
        .to_pylist()
    )
    assert got == sorted(100 * h + i for h in range(12) for i in range(9))
    assert collector.health()[str(dump)].malformed == 0


def test_malformed_lines_are_counted_and_logged_once_per_file(
    tmp_path: Path, keeping_store: ChdbStore, caplog: pytest.LogCaptureFixture
) -> None:
    good = [json_line(record(i)).encode() for i in range(6)]
    a, b = tmp_path / file_name("a", 1), tmp_path / file_name("b", 2)
    collector = NcclCollector(InspectorDir(tmp_path))
    with caplog.at_level(logging.WARNING, "rocescope.collectors.nccl"):
        for round_ in range(3):
            append(a, good[2 * round_] + b"{garbage\n" + good[2 * round_ + 1])
            append(b, b"\x00\x00junk\n" + good[2 * round_])
            land(keeping_store, collector.poll())
    warnings = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(warnings) == 2 and {str(a) in w or str(b) in w for w in warnings} == {True}
    assert collector.health()[str(tmp_path)].malformed == 6
    assert keeping_store.query_arrow("SELECT count() FROM collectives").column(0)[0].as_py() == 9


def test_a_prometheus_file_rewritten_in_place_is_read_again(tmp_path: Path, keeping_store: ChdbStore) -> None:
    """Inspector truncates the .prom file every interval ("w" on the same inode): each snapshot lands once."""
    prom = tmp_path / PROM.name
    lines = PROM.read_bytes().splitlines(keepends=True)
    first, second = b"".join(lines[:3]), b"".join(lines[3:])
    collector = NcclCollector(InspectorDir(tmp_path))
    prom.write_bytes(first)
    inode = prom.stat().st_ino
    assert land(keeping_store, collector.poll()) == 1
    assert land(keeping_store, collector.poll()) == 0
    with prom.open("r+b") as out:  # truncate and write, as fopen("w") does
        out.truncate(0)
        out.write(second + first)
    assert prom.stat().st_ino == inode
    assert land(keeping_store, collector.poll()) == 2
    assert sequences(keeping_store) == [8812, 228924, 228924]


def test_offsets_survive_a_restart(tmp_path: Path, keeping_store: ChdbStore) -> None:
    dump, state = tmp_path / "dump", tmp_path / "state" / "nccl.json"
    dump.mkdir()
    log = dump / file_name("h", 7)
    log.write_bytes(b"".join(json_line(record(i)).encode() for i in range(10)) + b'{"header":')
    first = NcclCollector(InspectorDir(dump), state_file=state)
    land(keeping_store, first.poll())
    first.save_state()
    append(log, json_line(record(10)).encode()[len(b'{"header":') :] + json_line(record(11)).encode())
    again = NcclCollector(InspectorDir(dump), state_file=state)  # a new process: offsets from the state file
    land(keeping_store, again.poll())
    assert sequences(keeping_store) == list(range(12))
    state.write_text("{not json")
    assert InspectorDir.load(state) == {}


def test_a_replaced_file_is_read_from_its_start(tmp_path: Path, keeping_store: ChdbStore) -> None:
    log = tmp_path / file_name("h", 9)
    log.write_bytes(b"".join(json_line(record(i)).encode() for i in range(5)))
    collector = NcclCollector(InspectorDir(tmp_path))
    land(keeping_store, collector.poll())
    replacement = tmp_path / "new.tmp"
    replacement.write_bytes(b"".join(json_line(record(i)).encode() for i in range(100, 103)))
    os.replace(replacement, log)  # another inode under the same name (a job restarted with the same pid)
    land(keeping_store, collector.poll())
    assert sequences(keeping_store) == [0, 1, 2, 3, 4, 100, 101, 102]


def test_a_backlog_is_read_over_several_polls_every_file_in_turn(tmp_path: Path, keeping_store: ChdbStore) -> None:
    """A poll reads at most `max_read_bytes` of all files together; the next goes on where it stopped."""
    for f in range(3):
        records = (json_line(record(100 * f + i, host=f"h{f}")).encode() for i in range(10))
        (tmp_path / file_name(f"h{f}", f)).write_bytes(b"".join(records))
    line = len(json_line(record(0, host="h0")))
    for path in tmp_path.iterdir():  # old logs: their writers are long gone
        os.utime(path, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    collector = NcclCollector(InspectorDir(tmp_path, max_read_bytes=4 * line + 10))
    per_poll = [land(keeping_store, collector.poll()) for _ in range(9)]
    assert max(per_poll) <= 4 and sum(per_poll) == 30
    assert collector.health()[str(tmp_path)].malformed == 0  # no line cut by a read limit taken for damage
    assert sequences(keeping_store) == sorted(100 * f + i for f in range(3) for i in range(10))


def test_a_line_its_dead_writer_left_unfinished_is_counted_once_settled(tmp_path: Path) -> None:
    """A last line without its newline waits while the file is fresh; once it has not changed for `settle_s`
    it is counted as malformed (its process died mid-write), once, and the file is read to its end."""
    log = tmp_path / file_name("h", 3)
    log.write_bytes(json_line(record(1)).encode() + json_line(record(2)).encode()[:-30])
    collector = NcclCollector(InspectorDir(tmp_path), settle_s=30)
    assert sum(b.num_rows for b in collector.poll()) == 1
    assert collector.health()[str(tmp_path)].malformed == 0
    os.utime(log, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    assert collector.poll() == [] and collector.poll() == []
    assert collector.health()[str(tmp_path)].malformed == 1


def test_a_missing_directory_is_a_failed_poll_not_a_crash(tmp_path: Path) -> None:
    collector = NcclCollector(InspectorDir(tmp_path / "nope"))
    assert collector.poll() == []
    health = collector.health()[str(tmp_path / "nope")]
    assert not health.up and "not a directory" in (health.last_error or "")


def test_cli_collect_nccl_lands_the_directory(tmp_path: Path) -> None:
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / file_name("gpu-node-07", 4242)).write_bytes(
        b"".join(json_line(record(i, op=op)).encode() for i, op in enumerate(["AllReduce", "Send"] * 20))
    )
    (dump / PROM.name).write_bytes(PROM.read_bytes())
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\ncollectors:\n  nccl:\n    dir: {dump}\n    interval_s: 0.2\n")
    once = runner.invoke(app, ["--config", cfg, "collect", "nccl", "--once"])
    assert once.exit_code == 0, once.output
    assert "collectives:" in once.output and "42 collectives from 2 files" in once.output
    result = runner.invoke(app, ["--config", cfg, "collect", "nccl", "--seconds", "1", "--state", tmp_path / "s.json"])
    assert result.exit_code == 0, result.output
    query = "SELECT source, count() AS n FROM collectives GROUP BY source ORDER BY source"
    out = runner.invoke(app, ["--config", cfg, "sql", query, "-f", "csv"])
    assert out.exit_code == 0, out.output
    # the 2.29 file's rows are from 2025: the store's retention (30 days) drops them, as the sink says
    assert '"inspector_json",40' in out.output
    assert (tmp_path / "s.json").exists()


def test_directories_coming_and_going_do_not_fail_the_listing(tmp_path: Path) -> None:
    """Job directories are created and removed while the collector lists the tree (and a store beside the dump
    makes and drops its temporary part directories): one vanishing mid-walk is skipped, not a failed poll."""
    log = tmp_path / "job-1" / file_name("h", 7)
    log.parent.mkdir()
    log.write_bytes(json_line(record(0)).encode())
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            d = tmp_path / f"tmp_merge_{n % 8}" / "part"
            d.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(d.parent, ignore_errors=True)
            n += 1

    worker = threading.Thread(target=churn)
    worker.start()
    try:
        directory = InspectorDir(tmp_path)
        listings = [directory.files() for _ in range(300)]
    finally:
        stop.set()
        worker.join()
    assert all(found == [log] for found in listings)
