"""`rocescope serve-http` is safe by default: read-only, password, loopback Host (issue 18, part 5).

Everything runs for real: the facade on loopback over a migrated chdb store, requests over HTTP (http.client,
so the Host header and the credentials are exactly what the test says) and through clickhouse-connect, and the
`rocescope serve-http` command itself as a process.
"""

from __future__ import annotations

import base64
import http.client
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import clickhouse_connect
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore
from rocescope.testbed.chdb_http import ChdbHttpServer
from rocescope.testbed.tansu import free_port

from samples import sample_table

PASSWORD = "guard-pw-7Qx"
LINKS = 3  # rows in rocescope.links; every refused write must leave them
ROCESCOPE = str(Path(sys.executable).with_name("rocescope"))


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


AUTH = {"Authorization": basic("default", PASSWORD)}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChdbHttpServer]:
    """The read-only facade with a password, as `serve-http` starts it, over a store holding a few links."""
    store = ChdbStore(tmp_path_factory.mktemp("guard") / "chdb")
    migrate(store, ttl_days=0)
    store.insert("links", sample_table("links", LINKS, device="leaf-1"))
    with ChdbHttpServer(store.session, password=PASSWORD, readonly=True) as server:
        yield server
    store.close()


def request(
    server: ChdbHttpServer | int, sql: str, headers: dict[str, str] | None = None, path: str = "/"
) -> tuple[int, dict[str, str], str]:
    """POST ``sql`` as the body; ``headers`` as given (AUTH by default; a ``Host`` replaces the client's)."""
    port = server if isinstance(server, int) else server.port
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, body=sql.encode(), headers=AUTH if headers is None else headers)
        response = conn.getresponse()
        return response.status, dict(response.headers), response.read().decode()
    finally:
        conn.close()


def links_left(server: ChdbHttpServer) -> int:
    status, _, body = request(server, "SELECT count() FROM rocescope.links")
    assert status == 200, body
    return int(body)


def assert_refused(answer: tuple[int, dict[str, str], str], status: int, code: int, name: str) -> None:
    got_status, headers, body = answer
    assert (got_status, headers.get("X-ClickHouse-Exception-Code")) == (status, str(code)), body
    assert body.startswith(f"Code: {code}. DB::Exception: ") and body.rstrip().endswith(f"({name})"), body


@pytest.mark.parametrize(
    "sql",
    [
        "DROP TABLE rocescope.links",
        "INSERT INTO rocescope.links (device) VALUES ('evil')",
        "INSERT INTO rocescope.links (device) FORMAT CSV\nevil\n",
        "ALTER TABLE rocescope.links DELETE WHERE 1",
        "CREATE TABLE rocescope.evil (a Int32) ENGINE = Memory",
        "TRUNCATE TABLE rocescope.links",
        "RENAME TABLE rocescope.links TO rocescope.gone",
        "SET readonly = 0",
        "/* a comment first */ drop\n\ttable `rocescope`.`links`",
    ],
)
def test_writes_and_ddl_are_refused_as_readonly(served: ChdbHttpServer, sql: str) -> None:
    assert_refused(request(served, sql), 403, 164, "READONLY")
    assert links_left(served) == LINKS


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM file('/etc/passwd', 'LineAsString')",
        "select * from FILE('/etc/passwd', 'LineAsString')",
        "SELECT * FROM `file` /* hidden */ (\n'/etc/passwd', 'LineAsString')",
        "SELECT * FROM \"File\"('/etc/passwd', 'LineAsString')",
        "SELECT file('/etc/passwd')",
        "SELECT count() FROM rocescope.links WHERE device IN (SELECT line FROM file('/etc/passwd', 'LineAsString'))",
        "SELECT * FROM view(SELECT * FROM file('/etc/passwd', 'LineAsString'))",
        "DESCRIBE TABLE file('/etc/passwd', 'LineAsString')",
        "SELECT * FROM url('http://127.0.0.1:1/', 'CSV', 'a String')",
        "SELECT * FROM s3('http://127.0.0.1:1/b/k.csv', 'CSV', 'a String')",
        "SELECT * FROM remote('127.0.0.1:1', system.one)",
        "SELECT * FROM python('os')",
        "SELECT * FROM executable('id', 'TSV', 'a String')",
    ],
)
def test_table_functions_reaching_outside_the_store_are_refused(served: ChdbHttpServer, sql: str) -> None:
    answer = request(served, sql)
    assert_refused(answer, 403, 497, "ACCESS_DENIED")
    assert "root:" not in answer[2]


def test_into_outfile_is_refused_and_writes_nothing(served: ChdbHttpServer, tmp_path: Path) -> None:
    target = tmp_path / "out.tsv"
    assert_refused(request(served, f"SELECT 42 INTO OUTFILE '{target}'"), 403, 497, "ACCESS_DENIED")
    assert not target.exists()


