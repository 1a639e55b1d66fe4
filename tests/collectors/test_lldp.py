"""LLDP collector: lldpcli JSON variants, gNMI openconfig-lldp from a real grpc target, the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.collectors.gnmi.collector import GnmiTarget
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.lldp import (
    GnmiLldpSource,
    HostLldp,
    LldpcliCommand,
    LldpcliOutput,
    LldpCollector,
    Neighbor,
    links_from_notifications,
    parse_lldpcli,
)
from rocescope.errors import DecodeError
from rocescope.sim.facades.gnmi_lldp import LldpGnmiFacade
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.topology import FabricSpec, Topology

FIXTURES = Path(__file__).parent.parent / "fixtures"
runner = CliRunner()


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology(FabricSpec(hosts=4, rails=2))


def _truth(topo: Topology, device: str) -> list[Neighbor]:
    return sorted(Neighbor(p.device, p.name, p.peer_device, p.peer_port) for p in topo.ports_of(device))


# --- lldpcli JSON ---------------------------------------------------------------------------------


def test_lldpd_json_and_json0_give_the_same_neighbor() -> None:
    """lldpd's own test outputs: port id is a MAC, so the peer port is the port description (eth1)."""
    want = [Neighbor("ns-1", "eth0", "ns-2.example.com", "eth1")]
    for name in ("lldpd_test_lldpcli_neighbors.json", "lldpd_test_lldpcli_neighbors.json0"):
        path = FIXTURES / "lldp" / name
        assert (path.parent / f"{name}.source.txt").exists()
        assert parse_lldpcli(path.read_bytes(), "ns-1") == (want, 0)


def test_sim_hosts_and_switches_single_and_many_neighbors(topo: Topology) -> None:
    """One neighbor is an object, several a list of one-key objects (the facade writes both as lldpd does)."""
    for dev in ("gpu-001", "leaf-r0-01", "spine-01"):
        found, bad = parse_lldpcli(json.dumps(lldp_neighbors_json(topo, dev)), dev)
        assert (sorted(found), bad) == (_truth(topo, dev), 0)
    one = Topology(FabricSpec(hosts=2, rails=1, spines=1))
    host = one.hosts[0].name
    doc = lldp_neighbors_json(one, host)
    assert isinstance(doc["lldp"]["interface"], dict)
    assert sorted(parse_lldpcli(json.dumps(doc), host)[0]) == _truth(one, host)


def test_variants_no_sysname_local_ids_and_empty() -> None:
    doc = {
        "lldp": {
            "interface": [
                {"eth0": {"chassis": {"id": {"type": "mac", "value": "50:6b:4b:f6:1e:b1"}},
                          "port": {"id": {"type": "local", "value": "Ethernet12"}}}},
                {"eth1": {"chassis": {"sw-1": {"id": {"type": "mac", "value": "aa:bb:cc:dd:ee:ff"}}},
                          "port": {"id": {"type": "local", "value": "17"}, "descr": "Ethernet68"}}},
                {"eth2": {"chassis": {"sw-1": {}}, "port": {"id": {"type": "ifname", "value": "Ethernet4"}}}},
                {"eth3": "garbage"},
                {"eth4": {"chassis": {"a": {}, "b": {}}, "port": {"id": {"type": "ifname", "value": "x"}}}},
            ]
        }
    }  # fmt: skip
    found, bad = parse_lldpcli(doc, "h")
    assert found == [
        Neighbor("h", "eth0", "50:6b:4b:f6:1e:b1", "Ethernet12"),
        Neighbor("h", "eth1", "sw-1", "Ethernet68"),
        Neighbor("h", "eth2", "sw-1", "Ethernet4"),
    ]
    assert bad == 2
    assert parse_lldpcli(b'{"lldp": {}}', "h") == ([], 0)
    with pytest.raises(DecodeError):
        parse_lldpcli(b"lldpcli: unable to connect", "h")
    with pytest.raises(DecodeError):
        parse_lldpcli(b'{"other": 1}', "h")


