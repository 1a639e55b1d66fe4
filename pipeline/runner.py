"""Where a collector's Batches go: Kafka, or (the embedded default) an in-process sink into the store.

Collectors only ever see a Producer. In embedded mode this module runs the same Sink that
`rocescope sink` runs, on a thread of the collector's process, reading the in-process bus; so one
command collects and lands data with nothing else running.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from rocescope import schema
from rocescope.config import Settings
from rocescope.errors import StoreError
from rocescope.pipeline.metrics import SinkMetrics
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.sink import Sink
from rocescope.pipeline.store import open_store
from rocescope.pipeline.transport import InProcessBus, Producer


@contextmanager
def publishing(settings: Settings) -> Iterator[tuple[Producer, SinkMetrics | None]]:
    """A producer for the configured transport; on exit everything published has been flushed
    (Kafka) or landed in the store (embedded)."""
    if settings.transport.kind == "kafka":
        from rocescope.pipeline.kafka import KafkaTransport

        transport = KafkaTransport(settings.kafka)
        transport.ensure_topics(schema.STREAMS)
        producer = transport.producer()
        try:
            yield producer, None
        finally:
            producer.flush(60)
            producer.close()
        return
    bus = InProcessBus(settings.kafka.topic_prefix, settings.kafka.dead_letter_topic)
    # The in-process bus lives and dies with this process and numbers its offsets from 0 every time:
    # a group of its own per run keeps this run's intents and deduplication tokens apart from every
    # earlier run's into the same store (a shared group would make ClickHouse drop this run's inserts
    # as duplicates of an earlier run's same offset ranges).
    group = f"{settings.sink.group_id}-embedded-{uuid.uuid4().hex}"
    with open_store(settings.store) as store:
        migrate(store, settings.store.ttl_days, settings.store.rollup_ttl_days)
        sink = Sink(bus.consumer(group, schema.STREAMS), store, settings.sink, ttl_days=settings.store.ttl_days)
        stop = threading.Event()
        worker = threading.Thread(target=sink.run, kwargs={"stop": stop}, name="embedded-sink", daemon=True)
        worker.start()
        try:
            yield bus.producer(), sink.metrics
        finally:
            _drain(sink, worker)
            stop.set()
            worker.join()
            if sink.consumer.lag() or sink.buffered_rows():
                raise StoreError(f"embedded sink stopped before landing everything: {sink.status()}")


def _drain(sink: Sink, worker: threading.Thread) -> None:
    """Wait until the sink has consumed everything published (it flushes on stop), or has died."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and worker.is_alive() and sink.consumer.lag() > 0:
        time.sleep(0.05)
