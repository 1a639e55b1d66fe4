"""Jobs collector: polls of the sources (changes only), static jobs, and the CLI."""

from __future__ import annotations

import copy
import datetime as dt
import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.collectors.jobs.collector import JobsCollector, PodListFile, StaticJobs
from rocescope.collectors.jobs.placement import HostNic, Inventory
from rocescope.sim.topology import Topology

runner = CliRunner()


def test_changes_only_ship_new_and_closed_placements(
    topo: Topology, pods: dict[str, Any], expected: list[tuple[Any, ...]]
) -> None:
    doc = copy.deepcopy(pods)
    c = JobsCollector([PodListFile(json.dumps(doc).encode())], Inventory.from_topology(topo))
    first = c.poll_once()
    assert first[0].num_rows == len(expected)
    assert c.poll_once() == []
    gone = doc["items"].pop()  # the last bert pod ends
    c.sources = [PodListFile(json.dumps(doc).encode())]
    end = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    closed = c.poll_once(now=end)[0].data.to_pylist()
    assert {r["pod"] for r in closed} == {gone["metadata"]["name"]} and len(closed) == 2
    assert {r["valid_to"] for r in closed} == {end}


def test_static_jobs_file(tmp_path: Path, topo: Topology) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text("jobs:\n  - {name: llama, hosts: [gpu-003, gpu-004], nics: [mlx5_0, mlx5_2]}\n  - {name: broken}\n")
    rows, bad = StaticJobs(f).rows(Inventory.from_topology(topo), dt.datetime.now(dt.UTC))
    assert [(r.host, r.rank, r.rdma_dev) for r in rows] == [
        ("gpu-003", 0, "mlx5_0"), ("gpu-003", 1, "mlx5_2"), ("gpu-004", 2, "mlx5_0"), ("gpu-004", 3, "mlx5_2")
    ]  # fmt: skip
    assert bad == 1


def test_cli_once_and_run(
    tmp_path: Path, topo: Topology, pods: dict[str, Any], expected: list[tuple[Any, ...]]
) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(json.dumps({"hosts": {h.name: [vars(n) | {} for n in
        [HostNic(x.netdev, x.rdma_dev, x.ip, x.gid) for x in topo.nics_of(h.name)]] for h in topo.hosts}}))  # fmt: skip
    kubectl = tmp_path / "pods.json"
    kubectl.write_text(json.dumps(pods))
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n")
    base = ["--config", str(cfg), "collect", "jobs", "--pods", str(kubectl), "--inventory", str(inv)]
    result = runner.invoke(app, [*base, "--once"])
    assert result.exit_code == 0, result.output
    assert "kubectl: up" in result.output and "ml/bert" in result.output
    result = runner.invoke(app, [*base, "--seconds", "0.5"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["--config", str(cfg), "sql", "SELECT count() FROM endpoints", "-f", "csv"])
    assert result.stdout.splitlines()[1] == str(len(expected))


def test_cli_sources_from_the_config_and_flags_replace_them(
    tmp_path: Path, topo: Topology, pods: dict[str, Any]
) -> None:
    kubectl = tmp_path / "pods.json"
    kubectl.write_text(json.dumps(pods))
    static = tmp_path / "jobs.yaml"
    static.write_text("jobs:\n  - {name: llama, hosts: [gpu-003], nics: [mlx5_0]}\n")
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(
        f"store:\n  path: {tmp_path / 'data'}\ncollectors:\n  jobs:\n    pods: {kubectl}\n    interval_s: 5\n"
    )
    result = runner.invoke(app, ["--config", str(cfg), "collect", "jobs", "--once"])
    assert result.exit_code == 0, result.output
    assert "kubectl: up" in result.output and "ml/bert" in result.output
    result = runner.invoke(app, ["--config", str(cfg), "collect", "jobs", "--once", "--static", str(static)])
    assert result.exit_code == 0, result.output
    assert "kubectl" not in result.output and "llama" in result.output  # a source flag replaces the config's


def test_a_running_collector_serves_its_own_metrics(tmp_path: Path, pods: dict[str, Any]) -> None:
    """`collectors.metrics_port`: a running `collect <x>` serves `rocescope_<x>_*` (polls, target_up,
    values_total{outcome,reason}) for Prometheus, as node_exporter serves its scrape errors."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    kubectl = tmp_path / "pods.json"
    kubectl.write_text(json.dumps(pods))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\ncollectors:\n  metrics_port: {port}\n")
    args = ["--config", str(cfg), "collect", "jobs", "--pods", str(kubectl), "--interval", "0.5", "--seconds", "20"]
    proc = subprocess.Popen([sys.executable, "-m", "rocescope.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={**os.environ})  # fmt: skip
    body, deadline = "", time.monotonic() + 20
    try:
        while time.monotonic() < deadline and 'rocescope_jobs_target_up{target="kubectl"} 1.0' not in body:
            time.sleep(0.3)
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                continue
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode()
    assert 'rocescope_jobs_target_up{target="kubectl"} 1.0' in body, out
    assert "rocescope_jobs_polls_total" in body
