"""Versioned, idempotent migrations: the same DDL on a ClickHouse server and on embedded chdb.

Every statement is derived from `rocescope.schema` and safe to run again (IF NOT EXISTS,
CREATE OR REPLACE VIEW). Applied versions are recorded in `schema_migrations`; on every run the
live tables are also reconciled with the schema (a column added to `schema.py` is added to the
table) and the metric catalog table is refreshed from `rocescope.catalog` when it changed.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from rocescope import schema
from rocescope.catalog import METRICS
from rocescope.pipeline.rates_sql import port_rates_fresh_sql, port_rates_sql
from rocescope.pipeline.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: Callable[[str, int, int], list[str]]  # (database, ttl_days, rollup_ttl_days) -> SQL
    #: False for a migration that only rebuilds existing tables into what the schema now creates anyway:
    #: DDL for a fresh server (`rocescope clickhouse ddl`) leaves it out
    fresh: bool = True


def _stream_tables(db: str, ttl: int, _rollup_ttl: int) -> list[str]:
    return [schema.ddl(t, ttl, db) for t in ("counters", "packets", "links", "endpoints", "qp_owners", "findings")]


def _catalog_table(db: str, _ttl: int, _rollup_ttl: int) -> list[str]:
    return [schema.ddl("metric_catalog", 0, db)]


def _incidents(db: str, ttl: int, _rollup_ttl: int) -> list[str]:
    return [schema.ddl("incidents", 0, db)]


def _sink_state(db: str, _ttl: int, _rollup_ttl: int) -> list[str]:
    return [schema.ddl("sink_intents", 0, db)]


#: Bookkeeping tables that never expire
_KEPT = ("incidents", "metric_catalog", "sink_intents", "schema_migrations")


def ttl_days_of(table: str, ttl_days: int, rollup_ttl_days: int) -> int:
    """The retention in days each table is created with (0: kept for ever; a table's `fixed_ttl` wins)."""
    if table in _KEPT:
        return 0
    return rollup_ttl_days if table in ("counters_1m", "collectives_1m") else ttl_days


def _sink_messages(db: str, _ttl: int, _rollup_ttl: int) -> list[str]:
    return [schema.ddl("sink_messages", 0, db)]


def _qp_owner_paths(db: str, _ttl: int, _rollup_ttl: int) -> list[str]:
    """qp_owners gained the remote GID and the UDP source port (the QP's ECMP entropy)."""
    table = schema.TABLES["qp_owners"]
    return [
        f"ALTER TABLE `{db}`.`qp_owners` ADD COLUMN IF NOT EXISTS {schema.column_ddl(col)}"
        for col in table.columns
        if col.name in ("dest_gid", "udp_sport")
    ]


def _imports(db: str, _ttl: int, _rollup_ttl: int) -> list[str]:
    return [schema.ddl("imports", 0, db)]


def _views(db: str, _ttl: int, _rollup_ttl: int) -> list[str]:
    return [port_rates_sql(db)]


def _fresh_rates_view(db: str, _ttl: int, _rollup_ttl: int) -> list[str]:
    return [port_rates_fresh_sql(db)]


def _fresh_rates_of_metrics(db: str, _ttl: int, _rollup_ttl: int) -> list[str]:
    return [port_rates_fresh_sql(db, of_metrics=True)]


def _rollup_mv(db: str) -> str:
    return f"""CREATE MATERIALIZED VIEW IF NOT EXISTS `{db}`.`counters_1m_mv` TO `{db}`.`counters_1m` AS
SELECT toStartOfMinute(ts) AS minute, device, role, port, priority, metric,
    count() AS samples, min(value) AS min_value, max(value) AS max_value, sum(value) AS sum_value
FROM `{db}`.`counters`
GROUP BY minute, device, role, port, priority, metric"""


def _rollups(db: str, _ttl: int, rollup_ttl: int) -> list[str]:
    return [
        schema.ddl("counters_1m", rollup_ttl, db),
        _rollup_mv(db),
        f"""CREATE OR REPLACE VIEW `{db}`.`port_rates_1m` AS
SELECT minute, device, role, port, priority, metric, last_value,
    multiIf(delta >= 0, delta, last_value) / 60 AS rate,
    delta < 0 AS reset_or_wrap
FROM
(
    SELECT minute, device, role, port, priority, metric, max(max_value) AS last_value,
        lagInFrame(last_value) OVER w AS prev_value, last_value - prev_value AS delta,
        row_number() OVER w AS n
    FROM `{db}`.`counters_1m`
    WHERE metric IN (SELECT metric FROM `{db}`.`metric_catalog` WHERE kind = 'counter')
    GROUP BY minute, device, role, port, priority, metric
    WINDOW w AS (PARTITION BY device, port, priority, metric ORDER BY minute ASC
                 ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
)
WHERE n > 1""",
    ]


def _resort_counters(db: str, ttl: int, _rollup_ttl: int) -> list[str]:
    """`counters` sorted metric first (schema.COUNTER_SERIES): an existing table is copied into one with the
    new key and exchanged with it, the rollup view re-attached. Run it while no sink writes: an insert retried
    across the exchange is not recognized as a duplicate (the deduplication log stays with the old table)."""
    return [
        f"DROP TABLE IF EXISTS `{db}`.`counters_resorted`",
        schema.ddl("counters", ttl, db, as_name="counters_resorted"),
        f"INSERT INTO `{db}`.`counters_resorted` SELECT * FROM `{db}`.`counters`",
        f"DROP VIEW IF EXISTS `{db}`.`counters_1m_mv`",
        f"EXCHANGE TABLES `{db}`.`counters` AND `{db}`.`counters_resorted`",
        f"DROP TABLE `{db}`.`counters_resorted`",
        _rollup_mv(db),
        port_rates_sql(db),
    ]


def _collectives(db: str, ttl: int, rollup_ttl: int) -> list[str]:
    """NCCL collective timings (`collectives`) and their 1-minute rollup per rank; bandwidths Inspector did not
    give (NaN) are left out of the bandwidth sums."""
    return [
        schema.ddl("collectives", ttl, db),
        schema.ddl("collectives_1m", rollup_ttl, db),
        f"""CREATE MATERIALIZED VIEW IF NOT EXISTS `{db}`.`collectives_1m_mv` TO `{db}`.`collectives_1m` AS
SELECT toStartOfMinute(ts) AS minute, host, communicator, comm_name, collective, rank, source,
    max(ranks) AS ranks, count() AS samples, sum(bytes) AS bytes_sum,
    sum(exec_time_us) AS exec_time_us_sum, min(exec_time_us) AS exec_time_us_min,
    max(exec_time_us) AS exec_time_us_max,
    countIf(NOT isNaN(bus_bw_gbs)) AS bus_bw_samples, sumIf(bus_bw_gbs, NOT isNaN(bus_bw_gbs)) AS bus_bw_gbs_sum
FROM `{db}`.`collectives`
GROUP BY minute, host, communicator, comm_name, collective, rank, source""",
    ]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "stream tables", _stream_tables),
    Migration(2, "metric catalog table", _catalog_table),
    Migration(3, "port_rates view", _views),
    Migration(4, "1-minute rollups", _rollups),
    Migration(5, "sink intents", _sink_state),
    Migration(6, "incidents (ground truth)", _incidents),
    Migration(7, "qp_owners dest_gid and udp_sport", _qp_owner_paths),
    Migration(8, "counters sorted metric first", _resort_counters, fresh=False),
    Migration(9, "sink message ids", _sink_messages),
    Migration(10, "collectives (NCCL timings) and their 1-minute rollup", _collectives),
    Migration(11, "port_rates per source, resets proven, 32-bit wraps only for 32-bit counters", _views, fresh=False),
    Migration(12, "import ledger", _imports),
    Migration(13, "port_rates_fresh: one source per series, re-sends between refreshes no reads", _fresh_rates_view),
    Migration(14, "port_rates_fresh_of: port_rates_fresh of the metrics named", _fresh_rates_of_metrics),
)


