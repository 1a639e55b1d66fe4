"""The recorded side of the device seam: `.snmprec` parsing (the real walk, every type tag, garbled text)
and `SnmprecAgent` walking like an agent. The live side (pysnmp against real agents) is test_live_agents.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocescope.collectors.snmp.agent import SnmprecAgent, parse_snmprec, run_sync
from rocescope.collectors.snmp.objects import format_oid, parse_oid
from rocescope.errors import DecodeError

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "05_snmp"
SRLINUX = REAL / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec"


def test_parse_real_snmprec() -> None:
    data = parse_snmprec(SRLINUX.read_text())
    assert data.malformed == 0
    assert len(data.rows) == 34
    assert data.rows[0] == (parse_oid("1.3.6.1.2.1.1.1.0"), data.rows[0][1])
    values = dict(data.rows)
    assert values[parse_oid("1.3.6.1.2.1.2.2.1.2.16382")] == b'ethernet-1/1, "device1"'
    assert values[parse_oid("1.3.6.1.2.1.31.1.1.1.10.147454")] == 59369953751
    assert values[parse_oid("1.3.6.1.2.1.1.2.0")] == "1.3.6.1.4.1.6527.1.20.26"


def test_snmprec_from_missing_or_garbage_file(tmp_path: Path) -> None:
    with pytest.raises(DecodeError):
        SnmprecAgent.from_file(tmp_path / "missing.snmprec")
    bad = tmp_path / "bad.snmprec"
    bad.write_text("this is not|a walk\n1.3.6|999|x\n")
    with pytest.raises(DecodeError, match="no readable line"):
        SnmprecAgent.from_file(bad)


def test_snmprec_types() -> None:
    text = "\n".join(
        [
            "1.3.6.1.2.1.2.2.1.2.1|4x|657468302f31",  # hex OCTET STRING "eth0/1"
            "1.3.6.1.2.1.2.2.1.8.1|2|1",
            "1.3.6.1.2.1.4.20.1.1.10.0.0.1|64|10.0.0.1",
            "1.3.6.1.2.1.1.3.0|67|12345",
            "1.3.6.1.2.1.31.1.1.1.6.1|70x|ff",
            "1.3.6.1.2.1.31.1.1.1.7.1|130|",  # endOfMibView: no value
            "1.3.6.1.2.1.31.1.1.1.8.1|2:numeric|x",  # variation module: unsupported, counted
        ]
    )
    data = parse_snmprec(text)
    values = dict(data.rows)
    assert values[parse_oid("1.3.6.1.2.1.2.2.1.2.1")] == b"eth0/1"
    assert values[parse_oid("1.3.6.1.2.1.4.20.1.1.10.0.0.1")] == bytes([10, 0, 0, 1])
    assert values[parse_oid("1.3.6.1.2.1.31.1.1.1.6.1")] == 255
    assert len(data.rows) == 5 and data.malformed == 1


# --- fuzzing: garbled input never crashes with anything but the project's errors ---------------------

REAL_TEXT = SRLINUX.read_text()


@settings(max_examples=300, deadline=None)
@given(cut=st.integers(0, len(REAL_TEXT)), noise=st.text(max_size=300), at=st.integers(0, len(REAL_TEXT)))
def test_parse_snmprec_garbled_keeps_good_lines(cut: int, noise: str, at: int) -> None:
    garbled = REAL_TEXT[:at] + noise + REAL_TEXT[at:cut] if at < cut else REAL_TEXT[:cut] + noise
    data = parse_snmprec(garbled)
    good = parse_snmprec(REAL_TEXT)
    intact = {line for line in garbled.splitlines() if line in REAL_TEXT.splitlines()}
    kept = dict(data.rows)
    for oid, value in good.rows:
        line = next(line for line in REAL_TEXT.splitlines() if line.startswith(format_oid(oid) + "|"))
        if line in intact:
            assert kept.get(oid) == value


def test_snmprec_agent_walks_like_an_agent() -> None:
    agent = SnmprecAgent.from_file(SRLINUX)
    rows = run_sync(agent.walk([parse_oid("1.3.6.1.2.1.31.1.1.1.9"), parse_oid("1.3.6.1.2.1.2.2.1.3")]))
    assert [oid[-1] for oid, _ in rows] == [
        16382,
        114686,
        147454,
        278526,
        311294,
        704510,
        536887294,
        1077952510,
        16382,
        1606336,
        536887294,
    ]
