"""The embedded default: the in-process bus keeps the Kafka semantics the sink relies on."""

from __future__ import annotations

from pathlib import Path

from rocescope import schema
from rocescope.config import Settings, SinkConfig, StoreConfig
from rocescope.pipeline.batch import encode, headers
from rocescope.pipeline.runner import publishing
from rocescope.pipeline.sink import Sink
from rocescope.pipeline.store import ChdbStore
from rocescope.pipeline.transport import InProcessBus, InProcessProducer

from samples import sample_batch

SINK = SinkConfig(max_seconds=0.1, poll_timeout_ms=50)


def _count(store: ChdbStore, table: str) -> int:
    return int(store.query_arrow(f"SELECT count() FROM {table}").column(0)[0].as_py())


def test_bytes_path_poison_and_resume(store: ChdbStore) -> None:
    bus = InProcessBus()
    producer = InProcessProducer(bus, encode_payload=True)  # serialize as on Kafka
    for i in range(5):
        producer.publish(sample_batch("counters", 20, seed=i, device=f"leaf-{i}"))
    bus.append(schema.topic("counters"), b"x", b"\x00garbage", [])
    Sink(bus.consumer("g", ["counters"]), store, SINK).run(idle_exit_s=0.3)
    assert _count(store, "counters") == 100
    dead = bus.messages(bus.dead_letter_topic)
    assert len(dead) == 1 and dead[0].value == b"\x00garbage"
    assert dict(dead[0].headers)["rocescope-dlq-offset"] == b"5"

    for i in range(3):
        producer.publish(sample_batch("counters", 20, seed=10 + i))
    Sink(bus.consumer("g", ["counters"]), store, SINK).run(idle_exit_s=0.3)
    assert _count(store, "counters") == 160, "a new sink of the group resumes after the committed offset"


def test_failed_commit_rewinds_and_replays_without_duplicates(store: ChdbStore) -> None:
    bus = InProcessBus()
    producer = bus.producer()
    for i in range(4):
        producer.publish(sample_batch("links", 10, seed=i))
    consumer = bus.consumer("g", ["links"])
    sink = Sink(consumer, store, SINK)
    real_commit = consumer.commit
    calls = []

    def flaky_commit(offsets: dict[tuple[str, int], int]) -> None:
        calls.append(offsets)
        if len(calls) == 1:
            raise RuntimeError("coordinator moved")
        real_commit(offsets)

    consumer.commit = flaky_commit  # type: ignore[method-assign]
    sink.run(idle_exit_s=0.3)
    assert len(calls) >= 2
    assert sink.metrics.value("rocescope_sink_commit_errors_total") == 1
    assert _count(store, "links") == 40


def test_embedded_runs_into_the_same_store_all_land(tmp_path: Path) -> None:
    """Each embedded run numbers its bus offsets from 0: a second run with the same message counts must
    not be taken for a replay of the first (its inserts would be dropped as duplicates)."""
    settings = Settings(store=StoreConfig(path=tmp_path / "chdb"))
    for run in range(3):
        with publishing(settings) as (producer, _metrics):
            producer.publish(sample_batch("counters", 100, seed=run))
            producer.publish(sample_batch("links", 7, seed=run))
    with ChdbStore(tmp_path / "chdb") as store:
        rows = store.query_arrow("SELECT (SELECT count() FROM counters) AS c, (SELECT count() FROM links) AS l")
    assert rows.to_pylist() == [{"c": 300, "l": 21}]


def test_a_message_logged_twice_lands_once_even_after_a_restart(store: ChdbStore) -> None:
    bus = InProcessBus()
    topic = schema.topic("counters")
    repeated = [(b"leaf-0", encode(sample_batch("counters", 20, seed=i)), headers()) for i in range(3)]
    for message in (*repeated, repeated[1], repeated[0]):  # two retries logged again, out of order
        bus.append(topic, *message)
    sink = Sink(bus.consumer("g", ["counters"]), store, SINK)
    sink.run(idle_exit_s=0.3)
    assert _count(store, "counters") == 60
    assert sink.metrics.value("rocescope_sink_duplicates_total") == 2

    bus.append(topic, *repeated[2])
    bus.append(topic, b"leaf-1", encode(sample_batch("counters", 20, seed=9)), headers())
    sink = Sink(bus.consumer("g", ["counters"]), store, SINK)
    sink.run(idle_exit_s=0.3)
    assert _count(store, "counters") == 80, "a new sink of the group knows the ids its predecessor took"
    assert sink.metrics.value("rocescope_sink_duplicates_total") == 1
    taken = store.query_arrow("SELECT count() AS n, uniqExact(message_id) AS ids FROM sink_messages FINAL")
    assert taken.to_pylist() == [{"n": 4, "ids": 4}]


def test_an_unexpected_decoding_error_is_dead_lettered_not_fatal(store: ChdbStore) -> None:
    """A message that makes decoding raise something no decoder should (here: an in-process message whose
    batch is not a Batch) is dead-lettered with its error type, and the messages around it land."""
    bus = InProcessBus()
    producer = bus.producer()
    producer.publish(sample_batch("counters", 20, seed=1))
    bus.append(schema.topic("counters"), b"odd", b"", [], object())  # type: ignore[arg-type]
    producer.publish(sample_batch("counters", 20, seed=2))
    sink = Sink(bus.consumer("g", ["counters"]), store, SINK)
    sink.run(idle_exit_s=0.3)
    assert _count(store, "counters") == 40
    (dead,) = bus.messages(bus.dead_letter_topic)
    assert dead.key == b"odd" and sink.metrics.value("rocescope_sink_dead_lettered_total") == 1


def test_landed_payloads_are_released_once_every_group_committed_past_them() -> None:
    """The bus is a log in memory: an embedded collector running for weeks (or an import of a capture larger than
    memory) would hold every batch it ever sent. What every reading group committed past is dropped, as Kafka's
    retention drops it; offsets, keys and what a group has not committed stay."""
    bus = InProcessBus()
    producer = bus.producer()
    for i in range(4):
        producer.publish(sample_batch("counters", 10, seed=i, device=f"leaf-{i}"))
    topic, tp = schema.topic("counters"), (schema.topic("counters"), 0)
    fast, slow = bus.consumer("fast", ["counters"]), bus.consumer("slow", ["counters"])
    assert len(fast.poll(10, 10)) == 4 and len(slow.poll(10, 10)) == 4
    fast.commit({tp: 3})
    slow.commit({tp: 1})
    held = [m.batch is not None for m in bus.messages(topic)]
    assert held == [False, True, True, True]  # only what both groups committed past
    slow.commit({tp: 4})
    msgs = bus.messages(topic)
    assert [m.batch is not None for m in msgs] == [False, False, False, True]
    assert [m.offset for m in msgs] == [0, 1, 2, 3] and all(m.key for m in msgs)
