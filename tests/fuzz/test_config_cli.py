"""Fuzzing the configuration readers (rocescope.config.load over mutated real configs, the collectors'
targets files) and the CLI's argument parsing (typer/click over random argument lists, plus full runs
of cheap commands through typer's CliRunner). Allowed: ConfigError for a bad file; click's usage errors
(exit 2) for bad arguments; never a traceback."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import typer
import typer.core
import yaml
from typer._click import exceptions as click_errors  # typer vendors click: its parser is what runs
from typer.testing import CliRunner

from rocescope import config
from rocescope.cli import app
from rocescope.collectors.gnmi.targets import load_targets
from rocescope.errors import ConfigError

from fuzzing import SEED, Mutator, count, run

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


#: Per-input cost here is ~3 ms (PyYAML's pure-Python safe_load, then pydantic-settings reading the
#: environment), ~1.2 ms per CLI parse and ~60 ms per CliRunner run (typer rebuilds the click app), so
#: these targets run fewer than 10,000 inputs by default to keep the suite near 60 s of CI;
#: ROCESCOPE_FUZZ_SCALE=4 takes each past 10,000 (the CliRunner runs excepted).
CONFIG_INPUTS, TARGETS_INPUTS, CLI_PARSES, CLI_RUNS = 10_000, 10_000, 10_000, 50


def _configs() -> list[bytes]:
    k8s = list(yaml.safe_load_all((DEPLOY / "k8s" / "config.yaml").read_text()))
    return [(DEPLOY / "compose" / "rocescope.yaml").read_bytes(), k8s[0]["data"]["rocescope.yaml"].encode()]


@pytest.fixture(autouse=True)
def _no_env_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ROCESCOPE_CONFIG", "ROCESCOPE_STORE__PASSWORD", "ROCESCOPE_STORE__BACKEND"):
        monkeypatch.delenv(name, raising=False)


def test_config_yaml(tmp_path: Path) -> None:
    corpus = _configs()
    for c in corpus:
        (tmp_path / "ok.yaml").write_bytes(c)
        config.load(tmp_path / "ok.yaml")
    path = tmp_path / "fuzz.yaml"

    def load(data: bytes) -> None:
        path.write_bytes(data)
        config.load(path)

    run("config YAML", Mutator(corpus).many(count(CONFIG_INPUTS)), load, (ConfigError,))


def test_yaml_nesting_is_a_config_error(tmp_path: Path) -> None:
    """Regression (found here): PyYAML composes nested nodes recursively, so `[[[[...` raised
    RecursionError out of config.load and every targets-file reader instead of a ConfigError."""
    path = tmp_path / "deep.yaml"
    path.write_text("[" * 1000)
    with pytest.raises(ConfigError):
        config.load(path)
    with pytest.raises(ConfigError):
        load_targets(path)


def test_gnmi_targets_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GNMI_PASSWORD", "s3cret")
    corpus = [
        b"targets:\n  - name: leaf-r0-01\n    address: 10.0.0.11:8080\n    vendor: sonic\n    pfc_priorities: [3, 4]\n"
        b"    tls: true\n    server_name: leaf-r0-01\n    username: rocescope\n    password: env:GNMI_PASSWORD\n"
        b"  - name: spine-01\n    address: spine-01:57400\n    vendor: srlinux\n    paths:\n"
        b"      - /interface/statistics\n      - {path: /qos/interfaces/interface/pfc, interval: 1}\n"
        b"      - {path: COUNTERS/Ethernet*/Queues, target: COUNTERS_DB}\n"
    ]
    path = tmp_path / "targets.yaml"

    def load(data: bytes) -> None:
        path.write_bytes(data)
        load_targets(path)

    run("gNMI targets YAML", Mutator(corpus).many(count(TARGETS_INPUTS)), load, (ConfigError,))


_WORDS = [
    *("config", "--dump", "sql", "findings", "--job", "--kind", "--since", "--json", "--limit", "analyze"),
    *("--from", "--to", "--detector", "report", "--finding", "--out", "import", "--table", "--kind", "sim"),
    *("list", "run", "--scenario", "--duration", "collect", "nic", "gnmi", "snmp", "pcap", "ebpf", "--targets"),
    *("--interval", "--once", "--seconds", "serve-http", "--port", "clickhouse", "ddl", "--replicated"),
    *("--cluster", "--param", "-p", "--format", "dashboards", "build", "eval", "--seeds", "-c", "--help"),
    *("", "-", "--", "x=y", "1", "-1", "1e999", "nan", "15m", "2026-13-45", "'; DROP TABLE counters; --"),
    *("\x00", "é", "\udcff", "--log-level", "DEBUG", "/nonexistent", "a" * 300, "--shard", "0/0", "1/2"),
]  # fmt: skip


def test_cli_argument_parsing() -> None:
    """Random argument lists through the real click parser of the typer app (parsing only: nothing runs)."""
    command = typer.main.get_command(app)
    assert isinstance(command, typer.core.TyperGroup)
    rng = random.Random(SEED)

    def parse(_: bytes) -> None:
        args = [rng.choice(_WORDS) for _ in range(rng.randrange(1, 7))]
        try:
            ctx = command.make_context("rocescope", args)
            group: typer.core.TyperCommand | typer.core.TyperGroup = command
            while isinstance(group, typer.core.TyperGroup):
                sub = [*getattr(ctx, "_protected_args", ()), *ctx.args]  # what the group left for a subcommand
                if not sub:
                    break
                name, cmd, rest = group.resolve_command(ctx, sub)
                if cmd is None:
                    break
                ctx = cmd.make_context(name or "", rest, parent=ctx)
                group = cmd  # type: ignore[assignment]
        except (click_errors.UsageError, typer.Exit, typer.Abort):
            pass  # click's own answer to bad arguments: a usage message and exit 2 (or --help: exit 0)

    run("CLI arguments (parse)", (b"" for _ in range(count(CLI_PARSES))), parse)


def test_cli_cheap_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whole runs of commands that need no store: a usage error or a one-line error, never a traceback."""
    monkeypatch.chdir(tmp_path)
    bad_config = tmp_path / "bad.yaml"
    runner = CliRunner()
    rng = random.Random(SEED + 1)
    mut = Mutator(_configs(), seed=SEED + 2)

    def invoke(_: bytes) -> None:
        bad_config.write_bytes(mut())
        args = rng.choice(
            [
                ["-c", str(bad_config), "config", "--dump"],
                ["-c", str(bad_config), "config"],
                ["clickhouse", "ddl", rng.choice(["--replicated", "--kafka-engine", "--cluster", "x"])],
                [rng.choice(_WORDS), rng.choice(_WORDS)],
            ]
        )
        result = runner.invoke(app, args)
        assert result.exit_code in (0, 1, 2), (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), (args, result.exception)

    run("CLI commands (CliRunner)", (b"" for _ in range(count(CLI_RUNS))), invoke)
