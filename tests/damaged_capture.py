"""A capture damaged (cut, bytes overwritten) decodes to the undamaged capture's rows up to the damage."""

from __future__ import annotations

import struct
from collections.abc import Callable

from rocescope.collectors.pcap.fast import decode_pcap
from rocescope.errors import DecodeError


def record_ends(data: bytes) -> list[int]:
    """Where each record of a little-endian classic pcap ends."""
    ends, off = [], 24
    while off + 16 <= len(data):
        (incl,) = struct.unpack_from("<I", data, off + 8)
        off += 16 + incl
        ends.append(off)
    return ends


def check_damaged_capture(
    base: bytes, cut: int, garble: list[tuple[int, int]], ends: Callable[[bytes], list[int]] = record_ends
) -> None:
    """Only DecodeError escapes; the rows of the records (`ends`: where each ends) wholly before the first
    damaged byte are kept."""
    data = bytearray(base[:cut])
    for pos, value in garble:
        if pos < len(data):
            data[pos] = value
    first_damage = min([pos for pos, value in garble if pos < len(data) and base[pos] != value] + [len(data)])
    try:
        decoded = decode_pcap(bytes(data))
    except DecodeError:
        return
    whole = decode_pcap(base)
    intact = sum(1 for end in ends(base) if end <= first_damage)
    keep = int((whole.frames < intact).sum())
    got = decoded.table("p", 1)
    assert got.num_rows >= keep
    assert got.slice(0, keep).to_pylist() == whole.table("p", 1).slice(0, keep).to_pylist()