@pytest.mark.parametrize(
    ("sql", "path"),
    [  # the Template format reads its templates from the files these settings name
        ("SELECT 1 FORMAT Template SETTINGS format_template_resultset = '/etc/passwd'", "/"),
        ("SELECT 1 FORMAT Template", "/?format_template_resultset=%2Fetc%2Fpasswd"),
        (
            "SELECT * FROM (SELECT 1 AS x SETTINGS max_threads = 1) FORMAT Template SETTINGS max_threads = 1, "
            "max_bytes_ratio_before_external_sort = 0.5, `format_template_resultset` = '/etc/passwd'",
            "/",
        ),
        ("SELECT 1", "/?select=" + quote("file('/etc/passwd')")),  # a setting that rewrites the query
        ("SELECT 1", "/?dialect=prql"),  # a setting that changes how the text is parsed
    ],
)
def test_free_text_and_parsing_settings_are_refused(served: ChdbHttpServer, sql: str, path: str) -> None:
    answer = request(served, sql, path=path)
    assert_refused(answer, 403, 164, "READONLY")
    assert "root:" not in answer[2]


def test_several_statements_are_refused(served: ChdbHttpServer) -> None:
    assert_refused(request(served, "SELECT 1; DROP TABLE rocescope.links"), 400, 62, "SYNTAX_ERROR")
    assert links_left(served) == LINKS


def test_a_foreign_host_header_is_refused(served: ChdbHttpServer) -> None:
    """DNS rebinding: a web page at evil.example resolved to 127.0.0.1 sends its own name as Host."""
    for host in ("evil.example", f"evil.example:{served.port}", "localhost.evil.example", "127.0.0.1.nip.io"):
        assert_refused(request(served, "SELECT 1", {**AUTH, "Host": host}), 403, 36, "BAD_ARGUMENTS")
    for host in ("localhost", f"LocalHost:{served.port}", f"127.0.0.1:{served.port}", f"[::1]:{served.port}"):
        assert request(served, "SELECT 1", {**AUTH, "Host": host})[:3:2] == (200, "1\n")


def test_a_request_without_the_password_is_refused(served: ChdbHttpServer) -> None:
    assert_refused(request(served, "SELECT 1", {}), 401, 194, "REQUIRED_PASSWORD")
    assert_refused(request(served, "SELECT 1", {"Authorization": basic("default", "")}), 401, 194, "REQUIRED_PASSWORD")
    wrong = [
        ({"Authorization": basic("default", "guess")}, "/"),
        ({"Authorization": basic("admin", PASSWORD)}, "/"),
        ({"X-ClickHouse-User": "default", "X-ClickHouse-Key": "guess"}, "/"),
        ({}, "/?user=default&password=guess"),
        ({"Authorization": "Bearer " + PASSWORD}, "/"),
        ({**AUTH, "X-ClickHouse-Key": PASSWORD}, "/"),  # two ways at once, as ClickHouse refuses
    ]
    for headers, path in wrong:
        assert_refused(request(served, "SELECT 1", headers, path), 403, 516, "AUTHENTICATION_FAILED")
    right = [
        (AUTH, "/"),
        ({"X-ClickHouse-User": "default", "X-ClickHouse-Key": PASSWORD}, "/"),
        ({}, f"/?user=default&password={PASSWORD}"),
    ]
    for headers, path in right:
        assert request(served, "SELECT 1", headers, path)[:3:2] == (200, "1\n")


def test_each_refusal_is_logged_in_one_line(served: ChdbHttpServer, caplog: pytest.LogCaptureFixture) -> None:
    before = served.refusals.total()
    with caplog.at_level(logging.WARNING, logger="rocescope.testbed.chdb_http"):
        request(served, "DROP TABLE rocescope.links")
        request(served, "SELECT 1", {"Authorization": basic("mallory", "guess")})
        request(served, "SELECT 1", {**AUTH, "Host": "evil.example"})
    lines = [r.getMessage() for r in caplog.records if r.name == "rocescope.testbed.chdb_http"]
    assert len(lines) == 3 and all("\n" not in line for line in lines), lines
    assert "refused statement from 127.0.0.1:" in lines[0] and "DROP" in lines[0]
    assert "refused auth from 127.0.0.1:" in lines[1] and "'mallory'" in lines[1]
    assert "refused host from 127.0.0.1:" in lines[2] and "'evil.example'" in lines[2]
    assert served.refusals.total() == before + 3


