"""Raw NIC counter names -> canonical `counters` rows, through the catalog.

Each raw name is resolved with `rocescope.catalog.resolve(vendor, raw)` (vendor from the netdev's driver:
mlx5_core -> mlx5, bnxt_en -> bnxt, ice, i40e; an RDMA port's `counters/` are `ib_port`, its `hw_counters/`
its provider's, `mlx5_rdma` or `bnxt_rdma`: `vendors.py`) and scaled with `catalog.scale` (IB
`port_rcv_data`/`port_xmit_data` count 4-byte words: x4). The raw name is always kept in `raw_name`. A name
the catalog does not know is KEPT (the house rule) under metric `raw:<name>` with priority -1: the prefix
keeps it out of the canonical name space, where it could otherwise collide (mlx5's software `rx_bytes` is not
the port's `rx_bytes`, which comes from `rx_bytes_phy`); `keep_unknown=False` drops them instead. Link rows
use the canonical `oper_up` (1/0; an `unknown` operstate gives no row) and `port_speed_bps`.

A driver's raw names are a small fixed set, so resolutions are memoized per vendor: a poll costs one
dict lookup per value.
"""

from __future__ import annotations

from collections.abc import Iterable

from rocescope import catalog
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.nic.host import LinkState

__all__ = ["KEEP_UNKNOWN", "RDMA_NOT_COUNTERS", "UNKNOWN_PREFIX", "add_link", "demote_taken", "normalize"]

#: Metric of a raw name the catalog does not know: `raw:<name>`.
UNKNOWN_PREFIX = "raw:"
#: Default for keep_unknown: keep unknown names (as `raw:<name>`) or drop them.
KEEP_UNKNOWN = True
#: Files of hw_counters that are settings, not counters (`lifespan`: the counter cache time in ms).
RDMA_NOT_COUNTERS = frozenset({"lifespan"})

_MEMO_LIMIT = 20_000
_Hit = tuple[str, int, float]  # (metric, priority, factor)
_MISS: _Hit = ("", 0, 0.0)
# vendor -> raw -> _Hit, or None when unknown
_memo: dict[str, dict[str, _Hit | None]] = {}


def _resolve_into(table: dict[str, _Hit | None], vendor: str, raw: str) -> _Hit | None:
    hit = catalog.resolve(vendor, raw)
    out = None if hit is None else (hit[0], hit[1], catalog.scale(vendor, raw))
    if len(table) < _MEMO_LIMIT:
        table[raw] = out
    return out


def normalize(
    vendor: str,
    pairs: Iterable[tuple[str, float]],
    keep_unknown: bool = KEEP_UNKNOWN,
    out: CounterRows | None = None,
) -> CounterRows:
    """Append (raw name, value) pairs to `out` as canonical (metric, priority, scaled value, raw name)
    rows, not yet stamped with time and port; unknown names are counted in `out.unknown`."""
    out = out if out is not None else CounterRows()
    metrics, prios, values, raws = out.metric, out.priority, out.value, out.raw_name
    table = _memo.setdefault(vendor, {})
    for raw, value in pairs:
        hit = table.get(raw, _MISS)
        if hit is _MISS:
            hit = _resolve_into(table, vendor, raw)
        if hit is None:
            out.unknown += 1
            if not keep_unknown:
                continue
            metrics.append(UNKNOWN_PREFIX + raw)
            prios.append(-1)
            values.append(float(value))
        else:
            metrics.append(hit[0])
            prios.append(hit[1])
            values.append(float(value) * hit[2])
        raws.append(raw)
    return out


def demote_taken(
    out: CounterRows, start: int, taken: set[tuple[str, int]], vendor: str, keep_unknown: bool = KEEP_UNKNOWN
) -> int:
    """Rows from `start` on (normalized under `vendor`, not yet stamped) whose canonical (metric, priority) is in
    `taken` become `raw:<name>` rows with their raw value (or are dropped without `keep_unknown`); how many.

    So one RDMA port never has two series of one metric: bnxt_re serves its RoCE bytes both as hw_counters
    `rx_roce_only_bytes` and, through its PMA, as IBTA `port_rcv_data`; the provider's own counter is kept."""
    metrics, prios, values, raws = out.metric, out.priority, out.value, out.raw_name
    demoted = 0
    i = start
    while i < len(metrics):
        if (metrics[i], prios[i]) not in taken:
            i += 1
            continue
        demoted += 1
        out.unknown += 1
        if keep_unknown:
            metrics[i], prios[i] = UNKNOWN_PREFIX + raws[i], -1
            values[i] /= catalog.scale(vendor, raws[i])
            i += 1
        else:
            for column in (metrics, prios, values, raws):
                del column[i]
    return demoted


def add_link(link: LinkState, out: CounterRows, state_name: str, speed_name: str) -> None:
    """Rows of a link's state and speed (none for what the device does not say), not yet stamped."""
    if link.oper_up is not None:
        out.metric.append("oper_up")
        out.priority.append(-1)
        out.value.append(1.0 if link.oper_up else 0.0)
        out.raw_name.append(state_name)
    if link.speed_mbps is not None:
        out.metric.append("port_speed_bps")
        out.priority.append(-1)
        out.value.append(link.speed_mbps * 1e6)
        out.raw_name.append(speed_name)
