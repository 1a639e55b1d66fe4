"""`rocescope blame` (who hurt whom) and the findings table's GPU-seconds, over a real analysis of one job's
incast hurting another (tests/analysis/nccl_jobs.py) written to the store the CLI reads."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

from nccl_jobs import INCAST, incast_between_jobs
from typer.testing import CliRunner

from rocescope.analysis.run import analyze
from rocescope.cli import app
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore

runner = CliRunner()


def test_blame_names_the_culprit_job_the_victim_and_the_gpu_seconds_lost(
    tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    cfg = str(write_config(tmp_path))
    start = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(minutes=10)
    with ChdbStore(tmp_path / "data") as store:
        migrate(store)
        t, victim, culprit = incast_between_jobs(store, start)
        assert analyze(store, t.window).written == 1
    truth = victim.lost_gpu_seconds(*INCAST)
    window = ["--from", t.window.start.isoformat(), "--to", t.window.end.isoformat()]

    result = runner.invoke(app, ["--config", cfg, "blame", *window, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    (edge,) = doc["edges"]
    assert (edge["culprit"], edge["victim"], edge["kinds"]) == (culprit.job_id, victim.job_id, ["incast"])
    assert abs(edge["gpu_seconds_lost"] - truth) <= 0.2 * truth and edge["worst_inflation"] > 1.5
    (finding,) = doc["findings"]
    assert finding["blame"]["victim_jobs"] == [victim.job_id]
    assert finding["impact"][culprit.job_id]["hurt"] is False

    result = runner.invoke(app, ["--config", cfg, "blame", *window])
    assert result.exit_code == 0, result.output
    assert "who hurt whom" in result.output
    row = next(line for line in result.output.splitlines() if culprit.job_id in line)
    assert victim.job_id in row and f"{edge['gpu_seconds_lost']:.1f}" in row and "incast" in row

    result = runner.invoke(app, ["--config", cfg, "findings", "--job", victim.job_id, "--since", "1h"])
    assert result.exit_code == 0, result.output
    assert f"{edge['gpu_seconds_lost']:.1f} GPU-s lost" in result.output  # the job's total, in its table's title

    earlier = [(start - dt.timedelta(hours=h)).isoformat() for h in (2, 1)]
    before = ["--from", earlier[0], "--to", earlier[1]]
    result = runner.invoke(app, ["--config", cfg, "blame", *before])
    assert result.exit_code == 0 and "no job hurt by a finding" in result.output
    result = runner.invoke(app, ["--config", cfg, "blame", "--from", "last tuesday"])
    assert result.exit_code == 1 and "not a time or duration" in result.output
