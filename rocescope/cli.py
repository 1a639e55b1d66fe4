"""The one `rocescope` command: a subcommand per area."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import typer
from rich.console import Console
from rich.table import Table as RichTable

from rocescope import config as config_mod
from rocescope import schema
from rocescope.collectors.common.sharding import shard_targets
from rocescope.errors import ConfigError, RocescopeError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.store import Store

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from rocescope.collectors.config import CollectorsConfig
    from rocescope.collectors.gnmi.collector import GnmiTarget

T = TypeVar("T")

app = typer.Typer(
    help="Observability for RoCEv2 training fabrics.", no_args_is_help=True, pretty_exceptions_enable=False
)
console = Console()
err_console = Console(stderr=True)
log = logging.getLogger("rocescope.cli")

ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="YAML config file (or ROCESCOPE_CONFIG).")]


class _State:
    config_path: Path | None = None


_state = _State()


@app.callback()
def main(
    config: ConfigOpt = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "",
) -> None:
    """rocescope: collect, ship, store and analyse RoCE fabric telemetry."""
    _state.config_path = config
    level = log_level or "WARNING"
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _settings() -> config_mod.Settings:
    settings = config_mod.load(_state.config_path)
    _collectors(settings)  # a bad collector section is refused at start, whatever the command
    return settings


def _collectors(settings: config_mod.Settings) -> CollectorsConfig:
    from rocescope.collectors.config import CollectorsConfig

    return CollectorsConfig.of(settings)


def _fail(exc: RocescopeError) -> typer.Exit:
    err_console.print(f"[red]error:[/red] {exc}", highlight=False)
    return typer.Exit(1)


def _store(settings: config_mod.Settings) -> Store:
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


@app.command("config")
def config_cmd(
    dump: Annotated[bool, typer.Option("--dump", help="Print the effective config.")] = False,
) -> None:
    """Validate the configuration; with --dump print it (secrets redacted)."""
    try:
        settings = _settings()
    except RocescopeError as exc:
        raise _fail(exc) from None
    if dump:
        console.print(config_mod.dump(settings, _collectors(settings)), end="", highlight=False, markup=False)
    else:
        console.print("config is valid")


@app.command()
def migrate() -> None:
    """Create or upgrade the tables, views and rollups (idempotent)."""
    from rocescope.pipeline.migrations import migrate as run_migrations
    from rocescope.pipeline.store import open_store

    try:
        settings = _settings()
        with open_store(settings.store) as store:
            actions = run_migrations(store, settings.store.ttl_days, settings.store.rollup_ttl_days)
    except RocescopeError as exc:
        raise _fail(exc) from None
    for action in actions or ["store is up to date"]:
        console.print(action)


@app.command("serve-http")
def serve_http(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (ClickHouse's HTTP port is 8123).")] = 8123,
    seconds: Annotated[float | None, typer.Option(help="Stop after this long (default: until killed).")] = None,
) -> None:
    """Serve the embedded store over ClickHouse's HTTP interface on loopback (no authentication), so a
    local Grafana or any ClickHouse HTTP client can read it; while it runs it owns the store directory."""
    from rocescope.pipeline.store import ChdbStore
    from rocescope.testbed.chdb_http import ChdbHttpServer

    try:
        settings = _settings()
        if settings.store.backend != "chdb":
            raise ConfigError("serve-http serves the embedded store (store.backend: chdb)")
        with _store(settings) as store:
            assert isinstance(store, ChdbStore)
            server = ChdbHttpServer(store.session, "127.0.0.1", port).start()
            console.print(f"serving {settings.store.path} (database {store.database}) at {server.url}", highlight=False)
            _run_until_stopped(seconds).wait()
            server.stop()
    except (RocescopeError, OSError) as exc:
        raise _fail(exc if isinstance(exc, RocescopeError) else ConfigError(f"port {port}: {exc}")) from None


class OutFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


def _parse_params(params: list[str]) -> dict[str, str]:
    out = {}
    for item in params:
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise typer.BadParameter(f"--param wants NAME=VALUE, got {item!r}")
        out[name] = value
    return out


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help="SQL; use {name:Type} placeholders with --param name=value.")],
    fmt: Annotated[OutFormat, typer.Option("--format", "-f")] = OutFormat.table,
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="NAME=VALUE, bound server-side.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to a file instead of stdout.")] = None,
    limit: Annotated[int, typer.Option(help="Rows shown in table format.")] = 100,
) -> None:
    """Run SQL against the store and print the result."""
    params = _parse_params(param or [])
    try:
        with _store(_settings()) as store:
            if fmt is OutFormat.table:
                result = store.query_arrow(query, params)
            else:
                engine_format = {"csv": "CSVWithNames", "json": "JSONEachRow", "parquet": "Parquet"}[fmt.value]
                raw = store.query_bytes(query, engine_format, params)
    except RocescopeError as exc:
        raise _fail(exc) from None
    if fmt is OutFormat.table:
        write_table(result, fmt, out, limit)
    elif out is not None:
        out.write_bytes(raw)
    elif fmt is OutFormat.parquet and sys.stdout.isatty():
        raise typer.BadParameter("parquet is binary: give --out FILE or redirect stdout")
    else:
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()


def write_table(result: pa.Table, fmt: OutFormat, out: Path | None, limit: int = 100) -> None:
    """Print a result as a rich table (the other formats are produced by the engine itself)."""
    show = RichTable(*result.column_names, title=f"{result.num_rows} rows")
    for row in result.slice(0, limit).to_pylist():
        show.add_row(*("" if v is None else str(v) for v in row.values()))
    console.print(show)


@app.command("import")
def import_cmd(
    files: Annotated[
        list[Path] | None, typer.Argument(help="Parquet, Arrow IPC or CSV files with a table's columns (or --kind).")
    ] = None,
    table: Annotated[str, typer.Option("--table", "-t", help=f"One of: {', '.join(schema.STREAMS)}")] = "counters",
    kind: Annotated[
        str, typer.Option(help="table (default), gnmic, pcap, lldpcli, kubectl or sonic: what the files are.")
    ] = "table",
    device: Annotated[str | None, typer.Option(help="Device name for the rows (default: from the data/file).")] = None,
    inventory: Annotated[Path | None, typer.Option(help="kubectl: host inventory YAML (NICs per host).")] = None,
    kafka_topic: Annotated[str | None, typer.Option(help="gnmic: read gnmic's Kafka output topic.")] = None,
    bootstrap: Annotated[str | None, typer.Option(help="gnmic: Kafka host:port[,...] (default: kafka config).")] = None,
    kafka_idle: Annotated[float, typer.Option(help="gnmic: stop after the topic is idle this long (s).")] = 5.0,
    at: Annotated[str | None, typer.Option(help="Time of undated dumps (sonic, lldpcli, kubectl): ISO.")] = None,
) -> None:
    """Load files shaped like a stream table into the store (checked against the schema), or, with --kind,
    recorded device output (gnmic JSON or its Kafka topic, pcap, lldpcli/kubectl JSON, SONiC redis dumps)."""
    from rocescope.pipeline.batch import conform

    if kind != "table":
        from rocescope.cli_sources import ImportKind, import_kind

        if kind not in ImportKind.__members__:
            raise typer.BadParameter(f"unknown --kind {kind!r}; choose from {', '.join(ImportKind.__members__)}")
        import_kind(ImportKind(kind), files or [], device, inventory, kafka_topic, bootstrap, kafka_idle, at)
        return
    if not files:
        raise typer.BadParameter("give the files to import")
    if table not in schema.STREAMS:
        raise typer.BadParameter(f"unknown table {table!r}; choose from {', '.join(schema.STREAMS)}")
    try:
        with _store(_settings()) as store:
            total = 0
            for path in files:
                data = _read_file(path)
                total += store.insert(table, pa.Table.from_batches([conform(table, data)]))
                console.print(f"{path}: {data.num_rows} rows")
    except RocescopeError as exc:
        raise _fail(exc) from None
    console.print(f"imported {total} rows into {table}")


def _read_file(path: Path) -> pa.Table:
    from rocescope.errors import DecodeError

    try:
        if path.suffix in (".parquet", ".pq"):
            return pq.read_table(path)
        if path.suffix in (".arrow", ".arrows", ".ipc"):
            with pa.memory_map(str(path)) as source:
                return pa.ipc.open_stream(source).read_all()
        if path.suffix == ".csv":
            return pacsv.read_csv(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DecodeError(f"{path}: {exc}") from exc
    raise DecodeError(f"{path}: unknown file type (want .parquet, .arrow or .csv)")


def _since(text: str) -> dt.datetime:
    """`15m`, `2h`, `90s` (that long ago) or an ISO time (UTC when it has no offset)."""
    from rocescope.sim.scenario import parse_duration

    now = dt.datetime.now(dt.UTC)
    if text == "now":
        return now
    try:
        return now - dt.timedelta(seconds=parse_duration(text))
    except (ValueError, RocescopeError):
        pass
    try:
        at = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"not a time or duration: {text!r} (want e.g. 15m, 2h, 2026-11-22T10:00:00)") from None
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


@app.command()
def findings(
    job: Annotated[str | None, typer.Option(help="Only findings that concern this job id.")] = None,
    kind: Annotated[str | None, typer.Option(help="Only this kind (pfc_storm, incast...).")] = None,
    since: Annotated[str, typer.Option(help="Findings still open at or after this (15m, 2h, ISO time).")] = "24h",
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables.")] = False,
    limit: Annotated[int, typer.Option()] = 500,
) -> None:
    """Findings grouped per training job, the worst job and the worst finding first."""
    from rocescope.analysis.present import findings_json, findings_tables, load_findings

    try:
        when = _since(since)
        with _store(_settings()) as store:
            rows = load_findings(store, when, job or "", kind or "", limit)
    except RocescopeError as exc:
        raise _fail(exc) from None
    if as_json:
        sys.stdout.write(findings_json(rows) + "\n")
        return
    if not rows:
        console.print(f"no findings since {when:%Y-%m-%d %H:%M:%S} UTC")
    for table in findings_tables(rows):
        console.print(table)


@app.command()
def sink(
    seconds: Annotated[
        float | None, typer.Option(help="Stop after this many seconds (default: run until killed).")
    ] = None,
) -> None:
    """Consume the Kafka topics as one consumer group and insert into the store, exactly once."""
    from rocescope.pipeline.kafka import KafkaTransport
    from rocescope.pipeline.metrics import SinkMetrics
    from rocescope.pipeline.sink import Sink

    try:
        settings = _settings()
        if settings.transport.kind != "kafka":
            raise ConfigError("`rocescope sink` reads Kafka: set transport.kind: kafka")
        with _store(settings) as store:
            transport = KafkaTransport(settings.kafka)
            transport.ensure_topics(schema.STREAMS)
            metrics = SinkMetrics()
            if settings.sink.metrics_port:
                metrics.serve(settings.sink.metrics_host, settings.sink.metrics_port)
            worker = Sink(
                transport.consumer(settings.sink.group_id, schema.STREAMS),
                store,
                settings.sink,
                metrics,
                ttl_days=settings.store.ttl_days,
            )
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            if seconds is not None:
                threading.Timer(seconds, stop.set).start()
            try:
                while not stop.is_set():
                    worker.step(stop)
            except KeyboardInterrupt:
                stop.set()
            worker.flush(stop)
            worker.consumer.close()
    except RocescopeError as exc:
        raise _fail(exc) from None
    console.print(f"sink stopped: {worker.status()}")


@app.command()
def demo(
    scenario: Annotated[str, typer.Option(help="Scenario name or YAML file (`rocescope sim list`).")] = "demo",
    duration: Annotated[str | None, typer.Option(help="Fabric time to simulate, e.g. 10m, 90s.")] = None,
    fast: Annotated[
        bool, typer.Option("--fast", help="Land the simulator's snapshots directly (no protocols, no collectors).")
    ] = False,
    out: Annotated[Path, typer.Option(help="Where to write the HTML report and the Grafana dashboards.")] = Path(
        "rocescope-demo"
    ),
    kafka: Annotated[
        bool,
        typer.Option(
            "--kafka", help="Send the batches through the Kafka broker at kafka.bootstrap_servers (a sink runs here)."
        ),
    ] = False,
) -> None:
    """Simulate a RoCE training fabric with incidents, land its telemetry in the store, analyze it, show
    the findings per training job next to the ground truth, and write the HTML report and dashboards.

    By default the simulator serves its switches over gNMI and SNMP and its hosts as /sys + `ethtool -S`
    views, and the real collectors gather them (in lockstep with fabric time) through the transport into
    the store: in-process by default, or with `--kafka` through the configured broker and a sink on a thread
    of this process; `--fast` skips the protocols.

    The default scenario is 32 hosts x 4 rails, two training jobs, 10 minutes of fabric time with an
    incast, a PFC storm, microbursts and a flapping uplink (ground truth in the `incidents` table).
    """
    from rocescope.analysis.frames import Window
    from rocescope.analysis.present import findings_tables, load_findings
    from rocescope.analysis.report import write_report
    from rocescope.analysis.run import analyze as run_analysis
    from rocescope.dashboards import build_all
    from rocescope.sim.run import run_scenario
    from rocescope.sim.scenario import parse_duration

    try:
        settings = _settings()
        if kafka:
            transport = settings.transport.model_copy(update={"kind": "kafka", "sink_in_process": True})
            settings = settings.model_copy(update={"transport": transport})
        seconds = parse_duration(duration) if duration else None
        if fast:
            summary = run_scenario(settings, scenario, seconds, None, progress=True)
        else:
            from rocescope.sim.serve import serve_scenario

            summary, served = serve_scenario(settings, scenario, seconds, None, progress=True)
            console.print(
                f"served over gNMI/SNMP/host views: {served.gnmi_values_decoded} of {served.gnmi_values_sent} gNMI "
                f"values decoded, {served.nic_polls} NIC polls, {served.snmp_polls} SNMP walk(s)",
                highlight=False,
            )
        with _store(settings) as store:
            landed = store.query_arrow(
                "SELECT 'counters' AS stream, count() AS rows FROM counters UNION ALL "
                "SELECT 'links', count() FROM links UNION ALL SELECT 'endpoints', count() FROM endpoints UNION ALL "
                "SELECT 'incidents', count() FROM incidents"
            )
            incidents = store.query_arrow(
                "SELECT kind, start, end, devices, job_ids FROM incidents WHERE scenario = {s:String} ORDER BY start",
                {"s": summary.scenario},
            )
            result = run_analysis(store, Window(summary.start, summary.end), settings.analysis, progress=True)
            rows = load_findings(store, summary.start)
            report = write_report(store, out / "report.html", since=summary.start)
        dashboards = build_all(out / "grafana", settings.store)
    except RocescopeError as exc:
        raise _fail(exc) from None
    where = settings.store.path if settings.store.backend == "chdb" else settings.store.url
    console.print(f"[bold]landed in {settings.store.backend} at {where}[/bold]")
    for line in summary.lines():
        console.print(line, highlight=False)
    write_table(landed, OutFormat.table, None)
    console.print("[bold]ground truth[/bold]")
    write_table(incidents, OutFormat.table, None)
    console.print(f"[bold]findings per training job[/bold] (analysis took {result.total_seconds:.1f} s)")
    for table in findings_tables(rows):
        console.print(table)
    if not rows:
        console.print("no findings")
    console.print(f"[bold]report[/bold]: {report.resolve()}", highlight=False, soft_wrap=True)
    console.print(
        f"[bold]dashboards[/bold]: {len(dashboards)} files in {(out / 'grafana').resolve()} "
        f"(start Grafana with GF_PATHS_PROVISIONING={(out / 'grafana' / 'provisioning').resolve()})",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        'Next: rocescope findings --job <job> --json | rocescope sql "SELECT * FROM findings" | '
        "rocescope sql \"SELECT * FROM port_rates WHERE metric = 'cnp_sent' AND rate > 0 LIMIT 20\"",
        highlight=False,
        soft_wrap=True,
    )


sim_app = typer.Typer(help="The simulated RoCE fabric: scenarios with ground-truth incidents.", no_args_is_help=True)
app.add_typer(sim_app, name="sim")


@sim_app.command("list")
def sim_list() -> None:
    """The shipped scenarios."""
    from rocescope.sim.scenario import load_scenario, scenario_names

    for name in scenario_names():
        sc = load_scenario(name)
        kinds = ", ".join(sorted({i.kind for i in sc.incidents})) or "no incidents"
        console.print(f"{name}: {sc.duration:g} s; {kinds}", highlight=False)


@sim_app.command("run")
def sim_run(
    scenario: Annotated[str, typer.Option(help="Scenario name (`rocescope sim list`) or YAML file.")] = "demo",
    duration: Annotated[str | None, typer.Option(help="Fabric time, e.g. 10m (default: the scenario's).")] = None,
    out: Annotated[Path | None, typer.Option(help="Directory for ground_truth.json and summary.json.")] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Serve gNMI/SNMP per switch and host views on loopback, paced, for external collectors "
            "(targets files in --out); stop with Ctrl-C.",
        ),
    ] = False,
    speed: Annotated[float, typer.Option(help="With --serve: fabric seconds per wall second (1 = real time).")] = 1.0,
) -> None:
    """Simulate a scenario and send its telemetry through the pipeline into the store (fast path), or serve
    it over the real protocols (`--serve`)."""
    from rocescope.sim.run import run_scenario
    from rocescope.sim.scenario import parse_duration

    try:
        settings = _settings()
        seconds = parse_duration(duration) if duration else None
        if serve:
            from rocescope.sim.serve import FabricServer, serve_scenario

            def ready(server: FabricServer) -> None:
                for sw in server.switches:
                    g, s = server.gnmi.get(sw), server.snmp.get(sw)
                    console.print(
                        f"{sw}: gNMI {g.address if g else '-'}  SNMP v2c public@{s.address if s else '-'}",
                        highlight=False,
                    )
                console.print(f"host views (sysfs + bin/ethtool): {server.root / 'hosts'}/<host>", highlight=False)
                console.print(f"LLDP JSON: {server.root / 'lldp'}, pods: {server.root / 'pods.json'}", highlight=False)
                for kind, path in server.write_targets(out or server.root).items():
                    console.print(f"targets for `rocescope collect {kind} --targets {path}`", highlight=False)

            summary, _ = serve_scenario(
                settings, scenario, seconds, out, progress=True, speed=speed, collect=False,
                stop=_run_until_stopped(None), on_ready=ready,
            )  # fmt: skip
        else:
            summary = run_scenario(settings, scenario, seconds, out, progress=True)
    except RocescopeError as exc:
        raise _fail(exc) from None
    for line in summary.lines():
        console.print(line, highlight=False)


def _later(area: str, issue: int) -> None:
    err_console.print(f"`rocescope {area}` is not built yet (tracked in issue {issue}).")
    raise typer.Exit(2)


collect_app = typer.Typer(help="Collect from devices: nic, pcap, snmp, ebpf, gnmi, lldp, jobs.", no_args_is_help=True)
app.add_typer(collect_app, name="collect")


def _run_until_stopped(seconds: float | None) -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    if seconds is not None:
        timer = threading.Timer(seconds, stop.set)
        timer.daemon = True
        timer.start()
    return stop


_COUNTER_COLUMNS = ("ts", "device", "port", "priority", "metric", "value", "raw_name")


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
        write_table(table.select(keep) if keep else table, OutFormat.table, None, limit)


def _pick(flag: T | None, configured: T) -> T:
    """A CLI flag overrides the config file's value."""
    return configured if flag is None else flag


