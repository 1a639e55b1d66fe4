"""ECMP path selection: each switch hashes a flow's 5-tuple with its own function and seed.

A flow's path is decided hop by hop, as in the field: the source leaf picks one of its uplinks among
the equal-cost next hops towards the destination leaf, the spine picks one of its parallel links
down to that leaf. The pick is `hash(5-tuple) mod (number of next hops)`, with next hops in port order.

That reproduces hash polarization for free. When both tiers run the same function with the same seed,
they compute the same hash for a flow, so the spine's pick is fixed by the leaf's: with 2 spines and
dual uplinks (cabled alternately to the spines, see `topology`), the flows reaching spine-01 all have
an even hash and all leave on its first link to the destination leaf, and half the spine downlinks
carry nothing. With a different seed per switch the tiers decide independently and load spreads
evenly. Whether the same hash polarizes depends on the numbers, as on real gear: with 2 or 4 spines
and dual uplinks the leaf's `h mod 4` (or 8) fixes the spine's `h mod 2`; with 3 spines `h mod 3`
says nothing about `h mod 2` and the load still spreads.

Two hash families are offered, both taking the seed:

* `crc32`: CRC-32 of the packed 5-tuple with the seed as initial value, then an avalanche step. A bare
  CRC with another initial value only XORs a constant into the result, which leaves `mod 2^k` picks
  as correlated as the same seed would; ASICs break that with hash offsets/bit selection, the
  avalanche stands for those.
* `toeplitz`: the RSS Toeplitz hash with a 40-byte key drawn from the seed. It is linear in the
  input, but two different keys give independent bits, so distinct seeds decorrelate the tiers.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Literal, NamedTuple

import numpy as np

from rocescope.errors import NoRouteError
from rocescope.sim.roce import FiveTuple, stable_hash
from rocescope.sim.topology import Nic, Port, Topology

HashFunction = Literal["crc32", "toeplitz"]
HASH_FUNCTIONS: tuple[HashFunction, ...] = ("crc32", "toeplitz")
#: same: every switch runs the factory default (one function, one seed): polarizes.
#: random: a seed per switch drawn from the fabric seed: spreads.
HashingMode = Literal["random", "same"]

_M32 = 0xFFFFFFFF
_MAX_HOPS = 8


@dataclass(frozen=True)
class HashConfig:
    """One switch's ECMP hash: which function and which seed."""

    function: HashFunction = "crc32"
    seed: int = 0


def _fmix32(h: int) -> int:
    """MurmurHash3's finalizer: every input bit flips each output bit with probability ~1/2."""
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    return h ^ (h >> 16)


def crc32_hash(data: bytes, seed: int) -> int:
    """CRC-32 of `data` started from `seed`, avalanched so that distinct seeds give independent picks."""
    return _fmix32(zlib.crc32(data, seed & _M32))


@cache
def toeplitz_key(seed: int) -> bytes:
    """The 40-byte Toeplitz key a switch seeded with `seed` uses."""
    return np.random.default_rng(seed & _M32).bytes(40)


@cache
def _toeplitz_table(key: bytes, length: int) -> tuple[tuple[int, ...], ...]:
    """Per input byte position and value, the XOR contribution of that byte to the Toeplitz hash."""
    if length + 4 > len(key):
        raise ValueError(f"Toeplitz key too short for {length} bytes of input")
    key_int = int.from_bytes(key, "big")
    key_bits = len(key) * 8
    table = []
    for pos in range(length):
        # input bit i (MSB first) contributes the 32-bit key window starting at key bit i
        windows = [(key_int >> (key_bits - 32 - (pos * 8 + b))) & _M32 for b in range(8)]
        row = [0] * 256
        for value in range(1, 256):
            low = value & -value  # lowest set bit = 0x80 >> b for input bit b of the byte
            row[value] = row[value ^ low] ^ windows[8 - low.bit_length()]
        table.append(tuple(row))
    return tuple(table)


def toeplitz(data: bytes, key: bytes) -> int:
    """The RSS Toeplitz hash of `data` under `key` (as NICs compute it for receive-side scaling)."""
    table = _toeplitz_table(key, len(data))
    acc = 0
    for pos, value in enumerate(data):
        acc ^= table[pos][value]
    return acc


def toeplitz_hash(data: bytes, seed: int) -> int:
    """The Toeplitz hash of `data` under the key derived from `seed`."""
    return toeplitz(data, toeplitz_key(seed))


def flow_hash(flow: FiveTuple, config: HashConfig) -> int:
    """The 32-bit hash a switch configured with `config` computes for `flow`."""
    data = flow.packed()
    if config.function == "crc32":
        return crc32_hash(data, config.seed)
    if config.function == "toeplitz":
        return toeplitz_hash(data, config.seed)
    raise ValueError(f"unknown hash function {config.function!r}")


