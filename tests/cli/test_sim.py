"""`demo`: simulate, land, analyze; then query what landed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
from kafka import KafkaConsumer, TopicPartition
from typer.testing import CliRunner

from rocescope import schema
from rocescope.cli import app
from rocescope.testbed.tansu import Broker

runner = CliRunner()


def test_demo_then_sql_in_every_format(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    cfg = str(write_config(tmp_path))
    result = runner.invoke(app, ["--config", cfg, "demo", "--fast", "--scenario", "incast", "--duration", "75s"])
    assert result.exit_code == 0, result.output
    assert "ground truth" in result.output and "incast" in result.output

    query = (
        "SELECT device, countIf(rate > 0) > 0 AS sent FROM port_rates "
        "WHERE metric = 'cnp_sent' AND device = {d:String} GROUP BY device"
    )
    result = runner.invoke(app, ["--config", cfg, "sql", query, "-p", "d=gpu-016", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ['"device","sent"', '"gpu-016",1'], "the incast receiver sends CNPs"
    result = runner.invoke(app, ["--config", cfg, "sql", "SELECT kind FROM incidents", "--format", "csv"])
    assert result.stdout.splitlines() == ['"kind"', '"incast"']

    result = runner.invoke(app, ["--config", cfg, "sql", "SELECT metric, kind FROM metric_catalog", "-f", "json"])
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {"metric": "pfc_rx_pause", "kind": "counter"} in rows

    out = tmp_path / "rates.parquet"
    result = runner.invoke(app, ["--config", cfg, "sql", "SELECT * FROM port_rates", "-f", "parquet", "-o", str(out)])
    assert result.exit_code == 0, result.output
    rates = pq.read_table(out)
    assert rates.num_rows > 0 and min(rates.column("rate").to_pylist()) >= 0

    result = runner.invoke(app, ["--config", cfg, "sql", "SELECT nope FROM counters"])
    assert result.exit_code == 1 and "UNKNOWN_IDENTIFIER" in result.output


def test_demo_over_kafka_lands_what_the_embedded_demo_lands(
    tmp_path: Path, broker: Broker, write_config: Callable[..., Path]
) -> None:
    """`demo --kafka` sends every batch through the broker (a real Kafka-protocol one) and lands them with a
    sink on a thread of the demo's process: the same rows as the in-process transport, and the topics hold them."""
    args = ["demo", "--fast", "--scenario", "incast", "--duration", "75s"]
    counts = {}
    for name, extra in (("inprocess", []), ("kafka", ["--kafka"])):
        run_dir = tmp_path / name
        run_dir.mkdir()
        kafka = f"kafka:\n  bootstrap_servers: ['{broker.bootstrap}']\nsink:\n  max_seconds: 0.3\n"
        cfg = str(write_config(run_dir, kafka))
        result = runner.invoke(app, ["--config", cfg, *args, *extra, "--out", str(run_dir / "out")])
        assert result.exit_code == 0, result.output
        assert "incast" in result.output
        query = "SELECT (SELECT count() FROM counters), (SELECT count() FROM links), (SELECT count() FROM endpoints)"
        result = runner.invoke(app, ["--config", cfg, "sql", query, "--format", "csv"])
        counts[name] = result.stdout.splitlines()[-1]
    assert counts["kafka"] == counts["inprocess"] and int(counts["kafka"].split(",")[0]) > 0
    probe = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    topic = schema.topic("counters", "rocescope")
    ends = probe.end_offsets([TopicPartition(topic, p) for p in probe.partitions_for_topic(topic) or ()])
    probe.close()
    assert sum(ends.values()) > 0, "the counters went through the broker"