OnceOpt = Annotated[bool, typer.Option("--once", help="Poll once, print what would be shipped, ship nothing.")]
LimitOpt = Annotated[int, typer.Option(help="--once: rows shown.")]
SecondsOpt = Annotated[float | None, typer.Option(help="Stop after this long (default: until killed).")]
ShardOpt = Annotated[
    str | None, typer.Option(help="Only this replica's share: i/n (0-based) or auto (StatefulSet ordinal).")
]


@collect_app.command("nic")
def collect_nic(
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls (config: collectors.nic.interval_s).")
    ] = None,
    seconds: SecondsOpt = None,
    once: OnceOpt = False,
    limit: LimitOpt = 200,
    hostname: Annotated[str | None, typer.Option(help="Device name for the rows (default: this host's).")] = None,
    sysfs_root: Annotated[Path | None, typer.Option(help="Where /sys is (a container's host mount).")] = None,
    netdev: Annotated[list[str] | None, typer.Option(help="Only these netdevs (default: every RoCE one).")] = None,
) -> None:
    """Poll this host's NICs: `ethtool -S` of every RoCE netdev and the RDMA port counters."""
    import socket

    from rocescope.collectors.nic.collector import LiveHost, NicCollector
    from rocescope.pipeline.runner import publishing

    try:
        settings = _settings()
        cfg = _collectors(settings).nic
        host = LiveHost(sysfs_root=str(_pick(sysfs_root, cfg.sysfs_root)), netdevs=netdev or cfg.netdevs or None)
        name = hostname or cfg.hostname or socket.gethostname()
        if once:
            collector = NicCollector(host, name)
            show_batches([collector.poll()], ["port", "metric", "priority"], limit, _COUNTER_COLUMNS)
            polls = 1
        else:
            with publishing(settings) as (producer, _):
                collector = NicCollector(host, name, producer)
                polls = collector.run(_pick(interval, cfg.interval_s), _run_until_stopped(seconds))
    except RocescopeError as exc:
        raise _fail(exc) from None
    console.print(f"{polls} polls of {len(collector.port_map)} RDMA ports")
    failed = _target_lines(collector.metrics.registry, "rocescope_nic")
    if once and failed:
        raise typer.Exit(1)


