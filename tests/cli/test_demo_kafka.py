"""`demo --kafka --processes`: the sink and the analysis as processes of their own over the broker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.testbed.tansu import Broker

runner = CliRunner()


def test_demo_runs_sink_and_analysis_as_processes(
    tmp_path: Path, broker: Broker, write_config: Callable[..., Path]
) -> None:
    cfg = str(
        write_config(tmp_path, f"kafka:\n  bootstrap_servers: ['{broker.bootstrap}']\nsink:\n  max_seconds: 0.3\n")
    )
    out = tmp_path / "out"
    args = ["--config", cfg, "demo", "--fast", "--kafka", "--processes", "--scenario", "incast", "--duration", "75s"]
    result = runner.invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "started a local broker" not in result.output, "the configured broker was used"
    assert "sink: process" in result.output and "sink stopped" in (out / "sink.log").read_text()
    assert "finding(s)" in (out / "analyze.log").read_text()
    landed = runner.invoke(app, ["--config", cfg, "sql", "SELECT count() FROM counters", "--format", "csv"])
    assert int(landed.stdout.splitlines()[-1]) > 0, "the sink process landed the counters"


def test_processes_go_with_kafka(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    result = runner.invoke(app, ["--config", str(write_config(tmp_path)), "demo", "--fast", "--processes"])
    assert result.exit_code == 1
    assert "--processes goes with --kafka" in result.output
