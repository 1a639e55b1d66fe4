"""RoCEv2 on the wire: the 5-tuple switches hash, QP numbers, and the UDP source port derived from them.

The UDP source port is the only entropy ECMP sees in RoCEv2 traffic (the destination port is always
4791), and Linux derives it from the two QP numbers. Reproducing that formula exactly means the
simulator's flows spread over the fabric the way real NCCL traffic does, collisions included.
"""

from __future__ import annotations

import ipaddress
import zlib
from typing import NamedTuple

import numpy as np

ROCE_V2_UDP_PORT = 4791
IPPROTO_UDP = 17
#: RoCEv2 source ports live in 0xC000-0xFFFF (IB_ROCE_UDP_ENCAP_VALID_PORT_MIN/MAX).
UDP_SPORT_MIN = 0xC000
UDP_SPORT_MAX = 0xFFFF
QPN_MASK = 0xFFFFFF  # QP numbers are 24 bits


class FiveTuple(NamedTuple):
    """What an ECMP hash reads from a RoCEv2 packet."""

    src_ip: str
    dst_ip: str
    sport: int
    dport: int = ROCE_V2_UDP_PORT
    proto: int = IPPROTO_UDP

    def packed(self) -> bytes:
        """The fields in network byte order, as a switch's hash engine sees them (13 bytes)."""
        return (
            ipaddress.IPv4Address(self.src_ip).packed
            + ipaddress.IPv4Address(self.dst_ip).packed
            + bytes((self.proto & 0xFF,))
            + (self.sport & 0xFFFF).to_bytes(2, "big")
            + (self.dport & 0xFFFF).to_bytes(2, "big")
        )


def flow_label(lqpn: int, rqpn: int) -> int:
    """The 20-bit flow label Linux computes for a QP pair (rdma_calc_flow_label): symmetric in the QPNs."""
    v = (lqpn & QPN_MASK) * (rqpn & QPN_MASK)
    v ^= v >> 20
    v ^= v >> 40
    return v & 0xFFFFF


def udp_sport(lqpn: int, rqpn: int) -> int:
    """The RoCEv2 UDP source port of a QP pair (rdma_flow_label_to_udp_sport over the flow label).

    Both directions of a connection get the same port, exactly as on a real host.
    """
    fl = flow_label(lqpn, rqpn)
    low, high = fl & 0x3FFF, fl & 0xFC000
    return (low ^ (high >> 14)) | UDP_SPORT_MIN


def gid_from_ipv4(ip: str) -> str:
    """The RoCEv2 GID of an IPv4 address (IPv4-mapped IPv6), in the format of sysfs `gids/N`."""
    raw = ipaddress.IPv6Address(f"::ffff:{ip}").packed
    return ":".join(raw[i : i + 2].hex() for i in range(0, 16, 2))


def stable_hash(text: str) -> int:
    """A hash of a name that is the same in every process (Python's `hash()` is salted per run)."""
    return zlib.crc32(text.encode())


class QpAllocator:
    """Hands out QP numbers per RDMA device, like the driver does: ascending from a per-device base.

    The base is drawn from the seed and the device's name, so a scenario gets the same QPNs (hence
    the same UDP ports and the same ECMP paths) every time it runs, whatever order devices are used in.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._next: dict[tuple[str, str], int] = {}

    def allocate(self, host: str, rdma_dev: str) -> int:
        """The next free QPN on `host`'s `rdma_dev`."""
        key = (host, rdma_dev)
        if key not in self._next:
            rng = np.random.default_rng([self.seed & 0xFFFFFFFF, stable_hash(f"{host}/{rdma_dev}")])
            self._next[key] = 0x100 + int(rng.integers(0, 0x8000))
        qpn = self._next[key]
        self._next[key] = qpn + 1
        return qpn & QPN_MASK
