"""The numpy fast path on pcapng (dumpcap's format) against tshark's dissection on the real captures, as
Wireshark's editcap rewrites them and as other writers shape them."""

from __future__ import annotations

import shutil
import struct
import subprocess
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.fast import decode_pcap
from rocescope.collectors.pcap.framing import CUT_SHORT, UnsupportedCapture
from rocescope.collectors.pcap.pcapng import pcapng_records
from rocescope.collectors.pcap.tshark import PcapFile

from damaged_capture import check_damaged_capture, record_ends

PCAPS = Path(__file__).parents[2] / "fixtures" / "realdata" / "03_pcap"
ROCE_PCAPS = sorted(p for p in PCAPS.glob("*.pcap") if "native_infiniband" not in p.name)
tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
CM = (PCAPS / "rdma_ib_tutorial_rdma_cm.pcap").read_bytes()


def _collect(path: Path, fast: bool) -> tuple[list[dict[str, object]], PcapCollector]:
    collector = PcapCollector("gpu-001/eth0", sampling_rate=100, fast_files=fast)
    source = PcapFile(path)
    rows = [row for b in collector.collect(source, batch_rows=7) for row in pa.Table.from_batches([b.data]).to_pylist()]
    source.close()
    return rows, collector


editcap = pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap (Wireshark) is not installed")
_SHB, _IDB, _SPB, _ISB, _EPB = 0x0A0D0D0A, 1, 3, 5, 6


def _to_pcapng(path: Path, out: Path) -> Path:
    """The real capture rewritten as pcapng by Wireshark's own editcap."""
    target = out / (path.stem + ".pcapng")
    subprocess.run(["editcap", "-F", "pcapng", str(path), str(target)], check=True, capture_output=True)
    assert target.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    return target


def _block(order: str, kind: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack(order + "II", kind, len(body) + 12) + body + struct.pack(order + "I", len(body) + 12)


def _reencode(data: bytes, order: str, nanoseconds: bool, simple: bool = False) -> bytes:
    """A little-endian pcapng (editcap's) written again in `order`, with if_tsresol 9 (ns) when asked, an
    Interface Statistics Block after each packet, and Simple Packet Blocks when asked: shapes dumpcap and
    other writers produce that editcap cannot be told to write."""
    out, off = [], 0
    while off < len(data):
        kind, length = struct.unpack_from("<II", data, off)
        body = data[off + 8 : off + length - 4]
        if kind == _SHB:
            out.append(_block(order, _SHB, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1)))
        elif kind == _IDB:
            linktype, snaplen = struct.unpack_from("<HxxI", body)
            opts = struct.pack(order + "HH", 9, 1) + b"\x09\0\0\0" if nanoseconds else b""
            out.append(_block(order, _IDB, struct.pack(order + "HHI", linktype, 0, snaplen) + opts + b"\0" * 4))
        elif kind == _EPB:
            ifid, high, low, cap, orig = struct.unpack_from("<5I", body)
            frame = body[20 : 20 + cap]
            if simple:
                out.append(_block(order, _SPB, struct.pack(order + "I", orig) + frame))
            else:
                ts = ((high << 32) | low) * (1000 if nanoseconds else 1)
                head = struct.pack(order + "5I", ifid, ts >> 32, ts & 0xFFFFFFFF, cap, orig)
                out.append(_block(order, _EPB, head + frame))
            out.append(_block(order, _ISB, struct.pack(order + "III", 0, 0, 0)))  # statistics: skipped
        off += length
    return b"".join(out)


BIG_ENDIAN_TOO = ("rdma_ib_tutorial_rdma_cm.pcap", "scapy_realpkts_cnp_cx4lx_and_rocev1.pcap")


@tshark
@editcap
@pytest.mark.parametrize("path", ROCE_PCAPS, ids=lambda p: p.name)
def test_pcapng_fast_path_equals_tshark_field_for_field(path: Path, tmp_path: Path) -> None:
    """editcap's pcapng of each real capture, and its big-endian nanosecond rewrite: the fast path decodes
    them (no tshark fallback) into exactly the rows and skip counts tshark gives, and the classic file's rows."""
    little = _to_pcapng(path, tmp_path)
    captures = [little]
    if path.name in BIG_ENDIAN_TOO:  # a few suffice for the byte order; each costs two tshark runs
        captures.append(tmp_path / "big.pcapng")
        captures[-1].write_bytes(_reencode(little.read_bytes(), ">", nanoseconds=True))
    classic_rows, _ = _collect(path, fast=True)
    for capture in captures:
        decode_pcap(capture.read_bytes())  # no UnsupportedCapture: the fast path reads pcapng itself
        fast_rows, fast = _collect(capture, fast=True)
        slow_rows, slow = _collect(capture, fast=False)
        assert fast_rows == slow_rows == classic_rows
        assert (fast.skipped, fast.malformed, fast.source_errors) == (slow.skipped, slow.malformed, slow.source_errors)


