"""The store's commands: `config`, `migrate`, `sql`, `import`, `serve-http`, `sink` and `clickhouse ddl`."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from rocescope import schema
from rocescope.cli.common import (
    collectors_config,
    console,
    err_console,
    fail,
    load_settings,
    open_migrated_store,
    run_until_stopped,
    write_table,
)
from rocescope.errors import ConfigError, RocescopeError

log = logging.getLogger(__name__)
T = TypeVar("T")
#: bytes of a streamed import file read at a time
_BLOCK = 16 << 20

if TYPE_CHECKING:
    import pyarrow as pa

    from rocescope.config import Settings
    from rocescope.pipeline.batch import Batch
    from rocescope.pipeline.metrics import SinkMetrics
    from rocescope.pipeline.store import Store


def config_cmd(
    dump: Annotated[bool, typer.Option("--dump", help="Print the effective config.")] = False,
) -> None:
    """Validate the configuration; with --dump print it (secrets redacted)."""
    try:
        settings = load_settings()
    except RocescopeError as exc:
        raise fail(exc) from None
    if dump:
        from rocescope import config as config_mod

        console.print(config_mod.dump(settings, collectors_config(settings)), end="", highlight=False, markup=False)
    else:
        console.print("config is valid")


def migrate() -> None:
    """Create or upgrade the tables, views and rollups (idempotent)."""
    from rocescope.pipeline.migrations import migrate as run_migrations
    from rocescope.pipeline.store import open_store

    try:
        settings = load_settings()
        with open_store(settings.store) as store:
            actions = run_migrations(store, settings.store.ttl_days, settings.store.rollup_ttl_days)
    except RocescopeError as exc:
        raise fail(exc) from None
    for action in actions or ["store is up to date"]:
        console.print(action)


def serve_http(
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1 (ClickHouse's HTTP port is 8123).")] = 8123,
    seconds: Annotated[float | None, typer.Option(help="Stop after this long (default: until killed).")] = None,
    allow_writes: Annotated[
        bool,
        typer.Option(
            "--allow-writes",
            help="Also run writes, DDL and every table function (file, url, ...), as `rocescope sql` does: "
            "anyone with the password gets its full power.",
        ),
    ] = False,
) -> None:
    """Serve the embedded store over ClickHouse's HTTP interface on 127.0.0.1, so a local Grafana or any
    ClickHouse HTTP client can read it: read-only (SELECT, SHOW, DESCRIBE, EXISTS, EXPLAIN; nothing that reaches
    outside the store), for user store.user with store.password (ROCESCOPE_STORE__PASSWORD; if unset, one is
    generated and printed at start), and only to loopback Host names. While it runs it owns the store directory."""
    import secrets

    from rocescope.pipeline.store import ChdbStore
    from rocescope.testbed.chdb_http import ChdbHttpServer

    try:
        settings = load_settings()
        if settings.store.backend != "chdb":
            raise ConfigError("serve-http serves the embedded store (store.backend: chdb)")
        configured = settings.store.password.get_secret_value()
        password = configured or secrets.token_urlsafe(18)
        with open_migrated_store(settings) as store:
            assert isinstance(store, ChdbStore)
            user = settings.store.user
            readonly = not allow_writes
            server = ChdbHttpServer(store.session, "127.0.0.1", port, user=user, password=password, readonly=readonly)
            server.start()
            mode = "read-write (--allow-writes)" if allow_writes else "read-only"
            console.print(
                f"serving {settings.store.path} (database {store.database}) at {server.url}, {mode}, user {user}",
                highlight=False,
                soft_wrap=True,
            )
            if not configured:
                console.print(
                    f"password (generated for this run): {password}\n"
                    f"  clients and Grafana take it as ROCESCOPE_STORE__PASSWORD={password}",
                    highlight=False,
                    soft_wrap=True,
                )
            run_until_stopped(seconds).wait()
            server.stop()
            if server.refusals:
                counts = ", ".join(f"{kind} {n}" for kind, n in sorted(server.refusals.items()))
                console.print(f"refused {server.refusals.total()} requests ({counts}; see the log)", highlight=False)
    except (RocescopeError, OSError) as exc:
        raise fail(exc if isinstance(exc, RocescopeError) else ConfigError(f"port {port}: {exc}")) from None


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


def sql(
    query: Annotated[str, typer.Argument(help="SQL; use {name:Type} placeholders with --param name=value.")],
    fmt: Annotated[OutFormat, typer.Option("--format", "-f")] = OutFormat.table,
    param: Annotated[list[str] | None, typer.Option("--param", "-p", help="NAME=VALUE, bound server-side.")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to a file instead of stdout.")] = None,
    limit: Annotated[int, typer.Option(help="Rows shown in table format.")] = 100,
) -> None:
    """Run SQL against the store and print the result. This is your own shell: it has the store's full power
    (writes, DDL, and table functions such as file() and url() that reach this machine and the network), unlike
    `serve-http`, which serves reads inside the store only."""
    params = _parse_params(param or [])
    try:
        with open_migrated_store(load_settings()) as store:
            if fmt is OutFormat.table:
                result = store.query_arrow(query, params)
            else:
                engine_format = {"csv": "CSVWithNames", "json": "JSONEachRow", "parquet": "Parquet"}[fmt.value]
                raw = store.query_bytes(query, engine_format, params)
    except RocescopeError as exc:
        raise fail(exc) from None
    if fmt is OutFormat.table:
        write_table(result, limit)
    elif out is not None:
        out.write_bytes(raw)
    elif fmt is OutFormat.parquet and sys.stdout.isatty():
        raise typer.BadParameter("parquet is binary: give --out FILE or redirect stdout")
    else:
        sys.stdout.buffer.write(raw)
        sys.stdout.flush()


class ImportKind(StrEnum):
    table = "table"
    gnmic = "gnmic"
    pcap = "pcap"
    lldpcli = "lldpcli"
    kubectl = "kubectl"
    sonic = "sonic"
    sonic_monitor = "sonic-monitor"
    nccl_inspector = "nccl-inspector"
    snmp = "snmp"
    slurm = "slurm"


def import_cmd(
    files: Annotated[
        list[Path] | None, typer.Argument(help="Parquet, Arrow IPC or CSV files with a table's columns (or --kind).")
    ] = None,
    table: Annotated[str, typer.Option("--table", "-t", help=f"One of: {', '.join(schema.STREAMS)}")] = "counters",
    kind: Annotated[
        str,
        typer.Option(
            help="table (default), gnmic, pcap, lldpcli, kubectl, sonic (a redis dump), sonic-monitor (a "
            "`redis-cli MONITOR` trace of COUNTERS_DB), snmp (`snmpwalk` output or an .snmprec), slurm "
            "(`squeue --json` or `sacct --json`) or nccl-inspector: what the files are."
        ),
    ] = "table",
    device: Annotated[str | None, typer.Option(help="Device name for the rows (default: from the data/file).")] = None,
    role: Annotated[
        str | None, typer.Option(help="counters: switch, nic or host, for a file without a `role` column.")
    ] = None,
    inventory: Annotated[Path | None, typer.Option(help="kubectl, slurm: host inventory YAML (NICs per host).")] = None,
    kafka_topic: Annotated[str | None, typer.Option(help="gnmic: read gnmic's Kafka output topic.")] = None,
    bootstrap: Annotated[str | None, typer.Option(help="gnmic: Kafka host:port[,...] (default: kafka config).")] = None,
    kafka_idle: Annotated[float, typer.Option(help="gnmic: stop after the topic is idle this long (s).")] = 5.0,
    at: Annotated[
        str | None,
        typer.Option(
            help="Time of undated dumps (sonic, snmp, lldpcli, kubectl, nccl-inspector .prom; a links file): ISO."
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="--kind: one JSON summary (per file: rows landed, left raw, skipped why).")
    ] = False,
    again: Annotated[
        bool, typer.Option("--again", help="Import files the store already holds (same bytes, kind and options).")
    ] = False,
    namespace: Annotated[
        str | None,
        typer.Option(
            help="sonic: the ASIC namespace the dump is of (`asic0`; `sonic-db-dump -n asic0` saved under any "
            "name), where neither the file name (`COUNTERS_DB.json.0`) nor CONFIG_DB says it."
        ),
    ] = None,
) -> None:
    """Load files shaped like a stream table into the store (checked against the schema), or, with --kind,
    recorded device output (gnmic JSON or its Kafka topic, pcap, lldpcli JSON/XML/keyvalue, kubectl JSON, Slurm's
    squeue/sacct JSON, SONiC redis dumps, NCCL Inspector's JSON or Prometheus files)."""
    import pyarrow as pa

    from rocescope.collectors.counters_file import canonical_counters
    from rocescope.collectors.table_files import completed
    from rocescope.pipeline.batch import conform

    if kind != "table":
        if kind not in {k.value for k in ImportKind}:
            raise typer.BadParameter(f"unknown --kind {kind!r}; choose from {', '.join(k.value for k in ImportKind)}")
        asic = None
        if namespace is not None:
            from rocescope.collectors.sonic_dump import namespace_index

            if kind != ImportKind.sonic.value:
                raise typer.BadParameter("--namespace names a SONiC ASIC: use it with --kind sonic")
            try:
                asic = namespace_index(namespace)
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from exc
        _import_kind(
            ImportKind(kind),
            files or [],
            device,
            inventory,
            kafka_topic,
            bootstrap,
            kafka_idle,
            at,
            as_json,
            again,
            asic,
        )
        return
    if not files:
        raise typer.BadParameter("give the files to import")
    if table not in schema.STREAMS:
        raise typer.BadParameter(f"unknown table {table!r}; choose from {', '.join(schema.STREAMS)}")
    observed = dt.datetime.fromisoformat(at).astimezone(dt.UTC) if at else None
    if role is not None and role not in schema.ROLES:
        raise typer.BadParameter(f"unknown --role {role!r}; choose from {', '.join(schema.ROLES)}")
    from rocescope.pipeline import ledger

    try:
        with open_migrated_store(load_settings()) as store:
            total = 0
            digests = {path: _digest(path, f"table:{table}", (role or "", at or "")) for path in files}
            seen = {} if again else ledger.imported(store, digests.values())
            for path in files:
                if digests[path] in seen:
                    console.print(_already(path, seen[digests[path]]), highlight=False)
                    continue
                data = completed(table, _read_file(path), role, observed)
                renamed = 0
                if table == "counters":
                    data, renamed = canonical_counters(data)
                landed = store.insert(table, pa.Table.from_batches([conform(table, data)]))
                ledger.record(store, f"table:{table}", {digests[path]: (path, landed)})
                total += landed
                note = f" ({renamed} named by their vendor's counter names, renamed)" if renamed else ""
                console.print(f"{path}: {data.num_rows} rows{note}", highlight=False)
    except RocescopeError as exc:
        raise fail(exc) from None
    console.print(f"imported {total} rows into {table}")


def _digest(path: Path, kind: str, options: Sequence[str]) -> str:
    from rocescope.errors import DecodeError
    from rocescope.pipeline.ledger import digest

    try:
        return digest(path, kind, options)
    except OSError as exc:
        raise DecodeError(f"{path}: {exc}") from exc


def _already(path: Path, seen: tuple[str, dt.datetime]) -> str:
    file, when = seen
    return f"{path}: already imported (as {file}, {when:%Y-%m-%d %H:%M} UTC): skipped; --again imports it anyway"


def _ledger(settings: Settings, use: Callable[[Store], T], what: str) -> T | None:
    """`use` on the store, for the import ledger; None, said once, when the store cannot be opened here (a sink
    process owns the embedded store): then a re-imported file is not recognised."""
    try:
        with open_migrated_store(settings) as store:
            return use(store)
    except RocescopeError as exc:
        err_console.print(f"[yellow]import ledger not {what} ({exc}): a file imported before lands again[/yellow]")
        return None


def _read_file(path: Path) -> pa.Table:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

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


def _import_kind(
    kind: ImportKind,
    files: Sequence[Path],
    device: str | None,
    inventory: Path | None,
    kafka_topic: str | None,
    bootstrap: str | None,
    kafka_idle: float,
    at: str | None,
    as_json: bool = False,
    again: bool = False,
    asic: int | None = None,
) -> None:
    """Import recorded device output of one kind through the configured transport; what each file gave is
    said, in rows: landed (of them, left raw: names the catalog does not know) and skipped, by reason. A file
    the import ledger holds (the same bytes, kind and options) is skipped unless `again`."""
    from rocescope.collectors import importers, sonic_dump
    from rocescope.collectors.common.health import NONNUMERIC
    from rocescope.collectors.common.json_text import load_json
    from rocescope.collectors.common.rows import DUPLICATE, CounterRows
    from rocescope.collectors.jobs.placement import Inventory, endpoints_batch, parse_pods
    from rocescope.collectors.lldp.collector import links_batch
    from rocescope.collectors.lldp.parse import parse_lldpcli
    from rocescope.errors import DecodeError
    from rocescope.pipeline import ledger
    from rocescope.pipeline.runner import publishing

    if kafka_topic and kind is not ImportKind.gnmic:
        raise typer.BadParameter("--kafka-topic reads gnmic's Kafka output: use it with --kind gnmic")
    if not files and not kafka_topic:
        raise typer.BadParameter("give files (or --kafka-topic with --kind gnmic)")
    total = 0
    outcomes: list[dict[str, Any]] = []
    say = err_console if as_json else console
    try:
        settings = load_settings()
        when = dt.datetime.fromisoformat(at).astimezone(dt.UTC) if at else dt.datetime.now(dt.UTC)
        inv = Inventory.from_yaml(inventory) if inventory is not None else Inventory()
        options = (device or "", at or "", str(inventory or ""), "" if asic is None else f"asic{asic}")
        digests = {path: _digest(path, kind.value, options) for path in files}
        seen = {} if again or not files else _ledger(settings, lambda s: ledger.imported(s, digests.values()), "read")
        landed: dict[str, tuple[Path, int]] = {}
        try:
            with publishing(settings) as (producer, sink_metrics):

                def publish(batches: Iterable[Batch]) -> tuple[int, int]:
                    """Publish as the batches come; (rows, of them left raw)."""
                    rows = raw = 0
                    for b in batches:
                        if b.num_rows:
                            producer.publish(b)
                        rows, raw = rows + b.num_rows, raw + _raw_rows(b)
                    return rows, raw

                def ship(
                    batches: Iterable[Batch],
                    what: str,
                    bad: int,
                    note: str = "",
                    skipped: Mapping[str, int] | None = None,
                    published: tuple[int, int] = (0, 0),
                ) -> None:
                    nonlocal total
                    rows, raw = publish(batches)
                    rows, raw = rows + published[0], raw + published[1]
                    total += rows
                    why = {"malformed": bad, **{k: v for k, v in (skipped or {}).items() if v}}
                    outcomes.append({"file": what, "landed": rows, "left_raw": raw, "skipped": why})
                    say.print(f"{what}: {rows} rows, {bad} malformed{note}", highlight=False)

                if kafka_topic:
                    servers = (bootstrap or ",".join(settings.kafka.bootstrap_servers)).split(",")
                    rows = CounterRows()
                    bad_msgs = 0
                    for value in importers.kafka_messages(servers, kafka_topic, kafka_idle):
                        try:
                            importers.gnmic_rows(importers.gnmic_documents(value), device or "", rows)
                        except DecodeError:
                            bad_msgs += 1
                    batches = importers.gnmic_batches(rows)
                    note, why = importers.gnmic_note(rows), {NONNUMERIC: rows.nonnumeric, **rows.skipped}
                    ship(batches, f"kafka {kafka_topic}", rows.malformed + bad_msgs, note, why)
                for path in files:
                    d = digests[path]
                    if (seen and d in seen) or d in landed:  # in the store, or given twice here
                        first = (seen or {}).get(d) or (str(landed[d][0]), dt.datetime.now(dt.UTC))
                        say.print(_already(path, first), highlight=False)
                        outcomes.append(
                            {"file": str(path), "landed": 0, "left_raw": 0, "skipped": {"already imported": 1}}
                        )
                        continue
                    before = total
                    name = device or path.name.split(".")[0]
                    if kind is ImportKind.gnmic:  # streamed: a capture may be larger than memory
                        rows = CounterRows()
                        try:
                            with path.open("rb") as f:
                                blocks = iter(partial(f.read, _BLOCK), b"")
                                sent = publish(importers.gnmic_file_batches(blocks, device or "", rows))
                        except OSError as exc:
                            raise DecodeError(f"{path}: {exc}") from exc
                        why = {NONNUMERIC: rows.nonnumeric, **rows.skipped}
                        ship([], str(path), rows.malformed, importers.gnmic_note(rows), why, sent)
                        landed[digests[path]] = (path, total - before)
                        continue
                    try:
                        data = path.read_bytes()
                    except OSError as exc:
                        raise DecodeError(f"{path}: {exc}") from exc
                    if kind is ImportKind.lldpcli:
                        found, bad = parse_lldpcli(data, name)
                        ship([links_batch(found, when, name)] if found else [], str(path), bad)
                    elif kind is ImportKind.kubectl:
                        placed, bad = parse_pods(data, inv, when)
                        ship([endpoints_batch(placed, "kubectl")] if placed else [], str(path), bad)
                    elif kind is ImportKind.slurm:
                        from rocescope.collectors.jobs.slurm import parse_slurm_jobs

                        placed, bad = parse_slurm_jobs(data, inv)
                        ship([endpoints_batch(placed, "slurm")] if placed else [], str(path), bad)
                    elif kind is ImportKind.sonic:
                        doc = load_json(data, str(path))
                        # one device per ASIC of a multi-ASIC switch (a namespace's dump: `COUNTERS_DB.json.0`)
                        switch = sonic_dump.device_name(path, device)
                        ns = sonic_dump.namespace_of(path, doc, switch, asic)
                        name = ns.device if ns else switch
                        rows, links, bad = sonic_dump.sonic_dump(doc, name, when)
                        batches = rows.to_batches("switch", "import") + (
                            [links_batch(links, when, name)] if links else []
                        )
                        # port aliases (SONiC's lldpd advertises them: hosts' LLDP names `etp1`, the counters
                        # `Ethernet0`), back-plane cables and front-panel ports of a multi-ASIC switch
                        for link_source, found in sonic_dump.port_links(doc, name, ns).items():
                            batches += [links_batch(found, when, name, source=link_source)] if found else []
                        why = {NONNUMERIC: rows.nonnumeric, **rows.skipped}  # in values: they add up to the dump's
                        ship(batches, str(path), bad, f", {rows.unknown} objects without a name map", why)
                    elif kind is ImportKind.sonic_monitor:
                        from rocescope.collectors.sonic_monitor import monitor_rows

                        trace = monitor_rows(data.decode("utf-8", "replace"), name)
                        skipped = ", ".join(f"{n} {why}" for why, n in sorted(trace.skipped.items()))
                        note = f", skipped: {skipped}" if skipped else ""
                        batches = trace.rows.to_batches("switch", "import")
                        why = {NONNUMERIC: trace.rows.nonnumeric, **trace.skipped, **trace.rows.skipped}
                        ship(batches, str(path), trace.rows.malformed, note, why)
                    elif kind is ImportKind.nccl_inspector:
                        from rocescope.collectors.nccl.parse import (
                            collectives_batches,
                            drops_batches,
                            parse_inspector,
                        )

                        # Prometheus rows of NCCL 2.30+ carry no time: the dump's, else the file's mtime
                        dumped = int(when.timestamp() * 1e9) if at else path.stat().st_mtime_ns
                        parsed = parse_inspector(data, path.name, dumped)
                        why = {
                            "format version not read": parsed.refused,
                            "not a collective (proxy traces, other metrics)": parsed.unknown,
                            "dropped by Inspector before writing": parsed.writer_dropped,
                            "dump_stats markers (read as drop counts)": parsed.markers,
                        }
                        note = f" ({parsed.problem})" if parsed.refused else ""
                        batches = collectives_batches(parsed.batch) + drops_batches(parsed.drops)
                        ship(batches, str(path), parsed.malformed, note, why)
                    elif kind is ImportKind.snmp:
                        from rocescope.collectors.snmp.walkfile import device_name, parse_walk, walk_rows

                        walk = parse_walk(data.decode("utf-8", "replace"))
                        if not walk.rows and walk.malformed:
                            raise DecodeError(f"{path}: no SNMP walk line could be read (first: {walk.examples[0][1]})")
                        walked = walk_rows(walk, int(when.timestamp() * 1e9))
                        host = device or device_name(walk) or name
                        why = {NONNUMERIC: walked.nonnumeric, "objects not read": walk.unknown_names,
                               "no value": walk.no_value, "value type not read": walk.unread_types,
                               DUPLICATE: walk.repeated, **walked.skipped}  # fmt: skip
                        ship([walked.to_batch(host, "switch", "import")] if len(walked) else [], str(path),
                             walked.malformed, f" (device {host})", why)  # fmt: skip
                    elif kind is ImportKind.pcap:
                        from rocescope.collectors.pcap.collector import PcapCollector
                        from rocescope.collectors.pcap.tshark import PcapFile

                        collector = PcapCollector(device or "import")
                        source = PcapFile(path)
                        try:
                            batches = list(collector.collect(source))
                            # frames that are no RoCEv2 (RoCE v1, TCP...) are counted by reason, as the collector does
                            ship(batches, str(path), collector.malformed, "", dict(collector.skipped))
                        finally:
                            source.close()
                    landed[digests[path]] = (path, total - before)
        finally:  # what landed is noted even when a later file fails the import
            if landed:
                _ledger(settings, lambda s: ledger.record(s, kind.value, landed), "written")
    except (RocescopeError, ValueError) as exc:
        raise fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None
    expired = sink_metrics.value("rocescope_sink_rows_expired_total") if sink_metrics else 0
    if as_json:
        summary = {"kind": kind.value, "landed": total, "expired": expired, "files": outcomes}
        sys.stdout.write(json.dumps(summary) + "\n")
        return
    raw = sum(o["left_raw"] for o in outcomes)
    skips: Counter[str] = Counter()
    for o in outcomes:
        skips.update(o["skipped"])
    reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(skips.items()) if n) or "nothing"
    console.print(
        f"imported {total} rows ({kind.value}), {raw} of them left raw (names the catalog does not know); "
        f"skipped: {reasons}",
        highlight=False,
    )
    if expired:
        err_console.print(
            f"[yellow]{expired:.0f} rows are older than the retention (store.ttl_days={settings.store.ttl_days}) "
            "and were dropped by the store; set store.ttl_days: 0 to keep old data[/yellow]"
        )


