"""Values as devices spell them: every port-speed word of the published models reads as its bit rate, an
unknown speed is no value (never a zero), numbers and state words read as before."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from rocescope.collectors.gnmi.values import reading, speed_bps

import yang_tree

YANG = Path(__file__).resolve().parents[2] / "fixtures" / "yang"
_RATE = re.compile(r"(\d+(?:\.\d+)?) ([MG])bps")


def openconfig_speeds() -> dict[str, str]:
    """ETHERNET_SPEED identities of openconfig-if-ethernet.yang -> their description."""
    module = yang_tree.parse(YANG / "openconfig-if-ethernet.yang")
    return {
        i.argument: i.find("description").argument
        for i in module.all("identity")
        if any(b.keyword == "base" and b.argument == "ETHERNET_SPEED" for b in i.children)
    }


def srlinux_speeds() -> list[str]:
    """The enum of SR Linux's /interface[name]/ethernet/port-speed."""
    module = yang_tree.parse(YANG / "srl_nokia-interfaces.yang")
    ethernet = module.find("grouping", "interface-top").find("list", "interface").find("container", "ethernet")
    return [e.argument for e in ethernet.find("leaf", "port-speed").find("type", "enumeration").all("enum")]


def test_every_openconfig_speed_identity_reads_as_its_described_rate() -> None:
    speeds = openconfig_speeds()
    assert {"SPEED_400GB", "SPEED_2500MB", "SPEED_800GB", "SPEED_UNKNOWN"} <= set(speeds)
    for identity, description in speeds.items():
        m = _RATE.match(description)
        if m is None:  # SPEED_UNKNOWN: "Interface speed is unknown..."
            assert identity == "SPEED_UNKNOWN"
            assert speed_bps(identity) is None and speed_bps(f"openconfig-if-ethernet:{identity}") is None
            continue
        want = float(m.group(1)) * (1e9 if m.group(2) == "G" else 1e6)
        assert speed_bps(identity) == want, identity
        assert speed_bps(f"openconfig-if-ethernet:{identity}") == want  # JSON_IETF: module-qualified
        assert speed_bps(f"oc-eth:{identity}") == want  # another prefix spelling


def test_every_srlinux_port_speed_enum_reads_as_its_rate() -> None:
    speeds = srlinux_speeds()
    assert {"10M", "100G", "400G", "1T"} <= set(speeds)
    unit = {"M": 1e6, "G": 1e9, "T": 1e12}
    for word in speeds:
        assert speed_bps(word) == float(word[:-1]) * unit[word[-1]], word


@pytest.mark.parametrize("word", ["SPEED_UNKNOWN", "N/A", "", "fast", "SPEED_0GB", "0G", "SPEED_400"])
def test_unreadable_speed_words_give_no_value(word: str) -> None:
    assert speed_bps(word) is None
    assert reading("port_speed_bps", word) is None


def test_reading_applies_scale_words_and_the_zero_speed_rule() -> None:
    assert reading("port_speed_bps", "400000", 1e6) == 400e9  # SONiC PORT_TABLE speed, Mb/s
    assert reading("port_speed_bps", "openconfig-if-ethernet:SPEED_100GB") == 100e9
    assert reading("port_speed_bps", "25G", 1e6) == 25e9  # a word is already in bits/s: no scale
    for unknown in (0, "0", -1, math.nan, "inf"):
        assert reading("port_speed_bps", unknown, 1e6) is None, unknown  # never a zero (or absurd) speed
    assert reading("tx_bytes", 0) == 0.0  # a counter's zero is a zero
    assert reading("oper_up", "DOWN") == 0.0 and reading(None, "up") == 1.0 and reading(None, True) == 1.0
    assert reading("admin_up", "UP") == 1.0 and reading("admin_up", "TESTING") == 0.0  # OpenConfig admin-status
    assert reading("admin_up", "enable") == 1.0 and reading("admin_up", "disable") == 0.0  # SR Linux admin-state
    assert reading("pfcwd_stormed", "stormed") == 1.0 and reading("pfcwd_stormed", "operational") == 0.0
    assert reading("tx_bytes", "stormed") is None
    assert reading("tx_bytes", "SPEED_400GB") is None  # words are values only where the metric says so
    assert reading(None, "SPEED_400GB") is None and reading("port_speed_bps", None) is None
