"""A real SONiC PFC storm, as `redis-cli MONITOR` recorded COUNTERS_DB (sonic-buildimage issue 6530): about
299,000 pause frames a second on one port's priority 4, no speed, no pause duration, no name map, no LLDP. The
whole path (import, store, analysis) gives one storm on that port and priority, its root unknown."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from rocescope.cli import app
from rocescope.collectors.sonic_monitor import monitor_rows

from store_cli import runner, sql_rows, store_config

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "sonic" / "redis_monitor_pfc_storm_issue6530.txt"
PORT = "oid-0x100000000000d"


def test_the_trace_lands_each_poll_at_its_own_time_and_skips_what_is_no_counter() -> None:
    trace = monitor_rows(TRACE.read_text(), "sonic-dut")
    (batch,) = trace.rows.to_batches("switch", "import")
    rows = batch.data.to_pylist()
    pauses = [(r["ts"], r["value"]) for r in rows if r["metric"] == "pfc_rx_pause" and r["priority"] == 4]
    assert [v for _, v in pauses] == [66_600_000, 66_839_279] and all(r["port"] for r in rows)
    assert (pauses[1][0] - pauses[0][0]).total_seconds() == 0.800817
    assert {r["port"] for r in rows if r["metric"] == "pfc_rx_pause"} == {PORT}
    bookkeeping = "the PFC watchdog's own bookkeeping (lua `_last` fields)"
    assert trace.skipped == {bookkeeping: 4, "a read or another command": 6}
    assert trace.rows.malformed == 0 and trace.rows.nonnumeric == 0


def test_the_watchdogs_verdict_is_kept_as_a_stormed_queue() -> None:
    """The watchdog's detection script marks the queue it found stuck (`PFC_WD_STATUS` `stormed`, SONiC's
    pfc_detect_*.lua) and restoration sets it back: both kept, per queue, as `pfcwd_stormed` 1/0."""
    queue = "oid:0x15000000000265"
    text = "".join(
        f'{ts} [2 lua] "HSET" "COUNTERS:{queue}" "{field}" "{value}"\n'
        for ts, field, value in (
            ("1610612103.5", "PFC_WD_STATUS", "stormed"),
            ("1610612103.5", "SAI_QUEUE_STAT_PACKETS_last", "12"),
            ("1610612110.5", "PFC_WD_STATUS", "operational"),
        )
    )
    trace = monitor_rows(text, "sonic-dut", {queue: "Ethernet16:4"})
    (batch,) = trace.rows.to_batches("switch", "import")
    got = [(r["port"], r["priority"], r["metric"], r["value"]) for r in batch.data.to_pylist()]
    assert got == [("Ethernet16", 4, "pfcwd_stormed", 1.0), ("Ethernet16", 4, "pfcwd_stormed", 0.0)]
    assert trace.skipped == {"the PFC watchdog's own bookkeeping (lua `_last` fields)": 1}


def test_a_real_storm_trace_gives_one_storm_on_its_port_and_priority(tmp_path: Path) -> None:
    cfg = store_config(tmp_path)
    args = ["--config", cfg, "import", "--kind", "sonic-monitor", "--device", "sonic-dut", str(TRACE)]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "skipped: 6 a read or another command" in done.output
    found = runner.invoke(
        app,
        ["--config", cfg, "analyze", "--from", "2021-01-14T08:14:00Z", "--to", "2021-01-14T08:16:00Z"],
    )
    assert found.exit_code == 0, found.output
    storms = sql_rows(cfg, "SELECT kind, arrayStringConcat(ports, ' '), priority, severity, summary FROM findings")
    (storm,) = list(csv.reader(storms))
    kind, ports, priority, severity, summary = storm
    assert (kind, ports, priority) == ("pfc_storm", f"sonic-dut:{PORT}", "4")
    assert "root unknown" in summary and severity == "warning"  # a second of storm, its share only an estimate


def test_the_import_summary_accounts_for_every_write_as_landed_raw_or_skipped(tmp_path: Path) -> None:
    """`import --json`: per file, rows landed (and of them left raw: fields the catalog does not know) and what
    was skipped and why; the landed rows are the rows the store holds."""
    cfg = store_config(tmp_path)
    args = ["--config", cfg, "import", "--kind", "sonic-monitor", "--device", "sonic-dut", "--json", str(TRACE)]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    summary = json.loads(done.stdout)
    (only,) = summary["files"]
    stored = sql_rows(cfg, "SELECT count(), countIf(startsWith(toString(metric), 'raw:')) FROM counters")
    assert stored == [f"{summary['landed']},{only['left_raw']}"] and summary["landed"] == only["landed"] > 0
    bookkeeping = "the PFC watchdog's own bookkeeping (lua `_last` fields)"
    assert only["skipped"] == {"malformed": 0, bookkeeping: 4, "a read or another command": 6}
