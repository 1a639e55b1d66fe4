"""`collect nccl-otlp`: NCCL Inspector's OpenTelemetry export POSTed over real HTTP on loopback, as
`inspector_otel.cc` sends it (OTLP/HTTP JSON to /v1/metrics), lands as the collectives its body holds; what is no
OTLP JSON is refused with the status the OTLP/HTTP specification gives, and the receiver keeps going."""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from inspector_samples import FIX

from rocescope.cli import app
from rocescope.collectors.nccl.otlp import parse_otlp
from rocescope.collectors.nccl.otlp_receiver import OtlpReceiver
from rocescope.pipeline.batch import Batch

from store_cli import runner, sql_rows, store_config

VERBOSE = FIX / "dev-otlp-v5.2-verbose.json"


def post(port: int, body: bytes, path: str = "/v1/metrics", **headers: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", body, method="POST")
    request.add_header("Content-Type", headers.pop("content_type", "application/json"))
    for key, value in headers.items():
        request.add_header(key.replace("_", "-"), value)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture
def receiver() -> Iterator[tuple[OtlpReceiver, list[Batch]]]:
    shipped: list[Batch] = []
    rx = OtlpReceiver(shipped.append, "127.0.0.1", 0)
    stop = threading.Event()
    worker = threading.Thread(target=rx.serve, args=(stop,), daemon=True)
    worker.start()
    yield rx, shipped
    stop.set()
    worker.join(10)


def rows(batches: list[Batch]) -> list[tuple[object, ...]]:
    if not batches:
        return []
    table = pa.Table.from_batches([b.data for b in batches])
    columns = (table.column(c).to_pylist() for c in ("host", "communicator", "sequence", "bytes"))
    return sorted(zip(*columns, strict=True))


def test_bodies_land_as_their_collectives_and_bad_ones_are_refused(
    receiver: tuple[OtlpReceiver, list[Batch]],
) -> None:
    rx, shipped = receiver
    body = VERBOSE.read_bytes()
    want = rows([Batch("collectives", parse_otlp(body).batch)])
    assert post(rx.port, body) == (200, {})
    assert rows(shipped) == want and len(want) == 5
    shipped.clear()
    assert post(rx.port, gzip.compress(body), Content_Encoding="gzip") == (200, {})
    assert rows(shipped) == want
    status, answer = post(rx.port, b"\x0a\x03abc", content_type="application/x-protobuf")
    assert status == 415 and "JSON" in str(answer["error"])
    assert post(rx.port, b'{"hello": 1}')[0] == 400
    assert post(rx.port, body, path="/v1/traces")[0] == 404
    with socket.create_connection(("127.0.0.1", rx.port), timeout=10) as raw:  # a header no client should send
        raw.sendall(b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Content-Length: many\r\nConnection: close\r\n\r\n")  # fmt: skip
        assert raw.recv(64).startswith(b"HTTP/1.0 400")
    half = json.loads(body)
    half["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"][0]["attributes"] = [
        {"key": "version", "value": {"stringValue": "v9.0"}}
    ]
    status, answer = post(rx.port, json.dumps(half).encode())
    assert status == 200 and answer["partialSuccess"]["rejectedDataPoints"] == "1"  # type: ignore[index]
    health = rx.health()[rx.target]
    assert health.values == 2 * len(want) + parse_otlp(json.dumps(half).encode()).rows
    assert (health.failures, health.malformed) == (1, 1)  # the body that was no OTLP; the point of version 9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_command_lands_what_inspector_posts(tmp_path: Path) -> None:
    cfg = store_config(tmp_path)
    port = free_port()
    body = VERBOSE.read_bytes()
    answers: list[int] = []

    def inspector() -> None:
        for _ in range(100):  # until the command listens
            try:
                answers.append(post(port, body)[0])
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)

    sender = threading.Thread(target=inspector)
    sender.start()
    result = runner.invoke(app, ["--config", cfg, "collect", "nccl-otlp", "--listen", f"127.0.0.1:{port}",
                                 "--seconds", "4"])  # fmt: skip
    sender.join()
    assert result.exit_code == 0, result.output
    assert answers == [200] and "5 collectives received" in result.output
    assert sql_rows(cfg, "SELECT count(), uniqExact(source) FROM collectives") == ["5,1"]
