"""Where a collector's Batches go: Kafka, or (the embedded default) an in-process sink into the store.

Collectors only ever see a Producer. In embedded mode this module runs the same Sink that
`rocescope sink` runs, on a thread of the collector's process, reading the in-process bus; so one
command collects and lands data with nothing else running.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rocescope import schema
from rocescope.config import Settings
from rocescope.errors import StoreError, TransportError
from rocescope.pipeline.metrics import SinkMetrics
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.sink import Sink
from rocescope.pipeline.stamps import StampGuard
from rocescope.pipeline.store import open_store
from rocescope.pipeline.transport import Consumer, InProcessBus, Producer


@contextmanager
def publishing(settings: Settings, guard: bool = False) -> Iterator[tuple[Producer, SinkMetrics | None]]:
    """A producer for the configured transport; on exit everything published has been flushed
    (Kafka) or landed in the store (embedded, or Kafka with `transport.sink_in_process`). With `guard` (live
    collectors, where arrival order is the device's), counter rows stamped no later than their series' previous
    are dropped and counted (`pipeline.stamps`)."""
    with _publishing(settings) as (producer, metrics):
        yield (StampGuard(producer) if guard else producer), metrics


@contextmanager
def _publishing(settings: Settings) -> Iterator[tuple[Producer, SinkMetrics | None]]:
    if settings.transport.kind == "kafka":
        from rocescope.pipeline.kafka import KafkaTransport

        transport = KafkaTransport(settings.kafka)
        transport.ensure_topics(schema.STREAMS)
        if not settings.transport.sink_in_process:
            producer = transport.producer()
            try:
                yield producer, None
            finally:
                producer.flush(60)
                producer.close()
            return
        group = settings.sink.group_id
        consumer = transport.consumer(group, schema.STREAMS)
        if not consumer.wait_for_assignment(30):
            consumer.close()
            raise TransportError(f"the in-process sink got no partitions of {settings.kafka.topic_prefix}.* in 30 s")
        kafka_producer = transport.producer()
        with _sink_thread(settings, consumer) as (sink, worker):
            try:
                yield kafka_producer, sink.metrics
            finally:
                kafka_producer.flush(60)
                kafka_producer.close()
                try:
                    _wait(lambda: transport.unlanded(group, schema.STREAMS) == 0, worker, every_s=0.5)
                finally:
                    transport.close()
        return
    bus = InProcessBus(settings.kafka.topic_prefix, settings.kafka.dead_letter_topic)
    # The in-process bus lives and dies with this process and numbers its offsets from 0 every time:
    # a group of its own per run keeps this run's intents and deduplication tokens apart from every
    # earlier run's into the same store (a shared group would make ClickHouse drop this run's inserts
    # as duplicates of an earlier run's same offset ranges).
    group = f"{settings.sink.group_id}-embedded-{uuid.uuid4().hex}"
    with _sink_thread(settings, bus.consumer(group, schema.STREAMS)) as (sink, worker):
        try:
            yield bus.producer(), sink.metrics
        finally:
            _wait(lambda: sink.consumer.lag() == 0, worker)


@contextmanager
def _sink_thread(settings: Settings, consumer: Consumer) -> Iterator[tuple[Sink, threading.Thread]]:
    """The sink `rocescope sink` runs, on a thread of this process; on exit it has flushed and stopped,
    or a StoreError says what it left unlanded."""
    with open_store(settings.store) as store:
        migrate(store, settings.store.ttl_days, settings.store.rollup_ttl_days)
        sink = Sink(consumer, store, settings.sink, ttl_days=settings.store.ttl_days)
        stop = threading.Event()
        worker = threading.Thread(target=sink.run, kwargs={"stop": stop}, name="in-process-sink", daemon=True)
        worker.start()
        try:
            yield sink, worker
        finally:
            stop.set()
            worker.join()
            left = sink.consumer.lag() or sink.buffered_rows()
            consumer.close()
            if left:
                raise StoreError(f"in-process sink stopped before landing everything: {sink.status()}")


def _wait(done: Callable[[], bool], worker: threading.Thread, every_s: float = 0.05, timeout_s: float = 120) -> None:
    """Wait until `done()` (everything published consumed, or landed), the sink died, or the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and worker.is_alive() and not done():
        time.sleep(every_s)
