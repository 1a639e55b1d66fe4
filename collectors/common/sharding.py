"""Sharding of collector targets across replicas: `collect gnmi/snmp --shard i/n`.

Rendezvous (highest random weight) hashing: target t belongs to the shard s in 0..n-1 with the largest
hash(t, s). Every target is owned by exactly one shard, shards get about the same share, and going from
n to n+1 shards moves only the ~1/(n+1) of the targets the new shard wins; nothing moves between the
old shards. No coordination: each replica computes its own share from the target list and its index.

In Kubernetes the switch collectors run as a StatefulSet; `--shard auto` takes the index from the pod's
hostname (`name-<ordinal>`) and the count from ROCESCOPE_SHARDS (the StatefulSet's replicas).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Callable, Iterable
from typing import TypeVar

from rocescope.errors import ConfigError

SHARDS_ENV = "ROCESCOPE_SHARDS"

T = TypeVar("T")


def _weight(target: str, shard: int) -> int:
    digest = hashlib.blake2b(f"{target}\x00{shard}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(target: str, n: int) -> int:
    """The shard (0..n-1) that owns `target` among `n` shards."""
    if n < 1:
        raise ValueError(f"shard count must be >= 1, not {n}")
    return max(range(n), key=lambda s: _weight(target, s))


def owns(target: str, i: int, n: int) -> bool:
    """Whether shard `i` of `n` owns `target`."""
    if not 0 <= i < n:
        raise ValueError(f"shard {i} is not in 0..{n - 1}")
    return owner(target, n) == i


def parse_shard(text: str, hostname: str | None = None, environ: dict[str, str] | None = None) -> tuple[int, int]:
    """`i/n` (0-based), or `auto`: i from the hostname `name-<ordinal>` (a StatefulSet pod) and n from
    ROCESCOPE_SHARDS, or `auto/n`."""
    env = os.environ if environ is None else environ
    text = text.strip()
    m = re.fullmatch(r"(\d+|auto)/(\d+)|auto", text)
    if m is None:
        raise ConfigError(f"--shard {text!r}: want i/n (0 <= i < n), auto or auto/n")
    index_text, count_text = (m.group(1), m.group(2)) if m.group(1) else ("auto", env.get(SHARDS_ENV, ""))
    if not count_text.isdigit() or int(count_text) < 1:
        raise ConfigError(f"--shard auto: set {SHARDS_ENV} to the number of shards (the StatefulSet's replicas)")
    n = int(count_text)
    if index_text == "auto":
        host = hostname if hostname is not None else socket.gethostname()
        ordinal = re.search(r"-(\d+)$", host.split(".")[0])
        if ordinal is None:
            raise ConfigError(f"--shard auto: hostname {host!r} is not a StatefulSet pod's (name-<ordinal>)")
        i = int(ordinal.group(1))
    else:
        i = int(index_text)
    if i >= n:
        raise ConfigError(f"--shard: index {i} is not below the shard count {n}")
    return i, n


def shard_targets(targets: Iterable[T], name: Callable[[T], str], shard: str | None) -> list[T]:
    """The targets this replica owns under `--shard` (all of them when `shard` is None)."""
    items = list(targets)
    if shard is None:
        return items
    i, n = parse_shard(shard)
    return [t for t in items if owns(name(t), i, n)]
