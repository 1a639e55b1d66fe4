"""Bulk pcap decoding rate: the numpy fast path on a synthetic capture, pyshark/tshark on a sample.

The capture repeats a real Soft-RoCE RDMA WRITE frame (tests/fixtures/realdata) with its PSN, UDP
source port, destination QP and timestamp perturbed per frame, so every row differs.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
import time
from pathlib import Path

import numpy as np

from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.fast import batches, decode_pcap
from rocescope.collectors.pcap.tshark import PcapFile

FIXTURE = (
    Path(__file__).parent.parent / "tests" / "fixtures" / "realdata" / "03_pcap" / "rdma_ib_tutorial_rdma_write_bw.pcap"
)


def _roce_frame() -> bytes:
    data = FIXTURE.read_bytes()
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        frame = data[off + 16 : off + 16 + incl]
        if len(frame) > 42 and frame[23] == 17 and frame[36:38] == b"\x12\xb7":
            return frame
        off += 16 + incl
    raise SystemExit("no RoCEv2 frame in the fixture")


def synthesize(path: Path, count: int) -> None:
    """A classic pcap of `count` RoCEv2 frames, built with numpy (record header + frame per row)."""
    frame = np.frombuffer(_roce_frame(), np.uint8)
    n = len(frame)
    rec = np.zeros((count, 16 + n), np.uint8)
    rec[:, 16:] = frame
    i = np.arange(count, dtype=np.uint32)
    hdr = np.zeros((count, 4), "<u4")
    hdr[:, 0] = 1_700_000_000 + i // 1_000_000
    hdr[:, 1] = i % 1_000_000
    hdr[:, 2] = n
    hdr[:, 3] = n
    rec[:, :16] = hdr.view(np.uint8)
    rec[:, 16 + 34] = 0xC0 | ((i >> 8) & 0x3F)  # UDP source port 0xC000 + i
    rec[:, 16 + 35] = i & 0xFF
    bth = 16 + 42
    for k, shift in enumerate((16, 8, 0)):
        rec[:, bth + 9 + k] = (i >> shift) & 0xFF  # PSN
        rec[:, bth + 5 + k] = ((i % 4096) >> shift) & 0xFF  # dest QP
    with path.open("wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))
        out.write(rec.tobytes())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--packets", type=int, default=1_000_000)
    parser.add_argument("--sample", type=int, default=300, help="frames decoded through pyshark")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        big, small = Path(tmp) / "big.pcap", Path(tmp) / "small.pcap"
        synthesize(big, args.packets)
        synthesize(small, args.sample)
        start = time.perf_counter()
        decoded = decode_pcap(big.read_bytes())
        rows = sum(b.num_rows for b in batches(decoded, "bench", 1, 10_000))
        fast = time.perf_counter() - start
        assert rows == args.packets, rows
        collector = PcapCollector("bench", fast_files=False)
        source = PcapFile(small)
        start = time.perf_counter()
        slow_rows = sum(b.num_rows for b in collector.collect(source))
        slow = time.perf_counter() - start
        source.close()
        assert slow_rows == args.sample, slow_rows
    print(f"pcap_fast_decode: {rows / fast:,.0f} packets/s ({rows} packets in {fast:.2f} s, Arrow batches included)")
    print(f"pcap_pyshark_decode: {slow_rows / slow:,.0f} packets/s ({slow_rows} packets in {slow:.2f} s)")


if __name__ == "__main__":
    main()
