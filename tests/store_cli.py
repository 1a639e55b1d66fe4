"""The CLI against a store of a test's own: a config file pointing at it, and SQL answers as CSV lines."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from rocescope.cli import app

runner = CliRunner()


def store_config(tmp_path: Path) -> str:
    """A config file for an embedded store under `tmp_path` that keeps rows of any age."""
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n  ttl_days: 0\n")
    return str(cfg)


def sql_rows(cfg: str, query: str) -> list[str]:
    """`rocescope sql QUERY -f csv`'s rows, header left out."""
    result = runner.invoke(app, ["--config", cfg, "sql", query, "-f", "csv"])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()[1:]