def _target_lines(registry: CollectorRegistry, prefix: str) -> int:
    """Per-target self-metrics (`<prefix>_target_up`, `_target_read_seconds`, `_errors_total`) as lines; the
    number of targets down."""
    up: dict[str, float] = {}
    took: dict[str, float] = {}
    errors: dict[str, float] = {}
    for family in registry.collect():
        for s in family.samples:
            target = s.labels.get("target")
            if target is None:
                continue
            if s.name == f"{prefix}_target_up":
                up[target] = s.value
            elif s.name == f"{prefix}_target_read_seconds":
                took[target] = s.value
            elif s.name == f"{prefix}_errors_total":
                errors[target] = s.value
    for target in sorted(up):
        console.print(
            f"{target}: {'up' if up[target] else 'DOWN'} ({took.get(target, 0.0):.3f} s last), "
            f"{errors.get(target, 0.0):.0f} failed reads",
            highlight=False,
        )
    return sum(1 for v in up.values() if not v)


@collect_app.command("ebpf")
def collect_ebpf(
    interface: Annotated[
        list[str] | None, typer.Option(help="Count RoCEv2 packets per QP here with XDP (repeatable).")
    ] = None,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls of the BPF maps (config: collectors.ebpf.interval_s).")
    ] = None,
    seconds: SecondsOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="Attach, count for one interval, print what would be shipped, ship nothing.")
    ] = False,
    limit: LimitOpt = 200,
    hostname: Annotated[str | None, typer.Option(help="Device name for the rows (default: this host's).")] = None,
    allow_privileged: Annotated[
        bool,
        typer.Option(
            "--allow-privileged",
            help="Run even when fully privileged (CAP_SYS_MODULE/CAP_SYS_RAWIO, e.g. plain root); "
            "otherwise grant only CAP_BPF, CAP_PERFMON (+CAP_NET_ADMIN for XDP).",
        ),
    ] = False,
) -> None:
    """eBPF (bcc): host drops by reason, TCP retransmits by peer, RoCEv2 packets per QP (XDP), QP owners."""
    import socket

    from rocescope.collectors.ebpf.capabilities import check_ebpf
    from rocescope.collectors.ebpf.collector import EbpfCollector
    from rocescope.pipeline.runner import publishing

    try:
        settings = _settings()
        cfg = _collectors(settings).ebpf
        name = hostname or cfg.hostname or socket.gethostname()
        period = _pick(interval, cfg.interval_s)
        interfaces = interface or cfg.interfaces
        check_ebpf(xdp=bool(interfaces), allow_privileged=allow_privileged)
        if once:
            collector = EbpfCollector(name, None, interfaces=interfaces)
            with collector:
                threading.Event().wait(period)
                show_batches(collector.poll(), ["metric", "port"], limit, (*_COUNTER_COLUMNS, "qpn", "pid", "comm"))
            polls = 1
        else:
            with publishing(settings) as (producer, _):
                collector = EbpfCollector(name, producer, interfaces=interfaces)
                with collector:
                    polls = collector.run(period, _run_until_stopped(seconds))
    except RocescopeError as exc:
        raise _fail(exc) from None
    counters = collector.metrics.value("rocescope_ebpf_rows_total", stream="counters")
    owners = collector.metrics.value("rocescope_ebpf_rows_total", stream="qp_owners")
    console.print(
        f"{polls} polls; {counters:.0f} counter rows, {owners:.0f} QP owner rows (QP source: {collector.qp_mode})",
        highlight=False,
    )
    failed = _target_lines(collector.metrics.registry, "rocescope_ebpf")
    if once and failed:
        raise typer.Exit(1)


