"""The README's "Through Kafka" layout, as processes over the embedded broker: `rocescope sim run` publishing
(standing in for the collectors), `rocescope sink` landing, `rocescope analyze` over the run: every row published
lands, once, and the analysis finds the run's incast where its ground truth puts it. (That the same rows give the
same findings in one process is what every simulated run of the suite checks on the in-process transport.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rocescope import schema
from rocescope.config import KafkaConfig
from rocescope.pipeline.kafka import KafkaTransport
from rocescope.testbed.tansu import Broker

SCENARIO = ["--scenario", "incast", "--duration", "75s"]


def rocescope(*args: str) -> list[str]:
    return [sys.executable, "-m", "rocescope.cli", *args]


def test_sink_and_analysis_processes_over_the_broker_land_every_row_and_find_the_incast(
    tmp_path: Path, broker: Broker, write_config: Callable[..., Path]
) -> None:
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
    for stream, published in summary["rows"].items():
        counted = subprocess.run(rocescope("sql", f"SELECT count() AS n FROM {stream}", "--format", "json"), env=env,
                                 capture_output=True)  # fmt: skip
        assert counted.returncode == 0, counted.stderr.decode()
        assert int(json.loads(counted.stdout)["n"]) == published, stream  # every row, once (JSONEachRow)
    analyze = subprocess.run(
        rocescope("analyze", "--from", summary["start"], "--to", summary["end"]), env=env, capture_output=True
    )
    assert analyze.returncode == 0, analyze.stderr.decode()
    listed = subprocess.run(rocescope("findings", "--json", "--since", summary["start"]), env=env, capture_output=True)
    assert listed.returncode == 0, listed.stderr.decode()
    found = json.loads(listed.stdout)
    truth = json.loads((folder / "run" / "ground_truth.json").read_text())
    (incast,) = [t for t in truth["incidents"] if t["kind"] == "incast"]
    assert any(f["kind"] == "incast" and set(f["ports"]) & set(incast["anchor"]) for f in found), (found, incast)
