"""The `rocescope` command, run as users run it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer, TopicPartition
from typer.testing import CliRunner

from rocescope import schema
from rocescope.cli import app
from rocescope.pipeline.kafka import KafkaBatchProducer, KafkaTransport
from rocescope.testbed.tansu import Broker, free_port

from samples import sample_batch, sample_table

SUBCOMMANDS = [
    "collect ebpf",
    "collect gnmi",
    "collect jobs",
    "collect lldp",
    "dashboards build",
    "collect nic",
    "collect pcap",
    "collect snmp",
    "demo",
    "sim list",
    "sim run",
    "collect",
    "serve-http",
    "sink",
    "import",
    "analyze",
    "eval",
    "findings",
    "sql",
    "dashboards",
    "report",
    "sim",
    "migrate",
    "config",
]
runner = CliRunner()


def _config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "rocescope.yaml"
    path.write_text(f"store:\n  path: {tmp_path / 'data'}\n{extra}")
    return path


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_every_subcommand_has_help(sub: str) -> None:
    result = runner.invoke(app, [*sub.split(), "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_config_dump_redacts_secrets(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
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


def test_demo_then_sql_in_every_format(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path))
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


def test_import_checks_the_schema(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path))
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


def test_findings_filters_are_bound_not_pasted(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path))
    result = runner.invoke(app, ["--config", cfg, "findings", "--job", "x' OR 1=1 --", "--kind", "pfc_storm"])
    assert result.exit_code == 0, result.output
    assert "no findings" in result.output


def test_dashboards_is_a_group() -> None:
    result = runner.invoke(app, ["dashboards"])  # issue 6 built it: `dashboards build` (tests/dashboards)
    assert "build" in result.output and "issue 6" not in result.output


def test_demo_analyze_findings_and_eval(tmp_path: Path) -> None:
    cfg = str(_config(tmp_path))
    out = tmp_path / "out"
    args = ["--config", cfg, "demo", "--scenario", "pfc_storm", "--duration", "100s", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "team-a/llm-a: 1 finding(s)" in result.output and "pfc_storm" in result.output  # the demo analyzes
    assert "gpu-005:eth0" in (out / "report.html").read_text()
    assert len(list((out / "grafana" / "dashboards").glob("*.json"))) == 4
    for _ in range(2):  # analyzing the same window again replaces, never duplicates
        result = runner.invoke(app, ["--config", cfg, "analyze", "--from", "10m", "--detector", "pfc_storm"])
        assert result.exit_code == 0, result.output
        assert "1 finding(s)" in result.output and "1 written" in result.output
    result = runner.invoke(app, ["--config", cfg, "findings", "--json", "--job", "team-a/llm-a"])
    (finding,) = json.loads(result.stdout)
    assert finding["kind"] == "pfc_storm" and finding["ports"] == ["gpu-005:eth0", "leaf-r0-01:Ethernet16"]
    assert finding["evidence"]["root"] == "gpu-005:eth0"
    result = runner.invoke(app, ["--config", cfg, "findings", "--kind", "incast"])
    assert "no findings" in result.output
    result = runner.invoke(app, ["--config", cfg, "analyze", "--from", "yesterday-ish"])
    assert result.exit_code == 1 and "not a time or duration" in result.output
    bad = tmp_path / "bad.yaml"
    thresholds = "analysis:\n  detectors:\n    pfc_storm: {min_seconds: -1}\n"
    bad.write_text(f"store:\n  path: {tmp_path / 'data'}\n{thresholds}")
    result = runner.invoke(app, ["--config", str(bad), "analyze"])
    assert result.exit_code == 1 and "analysis.detectors.pfc_storm.min_seconds" in result.output

    result = runner.invoke(app, ["--config", cfg, "eval", "--kind", "pfc_storm", "--seeds", "1", "--baseline", "0"])
    assert result.exit_code == 0, result.output
    assert "pfc_storm seed 1: 1 incident(s), findings: pfc_storm@gpu-005" in result.output


def test_sink_command_against_kafka(tmp_path: Path) -> None:
    """`rocescope sink` as its own process: Kafka in, chdb out, Prometheus metrics on loopback."""
    broker = Broker(tmp_path).start()
    try:
        metrics_port = free_port()
        cfg = _config(
            tmp_path,
            f"transport:\n  kind: kafka\nkafka:\n  bootstrap_servers: ['{broker.bootstrap}']\n"
            f"  partitions: 2\n  session_timeout_ms: 6000\n"
            f"sink:\n  max_seconds: 0.3\n  metrics_port: {metrics_port}\n",
        )
        kafka_cfg = broker.kafka_config(partitions=2)
        KafkaTransport(kafka_cfg).ensure_topics(["counters"])
        producer = KafkaBatchProducer(kafka_cfg)
        for i in range(6):
            producer.publish(sample_batch("counters", 40, seed=i, device=f"leaf-{i}"))
        producer.flush(30)
        producer.close()
        proc = subprocess.Popen(
            [sys.executable, "-m", "rocescope.cli", "--config", str(cfg), "sink", "--seconds", "25"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ},
        )
        landed = 'rocescope_sink_rows_inserted_total{table="counters"} 240.0'
        body = ""
        deadline = time.monotonic() + 25
        while time.monotonic() < deadline and landed not in body:
            time.sleep(0.5)
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
        output = proc.communicate(timeout=60)[0].decode()
        assert proc.returncode == 0, output
        assert landed in body, body[-2000:]
        assert "inserted_rows=240" in output
    finally:
        broker.stop()
    result = runner.invoke(app, ["--config", str(cfg), "sql", "SELECT count() AS n FROM counters", "-f", "csv"])
    assert result.stdout.splitlines()[1] == "240"


PCAPS = Path(__file__).parent / "fixtures" / "realdata" / "03_pcap"


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (scripts/test installs it)")
def test_collect_pcap_lands_packets_and_warns_about_retention(tmp_path: Path) -> None:
    capture = str(PCAPS / "rdma_ib_tutorial_rdma_cm.pcap")
    keep = str(_config(tmp_path, "  ttl_days: 0\n"))
    result = runner.invoke(app, ["--config", keep, "collect", "pcap", capture, "--capture-point", "gpu-001/eth0"])
    assert result.exit_code == 0, result.output
    assert "96 RoCEv2 packets from gpu-001/eth0" in result.output
    result = runner.invoke(app, ["--config", keep, "sql", "SELECT count() AS n FROM packets", "-f", "csv"])
    assert result.stdout.splitlines()[1] == "96"

    default_ttl = tmp_path / "ttl"
    default_ttl.mkdir()
    result = runner.invoke(app, ["--config", str(_config(default_ttl)), "collect", "pcap", capture])
    assert result.exit_code == 0, result.output
    assert "96 packets are older than the retention" in result.output


def test_collect_nic_once_on_a_host_without_rdma(tmp_path: Path) -> None:
    (tmp_path / "sys" / "class" / "infiniband").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    cfg = str(_config(tmp_path))
    result = runner.invoke(app, ["--config", cfg, "collect", "nic", "--once", "--sysfs-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "1 polls of 0 RDMA ports" in result.output


def test_collect_snmp_once_against_snmpd(tmp_path: Path) -> None:
    """Real snmpd on loopback, one dead target; the community comes from the environment."""
    from rocescope.testbed.snmpd import Snmpd, free_udp_port, snmpd_path

    if snmpd_path() is None:
        pytest.skip("Debian's snmpd is not installed (scripts/system-deps installs it as root)")
    agent = Snmpd(tmp_path / "snmpd", communities=("s3cret-community",)).start()
    try:
        targets = tmp_path / "targets.yaml"
        targets.write_text(
            "devices:\n"
            f"  - {{name: lo-agent, host: 127.0.0.1, port: {agent.port}, community: 'env:SNMP_COMMUNITY'}}\n"
            f"  - {{name: nobody, host: 127.0.0.1, port: {free_udp_port()}, timeout_s: 0.3, retries: 0}}\n"
        )
        cfg = str(_config(tmp_path))
        result = runner.invoke(
            app,
            ["--config", cfg, "collect", "snmp", "--targets", str(targets), "--once"],
            env={"SNMP_COMMUNITY": "s3cret-community"},
        )
    finally:
        agent.stop()
    assert result.exit_code == 1, result.output  # one target is down
    assert "lo-agent: up, 1 polls" in result.output
    assert "nobody: DOWN" in result.output
    assert "s3cret-community" not in result.output
    assert re.search(r"counters:\s+\d+ rows", result.output), result.output  # --once prints what it would ship
    assert "rx_bytes" in result.output
    query = "SELECT count() AS n FROM counters WHERE device = 'lo-agent'"
    result = runner.invoke(app, ["--config", cfg, "sql", query, "-f", "csv"])
    assert result.stdout.splitlines()[1] == "0"  # ... and ships nothing


def test_collect_snmp_bad_targets_file(tmp_path: Path) -> None:
    targets = tmp_path / "t.yaml"
    targets.write_text("devices:\n  - {name: x, host: 127.0.0.1, colour: blue}\n")
    result = runner.invoke(app, ["--config", str(_config(tmp_path)), "collect", "snmp", "--targets", str(targets)])
    assert result.exit_code == 1
    assert "devices[0]" in result.output and "colour" in result.output


def test_serve_http_lets_a_clickhouse_client_read_the_embedded_store(tmp_path: Path) -> None:
    import clickhouse_connect

    cfg = _config(tmp_path)
    result = runner.invoke(app, ["--config", str(cfg), "import", str(_links_file(tmp_path)), "--table", "links"])
    assert result.exit_code == 0, result.output
    port = free_port()
    args = ["--config", str(cfg), "serve-http", "--port", str(port), "--seconds", "60"]
    proc = subprocess.Popen([sys.executable, "-m", "rocescope.cli", *args], stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                client = clickhouse_connect.get_client(host="127.0.0.1", port=port, database="rocescope")
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


def _links_file(tmp_path: Path) -> Path:
    path = tmp_path / "links.parquet"
    pq.write_table(sample_table("links", 25), path)
    return path


def test_demo_over_kafka_lands_what_the_embedded_demo_lands(tmp_path: Path, broker: Broker) -> None:
    """`demo --kafka` sends every batch through the broker (a real Kafka-protocol one) and lands them with a
    sink on a thread of the demo's process: the same rows as the in-process transport, and the topics hold them."""
    args = ["demo", "--fast", "--scenario", "incast", "--duration", "75s"]
    counts = {}
    for name, extra in (("inprocess", []), ("kafka", ["--kafka"])):
        run_dir = tmp_path / name
        run_dir.mkdir()
        kafka = f"kafka:\n  bootstrap_servers: ['{broker.bootstrap}']\nsink:\n  max_seconds: 0.3\n"
        cfg = str(_config(run_dir, kafka))
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
