"""Serve an embedded chdb session over ClickHouse's HTTP interface, on loopback.

Why this exists: no modern ClickHouse server can be installed on these machines, so tests run the real
``clickhouse-connect`` HTTP client path (connect handshake, Native/Arrow reads, compressed Native and Arrow
inserts, ``{name:Type}`` binding, settings, errors) against the real ClickHouse engine, chdb, served over
HTTP by this facade. It only does transport; chdb produces and parses every data format:

* the statement is the ``query`` URL argument, a newline, then the body (as ClickHouse joins them); after
  ``INSERT ... FORMAT X`` the rest is data, streamed through ``Session.send_insert``; multipart form
  bodies (used for large bind values) are read as fields; ``param_*`` arguments become chdb ``params``;
* other URL arguments are settings, ``SET`` for the request and restored after it, except transport
  arguments; ``database`` is applied with ``USE`` per request (the server default when absent);
* request bodies may be chunked and lz4/zstd/gzip/deflate encoded; responses are never compressed;
* errors carry ClickHouse's HTTP status, ``X-ClickHouse-Exception-Code`` and a ``Code: N. DB::Exception``
  body, so clickhouse-connect raises ``DatabaseError`` with the engine's message.

* with an ``ssl_context`` it serves https (the stdlib's TLS on the listening socket), for the client's TLS path.

* every request's ``Host`` must name loopback or the bound address, and its credentials must match the one user
  (``default`` with an empty password unless given, as a stock ClickHouse); with ``readonly=True`` only read
  statements that stay inside the store run, and the session is ``readonly=2`` (``chdb_http_guard`` says why and
  how). Refusals are logged in one line each and counted in ``refusals``.

Limits: one chdb session serves all clients one request at a time (``session_id`` is ignored, ``SET`` and
temporary tables are shared); one user; no external data, progress headers, or ClickHouse-native
``compress``/``decompress`` framing.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import logging
import re
import ssl
import threading
import time
import uuid
import zlib
from collections import Counter
from email.message import Message
from email.parser import BytesParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any, NamedTuple, cast
from urllib.parse import parse_qsl, urlsplit

from rocescope.testbed.chdb_http_guard import ReadOnlyGuard, Refused, check_credentials, check_host, claimed_user

if TYPE_CHECKING:
    from chdb.session import Session

__all__ = ["ChdbHttpServer"]

log = logging.getLogger(__name__)

# URL parameters consumed by ClickHouse's HTTP handler itself (or meaningless here): never settings.
_TRANSPORT_PARAMS = frozenset(
    {
        *("query", "database", "default_format", "query_id", "user", "password", "quota_key", "role"),
        *("session_id", "session_timeout", "session_check", "compress", "decompress", "buffer_size"),
        *("wait_end_of_query", "http_wait_end_of_query", "client_protocol_version", "stacktrace"),
        *("enable_http_compression", "http_zlib_compression_level", "http_response_buffer_size"),
        *("send_progress_in_http_headers", "http_headers_progress_interval_ms", "add_http_cors_header"),
        "cancel_http_readonly_queries_on_client_close",
    }
)
# ClickHouse's exceptionCodeToHTTPStatus (src/Server/HTTP/exceptionCodeToHTTPStatus.cpp); default 500.
_HTTP_STATUS = {
    **dict.fromkeys((6, 8, 15, 25, 26, 27, 36, 37, 38, 41, 44, 53, 62, 72, 117, 123, 167, 168), 400),
    **dict.fromkeys((223, 321, 376, 427, 441, 675, 676), 400),
    **dict.fromkeys((46, 47, 50, 56, 60, 63, 73, 78, 81, 115, 152, 336, 511), 404),
    **dict.fromkeys((192, 193, 497, 512, 516), 403),
    **{194: 401, 48: 501, 159: 408, 229: 413, 381: 411, 779: 415, 76: 503, 209: 503, 439: 503},
}
_SQL_PREFIX = rb"(?:\s+|--[^\n]*\n|/\*.*?\*/)*"
# INSERT ... FORMAT X: the data starts after the FORMAT name, its blanks and at most one line break.
_INSERT_RE = re.compile(
    _SQL_PREFIX + rb"(INSERT\s+INTO\s(?:(?!\bVALUES\b|\bSELECT\b).)*?)\bFORMAT\s+(\w+)[ \t\f]*\r?\n?",
    re.IGNORECASE | re.DOTALL,
)
_TRAILING_FORMAT_RE = re.compile(r"\bFORMAT\s+(\w+)(?:\s+SETTINGS\b[^;]*)?[\s;]*\Z", re.IGNORECASE)
_RESULT_RE = re.compile(
    _SQL_PREFIX.decode() + r"\(*\s*(?:SELECT|WITH|SHOW|DESC|DESCRIBE|EXISTS|EXPLAIN|CHECK)\b",
    re.IGNORECASE | re.DOTALL,
)
_SESSION_STATE_RE = re.compile(_SQL_PREFIX.decode() + r"(?:SET|USE)\b", re.IGNORECASE | re.DOTALL)
_CODE_RE = re.compile(r"Code: (\d+)\. ")
_SETTING_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_HEAD = 1 << 20  # longest INSERT statement searched for before its data


class _Outcome(NamedTuple):
    body: bytes
    fmt: str | None  # output format, only for statements that produce a result
    summary: dict[str, str]


def _fail(code: int, name: str, text: str) -> RuntimeError:
    return RuntimeError(f"Code: {code}. DB::Exception: {text}. ({name})")


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _identifier(name: str) -> str:
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def _decompress(data: bytes, encoding: str) -> bytes:
    enc = encoding.strip().lower()
    if enc in ("", "identity"):
        return data
    if enc == "gzip":
        return gzip.decompress(data)
    if enc == "deflate":
        return zlib.decompress(data)
    if enc == "zstd":  # one frame per block: read across frames
        import zstandard

        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True)
        return bytes(reader.read())
    if enc == "lz4":  # clickhouse-connect sends one lz4 frame per block
        import lz4.frame

        out: list[bytes] = []
        while data:
            dec = lz4.frame.LZ4FrameDecompressor()
            out.append(dec.decompress(data))
            if not dec.eof:
                raise _fail(1001, "STD_EXCEPTION", "Truncated lz4 request body")
            data = dec.unused_data
        return b"".join(out)
    raise _fail(36, "BAD_ARGUMENTS", f"Unsupported Content-Encoding {encoding!r}")


def _form_fields(content_type: str, body: bytes) -> dict[str, str]:
    """Plain fields of a multipart/form-data body; file parts (external data) are not supported."""
    message = BytesParser().parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    fields: dict[str, str] = {}
    for part in cast("list[Message]", message.get_payload()):
        if part.get_filename():
            raise _fail(48, "NOT_IMPLEMENTED", "External data is not supported by the chdb HTTP facade")
        payload = part.get_payload(decode=True)
        fields[str(part.get_param("name", header="content-disposition"))] = bytes(payload).decode()
    return fields


def _error_text(ex: BaseException) -> tuple[int, str]:
    message = str(ex)
    found = _CODE_RE.search(message)
    if found is None:
        return 1001, f"Code: 1001. DB::Exception: {type(ex).__name__}: {message}. (STD_EXCEPTION)"
    return int(found.group(1)), message[found.start() :]


class ChdbHttpServer:
    """ClickHouse HTTP interface (enough for clickhouse-connect) over one chdb session, on loopback.

    ``user``/``password``: the one user's credentials (a stock ClickHouse's ``default`` with no password unless
    given); ``readonly``: serve only reads that stay inside the store (``chdb_http_guard``), as `serve-http` does.
    """

    def __init__(
        self,
        session: Session,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        *,
        user: str = "default",
        password: str = "",
        readonly: bool = False,
    ) -> None:
        self._session: Any = session  # chdb's Session methods carry no annotations
        self.user = user
        self._password = password
        self.readonly = readonly
        self._guard: ReadOnlyGuard | None = None
        self.refusals: Counter[str] = Counter()  # refused requests by kind (host, auth, statement)
        self._refusals_lock = threading.Lock()  # handler threads count concurrently
        self._lock = threading.Lock()
        self._timezone = "UTC"
        self._default_db = "default"
        self._current_db: str | None = None  # None: unknown, USE before the next statement
        self._baseline: dict[str, str] | None = None  # changed session settings, None: re-read
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._httpd = _Server((host, port), _Handler)
        self._httpd.facade = self
        self._scheme = "http"
        if ssl_context is not None:  # https; the handshake runs in the connection's thread, not the accept loop
            self._httpd.socket = ssl_context.wrap_socket(
                self._httpd.socket, server_side=True, do_handshake_on_connect=False
            )
            self._scheme = "https"

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{self._scheme}://{self._httpd.server_address[0]!s}:{self.port}"

    def start(self) -> ChdbHttpServer:
        with self._lock:
            row = self._session.query("SELECT timezone(), currentDatabase()", "TabSeparated").bytes()
            self._timezone, self._default_db = row.decode().rstrip("\n").split("\t")
            self._current_db = self._default_db
            if self.readonly:
                self._guard = ReadOnlyGuard(self._session)
        serve = self._httpd.serve_forever
        self._thread = threading.Thread(target=serve, args=(0.05,), name="chdb-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped = True
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join()
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ChdbHttpServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _execute(self, params: dict[str, str], body: bytes) -> _Outcome:
        """Run one HTTP request's statement: ``params`` are the URL arguments, ``body`` the decoded body."""
        query = params.get("query", "")
        text = (query.encode() + b"\n" if query else b"") + body
        if not text.strip():
            raise _fail(62, "SYNTAX_ERROR", "Empty query")
        binds = {k.removeprefix("param_"): v for k, v in params.items() if k.startswith("param_")}
        settings = {k: v for k, v in params.items() if not (k in _TRANSPORT_PARAMS or k.startswith("param_"))}
        for name in settings:
            if not _SETTING_NAME_RE.match(name):
                raise _fail(115, "UNKNOWN_SETTING", f"Unknown setting {name!r}")
            if self._guard is not None:
                self._guard.check_setting(name)
        with self._lock:
            database = params.get("database") or self._default_db  # per request, as without a session
            if database != self._current_db:
                self._current_db = None
                self._session.query(f"USE {_identifier(database)}", "TabSeparated")
                self._current_db = database
            if self._guard is not None:  # parsed with the session's settings, before the request's own
                insert = _INSERT_RE.match(text, 0, _MAX_HEAD)
                if insert is not None:
                    raise self._guard.refuse_insert(insert.group(1).decode(errors="replace"))
                self._guard.check_statement(text.decode(), binds)
            restore = self._restore_statement(settings)
            try:
                if settings:
                    assignments = ", ".join(f"{k} = {_literal(v)}" for k, v in settings.items())
                    self._session.query(f"SET {assignments}", "TabSeparated")
                return self._run(text, binds, params.get("default_format") or "TabSeparated")
            finally:
                if restore:
                    with contextlib.suppress(Exception):
                        self._session.query(restore, "TabSeparated")

    def _restore_statement(self, settings: dict[str, str]) -> str | None:
        """The SET statement putting ``settings`` back to their session values (cached until a SET)."""
        if not settings:
            return None
        if self._baseline is None:
            sql = "SELECT name, value FROM system.settings WHERE changed"
            self._baseline = dict(json.loads(self._session.query(sql, "JSONCompact").bytes())["data"])
        old = {k: self._baseline.get(k) for k in settings}
        return "SET " + ", ".join(f"{k} = {'DEFAULT' if v is None else _literal(v)}" for k, v in old.items())

    def _run(self, text: bytes, binds: dict[str, str], default_format: str) -> _Outcome:
        started = time.perf_counter_ns()
        insert = _INSERT_RE.match(text, 0, _MAX_HEAD)
        if insert is not None:
            data = memoryview(text)[insert.end() :]
            with self._session.send_insert(insert.group(1).decode().strip(), insert.group(2).decode()) as ins:
                if data:
                    ins.append(data)
                written = ins.finish()
            rows, size = written.rows_written, written.bytes_written
            summary = {"written_rows": str(rows), "written_bytes": str(size)}
            return _Outcome(b"", None, {**summary, "elapsed_ns": str(time.perf_counter_ns() - started)})
        sql = text.decode()
        trailing = _TRAILING_FORMAT_RE.search(sql)
        fmt = trailing.group(1) if trailing else default_format
        if _SESSION_STATE_RE.match(sql):  # the statement may change the session's settings or database
            self._baseline = None
            self._current_db = None
        result = self._session.query(sql, fmt, params=binds)
        out = result.bytes()
        summary = {
            "read_rows": str(result.rows_read()),
            "read_bytes": str(result.bytes_read()),
            "written_rows": str(result.rows_written()),
            "written_bytes": str(result.bytes_written()),
            "result_bytes": str(len(out)),
            "elapsed_ns": str(time.perf_counter_ns() - started),
        }
        producing = trailing is not None or _RESULT_RE.match(sql) is not None
        return _Outcome(out, fmt if producing else None, summary)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    facade: ChdbHttpServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as clickhouse-connect's pooled connections expect
    timeout = 60  # drop idle keep-alive connections
    disable_nagle_algorithm = True  # headers and body are separate writes: avoid 40 ms delayed-ACK stalls

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._serve(b"")

    def do_HEAD(self) -> None:
        self._serve(b"")

    def do_POST(self) -> None:
        self._serve(self._read_body())

    def _read_body(self) -> bytes:
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chunks: list[bytes] = []
        while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline().strip():  # trailer headers
            pass
        return b"".join(chunks)

    def _reply(self, status: int, body: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _refuse(self, refused: Refused, params: dict[str, str], headers: dict[str, str]) -> None:
        """Answer a refusal as ClickHouse would, and log it in one line: who, and why."""
        assert isinstance(self.server, _Server)
        facade = self.server.facade
        with facade._refusals_lock:
            facade.refusals[refused.kind] += 1
        client = f"{self.client_address[0]}:{self.client_address[1]}"
        user, host = claimed_user(self.headers, params), self.headers.get("Host")
        log.warning("refused %s from %s (user %r, Host %r): %s", refused.kind, client, user, host, refused.reason)
        headers["X-ClickHouse-Exception-Code"] = str(refused.code)
        headers["Content-Type"] = "text/plain; charset=UTF-8"
        self._reply(refused.status, str(refused).encode() + b"\n", headers)

    def _serve(self, body: bytes) -> None:
        assert isinstance(self.server, _Server)
        facade = self.server.facade
        if facade._stopped:
            self.close_connection = True
            return
        url = urlsplit(self.path)
        params = dict(parse_qsl(url.query, keep_blank_values=True))
        query_id = params.get("query_id") or str(uuid.uuid4())
        headers = {"X-ClickHouse-Query-Id": query_id, "X-ClickHouse-Timezone": facade._timezone}
        try:
            check_host(self.headers.get("Host"), str(self.server.server_address[0]))
            if url.path.rstrip("/") == "/ping" or (url.path == "/" and "query" not in params and not body):
                self._reply(200, b"Ok.\n", {"Content-Type": "text/html; charset=UTF-8"})
                return
            check_credentials(self.headers, params, facade.user, facade._password)
        except Refused as refused:
            self._refuse(refused, params, headers)
            return
        try:
            body = _decompress(body, self.headers.get("Content-Encoding", ""))
            content_type = self.headers.get("Content-Type", "")
            if content_type.startswith("multipart/form-data"):
                params.update(_form_fields(content_type, body))
                body = b""
            outcome = facade._execute(params, body)
        except Refused as refused:
            self._refuse(refused, params, headers)
            return
        except Exception as ex:
            code, message = _error_text(ex)
            headers["X-ClickHouse-Exception-Code"] = str(code)
            headers["Content-Type"] = "text/plain; charset=UTF-8"
            self._reply(_HTTP_STATUS.get(code, 500), message.encode() + b"\n", headers)
            return
        headers["X-ClickHouse-Timezone"] = params.get("session_timezone") or facade._timezone
        headers["X-ClickHouse-Summary"] = json.dumps(outcome.summary)
        headers["Content-Type"] = "application/octet-stream"
        if outcome.fmt is not None:
            headers["X-ClickHouse-Format"] = outcome.fmt
            if outcome.fmt.startswith(("TabSeparated", "TSV", "CSV", "JSON", "Pretty")):
                headers["Content-Type"] = "text/plain; charset=UTF-8"
        self._reply(200, outcome.body, headers)
