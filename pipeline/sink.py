"""The sink: transport -> buffer -> store, exactly once.

Exactly once comes from four rules:
1. offsets are committed only after the insert of everything before them succeeded;
2. before inserting a partition's offset range, the sink records it (with its deduplication token)
   in `sink_intents`; ClickHouse's `insert_deduplication_token` makes a repeated insert of the
   same range with the same token a no-op;
3. a sink (this one after a crash, or another replica after a rebalance) that resumes at a
   committed offset where an intent starts replays exactly that intent's range with its token;
4. a message whose producer-given id (`rocescope-id` header) was already taken at another offset is
   a producer's retry that the broker logged twice: it is dropped and counted. The ids are recorded
   in `sink_messages` with the intent, so the rule holds across sink restarts and rebalances.
So a crash between insert and commit re-inserts the same rows under the same token and nothing
lands twice, however the new poll groups the messages, and a broker without working idempotence
(or a producer with it off) cannot make a value land twice either. This is the design of ClickHouse's own
Kafka Connect sink (state kept per topic/partition), with the state in the store itself.
Undecodable or schema-mismatched messages go to the dead-letter topic with the reason.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from rocescope import schema
from rocescope.config import SinkConfig
from rocescope.errors import DecodeError, SchemaError, StoreError
from rocescope.pipeline.batch import concat, decode, message_id
from rocescope.pipeline.metrics import SinkMetrics
from rocescope.pipeline.store import Store
from rocescope.pipeline.transport import Consumer, Message, TopicPartition, stream_of

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Intent:
    first: int
    last: int
    token: str


@dataclass
class _Pending:
    """What one partition has consumed but not yet committed: (offset, batch or None if dead-lettered or a
    duplicate, message id). Entries before `checked` went through the duplicate check."""

    entries: list[tuple[int, pa.RecordBatch | None, int | None]] = field(default_factory=list)
    rows: int = 0
    since: float = 0.0
    checked: int = 0


class _SeenIds:
    """The ids of one partition's last `capacity` messages, each with the offset it was taken at."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.offsets: OrderedDict[int, int] = OrderedDict()

    def take(self, mid: int, offset: int) -> bool:
        """False if `mid` was already taken at another offset (a duplicate); remembers it otherwise."""
        seen = self.offsets.get(mid)
        if seen is not None:
            return seen == offset
        self.offsets[mid] = offset
        if len(self.offsets) > self.capacity:
            self.offsets.popitem(last=False)
        return True


