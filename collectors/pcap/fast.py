"""Bulk fast path for capture files: classic pcap and pcapng decoded with numpy instead of tshark.

pyshark decodes a few hundred packets/s, too slow for recorded captures of millions of frames. Here
the record framing is walked once (classic pcap records in `framing.py`, pcapng blocks in `pcapng.py`:
no library needed, and dpkt's last release is from 2022), the first bytes of every frame are gathered
into a matrix, and Ethernet (+ up to two 802.1Q/802.1ad tags) / IPv4 / IPv6 / UDP 4791 / BTH fields
are read at per-row offsets, vectorized; a switch's mirrored copy in a tunnel (ERSPAN I/II/III, GRE-bridged
Ethernet, VXLAN) is read again from the frame it carries. Rows and skip reasons match `tshark.decode_packet`
(tests/collectors/pcap/test_fast.py and test_pcapng.py prove it on the real captures, as pcap and as
pcapng). Anything else (ERF, other link types, damaged file headers) raises `UnsupportedCapture`, and
the collector lets tshark read the file instead.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from rocescope.collectors.pcap.framing import I64, U8, Records, classic_records, frame_offsets, pcap_header
from rocescope.collectors.pcap.pcapng import is_pcapng, pcapng_records
from rocescope.collectors.pcap.tshark import NOT_INFINIBAND, NOT_ROCEV2, ROCEV1, ROCEV2_PORT, TRUNCATED_BTH
from rocescope.pipeline.batch import Batch, conform

__all__ = ["Decoded", "batches", "decode_pcap"]

_HEAD = 112  # bytes of each frame examined: 14 + 2*4 VLAN + 60 IPv4 + 8 UDP + 12 BTH = 102
#: Tunnels a mirrored frame may be in (an ERSPAN copy of VXLAN traffic: 2); each is read from its own start.
_MAX_TUNNELS = 2
VXLAN_PORT = 4789
_ERSPAN_1_2, _ERSPAN_3, _ETHERNET_BRIDGING = 0x88BE, 0x22EB, 0x6558  # GRE protocol types
_CHUNK = 16_384  # frames gathered at a time (bounds the index matrix to ~15 MB)

Arr = npt.NDArray[Any]


@dataclass
class Decoded:
    """Columns of the RoCEv2 rows, plus what was skipped and why."""

    columns: dict[str, npt.NDArray[np.generic]]
    src_ip: pa.Array
    dst_ip: pa.Array
    frames: I64  # 0-based record number of each row
    skipped: Counter[str] = field(default_factory=Counter)
    malformed: int = 0
    error: str | None = None  # why the file ended early; records before it are kept
    #: pcapng: the interfaces' names (if_name, "" where unnamed) and each row's interface among them
    interfaces: list[str] = field(default_factory=list)
    iface: I64 | None = None

    @property
    def num_rows(self) -> int:
        return len(self.frames)

    def capture_points(
        self, capture_point: str, interface_points: Mapping[str, str] | None = None
    ) -> pa.DictionaryArray:
        """Each row's capture point: `interface_points[if_name]` where given; else, in a capture of several
        named interfaces (dumpcap -i a -i b, one capture port per mirrored switch port), the interface's
        name; else `capture_point`."""
        mapped = interface_points or {}
        several = len({name for name in self.interfaces if name}) > 1
        if self.iface is None or not (several or any(name in mapped for name in self.interfaces)):
            zeros = pa.array(np.zeros(self.num_rows, np.int32))
            return pa.DictionaryArray.from_arrays(zeros, pa.array([capture_point], pa.string()))
        names = [mapped.get(name) or (name if several and name else capture_point) for name in self.interfaces]
        return pa.DictionaryArray.from_arrays(pa.array(self.iface.astype(np.int32)), pa.array(names, pa.string()))

    def table(
        self, capture_point: str, sampling_rate: int, interface_points: Mapping[str, str] | None = None
    ) -> pa.Table:
        """The `packets` columns, in schema order."""
        n = self.num_rows
        cols = self.columns
        return pa.table(
            {
                "ts": pa.array(cols["ts"], pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
                "capture_point": self.capture_points(capture_point, interface_points),
                "src_ip": self.src_ip,
                "dst_ip": self.dst_ip,
                **{name: pa.array(cols[name]) for name in _NUMERIC},
                "sampling_rate": pa.array(np.full(n, sampling_rate, np.uint32)),
            }
        )


_NUMERIC = ("udp_sport", "dscp", "ecn", "opcode", "dest_qp", "psn", "pkey", "becn", "length")


def _ip_strings(keys: U8) -> pa.Array:
    """IP address strings from 17-byte keys (version + 16 bytes), formatted once per distinct address."""
    if len(keys) == 0:
        return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
    uniq, inverse = np.unique(np.ascontiguousarray(keys).view(np.dtype((np.void, 17))).ravel(), return_inverse=True)
    text = []
    for key in uniq:
        raw = bytes(key)
        text.append(str(ipaddress.IPv4Address(raw[1:5]) if raw[0] == 4 else ipaddress.IPv6Address(raw[1:17])))
    return pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32).ravel()), pa.array(text, pa.string()))


def decode_pcap(data: bytes) -> Decoded:
    """Decode a capture's RoCEv2 frames: classic pcap, or pcapng (dumpcap's default output).

    Raises UnsupportedCapture for anything else (other link types, ERF, a header too short to tell),
    so tshark reads it; damage after the header ends the file there, and `error` says why.
    """
    if is_pcapng(data):
        walk = pcapng_records(data)
        decoded = _decode_records(data, Records(walk.start, walk.cap, walk.orig, walk.ts), walk.error)
        decoded.interfaces = walk.names
        decoded.iface = walk.iface[decoded.frames]
        return decoded
    order, frac_ns = pcap_header(data)
    offsets, error = frame_offsets(data, order)
    buf = np.frombuffer(data, np.uint8)
    return _decode_records(
        data, None, error, lambda a, b: classic_records(buf, offsets[a:b], order, frac_ns), len(offsets)
    )


def _decode_records(
    data: bytes,
    records: Records | None,
    error: str | None,
    chunk: Callable[[int, int], Records] | None = None,
    count: int = 0,
) -> Decoded:
    """Decode every record, `_CHUNK` at a time (bounds the index matrices)."""
    buf = np.frombuffer(data, np.uint8)
    if records is not None:
        count = len(records)
        chunk = records.slice
    assert chunk is not None
    parts: list[dict[str, Arr]] = []
    skipped: Counter[str] = Counter()
    malformed = 0
    for start in range(0, count, _CHUNK):
        part, chunk_skipped, chunk_malformed = _decode_chunk(buf, chunk(start, start + _CHUNK))
        part["frames"] = part["frames"] + start
        parts.append(part)
        skipped.update(chunk_skipped)
        malformed += chunk_malformed
    names = ("frames", "ts", *_NUMERIC, "src_key", "dst_key")
    merged = {name: np.concatenate([p[name] for p in parts]) for name in names} if parts else _empty()
    return Decoded(
        columns={name: merged[name] for name in ("ts", *_NUMERIC)},
        src_ip=_ip_strings(merged["src_key"]),
        dst_ip=_ip_strings(merged["dst_key"]),
        frames=merged["frames"],
        skipped=skipped,
        malformed=malformed,
        error=error,
    )


def _empty() -> dict[str, Arr]:
    out: dict[str, Arr] = {name: np.zeros(0, np.int64) for name in ("frames", "ts")}
    for name, dtype in _DTYPES.items():
        out[name] = np.zeros(0, dtype)
    out["src_key"] = np.zeros((0, 17), np.uint8)
    out["dst_key"] = np.zeros((0, 17), np.uint8)
    return out


_DTYPES = {
    "udp_sport": np.uint16,
    "dscp": np.uint8,
    "ecn": np.uint8,
    "opcode": np.uint8,
    "dest_qp": np.uint32,
    "psn": np.uint32,
    "pkey": np.uint16,
    "becn": np.uint8,
    "length": np.uint32,
}


def _decode_chunk(buf: U8, rec: Records, depth: int = 0) -> tuple[dict[str, Arr], Counter[str], int]:
    """Vectorized decode of a run of records: every field is read at a per-row offset. A mirrored copy in a
    tunnel (ERSPAN I/II/III, GRE-encapsulated Ethernet, VXLAN) is decoded as the frame it carries."""
    n = len(rec)
    rows = np.arange(n)
    cap = rec.cap
    idx = rec.start[:, None] + np.arange(_HEAD)
    head = buf[np.minimum(idx, len(buf) - 1)]
    head[np.arange(_HEAD)[None, :] >= cap[:, None]] = 0  # bytes past the captured length read as 0

    def u8(off: I64) -> I64:
        out: I64 = head[rows, np.minimum(off, _HEAD - 1)].astype(np.int64)
        return out

    def u16(off: I64) -> I64:
        return (u8(off) << 8) | u8(off + 1)

    def u24(off: I64) -> I64:
        return (u8(off) << 16) | u16(off + 1)

    l3 = np.full(n, 14, np.int64)
    ethertype = u16(l3 - 2)
    for _ in range(2):  # 802.1Q / 802.1ad / old QinQ tags
        tagged = (ethertype == 0x8100) | (ethertype == 0x88A8) | (ethertype == 0x9100)
        l3 = l3 + 4 * tagged
        ethertype = np.where(tagged, u16(l3 - 2), ethertype)
    version = u8(l3) >> 4
    ipv4 = (ethertype == 0x0800) & (version == 4)
    ipv6 = (ethertype == 0x86DD) & (version == 6)
    ihl = u8(l3) & 0xF
    l4 = l3 + np.where(ipv4, ihl * 4, 40)
    bad = (cap < 14) | (ipv4 & (ihl < 5)) | ((ipv4 | ipv6) & (l4 > cap))
    proto = np.where(ipv4, u8(l3 + 9), u8(l3 + 6))
    fragment = ipv4 & ((u16(l3 + 6) & 0x3FFF) != 0)  # tshark only dissects UDP in a reassembled datagram
    udp = (ipv4 | ipv6) & (proto == 17) & ~fragment & ~bad
    bad |= udp & (l4 + 8 > cap)
    udp &= ~bad
    sport, dport = u16(l4), u16(l4 + 2)
    inner = _tunneled(u8, u16, (ipv4 | ipv6) & ~fragment & ~bad, proto, l4, udp & (dport == VXLAN_PORT))
    tunnel = (inner >= 0) & (inner + 14 <= cap)
    udp &= ~tunnel
    rocev2 = udp & (dport == ROCEV2_PORT)
    bth = l4 + 8
    whole = rocev2 & (bth + 12 <= cap)
    rocev1 = (ethertype == 0x8915) & ~bad
    skipped: Counter[str] = Counter()
    skipped[ROCEV1] = int(np.count_nonzero(rocev1))
    skipped[NOT_ROCEV2] = int(np.count_nonzero(udp & ~rocev2 & (sport == ROCEV2_PORT)))
    skipped[TRUNCATED_BTH] = int(np.count_nonzero(rocev2 & ~whole))
    counted = rocev1 | whole | (rocev2 & ~whole) | (udp & ~rocev2 & (sport == ROCEV2_PORT)) | bad | tunnel
    skipped[NOT_INFINIBAND] = int(np.count_nonzero(~counted))
    carried: tuple[dict[str, Arr], Counter[str], int] | None = None
    if tunnel.any():
        t = np.flatnonzero(tunnel)
        if depth < _MAX_TUNNELS:
            at = inner[t]
            carried = _decode_chunk(buf, Records(rec.start[t] + at, cap[t] - at, rec.orig[t], rec.ts[t]), depth + 1)
            carried[0]["frames"] = t[carried[0]["frames"]]
            skipped.update(carried[1])
        else:
            skipped[NOT_INFINIBAND] += len(t)
    skipped = +skipped  # drop zero counts

    sel = np.flatnonzero(whole)
    r, b, h3 = sel, bth[sel], l3[sel]
    rows = r  # the field readers below look at the selected rows only
    tclass = np.where(ipv4[r], u8(h3 + 1), ((u8(h3) & 0xF) << 4) | (u8(h3 + 1) >> 4))

    def ip_key(at4: I64, at6: I64) -> U8:
        key = np.zeros((len(r), 17), np.uint8)
        v4 = ipv4[r]
        key[:, 0] = np.where(v4, 4, 6)
        width = np.where(v4, 4, 16)
        for i in range(16):
            key[:, 1 + i] = np.where(i < width, u8(np.where(v4, at4, at6) + i), 0)
        return key

    part: dict[str, Arr] = {
        "frames": sel.astype(np.int64),
        "ts": rec.ts[r],
        "udp_sport": sport[r].astype(np.uint16),
        "dscp": (tclass >> 2).astype(np.uint8),
        "ecn": (tclass & 3).astype(np.uint8),
        "opcode": u8(b).astype(np.uint8),
        "dest_qp": u24(b + 5).astype(np.uint32),
        "psn": u24(b + 9).astype(np.uint32),
        "pkey": u16(b + 2).astype(np.uint16),
        "becn": ((u8(b + 4) >> 6) & 1).astype(np.uint8),
        "length": rec.orig[r].astype(np.uint32),
        "src_key": ip_key(h3 + 12, h3 + 8),
        "dst_key": ip_key(h3 + 16, h3 + 24),
    }
    malformed = int(np.count_nonzero(bad))
    if carried is not None:
        order = np.argsort(np.concatenate([part["frames"], carried[0]["frames"]]), kind="stable")
        part = {name: np.concatenate([part[name], carried[0][name]])[order] for name in part}
        malformed += carried[2]
    return part, skipped, malformed


def _tunneled(u8: Callable[[I64], I64], u16: Callable[[I64], I64], ip: Arr, proto: I64, l4: I64, vxlan: Arr) -> I64:
    """Where the Ethernet frame a tunnel carries starts in each frame (-1: no tunnel): GRE (version 0) carrying
    ERSPAN type I (no GRE sequence number, no ERSPAN header), II (8-byte header), III (12 bytes, 20 with its
    platform subheader) or transparent Ethernet bridging; VXLAN (UDP 4789, the I flag set)."""
    gre = ip & (proto == 47)
    if not (gre.any() or vxlan.any()):
        return np.full(len(l4), -1, np.int64)  # no tunnel in the chunk: nothing more to read
    flags, kind = u16(l4), u16(l4 + 2)
    gre &= (flags & 0x7) == 0
    seq = (flags >> 12) & 1
    after_gre = l4 + 4 + 4 * (((flags >> 15) & 1) + ((flags >> 13) & 1) + seq)
    erspan3 = 12 + 8 * (u8(after_gre + 11) & 1)
    header = np.select(
        [kind == _ERSPAN_1_2, kind == _ERSPAN_3, kind == _ETHERNET_BRIDGING], [8 * seq, erspan3, 0], default=-1
    )
    carries = np.where(gre & (header >= 0), after_gre + header, -1)
    return np.where(vxlan & ((u8(l4 + 8) & 0x08) != 0), l4 + 16, carries)


def batches(
    decoded: Decoded,
    capture_point: str,
    sampling_rate: int,
    batch_rows: int,
    interface_points: Mapping[str, str] | None = None,
) -> Iterator[Batch]:
    """`packets` Batches of at most `batch_rows` rows, keyed by capture point."""
    table = decoded.table(capture_point, sampling_rate, interface_points)
    for start in range(0, table.num_rows, batch_rows):
        yield Batch("packets", conform("packets", table.slice(start, batch_rows)), key=capture_point)
