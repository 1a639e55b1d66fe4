"""gNMI targets files: entries, `env:` secrets, default paths and intervals per vendor, bad entries refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocescope.collectors.gnmi.targets import DEFAULT_PATHS, load_targets
from rocescope.errors import ConfigError


def test_targets_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GNMI_PW", "pw")
    f = tmp_path / "targets.yaml"
    f.write_text(
        "targets:\n"
        "  - {name: leaf1, address: '10.0.0.1:50051', vendor: sonic, username: admin, password: env:GNMI_PW,\n"
        "     tls: true, ca_cert: /etc/ca.pem, pfc_priorities: [3]}\n"
        "  - name: spine1\n"
        "    address: spine1:57400\n"
        "    vendor: srlinux\n"
        "    encoding: proto\n"
        "    paths: [/interface/statistics, {path: /qos/interfaces/interface/pfc, interval: 0.5}]\n"
        "  - {name: oc1, address: 'oc1:9339'}\n"
    )
    leaf, spine, oc = load_targets(f)
    assert leaf.password == "pw" and leaf.tls and leaf.ca_cert == "/etc/ca.pem"
    assert {p.target for p in leaf.subscriptions} == {"COUNTERS_DB"}
    intervals = {p.path: p.interval for p in leaf.subscriptions}
    assert intervals["COUNTERS/Ethernet*"] == 10.0
    assert intervals["COUNTERS/Ethernet*/Queues"] == 1.0
    assert intervals["COUNTERS/Ethernet*/SAI_PORT_STAT_PFC_3_RX_PKTS"] == 1.0
    assert intervals["COUNTERS/Ethernet*/SAI_PORT_STAT_IF_OUT_OCTETS"] == 1.0  # saturation is judged per second
    assert intervals["PORT_TABLE"] == 1.0  # oper status: a flap is down for seconds
    assert [(p.path, p.interval) for p in spine.subscriptions] == [
        ("/interface/statistics", 1.0),
        ("/qos/interfaces/interface/pfc", 0.5),
    ]
    assert oc.subscriptions == DEFAULT_PATHS["openconfig"]
    oc_intervals = {p.path: p.interval for p in oc.subscriptions}
    assert oc_intervals["/qos/interfaces/interface/output/queues/queue/state"] == 1
    assert oc_intervals["/interfaces/interface/state/oper-status"] == 1
    assert oc_intervals["/interfaces/interface/ethernet/state/port-speed"] == 10
    assert "pw" not in repr(leaf)
    for bad in (
        "targets: [{name: a, address: 'x:1', colour: red}]",
        "targets: [{name: a, address: nowhere}]",
        "targets: [{name: a, address: 'x:1', vendor: junos}]",
        "targets: [{name: a, address: 'x:1', password: env:GNMI_UNSET_VARIABLE}]",
        "targets: [{name: a, address: 'x:1', paths: ['/a/b[k']}]",
        "targets: []",
    ):
        f.write_text(bad)
        with pytest.raises(ConfigError):
            load_targets(f)
