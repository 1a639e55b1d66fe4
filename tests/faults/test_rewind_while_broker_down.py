"""A failed offset commit rewinds the consumer to the committed offsets; when the commit failed because the
broker went away, the broker cannot say those offsets either. The rewind must then wait, not raise (it killed
the sink's thread: rows produced after the restart never landed), and nothing may be polled past the committed
offsets before it is done."""

from __future__ import annotations

import time

import pytest

from rocescope import schema
from rocescope.pipeline.kafka import KafkaTransport
from rocescope.testbed.tansu import Broker


@pytest.mark.serial  # kills the shared durable broker
@pytest.mark.timeout(180)
def test_a_rewind_while_the_broker_is_down_waits_and_then_resumes_from_the_committed_offsets(
    durable_broker: Broker,
) -> None:
    cfg = durable_broker.kafka_config(partitions=1, idempotence=False, topic_prefix="rewindprobe")
    transport = KafkaTransport(cfg)
    transport.ensure_topics(["links"])
    topic = schema.topic("links", cfg.topic_prefix)
    producer = transport.producer()
    for i in range(6):
        producer.publish_raw(topic, None, str(i).encode())
    producer.flush(30)
    consumer = transport.consumer("rewind-probe-group", ["links"])
    assert consumer.wait_for_assignment(30)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 6 and time.monotonic() < deadline:
        got += [m.value for m in consumer.poll(500, 100)]
    assert got == [str(i).encode() for i in range(6)]
    consumer.commit({(topic, 0): 2})  # the first two are done; the rest were read but not committed
    durable_broker.kill()
    try:
        consumer.rewind()  # the broker cannot say the committed offsets: no exception, a wait
        assert consumer.poll(200, 100) == []
    finally:
        durable_broker.start()
    again: list[bytes] = []
    deadline = time.monotonic() + 90
    while len(again) < 4 and time.monotonic() < deadline:
        again += [m.value for m in consumer.poll(500, 100)]
    assert again == [str(i).encode() for i in range(2, 6)]  # from the committed offset: nothing skipped
    consumer.close()
    producer.close()
