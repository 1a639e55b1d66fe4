"""The transport seam: producers publish Batches, a consumer group reads them back as Messages.

Two implementations share this interface: Kafka (`rocescope.pipeline.kafka`) and the in-process
bus below, which is the embedded default (the demo, a laptop). The in-process bus keeps Kafka's
semantics that the sink relies on: per-partition offsets, commits per consumer group, and a
dead-letter topic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rocescope import schema
from rocescope.pipeline.batch import Batch, encode, headers

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Message:
    """One transported message. `batch` is set when the transport hands Batches over in memory."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    headers: Sequence[tuple[str, bytes]] = ()
    batch: Batch | None = None


class Producer(Protocol):
    def publish(self, batch: Batch) -> None: ...
    def flush(self, timeout: float | None = None) -> None: ...
    def close(self) -> None: ...


class Consumer(Protocol):
    group_id: str

    def poll(self, timeout_ms: int, max_records: int) -> list[Message]: ...
    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit `offsets`: for each partition, the offset of the next message to read."""

    def lag(self) -> int: ...
    def rewind(self) -> None:
        """Go back to the committed offsets (after a failed commit, so nothing is skipped)."""

    def dead_letter(self, message: Message, reason: str) -> None: ...
    def close(self) -> None: ...


class Transport(Protocol):
    def producer(self) -> Producer: ...
    def consumer(self, group_id: str, streams: Sequence[str]) -> Consumer: ...
    def ensure_topics(self, streams: Sequence[str]) -> None: ...


def stream_of(topic: str) -> str:
    """`rocescope.counters.v1` -> `counters`."""
    parts = topic.split(".")
    if len(parts) < 3 or parts[-2] not in schema.TABLES:
        raise KeyError(f"topic {topic!r} is not a rocescope stream topic")
    return parts[-2]


@dataclass
class _Log:
    messages: list[Message] = field(default_factory=list)
    released: int = 0  # messages before this offset hold no payload any more (every group committed past them)


class InProcessBus:
    """A Kafka-shaped log in memory: one partition per topic, offsets, group commits."""

    def __init__(self, topic_prefix: str = "rocescope", dead_letter_topic: str = "rocescope.deadletter.v1"):
        self.topic_prefix = topic_prefix
        self.dead_letter_topic = dead_letter_topic
        self._logs: dict[str, _Log] = {}
        self._committed: dict[tuple[str, TopicPartition], int] = {}
        self._cond = threading.Condition()

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        hdrs: Sequence[tuple[str, bytes]],
        batch: Batch | None = None,
    ) -> None:
        with self._cond:
            log = self._logs.setdefault(topic, _Log())
            log.messages.append(Message(topic, 0, len(log.messages), key, value, tuple(hdrs), batch))
            self._cond.notify_all()

    def _release(self, tp: TopicPartition) -> None:
        """Drop the payloads every group that reads the topic has committed past (as Kafka's retention would):
        an embedded collector that runs for weeks, or an import of a capture larger than memory, keeps only
        what its sink has not landed. Offsets, keys and headers stay. Call with the condition held."""
        log = self._logs.get(tp[0])
        done = [offset for (_, t), offset in self._committed.items() if t == tp]
        if log is None or not done:
            return
        upto = min(min(done), len(log.messages))
        for i in range(log.released, upto):
            msg = log.messages[i]
            log.messages[i] = Message(msg.topic, msg.partition, msg.offset, msg.key, b"", msg.headers, None)
        log.released = max(log.released, upto)

    def messages(self, topic: str) -> list[Message]:
        with self._cond:
            return list(self._logs.get(topic, _Log()).messages)

    def end_offset(self, topic: str) -> int:
        with self._cond:
            return len(self._logs.get(topic, _Log()).messages)

    # Transport
    def producer(self) -> InProcessProducer:
        return InProcessProducer(self)

    def consumer(self, group_id: str, streams: Sequence[str]) -> InProcessConsumer:
        return InProcessConsumer(self, group_id, [schema.topic(s, self.topic_prefix) for s in streams])

    def ensure_topics(self, streams: Sequence[str]) -> None:
        with self._cond:
            for stream in streams:
                self._logs.setdefault(schema.topic(stream, self.topic_prefix), _Log())


class InProcessProducer:
    """Hands Batches over without serializing; `encode_payload` keeps the bytes path honest in tests."""

    def __init__(self, bus: InProcessBus, encode_payload: bool = False):
        self.bus = bus
        self.encode_payload = encode_payload

    def publish(self, batch: Batch) -> None:
        payload = encode(batch) if self.encode_payload else b""
        self.bus.append(
            schema.topic(batch.stream, self.bus.topic_prefix),
            batch.key.encode(),
            payload,
            headers(with_id=False),
            None if self.encode_payload else batch,
        )

    def flush(self, timeout: float | None = None) -> None:
        return None

    def close(self) -> None:
        return None


class InProcessConsumer:
    def __init__(self, bus: InProcessBus, group_id: str, topics: Sequence[str]):
        self.bus = bus
        self.group_id = group_id
        self.topics = list(topics)
        with bus._cond:
            # a group reads from its committed offset (0 at first), and holds what it has not read (`_release`)
            self._position = {(t, 0): bus._committed.setdefault((group_id, (t, 0)), 0) for t in self.topics}

    def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        deadline = time.monotonic() + timeout_ms / 1000
        with self.bus._cond:
            while True:
                out: list[Message] = []
                for tp, pos in self._position.items():
                    log = self.bus._logs.get(tp[0])
                    if log is None:
                        continue
                    chunk = log.messages[pos : pos + max_records - len(out)]
                    out.extend(chunk)
                    self._position[tp] = pos + len(chunk)
                    if len(out) >= max_records:
                        break
                remaining = deadline - time.monotonic()
                if out or remaining <= 0:
                    return out
                self.bus._cond.wait(remaining)

    def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        with self.bus._cond:
            for tp, offset in offsets.items():
                self.bus._committed[(self.group_id, tp)] = offset
                self.bus._release(tp)

    def rewind(self) -> None:
        with self.bus._cond:
            for tp in self._position:
                self._position[tp] = self.bus._committed.get((self.group_id, tp), 0)

    def lag(self) -> int:
        with self.bus._cond:
            return sum(len(self.bus._logs.get(t, _Log()).messages) - p for (t, _), p in self._position.items())

    def dead_letter(self, message: Message, reason: str) -> None:
        self.bus.append(self.bus.dead_letter_topic, message.key, message.value, dead_letter_headers(message, reason))

    def close(self) -> None:
        return None


def dead_letter_headers(message: Message, reason: str) -> list[tuple[str, bytes]]:
    """Why and where from: enough to find and replay the original message."""
    return [
        ("rocescope-dlq-reason", reason.encode()[:4096]),
        ("rocescope-dlq-topic", message.topic.encode()),
        ("rocescope-dlq-partition", str(message.partition).encode()),
        ("rocescope-dlq-offset", str(message.offset).encode()),
    ]
