from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from rocescope.config import StoreConfig
from rocescope.errors import StoreError
from rocescope.pipeline.batch import make_batch
from rocescope.pipeline.migrations import MIGRATIONS, migrate
from rocescope.pipeline.store import MAX_THREADS_ENV, ChdbStore, Store, open_store, query_polars
from rocescope.schema import COUNTERS

from samples import sample_table


@pytest.fixture
def store(any_store: Store) -> Store:
    """Every test here that takes `store` runs on both backends."""
    return any_store


def _snapshot(store: Store) -> list[dict[str, object]]:
    return store.query_arrow(
        "SELECT name, engine, create_table_query FROM system.tables WHERE database = {db:String} ORDER BY name",
        {"db": store.database},
    ).to_pylist()


def test_migrations_run_twice_without_change(store: Store) -> None:
    before = _snapshot(store)
    assert migrate(store) == []
    assert _snapshot(store) == before
    versions = store.query_arrow("SELECT version FROM schema_migrations FINAL ORDER BY version").column(0)
    assert versions.to_pylist() == [m.version for m in MIGRATIONS]
    names = {r["name"] for r in before}
    assert {
        "counters",
        "packets",
        "links",
        "endpoints",
        "qp_owners",
        "findings",
        "port_rates",
        "counters_1m",
        "counters_1m_mv",
        "port_rates_1m",
        "metric_catalog",
    } <= names


def test_migrate_adds_a_column_the_schema_gained(store: Store) -> None:
    store.command("ALTER TABLE links DROP COLUMN source")
    assert migrate(store) == ["added column links.source"]
    assert migrate(store) == []


def test_counters_resorted_metric_first_keeping_every_row(store: Store) -> None:
    """Migration 8 rebuilds a populated `counters` with the metric-first key: every row kept, the 1-minute
    rollup still fed by later inserts, the rates view still answering."""
    store.command("ALTER TABLE counters MODIFY COMMENT 'before the rebuild'")
    store.insert("counters", sample_table("counters", 5000, seed=3))
    fingerprint = "SELECT count(), sum(cityHash64(*)) FROM counters"
    before = store.query_arrow(fingerprint).to_pylist()
    store.command("DELETE FROM schema_migrations WHERE version = 8")
    assert migrate(store) == ["applied migration 8: counters sorted metric first"]
    assert store.query_arrow(fingerprint).to_pylist() == before
    key = store.query_arrow(
        "SELECT sorting_key, comment FROM system.tables WHERE database = {db:String} AND name = 'counters'",
        {"db": store.database},
    ).to_pylist()
    assert key == [{"sorting_key": "metric, device, port, priority, ts", "comment": COUNTERS.description}]
    rolled = "SELECT sum(samples) FROM counters_1m"
    already = int(store.query_arrow(rolled).column(0)[0].as_py() or 0)
    store.insert("counters", sample_table("counters", 700, seed=4))
    assert int(store.query_arrow(rolled).column(0)[0].as_py()) == already + 700
    assert store.query_arrow("SELECT count() FROM port_rates").column(0)[0].as_py() >= 0


def test_insert_and_query_round_trip(store: Store) -> None:
    table = sample_table("counters", 5000, seed=1)
    assert store.insert("counters", table) == 5000
    back = store.query_arrow("SELECT * FROM counters ORDER BY ts")
    assert back.num_rows == 5000
    want = table.sort_by("ts")
    for name in table.column_names:
        assert back.column(name).to_pylist() == want.column(name).to_pylist(), name


def test_dedup_token_makes_a_retried_insert_harmless(store: Store) -> None:
    table = sample_table("counters", 100)
    for _ in range(3):
        store.insert("counters", table, dedup_token="g:rocescope.counters.v1:0:0-9")
    store.insert("counters", table, dedup_token="g:rocescope.counters.v1:0:10-19")
    assert store.query_arrow("SELECT count() FROM counters").column(0)[0].as_py() == 200
    samples = store.query_arrow("SELECT sum(samples) FROM counters_1m").column(0)[0].as_py()
    assert samples == 200, "the rollup must deduplicate with its source"


def test_bad_token_is_refused(store: Store) -> None:
    with pytest.raises(StoreError, match="invalid insert deduplication token"):
        store.insert("counters", sample_table("counters", 1), dedup_token="x'; DROP TABLE counters; --")


def _series(
    now: dt.datetime, values: list[float], metric: str = "tx_bytes", seconds: list[float] | None = None,
    raw_name: str = "ifHCOutOctets",
):  # fmt: skip
    seconds = seconds if seconds is not None else [float(i) for i in range(len(values))]
    n = len(values)
    return make_batch(
        "counters",
        {
            "ts": [now + dt.timedelta(seconds=s) for s in seconds],
            "device": ["leaf-1"] * n,
            "role": ["switch"] * n,
            "port": ["Ethernet0"] * n,
            "priority": [-1] * n,
            "metric": [metric] * n,
            "value": values,
            "source": ["snmp"] * n,
            "raw_name": [raw_name] * n,
        },
    ).data