class Sink:
    def __init__(
        self,
        consumer: Consumer,
        store: Store,
        cfg: SinkConfig,
        metrics: SinkMetrics | None = None,
        ttl_days: int = 0,
    ):
        self.consumer = consumer
        self.ttl_days = ttl_days
        self.store = store
        self.cfg = cfg
        self.metrics = metrics or SinkMetrics()
        self._pending: dict[TopicPartition, _Pending] = {}
        self._intents: dict[TopicPartition, Intent | None] = {}
        self._seen: dict[TopicPartition, _SeenIds] = {}
        self._last_log = time.monotonic()

    # --- main loop
    def run(self, stop: threading.Event | None = None, idle_exit_s: float | None = None) -> None:
        """Consume until `stop` is set, or until nothing arrived for `idle_exit_s` (then flush and return)."""
        stop = stop or threading.Event()
        idle_since = time.monotonic()
        while not stop.is_set():
            got = self.step(stop)
            now = time.monotonic()
            if got:
                idle_since = now
            elif idle_exit_s is not None and now - idle_since >= idle_exit_s and not self.buffered_rows():
                break
        self.flush(stop)

    def step(self, stop: threading.Event | None = None) -> int:
        """One poll; flush when the buffer is full or old enough. Returns messages consumed."""
        messages = self.consumer.poll(self.cfg.poll_timeout_ms, max_records=2000)
        for msg in messages:
            self._accept(msg)
        if self._due():
            self.flush(stop)
        now = time.monotonic()
        if now - self._last_log >= 30:
            self._last_log = now
            self.metrics.lag.set(self.consumer.lag())
            log.info("sink: %s", self.status())
        return len(messages)

    def _accept(self, msg: Message) -> None:
        tp = (msg.topic, msg.partition)
        pending = self._pending.setdefault(tp, _Pending())
        if not pending.entries:
            pending.since = time.monotonic()
        try:
            stream = stream_of(msg.topic)
            batch = msg.batch.data if msg.batch is not None else decode(stream, msg.value, _key(msg)).data
        except Exception as exc:  # anything a message makes decoding raise: one bad message never stops the sink
            reason = type(exc).__name__
            if isinstance(exc, DecodeError | SchemaError | KeyError):
                log.warning("dead-lettering %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, exc)
            else:  # a decoder bug: say so loudly, with the traceback, and still keep the message
                log.exception("dead-lettering %s[%d]@%d: unexpected error", msg.topic, msg.partition, msg.offset)
            self.consumer.dead_letter(msg, str(exc))
            self.metrics.dead_lettered.labels(reason).inc()
            pending.entries.append((msg.offset, None, None))
            return
        self.metrics.consumed.labels(stream).inc()
        self._check_expired(stream, batch)
        pending.entries.append((msg.offset, batch, message_id(msg.headers)))
        pending.rows += batch.num_rows
        self.metrics.buffered_rows.inc(batch.num_rows)

    def _check_expired(self, stream: str, batch: pa.RecordBatch) -> None:
        """Rows older than the retention are dropped by the store's TTL: say so instead of losing them quietly."""
        column = schema.TABLES[stream].ttl_column
        if not self.ttl_days or not column or batch.num_rows == 0:
            return
        cutoff = pa.scalar(dt.datetime.now(dt.UTC) - dt.timedelta(days=self.ttl_days), pa.timestamp("ns", tz="UTC"))
        expired = pc.sum(pc.less(batch.column(column), cutoff)).as_py() or 0
        if expired:
            if not self.metrics.value("rocescope_sink_rows_expired_total"):
                log.warning(
                    "sink: %s rows older than the retention (store.ttl_days=%d) are dropped by the store; "
                    "set store.ttl_days: 0 to keep old data (e.g. imported captures)",
                    stream,
                    self.ttl_days,
                )
            self.metrics.expired_rows.labels(stream).inc(expired)

    def buffered_rows(self) -> int:
        return sum(p.rows for p in self._pending.values())

    def _due(self) -> bool:
        if not any(p.entries for p in self._pending.values()):
            return False
        if self.buffered_rows() >= self.cfg.max_rows:
            return True
        oldest = min(p.since for p in self._pending.values() if p.entries)
        return time.monotonic() - oldest >= self.cfg.max_seconds

    # --- flush: intents, inserts, commit
    def flush(self, stop: threading.Event | None = None) -> None:
        """Insert everything buffered (retrying with backoff while the store is down), then commit."""
        backoff = self.cfg.retry_backoff_s
        while True:
            try:
                self._flush_once()
                return
            except StoreError as exc:
                self.metrics.insert_errors.inc()
                log.error("sink: insert failed, retrying in %.1fs (offsets stay uncommitted): %s", backoff, exc)
                if stop is not None and stop.wait(backoff):
                    log.error(
                        "sink: stopping with %d rows not inserted; their offsets are not committed",
                        self.buffered_rows(),
                    )
                    return
                if stop is None:
                    time.sleep(backoff)
                backoff = min(backoff * 2, self.cfg.retry_backoff_max_s)

    def _flush_once(self) -> None:
        plan: list[tuple[TopicPartition, int, Intent, list[pa.RecordBatch]]] = []
        new_intents: list[tuple[TopicPartition, Intent]] = []
        for tp, pending in self._pending.items():
            if not pending.entries:
                continue
            self._drop_duplicates(tp, pending)
            first = pending.entries[0][0]
            intent = self._intent(tp)
            if intent is not None and intent.first == first:
                # Replay exactly the range an earlier attempt may have inserted, with its token.
                if pending.entries[-1][0] < intent.last:
                    continue  # not all of it re-read yet
                take = [e for e in pending.entries if e[0] <= intent.last]
            else:
                take = list(pending.entries)
                last = take[-1][0]
                intent = Intent(first, last, f"{_group(self.consumer)}:{tp[0]}:{tp[1]}:{first}-{last}")
                new_intents.append((tp, intent))
            plan.append((tp, len(take), intent, [b for _, b, _ in take if b is not None]))
        if not plan:
            return
        started = time.monotonic()
        if new_intents:
            self._write_message_ids(new_intents)
            self._write_intents(new_intents)
        for tp, _count, intent, batches in plan:
            table = stream_of(tp[0])
            if batches:
                rows = self.store.insert(table, concat(table, batches), dedup_token=intent.token)
                self.metrics.inserted_rows.labels(table).inc(rows)
        self.metrics.insert_seconds.observe(time.monotonic() - started)
        offsets = {tp: intent.last + 1 for tp, _c, intent, _b in plan}
        self.metrics.lag.set(self.consumer.lag())
        for tp, count, _intent, _b in plan:
            pending = self._pending[tp]
            done = pending.entries[:count]
            pending.entries = pending.entries[count:]
            pending.checked -= count
            rows = sum(b.num_rows for _, b, _ in done if b is not None)
            pending.rows -= rows
            self.metrics.buffered_rows.dec(rows)
            pending.since = time.monotonic()
        self._commit(offsets)

    def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        try:
            self.consumer.commit(offsets)
        except Exception as exc:  # kafka-python raises several types; all mean "not committed"
            self.metrics.commit_errors.inc()
            log.error("sink: offset commit failed (rows are in the store; a replay will deduplicate): %s", exc)
            self._pending.clear()
            self._intents.clear()
            self.metrics.buffered_rows.set(0)
            self.consumer.rewind()

    def _drop_duplicates(self, tp: TopicPartition, pending: _Pending) -> None:
        """Rule 4: entries whose message id was taken at another offset become dropped entries."""
        if self.cfg.dedup_messages <= 0:
            pending.checked = len(pending.entries)
            return
        seen = self._seen_ids(tp)
        for i in range(pending.checked, len(pending.entries)):
            offset, batch, mid = pending.entries[i]
            if mid is None or batch is None or seen.take(mid, offset):
                continue
            pending.entries[i] = (offset, None, mid)
            pending.rows -= batch.num_rows
            self.metrics.buffered_rows.dec(batch.num_rows)
            self.metrics.duplicates.labels(stream_of(tp[0])).inc()
            log.warning(
                "sink: %s[%d]@%d repeats message %016x taken at offset %d (a producer retry logged twice); dropped",
                tp[0],
                tp[1],
                offset,
                mid,
                seen.offsets[mid],
            )
        pending.checked = len(pending.entries)

    def _seen_ids(self, tp: TopicPartition) -> _SeenIds:
        if tp not in self._seen:
            seen = _SeenIds(self.cfg.dedup_messages)
            rows = self.store.query_arrow(
                "SELECT offset, message_id FROM sink_messages FINAL "
                "WHERE group_id = {g:String} AND topic = {t:String} AND partition = {p:Int32} "
                "ORDER BY offset DESC LIMIT {n:UInt64}",
                {"g": _group(self.consumer), "t": tp[0], "p": tp[1], "n": self.cfg.dedup_messages},
            ).to_pylist()
            for row in reversed(rows):
                seen.take(row["message_id"], row["offset"])
            self._seen[tp] = seen
        return self._seen[tp]

    def _write_message_ids(self, intents: Sequence[tuple[TopicPartition, Intent]]) -> None:
        """The ids an intent covers, recorded before its insert like the intent itself."""
        taken = [
            (tp, offset, mid)
            for tp, intent in intents
            for offset, batch, mid in self._pending[tp].entries
            if mid is not None and batch is not None and intent.first <= offset <= intent.last
        ]
        if not taken or self.cfg.dedup_messages <= 0:
            return
        self.store.insert(
            "sink_messages",
            pa.table(
                {
                    "group_id": [_group(self.consumer)] * len(taken),
                    "topic": [tp[0] for tp, _, _ in taken],
                    "partition": pa.array([tp[1] for tp, _, _ in taken], pa.int32()),
                    "offset": pa.array([offset for _, offset, _ in taken], pa.int64()),
                    "message_id": pa.array([mid for _, _, mid in taken], pa.uint64()),
                    "written_at": pa.array([dt.datetime.now(dt.UTC)] * len(taken), pa.timestamp("ns", tz="UTC")),
                }
            ),
        )

    def _intent(self, tp: TopicPartition) -> Intent | None:
        if tp not in self._intents:
            rows = self.store.query_arrow(
                "SELECT first_offset, last_offset, token FROM sink_intents FINAL "
                "WHERE group_id = {g:String} AND topic = {t:String} AND partition = {p:Int32}",
                {"g": _group(self.consumer), "t": tp[0], "p": tp[1]},
            ).to_pylist()
            self._intents[tp] = (
                Intent(rows[0]["first_offset"], rows[0]["last_offset"], rows[0]["token"]) if rows else None
            )
        return self._intents[tp]

    def _write_intents(self, intents: Sequence[tuple[TopicPartition, Intent]]) -> None:
        now = dt.datetime.now(dt.UTC)
        table = pa.table(
            {
                "group_id": [_group(self.consumer)] * len(intents),
                "topic": [tp[0] for tp, _ in intents],
                "partition": pa.array([tp[1] for tp, _ in intents], pa.int32()),
                "first_offset": pa.array([i.first for _, i in intents], pa.int64()),
                "last_offset": pa.array([i.last for _, i in intents], pa.int64()),
                "token": [i.token for _, i in intents],
                "written_at": pa.array([now] * len(intents), pa.timestamp("ns", tz="UTC")),
            }
        )
        self.store.insert("sink_intents", table)
        for tp, intent in intents:
            self._intents[tp] = intent

    def status(self) -> str:
        m = self.metrics
        return (
            f"consumed={m.value('rocescope_sink_messages_consumed_total'):.0f} "
            f"inserted_rows={m.value('rocescope_sink_rows_inserted_total'):.0f} "
            f"dead_lettered={m.value('rocescope_sink_dead_lettered_total'):.0f} "
            f"duplicates={m.value('rocescope_sink_duplicates_total'):.0f} "
            f"insert_errors={m.value('rocescope_sink_insert_errors_total'):.0f} "
            f"lag={m.value('rocescope_sink_lag_messages'):.0f}"
        )


def _key(msg: Message) -> str:
    return msg.key.decode(errors="replace") if msg.key else ""


def _group(consumer: Consumer) -> str:
    return consumer.group_id
