"""LLDP collector: one failing source never stops the others; the CLI prints, then lands `links`."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.collectors.gnmi.targets import GnmiTarget
from rocescope.collectors.lldp.collector import LldpCollector
from rocescope.collectors.lldp.sources import GnmiLldpSource, HostLldp, LldpcliOutput
from rocescope.sim.facades.gnmi_lldp import LldpGnmiFacade
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.topology import Topology

runner = CliRunner()


def test_one_failing_target_never_stops_the_others(topo: Topology) -> None:
    good = HostLldp("gpu-001", LldpcliOutput(json.dumps(lldp_neighbors_json(topo, "gpu-001")).encode()))
    broken = HostLldp("gpu-002", LldpcliOutput(b"{trunc"))
    dead = GnmiLldpSource(GnmiTarget("leaf-x", "127.0.0.1:1", timeout_s=0.5))
    c = LldpCollector([broken, dead, good])
    batches = c.poll_once()
    assert [b.key for b in batches] == ["gpu-001"]
    assert batches[0].data.column("source").to_pylist() == ["lldp"] * 2
    h = c.health()
    assert h["gpu-001"].up and not h["gpu-002"].up and not h["leaf-x"].up
    assert c.metrics.value("rocescope_lldp_poll_failures_total", target="gpu-002") == 1
    assert c.metrics.value("rocescope_lldp_polls_total", target="gpu-001") == 1
    assert c.metrics.value("rocescope_lldp_values_total", target="gpu-001") == 2


def test_cli_once_prints_then_run_lands_links(topo: Topology, tmp_path: Path) -> None:
    (tmp_path / "gpu-001.json").write_text(json.dumps(lldp_neighbors_json(topo, "gpu-001")))
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - {name: gpu-001, file: gpu-001.json}\n")
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n")
    with LldpGnmiFacade(topo, "leaf-r0-01") as target:
        gnmi = tmp_path / "gnmi.yaml"
        gnmi.write_text(f"targets:\n  - {{name: leaf-r0-01, address: '{target.address}', vendor: sonic}}\n")
        args = ["--config", str(cfg), "collect", "lldp", "--targets", str(hosts), "--gnmi-targets", str(gnmi)]
        result = runner.invoke(app, [*args, "--once"])
        assert result.exit_code == 0, result.output
        assert "leaf-r0-01: up" in result.output and "Ethernet0" in result.output
        result = runner.invoke(app, [*args, "--seconds", "0.5"])
        assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["--config", str(cfg), "sql", "SELECT device, count() FROM links GROUP BY device "
                                 "ORDER BY device", "-f", "csv"])  # fmt: skip
    n_leaf = len(topo.ports_of("leaf-r0-01"))
    assert result.stdout.splitlines()[1:] == ['"gpu-001",2', f'"leaf-r0-01",{n_leaf}']


def test_cli_takes_hosts_and_switches_from_the_config(topo: Topology, tmp_path: Path) -> None:
    """collectors.lldp.hosts inline, and (lldp.gnmi: true) the switches of collectors.gnmi.targets."""
    capture = tmp_path / "gpu-001.json"
    capture.write_text(json.dumps(lldp_neighbors_json(topo, "gpu-001")))
    with LldpGnmiFacade(topo, "leaf-r0-01") as target:
        cfg = tmp_path / "rocescope.yaml"
        cfg.write_text(
            f"store:\n  path: {tmp_path / 'data'}\ncollectors:\n"
            f"  gnmi:\n    targets: [{{name: leaf-r0-01, address: '{target.address}', vendor: sonic}}]\n"
            f"  lldp:\n    gnmi: true\n    gnmi_mode: once\n    hosts: [{{name: gpu-001, file: '{capture}'}}]\n"
        )
        result = runner.invoke(app, ["--config", str(cfg), "collect", "lldp", "--once"])
    assert result.exit_code == 0, result.output
    assert "gpu-001: up" in result.output and "leaf-r0-01: up" in result.output
    n_rows = 2 + len(topo.ports_of("leaf-r0-01"))
    assert f"{n_rows} rows" in result.output
