"""Kafka transport (kafka-python): one message = one Arrow IPC stream, keyed by device.

Partitioning by device keeps one device's samples in order, and lets many sink replicas share
the work as one consumer group. Offsets are committed by the sink only after its insert landed.

Every client is made after `check_reachable`: a broker nobody listens at is one TransportError in
seconds naming the address, the setting and `rocescope broker`, not kafka-python's 30 s of retries.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, TopicAlreadyExistsError
from kafka.structs import OffsetAndMetadata

from rocescope import schema
from rocescope.config import KafkaConfig
from rocescope.errors import TransportError
from rocescope.pipeline.batch import Batch, encode, headers
from rocescope.pipeline.transport import Message, dead_letter_headers
from rocescope.pipeline.transport import TopicPartition as TP

log = logging.getLogger(__name__)
#: how long a rewind asks the broker for the committed offsets before `poll` tries again
REWIND_ASK_MS = 1000

SETTING = "kafka.bootstrap_servers (ROCESCOPE_KAFKA__BOOTSTRAP_SERVERS)"


def check_reachable(cfg: KafkaConfig, timeout_s: float = 4.0) -> None:
    """Return once any bootstrap server accepts a TCP connection; else raise one TransportError line.

    All servers are tried at once, so an unreachable list costs `timeout_s` at most."""
    servers = list(cfg.bootstrap_servers)

    def attempt(server: str) -> str | None:
        host, _, port = server.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
        except (OSError, ValueError) as exc:
            return _reason(exc)
        return None

    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        reasons = list(pool.map(attempt, servers))
    if any(reason is None for reason in reasons):
        return
    why = "; ".join(sorted(set(r for r in reasons if r)))
    raise TransportError(
        f"cannot reach Kafka at {','.join(servers)} ({why}): start a local broker with `rocescope broker`, "
        f"or point {SETTING} at yours"
    )


def _reason(exc: Exception) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, TimeoutError):
        return "no answer"
    if isinstance(exc, socket.gaierror):
        return "unknown host"
    return getattr(exc, "strerror", None) or str(exc)


def unreachable(cfg: KafkaConfig, exc: KafkaError) -> TransportError:
    """A broker that accepted the connection but not the client (wrong protocol, TLS, SASL)."""
    return TransportError(f"cannot use Kafka at {','.join(cfg.bootstrap_servers)}: {exc}; check {SETTING}")


def client_options(cfg: KafkaConfig) -> dict[str, Any]:
    """Connection and security options shared by producer, consumer and admin client."""
    opts: dict[str, Any] = {
        "bootstrap_servers": cfg.bootstrap_servers,
        "security_protocol": cfg.security_protocol,
    }
    if cfg.sasl_mechanism:
        opts["sasl_mechanism"] = cfg.sasl_mechanism
        opts["sasl_plain_username"] = cfg.sasl_username
        opts["sasl_plain_password"] = cfg.sasl_password.get_secret_value() if cfg.sasl_password else None
    for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
        value = getattr(cfg, key)
        if value is not None:
            opts[key] = str(value)
    return opts


class KafkaTransport:
    def __init__(self, cfg: KafkaConfig):
        self.cfg = cfg
        self._probes: dict[str, KafkaConsumer] = {}

    def ensure_topics(self, streams: Sequence[str]) -> None:
        """Create the stream topics and the dead-letter topic where missing."""
        wanted = [schema.topic(s, self.cfg.topic_prefix) for s in streams] + [self.cfg.dead_letter_topic]
        check_reachable(self.cfg)
        try:
            admin = KafkaAdminClient(**client_options(self.cfg))
        except KafkaError as exc:
            raise unreachable(self.cfg, exc) from exc
        try:
            existing = set(admin.list_topics())
            missing = [t for t in wanted if t not in existing]
            if missing:
                spec = {
                    t: {
                        "num_partitions": self.cfg.partitions,
                        "replication_factor": self.cfg.replication_factor,
                    }
                    for t in missing
                }
                try:
                    admin.create_topics(spec, wait_for_metadata=True)
                    log.info("created topics %s", ", ".join(missing))
                except TopicAlreadyExistsError:
                    pass
        finally:
            admin.close()

    def producer(self) -> KafkaBatchProducer:
        return KafkaBatchProducer(self.cfg)

    def unlanded(self, group_id: str, streams: Sequence[str]) -> int:
        """Messages on the stream topics beyond what `group_id` has committed (a sink commits only after
        its insert landed), asked of the broker directly: a consumer's own highwater can be stale."""
        probe = self._probes.get(group_id)
        if probe is None:  # one per group, kept: a caller asks every fraction of a second while a sink drains
            check_reachable(self.cfg)
            try:
                probe = KafkaConsumer(**client_options(self.cfg), group_id=group_id, enable_auto_commit=False)
            except KafkaError as exc:
                raise unreachable(self.cfg, exc) from exc
            self._probes[group_id] = probe
        try:
            parts = [
                TopicPartition(topic, p)
                for topic in (schema.topic(s, self.cfg.topic_prefix) for s in streams)
                for p in sorted(probe.partitions_for_topic(topic) or ())
            ]
            ends = probe.end_offsets(parts)
            return sum(max(0, int(ends[tp]) - int(probe.committed(tp) or 0)) for tp in parts)
        except KafkaError as exc:
            raise TransportError(f"Kafka at {self.cfg.bootstrap_servers}: {exc}") from exc

    def close(self) -> None:
        """Close what `unlanded` kept open."""
        for probe in self._probes.values():
            probe.close(autocommit=False)
        self._probes.clear()

    def consumer(self, group_id: str, streams: Sequence[str]) -> KafkaBatchConsumer:
        return KafkaBatchConsumer(self.cfg, group_id, [schema.topic(s, self.cfg.topic_prefix) for s in streams])


