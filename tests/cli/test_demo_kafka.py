"""`demo --processes` needs `--kafka` (a run of both, its sink and analysis as processes of their own over the
broker: tests/cli/test_sim.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from rocescope.cli import app

runner = CliRunner()


def test_processes_go_with_kafka(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    result = runner.invoke(app, ["--config", str(write_config(tmp_path)), "demo", "--fast", "--processes"])
    assert result.exit_code == 1
    assert "--processes goes with --kafka" in result.output
