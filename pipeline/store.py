"""The store seam: a ClickHouse server (clickhouse-connect) or embedded chdb at a directory.

Both backends take the same DDL and the same parameterized SQL (`{name:Type}` placeholders bound by
the engine, never pasted into the text), and both insert Arrow through their fastest bulk path:
chdb reads the Arrow table in place (`Python()` table function); the server gets Arrow over HTTP.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self
from urllib.parse import urlparse

import pyarrow as pa

from rocescope import schema
from rocescope.config import StoreConfig
from rocescope.errors import StoreError

if TYPE_CHECKING:
    import polars as pl

log = logging.getLogger(__name__)

_TOKEN = re.compile(r"^[A-Za-z0-9_.:/\-]{1,512}$")


class Store(Protocol):
    database: str

    def insert(self, table: str, data: pa.Table, dedup_token: str | None = None) -> int: ...
    def query_arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table: ...
    def query_bytes(self, sql: str, fmt: str, params: Mapping[str, Any] | None = None) -> bytes: ...
    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc_info: object) -> None: ...


def query_polars(store: Store, sql: str, params: Mapping[str, Any] | None = None) -> pl.DataFrame:
    """The polars view of a query, for detectors and notebooks."""
    import polars as pl  # not at import: `rocescope findings` reads the store without polars

    frame = pl.from_arrow(store.query_arrow(sql, params))
    assert isinstance(frame, pl.DataFrame)
    return frame


def _insert_settings(dedup_token: str | None) -> dict[str, Any]:
    """Settings of every bulk insert; a token makes a retried insert (and its rollups) land once."""
    # The rollup view's blocks are already grouped: re-collapsing them on insert is wasted work.
    settings: dict[str, Any] = {"optimize_on_insert": 0}
    if dedup_token:
        settings["insert_deduplication_token"] = check_token(dedup_token)
        settings["deduplicate_blocks_in_dependent_materialized_views"] = 1
    return settings


#: ClickHouse parses a parameter's text in its escaped (TSV) format: backslash-quote would arrive as a
#: quote, a lone backslash or a tab would be refused. Escaping them makes every string arrive as given.
_PARAM_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _param_text(value: Any, nested: bool = False) -> Any:
    """A parameter as the text ClickHouse parses: datetimes in UTC without offset suffix; arrays as
    `['a', 'b']` literals with quotes and backslashes escaped (chdb binds only scalars itself), tuples inside them
    as `('a', 1)` (an `Array(Tuple(...))`); strings in the escaped format, so they match literally."""
    if isinstance(value, dt.datetime):
        value = value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value
        value = value.isoformat(sep=" ")
    if nested and isinstance(value, tuple):
        return "(" + ", ".join(str(_param_text(v, nested=True)) for v in value) + ")"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(str(_param_text(v, nested=True)) for v in value) + "]"
    if nested and isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, str):
        return value.translate(_PARAM_ESCAPES)
    return value


def _bindable(params: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _param_text(value) for name, value in params.items()}


def _known_table(table: str) -> str:
    if table not in schema.TABLES:
        raise StoreError(f"unknown table {table!r}")
    return table


def _known_columns(table: str, data: pa.Table) -> list[str]:
    """Table and column names go into SQL text: accept only those `schema` declares."""
    allowed = set(schema.TABLES[_known_table(table)].column_names)
    unknown = [c for c in data.column_names if c not in allowed]
    if unknown:
        raise StoreError(f"{table}: unknown columns {unknown}")
    return list(data.column_names)


def check_token(token: str) -> str:
    """Deduplication tokens are made by the sink from topic/partition/offsets; refuse anything else."""
    if not _TOKEN.match(token):
        raise StoreError(f"invalid insert deduplication token {token!r}")
    return token


class _Closing:
    """Stores are context managers, so an error never leaves a chdb directory locked."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


#: `store.max_threads` from the environment, for embedded stores opened without the configuration
MAX_THREADS_ENV = "ROCESCOPE_STORE__MAX_THREADS"


