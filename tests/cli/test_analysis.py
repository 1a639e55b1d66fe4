"""`analyze` and `findings` over what the demo landed (`eval`: tests/cli/test_profiles.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from rocescope.cli import app

runner = CliRunner()


def test_findings_filters_are_bound_not_pasted(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    cfg = str(write_config(tmp_path))
    result = runner.invoke(app, ["--config", cfg, "findings", "--job", "x' OR 1=1 --", "--kind", "pfc_storm"])
    assert result.exit_code == 0, result.output
    assert "no findings" in result.output


def test_demo_then_analyze_and_findings(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    cfg = str(write_config(tmp_path))
    out = tmp_path / "out"
    args = ["--config", cfg, "demo", "--scenario", "pfc_storm", "--duration", "100s", "--out", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "team-a/llm-a: 1 finding(s)" in result.output and "pfc_storm" in result.output  # the demo analyzes
    assert "gpu-005:eth0" in (out / "report.html").read_text()
    assert len(list((out / "grafana" / "dashboards").glob("*.json"))) == 4
    for _ in range(2):  # analyzing the same window again replaces, never duplicates
        result = runner.invoke(app, ["--config", cfg, "analyze", "--from", "10m", "--detector", "pfc_storm"])
        assert result.exit_code == 0, result.output
        assert "1 finding(s)" in result.output and "1 written" in result.output
    result = runner.invoke(app, ["--config", cfg, "findings", "--json", "--job", "team-a/llm-a"])
    (finding,) = json.loads(result.stdout)
    assert finding["kind"] == "pfc_storm" and finding["ports"] == ["gpu-005:eth0", "leaf-r0-01:Ethernet16"]
    assert finding["evidence"]["root"] == "gpu-005:eth0"
    result = runner.invoke(app, ["--config", cfg, "findings", "--kind", "incast"])
    assert "no findings" in result.output
    result = runner.invoke(app, ["--config", cfg, "analyze", "--from", "yesterday-ish"])
    assert result.exit_code == 1 and "not a time or duration" in result.output
    bad = tmp_path / "bad.yaml"
    thresholds = "analysis:\n  detectors:\n    pfc_storm: {min_seconds: -1}\n"
    bad.write_text(f"store:\n  path: {tmp_path / 'data'}\n{thresholds}")
    result = runner.invoke(app, ["--config", str(bad), "analyze"])
    assert result.exit_code == 1 and "analysis.detectors.pfc_storm.min_seconds" in result.output
