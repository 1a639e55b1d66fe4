"""The schema is the single source of truth: DDL and Arrow schemas must agree column for column."""

from __future__ import annotations

import pytest

from rocescope import schema
from rocescope.pipeline.store import ChdbStore, table_schema_check


@pytest.mark.parametrize("table", list(schema.TABLES))
def test_ddl_and_arrow_agree(store: ChdbStore, table: str) -> None:
    assert table_schema_check(store, table) == []
    live = store.query_arrow(
        "SELECT name, type FROM system.columns WHERE database = {db:String} AND table = {t:String} ORDER BY position",
        {"db": store.database, "t": table},
    ).to_pylist()
    spec = schema.TABLES[table]
    assert [r["name"] for r in live] == spec.column_names
    assert [r["type"] for r in live] == [
        c.ch_type.replace("DateTime64(9, 'UTC')", "DateTime64(9, 'UTC')") for c in spec.columns
    ]


def test_stream_topics_carry_the_schema_version() -> None:
    assert schema.topic("counters") == f"rocescope.counters.v{schema.SCHEMA_VERSION}"
    with pytest.raises(KeyError):
        schema.topic("nope")


def test_every_column_is_documented() -> None:
    for table in schema.TABLES.values():
        assert table.description
        for col in table.columns:
            assert col.description, f"{table.name}.{col.name}"


def test_catalog_lands_in_the_store(store: ChdbStore) -> None:
    rows = store.query_arrow("SELECT metric, kind, unit FROM metric_catalog").to_pylist()
    assert {r["metric"] for r in rows} == set(schema.METRICS_BY_NAME)
    for r in rows:
        assert r["kind"] == schema.METRICS_BY_NAME[r["metric"]].kind
