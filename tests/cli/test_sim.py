"""`demo`: simulate, land, analyze; then query what landed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer, TopicPartition
from typer.testing import CliRunner

from rocescope import schema
from rocescope.cli import app
from rocescope.testbed.tansu import Broker

runner = CliRunner()
TABLES = ("counters", "links", "endpoints")


@pytest.fixture(scope="module")
def kafka_demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str, Path]]:
    """(config, output, broker address, output folder) of one `demo --kafka --processes` run (incast, 75 s) through
    a broker of its own: the sink and the analysis as processes of their own."""
    folder = tmp_path_factory.mktemp("kafka-demo")
    broker = Broker(folder).start()
    try:
        cfg = folder / "rocescope.yaml"
        kafka = f"kafka:\n  bootstrap_servers: ['{broker.bootstrap}']\nsink:\n  max_seconds: 0.3\n"
        cfg.write_text(f"store:\n  path: {folder / 'data'}\n{kafka}")
        args = ["--config", str(cfg), "demo", "--fast", "--kafka", "--processes", "--scenario", "incast"]
        result = runner.invoke(app, [*args, "--duration", "75s", "--out", str(folder / "out")])
        assert result.exit_code == 0, result.output
        yield str(cfg), result.output, broker.bootstrap, folder / "out"
    finally:
        broker.stop()


def test_demo_then_sql_in_every_format(kafka_demo: tuple[str, str, str, Path], tmp_path: Path) -> None:
    cfg, output, _, _ = kafka_demo
    assert "ground truth" in output and "incast" in output

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


def test_demo_over_kafka_lands_every_row_it_published(kafka_demo: tuple[str, str, str, Path]) -> None:
    """`demo --kafka --processes` sends every batch through the broker (a real Kafka-protocol one, the one
    configured) and lands them with a sink process of its own, then analyzes in another: every row the run
    published is in the store (the counts the demo prints), and the topics hold them."""
    cfg, output, bootstrap, out = kafka_demo
    assert "started a local broker" not in output, "the configured broker was used"
    assert "sink: process" in output and "sink stopped" in (out / "sink.log").read_text()
    assert "finding(s)" in (out / "analyze.log").read_text()
    printed = " ".join(output.split())  # the console wraps long lines
    sent = {t: m.group(1) for t in TABLES if (m := re.search(rf"rows published:[^:]*?\b{t} (\d+)", printed))}
    query = "SELECT " + ", ".join(f"(SELECT count() FROM {t})" for t in TABLES)
    result = runner.invoke(app, ["--config", cfg, "sql", query, "--format", "csv"])
    landed = result.stdout.splitlines()[-1]
    assert landed == ",".join(sent[t] for t in TABLES) and int(sent["counters"]) > 0
    probe = KafkaConsumer(bootstrap_servers=bootstrap)
    topic = schema.topic("counters", "rocescope")
    ends = probe.end_offsets([TopicPartition(topic, p) for p in probe.partitions_for_topic(topic) or ()])
    probe.close()
    assert sum(ends.values()) > 0, "the counters went through the broker"
