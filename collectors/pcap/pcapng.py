"""pcapng block walking for the fast path: where each packet's bytes are, how long, and when.

dumpcap writes pcapng by default, so live ring files (`ring.py`) are pcapng. Only the framing is
read here (Section Header with either byte order, Interface Description for the link type and the
`if_name` / `if_tsresol` / `if_tsoffset` options, Enhanced and Simple Packet Blocks); every other block is
skipped. The frames themselves are decoded vectorized by `fast.py`. A section with a non-Ethernet
interface raises UnsupportedCapture (tshark reads it); damage ends the walk with a reason and the
records before it are kept, as tshark does.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from rocescope.collectors.pcap.framing import CUT_SHORT, I64, LINKTYPE_ETHERNET, MAX_RECORD, U8, UnsupportedCapture

__all__ = ["Walk", "is_pcapng", "pcapng_records"]

_SHB, _IDB, _SPB, _EPB = 0x0A0D0D0A, 1, 3, 6
_BYTE_ORDER = {b"\x4d\x3c\x2b\x1a": "<", b"\x1a\x2b\x3c\x4d": ">"}
_OPT_NAME, _OPT_TSRESOL, _OPT_TSOFFSET = 2, 9, 14


class _Interface(NamedTuple):
    """An Interface Description Block: packet time in ns = units * mul // div + offset_ns."""

    linktype: int
    mul: int
    div: int
    offset_ns: int
    name: str


class Walk(NamedTuple):
    """Every packet's frame start, captured and original length, time (ns) and interface (an index into
    `names`, the interfaces' `if_name` in file order, "" where unnamed), and why the walk stopped early."""

    start: npt.NDArray[np.int64]
    cap: npt.NDArray[np.int64]
    orig: npt.NDArray[np.int64]
    ts: npt.NDArray[np.int64]
    error: str | None
    iface: npt.NDArray[np.int64]
    names: list[str]


def is_pcapng(data: bytes) -> bool:
    """Whether the file starts with a pcapng Section Header Block (the same bytes in either byte order)."""
    return data[:4] == _SHB.to_bytes(4, "big")


def _interface(data: bytes, off: int, length: int, order: str) -> _Interface:
    (linktype,) = struct.unpack_from(order + "H", data, off + 8)
    mul, div, offset_ns, name = 1000, 1, 0, ""  # default resolution: microseconds
    pos, end = off + 16, off + length - 4
    while pos + 4 <= end:
        code, size = struct.unpack_from(order + "HH", data, pos)
        if code == 0:
            break
        value = data[pos + 4 : pos + 4 + size]
        if code == _OPT_TSRESOL and size >= 1:
            r = value[0]
            if r & 0x80:
                mul, div = 1_000_000_000, 1 << (r & 0x7F)
            elif r <= 9:
                mul, div = 10 ** (9 - r), 1
            else:
                mul, div = 1, 10 ** (r - 9)
        elif code == _OPT_TSOFFSET and size == 8:
            (seconds,) = struct.unpack_from(order + "q", value)
            offset_ns = seconds * 1_000_000_000
        elif code == _OPT_NAME:
            name = value.split(b"\0", 1)[0].decode(errors="replace")
        pos += 4 + size + (-size % 4)
    return _Interface(linktype, mul, div, offset_ns, name)


@dataclass
class _Section:
    """One section's byte order, its interfaces (and how many packets came before each: a packet may
    only name interfaces described before it), and where its packet blocks are."""

    order: str
    interfaces: list[_Interface] = field(default_factory=list)
    packets_before: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)


def _frame_blocks(data: bytes) -> tuple[list[_Section], str | None]:
    """Walk the block framing (sequential: each length locates the next block); interface blocks are
    read here, packet blocks only located."""
    sections: list[_Section] = []
    sec = _Section("<")
    head = struct.Struct("<II").unpack_from
    off, end, error = 0, len(data), None
    while off < end:
        if off + 12 > end:
            error = CUT_SHORT
            break
        kind, length = head(data, off)
        if kind == _SHB:  # the same in either byte order
            found = _BYTE_ORDER.get(data[off + 8 : off + 12])
            if found is None:
                if off == 0:
                    raise UnsupportedCapture("pcapng section header with an unknown byte-order magic")
                error = f"section header at byte {off} has an unknown byte-order magic"
                break
            sec = _Section(found)
            sections.append(sec)
            head = struct.Struct(found + "II").unpack_from
            kind, length = head(data, off)
        if length < 12 or length % 4:
            error = f"block at byte {off} has an invalid length {length}"
            break
        if off + length > end:
            error = CUT_SHORT
            break
        if kind in (_EPB, _SPB):  # their trailing lengths are checked vectorized, in _packets
            sec.offsets.append(off)
            off += length
            continue
        if head(data, off + length - 8)[1] != length:
            error = f"block at byte {off}: its trailing length does not match"
            break
        if kind == _IDB and length >= 20:
            info = _interface(data, off, length, sec.order)
            if info.linktype != LINKTYPE_ETHERNET:
                raise UnsupportedCapture(
                    f"pcapng interface {len(sec.interfaces)} has link type {info.linktype}, not Ethernet"
                )
            sec.interfaces.append(info)
            sec.packets_before.append(len(sec.offsets))
        off += length
    return sections, error


