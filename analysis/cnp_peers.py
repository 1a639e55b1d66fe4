"""Where NICs' CNPs go, and which of those peers count what they handle: a CNP balance is verifiable only where
they do (a storage array nobody monitors, a host without a collector may handle CNPs nobody counts). Read by the
CNP-loss detector and by the coverage map."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl

from rocescope.analysis.frames import Frames

__all__ = ["HANDLED", "RECEIVED", "SENT", "CnpPeers", "neighbourhood_losses", "qp_edges", "unverifiable_senders"]

SENT = "cnp_sent"
HANDLED = "cnp_handled"
RECEIVED = "cnp_received"  # all a NIC counts where it does not split handled from ignored


def _hosts_at(frames: Frames) -> dict[str, str]:
    """Remote address -> host, where known: the job placements' (`endpoints`), and a queue pair's remote address
    where its other end reports the pair (the remote host's QP numbered as this one's `dest_qpn`, pointing back)."""
    host_of = {ip: h for h, ip in frames.endpoints().select("host", "ip").iter_rows() if ip}
    qps = frames.qp_pairs()
    if not qps.is_empty():
        back = qps.select(
            pl.col("host").alias("remote"), pl.col("qpn").alias("dest_qpn"), pl.col("dest_qpn").alias("qpn")
        )
        answered = qps.join(back, on=["qpn", "dest_qpn"]).filter(pl.col("remote") != pl.col("host"))
        for ip, remote in answered.select("dest_ip", "remote").unique().iter_rows():
            host_of.setdefault(ip, remote)
    return host_of


def unverifiable_senders(frames: Frames) -> pl.DataFrame:
    """(device, rdma_dev) of the NICs with a queue pair to an address no host that counts CNPs is known at (a
    storage array nobody monitors, a host without a collector): the CNPs they send may be handled where nobody
    counts, so the fabric's balance cannot call them lost."""
    qps = frames.qp_pairs()
    if qps.is_empty():
        return pl.DataFrame(schema={"device": pl.String(), "rdma_dev": pl.String()})
    host_of = _hosts_at(frames)
    counting = frames.reporting(HANDLED) | frames.reporting(RECEIVED)
    unseen = [ip for ip in qps["dest_ip"].unique().to_list() if host_of.get(ip) not in counting]
    return qps.filter(pl.col("dest_ip").is_in(unseen)).select(pl.col("host").alias("device"), "rdma_dev").unique()


@dataclass(frozen=True)
class CnpPeers:
    """Where NICs' CNPs go, read once per window: the peers of each host's QPs and the sources of sampled packets to
    each address (a receiver's CNPs go back to whoever sent it marked packets), named by their host where
    `endpoints` or the pair's other end knows it, and which hosts count CNPs."""

    host_of: dict[str, str]
    ip_of: dict[tuple[str, str], str]
    qp_peers: dict[str, set[str]]
    senders_to: dict[str, set[str]]
    counting: frozenset[str]

    @classmethod
    def read(cls, frames: Frames, start: dt.datetime, end: dt.datetime) -> CnpPeers:
        ep = frames.endpoints()
        qp: dict[str, set[str]] = {}
        for host, ip in frames.qp_peers().select("host", "dest_ip").iter_rows():
            qp.setdefault(host, set()).add(ip)
        sent: dict[str, set[str]] = {}
        for src, dst in frames.flow_samples(start, end).select("src_ip", "dst_ip").unique().iter_rows():
            sent.setdefault(dst, set()).add(src)
        return cls(
            _hosts_at(frames),
            {(h, n): ip for h, n, ip in ep.select("host", "netdev", "ip").iter_rows() if ip},
            qp,
            sent,
            frozenset(frames.reporting(HANDLED) | frames.reporting(RECEIVED)),
        )

    def unmonitored(self, receivers: list[tuple[str, str]]) -> list[str] | None:
        """The receivers' peers (where their CNPs go) that report no CNP counters, by host where known; None when
        no peer is known at all."""
        mine = {self.ip_of[r] for r in receivers if r in self.ip_of}
        peers = set().union(*(self.qp_peers.get(h, set()) for h in {h for h, _ in receivers}))
        peers |= set().union(*(self.senders_to.get(ip, set()) for ip in mine))
        peers -= mine
        if not peers:
            return None
        return sorted({self.host_of.get(ip, ip) for ip in peers if self.host_of.get(ip) not in self.counting})


def qp_edges(frames: Frames, nic: pl.DataFrame) -> pl.DataFrame:
    """(device, netdev, peer, peer_netdev): the queue pairs (`qp_peers`) of the NICs in `nic` (device, netdev, and
    `port` as its RDMA port), each end named by its NIC where the job placements (`endpoints`) know the remote
    address."""
    schema = {"device": pl.String(), "netdev": pl.String(), "peer": pl.String(), "peer_netdev": pl.String()}
    qps = frames.qp_peers()
    if qps.is_empty():
        return pl.DataFrame(schema=schema)
    ip = frames.endpoints().select(pl.col("host").alias("peer"), pl.col("netdev").alias("peer_netdev"), "ip")
    ends = nic.select("device", "netdev", pl.col("port").str.split("/").list.first().alias("rdma_dev")).unique()
    pairs = qps.select(pl.col("host").alias("device"), "rdma_dev", pl.col("dest_ip").alias("ip")).unique()
    return ends.join(pairs, on=["device", "rdma_dev"]).join(ip, on="ip").select(*schema).unique()


def neighbourhood_losses(nic: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """(bucket, device, netdev, hood, hood_lost): each NIC's CNP neighbourhood (the NICs its queue pairs connect it
    to, transitively) and the CNPs sent and never handled in it per bucket. A notification point sends its CNPs to
    its queue pairs' other ends, so a CNP sent in one neighbourhood is handled in it or lost: a NIC whose
    neighbourhood's balance is whole (another rail's, its CNPs all handled by the NICs they went to) explains none of
    the fabric's loss, however few it handled."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(n: tuple[str, str]) -> tuple[str, str]:
        while (up := parent.setdefault(n, n)) != n:
            parent[n] = parent.get(up, up)  # path halving
            n = up
        return n

    for device, netdev, peer, peer_netdev in edges.iter_rows():
        a, b = root((device, netdev)), root((peer, peer_netdev))
        if a != b:
            parent[max(a, b)] = min(a, b)
    hoods = pl.DataFrame(
        [(d, n, "/".join(root((d, n)))) for d, n in list(parent)],
        schema={"device": pl.String(), "netdev": pl.String(), "hood": pl.String()},
        orient="row",
    )
    rows = nic.join(hoods, on=["device", "netdev"])
    lost = rows.group_by("bucket", "hood").agg((pl.col(SENT) - pl.col(HANDLED)).sum().alias("hood_lost"))
    return rows.select("bucket", "device", "netdev", "hood").join(lost, on=["bucket", "hood"])
