"""Importing a file again changes no table: the import ledger knows each file landed by its bytes, kind and
options (`pipeline.ledger`). Without it every row lands twice and the rollups' sums double; `--again` shows it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocescope.cli import app

from store_cli import runner, sql_rows, store_config

FIX = Path(__file__).parent.parent / "fixtures"
SONIC = FIX / "realdata" / "04_gnmi_sonic" / "sonic-utilities_mock_counters_db.json"
NCCL = FIX / "nccl" / "dev-v4.4.log"
AT = ["--at", "2025-06-01T00:00:00Z"]
#: every table a sonic dump or an Inspector file lands in, with its rollup
TABLES = ("counters", "counters_1m", "links", "collectives", "collectives_1m")


def state(cfg: str) -> dict[str, str]:
    """Rows and, for the rollups, the sums their materialized views add up: what a duplicate would change."""
    out = {t: sql_rows(cfg, f"SELECT count() FROM {t}")[0] for t in TABLES}
    out["counters_1m samples"] = sql_rows(cfg, "SELECT sum(samples) FROM counters_1m")[0]
    out["collectives_1m samples"] = sql_rows(cfg, "SELECT sum(samples) FROM collectives_1m")[0]
    return out


def imports(cfg: str, *args: str) -> str:
    result = runner.invoke(app, ["--config", cfg, "import", *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("kind, path", [("sonic", SONIC), ("nccl-inspector", NCCL)], ids=["sonic", "nccl"])
def test_a_file_imported_again_changes_no_table(tmp_path: Path, kind: str, path: Path) -> None:
    cfg = store_config(tmp_path)
    imports(cfg, "--kind", kind, str(path), *AT)
    once = state(cfg)
    assert int(once["counters"]) + int(once["collectives"]) > 0
    copy = tmp_path / f"copy-of-{path.name}"  # the same bytes under another name are the same file
    shutil.copy(path, copy)
    said = imports(cfg, "--kind", kind, str(path), str(copy), *AT)
    said = " ".join(said.split())
    assert said.count(": already imported (as") == 2 and "skipped: 2 already imported" in said
    assert state(cfg) == once
    imports(cfg, "--kind", kind, str(path), *AT, "--again")  # what the ledger prevents: everything twice
    twice = state(cfg)
    grew = [t for t in ("counters", "collectives") if int(once[t])]
    assert grew and all(int(twice[t]) == 2 * int(once[t]) for t in grew)


def test_other_options_are_another_import(tmp_path: Path) -> None:
    """The same dump imported as another device (or at another time) lands rows of its own."""
    cfg = store_config(tmp_path)
    imports(cfg, "--kind", "sonic", str(SONIC), "--device", "leaf1", *AT)
    one = int(state(cfg)["counters"])
    imports(cfg, "--kind", "sonic", str(SONIC), "--device", "leaf2", *AT)
    assert int(state(cfg)["counters"]) == 2 * one
    assert sql_rows(cfg, "SELECT count(), uniqExact(digest) FROM imports") == ["2,2"]


def test_a_table_file_imported_again_changes_nothing(tmp_path: Path) -> None:
    cfg = store_config(tmp_path)
    parquet = tmp_path / "counters.parquet"
    imports(cfg, "--kind", "sonic", str(SONIC), *AT)
    out = runner.invoke(app, ["--config", cfg, "sql", "SELECT * FROM counters", "-f", "parquet", "--out", str(parquet)])
    assert out.exit_code == 0, out.output
    (tmp_path / "other").mkdir()
    other = store_config(tmp_path / "other")
    imports(other, str(parquet))
    rows = sql_rows(other, "SELECT count() FROM counters")
    assert "already imported" in imports(other, str(parquet))
    assert sql_rows(other, "SELECT count() FROM counters") == rows and int(rows[0]) > 0


def test_files_landed_before_a_bad_one_are_noted(tmp_path: Path) -> None:
    """An import that fails on its second file landed its first: importing both again lands the first no more,
    and a file given twice in one command lands once."""
    cfg = store_config(tmp_path)
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    failed = runner.invoke(app, ["--config", cfg, "import", "--kind", "sonic", str(SONIC), str(bad), *AT])
    assert failed.exit_code == 1
    once = state(cfg)
    assert int(once["counters"]) > 0
    said = imports(cfg, "--kind", "sonic", str(SONIC), str(SONIC), *AT)
    assert " ".join(said.split()).count("already imported (as") == 2 and state(cfg) == once
    (tmp_path / "fresh").mkdir()
    fresh = store_config(tmp_path / "fresh")
    imports(fresh, "--kind", "sonic", str(SONIC), str(SONIC), *AT)
    assert state(fresh) == once