def applied_versions(store: Store) -> set[int]:
    db = store.database
    store.command(schema.ddl("schema_migrations", 0, db))
    rows = store.query_arrow(f"SELECT version FROM `{db}`.`schema_migrations` FINAL")
    return {int(v) for v in rows.column("version").to_pylist()}


def migrate(store: Store, ttl_days: int = 30, rollup_ttl_days: int = 400) -> list[str]:
    """Bring the store up to date; returns what was done (empty when it already was)."""
    db = store.database
    done = applied_versions(store)
    actions = []
    for mig in MIGRATIONS:
        if mig.version in done:
            continue
        for sql in mig.statements(db, ttl_days, rollup_ttl_days):
            store.command(sql)
        now = dt.datetime.now(dt.UTC)
        store.insert(
            "schema_migrations",
            pa.table(
                {
                    "version": pa.array([mig.version], pa.uint32()),
                    "name": [mig.name],
                    "applied_at": pa.array([now], pa.timestamp("ns", tz="UTC")),
                }
            ),
        )
        actions.append(f"applied migration {mig.version}: {mig.name}")
    actions += reconcile_columns(store)
    actions += reconcile_retention(store, ttl_days, rollup_ttl_days)
    if refresh_catalog(store):
        actions.append("refreshed metric_catalog")
    for action in actions:
        log.info("%s", action)
    return actions


