"""The command as a whole: every subcommand has help, and help stays light."""

from __future__ import annotations

import subprocess
import sys

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


def test_help_loads_neither_the_simulator_nor_the_heavy_libraries() -> None:
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from rocescope.cli import app\n"
        "for args in (['--help'], ['demo', '--help'], ['analyze', '--help'], ['collect', 'gnmi', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
        "heavy = ('polars', 'grpc', 'rocescope.sim')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
