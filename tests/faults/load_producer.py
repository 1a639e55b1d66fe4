"""The load test's producer process: the ingest benchmark's switch polls through rocescope's Kafka producer
at a fixed rate, writing its progress (values published, delivery failures) to a JSON file every second.

    python tests/faults/load_producer.py KAFKA_CONFIG_JSON VALUES_PER_S SECONDS STATUS_FILE
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

from rocescope.config import KafkaConfig
from rocescope.pipeline.kafka import KafkaBatchProducer

BENCH = Path(__file__).resolve().parents[2] / "bench" / "ingest.py"


def bench_ingest() -> Any:
    """bench/ingest.py as a module (bench/ is scripts, not a package): its polls are the benchmark's load."""
    spec = importlib.util.spec_from_file_location("bench_ingest", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def report(path: Path, **status: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(status))
    tmp.replace(path)


def main() -> None:
    cfg = KafkaConfig.model_validate_json(sys.argv[1])
    rate, seconds, status = float(sys.argv[2]), float(sys.argv[3]), Path(sys.argv[4])
    polls = bench_ingest().polls(256)  # 64 switches x 4 time steps, cycled
    producer = KafkaBatchProducer(cfg)
    started = time.monotonic()
    sent = 0
    next_report = started
    while (now := time.monotonic()) - started < seconds:
        batch = polls[(sent // polls[0].num_rows) % len(polls)]
        producer.publish(batch)
        sent += batch.num_rows
        if now >= next_report:
            next_report += 1
            report(status, sent=sent, failed=producer.failed, elapsed=now - started, done=False)
        ahead = started + sent / rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    producer.flush(300)
    report(status, sent=sent, failed=producer.failed, elapsed=time.monotonic() - started, done=True)
    producer.close()


if __name__ == "__main__":
    main()
