"""What every command area shares: the consoles, the settings, errors as exit codes, option types, and
the printing of tables and target health.

Area modules import only this module (never `rocescope.cli` or each other), so the package has no
import circle. Importing the app must stay cheap (`rocescope --help` under half a second; tests/cli/test_startup.py):
heavy imports (pydantic and the config, pyarrow, polars, grpc, chdb, kafka, the simulator) stay inside the functions
that need them.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from rich.console import Console

from rocescope.errors import ConfigError, RocescopeError

if TYPE_CHECKING:
    import pyarrow as pa

    from rocescope.collectors.common.health import Health
    from rocescope.collectors.config import CollectorsConfig
    from rocescope.config import Settings
    from rocescope.pipeline.batch import Batch
    from rocescope.pipeline.metrics import SelfMetrics
    from rocescope.pipeline.store import Store

T = TypeVar("T")

console = Console()
err_console = Console(stderr=True)

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file (or ROCESCOPE_CONFIG).")]
OnceOpt = Annotated[bool, typer.Option("--once", help="Poll once, print what would be shipped, ship nothing.")]
LimitOpt = Annotated[int, typer.Option(help="--once: rows shown.")]
SecondsOpt = Annotated[float | None, typer.Option(help="Stop after this long (default: until killed).")]
ShardOpt = Annotated[
    str | None, typer.Option(help="Only this replica's share: i/n (0-based) or auto (StatefulSet ordinal).")
]

COUNTER_COLUMNS = ("ts", "device", "port", "priority", "metric", "value", "raw_name")


class State:
    """What the main callback learned before a command runs."""

    config_path: Path | None = None


state = State()


def load_settings() -> Settings:
    """The configuration of `--config` (or ROCESCOPE_CONFIG), collectors section included."""
    from rocescope import config as config_mod  # pydantic: not for `--help`

    settings = config_mod.load(state.config_path)
    collectors_config(settings)  # a bad collector section is refused at start, whatever the command
    return settings


def collectors_config(settings: Settings) -> CollectorsConfig:
    from rocescope.collectors.config import CollectorsConfig

    return CollectorsConfig.of(settings)


def serve_own_metrics(settings: Settings, metrics: SelfMetrics) -> None:
    """Serve a running collector's own metrics where `collectors.metrics_port` says (0: not served), as
    node_exporter or Telegraf expose theirs: a collector that lands nothing shows why there."""
    cfg = collectors_config(settings)
    if not cfg.metrics_port:
        return
    try:
        metrics.serve(cfg.metrics_host, cfg.metrics_port)
    except OSError as exc:
        raise ConfigError(f"collectors.metrics_port {cfg.metrics_port}: {exc}") from exc
    err_console.print(f"own metrics at http://{cfg.metrics_host}:{cfg.metrics_port}/metrics", highlight=False)


def fail(exc: RocescopeError) -> typer.Exit:
    """An expected failure as one red line and exit code 1 (raise what this returns)."""
    err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)  # one line, however long
    return typer.Exit(1)


def pick(flag: T | None, configured: T) -> T:
    """A CLI flag overrides the config file's value."""
    return configured if flag is None else flag


def open_migrated_store(settings: Settings) -> Store:
    """The configured store, migrated; use it in a `with` block so it is always closed."""
    from rocescope.pipeline.migrations import migrate as run_migrations
    from rocescope.pipeline.store import open_store

    store = open_store(settings.store)
    try:
        run_migrations(store, settings.store.ttl_days, settings.store.rollup_ttl_days)
    except BaseException:
        store.close()
        raise
    return store


def run_until_stopped(seconds: float | None) -> threading.Event:
    """An event set by SIGTERM, SIGINT or (when given) after `seconds`."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if seconds is not None:
        timer = threading.Timer(seconds, stop.set)
        timer.daemon = True
        timer.start()
    return stop


def write_table(result: pa.Table, limit: int = 100) -> None:
    """Print a result as a rich table (the other formats are produced by the engine itself)."""
    from rich.table import Table as RichTable

    show = RichTable(*result.column_names, title=f"{result.num_rows} rows")
    for row in result.slice(0, limit).to_pylist():
        show.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(show)


def show_batches(batches: Sequence[Batch], sort: Sequence[str], limit: int, columns: Sequence[str] = ()) -> None:
    """`--once` output: what would be shipped, as one table per stream (nothing is shipped)."""
    from rocescope.collectors.common.polling import batches_table

    by_stream: dict[str, list[Batch]] = {}
    for b in batches:
        if b.num_rows:
            by_stream.setdefault(b.stream, []).append(b)
    if not by_stream:
        console.print("nothing to ship")
    for stream, group in by_stream.items():
        table = batches_table(group, [s for s in sort if s in group[0].data.schema.names])
        keep = [c for c in columns if c in table.column_names]
        console.print(f"{stream}:", highlight=False)
        write_table(table.select(keep) if keep else table, limit)


def print_health(health: Mapping[str, Health]) -> int:
    """Each target's health as one line; the number of targets down."""
    for h in health.values():
        console.print(h.summary(), highlight=False)
    return sum(not h.up for h in health.values())
