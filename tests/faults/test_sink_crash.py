"""Issue 8 item 3: `rocescope sink` is SIGKILLed in the middle of a batch and restarted, more than once.

Each kill waits until the sink holds consumed-but-uncommitted rows (its buffered-rows gauge), so it dies
with a batch in hand, or inside the insert of one. The restarted sink replays from the committed offsets;
its recorded intent and the insert's deduplication token make the replay land nothing twice.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rocescope import schema
from rocescope.pipeline.kafka import KafkaTransport
from rocescope.pipeline.store import ChdbStore
from rocescope.testbed.tansu import Broker

from harness import (
    SinkProcess,
    SteadyProducer,
    committed_offsets,
    end_offsets,
    exactly_once_problems,
    landed,
    print_table,
    scaled,
    sink_config,
    wait_for,
    wait_settled,
)

KILLS = int(scaled(2, 10))


@pytest.mark.timeout(scaled(300, 1200))
def test_sink_killed_mid_batch_loses_and_duplicates_nothing(broker: Broker, tmp_path: Path) -> None:
    started = time.monotonic()
    cfg = broker.kafka_config(partitions=3, session_timeout_ms=3000)  # a dead sink leaves the group sooner
    topic = schema.topic("counters")
    KafkaTransport(cfg).ensure_topics(schema.STREAMS)
    data = tmp_path / "chdb"
    config, metrics_port = sink_config(
        tmp_path / "sink.yaml", cfg, {"backend": "chdb", "path": str(data)}, max_rows=30_000, max_seconds=1.0
    )
    sink = SinkProcess(config, metrics_port, tmp_path / "sink.log").start()
    producer = SteadyProducer(cfg, devices=4, rows=512, period_s=0.1).start()  # ~20,000 values/s
    kills: list[list[object]] = []
    try:
        for kill in range(1, KILLS + 1):
            # Die holding a batch, after this incarnation has inserted at least once.
            wait_for(
                "an insert, then rows buffered",
                lambda: (
                    (m := sink.metrics()).get("rocescope_sink_rows_inserted_total", 0) > 0
                    and m.get("rocescope_sink_buffered_rows", 0) > 0
                ),
                120,
                every=0.05,
            )
            m = sink.metrics()
            sink.kill()
            kills.append(
                [kill, f"{m['rocescope_sink_rows_inserted_total']:.0f}", f"{m['rocescope_sink_buffered_rows']:.0f}"]
            )
            sink.start()
        produced = producer.stop()
        ends = end_offsets(cfg, topic)
        wait_settled(
            "the sink's committed offsets",
            lambda: sum(committed_offsets(cfg, "faults", topic).values()),
            sum(ends.values()),
        )
    finally:
        producer.stop(flush_timeout=30)
        sink.stop()
    with ChdbStore(data) as store:
        got = landed(store)
    print_table(
        "sink kills (rows this incarnation had inserted / held when killed)", ["kill", "inserted", "buffered"], kills
    )
    print(
        f"produced={produced.total} kills={KILLS} landed={sum(g['n'] for g in got.values())} "
        f"test_s={time.monotonic() - started:.1f}"
    )
    assert producer.producer.failed == 0 and produced.refused == 0
    assert exactly_once_problems(produced.rows, got) == []