def test_reads_work_with_the_password_through_clickhouse_connect(served: ChdbHttpServer) -> None:
    client = clickhouse_connect.get_client(
        host="127.0.0.1", port=served.port, username="default", password=PASSWORD, database="rocescope"
    )
    try:
        assert client.query("SELECT count() FROM links").result_rows == [(LINKS,)]
        odd = "a'b\"c\\d\te\nf -- g /* h */; DROP TABLE links"
        assert client.query("SELECT {s:String} AS s", parameters={"s": odd}).result_rows == [(odd,)]
        assert client.query("SELECT 'x\ty\\\\z\n'").result_rows == [("x\ty\\z\n",)]
        got = client.query_arrow("WITH d AS (SELECT device FROM links) SELECT device FROM d ORDER BY device")
        assert got.column("device").to_pylist() == ["leaf-1"] * LINKS
        assert ("links",) in client.query("SHOW TABLES").result_rows
        assert client.query("EXISTS TABLE links").result_rows == [(1,)]
        assert "device" in [row[0] for row in client.query("DESCRIBE TABLE links").result_rows]
        assert client.query("EXPLAIN SELECT 1").result_rows
        assert client.query("SELECT 1", settings={"max_execution_time": 5, "max_threads": 1}).result_rows == [(1,)]
        with pytest.raises(DatabaseError, match="READONLY"):
            client.command("DROP TABLE links")
        with pytest.raises(DatabaseError, match="ACCESS_DENIED"):
            client.query("SELECT * FROM file('/etc/passwd', 'LineAsString')")
    finally:
        client.close()
    with pytest.raises(DatabaseError, match="AUTHENTICATION_FAILED"):
        clickhouse_connect.get_client(host="127.0.0.1", port=served.port, password="guess")


def serve(tmp_path: Path, *args: str, password: str | None = None) -> tuple[subprocess.Popen[str], int, str]:
    """`rocescope serve-http` on a free port; returns the process, its port and its password (once it serves)."""
    port = free_port()
    env = {**os.environ, "ROCESCOPE_STORE__PATH": str(tmp_path / "chdb"), "PYTHONUNBUFFERED": "1"}
    env.pop("ROCESCOPE_CONFIG", None)
    env.pop("ROCESCOPE_STORE__PASSWORD", None)
    if password is not None:
        env["ROCESCOPE_STORE__PASSWORD"] = password
    command = [ROCESCOPE, "serve-http", "--port", str(port), "--seconds", "60", *args]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    printed = []
    for line in proc.stdout:  # the first line is printed once it listens
        printed.append(line)
        if line.startswith("password (generated for this run): "):
            return proc, port, line.split(": ", 1)[1].strip()
        if line.startswith("serving ") and password is not None:
            return proc, port, password
    raise AssertionError(f"serve-http did not start: {''.join(printed)}")


@pytest.mark.timeout(120)
def test_serve_http_command_is_read_only_with_a_generated_password(tmp_path: Path) -> None:
    proc, port, password = serve(tmp_path)
    try:
        assert len(password) >= 20
        client = clickhouse_connect.get_client(host="127.0.0.1", port=port, password=password, database="rocescope")
        assert client.query("SELECT count() FROM links").result_rows == [(0,)]
        with pytest.raises(DatabaseError, match="READONLY"):
            client.command("DROP TABLE links")
        assert client.query("EXISTS TABLE links").result_rows == [(1,)]
        client.close()
        with pytest.raises(DatabaseError, match="REQUIRED_PASSWORD"):
            clickhouse_connect.get_client(host="127.0.0.1", port=port, database="rocescope")
    finally:
        proc.terminate()
        rest = proc.communicate(timeout=60)[0]
    assert "refused 2 requests (auth 1, statement 1; see the log)" in rest, rest
    assert "refused statement from 127.0.0.1:" in rest and "read-only: DROP" in rest


@pytest.mark.timeout(120)
def test_serve_http_allow_writes_writes_and_still_wants_the_password_and_a_loopback_host(tmp_path: Path) -> None:
    proc, port, password = serve(tmp_path, "--allow-writes", password=PASSWORD)  # configured: not printed
    try:
        client = clickhouse_connect.get_client(host="127.0.0.1", port=port, password=password, database="rocescope")
        client.command("INSERT INTO links (device, port) VALUES ('leaf-1', 'Ethernet0')")
        client.insert("links", [["leaf-2", "Ethernet4"]], column_names=["device", "port"])
        assert client.query("SELECT device FROM links ORDER BY device").result_rows == [("leaf-1",), ("leaf-2",)]
        client.close()
        assert_refused(request(port, "SELECT 1", {}), 401, 194, "REQUIRED_PASSWORD")
        assert_refused(request(port, "SELECT 1", {**AUTH, "Host": "evil.example"}), 403, 36, "BAD_ARGUMENTS")
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