def reconcile_retention(store: Store, ttl_days: int, rollup_ttl_days: int) -> list[str]:
    """Give each table the retention the settings ask for now (tables keep the TTL they were created with): an
    old capture imported with `ttl_days: 0` into a store created with the defaults would otherwise lose its raw
    rows at 30 days and its rollups at 400. Rows past a shortened retention go at the next merges, as any
    expired row does (`materialize_ttl_after_modify = 0`: no rewrite of every part now)."""
    db = store.database
    live = store.query_arrow(
        "SELECT name, engine_full FROM system.tables WHERE database = {db:String}", {"db": db}
    ).to_pylist()
    actions = []
    for row in live:
        spec = schema.TABLES.get(row["name"])
        if spec is None or spec.fixed_ttl or not spec.ttl_column:
            continue
        want = ttl_days_of(spec.name, ttl_days, rollup_ttl_days)
        found = re.search(r"TTL toDateTime\(\w+\) \+ toIntervalDay\((\d+)\)", row["engine_full"])
        have = int(found.group(1)) if found else 0
        if have == want:
            continue
        if want:
            store.command(
                f"ALTER TABLE `{db}`.`{spec.name}` MODIFY TTL toDateTime({spec.ttl_column}) + INTERVAL {want} DAY "
                "SETTINGS materialize_ttl_after_modify = 0"
            )
        else:
            store.command(f"ALTER TABLE `{db}`.`{spec.name}` REMOVE TTL")
        actions.append(f"{spec.name}: retention {_days(have)} -> {_days(want)}")
    return actions


def _days(n: int) -> str:
    return f"{n} days" if n else "forever"


def reconcile_columns(store: Store) -> list[str]:
    """Add columns that `schema.py` declares and the live tables lack."""
    db = store.database
    live = store.query_arrow(
        "SELECT table, name FROM system.columns WHERE database = {db:String}", {"db": db}
    ).to_pylist()
    have = {(r["table"], r["name"]) for r in live}
    tables = {r["table"] for r in live}
    actions = []
    for table in schema.TABLES.values():
        if table.name not in tables:
            continue
        for col in table.columns:
            if (table.name, col.name) not in have:
                store.command(f"ALTER TABLE `{db}`.`{table.name}` ADD COLUMN IF NOT EXISTS {schema.column_ddl(col)}")
                actions.append(f"added column {table.name}.{col.name}")
    return actions


def catalog_rows() -> list[dict[str, Any]]:
    """`rocescope.catalog` as the rows of `metric_catalog`, in the table's order (by metric)."""
    return [
        {
            "metric": m.name,
            "unit": m.unit,
            "kind": m.kind,
            "per_priority": int(m.per_priority),
            "description": m.description,
            "vendor_names": sorted(f"{v}:{n}" for v, names in m.vendor_names.items() for n in names),
        }
        for m in sorted(METRICS, key=lambda m: m.name)
    ]


def catalog_arrow() -> pa.Table:
    return pa.Table.from_pylist(catalog_rows()).cast(_plain(schema.arrow_schema("metric_catalog")))


def _plain(target: pa.Schema) -> pa.Schema:
    """The schema with dictionary columns as plain strings (how queries return them)."""
    return pa.schema(
        [
            pa.field(f.name, f.type.value_type if pa.types.is_dictionary(f.type) else f.type, nullable=f.nullable)
            for f in target
        ]
    )


def refresh_catalog(store: Store) -> bool:
    """Rewrite `metric_catalog` when it differs from `rocescope.catalog`."""
    db = store.database
    have = store.query_arrow(f"SELECT * FROM `{db}`.`metric_catalog` ORDER BY metric")
    # Compared as Python rows: Arrow built from lists imports pandas, a quarter second of every command's start.
    if have.to_pylist() == catalog_rows():
        return False
    store.command(f"TRUNCATE TABLE `{db}`.`metric_catalog`")
    store.insert("metric_catalog", catalog_arrow())
    return True
