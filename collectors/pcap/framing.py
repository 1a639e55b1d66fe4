"""Classic pcap record framing for the fast path: where each record's frame starts, how long it is, and when.

A classic pcap is a 24-byte file header (the magic gives the byte order and micro- or nanosecond
timestamps; then the link type) and a 16-byte header per record (seconds, fraction, captured and
original length). Walking the records is sequential, since each length locates the next; their headers
are then read vectorized. pcapng's blocks are walked in `pcapng.py`; both end as `Records` for `fast.py`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rocescope.errors import DecodeError

__all__ = [
    "CUT_SHORT",
    "LINKTYPE_ETHERNET",
    "MAX_RECORD",
    "Records",
    "UnsupportedCapture",
    "classic_records",
    "frame_offsets",
    "pcap_header",
]

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

_MAGICS = {  # magic -> (byte order, nanoseconds per timestamp fraction unit)
    b"\xd4\xc3\xb2\xa1": ("<", 1000),
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
LINKTYPE_ETHERNET = 1
MAX_RECORD = 262_144  # tshark's own limit for an Ethernet record
CUT_SHORT = "the file appears to have been cut short in the middle of a packet"


class UnsupportedCapture(DecodeError):
    """Not an Ethernet pcap or pcapng: tshark has to read it."""


@dataclass
class Records:
    """Where each record's frame starts, its captured and original length and its time (ns)."""

    start: I64
    cap: I64
    orig: I64
    ts: I64

    def __len__(self) -> int:
        return len(self.start)

    def slice(self, a: int, b: int) -> Records:
        return Records(self.start[a:b], self.cap[a:b], self.orig[a:b], self.ts[a:b])


def pcap_header(data: bytes) -> tuple[str, int]:
    """(byte order, nanoseconds per timestamp fraction unit) of a classic Ethernet pcap; UnsupportedCapture
    for anything else (other link types, a header too short to tell)."""
    if len(data) < 24 or data[:4] not in _MAGICS:
        raise UnsupportedCapture("not a pcap or pcapng file")
    order, frac_ns = _MAGICS[data[:4]]
    (linktype,) = struct.unpack_from(order + "I", data, 20)
    if linktype & 0x0FFFFFFF != LINKTYPE_ETHERNET:
        raise UnsupportedCapture(f"link type {linktype} is not Ethernet")
    return order, frac_ns


def frame_offsets(data: bytes, order: str) -> tuple[I64, str | None]:
    """Start of every whole record, and why the walk stopped early (None when the file ended cleanly)."""
    unpack = struct.Struct(order + "I").unpack_from
    offsets: list[int] = []
    append = offsets.append
    off, end, error = 24, len(data), None
    while off + 16 <= end:
        (incl,) = unpack(data, off + 8)
        if incl > MAX_RECORD:
            error = f"record {len(offsets) + 1} claims {incl} bytes, more than the maximum of {MAX_RECORD}"
            break
        if off + 16 + incl > end:
            break
        append(off)
        off += 16 + incl
    if error is None and off < end:
        error = CUT_SHORT
    return np.array(offsets, np.int64), error


def classic_records(buf: U8, offsets: I64, order: str, frac_ns: int) -> Records:
    """The 16-byte record headers of a classic pcap (sec, frac, incl, orig), read vectorized."""
    hdr = buf[offsets[:, None] + np.arange(16)].copy()
    words = hdr.view(np.dtype(order + "u4")).astype(np.int64).reshape(-1, 4)
    return Records(offsets + 16, words[:, 2], words[:, 3], words[:, 0] * 1_000_000_000 + words[:, 1] * frac_ns)
