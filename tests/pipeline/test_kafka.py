"""Every stream through a real Kafka-protocol broker (Tansu) into a real ClickHouse engine (chdb)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from kafka import KafkaConsumer, TopicPartition

from rocescope import schema
from rocescope.config import KafkaConfig, SinkConfig
from rocescope.pipeline.batch import Batch, encode, headers
from rocescope.pipeline.kafka import KafkaBatchProducer, KafkaTransport
from rocescope.pipeline.sink import Sink
from rocescope.pipeline.store import ChdbStore
from rocescope.testbed.tansu import Broker

from samples import sample_batch

SINK = SinkConfig(max_rows=50_000, max_seconds=0.3, poll_timeout_ms=100)


def _count(store: ChdbStore, table: str) -> int:
    return int(store.query_arrow(f"SELECT count() FROM {table}").column(0)[0].as_py())


def _run_until(sink: Sink, done: callable, timeout: float = 60) -> None:  # type: ignore[valid-type]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sink.step()
        if done():
            sink.flush()
            return
    raise AssertionError(f"timed out; sink status: {sink.status()}")


_LISTS = {"job_ids", "devices", "ports"}


def _plain(table: pa.Table) -> pa.Table:
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(pa.string()))
    return table


def _publish(cfg: KafkaConfig, batches: list[Batch]) -> None:
    producer = KafkaBatchProducer(cfg)
    for batch in batches:
        producer.publish(batch)
    producer.flush(30)
    assert producer.failed == 0
    producer.close()


def test_every_stream_round_trips_exactly(broker: Broker, store: ChdbStore) -> None:
    cfg = broker.kafka_config()
    transport = KafkaTransport(cfg)
    transport.ensure_topics(schema.STREAMS)
    sent: dict[str, list[pa.RecordBatch]] = {s: [] for s in schema.STREAMS}
    batches = []
    for i, stream in enumerate(schema.STREAMS):
        for dev in range(4):
            b = sample_batch(stream, 250 + dev, seed=10 * i + dev, device=f"dev-{dev}")
            batches.append(b)
            sent[stream].append(b.data)
    _publish(cfg, batches)
    sink = Sink(transport.consumer("rt", schema.STREAMS), store, SINK)
    want = {s: sum(b.num_rows for b in sent[s]) for s in schema.STREAMS}
    _run_until(sink, lambda: all(_count(store, s) == want[s] for s in schema.STREAMS))
    for stream in schema.STREAMS:
        spec = schema.TABLES[stream]
        order = ", ".join(spec.column_names)
        got = store.query_arrow(f"SELECT * FROM {stream} ORDER BY {order}")
        expected = _plain(pa.Table.from_batches(sent[stream]))
        expected = expected.sort_by([(c, "ascending") for c in spec.column_names if c not in _LISTS])
        for col in spec.column_names:
            assert got.column(col).to_pylist() == expected.column(col).to_pylist(), f"{stream}.{col}"
    sink.consumer.close()


def test_restart_resumes_from_committed_offsets(broker: Broker, store: ChdbStore) -> None:
    cfg = broker.kafka_config()
    transport = KafkaTransport(cfg)
    transport.ensure_topics(["counters"])
    first = [sample_batch("counters", 100, seed=i, device=f"leaf-{i}") for i in range(10)]
    _publish(cfg, first)
    sink = Sink(transport.consumer("restart", ["counters"]), store, SINK)
    _run_until(sink, lambda: _count(store, "counters") == 1000)
    sink.consumer.close()

    second = [sample_batch("counters", 100, seed=100 + i, device=f"leaf-{i}") for i in range(10)]
    _publish(cfg, second)
    sink = Sink(transport.consumer("restart", ["counters"]), store, SINK)
    _run_until(sink, lambda: _count(store, "counters") >= 2000)
    time.sleep(1)
    sink.step()
    sink.flush()
    assert _count(store, "counters") == 2000
    distinct = store.query_arrow("SELECT count() FROM (SELECT DISTINCT * FROM counters)").column(0)[0].as_py()
    assert distinct == 2000
    sink.consumer.close()


class _CrashAfterInsert(BaseException):  # like process death: nothing in the sink catches it
    pass


def test_crash_between_insert_and_commit_does_not_duplicate(broker: Broker, store: ChdbStore) -> None:
    """The sink dies after its insert landed but before the commit; the next one replays the range."""
    cfg = broker.kafka_config(partitions=1)
    transport = KafkaTransport(cfg)
    transport.ensure_topics(["counters"])
    _publish(cfg, [sample_batch("counters", 50, seed=i, device=f"leaf-{i}") for i in range(8)])

    crashing = Sink(transport.consumer("crash", ["counters"]), store, SINK)

    def die(_offsets: object) -> None:
        raise _CrashAfterInsert

    crashing.consumer.commit = die  # type: ignore[method-assign]
    with pytest.raises(_CrashAfterInsert):
        _run_until(crashing, lambda: _count(store, "counters") == 400)
    assert _count(store, "counters") == 400
    crashing.consumer.close()

    # More data arrives, so the next poll groups messages differently from the crashed attempt.
    _publish(cfg, [sample_batch("counters", 50, seed=100 + i, device=f"leaf-{i}") for i in range(8)])
    resumed = Sink(transport.consumer("crash", ["counters"]), store, SINK)
    _run_until(resumed, lambda: _count(store, "counters") >= 800)
    time.sleep(1)
    resumed.step()
    resumed.flush()
    assert _count(store, "counters") == 800
    resumed.consumer.close()


def test_poisoned_messages_go_to_the_dead_letter_topic(broker: Broker, store: ChdbStore) -> None:
    cfg = broker.kafka_config(partitions=1)
    transport = KafkaTransport(cfg)
    transport.ensure_topics(["counters"])
    producer = KafkaBatchProducer(cfg)
    topic = schema.topic("counters")
    producer.publish(sample_batch("counters", 10, seed=1))
    producer.publish_raw(topic, b"evil", b"not arrow at all")
    stale = encode(sample_batch("links", 5))  # a links batch on the counters topic: wrong columns
    producer.publish_raw(topic, b"stale", stale)
    producer.publish(sample_batch("counters", 10, seed=2))
    producer.flush(30)
    producer.close()

    sink = Sink(transport.consumer("dlq", ["counters"]), store, SINK)
    _run_until(sink, lambda: _count(store, "counters") == 20)
    assert sink.metrics.value("rocescope_sink_dead_lettered_total") == 2
    sink.consumer.close()

    reader = KafkaConsumer(bootstrap_servers=cfg.bootstrap_servers, consumer_timeout_ms=15000)
    reader.assign([TopicPartition(cfg.dead_letter_topic, p) for p in range(cfg.partitions)])
    reader.seek_to_beginning()
    dead = []
    for record in reader:
        dead.append(record)
        if len(dead) == 2:
            break
    reader.close()
    reasons = {r.key: dict(r.headers)["rocescope-dlq-reason"].decode() for r in dead}
    assert "not an Arrow IPC stream" in reasons[b"evil"]
    assert "missing columns" in reasons[b"stale"]
    assert {r.value for r in dead} == {b"not arrow at all", stale}, "the original bytes are kept"


def test_store_outage_keeps_offsets_and_loses_nothing(broker: Broker, store: ChdbStore) -> None:
    """Inserts fail for a while (the table is gone); the sink backs off, then lands every row once."""
    cfg = broker.kafka_config(partitions=2)
    transport = KafkaTransport(cfg)
    transport.ensure_topics(["links"])
    _publish(cfg, [sample_batch("links", 30, seed=i, device=f"leaf-{i}") for i in range(6)])
    ddl = schema.ddl("links", 0, store.database)
    store.command("DROP TABLE links")
    sink = Sink(
        transport.consumer("outage", ["links"]),
        store,
        SinkConfig(max_seconds=0.2, poll_timeout_ms=100, retry_backoff_s=0.1, retry_backoff_max_s=0.4),
    )
    stop = threading.Event()
    worker = threading.Thread(target=lambda: sink.run(stop=stop))
    worker.start()
    deadline = time.monotonic() + 30
    while sink.metrics.value("rocescope_sink_insert_errors_total") < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sink.metrics.value("rocescope_sink_insert_errors_total") >= 3
    store.command(ddl)
    deadline = time.monotonic() + 30
    while _count(store, "links") < 180 and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    worker.join(30)
    assert _count(store, "links") == 180
    sink.consumer.close()


def test_a_retry_the_broker_logged_twice_lands_once(broker: Broker, store: ChdbStore) -> None:
    """What a producer retry does on a broker without working idempotence: the same message (same
    `rocescope-id`) twice in the log. The sink takes it once, in one run and across a sink restart."""
    cfg = broker.kafka_config(partitions=1, idempotence=False)
    transport = KafkaTransport(cfg)
    transport.ensure_topics(["counters"])
    topic = schema.topic("counters")
    first, second = sample_batch("counters", 10, seed=1), sample_batch("counters", 10, seed=2)
    once = (first.key.encode(), encode(first), headers())
    twice = (second.key.encode(), encode(second), headers())
    producer = KafkaBatchProducer(cfg)
    for key, value, hdrs in (once, twice, twice):
        producer.publish_raw(topic, key, value, hdrs)
    producer.flush(30)

    sink = Sink(transport.consumer("retried", ["counters"]), store, SINK)
    _run_until(sink, lambda: sink.metrics.value("rocescope_sink_messages_consumed_total") == 3)
    assert _count(store, "counters") == 20
    assert sink.metrics.value("rocescope_sink_duplicates_total") == 1
    sink.consumer.close()

    producer.publish_raw(topic, *once)  # the retry arrives after the sink restarted: known from sink_messages
    producer.publish(sample_batch("counters", 10, seed=3))
    producer.flush(30)
    producer.close()
    sink = Sink(transport.consumer("retried", ["counters"]), store, SINK)
    _run_until(sink, lambda: sink.metrics.value("rocescope_sink_messages_consumed_total") == 2)
    assert _count(store, "counters") == 30
    assert sink.metrics.value("rocescope_sink_duplicates_total") == 1
    sink.consumer.close()
