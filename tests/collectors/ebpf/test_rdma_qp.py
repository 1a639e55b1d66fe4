"""The `rdma resource show qp -j` parser and the QpSource seam (recorded and live), and RoCEv2 addressing as
the kernel derives it (flow label, UDP source port, GID -> IP)."""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope.collectors.ebpf.rdma_qp import (
    FixtureQpSource,
    QpRecord,
    QpSourceError,
    RdmaCommandQpSource,
    calc_flow_label,
    flow_label_to_udp_sport,
    gid_to_ip,
    parse_rdma_qp_json,
    roce_udp_sport,
)
from rocescope.errors import DecodeError
from rocescope.sim.roce import udp_sport as sim_udp_sport

QP_JSON = Path(__file__).parents[2] / "fixtures" / "rdma" / "rdma_resource_show_qp.json"


def test_fixture_parses_every_qp() -> None:
    parsed = FixtureQpSource.from_file(QP_JSON).snapshot()
    assert parsed.skipped == 0
    assert len(parsed.records) == 7
    kernel = [r for r in parsed.records if r.pid == 0]
    assert [(r.qpn, r.qp_type, r.comm) for r in kernel] == [(0, "SMI", "ib_core"), (1, "GSI", "ib_core")]
    assert parsed.records[2] == QpRecord(
        rdma_dev="mlx5_0",
        qpn=4714,
        dest_qpn=4715,
        port=1,
        qp_type="RC",
        state="RTS",
        pid=30489,
        comm="ib_write_bw",
        udp_sport=sim_udp_sport(4714, 4715),  # no GID or flow label here: the kernel's default port
    )
    unbound = parsed.records[-1]
    assert (unbound.rdma_dev, unbound.port, unbound.state, unbound.dest_qpn) == ("mlx5_3", 0, "RESET", 0)


def test_garbled_output_raises_decode_error_and_bad_records_are_skipped() -> None:
    with pytest.raises(DecodeError, match="not JSON"):
        parse_rdma_qp_json('[{"ifname": "mlx5_0", "lqpn": 1')
    with pytest.raises(DecodeError, match="want a JSON array"):
        parse_rdma_qp_json('{"ifname": "mlx5_0", "lqpn": 1}')
    # iproute2 4.x wrapped each record in its own array; junk around good records is skipped, not guessed at
    text = json.dumps(
        [
            [{"ifname": "mlx5_0", "lqpn": 7, "pid": 9, "comm": "a"}],
            {"ifname": "mlx5_0", "lqpn": -1},
            {"ifname": "", "lqpn": 3},
            {"ifname": "mlx5_0", "lqpn": 1 << 24},
            {"ifname": "mlx5_0", "lqpn": True},
            "junk",
            {"ifname": "mlx5_1", "lqpn": 8, "rqpn": 9, "pid": 10},
        ]
    )
    parsed = parse_rdma_qp_json(text)
    assert [(r.rdma_dev, r.qpn) for r in parsed.records] == [("mlx5_0", 7), ("mlx5_1", 8)]
    assert parsed.skipped == 5
    assert len(parsed.examples) == 3 and "lqpn=-1" in parsed.examples[0]


_good = st.builds(
    lambda dev, qpn, rqpn, pid: {"ifname": dev, "lqpn": qpn, "rqpn": rqpn, "pid": pid, "comm": "x", "type": "RC"},
    st.sampled_from(["mlx5_0", "mlx5_1", "bnxt_re0", "rxe0"]),
    st.integers(0, 0xFFFFFF),
    st.integers(0, 0xFFFFFF),
    st.integers(1, 0xFFFFFFFF),
)
_bad_value = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=1 << 24),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
_junk = st.one_of(
    st.integers(),
    st.text(max_size=10),
    st.none(),
    st.booleans(),
    st.dictionaries(st.text(max_size=6).filter(lambda k: k not in ("ifname", "lqpn")), st.integers(), max_size=3),
    st.builds(lambda r, v: {**r, "lqpn": v}, _good, _bad_value.filter(lambda v: v is not None)),
    st.builds(lambda r, v: {**r, "ifname": v}, _good, st.one_of(st.just(""), st.integers(), st.none())),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(good=st.lists(_good, max_size=8), junk=st.lists(_junk, max_size=8), data=st.data())
def test_fuzz_parser_keeps_good_records_and_skips_junk(good: list[dict[str, Any]], junk: list[Any], data: Any) -> None:
    order = data.draw(st.permutations([("g", i) for i in range(len(good))] + [("j", i) for i in range(len(junk))]))
    doc = [good[i] if kind == "g" else junk[i] for kind, i in order]
    parsed = parse_rdma_qp_json(json.dumps(doc))
    kept = [good[i] for kind, i in order if kind == "g"]
    assert [(r.rdma_dev, r.qpn, r.dest_qpn, r.pid) for r in parsed.records] == [
        (g["ifname"], g["lqpn"], g["rqpn"], g["pid"]) for g in kept
    ]
    assert parsed.skipped == len(junk)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fuzz_garbled_bytes_raise_decode_error_or_give_valid_records(data: Any) -> None:
    raw = bytearray(QP_JSON.read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        parsed = parse_rdma_qp_json(bytes(raw))
    except DecodeError:
        return
    for rec in parsed.records:
        assert rec.rdma_dev and 0 <= rec.qpn <= 0xFFFFFF and 0 <= rec.dest_qpn <= 0xFFFFFF
        assert 0 <= rec.pid <= 0xFFFFFFFF


@given(st.text())
def test_fuzz_any_text_is_decode_error_or_a_parse(text: str) -> None:
    with contextlib.suppress(DecodeError):
        parse_rdma_qp_json(text)


def test_live_rdma_tool_reads_or_says_why() -> None:
    """The real `rdma` binary: QPs where the host has RDMA devices, else a QpSourceError with its reason."""
    source = RdmaCommandQpSource()
    if not Path(source.rdma_path).exists():
        with pytest.raises(QpSourceError, match="not found"):
            source.snapshot()
        return
    try:
        parsed = source.snapshot()
    except QpSourceError as exc:
        assert "rdma -j resource show qp" in str(exc) and "exit" in str(exc)
    else:
        assert parsed.skipped == 0


def test_flow_label_and_udp_source_port_follow_the_kernel_helpers() -> None:
    assert calc_flow_label(4714, 4715) == calc_flow_label(4715, 4714)  # symmetric: both ends hash alike
    assert flow_label_to_udp_sport(0) == 0xC000
    assert flow_label_to_udp_sport(0xFFFFF) == 0xFFC0  # low 14 bits XOR high 6 bits, in 0xC000-0xFFFF
    assert roce_udp_sport(1, 2, flow_label=0x12345) == flow_label_to_udp_sport(0x12345)
    assert roce_udp_sport(4714, 4715) == flow_label_to_udp_sport(calc_flow_label(4714, 4715))
    assert all(0xC000 <= roce_udp_sport(q, q * 7 + 1) <= 0xFFFF for q in range(0, 1 << 24, 99991))


def test_gid_to_ip() -> None:
    assert gid_to_ip(socket.inet_pton(socket.AF_INET6, "::ffff:10.1.2.3")) == "10.1.2.3"
    assert gid_to_ip(socket.inet_pton(socket.AF_INET6, "fd00::7")) == "fd00::7"
    assert gid_to_ip(bytes(16)) == ""
    assert gid_to_ip(b"short") == ""
