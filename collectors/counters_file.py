"""Counters files (`rocescope import --table counters`) whose metrics are a vendor's own names, renamed as the
collectors name them: a Parquet export of a NIC's `ethtool -S` or RDMA counters, of SONiC's SAI fields or of
SNMP objects lands where the detectors read it, not under names none of them knows."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import polars as pl
import pyarrow as pa

from rocescope import catalog
from rocescope.collectors.nic.normalize import UNKNOWN_PREFIX

__all__ = ["canonical_counters"]

#: The vendors whose raw names one port of a counters file may carry as its metrics: a netdev's `ethtool -S`
#: driver, an RDMA port's provider hw_counters beside its IBTA `counters/` (the provider's own counter of a
#: metric wins, as in `nic.normalize.demote_taken`), a SONiC switch's SAI stat fields, SNMP objects.
_RAW_FAMILIES = (
    ("mlx5",),
    ("mlx5_rdma", "ib_port"),
    ("bnxt_rdma", "ib_port"),
    ("bnxt",),
    ("ice",),
    ("i40e",),
    ("sonic_sai",),
    ("snmp",),
)
_Rename = tuple[str, int | None, float]  # (metric, priority or None to keep the row's, factor)


def _hit(family: Sequence[str], name: str) -> tuple[int, _Rename] | None:
    """(rank of the first of `family`'s vendors that knows `name`, its rename), or None."""
    for rank, vendor in enumerate(family):
        hit = catalog.resolve(vendor, name)
        if hit is not None:
            return rank, (hit[0], hit[1] if hit[1] >= 0 else None, catalog.scale(vendor, name))
    return None


def _vendor_named(names: Sequence[str]) -> bool:
    """Whether some of `names` are no catalog metric (nor `raw:`) but a vendor's raw name."""
    foreign = [n for n in names if n not in catalog.METRICS_BY_NAME and not n.startswith(UNKNOWN_PREFIX)]
    return any(_hit(f, n) for f in _RAW_FAMILIES for n in foreign)


@lru_cache(maxsize=1024)
def _port_renames(names: tuple[str, ...]) -> dict[str, _Rename]:
    """metric -> rename for one port's metric names (sorted: the NICs of one model share them, and one
    resolution), when some are a vendor's raw names (else {})."""
    if not _vendor_named(names):
        return {}
    family = max(_RAW_FAMILIES, key=lambda f: sum(_hit(f, n) is not None for n in names))
    hits = {n: h for n in names if (h := _hit(family, n)) is not None}
    # a name the port's own vendor does not know may be another's on the same NIC: exporters that key a NIC's RDMA
    # hw_counters by its netdev put `np_cnp_sent` beside `ethtool -S` names on `eth0`; ranked after the port's own
    # vendor, whose counter of a metric still wins
    for n in names:
        if n in hits or n in catalog.METRICS_BY_NAME or n.startswith(UNKNOWN_PREFIX):
            continue
        other = next((h for f in _RAW_FAMILIES if f is not family and (h := _hit(f, n)) is not None), None)
        if other is not None:
            hits[n] = (len(family) + other[0], other[1])
    first: dict[tuple[str, int | None], int] = {}
    for rank, (metric, prio, _) in hits.values():
        first[(metric, prio)] = min(rank, first.get((metric, prio), rank))
    out = {n: r for n, (rank, r) in hits.items() if rank == first[(r[0], r[1])]}
    taken = {m for m, _, _ in out.values()}
    for n in names:
        if n not in out and (n not in catalog.METRICS_BY_NAME or n in taken or n in hits):
            # mlx5's software `rx_bytes` beside the port's `rx_bytes_phy`: the vendor's own counter is kept
            out[n] = (UNKNOWN_PREFIX + n, -1, 1.0)
    return out


def canonical_counters(table: pa.Table) -> tuple[pa.Table, int]:
    """A `counters` file whose metrics are a vendor's raw names (a NIC's `ethtool -S` or RDMA hw_counters names
    as mlx5 or bnxt write them, SONiC's SAI stat fields), renamed as a live collector names them, with the
    number of renamed rows.

    Port by port: where a metric is no catalog name but some vendor's raw name, the vendor that names most of
    the port's metrics resolves them all (`rx_prio3_pause` -> `pfc_rx_pause`, priority 3; IBTA data words x4);
    a name it does not know is kept as `raw:<name>`, as the collectors keep it, and so is a catalog name that
    the vendor's own counter of it takes (mlx5's software `rx_bytes` beside `rx_bytes_phy`). The raw name is
    kept in `raw_name` where the file left it empty. A file of catalog names is returned as it is."""
    if not {"device", "port", "metric", "priority", "value"} <= set(table.schema.names) or not table.num_rows:
        return table, 0
    frame = pl.DataFrame(table)
    # nulls are left to the schema check, which refuses the file with a clear error
    if not _vendor_named(frame.get_column("metric").cast(pl.String).drop_nulls().unique().to_list()):
        return table, 0
    text = frame.with_columns(pl.col("device", "port", "metric").cast(pl.String))
    ports = text.group_by("device", "port").agg(pl.col("metric").drop_nulls().unique().sort())
    renames = [(d, p, n, *r) for d, p, metrics in ports.iter_rows() for n, r in _port_renames(tuple(metrics)).items()]
    schema = {
        "device": pl.String,
        "port": pl.String,
        "metric": pl.String,
        "canonical": pl.String,
        "canonical_priority": pl.Int64,
        "factor": pl.Float64,
    }
    mapping = pl.DataFrame(renames, schema=schema, orient="row")
    joined = text.join(mapping, on=["device", "port", "metric"], how="left")
    renamed = pl.col("canonical").is_not_null()
    raw = pl.col("raw_name").cast(pl.String)
    out = joined.with_columns(
        pl.when(renamed).then(pl.col("canonical")).otherwise(pl.col("metric")).alias("metric"),
        pl.coalesce("canonical_priority", "priority").cast(frame.schema["priority"]).alias("priority"),
        (pl.col("value") * pl.col("factor").fill_null(1.0)).cast(frame.schema["value"]).alias("value"),
        *(
            [pl.when(renamed & (raw.is_null() | (raw == ""))).then(pl.col("metric")).otherwise(raw).alias("raw_name")]
            if "raw_name" in frame.columns
            else []
        ),
    ).select(frame.columns)
    return out.to_arrow(), int(joined["canonical"].is_not_null().sum())
