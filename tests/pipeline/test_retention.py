"""Retention that cannot change what an old capture says: the 1-minute rollups (where analysis reads roles,
reporting devices and ports) never expire before the raw rows, `ttl_days: 0` keeps both, and a store keeps no
retention it was created with once the settings change. A real SONiC storm trace from January 2021 (sonic-buildimage
issue 6530) is imported into a store made with the defaults (raw 30 days, rollups 400) and into fresh ones."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rocescope.cli import app
from rocescope.config import StoreConfig

from store_cli import runner, sql_rows

TRACE = Path(__file__).resolve().parents[1] / "fixtures" / "sonic" / "redis_monitor_pfc_storm_issue6530.txt"


def test_rollups_outlive_the_raw_rows_and_ttl_0_keeps_both() -> None:
    assert StoreConfig(ttl_days=0).rollup_ttl_days == 0
    assert StoreConfig(ttl_days=0, rollup_ttl_days=30).rollup_ttl_days == 0
    assert StoreConfig(ttl_days=500, rollup_ttl_days=400).rollup_ttl_days == 500
    assert StoreConfig(ttl_days=30).rollup_ttl_days == 400


def _config(path: Path, store: Path, lines: str) -> str:
    path.write_text(f"store:\n  path: {store}\n{lines}")
    return str(path)


def _findings(cfg: str) -> list[list[str]]:
    args = ["--config", cfg, "analyze", "--from", "2021-01-14T08:14:00Z", "--to", "2021-01-14T08:16:00Z"]
    done = runner.invoke(app, args)
    assert done.exit_code == 0, done.output
    rows = sql_rows(cfg, "SELECT kind, arrayStringConcat(ports, ' '), priority, severity FROM findings ORDER BY kind")
    return list(csv.reader(rows))


@pytest.mark.parametrize(
    "retention", ["  ttl_days: 0\n  rollup_ttl_days: 30\n", "  ttl_days: 0\n"], ids=["short_rollups", "defaults"]
)
def test_an_old_capture_says_the_same_under_any_retention(tmp_path: Path, retention: str) -> None:
    seen = []
    for made_with in ("", "  ttl_days: 0\n"):  # a store made with the defaults, then one made to keep everything
        store = tmp_path / f"data{len(seen)}"
        if made_with == "":
            made = runner.invoke(app, ["--config", _config(tmp_path / "made.yaml", store, ""), "migrate"])
            assert made.exit_code == 0, made.output
        cfg = _config(tmp_path / "keep.yaml", store, retention)
        done = runner.invoke(
            app, ["--config", cfg, "import", "--kind", "sonic-monitor", "--device", "sonic-dut", str(TRACE)]
        )
        assert done.exit_code == 0, done.output
        assert sql_rows(cfg, "SELECT count() FROM counters_1m WHERE minute < '2022-01-01'") != ["0"]
        seen.append(_findings(cfg))
    assert seen[0] == seen[1] and [row[0] for row in seen[0]] == ["pfc_storm"], seen