def _snmp_targets(path: Path) -> list[object]:
    """Devices from a YAML file (`devices: [{name, host, ...}]`); a value `env:NAME` is read from the
    environment, so communities and v3 keys stay out of the file."""
    from rocescope.collectors.common.config import load_entries
    from rocescope.collectors.snmp.collector import SnmpDevice

    devices: list[object] = list(load_entries(path, "SNMP targets", "devices", SnmpDevice.from_mapping))
    return devices


@collect_app.command("snmp")
def collect_snmp(
    targets: Annotated[
        Path | None,
        typer.Option(
            help="YAML file: `devices: [{name, host, port, version, ...}]` (config: collectors.snmp.devices)."
        ),
    ] = None,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls (config: collectors.snmp.interval_s).")
    ] = None,
    seconds: SecondsOpt = None,
    once: OnceOpt = False,
    limit: LimitOpt = 200,
    shard: ShardOpt = None,
) -> None:
    """Poll switches over SNMP (v2c, v3): IF-MIB 64-bit counters, link state and speed, PFC MIB counters."""
    from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
    from rocescope.pipeline.runner import publishing

    try:
        settings = _settings()
        cfg = _collectors(settings).snmp
        listed = _snmp_targets(targets) if targets is not None else cfg.build()
        devices = [d for d in listed if isinstance(d, SnmpDevice)]
        if not devices:
            raise ConfigError("no SNMP devices: give --targets or list collectors.snmp.devices in the config")
        devices = shard_targets(devices, lambda d: d.name, _pick(shard, cfg.shard))
        if once:
            collector = SnmpCollector(devices)
            polled = collector.poll_once()
            found = [b for b in polled.values() if b is not None]
            show_batches(found, ["device", "port", "metric", "priority"], limit, _COUNTER_COLUMNS)
        else:
            with publishing(settings) as (producer, _):
                collector = SnmpCollector(devices, producer)
                collector.run(_pick(interval, cfg.interval_s), _run_until_stopped(seconds))
    except RocescopeError as exc:
        raise _fail(exc) from None
    down = 0
    for name, health in collector.health().items():
        state = "up" if health.up else "DOWN"
        down += not health.up
        detail = f"; last error: {health.last_error}" if health.last_error and not health.up else ""
        console.print(
            f"{name}: {state}, {health.polls} polls ({health.last_poll_s:.2f} s last), {health.failures} failed"
            f"{detail}",
            highlight=False,
        )
    if once and down:
        raise typer.Exit(1)


