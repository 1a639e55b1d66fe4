"""Issue 8 item 1: the broker is killed (SIGKILL) and restarted twice while producers and the sink run.

Tansu keeps its log on a loopback S3 (moto_server), so a restarted broker has the same topics, data and
committed offsets. Asserted: the producer retried instead of dropping (no failed or refused batch), and
every produced value is in the store exactly once (count, distinct values, min, max and sum per device).

The producer runs with Kafka's idempotence off (`kafka.idempotence: false`). Tansu 0.6.0's idempotence
loses data across a restart: a batch in flight at the kill is retried, the restarted broker answers
DUPLICATE_SEQUENCE_NUMBER (which a producer must take as delivered) yet never logged it. Without
idempotence the same retries are logged twice instead, and the sink drops the second copy by its
`rocescope-id`: the duplicates it dropped are printed (`sink_duplicates`).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rocescope.config import KafkaConfig, SinkConfig
from rocescope.pipeline.kafka import KafkaTransport
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.sink import Sink
from rocescope.pipeline.store import ChdbStore
from rocescope.testbed.tansu import Broker

from harness import (
    SteadyProducer,
    exactly_once_problems,
    landed,
    landed_rows,
    print_table,
    scaled,
    wait_for,
    wait_settled,
)

RESTARTS = 2
DOWN_S = scaled(2, 20)  # how long the broker stays dead each time
RUN_S = scaled(2, 60)  # steady production between faults


@pytest.mark.serial  # restarts against a deadline: alone, not beside another worker
@pytest.mark.timeout(scaled(240, 1200))
def test_broker_killed_twice_mid_stream_store_holds_the_log_exactly_once(
    durable_broker: Broker, tmp_path: Path
) -> None:
    started = time.monotonic()
    cfg = durable_broker.kafka_config(partitions=3, idempotence=False)
    KafkaTransport(cfg).ensure_topics(["counters"])
    with ChdbStore(tmp_path / "chdb") as store:  # closed however the test ends: the next serial test opens its own
        migrate(store, ttl_days=0)
        _restart_twice(durable_broker, cfg, store, started)


def _restart_twice(durable_broker: Broker, cfg: KafkaConfig, store: ChdbStore, started: float) -> None:
    transport = KafkaTransport(cfg)
    sink = Sink(
        transport.consumer("faults-broker", ["counters"]),
        store,
        SinkConfig(max_rows=20_000, max_seconds=0.3, poll_timeout_ms=100, retry_backoff_s=0.2, retry_backoff_max_s=2),
    )
    stop = threading.Event()
    worker = threading.Thread(target=sink.run, kwargs={"stop": stop}, name="sink", daemon=True)
    worker.start()
    producer = SteadyProducer(cfg, devices=6, rows=512, period_s=0.1).start()  # ~30,000 values/s
    timeline: list[list[object]] = []
    try:
        for restart in range(1, RESTARTS + 1):
            before = landed_rows(store)
            wait_for("rows landing", lambda before=before: landed_rows(store) > before, 120)
            time.sleep(RUN_S)
            at_kill = (producer.produced.total, landed_rows(store))
            durable_broker.kill()
            time.sleep(DOWN_S)
            durable_broker.start()
            resumed = wait_for(  # everything produced until the restart landed, and more
                "rows produced after the restart landing",
                lambda n=producer.produced.total: landed_rows(store) > n,
                180,
            )
            timeline.append([restart, at_kill[0], at_kill[1], f"{DOWN_S:.0f}", f"{resumed:.1f}"])
            assert worker.is_alive(), "the sink thread died"
        time.sleep(RUN_S)
        produced = producer.stop()
        wait_settled("rows landed", lambda: landed_rows(store), produced.total)
        time.sleep(1)  # anything extra (a duplicate) would land now
    finally:
        producer.stop(flush_timeout=30)
        stop.set()
        worker.join(60)
        sink.consumer.close()
    got = landed(store)
    print_table(
        "broker restarts (values produced / landed at the kill; seconds down; "
        "seconds from the restart until rows produced after it landed)",
        ["restart", "produced", "landed", "down_s", "resumed_s"],
        timeline,
    )
    print_table(
        "per device after settling",
        ["device", "produced", "in_store", "distinct_in_store"],
        [[d, n, got.get(d, {}).get("n", 0), got.get(d, {}).get("distinct", 0)] for d, n in produced.rows.items()],
    )
    metrics = sink.metrics
    print(
        f"produced={produced.total} batches={produced.batches} refused={produced.refused} "
        f"delivery_failures={producer.producer.failed} landed={landed_rows(store)} "
        f"messages_consumed={metrics.value('rocescope_sink_messages_consumed_total'):.0f} "
        f"sink_duplicates={metrics.value('rocescope_sink_duplicates_total'):.0f} "
        f"insert_errors={metrics.value('rocescope_sink_insert_errors_total'):.0f} "
        f"commit_errors={metrics.value('rocescope_sink_commit_errors_total'):.0f} "
        f"test_s={time.monotonic() - started:.1f}"
    )
    assert producer.producer.failed == 0 and produced.refused == 0, "the producer dropped batches"
    assert exactly_once_problems(produced.rows, got) == []