def _u32(buf: U8, at: I64, order: str) -> I64:
    """The 32-bit words at byte offsets `at`, vectorized."""
    idx = np.minimum(at[:, None] + np.arange(4), len(buf) - 1)  # a short block's missing words read as junk
    words = buf[idx].copy().view(np.dtype(order + "u4")).reshape(-1)
    out: I64 = words.astype(np.int64)
    return out


def _packets(buf: U8, sec: _Section, first: int) -> tuple[list[I64], str | None]:
    """(start, cap, orig, ts, interface) of a section's packets, up to the first bad one (and why it is bad);
    `first` is the number of packets before the section, for the message."""
    off = np.array(sec.offsets, np.int64)
    word = {k: _u32(buf, off + k, sec.order) for k in (0, 4, 8, 12, 16, 20, 24)}
    epb, length = word[0] == _EPB, word[4]
    known = np.searchsorted(np.array(sec.packets_before, np.int64), np.arange(len(off)), side="right")
    ifid = np.where(epb, word[8], 0)
    cap = np.where(epb, word[20], np.minimum(np.minimum(word[8], length - 16), MAX_RECORD))
    orig = np.where(epb, word[24], word[8])
    start = off + np.where(epb, 28, 12)
    units = (word[12].astype(np.uint64) << np.uint64(32)) | word[16].astype(np.uint64)
    ts = np.zeros(len(off), np.int64)
    bad_time = np.zeros(len(off), bool)
    for i, (_, mul, div, offset_ns, _name) in enumerate(sec.interfaces):
        mine = epb & (ifid == i)
        if not mine.any():
            continue
        if div == 1 and offset_ns == 0:  # the usual case (micro- or nanoseconds): exact in int64
            limit = np.uint64((2**63 - 1) // mul)
            bad_time |= mine & (units > limit)
            ts = np.where(mine & ~bad_time, (np.minimum(units, limit).astype(np.int64)) * mul, ts)
        else:  # binary fractions or an offset: Python integers, exact
            for j in np.flatnonzero(mine):
                t = int(units[j]) * mul // div + offset_ns
                bad_time[j] = not -(2**63) <= t < 2**63
                ts[j] = t if not bad_time[j] else 0
    problems = [
        (_u32(buf, off + length - 4, sec.order) != length, "block: its trailing length does not match"),
        (epb & (length < 32), "enhanced packet block is too short"),
        (epb & (ifid >= known), "names an interface that was not described"),
        (epb & ((cap > MAX_RECORD) | (28 + cap > length - 4)), "claims more bytes than its block holds"),
        (~epb & (known == 0), "simple packet block before any interface description"),
        (bad_time, "has a time beyond the year 2262"),
    ]
    stop, error = len(off), None
    for mask, why in problems:
        hits = np.flatnonzero(mask[:stop])
        if len(hits):
            stop, error = int(hits[0]), why
    if error is not None:
        error = f"packet {first + stop + 1} {error}"
    return [start[:stop], cap[:stop], orig[:stop], ts[:stop], ifid[:stop]], error


def pcapng_records(data: bytes) -> Walk:
    """Every packet of the file, and why the walk stopped early (None when the file ended cleanly)."""
    sections, error = _frame_blocks(data)
    buf = np.frombuffer(data, np.uint8)
    columns: list[list[I64]] = [[], [], [], [], []]
    names: list[str] = []
    count = 0
    for sec in sections:
        if sec.offsets:
            found, problem = _packets(buf, sec, count)
            found[4] = found[4] + len(names)  # section-local interface ids -> the file's interface list
            for column, part in zip(columns, found, strict=True):
                column.append(part)
            count += len(found[0])
        names += [i.name for i in sec.interfaces]
        if sec.offsets and problem is not None:
            error = problem
            break
    start, cap, orig, ts, iface = (np.concatenate(c) if c else np.zeros(0, np.int64) for c in columns)
    return Walk(start, cap, orig, ts, error, iface, names)