def gnmi_targets(path: Path | None, settings: config_mod.Settings) -> list[GnmiTarget]:
    """The gNMI targets of a `--targets` file, else of `collectors.gnmi.targets`."""
    from rocescope.collectors.gnmi.collector import load_targets

    found = load_targets(path) if path is not None else _collectors(settings).gnmi.build()
    if not found:
        raise ConfigError("no gNMI targets: give --targets or list collectors.gnmi.targets in the config")
    return found


@collect_app.command("gnmi")
def collect_gnmi(
    targets: Annotated[
        Path | None,
        typer.Option(
            help="YAML file: `targets: [{name, address, vendor, paths, ...}]` (config: collectors.gnmi.targets)."
        ),
    ] = None,
    seconds: SecondsOpt = None,
    once: Annotated[bool, typer.Option("--once", help="Print every target's first full sample; ship nothing.")] = False,
    limit: LimitOpt = 200,
    shard: ShardOpt = None,
) -> None:
    """Stream switch counters over gNMI (Subscribe STREAM/SAMPLE): SONiC COUNTERS_DB, OpenConfig, SR Linux."""
    from rocescope.collectors.gnmi.collector import GnmiCollector
    from rocescope.pipeline.runner import publishing

    try:
        settings = _settings()
        devices = shard_targets(
            gnmi_targets(targets, settings), lambda t: t.name, _pick(shard, _collectors(settings).gnmi.shard)
        )
        if once:
            collector = GnmiCollector(devices)
            show_batches(collector.collect_once(), ["device", "port", "metric"], limit, _COUNTER_COLUMNS)
        else:
            with publishing(settings) as (producer, _):
                collector = GnmiCollector(devices, producer)
                collector.run(_run_until_stopped(seconds))
    except RocescopeError as exc:
        raise _fail(exc) from None
    down = 0
    for name, h in collector.health().items():
        ok = h.synced and (h.connected or once) and h.last_error is None
        down += not ok
        detail = f"; last error: {h.last_error}" if h.last_error else ""
        synced_in = f", synced in {h.sync_seconds:.2f} s" if h.sync_seconds is not None else ""
        console.print(
            f"{name}: {'up' if ok else 'DOWN'}, {h.values} values ({h.unknown} unknown, {h.malformed} malformed), "
            f"{h.errors} stream errors, {h.reconnects} reconnects{synced_in}{detail}",
            highlight=False,
        )
    if once and down:
        raise typer.Exit(1)


