"""The command as a whole: every subcommand has help (that help stays light: test_startup.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from rocescope.cli import app

SUBCOMMANDS = [
    "collect ebpf",
    "collect gnmi",
    "collect jobs",
    "collect lldp",
    "dashboards build",
    "collect nic",
    "collect pcap",
    "collect snmp",
    "demo",
    "sim list",
    "sim run",
    "collect",
    "serve-http",
    "sink",
    "import",
    "analyze",
    "eval",
    "findings",
    "sql",
    "dashboards",
    "report",
    "sim",
    "migrate",
    "config",
    "clickhouse",
    "clickhouse ddl",
]
runner = CliRunner()


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_every_subcommand_has_help(sub: str) -> None:
    result = runner.invoke(app, [*sub.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_dashboards_is_a_group() -> None:
    result = runner.invoke(app, ["dashboards"])  # issue 6 built it: `dashboards build` (tests/dashboards)
    assert "build" in result.output and "issue 6" not in result.output
