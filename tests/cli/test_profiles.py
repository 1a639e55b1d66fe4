"""`--profile` on `sim run`, `demo` and `eval`: the store holds what that gear reports; eval scores per profile."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from rocescope.cli import app

runner = CliRunner()


def test_sim_run_lands_what_the_profile_reports(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    cfg = str(write_config(tmp_path))
    result = runner.invoke(app, ["--config", cfg, "sim", "list"])
    assert result.exit_code == 0 and "arista-eos:" in result.output and "sonic-broadcom:" in result.output
    out = tmp_path / "run"
    args = ["sim", "run", "--scenario", "pfc_storm", "--duration", "70s", "--profile", "arista-eos", "--out", str(out)]
    result = runner.invoke(app, ["--config", cfg, *args])
    assert result.exit_code == 0, result.output
    assert "profile arista-eos" in result.output
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["profile"] == "arista-eos" and "leaf-r0-01:Ethernet5/1" in truth["incidents"][0]["ports"]
    query = "SELECT DISTINCT port FROM counters WHERE device = 'leaf-r0-01' AND metric = 'tx_bytes' ORDER BY port"
    result = runner.invoke(app, ["--config", cfg, "sql", query, "--format", "csv"])
    ports = result.stdout.splitlines()[1:]
    assert ports and all(p.strip('"').startswith("Ethernet") and "/" in p for p in ports)
    result = runner.invoke(app, ["--config", cfg, "sql", "SELECT DISTINCT device FROM links", "--format", "csv"])
    assert all(d.startswith('"gpu-') for d in result.stdout.splitlines()[1:])  # LLDP from the hosts only


def test_demo_refuses_an_unknown_profile_before_it_starts(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    cfg = str(write_config(tmp_path))
    result = runner.invoke(app, ["--config", cfg, "demo", "--scenario", "pfc_storm", "--profile", "no-such-gear"])
    assert result.exit_code == 1 and "no profile" in result.output and len(result.output.splitlines()) <= 2


def test_eval_scores_per_profile_as_text_and_json(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    cfg = str(write_config(tmp_path))
    out = tmp_path / "eval.json"
    args = ["eval", "--kind", "pfc_storm", "--seeds", "1", "--baseline", "0", "--profile", "sonic-broadcom"]
    result = runner.invoke(app, ["--config", cfg, *args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    line = r"sonic-broadcom: pfc_storm seed 1 \(fast, \d+ s\): 1 incident\(s\), findings: pfc_storm@gpu-005"
    assert re.search(line, result.output), result.output
    (profile,) = json.loads(out.read_text())["profiles"]
    assert profile["profile"] == "sonic-broadcom"
    (storm,) = [s for s in profile["scores"] if s["kind"] == "pfc_storm"]
    assert storm["incidents"] == len(profile["runs"]) and storm["cadence_s"] == 1.0
    assert {"precision", "recall", "localization", "findings_per_incident", "delay_p50_s"} <= set(storm)
    result = runner.invoke(app, ["--config", cfg, "eval", "--profile", "no-such-gear", "--seeds", "1"])
    assert result.exit_code == 1 and "no profile" in result.output
