"""The packet mirror: sampled RoCEv2 packets of the simulated flows, as `packets` rows and as pcap frames.

What a sampled mirror session on every host-facing leaf port would capture (capture point
`<leaf>/<port>`, both directions): the data packets arriving for the host, with the ECN bits the fabric
left (CE where the engine marked), the ACKs and the CNPs (BTH opcode 0x81, BECN set) the host sends back
to the senders. Header values come from the simulated QPs: addresses, the UDP source port Linux derives
from the QPN pair, the destination QP, a PSN advancing with the packets delivered (from a seeded
initial PSN per QP), P_Key 0xffff, the DSCP of the lossless class, TTL after the routed hops, a correct
IPv4 checksum and the ICRC (IBTA annex A17: CRC-32 over a masked pseudo-LRH, IP, UDP and BTH, checked on
real Soft-RoCE and ConnectX captures).

Sampling works per poll on the engine's per-flow totals (`Engine.flow_totals`): a flow that delivered
d packets since the last poll yields Poisson(d / N) sampled data packets, at uniform positions in that
run of packets (PSN and time follow the position), CE with the flow's marked fraction over the poll;
ACKs likewise over d / `ack_every`; CNPs are all kept up to `cnp_cap_per_s`, else a uniform sample
(the rows then carry the effective rate). Times within a poll are spread evenly with the position, so
sub-poll timing is not modeled. Frames are built in bulk with numpy, one matrix of headers per packet
shape; only the per-frame CRC calls zlib.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from rocescope.pipeline.batch import conform
from rocescope.sim.engine import Engine
from rocescope.sim.jobs import Flow
from rocescope.sim.roce import ROCE_V2_UDP_PORT, stable_hash
from rocescope.sim.scenario import Mirror

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]

RDMA_WRITE_FIRST = 0x06
RDMA_WRITE_MIDDLE = 0x07
RDMA_WRITE_LAST = 0x08
RC_ACK = 0x11
CNP = 0x81
ECT0, CE = 2, 3
PKEY_DEFAULT = 0xFFFF
TTL = 64
PSN_MASK = 0xFFFFFF
#: Bytes after the BTH per opcode: RETH on the first write packet, AETH on ACKs, 16 reserved on CNPs.
EXTENSION = {RDMA_WRITE_FIRST: 16, RDMA_WRITE_MIDDLE: 0, RDMA_WRITE_LAST: 0, RC_ACK: 4, CNP: 16}
_HEADERS = 14 + 20 + 8 + 12  # Ethernet, IPv4, UDP, BTH
_PCAP_MAGIC_NS = 0xA1B23C4D  # classic pcap with nanosecond timestamps
_LINKTYPE_ETHERNET = 1


class Sampled(NamedTuple):
    """Sampled packets, one entry per packet, in time order (struct of arrays)."""

    ts_ns: I64
    flow: I64
    opcode: U8
    ecn: U8
    psn: I64
    msn: I64
    sampling_rate: I64

    @property
    def size(self) -> int:
        """Packets in the sample (len() is the tuple's: it stays a NamedTuple)."""
        return len(self.ts_ns)

    def take(self, rows: I64 | slice) -> Sampled:
        """The packets at `rows` (indices, a mask or a slice)."""
        return Sampled._make(a[rows] for a in self)


def concat(parts: Sequence[Sampled]) -> Sampled:
    """The packets of several samples, one after the other."""
    return Sampled._make(np.concatenate([p[i] for p in parts]) for i in range(len(Sampled._fields)))


def _mac(text: str) -> bytes:
    return bytes(int(x, 16) for x in text.split(":"))


def router_mac(switch: str) -> bytes:
    """The leaf's routed-port MAC (locally administered, from its name)."""
    return b"\x02" + (stable_hash(switch) & 0xFFFFFFFF).to_bytes(4, "big") + b"\x01"


def _ip(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def icrc(frame: bytes) -> int:
    """The RoCEv2 invariant CRC of an Ethernet/IPv4/UDP/BTH frame without its ICRC: CRC-32 over 8 bytes of
    0xff (the masked LRH), the IP header with TOS, TTL and checksum masked, UDP with the checksum masked,
    the BTH with its FECN/BECN byte masked, and the rest. Stored little-endian after the payload."""
    masked = bytearray(frame[14:])
    masked[1] = 0xFF  # TOS (DSCP, ECN)
    masked[8] = 0xFF  # TTL
    masked[10:12] = b"\xff\xff"  # header checksum
    masked[26:28] = b"\xff\xff"  # UDP checksum
    masked[32] = 0xFF  # BTH byte 4: FECN, BECN, reserved
    return zlib.crc32(bytes(masked), zlib.crc32(b"\xff" * 8))


def ipv4_checksums(headers: U8) -> npt.NDArray[np.uint16]:
    """RFC 791 header checksums of a matrix of 20-byte IPv4 headers whose checksum field is zero."""
    words = headers.reshape(len(headers), 10, 2).astype(np.uint32)
    total = (words[:, :, 0] << 8 | words[:, :, 1]).sum(axis=1)
    while (total >> 16).any():
        total = (total & 0xFFFF) + (total >> 16)
    out: npt.NDArray[np.uint16] = (~total & 0xFFFF).astype(np.uint16)
    return out


class PacketMirror:
    """Samples the engine's flows at each poll; rows for the `packets` stream and frames for pcap files."""

    def __init__(self, engine: Engine, spec: Mirror, seed: int = 0) -> None:
        self.engine = engine
        self.spec = spec
        self.flows: Sequence[Flow] = engine.flows
        self._rng = np.random.default_rng([seed & 0xFFFFFFFF, 0x4D49_5252])
        flows = self.flows
        F = len(flows)
        self.src_ip = np.array([_ip(f.src.ip) for f in flows], np.int64)
        self.dst_ip = np.array([_ip(f.dst.ip) for f in flows], np.int64)
        self.sport = np.array([f.udp_sport for f in flows], np.int64)
        self.src_qpn = np.array([f.src_qpn for f in flows], np.int64)
        self.dst_qpn = np.array([f.dst_qpn for f in flows], np.int64)
        self.psn0 = self._rng.integers(0, PSN_MASK + 1, F)
        points = [f"{f.dst.leaf}/{f.dst.leaf_port}" for f in flows]
        self.points = sorted(set(points))
        index = {p: i for i, p in enumerate(self.points)}
        self.point = np.array([index[p] for p in points], np.int64)
        self.nic_mac = np.array([list(_mac(f.dst.mac)) for f in flows], np.uint8).reshape(F, 6)
        self.leaf_mac = np.array([list(router_mac(f.dst.leaf)) for f in flows], np.uint8).reshape(F, 6)
        self.rkey = self._rng.integers(0, 1 << 32, F)
        self.va = self._rng.integers(0, 1 << 47, F) & ~np.int64(0xFFF)
        self.mtu = engine.params.mtu
        self._last = engine.flow_totals()
        self._last_ns = self._ns(engine.time)

    @staticmethod
    def _ns(ts: dt.datetime) -> int:
        return int(ts.timestamp()) * 1_000_000_000 + ts.microsecond * 1000

    def _positions(self, counts: I64, lo: npt.NDArray[np.float64], span: npt.NDArray[np.float64]) -> tuple[I64, ...]:
        """For `counts[f]` samples of flow f uniform over its packets [lo, lo + span): (flow, packet index, u)."""
        flow = np.repeat(np.arange(len(counts)), counts)
        u = self._rng.random(len(flow))
        idx = np.floor(lo[flow] + u * span[flow]).astype(np.int64)
        return flow, idx, (u * 1e9).astype(np.int64)

    def sample(self) -> Sampled:
        """The packets sampled since the last call (or since the mirror was made), in time order."""
        spec, eng = self.spec, self.engine
        now = eng.flow_totals()
        t1 = self._ns(eng.time)
        t0, self._last_ns = self._last_ns, t1
        prev, self._last = self._last, now
        span_ns = max(t1 - t0, 0)
        d = np.maximum(now.delivered - prev.delivered, 0.0)
        if not spec.enabled or span_ns == 0:
            return _empty()
        rate = spec.sampling_rate
        rng = self._rng
        parts: list[Sampled] = []
        # data packets at the receiver's leaf port, CE with the flow's marked fraction over the poll
        n = rng.poisson(d / rate)
        flow, idx, u = self._positions(n, prev.delivered, d)
        ce_frac = np.divide(now.ce_marked - prev.ce_marked, d, out=np.zeros_like(d), where=d > 0)
        ce = rng.random(len(flow)) < np.clip(ce_frac, 0.0, 1.0)[flow]
        pos = idx % spec.message_packets
        opcode = np.where(
            pos == 0, RDMA_WRITE_FIRST, np.where(pos == spec.message_packets - 1, RDMA_WRITE_LAST, RDMA_WRITE_MIDDLE)
        )
        if spec.message_packets == 1:
            opcode[:] = RDMA_WRITE_FIRST
        parts.append(self._part(t0, span_ns, flow, u, opcode, np.where(ce, CE, ECT0), idx, rate))
        # ACKs from the receiver, one per `ack_every` data packets
        n = rng.poisson(d / spec.ack_every / rate)
        flow, idx, u = self._positions(n, prev.delivered, d)
        parts.append(self._part(t0, span_ns, flow, u, np.full(len(flow), RC_ACK), np.full(len(flow), ECT0), idx, rate))
        # CNPs: every one up to the cap, else a uniform sample of them
        cnps = np.rint(np.maximum(now.cnps - prev.cnps, 0.0)).astype(np.int64)
        total, cap = int(cnps.sum()), int(spec.cnp_cap_per_s * span_ns / 1e9)
        cnp_rate = 1
        if total > cap:
            cnps = rng.multivariate_hypergeometric(cnps, cap) if cap > 0 else np.zeros_like(cnps)
            cnp_rate = -(-total // cap) if cap > 0 else 0
        if cnps.any():
            flow = np.repeat(np.arange(len(cnps)), cnps)
            u = (rng.random(len(flow)) * 1e9).astype(np.int64)
            zero = np.zeros(len(flow), np.int64)
            parts.append(
                self._part(t0, span_ns, flow, u, np.full(len(flow), CNP), np.full(len(flow), ECT0), zero, cnp_rate)
            )
        out = concat(parts)
        return out.take(np.argsort(out.ts_ns, kind="stable"))

    def _part(self, t0: int, span_ns: int, flow: I64, u: I64, opcode: I64, ecn: I64, idx: I64, rate: int) -> Sampled:
        ts = t0 + (u * span_ns) // 1_000_000_000
        psn = (self.psn0[flow] + idx) & PSN_MASK
        msn = (idx // self.spec.message_packets) & PSN_MASK
        return Sampled(
            ts.astype(np.int64),
            flow,
            opcode.astype(np.uint8),
            ecn.astype(np.uint8),
            psn.astype(np.int64),
            msn.astype(np.int64),
            np.full(len(flow), rate, np.int64),
        )

    # --- rows

    def frame_lengths(self, pk: Sampled) -> I64:
        """Frame bytes on the wire (FCS excluded, as captures record them)."""
        ext = np.zeros(pk.size, np.int64)
        for op, n in EXTENSION.items():
            ext[pk.opcode == op] = n
        data = pk.opcode <= RDMA_WRITE_LAST
        return _HEADERS + ext + np.where(data, self.mtu, 0) + 4

    def table(self, pk: Sampled) -> pa.Table:
        """The `packets` stream for sampled packets, conformed (what tshark would decode from the frames)."""
        cnp = pk.opcode == CNP
        data = pk.opcode <= RDMA_WRITE_LAST
        f = pk.flow
        src = np.where(data, self.src_ip[f], self.dst_ip[f])
        dst = np.where(data, self.dst_ip[f], self.src_ip[f])
        table = pa.table(
            {
                "ts": pa.array(pk.ts_ns, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
                "capture_point": pa.array(
                    np.array(self.points, dtype=object)[self.point[f]] if len(f) else [], pa.string()
                ),
                "src_ip": _ip_array(src),
                "dst_ip": _ip_array(dst),
                "udp_sport": self.sport[f].astype(np.uint16),
                "dscp": np.where(cnp, self.spec.cnp_dscp, self.spec.dscp).astype(np.uint8),
                "ecn": pk.ecn,
                "opcode": pk.opcode,
                "dest_qp": np.where(data, self.dst_qpn[f], self.src_qpn[f]).astype(np.uint32),
                "psn": np.where(cnp, 0, pk.psn).astype(np.uint32),
                "pkey": np.full(len(f), PKEY_DEFAULT, np.uint16),
                "becn": cnp.astype(np.uint8),
                "length": self.frame_lengths(pk).astype(np.uint32),
                "sampling_rate": pk.sampling_rate.astype(np.uint32),
            }
        )
        return pa.Table.from_batches([conform("packets", table)])

    # --- frames

    def frames(self, pk: Sampled, snaplen: int = 0) -> list[bytes]:
        """The Ethernet frames (FCS excluded) of the sampled packets, ICRC included; with `snaplen`, only
        their first `snaplen` bytes (a truncating mirror session: no payload or ICRC is built for those)."""
        heads, head_len = self.headers(pk)
        lengths = self.frame_lengths(pk)
        zeros = bytes(self.mtu)
        out = []
        for k in range(pk.size):
            head = heads[k, : head_len[k]].tobytes()
            if 0 < snaplen < lengths[k]:
                out.append((head + zeros[: max(0, snaplen - len(head))])[:snaplen])
                continue
            payload = zeros[: lengths[k] - 4 - head_len[k]]
            out.append(head + payload + struct.pack("<I", zlib.crc32(payload, icrc(head))))
        return out

    def headers(self, pk: Sampled) -> tuple[U8, I64]:
        """Every frame's bytes up to its payload (Ethernet, IPv4, UDP, BTH, then RETH, AETH or the CNP's
        reserved bytes), one zero-padded row each, and each row's length."""
        n, f = pk.size, pk.flow
        spec = self.spec
        m = np.zeros((n, _HEADERS + 16), np.uint8)
        data = pk.opcode <= RDMA_WRITE_LAST
        cnp = pk.opcode == CNP
        lengths = self.frame_lengths(pk)
        # Ethernet: data leaves the leaf towards the NIC; ACKs and CNPs come from the NIC
        m[:, 0:6] = np.where(data[:, None], self.nic_mac[f], self.leaf_mac[f])
        m[:, 6:12] = np.where(data[:, None], self.leaf_mac[f], self.nic_mac[f])
        m[:, 12] = 0x08
        ip = 14
        m[:, ip] = 0x45
        m[:, ip + 1] = np.where(cnp, spec.cnp_dscp, spec.dscp) << 2 | pk.ecn
        _put(m, ip + 2, lengths - 14, 2)  # total length (the ICRC is inside the UDP payload)
        _put(m, ip + 4, pk.psn & 0xFFFF, 2)  # identification
        m[:, ip + 6] = 0x40  # don't fragment
        m[:, ip + 8] = np.where(data, TTL - self._last.switch_hops[f], TTL)
        m[:, ip + 9] = 17
        _put(m, ip + 12, np.where(data, self.src_ip[f], self.dst_ip[f]), 4)
        _put(m, ip + 16, np.where(data, self.dst_ip[f], self.src_ip[f]), 4)
        _put(m, ip + 10, ipv4_checksums(m[:, ip : ip + 20]), 2)
        udp = ip + 20
        _put(m, udp, self.sport[f], 2)
        _put(m, udp + 2, np.full(n, ROCE_V2_UDP_PORT), 2)
        _put(m, udp + 4, lengths - 34, 2)  # UDP length; the checksum stays 0, as RoCEv2 senders leave it
        bth = udp + 8
        m[:, bth] = pk.opcode
        m[:, bth + 1] = np.where(cnp, 0x00, 0x40)  # MigReq set on RC traffic, as ConnectX and rxe do
        _put(m, bth + 2, np.full(n, PKEY_DEFAULT), 2)
        m[:, bth + 4] = np.where(cnp, 0x40, 0x00)  # BECN
        _put(m, bth + 5, np.where(data, self.dst_qpn[f], self.src_qpn[f]), 3)
        m[:, bth + 8] = np.where(pk.opcode == RDMA_WRITE_LAST, 0x80, 0x00)  # AckReq on a message's last packet
        _put(m, bth + 9, np.where(cnp, 0, pk.psn), 3)
        ext = bth + 12
        r = np.flatnonzero(pk.opcode == RDMA_WRITE_FIRST)
        if len(r):  # RETH: virtual address, R_Key and DMA length of the message
            message = spec.message_packets * self.mtu
            _put(m, ext, self.va[f[r]] + (pk.msn[r] % 8) * message, 8, r)
            _put(m, ext + 8, self.rkey[f[r]], 4, r)
            _put(m, ext + 12, np.full(len(r), message), 4, r)
        r = np.flatnonzero(pk.opcode == RC_ACK)
        if len(r):  # AETH: ACK syndrome with an unlimited credit count, then the MSN
            m[r, ext] = 0x1F
            _put(m, ext + 1, pk.msn[r], 3, r)
        head_len = lengths - 4 - np.where(data, self.mtu, 0)
        return m, head_len.astype(np.int64)


def _put(m: U8, col: int, values: npt.NDArray[np.generic], width: int, rows: I64 | None = None) -> None:
    """Big-endian `width`-byte values into columns col.. of every row (or of `rows`)."""
    v = values.astype(np.uint64)
    for k in range(width):
        byte = ((v >> np.uint64(8 * (width - 1 - k))) & np.uint64(0xFF)).astype(np.uint8)
        if rows is None:
            m[:, col + k] = byte
        else:
            m[rows, col + k] = byte


def _ip_array(values: I64) -> pa.Array:
    """Dotted-quad strings of IPv4 addresses held as integers."""
    b = values.astype(">u4").view(np.uint8).reshape(-1, 4)
    parts = [pa.array(b[:, k]).cast(pa.string()) for k in range(4)]
    return pc.binary_join_element_wise(*parts, ".")


def _empty() -> Sampled:
    z = np.zeros(0, np.int64)
    return Sampled(z, z, z.astype(np.uint8), z.astype(np.uint8), z, z, z)


def write_pcap(path: Path, ts_ns: I64, frames: Sequence[bytes], lengths: I64, snaplen: int = 0) -> int:
    """A classic pcap (nanosecond timestamps, Ethernet) of the frames as captured (`frames`, at most
    `snaplen` bytes each if given) and their lengths on the wire. Written to a temporary name and renamed:
    readers never see a partial file. Returns the bytes written."""
    limit = snaplen if snaplen > 0 else 262_144
    parts = [struct.pack("<IHHiIII", _PCAP_MAGIC_NS, 2, 4, 0, 0, limit, _LINKTYPE_ETHERNET)]
    for t, frame, length in zip(ts_ns.tolist(), frames, lengths.tolist(), strict=True):
        cut = frame[:limit]
        parts.append(struct.pack("<IIII", t // 1_000_000_000, t % 1_000_000_000, len(cut), length))
        parts.append(cut)
    blob = b"".join(parts)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(blob)
    tmp.replace(path)
    return len(blob)


def _block(kind: int, body: bytes) -> bytes:
    """A pcapng block: type, total length, the body padded to 32 bits, the total length again."""
    body += b"\0" * (-len(body) % 4)
    total = struct.pack("<I", len(body) + 12)
    return struct.pack("<I", kind) + total + body + total


def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def write_pcapng(
    path: Path, ts_ns: I64, frames: Sequence[bytes], lengths: I64, iface: I64, names: Sequence[str], snaplen: int = 0
) -> int:
    """A pcapng of the frames with one interface per capture point (`if_name` = the name, nanosecond
    times), each frame on its interface `iface`, as dumpcap writes a capture of several ports. Written to a
    temporary name and renamed: readers never see a partial file. Returns the bytes written."""
    limit = snaplen if snaplen > 0 else 262_144
    parts = [_block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))]
    for name in names:
        options = _option(2, name.encode()) + _option(9, b"\x09") + _option(0, b"")
        parts.append(_block(1, struct.pack("<HHI", _LINKTYPE_ETHERNET, 0, limit) + options))
    for t, frame, length, i in zip(ts_ns.tolist(), frames, lengths.tolist(), iface.tolist(), strict=True):
        cut = frame[:limit]
        head = struct.pack("<IIIII", i, t >> 32, t & 0xFFFFFFFF, len(cut), length)
        parts.append(_block(6, head + cut))
    blob = b"".join(parts)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(blob)
    tmp.replace(path)
    return len(blob)


class MirrorFiles:
    """The mirror's capture as rotating pcapng files (`mirror-00001.pcapng`, ...) in a directory, one
    interface per mirrored port (so a reader names each packet's capture point as the fast path does): one
    file per `rotate_s` of fabric time, each written whole (readers never see a partial file)."""

    def __init__(self, mirror: PacketMirror, directory: Path) -> None:
        self.mirror = mirror
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.files: list[Path] = []
        self.packets = 0
        self._pending: list[Sampled] = []
        self._opened_ns: int | None = None

    def add(self, sampled: Sampled, now: dt.datetime) -> Path | None:
        """Buffer a poll's sample; returns the file written when the rotation interval is over."""
        now_ns = PacketMirror._ns(now)
        if self._opened_ns is None:
            self._opened_ns = now_ns - int(self.mirror.engine.params.dt_s * 1e9)
        self._pending.append(sampled)
        if now_ns - self._opened_ns >= self.mirror.spec.rotate_s * 1e9:
            self._opened_ns = now_ns
            return self.flush()
        return None

    def flush(self) -> Path | None:
        """Write what is buffered (if anything) as the next file."""
        parts, self._pending = self._pending, []
        if not parts or not sum(p.size for p in parts):
            return None
        pk = concat(parts)
        path = self.directory / f"mirror-{len(self.files) + 1:05d}.pcapng"
        m = self.mirror
        frames = m.frames(pk, m.spec.snaplen)
        write_pcapng(path, pk.ts_ns, frames, m.frame_lengths(pk), m.point[pk.flow], m.points, m.spec.snaplen)
        self.files.append(path)
        self.packets += pk.size
        return path