def _raw_rows(batch: Batch) -> int:
    """Counter rows a batch keeps under a raw name (`raw:<name>`: the catalog does not know it)."""
    if batch.stream != "counters" or not batch.num_rows:
        return 0
    import pyarrow as pa
    import pyarrow.compute as pc

    names = pc.cast(batch.data.column("metric"), pa.string())
    return int(pc.sum(pc.starts_with(names, "raw:")).as_py() or 0)


def sink(
    seconds: Annotated[
        float | None, typer.Option(help="Stop after this many seconds (default: run until killed).")
    ] = None,
) -> None:
    """Consume the Kafka topics as one consumer group and insert into the store, exactly once."""
    from rocescope.pipeline.kafka import KafkaTransport, check_reachable
    from rocescope.pipeline.metrics import SinkMetrics
    from rocescope.pipeline.sink import Sink

    try:
        settings = load_settings()
        if settings.transport.kind != "kafka":
            raise ConfigError("`rocescope sink` reads Kafka: set transport.kind: kafka")
        check_reachable(settings.kafka)  # before the store: a broker that is not there is said in a second
        with open_migrated_store(settings) as store:
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
            stop = run_until_stopped(seconds)  # a daemon timer: a sink stopped early exits at once
            every = settings.sink.coverage_every_s if settings.sink.metrics_port else 0.0
            next_coverage = time.monotonic() + every
            try:
                while not stop.is_set():
                    worker.step(stop)
                    if every and time.monotonic() >= next_coverage:
                        _record_coverage(store, settings.analysis.window_minutes, metrics)
                        next_coverage = time.monotonic() + every
            except KeyboardInterrupt:
                stop.set()
            worker.flush(stop)
            worker.consumer.close()
    except RocescopeError as exc:
        raise fail(exc) from None
    console.print(f"sink stopped: {worker.status()}")


def _record_coverage(store: Store, window_minutes: float, metrics: SinkMetrics) -> None:
    """`rocescope_coverage` over the last analysis window of what landed. With an embedded store the sink is the one
    process that holds it (`analyze --follow` cannot run beside it), so the sink says what can be judged; between
    two steps of the sink, on its thread. A failure is one log line; the gauges keep their last values."""
    from rocescope.analysis.coverage import coverage_at

    end = dt.datetime.now(dt.UTC)
    try:
        states = coverage_at(store, end - dt.timedelta(minutes=window_minutes), end).labelled()
    except RocescopeError as exc:
        log.warning("coverage for the metrics endpoint failed: %s", exc)
        return
    metrics.record_coverage(states)


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
        settings = load_settings()
        if replicated and not cluster:
            raise ConfigError("--replicated needs --cluster NAME")
        if cluster and not replicated:
            raise ConfigError("--cluster goes with --replicated")
        statements = replicated_ddl(settings, cluster) if replicated and cluster else plain_ddl(settings)
        if kafka_engine:
            statements += kafka_engine_ddl(settings, cluster or "", consumers)
    except (RocescopeError, ValueError) as exc:
        raise fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None
    for statement in statements:
        print(statement.rstrip() + ";\n")
