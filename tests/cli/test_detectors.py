"""`rocescope detectors`: each threshold in effect, its default and its source, as an operator checks them before
trusting (or overriding) a detector."""

from __future__ import annotations

import json
from pathlib import Path

from rocescope.cli import app

from store_cli import runner


def test_every_threshold_is_listed_with_its_value_in_effect_and_its_source(tmp_path: Path) -> None:
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(
        f"store:\n  path: {tmp_path / 'data'}\n"
        "analysis:\n  disabled: [polarization]\n  detectors:\n    incast:\n      min_seconds: 5\n"
    )
    done = runner.invoke(app, ["--config", str(cfg), "detectors", "--json"])
    assert done.exit_code == 0, done.output
    rows = json.loads(done.stdout)
    by = {(r["detector"], r["parameter"]): r for r in rows}
    assert by[("incast", "min_seconds")]["value"] == 5.0 and by[("incast", "min_seconds")]["default"] == 1.0
    assert all(r["source"] and r["description"] for r in rows), [k for k, r in by.items() if not r["source"]]
    assert {r["enabled"] for r in rows if r["detector"] == "polarization"} == {False}
    shown = runner.invoke(app, ["--config", str(cfg), "detectors"], terminal_width=200)
    assert shown.exit_code == 0 and "5.0 (default 1.0)" in shown.stdout and "(disabled)" in shown.stdout


def test_an_unknown_threshold_in_the_config_is_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text("analysis:\n  detectors:\n    incast:\n      min_secs: 5\n")
    done = runner.invoke(app, ["--config", str(cfg), "detectors"])
    assert done.exit_code != 0 and "min_secs" in done.output
