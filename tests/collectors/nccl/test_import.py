"""`rocescope import --kind nccl-inspector`: every fixture of both modes lands, as many rows as it holds."""

from __future__ import annotations

import os
from pathlib import Path

from inspector_samples import FIX
from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.collectors.nccl.parse import parse_inspector

runner = CliRunner()
FILES = sorted(p for p in FIX.iterdir() if not p.name.endswith(".source.txt"))


def sql(cfg: Path, query: str) -> str:
    result = runner.invoke(app, ["--config", cfg, "sql", query, "-f", "csv"])
    assert result.exit_code == 0, result.output
    return result.output.split("\n", 1)[1]  # the rows, without the header line


def test_import_lands_both_modes(tmp_path: Path) -> None:
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n  ttl_days: 0\n  rollup_ttl_days: 0\n")  # 2025 samples
    assert {p.suffix for p in FILES} == {".log", ".prom", ".json"}
    result = runner.invoke(app, ["--config", cfg, "import", "--kind", "nccl-inspector", *map(str, FILES)])
    assert result.exit_code == 0, result.output
    parsed = [parse_inspector(p.read_bytes(), p.name) for p in FILES]
    want, unused = sum(p.rows for p in parsed), sum(p.unknown for p in parsed)
    assert f"imported {want} rows (nccl-inspector), 0 of them left raw" in result.output
    said = " ".join(result.output.split())  # the summary line wraps at the terminal's width
    assert unused and f"{unused} not a collective (proxy traces" in said  # v4.4's proxy traces
    markers = sum(p.markers for p in parsed)  # one per dump (v4.1+), read as Inspector's drop counts
    assert markers and f"skipped: {markers} dump_stats markers (read as drop counts)" in said
    assert sql(cfg, "SELECT count() FROM collectives").strip() == str(want)
    sources = sql(cfg, "SELECT DISTINCT source FROM collectives ORDER BY source")
    assert sources.split() == [f'"inspector_{s}"' for s in ("json", "otlp", "otlp_agg", "prom", "prom_agg")]
    # the rollup is fed with the rows
    assert sql(cfg, "SELECT sum(samples) FROM collectives_1m").strip() == str(want)


def test_prometheus_rows_without_a_time_take_the_dump_time(tmp_path: Path) -> None:
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n  ttl_days: 0\n")
    prom = tmp_path / "nccl_inspector_metrics_x.prom"
    prom.write_bytes((FIX / "readme-2.30-aggregated.prom").read_bytes())
    os.utime(prom, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    at = ["--at", "2026-03-19T14:40:00+00:00"]
    assert runner.invoke(app, ["--config", cfg, "import", "--kind", "nccl-inspector", str(prom)]).exit_code == 0
    assert runner.invoke(app, ["--config", cfg, "import", "--kind", "nccl-inspector", str(prom), *at]).exit_code == 0
    times = sql(cfg, "SELECT DISTINCT toUnixTimestamp(ts) FROM collectives ORDER BY 1").split()
    assert times == ["1700000000", "1773931200"]


def test_damaged_files_import_their_good_records(tmp_path: Path) -> None:
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n  ttl_days: 0\n")
    log = tmp_path / "h-pid1.log"
    lines = (FIX / "readme-v4.0.log").read_bytes().splitlines(keepends=True)
    log.write_bytes(lines[0] + b"\x00\x00\n" + lines[1] + lines[2][:100])
    result = runner.invoke(app, ["--config", cfg, "import", "--kind", "nccl-inspector", str(log)])
    assert result.exit_code == 0, result.output
    assert "imported 2 rows (nccl-inspector), 0 of them left raw" in result.output
    assert "skipped: 2 malformed" in result.output
    bad = runner.invoke(app, ["--config", cfg, "import", "--kind", "nccl", str(log)])
    assert bad.exit_code != 0 and "nccl-inspector" in bad.output
