"""LLDP sources: a real process standing in for lldpcli, gNMI openconfig-lldp from a real grpc target."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.gnmi.targets import GnmiTarget
from rocescope.collectors.lldp.parse import Neighbor
from rocescope.collectors.lldp.sources import GnmiLldpSource, HostLldp, LldpcliCommand
from rocescope.errors import DecodeError
from rocescope.sim.facades.gnmi_lldp import LldpGnmiFacade
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.topology import FabricSpec, Topology

Truth = Callable[[Topology, str], list[Neighbor]]
_GOOD = json.dumps(lldp_neighbors_json(Topology(FabricSpec(hosts=4, rails=2)), "leaf-r0-01"))


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


@pytest.mark.parametrize(("mode", "encoding", "get_enabled"), [
    ("get", "json_ietf", True), ("get", "proto", True), ("once", "json", True), ("get", "json_ietf", False),
])  # fmt: skip
def test_gnmi_lldp_from_a_real_target(
    topo: Topology, truth: Truth, mode: str, encoding: str, get_enabled: bool
) -> None:
    with LldpGnmiFacade(topo, "leaf-r0-01", get_enabled=get_enabled) as target:
        src = GnmiLldpSource(GnmiTarget("leaf-r0-01", target.address, encoding=encoding), mode)
        found, bad = src.neighbors()
        assert (sorted(found), bad) == (truth(topo, "leaf-r0-01"), 0)
        assert src.used == ("get" if mode == "get" and get_enabled else "once")


def test_gnmi_malformed_updates_are_skipped_and_counted(topo: Topology, truth: Truth) -> None:
    bad = pb.Notification(timestamp=1, prefix=pb.Path())
    u = bad.update.add()
    for name in ("lldp", "interfaces"):
        u.path.elem.add(name=name)
    u.val.json_ietf_val = b'{"interface": [{"name": "Ethernet9", "neighbors": {"neighbor": [{"id": "x", "state": '
    with LldpGnmiFacade(topo, "leaf-r0-01", extra=lambda: [bad, b"\xff\x00garbage"]) as target:
        src = GnmiLldpSource(GnmiTarget("leaf-r0-01", target.address), "once")
        found, skipped = src.neighbors()
    assert sorted(found) == truth(topo, "leaf-r0-01")
    assert skipped == 2
