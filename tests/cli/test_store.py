"""`config`, `import`, `sink` and `serve-http`, run as users run them."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.pipeline.batch import Batch, make_batch
from rocescope.pipeline.kafka import KafkaBatchProducer, KafkaTransport
from rocescope.testbed.tansu import Broker, free_port

from samples import sample_batch, sample_table

runner = CliRunner()


def test_config_dump_redacts_secrets(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    cfg = write_config(tmp_path)
    result = runner.invoke(
        app, ["--config", str(cfg), "config", "--dump"], env={"ROCESCOPE_STORE__PASSWORD": "hunter2-secret"}
    )
    assert result.exit_code == 0, result.output
    assert "hunter2-secret" not in result.output
    assert "password: '**********'" in result.output


def test_bad_config_is_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("transport:\n  kind: carrier-pigeon\n")
    result = runner.invoke(app, ["--config", str(cfg), "migrate"])
    assert result.exit_code == 1
    assert "transport.kind: Input should be 'inprocess' or 'kafka'" in result.output


def test_import_checks_the_schema(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    cfg = str(write_config(tmp_path))
    good = tmp_path / "links.parquet"
    pq.write_table(sample_table("links", 25), good)
    result = runner.invoke(app, ["--config", cfg, "import", str(good), "--table", "links"])
    assert result.exit_code == 0, result.output
    assert "imported 25 rows into links" in result.output

    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"device": ["x"], "'; DROP TABLE links; --": [1]}), bad)
    result = runner.invoke(app, ["--config", cfg, "import", str(bad), "--table", "links"])
    assert result.exit_code == 1 and "missing columns" in result.output
    result = runner.invoke(app, ["--config", cfg, "sql", "SELECT count() AS n FROM links", "-f", "csv"])
    assert result.stdout.splitlines()[1] == "25"


def _switch_port_bytes(reads: int) -> Batch:
    """A switch port's transmit bytes read once a second, ending now."""
    now = dt.datetime.now(dt.UTC)
    ts = [now - dt.timedelta(seconds=reads - k) for k in range(reads)]
    return make_batch(
        "counters",
        {"ts": ts, "device": ["leaf-9"] * reads, "role": ["switch"] * reads, "port": ["Ethernet0"] * reads,
         "priority": [-1] * reads, "metric": ["tx_bytes"] * reads, "value": [1e9 * k for k in range(reads)],
         "source": ["gnmi"] * reads, "raw_name": ["SAI_PORT_STAT_IF_OUT_OCTETS"] * reads},
        key="leaf-9",
    )  # fmt: skip


def test_sink_command_against_kafka(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    """`rocescope sink` as its own process: Kafka in, chdb out, Prometheus metrics on loopback, with the coverage of
    what it landed (the one process that holds an embedded store)."""
    broker = Broker(tmp_path).start()
    try:
        metrics_port = free_port()
        cfg = write_config(
            tmp_path,
            f"transport:\n  kind: kafka\nkafka:\n  bootstrap_servers: ['{broker.bootstrap}']\n"
            f"  partitions: 2\n  session_timeout_ms: 6000\n"
            f"sink:\n  max_seconds: 0.3\n  metrics_port: {metrics_port}\n  coverage_every_s: 1\n",
        )
        kafka_cfg = broker.kafka_config(partitions=2)
        KafkaTransport(kafka_cfg).ensure_topics(["counters"])
        producer = KafkaBatchProducer(kafka_cfg)
        for i in range(6):
            producer.publish(sample_batch("counters", 40, seed=i, device=f"leaf-{i}"))
        producer.publish(_switch_port_bytes(reads=20))  # telemetry a coverage map can judge
        producer.flush(30)
        producer.close()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocescope.cli", "--config", str(cfg), "sink", "--seconds", "25"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ},
        )
        landed = 'rocescope_sink_rows_inserted_total{table="counters"} 260.0'
        judged = 'rocescope_coverage{kind="'  # what the landed telemetry can judge, as `analyze --follow` says it
        body = ""
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and not (landed in body and judged in body):
            time.sleep(0.5)
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
        proc.send_signal(signal.SIGTERM)  # landed (or timed out): a stopped sink flushes, commits and says so
        output = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode == 0, output
        assert landed in body and judged in body, body[-2000:]
        assert "inserted_rows=260" in output
    finally:
        broker.stop()
    result = runner.invoke(app, ["--config", str(cfg), "sql", "SELECT count() AS n FROM counters", "-f", "csv"])
    assert result.stdout.splitlines()[1] == "260"


def test_serve_http_lets_a_clickhouse_client_read_the_embedded_store(
    tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    import clickhouse_connect

    cfg = write_config(tmp_path)
    links = tmp_path / "links.parquet"
    pq.write_table(sample_table("links", 25), links)
    result = runner.invoke(app, ["--config", str(cfg), "import", str(links), "--table", "links"])
    assert result.exit_code == 0, result.output
    port = free_port()
    args = ["--config", str(cfg), "serve-http", "--port", str(port), "--seconds", "60"]
    env = {**os.environ, "ROCESCOPE_STORE__PASSWORD": "serve-pw"}  # serve-http wants one (tests/testbed too)
    proc = subprocess.Popen([sys.executable, "-m", "rocescope.cli", *args], stdout=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                client = clickhouse_connect.get_client(
                    host="127.0.0.1", port=port, database="rocescope", password="serve-pw"
                )
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        assert client.query("SELECT count() FROM links").result_rows == [(25,)]
        assert client.query("SELECT {k:String} AS k", parameters={"k": "x' OR 1=1"}).result_rows == [("x' OR 1=1",)]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
