"""Placements that name less than a NIC, completed from the NICs their hosts report.

A pod list read without an inventory (nothing to resolve its NCCL_IB_HCA or RDMA resource against) places a
job on a host only: it stands for every NIC of the host with counters, as a training pod holds its GPU node
whole; its ranks and address are unknown per NIC (-1, empty). A placement that names a netdev but not its RDMA
device (an inventory of netdevs only) gets the one its host pairs with it.

Which RDMA device drives which netdev is an inventory's to say; where nothing says, a host with as many RDMA
devices as netdevs pairs them in order (mlx5 numbers its devices in PCI order, and predictable netdev names,
`enp65s0f0np0`, follow the bus numbers), else leaves them unpaired.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from rocescope.analysis.fabric import netdev_of, port_order

__all__ = ["HOST_NICS_SCHEMA", "host_nics", "incomplete", "on_host_nics", "rank_nic"]

HOST_NICS_SCHEMA: dict[str, pl.DataType] = {"host": pl.String(), "netdev": pl.String(), "rdma_dev": pl.String()}
_WHOLE = (pl.col("netdev") == "") & (pl.col("rdma_dev") == "")
_HALF = (pl.col("netdev") != "") & (pl.col("rdma_dev") == "")


def incomplete(placed: pl.DataFrame) -> bool:
    """Whether some placement names no NIC, or a netdev without its RDMA device."""
    return bool(placed.select(_WHOLE.any() | _HALF.any()).item())


def host_nics(ports: pl.DataFrame) -> pl.DataFrame:
    """(host, netdev, rdma_dev) of the hosts' counter ports (`device`, `port`): netdevs, paired in order with
    the RDMA devices where as many, or the RDMA devices where no netdev reports (`mlx5_0/1` is mlx5_0's)."""
    by_host: dict[str, tuple[set[str], set[str]]] = {}
    for host, port in ports.select("device", "port").unique().iter_rows():
        netdevs, rdma = by_host.setdefault(host, (set(), set()))
        dev = netdev_of(port)
        (netdevs if dev == port else rdma).add(dev)
    rows = []
    for host, (netdevs, rdma) in sorted(by_host.items()):
        if not netdevs:
            rows += [(host, dev, dev) for dev in sorted(rdma, key=port_order)]
            continue
        paired = sorted(rdma, key=port_order) if len(rdma) == len(netdevs) else [""] * len(netdevs)
        rows += [(host, nd, dev) for nd, dev in zip(sorted(netdevs, key=port_order), paired, strict=True)]
    return pl.DataFrame(rows, schema=HOST_NICS_SCHEMA, orient="row")


def on_host_nics(placed: pl.DataFrame, nics: pl.DataFrame, schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """`placed` (endpoints rows in `schema`) with every placement that names no NIC spread over its host's
    `nics` (HOST_NICS_SCHEMA), and every netdev-only one given its paired RDMA device."""
    cols = list(schema)
    nics = nics.rename({"netdev": "nic", "rdma_dev": "nic_rdma"})
    paired = nics.filter(pl.col("nic_rdma") != "").select("host", pl.col("nic").alias("netdev"), "nic_rdma")
    placed = (
        placed.join(paired, on=["host", "netdev"], how="left")
        .with_columns(pl.when(_HALF).then(pl.coalesce("nic_rdma", "rdma_dev")).otherwise("rdma_dev").alias("rdma_dev"))
        .select(cols)
    )
    spread = (
        placed.filter(_WHOLE)
        .join(nics, on="host", how="left")
        .with_columns(
            pl.coalesce("nic", "netdev").alias("netdev"),
            pl.coalesce("nic_rdma", "rdma_dev").alias("rdma_dev"),
            pl.when(pl.col("nic").is_null()).then(pl.col("ip")).otherwise(pl.lit("")).alias("ip"),
            pl.when(pl.col("nic").is_null()).then(pl.col("rank")).otherwise(pl.lit(-1, pl.Int32)).alias("rank"),
        )
        .select(cols)
    )
    return pl.concat([placed.filter(~_WHOLE), spread]).sort("job_id", "host", "netdev")


def rank_nic(placed: pl.DataFrame, job: str, host: str, rank: int, ranks: int, gpu: int) -> str | None:
    """The NIC a rank of `job` on `host` uses, from the job's placements (`Frames.endpoints`): the host's only one,
    the one placed with the same rank (a communicator spanning the whole job: its ranks are the job's), or the
    NIC of the GPU's index (rail-optimized hosts give GPU i the i-th NIC). None when nothing tells."""
    ep = placed.filter(pl.col("job_id") == job)
    mine = ep.filter(pl.col("host") == host).unique(["netdev"]).sort("netdev")
    if mine.height == 1:
        return str(mine["netdev"][0])
    if ranks > 0 and ranks == ep.select(pl.struct("host", "netdev").n_unique()).item():
        hit = mine.filter(pl.col("rank") == rank)
        if hit.height == 1:
            return str(hit["netdev"][0])
    if 0 <= gpu < mine.height:
        return str(mine.sort("rdma_dev")["netdev"][gpu])
    return None
