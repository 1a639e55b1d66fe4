"""`collect pcap`, `collect nic` and `collect snmp`, run as users run them."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rocescope.cli import app

runner = CliRunner()
PCAPS = Path(__file__).parents[1] / "fixtures" / "realdata" / "03_pcap"


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (scripts/test installs it)")
def test_collect_pcap_lands_packets_and_warns_about_retention(
    tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    capture = str(PCAPS / "rdma_ib_tutorial_rdma_cm.pcap")
    keep = str(write_config(tmp_path, "  ttl_days: 0\n"))
    result = runner.invoke(app, ["--config", keep, "collect", "pcap", capture, "--capture-point", "gpu-001/eth0"])
    assert result.exit_code == 0, result.output
    assert "96 RoCEv2 packets from gpu-001/eth0" in result.output
    result = runner.invoke(app, ["--config", keep, "sql", "SELECT count() AS n FROM packets", "-f", "csv"])
    assert result.stdout.splitlines()[1] == "96"

    default_ttl = tmp_path / "ttl"
    default_ttl.mkdir()
    result = runner.invoke(app, ["--config", str(write_config(default_ttl)), "collect", "pcap", capture])
    assert result.exit_code == 0, result.output
    assert "96 packets are older than the retention" in result.output


def test_collect_nic_once_on_a_host_without_rdma(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    (tmp_path / "sys" / "class" / "infiniband").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    cfg = str(write_config(tmp_path))
    result = runner.invoke(app, ["--config", cfg, "collect", "nic", "--once", "--sysfs-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "1 polls of 0 RDMA ports" in result.output


def test_collect_snmp_once_against_snmpd(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    """Real snmpd on loopback, one dead target; the community comes from the environment."""
    from rocescope.testbed.snmpd import Snmpd, free_udp_port, snmpd_path

    if snmpd_path() is None:
        pytest.skip("Debian's snmpd is not installed (scripts/system-deps installs it as root)")
    agent = Snmpd(tmp_path / "snmpd", communities=("s3cret-community",)).start()
    try:
        targets = tmp_path / "targets.yaml"
        targets.write_text(
            "devices:\n"
            f"  - {{name: lo-agent, host: 127.0.0.1, port: {agent.port}, community: 'env:SNMP_COMMUNITY'}}\n"
            f"  - {{name: nobody, host: 127.0.0.1, port: {free_udp_port()}, timeout_s: 0.3, retries: 0}}\n"
        )
        cfg = str(write_config(tmp_path))
        result = runner.invoke(
            app,
            ["--config", cfg, "collect", "snmp", "--targets", str(targets), "--once"],
            env={"SNMP_COMMUNITY": "s3cret-community"},
        )
    finally:
        agent.stop()
    assert result.exit_code == 1, result.output  # one target is down
    assert "lo-agent: up, 1 polls" in result.output
    assert "nobody: DOWN" in result.output
    assert "s3cret-community" not in result.output
    assert re.search(r"counters:\s+\d+ rows", result.output), result.output  # --once prints what it would ship
    assert "rx_bytes" in result.output
    query = "SELECT count() AS n FROM counters WHERE device = 'lo-agent'"
    result = runner.invoke(app, ["--config", cfg, "sql", query, "-f", "csv"])
    assert result.stdout.splitlines()[1] == "0"  # ... and ships nothing


def test_collect_snmp_bad_targets_file(tmp_path: Path, write_config: Callable[..., Path]) -> None:
    targets = tmp_path / "t.yaml"
    targets.write_text("devices:\n  - {name: x, host: 127.0.0.1, colour: blue}\n")
    result = runner.invoke(app, ["--config", str(write_config(tmp_path)), "collect", "snmp", "--targets", str(targets)])
    assert result.exit_code == 1
    assert "devices[0]" in result.output and "colour" in result.output