class ChdbStore(_Closing):
    """Embedded ClickHouse in this process. One process owns a directory at a time (file lock)."""

    def __init__(self, path: Path | str, database: str = "rocescope", max_threads: int | None = None):
        """`max_threads` as `store.max_threads`; None: its environment variable's (`ROCESCOPE_STORE__MAX_THREADS`),
        so every embedded store of a process follows it, however it was opened."""
        from chdb import session as chdb_session

        self.path = Path(path).resolve()
        self.database = database
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.path / ".rocescope.lock", "a+")  # noqa: SIM115 - held for the store's life
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise StoreError(
                f"store directory {self.path} is in use by another rocescope process; "
                "stop it, or point this one at a ClickHouse server (store.backend: clickhouse)"
            ) from None
        self._lock_file.truncate(0)
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()
        self._mutex = threading.Lock()
        self._session: Any = chdb_session.Session(str(self.path))  # type: ignore[no-untyped-call]
        if max_threads is None:
            try:
                max_threads = int(os.environ.get(MAX_THREADS_ENV, "0") or 0)
            except ValueError:
                raise StoreError(f"{MAX_THREADS_ENV} must be a whole number of threads") from None
        if max_threads > 0:
            self.command(f"SET max_threads = {int(max_threads)}")
        self.command(f"CREATE DATABASE IF NOT EXISTS `{database}`")
        self.command(f"USE `{database}`")

    def _run(self, sql: str, fmt: str, params: Mapping[str, Any] | None) -> Any:
        with self._mutex:
            try:
                return self._session.query(sql, fmt, params=_bindable(params) if params else None)
            except Exception as exc:  # chdb raises bare RuntimeError for every SQL error
                raise StoreError(f"chdb: {_first_line(str(exc))}") from exc

    def insert(self, table: str, data: pa.Table, dedup_token: str | None = None) -> int:
        if data.num_rows == 0:
            return 0
        cols = ", ".join(f"`{c}`" for c in _known_columns(table, data))
        settings = " SETTINGS " + ", ".join(
            f"{k} = '{v}'" if isinstance(v, str) else f"{k} = {v}" for k, v in _insert_settings(dedup_token).items()
        )
        arrow_data = data  # read in place by name by chdb's Python() table function
        sql = f"INSERT INTO `{self.database}`.`{table}` ({cols}){settings} SELECT {cols} FROM Python(arrow_data)"  # noqa: S608 - names checked against the schema
        with self._mutex:
            try:
                self._session.query(sql)
            except Exception as exc:
                raise StoreError(f"chdb insert into {table}: {_first_line(str(exc))}") from exc
        del arrow_data
        return int(data.num_rows)

    def query_arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        # The Arrow file read here as chdb's "ArrowTable" format reads it, without the pandas import it adds (0.25 s).
        result = self._run(sql, "Arrow", params)
        if len(result) == 0:
            return pa.Table.from_batches([], schema=pa.schema([]))
        return pa.RecordBatchFileReader(result.get_memview().view()).read_all()

    def query_bytes(self, sql: str, fmt: str, params: Mapping[str, Any] | None = None) -> bytes:
        """Raw output in any ClickHouse format (CSV, JSONEachRow, Parquet, Pretty...)."""
        return bytes(self._run(sql, fmt, params).bytes())

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        self._run(sql, "CSV", params)

    @property
    def session(self) -> Any:
        """The chdb session, for serving it over HTTP (tests, notebooks)."""
        return self._session

    def close(self) -> None:
        if self._lock_file.closed:
            return
        with self._mutex:
            self._session.close()
        self._lock_file.close()


