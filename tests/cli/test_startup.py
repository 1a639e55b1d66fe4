"""Starting the command stays cheap: help imports none of the heavy libraries, `findings` only what reading the
store needs (the figures: bench/startup.py; the target: `rocescope --help` under half a second).

Checked by what a fresh process has imported when it exits, not by timing, so a loaded machine cannot make
these tests flaky and a failure names the module that crept onto the path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

#: Run as `python -c PROBE ARGS...`: the command as the entry point runs it, then every imported module's name.
PROBE = """
import atexit, json, sys
atexit.register(lambda: sys.stderr.write("\\nimported: " + json.dumps(sorted(sys.modules)) + "\\n"))
from rocescope.cli import app
app(sys.argv[1:], prog_name="rocescope")
"""

#: Several helps in one process (one process start, and what any of them imports counts).
HELP_PROBE = """
import json, sys
from typer.testing import CliRunner
from rocescope.cli import app
runner = CliRunner()
outputs = {" ".join(args): runner.invoke(app, args, prog_name="rocescope").output for args in json.loads(sys.argv[1])}
print(json.dumps({"outputs": outputs, "imported": sorted(sys.modules)}))
"""
HELPS = [
    ["--help"],
    ["findings", "--help"],
    ["import", "--help"],
    ["demo", "--help"],
    ["analyze", "--help"],
    ["report", "--help"],
    ["collect", "gnmi", "--help"],
    ["collect", "pcap", "--help"],
    ["sink", "--help"],
]

#: Nothing of these for help: each costs tens to hundreds of milliseconds. (pydantic itself is typer's: it coerces a
#: subcommand's parameters with it; pydantic_settings and the config are ours.)
HEAVY_FOR_HELP = (
    "pyarrow",
    "polars",
    "pandas",
    "numpy",
    "grpc",
    "kafka",
    "chdb",
    "pydantic_settings",
    "rocescope.config",
    "numba",
    "matplotlib",
    "rocescope.pipeline",
    "rocescope.collectors",
    "rocescope.analysis",
    "rocescope.sim",
    "rocescope.testbed",
)

#: `findings` needs the config (pydantic), pyarrow (and its numpy) and chdb; nothing of these.
HEAVY_FOR_FINDINGS = ("polars", "pandas", "grpc", "kafka", "numba", "matplotlib", "rocescope.sim", "rocescope.testbed")


def run_probe(args: Sequence[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    line = next(line for line in reversed(done.stderr.splitlines()) if line.startswith("imported: "))
    return done, set(json.loads(line.removeprefix("imported: ")))


def loaded(modules: set[str], packages: Sequence[str]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.fixture(scope="module")
def helps() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", HELP_PROBE, json.dumps(HELPS)], capture_output=True, text=True, timeout=60, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_help_imports_no_heavy_library(helps: dict[str, Any]) -> None:
    for args, output in helps["outputs"].items():
        assert "Usage: rocescope" in output, (args, output)
    assert loaded(set(helps["imported"]), HEAVY_FOR_HELP) == []


def test_the_entry_point_help_imports_no_heavy_library(tmp_path: Path) -> None:
    done, modules = run_probe(["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert all(f" {sub} " in done.stdout for sub in ("findings", "demo", "collect", "sql"))
    assert loaded(modules, HEAVY_FOR_HELP) == []


def test_import_help_still_lists_the_streams_from_the_schema(helps: dict[str, Any]) -> None:
    from rocescope import schema

    assert "rocescope.schema" in helps["imported"]
    assert all(stream in helps["outputs"]["import --help"] for stream in schema.STREAMS)


def test_findings_imports_only_what_reading_the_store_needs(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    config = str(write_config(tmp_path))
    created, _ = run_probe(["--config", config, "migrate"], tmp_path)  # creating the store is not startup
    assert created.returncode == 0, created.stderr
    done, modules = run_probe(["--config", config, "findings"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "no findings since" in done.stdout
    assert {"pyarrow", "chdb"} <= modules  # it did read the store
    assert loaded(modules, HEAVY_FOR_FINDINGS) == []