class KafkaBatchProducer:
    """Publishes Batches; failures after kafka-python's own retries are counted, logged once each."""

    def __init__(self, cfg: KafkaConfig, on_error: Callable[[Exception], None] | None = None):
        self.cfg = cfg
        self.failed = 0
        self.sent = 0
        self._on_error = on_error
        check_reachable(cfg)
        try:
            self._producer = KafkaProducer(
                **client_options(cfg),
                acks="all",
                enable_idempotence=cfg.idempotence,
                compression_type=None if cfg.compression == "none" else cfg.compression,
                linger_ms=cfg.linger_ms,
                batch_size=cfg.batch_size,
                max_request_size=cfg.max_request_size,
            )
        except KafkaError as exc:
            raise unreachable(cfg, exc) from exc

    def publish(self, batch: Batch) -> None:
        self.publish_raw(
            schema.topic(batch.stream, self.cfg.topic_prefix), batch.key.encode(), encode(batch), headers()
        )

    def publish_raw(self, topic: str, key: bytes | None, value: bytes, hdrs: Sequence[tuple[str, bytes]] = ()) -> None:
        try:
            future = self._producer.send(topic, value=value, key=key, headers=list(hdrs))
        except KafkaError as exc:
            self._failed(exc)
            raise TransportError(f"publish to {topic} failed: {exc}") from exc
        future.add_errback(self._failed)
        self.sent += 1

    def _failed(self, exc: Exception) -> None:
        self.failed += 1
        log.error("kafka delivery failed: %s", exc)
        if self._on_error:
            self._on_error(exc)

    def flush(self, timeout: float | None = None) -> None:
        self._producer.flush(timeout=timeout)

    def close(self) -> None:
        self._producer.close()


class KafkaBatchConsumer:
    """Manual-commit consumer of the stream topics for one consumer group."""

    def __init__(self, cfg: KafkaConfig, group_id: str, topics: Sequence[str]):
        self.cfg = cfg
        self.group_id = group_id
        self.topics = list(topics)
        check_reachable(cfg)
        try:
            self._consumer = KafkaConsumer(
                *self.topics,
                **client_options(cfg),
                group_id=group_id,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=cfg.session_timeout_ms,
                heartbeat_interval_ms=max(1000, cfg.session_timeout_ms // 4),
                max_partition_fetch_bytes=cfg.max_request_size,
                fetch_max_bytes=4 * cfg.max_request_size,
            )
        except KafkaError as exc:
            raise unreachable(cfg, exc) from exc
        self._dlq: KafkaBatchProducer | None = None
        self._pending: list[Message] = []
        self._rewind_due = False  # a rewind the broker could not answer yet: nothing is polled before it
        self._rewind_waiting = False

    def poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        if self._rewind_due and not self._rewound():
            time.sleep(min(timeout_ms, 1000) / 1000)
            return []
        if self._pending:
            out, self._pending = self._pending, []
            return out
        return self._poll(timeout_ms, max_records)

    def _poll(self, timeout_ms: int, max_records: int) -> list[Message]:
        records = self._consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        out = []
        for tp, recs in records.items():
            for r in recs:
                hdrs = tuple((k, v) for k, v in (r.headers or []))
                out.append(Message(tp.topic, tp.partition, r.offset, r.key, r.value, hdrs))
        return out

    def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit, or raise within a session timeout (kafka-python waits for ever for a broker that is gone)."""
        self._consumer.commit(
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()},
            timeout_ms=self.cfg.session_timeout_ms,
        )

    def lag(self) -> int:
        total = 0
        for tp in self._consumer.assignment():
            high = self._consumer.highwater(tp)
            if high is not None:
                total += max(0, high - self._consumer.position(tp))
        return total

    def wait_for_assignment(self, timeout_s: float) -> bool:
        """Join the group before the clock starts (benchmarks, tests); False if nothing was assigned."""
        deadline = time.monotonic() + timeout_s
        while not self._consumer.assignment() and time.monotonic() < deadline:
            self._pending.extend(self._poll(100, 1))
        return bool(self._consumer.assignment())

    def rewind(self) -> None:
        """Back to the committed offsets. The broker says what they are: while it cannot (the commit failed
        because it went away), the rewind waits and `poll` returns nothing, so no uncommitted message is
        skipped and the caller keeps running."""
        self._pending.clear()
        self._rewind_due = True
        self._rewound()

    def _rewound(self) -> bool:
        try:
            for tp in self._consumer.assignment():
                committed = self._consumer.committed(tp, timeout_ms=REWIND_ASK_MS)
                if committed is None:
                    self._consumer.seek_to_beginning(tp)
                else:
                    self._consumer.seek(tp, committed)
        except KafkaError as exc:
            if not self._rewind_waiting:  # one line per outage, not one per poll
                log.warning("kafka: cannot rewind to the committed offsets yet (%s); polling waits until it can", exc)
            self._rewind_waiting = True
            return False
        if self._rewind_waiting:
            log.warning("kafka: rewound to the committed offsets; polling again")
        self._rewind_due = self._rewind_waiting = False
        return True

    def dead_letter(self, message: Message, reason: str) -> None:
        if self._dlq is None:
            self._dlq = KafkaBatchProducer(self.cfg)
        self._dlq.publish_raw(
            self.cfg.dead_letter_topic, message.key, message.value, dead_letter_headers(message, reason)
        )
        self._dlq.flush(timeout=30)

    def close(self) -> None:
        if self._dlq is not None:
            self._dlq.close()
        self._consumer.close(autocommit=False)