class ClickHouseStore(_Closing):
    """A ClickHouse server or cluster over HTTP(S) through clickhouse-connect."""

    def __init__(self, cfg: StoreConfig):
        import clickhouse_connect
        from clickhouse_connect.driver.exceptions import ClickHouseError

        self._errors: tuple[type[BaseException], ...] = (ClickHouseError, OSError)
        url = urlparse(cfg.url)
        self.database = cfg.database
        try:
            self._client = clickhouse_connect.get_client(
                interface=url.scheme or "http",
                host=url.hostname or "127.0.0.1",
                port=url.port or (8443 if url.scheme == "https" else 8123),
                username=cfg.user,
                password=cfg.password.get_secret_value(),
                verify=cfg.verify_tls,
                ca_cert=str(cfg.ca_cert) if cfg.ca_cert else None,
                autogenerate_session_id=False,
                connect_timeout=4,  # an unreachable server is one error line in seconds
            )
        except self._errors as exc:
            reason = _unreachable_reason(exc)
            if reason is None:  # it answered: a password, TLS or database problem, in its own words
                raise StoreError(f"ClickHouse at {cfg.url}: {_first_line(str(exc))}") from exc
            raise StoreError(
                f"cannot reach ClickHouse at {cfg.url} ({reason}): point store.url (ROCESCOPE_STORE__URL) at your "
                "server (deploy/compose starts one), serve the embedded store with `rocescope serve-http`, or use "
                "it directly with store.backend: chdb"
            ) from exc
        self.command(f"CREATE DATABASE IF NOT EXISTS `{cfg.database}`")
        self._client.database = cfg.database

    def insert(self, table: str, data: pa.Table, dedup_token: str | None = None) -> int:
        if data.num_rows == 0:
            return 0
        settings = _insert_settings(dedup_token)
        _known_columns(table, data)
        # The sink's table joins many messages' batches, each with its own dictionaries; the Arrow IPC file
        # clickhouse-connect sends allows one dictionary per column, so give every batch the same one.
        data = data.unify_dictionaries()
        try:
            self._client.insert_arrow(table, data, database=self.database, settings=settings)
        except self._errors as exc:
            raise StoreError(f"clickhouse insert into {table}: {_first_line(str(exc))}") from exc
        return int(data.num_rows)

    def query_arrow(self, sql: str, params: Mapping[str, Any] | None = None) -> pa.Table:
        try:
            result = self._client.query_arrow(sql, parameters=dict(params or {}))
        except self._errors as exc:
            raise StoreError(f"clickhouse: {_first_line(str(exc))}") from exc
        assert isinstance(result, pa.Table)
        return result

    def query_bytes(self, sql: str, fmt: str, params: Mapping[str, Any] | None = None) -> bytes:
        try:
            raw = self._client.raw_query(sql, parameters=dict(params or {}), fmt=fmt)
        except self._errors as exc:
            raise StoreError(f"clickhouse: {_first_line(str(exc))}") from exc
        return bytes(raw)

    def command(self, sql: str, params: Mapping[str, Any] | None = None) -> None:
        try:
            self._client.command(sql, parameters=dict(params or {}))
        except self._errors as exc:
            raise StoreError(f"clickhouse: {_first_line(str(exc))}") from exc

    def close(self) -> None:
        self._client.close()


def open_store(cfg: StoreConfig) -> ChdbStore | ClickHouseStore:
    """The store the configuration names."""
    if cfg.backend == "chdb":
        return ChdbStore(cfg.path, cfg.database, cfg.max_threads or None)
    return ClickHouseStore(cfg)


def _unreachable_reason(exc: BaseException) -> str | None:
    """Why a server could not be reached, in a few words (clickhouse-connect wraps urllib3's error text); None
    when it was reached and answered."""
    text = str(exc)
    for needle, reason in (
        ("Connection refused", "connection refused"),
        ("Failed to resolve", "unknown host"),
        ("Name or service not known", "unknown host"),
        ("timed out", "no answer"),
    ):
        if needle in text:
            return reason
    return None if "Received ClickHouse exception" in text else _first_line(text)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def table_schema_check(store: Store, table: str) -> list[str]:
    """Differences between the live table and `schema` (empty when they agree)."""
    live = store.query_arrow(
        f"SELECT * FROM `{store.database}`.`{_known_table(table)}` LIMIT 0 "  # noqa: S608 - a schema table
        "SETTINGS output_format_arrow_low_cardinality_as_dictionary = 1"
    ).schema
    want = schema.arrow_schema(table)
    problems = []
    for field in want:
        if field.name not in live.names:
            problems.append(f"{table}.{field.name}: missing")
        elif live.field(field.name).type != field.type:
            problems.append(f"{table}.{field.name}: {live.field(field.name).type} != {field.type}")
    return problems