_PACKET_COLUMNS = ("ts", "src_ip", "dst_ip", "udp_sport", "dscp", "ecn", "opcode", "dest_qp", "psn", "becn", "length")


@collect_app.command("pcap")
def collect_pcap(
    files: Annotated[list[Path] | None, typer.Argument(help="Capture files (pcap/pcapng).")] = None,
    interface: Annotated[
        list[str] | None,
        typer.Option(
            help="Capture live here, in rotating files; repeat for several (config: collectors.pcap.interface)."
        ),
    ] = None,
    seconds: Annotated[float | None, typer.Option(help="Live: stop after this long (default: until killed).")] = None,
    file_seconds: Annotated[
        float | None, typer.Option(help="Live: rotate capture files this often (config: collectors.pcap.file_seconds).")
    ] = None,
    ring_files: Annotated[
        int | None, typer.Option(help="Live: at most this many files on disk (config: collectors.pcap.ring_files).")
    ] = None,
    capture_dir: Annotated[
        Path | None,
        typer.Option(help="Live: where the files go (default: a temp dir) (config: collectors.pcap.capture_dir)."),
    ] = None,
    keep_files: Annotated[
        bool | None, typer.Option("--keep-files/--remove-files", help="Live: keep files after they landed.")
    ] = None,
    capture_point: Annotated[
        str | None, typer.Option(help="Where the packets were seen (host/netdev, mirror) (config: collectors.pcap).")
    ] = None,
    sampling_rate: Annotated[
        int | None, typer.Option(help="Keep 1 in N packets (config: collectors.pcap.sampling_rate).", min=1)
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="Decode the files (live: until a capture file holds packets), print them, ship nothing."
        ),
    ] = False,
    limit: LimitOpt = 200,
) -> None:
    """Sampled RoCEv2 packets (data, ACKs, CNPs) from capture files or a live interface (rotating files)."""
    from rocescope.collectors.pcap.collector import PcapCollector, PcapFile
    from rocescope.pipeline.runner import publishing

    try:
        settings = _settings()
    except RocescopeError as exc:
        raise _fail(exc) from None
    cfg = _collectors(settings).pcap
    configured = [cfg.interface] if isinstance(cfg.interface, str) else cfg.interface
    live = (interface or configured) if not files else interface
    if not files and not live:
        raise typer.BadParameter("give capture files or --interface (or collectors.pcap.interface)")
    point = _pick(capture_point, cfg.capture_point) or (live[0] if live and len(live) == 1 else "") or "import"
    collector = PcapCollector(point, _pick(sampling_rate, cfg.sampling_rate), interface_points=cfg.capture_points)
    total = 0
    shown: list[Batch] = []
    sink_metrics = None
    try:
        with contextlib.ExitStack() as stack:
            producer = None
            if not once:
                producer, sink_metrics = stack.enter_context(publishing(settings))

            def ship(batch: Batch) -> None:
                nonlocal total
                total += batch.num_rows
                if producer is None:
                    shown.append(batch)
                else:
                    producer.publish(batch)

            for path in files or []:
                source = PcapFile(path)
                try:
                    for batch in collector.collect(source):
                        ship(batch)
                finally:
                    source.close()
            if live:
                from rocescope.collectors.pcap.ring import RingCapture, capture_live

                ring = RingCapture(
                    live,
                    _pick(capture_dir, cfg.capture_dir),
                    _pick(file_seconds, cfg.file_seconds),
                    _pick(ring_files, cfg.ring_files),
                    cfg.bpf_filter,
                    _pick(keep_files, cfg.keep_files),
                )
                stop = _run_until_stopped(seconds)

                def landed(path: Path, n: int) -> None:
                    log.info("%s: %d packets landed", path.name, n)
                    if once and n:
                        stop.set()  # --once: until the first capture file that holds packets

                capture_live(ring, collector, ship, stop, on_file=landed)
    except RocescopeError as exc:
        raise _fail(exc) from None
    if once:
        show_batches(shown, ["ts"], limit, _PACKET_COLUMNS)
    skipped = ", ".join(f"{n} {why}" for why, n in collector.skipped.items()) or "none"
    console.print(
        f"{total} RoCEv2 packets from {point}; skipped: {skipped}; "
        f"malformed: {collector.malformed}; capture errors: {collector.source_errors}"
    )
    expired = sink_metrics.value("rocescope_sink_rows_expired_total") if sink_metrics else 0
    if expired:
        err_console.print(
            f"[yellow]{expired:.0f} packets are older than the retention (store.ttl_days="
            f"{settings.store.ttl_days}) and were dropped by the store; set store.ttl_days: 0 to keep old captures"
            "[/yellow]"
        )
    if collector.source_errors:
        raise typer.Exit(1)


