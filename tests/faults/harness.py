"""Shared pieces of the fault tests: a loopback S3, a steady producer whose every value is known,
exactly-once checks against the store, sink subprocesses, RSS sampling.

Values carry their own proof: device d's k-th row has value k. A device whose table rows have
count == distinct == N, min 0 and max N-1 holds each of its N produced values exactly once.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pyarrow as pa
import yaml
from prometheus_client.parser import text_string_to_metric_families

from rocescope.config import KafkaConfig
from rocescope.errors import TransportError
from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.kafka import KafkaBatchProducer
from rocescope.pipeline.store import Store
from rocescope.testbed.tansu import free_port

FULL = os.environ.get("ROCESCOPE_FAULTS_FULL") == "1"
ROCESCOPE = str(Path(sys.executable).parent / "rocescope")


def scaled(default: float, full: float) -> float:
    """The default (CI) figure, or the issue's figure under ROCESCOPE_FAULTS_FULL=1."""
    return full if FULL else default


def wait_for(what: str, done: Callable[[], bool], timeout: float, every: float = 0.1) -> float:
    """Wait for an event (never a wall-clock budget on the work itself); seconds waited."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
    return time.monotonic() - started


def wait_settled(what: str, count: Callable[[], int], want: int, stall_s: float = 60) -> int:
    """Wait until `count()` reaches `want`, failing only once it made no progress for `stall_s`."""
    last, since = count(), time.monotonic()
    while last < want:
        time.sleep(0.5)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > stall_s:
            raise AssertionError(f"{what}: stuck at {last} of {want} for {stall_s:.0f}s")
    return last


def wait_port(port: int, timeout: float = 30) -> None:
    def up() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            return False

    wait_for(f"127.0.0.1:{port}", up, timeout, every=0.05)


class LoopbackS3:
    """moto_server on loopback with one bucket: Tansu's `s3://` storage, so the broker survives restarts."""

    def __init__(self, log_dir: Path, bucket: str = "tansu"):
        self.port = free_port()
        self.bucket = bucket
        self.log_path = log_dir / f"moto-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What Tansu's object store reads (dummy credentials: moto accepts any)."""
        return {
            "AWS_ENDPOINT": self.url,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "faults",
            "AWS_SECRET_ACCESS_KEY": "faults",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def start(self) -> LoopbackS3:
        import boto3

        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_port(self.port)
        env = self.env()
        boto3.client(
            "s3",
            endpoint_url=self.url,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
        ).create_bucket(Bucket=self.bucket)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None


def counters_batch(device: str, first: int, rows: int, ts0_ns: int) -> Batch:
    """Rows `first .. first+rows-1` of `device`: value = row number, one ns apart, 64 ports x 8 metrics."""
    k = np.arange(first, first + rows, dtype="int64")
    ports = pa.array([f"Ethernet{4 * p}" for p in range(64)])
    metrics = pa.array([f"metric_{m}" for m in range(8)])
    table = pa.table(
        {
            "ts": pa.array(ts0_ns + k, pa.timestamp("ns", tz="UTC")),
            "device": pa.array([device] * rows).dictionary_encode(),
            "role": pa.array(["switch"] * rows).dictionary_encode(),
            "port": ports.take(pa.array(k % 64)).dictionary_encode(),
            "priority": pa.array(np.full(rows, -1, dtype="int8")),
            "metric": metrics.take(pa.array((k // 64) % 8)).dictionary_encode(),
            "value": pa.array(k.astype("float64")),
            "source": pa.array(["gnmi"] * rows).dictionary_encode(),
            "raw_name": metrics.take(pa.array((k // 64) % 8)).dictionary_encode(),
        }
    )
    return Batch("counters", conform("counters", table), key=device)


@dataclass
class Produced:
    """What a producer handed to the transport, per device (rows; values are 0..rows-1)."""

    rows: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    refused: int = 0  # publish() raised: the batch was never accepted, so it is not expected either

    @property
    def total(self) -> int:
        return sum(self.rows.values())


class SteadyProducer:
    """rocescope's Kafka producer path at a steady rate on a thread: `devices` batches of `rows` every period."""

    def __init__(self, cfg: KafkaConfig, devices: int, rows: int, period_s: float):
        self.producer = KafkaBatchProducer(cfg)
        self.devices = [f"leaf-{i:02d}" for i in range(devices)]
        self.rows = rows
        self.period_s = period_s
        self.produced = Produced({d: 0 for d in self.devices})
        self.ts0_ns = int((dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)).timestamp()) * 10**9
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="steady-producer", daemon=True)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            for device in self.devices:
                first = self.produced.rows[device]
                try:
                    self.producer.publish(counters_batch(device, first, self.rows, self.ts0_ns))
                except TransportError:
                    self.produced.refused += 1  # logged by the producer; not accepted, so not expected
                    continue
                self.produced.rows[device] = first + self.rows
                self.produced.batches += 1
            next_at += self.period_s
            self._stop.wait(max(0.0, next_at - time.monotonic()))

    def stop(self, flush_timeout: float = 180) -> Produced:
        """Stop producing and wait until everything accepted was acknowledged (or counted as failed)."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(60)
            self.producer.flush(flush_timeout)
            self.producer.close()
        return self.produced


def landed(store: Store) -> dict[str, dict[str, int]]:
    """Per device: rows, distinct values, min, max and sum of the values in the counters table."""
    got = store.query_arrow(
        "SELECT toString(device) AS device, count() AS n, uniqExact(value) AS distinct, "
        "toInt64(min(value)) AS lo, toInt64(max(value)) AS hi, toInt64(sum(value)) AS total "
        "FROM counters GROUP BY device ORDER BY device"
    ).to_pylist()
    return {r["device"]: {k: int(v) for k, v in r.items() if k != "device"} for r in got}


def landed_rows(store: Store) -> int:
    return int(store.query_arrow("SELECT count() FROM counters").column(0)[0].as_py())


def exactly_once_problems(produced: Mapping[str, int], got: Mapping[str, Mapping[str, int]]) -> list[str]:
    """Devices whose rows in the store are not exactly their produced values 0..n-1, each once."""
    problems = []
    for device, n in sorted(produced.items()):
        row = got.get(device, {"n": 0, "distinct": 0, "lo": 0, "hi": -1, "total": 0})
        want = {"n": n, "distinct": n, "lo": 0, "hi": n - 1, "total": n * (n - 1) // 2}
        if n == 0:
            want = {"n": 0}
        diff = {k: (row[k], v) for k, v in want.items() if row[k] != v}
        if diff:
            problems.append(f"{device}: (got, want) {diff}")
    problems += [f"{d}: landed but never produced" for d in got if d not in produced]
    return problems


def print_table(title: str, header: list[str], rows: list[list[Any]]) -> None:
    """A small fixed-width text table of a test's figures (shown with pytest -s, kept in the log)."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for r in cells:
        print("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


def write_config(path: Path, **sections: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(sections, sort_keys=False))
    return path


def sink_config(path: Path, kafka: KafkaConfig, store: dict[str, Any], **sink: Any) -> tuple[Path, int]:
    """A config for `rocescope sink` with its metrics endpoint on a free loopback port."""
    port = free_port()
    cfg = write_config(
        path,
        store={"ttl_days": 0, **store},
        transport={"kind": "kafka"},
        kafka=kafka.model_dump(mode="json"),
        sink={"group_id": "faults", "metrics_port": port, **sink},
    )
    return cfg, port


class SinkProcess:
    """`rocescope sink` as a subprocess: the unit an operator runs, and the one a crash kills."""

    def __init__(self, config: Path, metrics_port: int, log_path: Path):
        self.config = config
        self.metrics_port = metrics_port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SinkProcess:
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [ROCESCOPE, "--config", str(self.config), "--log-level", "INFO", "sink"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_for("the sink's metrics endpoint", self._up, 120, every=0.2)
        return self

    def _up(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"rocescope sink exited {self.proc.returncode}; see {self.log_path}")
        try:
            socket.create_connection(("127.0.0.1", self.metrics_port), timeout=0.5).close()
            return True
        except OSError:
            return False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def metrics(self) -> dict[str, float]:
        """The sink's Prometheus samples (summed over labels)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
        return out

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self, timeout: float = 120) -> int:
        """SIGTERM: the sink flushes what it holds, commits, and exits."""
        assert self.proc is not None
        self.proc.terminate()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"rocescope sink did not stop within {timeout:.0f}s; see {self.log_path}") from None


def rss_mb(pid: int) -> float:
    """Resident set size of a process and its children, in MiB (0 once it is gone)."""
    try:
        proc = psutil.Process(pid)
        total = proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))
    except psutil.Error:
        return 0.0
    return total / 2**20


def committed_offsets(cfg: KafkaConfig, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition (-1 where none), read without joining the group."""
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(bootstrap_servers=cfg.bootstrap_servers, group_id=group, enable_auto_commit=False)
    try:
        parts = sorted(reader.partitions_for_topic(topic) or [])
        return {p: (reader.committed(TopicPartition(topic, p)) or -1) for p in parts}
    finally:
        reader.close(autocommit=False)


def end_offsets(cfg: KafkaConfig, topic: str) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    reader = KafkaConsumer(bootstrap_servers=cfg.bootstrap_servers)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(reader.partitions_for_topic(topic) or [])]
        return {tp.partition: int(o) for tp, o in reader.end_offsets(tps).items()}
    finally:
        reader.close()