_GOOD = json.dumps(lldp_neighbors_json(Topology(FabricSpec(hosts=4, rails=2)), "leaf-r0-01"))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, len(_GOOD)), junk=st.text(max_size=20))
def test_fuzz_truncated_or_garbled_lldpcli(cut: int, junk: str) -> None:
    """Truncated or garbled output raises DecodeError or skips bad neighbors; it never raises anything else."""
    text = _GOOD[:cut] + junk
    try:
        found, bad = parse_lldpcli(text, "leaf-r0-01")
    except DecodeError:
        return
    assert all(n.peer_device and n.peer_port for n in found) and bad >= 0


@settings(max_examples=100, deadline=None)
@given(bad=st.recursive(st.none() | st.integers() | st.text(max_size=5), lambda c: st.lists(c, max_size=3)
                        | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=8))  # fmt: skip
def test_fuzz_a_garbled_neighbor_keeps_the_good_ones(topo: Topology, bad: object) -> None:
    doc = lldp_neighbors_json(topo, "leaf-r0-01")
    doc["lldp"]["interface"].append({"Ethernet999": bad})
    found, skipped = parse_lldpcli(doc, "leaf-r0-01")
    assert set(_truth(topo, "leaf-r0-01")) <= set(found)
    assert len(found) + skipped == len(_truth(topo, "leaf-r0-01")) + 1


def test_live_command_seam_runs_a_real_process(tmp_path: Path) -> None:
    """The live side runs a command (here a stand-in for lldpcli printing the facade's JSON); failures are errors."""
    out = tmp_path / "lldp.json"
    out.write_text(_GOOD)
    src = HostLldp("leaf-r0-01", LldpcliCommand((sys.executable, "-c", f"print(open({str(out)!r}).read())")))
    assert len(src.neighbors()[0]) == len(json.loads(_GOOD)["lldp"]["interface"])
    with pytest.raises(DecodeError, match="exited 3"):
        LldpcliCommand((sys.executable, "-c", "import sys; sys.exit(3)")).output()
    with pytest.raises(DecodeError):
        LldpcliCommand(("/nonexistent/lldpcli",)).output()


# --- gNMI openconfig-lldp ---------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "encoding", "get_enabled"), [
    ("get", "json_ietf", True), ("get", "proto", True), ("once", "json", True), ("get", "json_ietf", False),
])  # fmt: skip
def test_gnmi_lldp_from_a_real_target(topo: Topology, mode: str, encoding: str, get_enabled: bool) -> None:
    with LldpGnmiFacade(topo, "leaf-r0-01", get_enabled=get_enabled) as target:
        src = GnmiLldpSource(GnmiTarget("leaf-r0-01", target.address, encoding=encoding), mode)
        found, bad = src.neighbors()
        assert (sorted(found), bad) == (_truth(topo, "leaf-r0-01"), 0)
        assert src.used == ("get" if mode == "get" and get_enabled else "once")


def test_gnmi_malformed_updates_are_skipped_and_counted(topo: Topology) -> None:
    bad = pb.Notification(timestamp=1, prefix=pb.Path())
    u = bad.update.add()
    for name in ("lldp", "interfaces"):
        u.path.elem.add(name=name)
    u.val.json_ietf_val = b'{"interface": [{"name": "Ethernet9", "neighbors": {"neighbor": [{"id": "x", "state": '
    with LldpGnmiFacade(topo, "leaf-r0-01", extra=lambda: [bad, b"\xff\x00garbage"]) as target:
        src = GnmiLldpSource(GnmiTarget("leaf-r0-01", target.address), "once")
        found, skipped = src.neighbors()
    assert sorted(found) == _truth(topo, "leaf-r0-01")
    assert skipped == 2


def test_gnmi_whole_tree_json_with_module_prefixes() -> None:
    n = pb.Notification(timestamp=1)
    u = n.update.add()
    u.path.elem.add(name="lldp")
    u.val.json_ietf_val = json.dumps({"openconfig-lldp:interfaces": {"interface": [{"name": "Ethernet8", "neighbors": {
        "neighbor": [{"id": "1", "state": {"system-name": "gpu-007", "port-id": "04:3f:72:aa:bb:cc",
                                           "port-id-type": "openconfig-lldp-types:MAC_ADDRESS",
                                           "port-description": "eth2"}}]}}]}}).encode()  # fmt: skip
    assert links_from_notifications([n], "leaf") == ([Neighbor("leaf", "Ethernet8", "gpu-007", "eth2")], 0)


# --- collector and CLI ------------------------------------------------------------------------------


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
