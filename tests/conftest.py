"""Real components for tests: a Tansu Kafka broker, embedded chdb, chdb served over HTTP."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore, Store
from rocescope.testbed.tansu import Broker

FIXTURES = Path(__file__).parent / "fixtures"


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
        from rocescope.pipeline.store import ClickHouseStore
        from rocescope.testbed.chdb_http import ChdbHttpServer

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
