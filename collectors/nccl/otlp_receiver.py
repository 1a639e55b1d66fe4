"""An OTLP/HTTP metrics endpoint for NCCL Inspector's OpenTelemetry export: `rocescope collect nccl-otlp`.

Inspector (`NCCL_INSPECTOR_OTEL_EXPORT=1`, `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://<this>:4318/v1/metrics`)
POSTs OTLP/HTTP JSON bodies (`inspector_otel.cc`: plain HTTP, `Content-Type: application/json`); each body's
collectives (`otlp.parse_otlp`) are shipped as `collectives` batches. As the OTLP/HTTP specification asks: 200
with an `ExportMetricsServiceResponse` (`partialSuccess` naming the points refused, when some were), 400 for
a body that is no OTLP JSON (a retry would not help), 415 for protobuf bodies (Inspector sends JSON; other
exporters should be pointed at an OpenTelemetry Collector), 404 elsewhere, 413 above `max_body_bytes`. Gzip
bodies (`Content-Encoding: gzip`) are read. The stdlib's threading HTTP server: one thread per request.
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rocescope.collectors.common.health import CollectorMetrics, Health, Targets
from rocescope.collectors.nccl.otlp import is_otlp, parse_otlp
from rocescope.collectors.nccl.parse import collectives_batches
from rocescope.pipeline.batch import Batch

__all__ = ["OtlpReceiver"]

log = logging.getLogger(__name__)
PATH = "/v1/metrics"


class OtlpReceiver:
    """Receives OTLP/HTTP JSON metric bodies on `host:port` and hands their collectives to `ship`."""

    def __init__(
        self,
        ship: Callable[[Batch], None],
        host: str = "127.0.0.1",
        port: int = 4318,
        metrics: CollectorMetrics | None = None,
        max_body_bytes: int = 64 << 20,
    ):
        self.ship = ship
        self.metrics = metrics or CollectorMetrics("nccl_otlp")
        self.targets = Targets(self.metrics, log, "nccl-otlp")
        self.target = f"{host}:{port}"
        self.targets.add(self.target)
        self.max_body_bytes = max_body_bytes
        self.rows = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer((host, port), self._handler())
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])  # the one bound (port 0: any free one)

    def health(self) -> dict[str, Health]:
        return dict(self.targets.health)

    def serve(self, stop: threading.Event) -> None:
        """Answer requests until `stop` is set."""
        worker = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        worker.start()
        try:
            stop.wait()
        finally:
            self.server.shutdown()
            self.server.server_close()
            worker.join()

    def receive(self, body: bytes) -> tuple[int, dict[str, object]]:
        """One request body -> (HTTP status, response document); its collectives shipped."""
        if not is_otlp(body):
            self.targets.failed(self.target, "a body that is no OTLP JSON (no resourceMetrics)")
            return 400, {"error": "not an OTLP/HTTP JSON metrics body (no resourceMetrics)"}
        parsed = parse_otlp(body)
        for batch in collectives_batches(parsed.batch):
            self.ship(batch)
        refused = parsed.malformed + parsed.refused
        with self._lock:
            self.rows += parsed.rows
            self.targets.succeeded(self.target, 0.0, values=parsed.rows, unknown=parsed.unknown,
                                   malformed=refused, problem=parsed.problem)  # fmt: skip
        if refused:
            return 200, {"partialSuccess": {"rejectedDataPoints": str(refused), "errorMessage": parsed.problem}}
        return 200, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.path.split("?")[0] != PATH:
                    return self._answer(404, {"error": f"POST OTLP metrics to {PATH}"})
                kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
                if kind != "application/json":
                    return self._answer(415, {"error": "only OTLP/HTTP JSON (application/json) is read"})
                try:
                    size = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    return self._answer(400, {"error": "Content-Length is no number"})
                if size > receiver.max_body_bytes:
                    return self._answer(413, {"error": f"body over {receiver.max_body_bytes} bytes"})
                body = self.rfile.read(size)
                if self.headers.get("Content-Encoding", "").lower() == "gzip":
                    try:
                        body = gzip.decompress(body)
                    except (OSError, EOFError, zlib.error) as exc:
                        return self._answer(400, {"error": f"gzip body unreadable: {exc}"})
                status, doc = receiver.receive(body)
                self._answer(status, doc)

            def _answer(self, status: int, doc: dict[str, object]) -> None:
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("nccl-otlp %s: " + format, self.address_string(), *args)

        return Handler
