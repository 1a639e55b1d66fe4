"""One device, one name: what LLDP and Kubernetes call a device that reports counters under another name.

A switch's gNMI target and a host's collector name it by its short hostname (`leaf-01`, `gpu-001`), while
LLDP's system name and a Kubernetes node name are often the FQDN (`leaf-01.dc1.example.com`: EOS appends
its `ip domain-name`, lldpd advertises the resolvable FQDN) or another case (`LEAF-01`); the reverse
happens too. Names are compared by their first DNS label, case-insensitively; a name maps to the one
counters device with that label, and is left alone when none or several have it, or when it is an address
(a gnmic `source` given as `10.0.0.1:57400` names no host).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence

import polars as pl

__all__ = ["renamed", "same_devices"]


def _label(name: str) -> str | None:
    text = name.strip().lower()
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return text.split(".", 1)[0] or None
    return None


def same_devices(known: Iterable[str], names: Iterable[str]) -> dict[str, str]:
    """name -> the `known` device it stands for, for each of `names` that is not known itself."""
    by_label: dict[str, list[str]] = {}
    known = set(known)
    for device in known:
        label = _label(device)
        if label is not None:
            by_label.setdefault(label, []).append(device)
    out = {}
    for name in set(names) - known:
        label = _label(name)
        hits = by_label.get(label, []) if label is not None else []
        if len(hits) == 1:
            out[name] = hits[0]
    return out


def renamed(frame: pl.DataFrame, columns: Sequence[str], mapping: Mapping[str, str]) -> pl.DataFrame:
    """`frame` with the names in `columns` that `mapping` knows replaced."""
    if not mapping or frame.is_empty():
        return frame
    return frame.with_columns(pl.col(c).replace(dict(mapping)) for c in columns)