def fabric_hashing(
    topology: Topology, mode: HashingMode = "random", function: HashFunction = "crc32", seed: int = 0
) -> dict[str, HashConfig]:
    """A hash configuration for every switch: all alike (`same`) or one seed per switch (`random`)."""
    if mode == "same":
        return {sw.name: HashConfig(function, seed) for sw in topology.switches}
    if mode == "random":
        return {sw.name: HashConfig(function, switch_seed(seed, sw.name)) for sw in topology.switches}
    raise ValueError(f"unknown hashing mode {mode!r}")


def switch_seed(fabric_seed: int, switch: str) -> int:
    """A switch's own 32-bit hash seed, drawn from the fabric seed and its name (not its position)."""
    return int(np.random.default_rng([fabric_seed & _M32, stable_hash(switch)]).integers(2**32))


class Hop(NamedTuple):
    """A device on a path and the port the flow leaves it by."""

    device: str
    port: str


class Ecmp:
    """Routes flows through a fabric, hashing at every switch; ports listed in `down` carry nothing.

    A downed port takes its cable with it (both ends). A leaf only counts a spine as a next hop while
    that spine still has a live link to the destination leaf, as BGP would withdraw the route.
    """

    def __init__(
        self,
        topology: Topology,
        hashing: Mapping[str, HashConfig] | None = None,
        down: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.topology = topology
        self.hashing: Mapping[str, HashConfig] = hashing if hashing is not None else fabric_hashing(topology)
        missing = [sw.name for sw in topology.switches if sw.name not in self.hashing]
        if missing:
            raise ValueError(f"no hash configuration for {missing[:5]}")
        dead: set[int] = set()
        for device, port in down:
            p = topology.port(device, port)
            dead.update((p.id, int(topology.peer_ids[p.id])))
        self.down: frozenset[int] = frozenset(dead)

    def is_up(self, port: Port) -> bool:
        return port.id not in self.down

    def next_hops(self, switch: str, dst: Nic) -> tuple[Port, ...]:
        """The equal-cost egress ports of `switch` towards NIC `dst`, in ECMP group (port) order."""
        topo = self.topology
        role = topo.device(switch).role
        if role == "leaf":
            if dst.leaf == switch:
                port = topo.port(dst.leaf, dst.leaf_port)
                return (port,) if self.is_up(port) else ()
            return tuple(
                up
                for up in topo.uplinks(switch)
                if self.is_up(up) and any(self.is_up(d) for d in topo.downlinks(up.peer_device, dst.leaf))
            )
        if role == "spine":
            return tuple(p for p in topo.downlinks(switch, dst.leaf) if self.is_up(p))
        raise ValueError(f"{switch!r} is a {role}, not a switch")

    def choose(self, switch: str, flow: FiveTuple, candidates: Sequence[Port]) -> Port:
        """The next hop `switch` picks for `flow`: hash mod group size."""
        if len(candidates) == 1:
            return candidates[0]
        return candidates[flow_hash(flow, self.hashing[switch]) % len(candidates)]

    def route_ports(self, flow: FiveTuple) -> list[Port]:
        """The egress ports of `flow` from the source NIC to the last leaf, in order."""
        topo = self.topology
        src, dst = topo.nic_by_ip(flow.src_ip), topo.nic_by_ip(flow.dst_ip)
        first = topo.port(src.host, src.netdev)
        if not self.is_up(first):
            raise NoRouteError(f"{src.host}:{src.netdev} is down")
        path = [first]
        device = first.peer_device
        while device != dst.host:
            if len(path) > _MAX_HOPS:
                raise NoRouteError(f"no loop-free path from {flow.src_ip} to {flow.dst_ip}")
            candidates = self.next_hops(device, dst)
            if not candidates:
                raise NoRouteError(f"{device} has no live next hop towards {dst.host}:{dst.netdev}")
            port = self.choose(device, flow, candidates)
            path.append(port)
            device = port.peer_device
        return path

    def route(self, flow: FiveTuple) -> list[Hop]:
        """The path of `flow` as (device, egress port) pairs, starting at the source host's NIC."""
        return [Hop(p.device, p.name) for p in self.route_ports(flow)]

    def load(self, flows: Iterable[FiveTuple]) -> Counter[Hop]:
        """How many of `flows` leave by each egress port (ports with no flow are absent)."""
        counts: Counter[Hop] = Counter()
        for flow in flows:
            counts.update(self.route(flow))
        return counts


def imbalance(counts: Sequence[int]) -> float:
    """max/mean of per-link flow counts: 1.0 is a perfect spread; inf when nothing flows."""
    total = sum(counts)
    if not counts or total == 0:
        return float("inf")
    return max(counts) * len(counts) / total
