"""Ingest benchmark: switch polls through Kafka (Tansu) into the sink into chdb, end to end.

Each poll is shaped like a real one of a 64-port switch: 32 port-level metrics plus 8 metrics on
each of 8 priorities, per port (6,144 values). A producer process publishes polls of many switches
as fast as it can; the sink runs in its own process (its peak RSS is measured) and inserts into
embedded chdb. In the same run we measure:
  * the limit: the same Arrow data inserted straight into chdb, no transport;
  * a naive pipeline: one JSON message per value (the gnmic "event" style) through the same
    broker, parsed and inserted by a consumer in batches.
Small by default (seconds); --full for a longer run.

    python bench/ingest.py [--full] [--seconds N]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from rocescope.config import KafkaConfig, SinkConfig
from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.kafka import KafkaBatchProducer, KafkaTransport
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.sink import Sink
from rocescope.pipeline.store import ChdbStore
from rocescope.testbed.tansu import Broker

PORTS = 64
PORT_METRICS = 32
PRIO_METRICS = 8
PRIORITIES = 8
VALUES_PER_POLL = PORTS * (PORT_METRICS + PRIO_METRICS * PRIORITIES)


def poll(device: str, ts_ns: int, rng: np.random.Generator) -> Batch:
    """One 64-port switch poll: every port x metric (x priority for the per-priority ones)."""
    ports, prios, metrics = [], [], []
    for p in range(PORTS):
        port = f"Ethernet{4 * p}"
        for m in range(PORT_METRICS):
            ports.append(port)
            prios.append(-1)
            metrics.append(f"port_metric_{m:02d}")
        for m in range(PRIO_METRICS):
            for q in range(PRIORITIES):
                ports.append(port)
                prios.append(q)
                metrics.append(f"prio_metric_{m}")
    n = len(ports)
    table = pa.table(
        {
            "ts": pa.array(np.full(n, ts_ns, dtype="int64"), pa.timestamp("ns", tz="UTC")),
            "device": pa.array([device] * n).dictionary_encode(),
            "role": pa.array(["switch"] * n).dictionary_encode(),
            "port": pa.array(ports).dictionary_encode(),
            "priority": pa.array(prios, pa.int8()),
            "metric": pa.array(metrics).dictionary_encode(),
            "value": pa.array(np.floor(rng.uniform(0, 1e12, n))),
            "source": pa.array(["gnmi"] * n).dictionary_encode(),
            "raw_name": pa.array(metrics).dictionary_encode(),
        }
    )
    return Batch("counters", conform("counters", table), key=device)


def polls(count: int, switches: int = 64) -> list[Batch]:
    rng = np.random.default_rng(1)
    start = int((dt.datetime.now(dt.UTC) - dt.timedelta(minutes=30)).timestamp()) * 10**9
    templates = [poll(f"leaf-{i:03d}", start, rng) for i in range(switches)]
    out = []
    for i in range(count):
        t = templates[i % switches]
        step = i // switches
        ts = pa.array(np.full(t.num_rows, start + step * 10**9, dtype="int64"), pa.timestamp("ns", tz="UTC"))
        out.append(Batch("counters", t.data.set_column(0, "ts", ts), key=t.key))
    return out


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# --- the sink process
def sink_process(cfg_json: str, expect_rows: int, data_dir: str, result: mp.Queue) -> None:  # type: ignore[type-arg]
    cfg = KafkaConfig.model_validate_json(cfg_json)
    store = ChdbStore(data_dir)
    migrate(store)
    sink = Sink(
        KafkaTransport(cfg).consumer("bench", ["counters"]),
        store,
        SinkConfig(max_rows=400_000, max_seconds=1.0, poll_timeout_ms=100),
    )
    sink.consumer.wait_for_assignment(60)  # the group join is start-up cost, not throughput
    result.put(("ready", 0.0, 0.0))
    first = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if sink.step() and first is None:
            first = time.monotonic()
        if sink.metrics.value("rocescope_sink_rows_inserted_total") + sink.buffered_rows() >= expect_rows:
            sink.flush()
            break
    done = time.monotonic()
    rows = int(store.query_arrow("SELECT count() FROM counters").column(0)[0].as_py())
    result.put(("done", rows, done - (first or done), rss_mb()))
    sink.consumer.close()
    store.close()


def end_to_end(broker: Broker, batches: list[Batch], data_dir: str) -> tuple[float, float, int]:
    cfg = broker.kafka_config(partitions=4, linger_ms=10)
    KafkaTransport(cfg).ensure_topics(["counters"])
    expect = sum(b.num_rows for b in batches)
    ctx = mp.get_context("spawn")
    result: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    proc = ctx.Process(target=sink_process, args=(cfg.model_dump_json(), expect, data_dir, result))
    proc.start()
    assert result.get(timeout=120)[0] == "ready"
    producer = KafkaBatchProducer(cfg)
    started = time.monotonic()
    for batch in batches:
        producer.publish(batch)
    producer.flush(120)
    produced = time.monotonic() - started
    _, rows, _sink_busy, sink_rss = result.get(timeout=600)
    elapsed = time.monotonic() - started
    proc.join(30)
    producer.close()
    if rows != expect or producer.failed:
        sys.exit(f"end to end lost data: {rows} rows landed of {expect}, {producer.failed} send failures")
    print(f"  produced {len(batches)} polls in {produced:.2f}s; all {rows} values landed after {elapsed:.2f}s")
    return expect / elapsed, sink_rss, rows


def direct(batches: list[Batch], data_dir: str) -> float:
    store = ChdbStore(data_dir)
    migrate(store)
    chunk = max(1, 400_000 // VALUES_PER_POLL)
    tables = [pa.Table.from_batches([b.data for b in batches[i : i + chunk]]) for i in range(0, len(batches), chunk)]
    started = time.monotonic()
    for table in tables:
        store.insert("counters", table)
    elapsed = time.monotonic() - started
    store.close()
    return sum(b.num_rows for b in batches) / elapsed


# --- the naive pipeline: one JSON message per value
def naive_consumer(bootstrap: list[str], topic: str, expect: int, data_dir: str, result: mp.Queue) -> None:  # type: ignore[type-arg]
    from kafka import KafkaConsumer

    store = ChdbStore(data_dir)
    migrate(store)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id="naive",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    while not consumer.assignment():
        consumer.poll(timeout_ms=100)
    result.put(("ready", 0.0))
    got = 0
    rows: list[dict[str, object]] = []
    deadline = time.monotonic() + 600
    while got < expect and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200, max_records=5000).values():
            for r in records:
                event = json.loads(r.value)
                tags = event["tags"]
                for name, value in event["values"].items():
                    rows.append(
                        {
                            "ts": event["timestamp"],
                            "device": tags["source"],
                            "role": "switch",
                            "port": tags["interface_name"],
                            "priority": int(tags.get("priority", -1)),
                            "metric": name,
                            "value": float(value),
                            "source": "gnmi",
                            "raw_name": name,
                        }
                    )
                got += 1
        if rows and (len(rows) >= 50_000 or got >= expect):
            table = pa.Table.from_pylist(rows)
            table = table.set_column(0, "ts", table.column("ts").cast(pa.timestamp("ns", tz="UTC")))
            store.insert("counters", pa.Table.from_batches([conform("counters", table)]))
            consumer.commit()
            rows = []
    result.put(("done", got))
    consumer.close()
    store.close()


def naive(broker: Broker, batches: list[Batch], data_dir: str) -> float:
    topic = "naive.events"
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=[broker.bootstrap])
    admin.create_topics({topic: {"num_partitions": 4, "replication_factor": 1}}, wait_for_metadata=True)
    admin.close()
    events = []
    for batch in batches:
        for row in batch.data.to_pylist():
            tags = {"source": row["device"], "interface_name": row["port"]}
            if row["priority"] >= 0:
                tags["priority"] = str(row["priority"])
            events.append(
                json.dumps(
                    {
                        "name": "counters",
                        "timestamp": int(row["ts"].timestamp() * 1e9),
                        "tags": tags,
                        "values": {row["metric"]: row["value"]},
                    }
                ).encode()
            )
    ctx = mp.get_context("spawn")
    result: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    proc = ctx.Process(target=naive_consumer, args=([broker.bootstrap], topic, len(events), data_dir, result))
    proc.start()
    assert result.get(timeout=120)[0] == "ready"
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=[broker.bootstrap], linger_ms=10, acks="all")
    started = time.monotonic()
    for event in events:
        producer.send(topic, event)
    producer.flush(300)
    _, got = result.get(timeout=600)
    elapsed = time.monotonic() - started
    proc.join(30)
    producer.close()
    if got != len(events):
        sys.exit(f"naive pipeline lost data: {got} of {len(events)}")
    return len(events) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--full", action="store_true", help="longer run (about a minute of polls)")
    parser.add_argument("--polls", type=int, default=0, help="switch polls to send end to end")
    args = parser.parse_args()
    n_polls = args.polls or (2000 if args.full else 400)
    n_naive = 8 if args.full else 3
    print(f"values per poll: {VALUES_PER_POLL}; end to end: {n_polls} polls = {n_polls * VALUES_PER_POLL} values")
    batches = polls(n_polls)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        limit = direct(batches, str(root / "direct"))
        print(f"  direct chdb insert: {limit:,.0f} values/s")
        broker = Broker(root).start()
        try:
            e2e, sink_rss, _rows = end_to_end(broker, batches, str(root / "e2e"))
            slow = naive(broker, batches[:n_naive], str(root / "naive"))
            print(f"  naive JSON-per-value: {slow:,.0f} values/s ({n_naive * VALUES_PER_POLL} values)")
        finally:
            broker.stop()
    print(f"ingest_end_to_end: {e2e:.0f} values/s")
    print(f"sink_rss_peak: {sink_rss:.0f} MB")
    print(f"direct_chdb_insert: {limit:.0f} values/s")
    print(f"end_to_end_vs_direct: {e2e / limit:.3f} ratio")
    print(f"naive_json_per_value: {slow:.0f} values/s")
    print(f"end_to_end_vs_naive: {e2e / slow:.1f} x")


if __name__ == "__main__":
    main()