def test_rates_handle_wrap_reset_duplicates_and_order(store: Store, now: dt.datetime) -> None:
    w32 = 2**32
    values = [100.0, 1100.0, 300.0, w32 - 1000.0, 1000.0, 1000.0, 5000.0, 4000.0, 4500.0]
    seconds = [0, 1, 2, 3, 4, 4, 6, 7, 8]  # the 6th sample duplicates the 5th's timestamp
    order = [7, 2, 0, 5, 1, 8, 4, 6, 3]  # arrive out of order
    batch = _series(
        now, [values[i] for i in order], seconds=[seconds[i] for i in order], raw_name="ifOutOctets"
    )  # IF-MIB's 32-bit octet counter
    store.insert("counters", pa.Table.from_batches([batch]))
    rates = query_polars(store, "SELECT ts, rate, reset_or_wrap FROM port_rates WHERE device = 'leaf-1' ORDER BY ts")
    assert rates["rate"].min() >= 0
    got = rates["rate"].to_list()
    # 0->1: +1000; 1->2: reset (restarted from 0: 300); 2->3: +(2^32-1300); 3->4: 32-bit wrap (+2000); dup dropped;
    # 4->6: +4000 over 2 s; 6->7: a drop to 4000 proves no reset (no rate); 7->8: +500
    assert got == [1000.0, 300.0, w32 - 1000.0 - 300.0, 2000.0, 2000.0, 500.0]
    assert rates["reset_or_wrap"].to_list() == [0, 1, 0, 1, 0, 0]


def test_gauges_get_no_rate(store: Store, now: dt.datetime) -> None:
    store.insert("counters", pa.Table.from_batches([_series(now, [5.0, 1.0, 9.0], metric="queue_watermark_bytes")]))
    assert store.query_arrow("SELECT count() FROM port_rates").column(0)[0].as_py() == 0


def test_parameters_are_inert(store: Store) -> None:
    store.insert("counters", sample_table("counters", 10, device="leaf-1"))
    for evil in ["leaf-1' OR '1'='1", "'; DROP TABLE counters; --", "leaf-1\\' --", "{d:String}"]:
        got = store.query_arrow("SELECT count() FROM counters WHERE device = {d:String}", {"d": evil})
        assert got.column(0)[0].as_py() == 0
    assert store.query_arrow("SELECT count() FROM counters").column(0)[0].as_py() == 10


def test_arrays_of_tuples_bind_and_stay_inert(store: Store) -> None:
    """Series named as (metric, device, port, priority) tuples select by the table's sort key (the re-send inference
    reads its candidates so); a quote inside one is a quote, on either backend."""
    store.insert("counters", sample_table("counters", 10, device="leaf-1"))
    row = store.query_arrow("SELECT metric, device, port, priority FROM counters LIMIT 1").to_pylist()[0]
    sql = (
        "SELECT count() FROM counters WHERE (metric, device, port, priority) IN "
        "{series:Array(Tuple(String, String, String, Int8))}"
    )
    named = (row["metric"], row["device"], row["port"], row["priority"])
    evil = (row["metric"], "leaf-1' OR '1'='1", row["port"], row["priority"])
    assert store.query_arrow(sql, {"series": [named]}).column(0)[0].as_py() >= 1
    assert store.query_arrow(sql, {"series": [evil]}).column(0)[0].as_py() == 0


def test_one_process_owns_a_chdb_directory(tmp_path: Path) -> None:
    owner = ChdbStore(tmp_path / "db")
    with pytest.raises(StoreError, match="in use by another rocescope process"):
        ChdbStore(tmp_path / "db")
    owner.close()


def test_sql_errors_are_store_errors(store: Store) -> None:
    with pytest.raises(StoreError, match=r"UNKNOWN_TABLE|Unknown table"):
        store.query_arrow("SELECT * FROM no_such_table")


def test_data_survives_reopen(tmp_path: Path) -> None:
    first = ChdbStore(tmp_path / "db")
    migrate(first)
    first.insert("counters", sample_table("counters", 42))
    first.close()
    second = ChdbStore(tmp_path / "db")
    assert migrate(second) == []
    assert second.query_arrow("SELECT count() FROM counters").column(0)[0].as_py() == 42
    second.close()


def test_max_threads_caps_the_embedded_engine_from_the_config_or_its_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(MAX_THREADS_ENV, raising=False)
    with open_store(StoreConfig(path=tmp_path / "a", max_threads=1)) as s:
        assert s.query_arrow("SELECT getSetting('max_threads') AS n").column("n").to_pylist() == [1]
    monkeypatch.setenv(MAX_THREADS_ENV, "1")
    with ChdbStore(tmp_path / "b") as s:
        assert s.query_arrow("SELECT getSetting('max_threads') AS n").column("n").to_pylist() == [1]
    monkeypatch.setenv(MAX_THREADS_ENV, "one")
    with pytest.raises(StoreError, match="ROCESCOPE_STORE__MAX_THREADS must be a whole number"):
        ChdbStore(tmp_path / "c")
