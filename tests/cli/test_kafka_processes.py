"""The README's "Through Kafka" layout, as processes over the embedded broker: `rocescope sim run` publishing
(standing in for the collectors), `rocescope sink` landing, `rocescope analyze` over the run; the findings
equal those of the same run in one process on the in-process transport."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from rocescope import schema
from rocescope.cli import app
from rocescope.config import KafkaConfig
from rocescope.pipeline.kafka import KafkaTransport
from rocescope.testbed.tansu import Broker

SCENARIO = ["--scenario", "incast", "--duration", "75s"]
runner = CliRunner()


def rocescope(*args: str) -> list[str]:
    return [sys.executable, "-m", "rocescope.cli", *args]


def comparable(findings: list[dict[str, Any]], run_start: str) -> list[tuple[Any, ...]]:
    """A finding as two runs of one scenario can share it: times relative to the run's start (each run ends
    at its own 'now')."""
    t0 = dt.datetime.fromisoformat(run_start)

    def offset(at: str) -> float:
        return round((dt.datetime.fromisoformat(at) - t0).total_seconds(), 1)

    return sorted(
        (f["kind"], f["severity"], tuple(f["devices"]), tuple(f["ports"]), tuple(f["job_ids"]), f["priority"],
         offset(f["start"]), offset(f["end"]))
        for f in findings
    )  # fmt: skip


def in_process_run(folder: Path, write_config: Callable[..., Path]) -> tuple[list[dict[str, Any]], str]:
    folder.mkdir()
    cfg = str(write_config(folder))
    result = runner.invoke(app, ["--config", cfg, "sim", "run", *SCENARIO, "--out", str(folder / "run")])
    assert result.exit_code == 0, result.output
    summary = json.loads((folder / "run" / "summary.json").read_text())
    result = runner.invoke(app, ["--config", cfg, "analyze", "--from", summary["start"], "--to", summary["end"]])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["--config", cfg, "findings", "--json", "--since", summary["start"]])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout), summary["start"]


def test_sink_and_analysis_processes_over_the_broker_find_what_one_process_finds(
    tmp_path: Path, broker: Broker, write_config: Callable[..., Path]
) -> None:
    expected, expected_start = in_process_run(tmp_path / "inprocess", write_config)
    assert any(f["kind"] == "incast" for f in expected), expected

    folder = tmp_path / "processes"
    folder.mkdir()
    env = {
        **os.environ,
        "ROCESCOPE_CONFIG": str(write_config(folder, "sink:\n  max_seconds: 0.3\n")),
        "ROCESCOPE_TRANSPORT__KIND": "kafka",
        "ROCESCOPE_KAFKA__BOOTSTRAP_SERVERS": broker.bootstrap,  # the comma form every Kafka tool takes
        "COLUMNS": "200",
    }
    with open(folder / "sink.log", "wb") as log:
        sink = subprocess.Popen(rocescope("sink"), env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        collect = subprocess.run(
            rocescope("sim", "run", *SCENARIO, "--out", str(folder / "run")), env=env, capture_output=True, timeout=120
        )
        assert collect.returncode == 0, collect.stderr.decode()
        transport = KafkaTransport(KafkaConfig(bootstrap_servers=[broker.bootstrap]))
        deadline = time.monotonic() + 60
        while transport.unlanded("rocescope-sink", schema.STREAMS) and time.monotonic() < deadline:
            assert sink.poll() is None, (folder / "sink.log").read_text()
            time.sleep(0.2)
        assert transport.unlanded("rocescope-sink", schema.STREAMS) == 0, "the sink landed everything published"
        transport.close()
        sink.send_signal(signal.SIGTERM)  # one process owns the embedded store: the sink hands it over
        assert sink.wait(30) == 0
    finally:
        if sink.poll() is None:
            sink.kill()
            sink.wait()
    assert "sink stopped" in (folder / "sink.log").read_text()

    summary = json.loads((folder / "run" / "summary.json").read_text())
    analyze = subprocess.run(
        rocescope("analyze", "--from", summary["start"], "--to", summary["end"]), env=env, capture_output=True
    )
    assert analyze.returncode == 0, analyze.stderr.decode()
    listed = subprocess.run(rocescope("findings", "--json", "--since", summary["start"]), env=env, capture_output=True)
    assert listed.returncode == 0, listed.stderr.decode()
    found = json.loads(listed.stdout)
    assert comparable(found, summary["start"]) == comparable(expected, expected_start)