@editcap
def test_pcapng_simple_packet_blocks_and_damage(tmp_path: Path) -> None:
    little = _to_pcapng(PCAPS / "rdma_ib_tutorial_rdma_cm.pcap", tmp_path).read_bytes()
    whole = decode_pcap(little)
    simple = decode_pcap(_reencode(little, "<", nanoseconds=False, simple=True))
    drop_ts = ["ts"]
    assert simple.table("p", 1).drop(drop_ts).to_pylist() == whole.table("p", 1).drop(drop_ts).to_pylist()
    assert set(simple.columns["ts"].tolist()) == {0}  # a simple packet block carries no time
    cut = decode_pcap(little[: len(little) // 2])
    assert cut.error == CUT_SHORT and 0 < cut.num_rows < whole.num_rows
    assert cut.table("p", 1).to_pylist() == whole.table("p", 1).slice(0, cut.num_rows).to_pylist()
    with pytest.raises(UnsupportedCapture, match="link type"):  # a non-Ethernet interface: tshark reads it
        decode_pcap(_to_pcapng(PCAPS / "native_infiniband_erf.pcap", tmp_path).read_bytes())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, 30_000), garble=st.lists(st.tuples(st.integers(0, 30_000), st.integers(0, 255)), max_size=8))
def test_fuzz_damaged_pcapng(cut: int, garble: list[tuple[int, int]]) -> None:
    """Only DecodeError escapes a damaged pcapng; the rows of the packet blocks wholly before the first
    damaged byte are kept."""
    check_damaged_capture(CM_NG, cut, garble, _block_ends)


def _block_ends(data: bytes) -> list[int]:
    """Where each packet block of a little-endian pcapng ends."""
    return [int(s) - 28 + struct.unpack_from("<I", data, int(s) - 24)[0] for s in pcapng_records(data)[0]]


CM_NG = _reencode(
    b"".join(  # the cm capture as little-endian pcapng, built without editcap so the fuzz test always runs
        [_block("<", _SHB, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1)), _block("<", _IDB, struct.pack("<HHI", 1, 0, 0))]
        + [
            _block("<", _EPB, struct.pack("<5I", 0, sec >> 32, sec & 0xFFFFFFFF, len(frame), len(frame)) + frame)
            for sec, frame in (
                (i * 1000, CM[off + 16 : off + 16 + struct.unpack_from("<I", CM, off + 8)[0]])
                for i, off in enumerate([24, *record_ends(CM)[:-1]])
            )
        ]
    ),
    "<",
    nanoseconds=True,
)


@tshark
def test_pcapng_of_several_named_interfaces_names_each_packet_by_its_interface(tmp_path: Path) -> None:
    """A capture of several ports in one pcapng (dumpcap -i a -i b; the simulator's mirror files): each
    packet's capture point is its interface's if_name, as tshark reads it; one named interface keeps the
    capture point given."""
    from rocescope.sim.mirror import write_pcapng

    data = (PCAPS / "rdma_ib_tutorial_rdma_write_bw.pcap").read_bytes()
    starts = [end + 16 for end in [24, *record_ends(data)[:-1]]]
    frames = [data[s : s + struct.unpack_from("<I", data, s - 8)[0]] for s in starts]
    ts = np.arange(len(frames), dtype=np.int64) * 1_000_003 + 1_700_000_000 * 10**9
    lengths = np.array([len(f) for f in frames], np.int64)
    names = ["leaf-r0-01/Ethernet0", "leaf-r0-01/Ethernet4", "leaf-r0-02/Ethernet0"]
    iface = np.arange(len(frames), dtype=np.int64) % 3
    path = tmp_path / "ports.pcapng"
    write_pcapng(path, ts, frames, lengths, iface, names)
    table = decode_pcap(path.read_bytes()).table("ignored", 1)
    cmd = ["tshark", "-r", str(path), "-Y", "infiniband", "-T", "fields", "-E", "separator=|"]
    out = subprocess.run([*cmd, "-e", "frame.interface_name", "-e", "frame.time_epoch"], capture_output=True, text=True)
    seen = [line.split("|") for line in out.stdout.split()]
    assert table.num_rows > 10 and table.column("capture_point").to_pylist() == [point for point, _ in seen]
    assert {point for point, _ in seen} == set(names)
    assert table.column("ts").cast(pa.int64()).to_pylist() == [int(Decimal(t) * 10**9) for _, t in seen]
    renamed = decode_pcap(path.read_bytes()).table("x", 1, {names[0]: "spine-01/Ethernet8"})
    assert set(renamed.column("capture_point").to_pylist()) == {"spine-01/Ethernet8", *names[1:]}
    write_pcapng(path, ts, frames, lengths, np.zeros(len(frames), np.int64), names[:1])
    one = decode_pcap(path.read_bytes())
    assert set(one.table("mirror-1", 1).column("capture_point").to_pylist()) == {"mirror-1"}
    assert set(one.table("mirror-1", 1, {names[0]: "p"}).column("capture_point").to_pylist()) == {"p"}
