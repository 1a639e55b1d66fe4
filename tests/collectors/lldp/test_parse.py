"""LLDP parsing: lldpcli JSON variants (lldpd's own outputs, the simulator's), openconfig-lldp notifications."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.lldp.parse import Neighbor, links_from_notifications, parse_lldpcli
from rocescope.errors import DecodeError
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.topology import FabricSpec, Topology

FIXTURES = Path(__file__).parents[2] / "fixtures"
Truth = Callable[[Topology, str], list[Neighbor]]


def test_lldpd_json_and_json0_give_the_same_neighbor() -> None:
    """lldpd's own test outputs: port id is a MAC, so the peer port is the port description (eth1)."""
    want = [Neighbor("ns-1", "eth0", "ns-2.example.com", "eth1")]
    for name in ("lldpd_test_lldpcli_neighbors.json", "lldpd_test_lldpcli_neighbors.json0"):
        path = FIXTURES / "lldp" / name
        assert (path.parent / f"{name}.source.txt").exists()
        assert parse_lldpcli(path.read_bytes(), "ns-1") == (want, 0)


def test_sim_hosts_and_switches_single_and_many_neighbors(topo: Topology, truth: Truth) -> None:
    """One neighbor is an object, several a list of one-key objects (the facade writes both as lldpd does)."""
    for dev in ("gpu-001", "leaf-r0-01", "spine-01"):
        found, bad = parse_lldpcli(json.dumps(lldp_neighbors_json(topo, dev)), dev)
        assert (sorted(found), bad) == (truth(topo, dev), 0)
    one = Topology(FabricSpec(hosts=2, rails=1, spines=1))
    host = one.hosts[0].name
    doc = lldp_neighbors_json(one, host)
    assert isinstance(doc["lldp"]["interface"], dict)
    assert sorted(parse_lldpcli(json.dumps(doc), host)[0]) == truth(one, host)


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
def test_fuzz_a_garbled_neighbor_keeps_the_good_ones(topo: Topology, truth: Truth, bad: object) -> None:
    doc = lldp_neighbors_json(topo, "leaf-r0-01")
    doc["lldp"]["interface"].append({"Ethernet999": bad})
    found, skipped = parse_lldpcli(doc, "leaf-r0-01")
    assert set(truth(topo, "leaf-r0-01")) <= set(found)
    assert len(found) + skipped == len(truth(topo, "leaf-r0-01")) + 1


def test_gnmi_whole_tree_json_with_module_prefixes() -> None:
    n = pb.Notification(timestamp=1)
    u = n.update.add()
    u.path.elem.add(name="lldp")
    u.val.json_ietf_val = json.dumps({"openconfig-lldp:interfaces": {"interface": [{"name": "Ethernet8", "neighbors": {
        "neighbor": [{"id": "1", "state": {"system-name": "gpu-007", "port-id": "04:3f:72:aa:bb:cc",
                                           "port-id-type": "openconfig-lldp-types:MAC_ADDRESS",
                                           "port-description": "eth2"}}]}}]}}).encode()  # fmt: skip
    assert links_from_notifications([n], "leaf") == ([Neighbor("leaf", "Ethernet8", "gpu-007", "eth2")], 0)
