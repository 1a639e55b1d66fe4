"""`rocescope clickhouse ddl`: the plain variant runs on embedded chdb and gives exactly the migrated
schema; the Kafka-engine and replicated variants parse (ClickHouse's own parser, `formatQuery`), carry
every column of `schema.py`, and the Kafka-engine tables really consume what the collectors publish
(chdb's Kafka engine reading a Tansu broker)."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from rocescope import schema
from rocescope.cli import app
from rocescope.config import Settings, StoreConfig
from rocescope.pipeline.kafka_engine import kafka_engine_ddl, plain_ddl, replicated_ddl
from rocescope.pipeline.store import ChdbStore

runner = CliRunner()


def _statements(text: str) -> list[str]:
    return [s.strip() for s in text.split(";\n") if s.strip()]


def _parses(store: ChdbStore, sql: str) -> str:
    """ClickHouse's parser, without executing: formatQuery raises on a syntax error."""
    literal = sql.replace("\\", "\\\\").replace("'", "\\'")  # our own DDL, not user input
    out = store.query_arrow(f"SELECT formatQuery('{literal}') AS f")
    return str(out.column("f")[0].as_py())


def _cli(*args: str) -> list[str]:
    res = runner.invoke(app, ["clickhouse", "ddl", *args])
    assert res.exit_code == 0, res.output
    return _statements(res.output)


def test_plain_ddl_runs_on_chdb_and_equals_migrate(store: ChdbStore) -> None:
    assert _cli() == [s.strip() for s in plain_ddl(Settings())]
    fresh = Settings(store=StoreConfig(database="fresh"))
    store.command("CREATE DATABASE IF NOT EXISTS fresh")
    for sql in plain_ddl(fresh):
        store.command(sql)
    # the same tables, engines, columns and views as `migrate` made in `rocescope` (one chdb per process)
    q = (
        "SELECT name, engine, engine_full, replaceAll(as_select, {db:String} || '.', '') AS sel, "
        "(SELECT groupArray((c.name, c.type, c.comment, c.compression_codec)) FROM system.columns AS c "
        " WHERE c.database = {db:String} AND c.table = t.name) AS cols "
        "FROM system.tables AS t WHERE database = {db:String} AND name != 'schema_migrations' ORDER BY name"
    )
    want = store.query_arrow(q, {"db": "rocescope"}).to_pylist()
    assert len(want) >= len(schema.TABLES) + 2
    assert store.query_arrow(q, {"db": "fresh"}).to_pylist() == want


def test_kafka_engine_ddl_parses_and_covers_every_stream(store: ChdbStore) -> None:
    settings = Settings()
    settings.kafka.bootstrap_servers = ["k1:9093", "k2:9093"]
    settings.kafka.topic_prefix = "prod"
    statements = kafka_engine_ddl(settings)
    assert len(statements) == 2 * len(schema.STREAMS)
    for stream, (table, view) in zip(schema.STREAMS, zip(statements[::2], statements[1::2], strict=True), strict=True):
        formatted = _parses(store, table)
        _parses(store, view)
        assert f"kafka_topic_list = '{schema.topic(stream, 'prod')}'" in formatted
        assert "kafka_broker_list = 'k1:9093,k2:9093'" in formatted
        assert "kafka_format = 'ArrowStream'" in formatted
        for col in schema.TABLES[stream].columns:
            assert f"`{col.name}` {col.ch_type}" in table
        assert f"TO `rocescope`.`{stream}`" in view


def test_replicated_ddl_parses_and_keeps_table_names(store: ChdbStore) -> None:
    statements = _cli("--replicated", "--cluster", "fabric", "--kafka-engine")
    for sql in statements:
        assert "ON CLUSTER fabric" in _parses(store, sql)
    text = "\n".join(statements)
    for name, spec in schema.TABLES.items():
        assert f"CREATE TABLE IF NOT EXISTS `rocescope`.`{name}_local` ON CLUSTER `fabric`" in text
        assert re.search(rf"`rocescope`\.`{name}` ON CLUSTER `fabric` AS `rocescope`\.`{name}_local`", text)
        assert f"ENGINE = Distributed(`fabric`, `rocescope`, `{name}_local`, cityHash64(`{spec.order_by[0]}`))" in text
    zk = "'/clickhouse/tables/{shard}/{database}/links_local', '{replica}'"
    assert f"ReplicatedReplacingMergeTree({zk}, seen_at)" in text
    assert "ReplicatedAggregatingMergeTree(" in text
    assert "non_replicated_deduplication_window" not in text
    # the rollup reads and writes the shard's local tables; the Kafka views write through Distributed
    assert "TO `rocescope`.`counters_1m_local`" in text and "FROM `rocescope`.`counters_local`" in text
    assert "TO `rocescope`.`counters`\n" in text


def test_cli_refuses_half_cluster_options() -> None:
    assert runner.invoke(app, ["clickhouse", "ddl", "--replicated"]).exit_code != 0
    assert runner.invoke(app, ["clickhouse", "ddl", "--cluster", "x"]).exit_code != 0
    with pytest.raises(ValueError):
        replicated_ddl(Settings(), "bad name'")