@app.command()
def analyze(
    since: Annotated[
        str | None,
        typer.Option("--from", help="Window start: 15m, 2h (ago) or ISO time (default: analysis.window_minutes)."),
    ] = None,
    until: Annotated[str, typer.Option("--to", help="Window end (default: now).")] = "now",
    detector: Annotated[list[str] | None, typer.Option(help="Only these detectors (repeatable).")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep analyzing the latest window.")] = False,
    every: Annotated[str | None, typer.Option(help="Period in follow mode (default: analysis.follow_every_s).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print findings, do not write them.")] = False,
) -> None:
    """Run the detectors over a window and replace that window's findings in the store."""
    from rocescope.analysis.frames import Window
    from rocescope.analysis.present import findings_tables
    from rocescope.analysis.run import analyze as run_analysis
    from rocescope.sim.scenario import parse_duration

    try:
        settings = _settings()
        cfg = settings.analysis
        span = dt.timedelta(minutes=cfg.window_minutes)
        period = parse_duration(every) if every else cfg.follow_every_s
        stop = _run_until_stopped(None) if follow else threading.Event()
        with _store(settings) as store:
            while True:
                end = _since(until)
                start = _since(since) if since and not follow else end - span
                window = Window(start, end)
                result = run_analysis(store, window, cfg, detector, write=not dry_run, progress=not follow)
                rows = [
                    {**vars(f), "ports": list(f.ports), "devices": list(f.devices), "job_ids": list(f.job_ids or ())}
                    for f in result.findings
                ]
                console.print(
                    f"{window}: {len(result.findings)} finding(s) in {result.total_seconds:.1f} s"
                    + ("" if dry_run else f", {result.written} written")
                    + (f"; [red]failed: {', '.join(result.failed)}[/red]" if result.failed else ""),
                    highlight=False,
                )
                if not follow:
                    for table in findings_tables(rows):
                        console.print(table)
                if not follow or stop.wait(period):
                    break
    except (RocescopeError, ValueError) as exc:
        raise _fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None


@app.command("eval")
def eval_cmd(
    kind: Annotated[list[str] | None, typer.Option(help="Only these incident kinds (repeatable).")] = None,
    seeds: Annotated[int, typer.Option(help="Seeds per kind.")] = 20,
    first_seed: Annotated[int, typer.Option(help="The first seed.")] = 1,
    baseline: Annotated[str, typer.Option(help="Fabric time of the clean baseline run (0 to skip).")] = "1h",
    out: Annotated[Path | None, typer.Option(help="Write the scores and every finding as JSON here.")] = None,
) -> None:
    """Score the detectors on simulated incidents with ground truth: precision, recall, localization,
    job attribution and delay per kind, and findings on a clean baseline."""
    import json

    from rocescope.analysis.present import scores_table
    from rocescope.sim.evaluate import SCENARIOS, RunOutcome, evaluate
    from rocescope.sim.scenario import parse_duration

    kinds = kind or list(SCENARIOS)
    bad = sorted(set(kinds) - set(SCENARIOS))
    if bad:
        raise _fail(ConfigError(f"unknown kind(s) {bad}; known: {sorted(SCENARIOS)}"))
    baseline_findings: list[str] = []

    def on_run(o: RunOutcome) -> None:
        found = ", ".join(f"{f.kind}@{f.devices[0] if f.devices else '?'}" for f in o.findings) or "none"
        console.print(f"{o.scenario} seed {o.seed}: {len(o.truths)} incident(s), findings: {found}", highlight=False)
        if o.scenario == "baseline":
            baseline_findings.extend(f.summary for f in o.findings)

    try:
        settings = _settings()
        scores, runs = evaluate(
            kinds,
            list(range(first_seed, first_seed + seeds)),
            parse_duration(baseline),
            settings.analysis,
            on_run=on_run,
        )
    except RocescopeError as exc:
        raise _fail(exc) from None
    console.print(scores_table(scores, f"detector evaluation: {seeds} seed(s) per kind"), width=max(console.width, 100))
    if parse_duration(baseline) > 0:
        console.print(f"clean baseline ({baseline} of fabric time): {len(baseline_findings)} finding(s)")
    if out is not None:
        out.write_text(
            json.dumps(
                {
                    "scores": [s.as_dict() for s in scores.values()],
                    "baseline_findings": baseline_findings,
                    "runs": [
                        {"scenario": r.scenario, "seed": r.seed, "findings": [f.summary for f in r.findings]}
                        for r in runs
                    ],
                },
                indent=2,
            )
        )


dashboards_app = typer.Typer(help="Grafana dashboards as code (grafanalib).", no_args_is_help=True)
app.add_typer(dashboards_app, name="dashboards")


@dashboards_app.command("build")
def dashboards_build(
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory for dashboards/ and provisioning/.")] = Path(
        "grafana"
    ),
) -> None:
    """Write the dashboards as Grafana JSON plus provisioning for the ClickHouse plugin (datasource at
    store.url; Grafana reads the password from ROCESCOPE_STORE__PASSWORD in its environment)."""
    from rocescope.dashboards.build import build_all

    try:
        written = build_all(out, _settings().store)
    except RocescopeError as exc:
        raise _fail(exc) from None
    for path in written:
        console.print(str(path), highlight=False)
    console.print(f"start Grafana with GF_PATHS_PROVISIONING={out.resolve() / 'provisioning'}", highlight=False)


