"""`rocescope broker`: a local Kafka-protocol broker in one command, in memory or kept in a directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from rocescope.config import KafkaConfig
from rocescope.pipeline.kafka import KafkaBatchProducer, KafkaTransport
from rocescope.testbed.tansu import free_port


def start_broker(port: int, data: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocescope.cli", "broker", "--port", str(port), "--data", str(data)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline()  # the one line it prints once it listens


def stop_broker(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0


def read_all(bootstrap: str, topic: str, want: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == want:
            break
    consumer.close()
    return values


def test_a_broker_with_data_keeps_its_topics_and_records_across_restarts(tmp_path: Path) -> None:
    port, data = free_port(), tmp_path / "kafka-data"
    proc, line = start_broker(port, data)
    try:
        assert line.startswith(f"Kafka-protocol broker (Tansu) at 127.0.0.1:{port}, data in {data}"), line
        cfg = KafkaConfig(bootstrap_servers=[f"127.0.0.1:{port}"], partitions=2)
        KafkaTransport(cfg).ensure_topics(["counters"])
        producer = KafkaBatchProducer(cfg)
        sent = [f"record {i}".encode() for i in range(20)]
        for i, value in enumerate(sent):
            producer.publish_raw("rocescope.counters.v1", f"device-{i % 4}".encode(), value)
        producer.flush(30)
        producer.close()
        assert producer.failed == 0
    finally:
        stop_broker(proc)

    proc, line = start_broker(port, data)  # a new process over the same directory
    try:
        assert sorted(read_all(f"127.0.0.1:{port}", "rocescope.counters.v1", len(sent))) == sorted(sent)
    finally:
        stop_broker(proc)


def test_a_busy_port_is_one_clear_line(tmp_path: Path) -> None:
    port = free_port()
    first, _ = start_broker(port, tmp_path / "first")
    try:
        second, _ = start_broker(port, tmp_path / "second")
        assert second.wait(20) == 1
        assert second.stderr is not None
        assert second.stderr.read().strip() == f"error: 127.0.0.1:{port} is already in use (a broker running there?)"
    finally:
        stop_broker(first)
