"""Real clickhouse-connect round trips against chdb served by rocescope.testbed.chdb_http."""

from __future__ import annotations

import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import clickhouse_connect
import pyarrow as pa
import pytest
from chdb import session as chdb_session
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from rocescope.testbed.chdb_http import ChdbHttpServer

EVIL = "o'brien\" \\ \t'; DROP TABLE x; --"
FABRIC_DDL = """
CREATE TABLE {name} (
    ts DateTime64(9, 'UTC'),
    host LowCardinality(String),
    prio Int8,
    value Float64
) ENGINE = MergeTree ORDER BY (host, ts) {settings}
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ChdbHttpServer]:
    new_session: Any = chdb_session.Session  # chdb's Session carries no annotations
    sess = new_session(str(tmp_path / "chdb"))
    try:
        with ChdbHttpServer(sess) as srv:
            yield srv
    finally:
        sess.close()


def connect(server: ChdbHttpServer, database: str = "default", **kwargs: Any) -> Client:
    return clickhouse_connect.get_client(
        host="127.0.0.1", port=server.port, username="default", password="", database=database, **kwargs
    )


@pytest.fixture
def client(server: ChdbHttpServer) -> Iterator[Client]:
    cl = connect(server)
    yield cl
    cl.close()


def fabric_table(n: int, seed: int) -> pa.Table:
    rng = random.Random(seed)
    base = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns
    ts = [base + i * 1_000_003 + rng.randrange(1_000_000) for i in range(n)]
    hosts = [f"gpu-{k:03d}" for k in range(20)] + ["leaf-ü", "spine 'quoted'"]
    return pa.table(
        {
            "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
            "host": pa.array([rng.choice(hosts) for _ in range(n)], pa.string()),
            "prio": pa.array([rng.randint(-128, 127) for _ in range(n)], pa.int8()),
            "value": pa.array([rng.uniform(-1, 1) * 10.0 ** rng.randint(-300, 300) for _ in range(n)]),
        }
    )


def test_binds_loopback_ping_and_get(server: ChdbHttpServer) -> None:
    assert server.url == f"http://127.0.0.1:{server.port}"
    with urllib.request.urlopen(f"{server.url}/ping") as resp:
        assert resp.read() == b"Ok.\n"
    with urllib.request.urlopen(f"{server.url}/?query=SELECT%201%2B1") as resp:
        assert resp.read() == b"2\n"
        assert resp.headers["X-ClickHouse-Format"] == "TabSeparated"
    query = urllib.parse.quote("SELECT * FROM missing_table")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{server.url}/?query={query}")
    assert err.value.code == 404
    assert err.value.headers["X-ClickHouse-Exception-Code"] == "60"
    assert err.value.read().startswith(b"Code: 60. DB::Exception: ")


def test_connect_handshake(client: Client) -> None:
    assert client.server_version is not None and client.server_version.split(".")[0] >= "26"
    assert client.command("SELECT 1") == 1
    assert client.command("SELECT 'a', 2") == ["a", "2"]


def test_insert_arrow_query_arrow_round_trip(client: Client) -> None:
    client.command(FABRIC_DDL.format(name="fabric", settings=""))
    expected = fabric_table(10_000, seed=7)
    summary = client.insert_arrow("fabric", expected)
    assert summary.written_rows == 10_000
    got = client.query_arrow("SELECT ts, host, prio, value FROM fabric ORDER BY ts")
    assert got.num_rows == 10_000
    assert got.schema.field("ts").type == pa.timestamp("ns", tz="UTC")
    assert got.schema.field("prio").type == pa.int8()
    assert got.schema.field("value").type == pa.float64()
    assert got["ts"].cast(pa.int64()).to_pylist() == expected["ts"].cast(pa.int64()).to_pylist()
    for name in ("host", "prio", "value"):
        assert got[name].to_pylist() == expected[name].to_pylist(), name


def test_bound_parameters_are_inert(client: Client) -> None:
    client.command("CREATE TABLE x (name String, n Int8) ENGINE = MergeTree ORDER BY name")
    client.insert("x", [["alice", 1], ["bob", 2]], column_names=["name", "n"])
    got = client.query_arrow("SELECT * FROM x WHERE name = {name:String}", parameters={"name": EVIL})
    assert got.num_rows == 0
    assert client.command("EXISTS TABLE x") == 1
    assert client.command("SELECT count() FROM x") == 2
    echoed = client.query_arrow("SELECT {p:String} AS p, {n:Int8} AS n", parameters={"p": EVIL, "n": -5})
    assert echoed.to_pylist() == [{"p": EVIL, "n": -5}]
    big = EVIL * 400  # > 4 KiB of bind values: clickhouse-connect switches to multipart/form-data
    assert client.command("SELECT length({p:String})", parameters={"p": big}) == len(big.encode())


def test_insert_deduplication_token(client: Client) -> None:
    window = "SETTINGS non_replicated_deduplication_window = 100"
    client.command(FABRIC_DDL.format(name="dedup", settings=window))
    first, second = fabric_table(100, seed=1), fabric_table(100, seed=2)
    client.insert_arrow("dedup", first, settings={"insert_deduplication_token": "batch-1"})
    client.insert_arrow("dedup", second, settings={"insert_deduplication_token": "batch-1"})
    assert client.command("SELECT count() FROM dedup") == 100
    client.insert_arrow("dedup", second, settings={"insert_deduplication_token": "batch-2"})
    assert client.command("SELECT count() FROM dedup") == 200
    rows = [[0, "h", 1, 0.5]]
    cols = ["ts", "host", "prio", "value"]
    for _ in range(2):  # Native inserts honour the setting too
        client.insert("dedup", rows, column_names=cols, settings={"insert_deduplication_token": "native-1"})
    assert client.command("SELECT count() FROM dedup") == 201
    assert client.command("SELECT getSetting('insert_deduplication_token')") == ""  # per request only


def test_sql_error_raises_database_error(client: Client) -> None:
    with pytest.raises(DatabaseError) as err:
        client.query("SELECT * FROM missing_table")
    assert err.value.code == 60
    assert "Code: 60. DB::Exception:" in str(err.value) and "UNKNOWN_TABLE" in str(err.value)
    with pytest.raises(DatabaseError, match="SYNTAX_ERROR"):
        client.command("SELEC 1")
    with pytest.raises(DatabaseError, match="UNKNOWN_SETTING"):
        client.query("SELECT 1", settings={"no_such_setting_xyz": 1})
    assert client.command("SELECT 42") == 42  # the connection and session are still usable


@pytest.mark.parametrize("compress", ["lz4", "zstd", "gzip", False])
def test_native_insert_and_query(server: ChdbHttpServer, compress: str | bool) -> None:
    client = connect(server, compress=compress)
    client.command(FABRIC_DDL.format(name="native", settings=""))
    start = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [[start + timedelta(microseconds=7 * i), f"gpu-{i % 7}", i % 256 - 128, i / 3] for i in range(5000)]
    summary = client.insert("native", rows, column_names=["ts", "host", "prio", "value"])
    assert summary.written_rows == 5_000
    sql = "SELECT toUnixTimestamp64Micro(ts), host, prio, value FROM native ORDER BY ts"
    got = client.query(sql).result_rows
    micros = int(start.timestamp()) * 1_000_000
    assert [list(r) for r in got] == [[micros + 7 * i, *r[1:]] for i, r in enumerate(rows)]
    df = client.query_df("SELECT host, count() AS n FROM native GROUP BY host ORDER BY host")
    assert df["n"].sum() == 5_000 and len(df) == 7
    client.close()


def test_settings_and_database_are_per_request(client: Client, server: ChdbHttpServer) -> None:
    probe = "SELECT getSetting('max_execution_time')"
    assert client.command(probe, settings={"max_execution_time": 7}) == 7
    assert client.command(probe) == 0
    client.command("CREATE DATABASE other")
    client.command("CREATE TABLE other.t (a Int8) ENGINE = Memory")
    other = connect(server, database="other")
    assert other.command("SELECT currentDatabase()") == "other"
    assert other.command("SHOW TABLES") == "t"
    assert client.command("SELECT currentDatabase()") == "default"
    other.close()