@app.command()
def report(
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write.")] = Path("report.html"),
    job: Annotated[str | None, typer.Option(help="Only findings that concern this job id.")] = None,
    finding: Annotated[str | None, typer.Option(help="Only this finding (its id in the report, or a prefix).")] = None,
    since: Annotated[
        str, typer.Option("--from", help="Findings still open at or after this (15m, 2h, ISO time).")
    ] = "24h",
) -> None:
    """Write the HTML incident report: findings per job, worst first, with their plots; one
    self-contained file (inline SVG, no scripts) that opens offline."""
    from rocescope.analysis.report import build_report

    try:
        when = _since(since)
        with _store(_settings()) as store:
            built = build_report(store, job, when, finding)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(built.html, encoding="utf-8")
    except (RocescopeError, OSError) as exc:
        raise _fail(exc if isinstance(exc, RocescopeError) else ConfigError(f"{out}: {exc}")) from None
    console.print(
        f"wrote {out}: {len(built.rows)} finding(s), {len(built.cases)} case(s), {len(built.plots)} plot(s)"
        + (f", {len(built.skipped)} skipped (see the notes)" if built.skipped else ""),
        highlight=False,
        soft_wrap=True,
    )


clickhouse_app = typer.Typer(help="ClickHouse server and cluster helpers.", no_args_is_help=True)
app.add_typer(clickhouse_app, name="clickhouse")


@clickhouse_app.command("ddl")
def clickhouse_ddl(
    kafka_engine: Annotated[
        bool, typer.Option("--kafka-engine", help="Also Kafka-engine tables + materialized views.")
    ] = False,
    replicated: Annotated[
        bool, typer.Option("--replicated", help="ReplicatedMergeTree `<table>_local` + Distributed `<table>`.")
    ] = False,
    cluster: Annotated[str | None, typer.Option(help="Cluster name (remote_servers) for --replicated.")] = None,
    consumers: Annotated[int, typer.Option(help="kafka_num_consumers per Kafka table (<= partitions).")] = 1,
) -> None:
    """Print the schema's DDL for a ClickHouse server or cluster, derived from rocescope.schema: what
    `migrate` runs, or the replicated/distributed variant, plus (optionally) Kafka-engine ingestion."""
    from rocescope.pipeline.kafka_engine import kafka_engine_ddl, plain_ddl, replicated_ddl

    try:
        settings = _settings()
        if replicated and not cluster:
            raise ConfigError("--replicated needs --cluster NAME")
        if cluster and not replicated:
            raise ConfigError("--cluster goes with --replicated")
        statements = replicated_ddl(settings, cluster) if replicated and cluster else plain_ddl(settings)
        if kafka_engine:
            statements += kafka_engine_ddl(settings, cluster or "", consumers)
    except (RocescopeError, ValueError) as exc:
        raise _fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None
    for sql in statements:
        print(sql.rstrip() + ";\n")


# `collect lldp`, `collect jobs` and the `import --kind` readers live in their own module.
from rocescope import cli_sources as _cli_sources  # noqa: E402, F401

if __name__ == "__main__":
    app()
