"""Scale-out ClickHouse DDL, derived from `rocescope.schema` (the one source of truth).

Three variants, all printed by `rocescope clickhouse ddl`:

- `plain_ddl`: what `rocescope migrate` runs (MergeTree tables, rollups, views), in migration order.
- `replicated_ddl`: the same schema for a cluster: every table becomes `<name>_local` with the
  Replicated* flavour of its engine (ON CLUSTER), plus a Distributed table under the original name,
  so every query, view and insert keeps using the names of `schema.py`. Rows are spread by a hash of
  the first ORDER BY column (`device` for counters, as Kafka partitions by device), so a
  ReplacingMergeTree's duplicates always meet on one shard.
- `kafka_engine_ddl`: ClickHouse consuming the topics itself: one Kafka-engine table per stream
  (format ArrowStream: a message is one Arrow IPC stream, exactly what the collectors publish; the
  topic from `schema.topic`), and a materialized view moving each into its stream table.
"""

from __future__ import annotations

import re

from rocescope import schema
from rocescope.config import Settings
from rocescope.pipeline.migrations import MIGRATIONS, ttl_days_of

#: ZooKeeper/Keeper path of a replicated table; {shard} and {replica} are the server's macros.
ZK_PATH = "/clickhouse/tables/{shard}/{database}/{table}"


def _name(db: str, table: str) -> str:
    return f"`{db}`.`{table}`"


def _on_cluster(cluster: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", cluster):
        raise ValueError(f"cluster name {cluster!r}: want letters, digits, '_', '.', '-'")
    return f" ON CLUSTER `{cluster}`"


def plain_ddl(settings: Settings) -> list[str]:
    """Every statement of every migration a fresh schema runs, in order: the single-node schema (MergeTree)."""
    db, cfg = settings.store.database, settings.store
    statements = [schema.ddl("schema_migrations", 0, db)]
    for mig in MIGRATIONS:
        if mig.fresh:
            statements += mig.statements(db, cfg.ttl_days, cfg.rollup_ttl_days)
    return statements


def kafka_table_name(stream: str) -> str:
    return f"kafka_{stream}"


def kafka_engine_ddl(settings: Settings, cluster: str = "", consumers: int = 1) -> list[str]:
    """A Kafka-engine table per stream plus a materialized view into the stream table.

    The broker list, the consumer group (`sink.group_id` + `-clickhouse`, so it never shares offsets
    with Python sinks) and the topic prefix come from the settings. TLS/SASL for the Kafka engine is
    server configuration (`<kafka>` in config.xml or a named collection), never table DDL, so no
    secret is ever printed here.
    """
    db, kafka = settings.store.database, settings.kafka
    on = _on_cluster(cluster) if cluster else ""
    brokers = ",".join(kafka.bootstrap_servers)
    group = f"{settings.sink.group_id}-clickhouse"
    out = []
    for stream in schema.STREAMS:
        spec = schema.TABLES[stream]
        cols = ",\n    ".join(f"`{c.name}` {c.ch_type}" for c in spec.columns)
        source = _name(db, kafka_table_name(stream))
        out.append(
            f"CREATE TABLE IF NOT EXISTS {source}{on}\n(\n    {cols}\n)\nENGINE = Kafka\nSETTINGS "
            + ",\n    ".join(
                [
                    f"kafka_broker_list = '{_quote(brokers)}'",
                    f"kafka_topic_list = '{_quote(schema.topic(stream, kafka.topic_prefix))}'",
                    f"kafka_group_name = '{_quote(group)}'",
                    "kafka_format = 'ArrowStream'",
                    f"kafka_num_consumers = {int(consumers)}",
                    "kafka_handle_error_mode = 'stream'",
                ]
            )
        )
        names = ", ".join(f"`{c}`" for c in spec.column_names)
        out.append(
            f"CREATE MATERIALIZED VIEW IF NOT EXISTS {_name(db, kafka_table_name(stream) + '_mv')}{on}\n"
            f"TO {_name(db, stream)}\nAS SELECT {names}\nFROM {source}\nWHERE length(_error) = 0"
        )
    return out


def _replicated_engine(engine: str, table: str) -> str:
    """`ReplacingMergeTree(seen_at)` -> `ReplicatedReplacingMergeTree('<zk path>', '{replica}', seen_at)`."""
    m = re.fullmatch(r"(\w*)MergeTree(?:\((.*)\))?", engine)
    if m is None:
        raise ValueError(f"{table}: cannot replicate engine {engine}")
    path = ZK_PATH.replace("{table}", table)
    args = [f"'{path}'", "'{replica}'"] + ([m.group(2)] if m.group(2) else [])
    return f"Replicated{m.group(1)}MergeTree({', '.join(args)})"


def _local(table: str) -> str:
    return f"{table}_local"


def replicated_ddl(settings: Settings, cluster: str) -> list[str]:
    """The schema for a ClickHouse cluster: Replicated* `<table>_local` + Distributed `<table>`, the
    rollup's materialized view on the local tables (each shard rolls up its own rows), and the views."""
    db, cfg = settings.store.database, settings.store
    on = _on_cluster(cluster)
    out = []
    for spec in schema.TABLES.values():
        local = schema.ddl(spec.name, ttl_days_of(spec.name, cfg.ttl_days, cfg.rollup_ttl_days), db)
        local = local.replace(
            f"CREATE TABLE IF NOT EXISTS {_name(db, spec.name)}",
            f"CREATE TABLE IF NOT EXISTS {_name(db, _local(spec.name))}{on}",
            1,
        )
        local = local.replace(
            f"ENGINE = {spec.engine}", "ENGINE = " + _replicated_engine(spec.engine, _local(spec.name)), 1
        )
        # replicated tables deduplicate retried inserts (same insert_deduplication_token) by themselves
        local = local.replace("non_replicated_deduplication_window", "replicated_deduplication_window")
        out.append(local)
        key = f"cityHash64(`{spec.order_by[0]}`)"
        out.append(
            f"CREATE TABLE IF NOT EXISTS {_name(db, spec.name)}{on} AS {_name(db, _local(spec.name))}\n"
            f"ENGINE = Distributed(`{cluster}`, `{db}`, `{_local(spec.name)}`, {key})"
        )
    for mig in (m for m in MIGRATIONS if m.fresh):
        for sql in mig.statements(db, cfg.ttl_days, cfg.rollup_ttl_days):
            if sql.startswith(("CREATE TABLE", "ALTER TABLE")):
                continue  # above: the tables are made from the current schema, with every column it has
            if sql.startswith("CREATE MATERIALIZED VIEW"):
                view, rollup, source = re.findall(r"(?:EXISTS|TO|FROM) `[^`]+`\.`([^`]+)`", sql)[:3]
                sql = (
                    sql.replace(f"{_name(db, view)}", f"{_name(db, view + '_local')}{on}")
                    .replace(f"TO {_name(db, rollup)}", f"TO {_name(db, _local(rollup))}")
                    .replace(f"FROM {_name(db, source)}", f"FROM {_name(db, _local(source))}")
                )
            else:
                sql = re.sub(r"^(CREATE OR REPLACE VIEW `[^`]+`\.`[^`]+`)", rf"\1{on}", sql)
            out.append(sql)
    return out


def _quote(text: str) -> str:
    return text.replace("\\", "\\\\").replace("'", "\\'")
