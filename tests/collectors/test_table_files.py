"""Table files as other tools write them: epoch-number times, the "not given" columns left out or null."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rocescope.cli import app
from rocescope.collectors.table_files import completed, epoch_unit
from rocescope.errors import SchemaError
from rocescope.pipeline.batch import conform

from store_cli import runner, sql_rows, store_config

T0 = dt.datetime(2026, 11, 28, 9, 30, 0, 250_000, tzinfo=dt.UTC)
EPOCH_NS = int(T0.timestamp()) * 1_000_000_000 + 250_000_000


@pytest.mark.parametrize(
    ("values", "unit"),
    [
        (pa.array([EPOCH_NS // 10**9, EPOCH_NS // 10**9 + 1], pa.int64()), "s"),
        (pa.array([EPOCH_NS / 1e9, EPOCH_NS / 1e9 + 1], pa.float64()), "s"),  # fractions of a second kept
        (pa.array([EPOCH_NS // 10**6, EPOCH_NS // 10**6 + 1000], pa.int64()), "ms"),
        (pa.array([EPOCH_NS // 10**3, EPOCH_NS // 10**3 + 10**6], pa.int64()), "us"),
        (pa.array([EPOCH_NS, EPOCH_NS + 10**9], pa.int64()), "ns"),
    ],
)
def test_epoch_numbers_are_read_in_the_unit_their_magnitude_shows(values: pa.Array, unit: str) -> None:
    assert epoch_unit(values[0].as_py()) == unit
    table = completed("links", pa.table({"device": ["leaf-01"] * 2, "port": ["Ethernet0"] * 2,
                                         "peer_device": ["spine-01"] * 2, "peer_port": ["Ethernet4"] * 2,
                                         "seen_at": values}))  # fmt: skip
    seen = conform("links", table).column("seen_at").to_pylist()
    whole_seconds = unit == "s" and pa.types.is_integer(values.type)
    assert seen == [T0.replace(microsecond=0) if whole_seconds else T0, (T0 + dt.timedelta(seconds=1)).replace(
        microsecond=0 if whole_seconds else T0.microsecond)]  # fmt: skip
    assert conform("links", table).column("source").to_pylist() == ["config", "config"]  # the schema's "not given"


def pandas_counters(n: int = 4) -> pa.Table:
    """A counters export as pandas writes it: times in epoch milliseconds, no priority where none (null), and
    no role, source or raw name columns."""
    return pa.table(
        {
            "ts": pa.array([EPOCH_NS // 10**6 + 1000 * i for i in range(n)], pa.int64()),
            "device": ["gpu-001"] * n,
            "port": ["eth0", "eth0", "eth0", "mlx5_0/1"][:n],
            "priority": pa.array([3.0, None, 3.0, None][:n], pa.float64()),
            "metric": ["pfc_rx_pause", "rx_bytes", "pfc_rx_pause", "rdma_np_cnp_sent"][:n],
            "value": [1.0, 2.0, 5.0, 7.0][:n],
        }
    )


def test_a_counters_export_without_the_not_given_columns_is_completed_from_the_schema() -> None:
    batch = conform("counters", completed("counters", pandas_counters(), role="nic"))
    rows = batch.to_pylist()
    assert [r["priority"] for r in rows] == [3, -1, 3, -1]
    assert {(r["role"], r["source"], r["raw_name"]) for r in rows} == {("nic", "import", "")}
    assert rows[0]["ts"] == T0 and rows[3]["ts"] == T0 + dt.timedelta(seconds=3)
    # a role the file gives is its own, whatever --role says
    given = pandas_counters().append_column("role", pa.array(["host", None, "host", None]))
    roles = conform("counters", completed("counters", given, role="nic")).column("role").to_pylist()
    assert roles == ["host", "nic", "host", "nic"]  # --role only where the file says nothing


def test_what_the_schema_cannot_complete_is_a_clear_error() -> None:
    with pytest.raises(SchemaError, match="give --role"):
        completed("counters", pandas_counters())
    far = pandas_counters().set_column(0, "ts", pa.array([9.9e10] * 4))  # seconds in the year 5107
    with pytest.raises(SchemaError, match=r"counters\.ts: epoch numbers out of range"):
        completed("counters", far, role="nic")
    no_value = pandas_counters().drop_columns(["value"])
    with pytest.raises(SchemaError, match=r"missing columns \['value'\]"):
        conform("counters", completed("counters", no_value, role="nic"))


def test_cli_imports_a_pandas_style_counters_parquet(tmp_path: Path) -> None:
    path = tmp_path / "nic.parquet"
    pq.write_table(pandas_counters(), path)
    cfg = store_config(tmp_path)
    refused = runner.invoke(app, ["--config", cfg, "import", str(path)])
    assert refused.exit_code != 0 and "give --role" in refused.output
    bad_role = runner.invoke(app, ["--config", cfg, "import", "--role", "gpu", str(path)])
    assert bad_role.exit_code != 0 and "unknown --role 'gpu'" in bad_role.output
    result = runner.invoke(app, ["--config", cfg, "import", "--role", "nic", str(path)])
    assert result.exit_code == 0, result.output
    sql = "SELECT toUnixTimestamp64Milli(ts), role, port, priority, metric, value FROM counters ORDER BY ts"
    first_ms = EPOCH_NS // 10**6
    assert sql_rows(cfg, sql) == [
        f'{first_ms},"nic","eth0",3,"pfc_rx_pause",1',
        f'{first_ms + 1000},"nic","eth0",-1,"rx_bytes",2',
        f'{first_ms + 2000},"nic","eth0",3,"pfc_rx_pause",5',
        f'{first_ms + 3000},"nic","mlx5_0/1",-1,"rdma_np_cnp_sent",7',
    ]


def test_cli_imports_a_cabling_plan_as_links(tmp_path: Path) -> None:
    """A cabling plan (a spreadsheet's four columns) is a links file: source `config`, seen at `--at`."""
    plan = tmp_path / "cabling.csv"
    plan.write_text("device,port,peer_device,peer_port\nleaf-01,Ethernet32,spine-01,Ethernet0\n"
                    "spine-01,Ethernet0,leaf-01,Ethernet32\n")  # fmt: skip
    cfg = store_config(tmp_path)
    at = "2026-11-28T09:00:00+00:00"
    result = runner.invoke(app, ["--config", cfg, "import", "--table", "links", "--at", at, str(plan)])
    assert result.exit_code == 0, result.output
    sql = "SELECT device, port, peer_device, peer_port, source, toString(seen_at) FROM links ORDER BY device"
    assert sql_rows(cfg, sql) == [
        '"leaf-01","Ethernet32","spine-01","Ethernet0","config","2026-11-28 09:00:00.000000000"',
        '"spine-01","Ethernet0","leaf-01","Ethernet32","config","2026-11-28 09:00:00.000000000"',
    ]
