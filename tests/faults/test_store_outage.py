"""Issue 8 item 2: the ClickHouse endpoint the sink writes to goes away and comes back.

The store is the real ClickHouse engine (chdb) served over ClickHouse's HTTP interface by
`rocescope serve-http` in its own process; the sink uses the server backend (clickhouse-connect).
That process is SIGKILLed mid-stream (an insert may be in flight), stays down, and is restarted on the
same port and directory. The sink must back off, keep its offsets uncommitted while down, resume, and
the table must end with exactly the produced rows: a retried insert is dropped by its deduplication token.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocescope import schema
from rocescope.config import SinkConfig, StoreConfig
from rocescope.pipeline.batch import concat, decode, encode
from rocescope.pipeline.kafka import KafkaTransport
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.sink import Sink
from rocescope.pipeline.store import ClickHouseStore
from rocescope.testbed.tansu import Broker, free_port

from harness import (
    ROCESCOPE,
    SteadyProducer,
    committed_offsets,
    counters_batch,
    exactly_once_problems,
    landed,
    landed_rows,
    print_table,
    scaled,
    wait_for,
    wait_port,
    wait_settled,
    write_config,
)

OUTAGE_S = scaled(10, 60)
GROUP = "faults-store"
PASSWORD = "faults-store-pw"  # serve-http wants a password, and --allow-writes for the sink's inserts


class ServedEngine:
    """`rocescope serve-http`: embedded chdb at a directory behind ClickHouse's HTTP interface, own process."""

    def __init__(self, tmp: Path):
        self.port = free_port()
        self.config = write_config(
            tmp / "serve.yaml",
            store={"backend": "chdb", "path": str(tmp / "engine"), "ttl_days": 0, "password": PASSWORD},
        )
        self.log_path = tmp / "serve-http.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServedEngine:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [ROCESCOPE, "--config", str(self.config), "serve-http", "--port", str(self.port), "--allow-writes"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_port(self.port, timeout=120)
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ServedEngine]:
    served = ServedEngine(tmp_path).start()
    yield served
    served.stop()


@pytest.mark.timeout(scaled(240, 600))
def test_store_down_then_back_lands_exactly_the_produced_rows(broker: Broker, engine: ServedEngine) -> None:
    started = time.monotonic()
    cfg = broker.kafka_config(partitions=3)
    topic = schema.topic("counters")
    transport = KafkaTransport(cfg)
    transport.ensure_topics(["counters"])
    client = ClickHouseStore(StoreConfig(backend="clickhouse", url=engine.url, password=PASSWORD))
    sink = Sink(
        transport.consumer(GROUP, ["counters"]),
        client,
        SinkConfig(max_rows=20_000, max_seconds=0.3, poll_timeout_ms=100, retry_backoff_s=0.2, retry_backoff_max_s=4),
    )
    stop = threading.Event()
    worker = threading.Thread(target=sink.run, kwargs={"stop": stop}, name="sink", daemon=True)
    worker.start()
    producer = SteadyProducer(cfg, devices=4, rows=512, period_s=0.1).start()  # ~20,000 values/s
    try:
        wait_for("rows landing", lambda: landed_rows(client) > 20_000, 120)
        wait_for("a commit", lambda: sum(committed_offsets(cfg, GROUP, topic).values()) > 0, 60, every=0.5)
        engine.kill()
        down_at = time.monotonic()
        wait_for("a failed insert", lambda: sink.metrics.value("rocescope_sink_insert_errors_total") > 0, 60)
        committed_down = committed_offsets(cfg, GROUP, topic)
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        committed_end = committed_offsets(cfg, GROUP, topic)
        errors_down = sink.metrics.value("rocescope_sink_insert_errors_total")
        buffered_down = sink.buffered_rows()
        produced_down = producer.produced.total
        engine.start()
        back_at = time.monotonic()
        wait_for("rows landing after the outage", lambda: landed_rows(client) > 0 and sink.buffered_rows() == 0, 120)
        resumed_s = time.monotonic() - back_at
        produced = producer.stop()
        wait_settled(f"rows landed (sink: {sink.status()})", lambda: landed_rows(client), produced.total)
        time.sleep(1)  # a duplicate would land now
    finally:
        producer.stop(flush_timeout=30)
        stop.set()
        worker.join(60)
        sink.consumer.close()
    got = landed(client)
    outage = time.monotonic()
    print_table(
        "store outage",
        ["down_s", "insert_errors", "rows_buffered_while_down", "produced_while_down", "resumed_s"],
        [[f"{back_at - down_at:.1f}", f"{errors_down:.0f}", buffered_down, produced_down, f"{resumed_s:.1f}"]],
    )
    print(
        f"committed offsets at the first failure {committed_down} and before the restart {committed_end}; "
        f"produced={produced.total} landed={landed_rows(client)} test_s={outage - started:.1f}"
    )
    client.close()
    assert committed_down == committed_end, "offsets were committed while the store was down"
    assert errors_down >= 2, "the sink did not retry while the store was down"
    assert producer.producer.failed == 0 and produced.refused == 0
    assert exactly_once_problems(produced.rows, got) == []


def test_server_backend_inserts_batches_of_many_messages(served: Any) -> None:  # tests/conftest.py's ServedStore
    """A flush joins batches decoded from separate messages, each with its own dictionaries (found by the
    outage test: clickhouse-connect's Arrow IPC file refused them and killed the sink thread)."""
    migrate(served.client, ttl_days=0)
    messages = [decode("counters", encode(counters_batch(f"leaf-{i}", 0, 100, 10**18))) for i in range(3)]
    table = concat("counters", [m.data for m in messages])
    assert served.client.insert("counters", table, dedup_token="faults:many-messages") == 300
    assert exactly_once_problems({f"leaf-{i}": 100 for i in range(3)}, landed(served.client)) == []


def test_deduplication_token_survives_an_engine_kill(engine: ServedEngine) -> None:
    """The case the outage test can hit only by chance: the insert landed, the engine died before the sink
    heard so, and the retry (same rows, same token) reaches the restarted engine. It must land nothing."""
    rows = concat("counters", [counters_batch("leaf-00", 0, 1000, 10**18).data])
    token = "faults:rocescope.counters.v1:0:0-9"
    client = ClickHouseStore(StoreConfig(backend="clickhouse", url=engine.url, password=PASSWORD))
    try:
        client.insert("counters", rows, dedup_token=token)
        engine.kill()
        engine.start()
        client.insert("counters", rows, dedup_token=token)  # the retry
        retried = landed(client)
        client.insert("counters", rows, dedup_token=token + "-other")  # a different range is not dropped
        other = landed_rows(client)
    finally:
        client.close()
    print(f"after the retry: {retried}; with another token: {other} rows")
    assert exactly_once_problems({"leaf-00": 1000}, retried) == []
    assert other == 2000
