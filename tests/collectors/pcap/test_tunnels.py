"""Mirrored RoCE: a switch's mirror session sends copies to the collector in a tunnel (ERSPAN type II or III
over GRE, GRE-encapsulated Ethernet, VXLAN), and the rows are the carried frames', on both paths.

No public capture of mirrored RoCEv2 was found: the tunneled files are the real Soft-RoCE captures of
tests/fixtures/realdata/03_pcap with each frame put in the tunnel as RFC 1701/2784 GRE, the ERSPAN drafts
(draft-foschiano-erspan) and RFC 7348 VXLAN lay it out; tshark's own dissectors check the layout.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.tshark import PcapFile

from damaged_capture import check_damaged_capture

PCAPS = Path(__file__).parents[2] / "fixtures" / "realdata" / "03_pcap"
PLAIN = PCAPS / "rdma_ib_tutorial_rdma_write_bw.pcap"
CNP = PCAPS / "scapy_realpkts_cnp_cx4lx_and_rocev1.pcap"
pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")

OUTER_ETH = bytes.fromhex("020000000002020000000001")  # collector <- switch (locally administered MACs)
Wrap = Callable[[bytes, int], bytes]


def _ipv4(proto: int, payload: bytes) -> bytes:
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, 64, proto, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 9]))  # fmt: skip
    return header + payload


def _over_ipv4(proto: int) -> Callable[[bytes], bytes]:
    return lambda payload: OUTER_ETH + b"\x08\x00" + _ipv4(proto, payload)


def erspan2(frame: bytes, seq: int) -> bytes:
    gre = struct.pack("!HHI", 0x1000, 0x88BE, seq)  # S bit: a sequence number follows
    header = struct.pack("!HHI", 0x1000 | 0, 0x0800 | 7, 0)  # version 1 (type II), VLAN 0; COS, session 7
    return _over_ipv4(47)(gre + header + frame)


def erspan3(frame: bytes, seq: int) -> bytes:
    gre = struct.pack("!HHI", 0x1000, 0x22EB, seq)
    header = struct.pack("!HHIHH", 0x2000, 7, seq * 1000, 0, 0x0001)  # version 2 (type III), O bit set
    platform = struct.pack("!II", 0x00000003, 0)  # the platform-specific subheader the O bit announces
    return _over_ipv4(47)(gre + header + platform + frame)


def gre_ethernet(frame: bytes, _seq: int) -> bytes:
    return _over_ipv4(47)(struct.pack("!HHI", 0x2000, 0x6558, 42) + frame)  # K bit: a key follows


def vxlan(frame: bytes, _seq: int) -> bytes:
    header = struct.pack("!II", 0x08000000, 5001 << 8)  # I flag, VNI 5001
    udp = struct.pack("!HHHH", 49152, 4789, 8 + len(header) + len(frame), 0)
    return _over_ipv4(17)(udp + header + frame)


def _records(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    off = 24
    while off + 16 <= len(data):
        (incl,) = struct.unpack_from("<I", data, off + 8)
        yield data[off : off + 16], data[off + 16 : off + 16 + incl]
        off += 16 + incl


def tunneled(path: Path, wrap: Wrap, out: Path) -> Path:
    """`path` (classic little-endian pcap) with every frame in the tunnel `wrap` builds."""
    data = path.read_bytes()
    parts = [data[:24]]
    for seq, (head, frame) in enumerate(_records(data)):
        sec, frac, incl, orig = struct.unpack("<IIII", head)
        outer = wrap(frame, seq)
        extra = len(outer) - incl
        parts += [struct.pack("<IIII", sec, frac, incl + extra, orig + extra), outer]
    out.write_bytes(b"".join(parts))
    return out


def collect(path: Path, fast: bool) -> tuple[list[dict[str, object]], PcapCollector]:
    collector = PcapCollector("leaf-01/Ethernet8", sampling_rate=1, fast_files=fast)
    source = PcapFile(path)
    rows = [row for b in collector.collect(source) for row in pa.Table.from_batches([b.data]).to_pylist()]
    source.close()
    return rows, collector


@pytest.mark.parametrize("wrap", [erspan2, erspan3, gre_ethernet, vxlan], ids=lambda w: w.__name__)
@pytest.mark.parametrize("path", [PLAIN, CNP], ids=lambda p: p.name)
def test_a_mirrored_copy_gives_the_row_of_the_frame_it_carries(tmp_path: Path, wrap: Wrap, path: Path) -> None:
    plain_rows, plain = collect(path, fast=True)
    copy = tunneled(path, wrap, tmp_path / f"{wrap.__name__}.pcap")
    overhead = len(wrap(b"", 0))
    for fast in (True, False):
        rows, collector = collect(copy, fast)
        assert [{**r, "length": r["length"] - overhead} for r in rows] == plain_rows, (wrap.__name__, fast)
        assert (collector.skipped, collector.malformed) == (plain.skipped, plain.malformed), (wrap.__name__, fast)


def test_a_tunnel_in_a_tunnel_is_opened_twice_and_no_further(tmp_path: Path) -> None:
    """An ERSPAN copy of a VXLAN fabric's traffic: both tunnels opened. A third is counted, never guessed at."""
    plain_rows, _ = collect(PLAIN, fast=True)
    twice = tunneled(PLAIN, lambda f, s: erspan2(vxlan(f, s), s), tmp_path / "erspan_vxlan.pcap")
    rows, _ = collect(twice, fast=True)
    assert [(r["src_ip"], r["dst_ip"], r["psn"]) for r in rows] == [
        (r["src_ip"], r["dst_ip"], r["psn"]) for r in plain_rows
    ]
    thrice = tunneled(PLAIN, lambda f, s: erspan2(vxlan(gre_ethernet(f, s), s), s), tmp_path / "three.pcap")
    rows, collector = collect(thrice, fast=True)
    assert rows == [] and sum(collector.skipped.values()) == len(list(_records(PLAIN.read_bytes())))


def _wrapped(wrap: Wrap) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        return tunneled(PLAIN, wrap, Path(tmp) / "t.pcap").read_bytes()


TUNNELED = [_wrapped(erspan3), _wrapped(lambda f, s: erspan2(vxlan(f, s), s))]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(TUNNELED),
    cut=st.integers(0, 40_000),
    garble=st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 255)), max_size=8),
)
def test_fuzz_damaged_tunneled_captures(base: bytes, cut: int, garble: list[tuple[int, int]]) -> None:
    """A damaged tunnel header (a flag, a length, a protocol type) or a cut file: only DecodeError escapes, and
    the rows of the records wholly before the first damaged byte are the undamaged capture's."""
    check_damaged_capture(base, cut, garble)
