"""CNP loss in the fabric: notification points sent CNPs that (almost) no NIC handled and no NIC suspect explains,
e.g. CNPs mapped to a lossy queue that drops them at a congested switch. The finding names the receivers and the
switch queues that dropped packets meanwhile; where the CNPs' destinations are not all monitored it is
unverifiable (info). The method is `rocescope.analysis.detectors.cnp_loss`'s; this is its fabric half."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import polars as pl

from rocescope.analysis.cnp_peers import HANDLED, RECEIVED, SENT, CnpPeers
from rocescope.analysis.detectors.base import Context
from rocescope.analysis.episodes import episodes
from rocescope.analysis.findings import Finding, Severity

if TYPE_CHECKING:
    from rocescope.analysis.detectors.cnp_loss import CnpLossParams

__all__ = ["dropping_queues", "fabric_findings", "fabric_jobs"]

QUEUE_DROPS = "queue_dropped_packets"
PORT_TX_DROPS = "tx_discards"


def dropping_queues(ctx: Context, p: CnpLossParams, start: dt.datetime, end: dt.datetime) -> list[tuple[str, float]]:
    """Switch queues (`device:port`, priority not lossless) that dropped packets in [start, end], most first."""
    drops = ctx.frames.rates([QUEUE_DROPS], min_rate=1e-9, roles=["switch"])
    drops = drops.filter(
        ~pl.col("priority").is_in(list(p.lossless_priorities)), pl.col("ts") > start, pl.col("ts") <= end
    )
    if drops.is_empty():
        # no lossy queue counted a drop (Cumulus counts the RoCE class only, SR Linux no queues at all): the
        # ports' egress discards stand in, as lossless queues do not drop
        drops = ctx.frames.rates([PORT_TX_DROPS], min_rate=1e-9, roles=["switch"])
        drops = drops.filter(pl.col("ts") > start, pl.col("ts") <= end).with_columns(pl.lit(-1).alias("priority"))
    per = drops.group_by("device", "port", "priority").agg(pl.col("delta").sum()).sort("delta", descending=True)
    return [(f"{d}:{port}", float(n)) for d, port, _prio, n in per.iter_rows()]


def fabric_jobs(
    ctx: Context, receivers: list[str], queues: list[str], start: dt.datetime, end: dt.datetime
) -> tuple[str, ...]:
    """The jobs whose congestion loop broke: the receivers' jobs that also run behind the dropping queues (the
    CNPs' destinations), else the receivers' jobs."""
    mine = set(ctx.fabric.jobs_at_refs(receivers, start, end))
    behind = set(ctx.fabric.jobs_at_refs(queues, start, end))
    return tuple(sorted(mine & behind or mine))


def fabric_findings(
    ctx: Context, p: CnpLossParams, nic: pl.DataFrame, balance: pl.DataFrame, blamed: pl.DataFrame
) -> list[Finding]:
    """Loss in the fabric: the NICs sent CNPs that (almost) no NIC handled (the method: `detectors.cnp_loss`)."""
    senders = set(nic.filter(pl.col(SENT) > 0)["device"].to_list())
    if not (ctx.frames.reporting(HANDLED) | ctx.frames.reporting(RECEIVED)) - senders:
        return []  # nobody but the senders reports CNPs handled: not collected is not lost
    lost = balance.filter(
        pl.col("fabric_sent") / pl.col("bucket_seconds") >= p.min_lost_rate,
        pl.col("fabric_handled") <= p.max_fabric_handled_share * pl.col("fabric_sent"),
    )
    if not blamed.is_empty():
        lost = lost.join(blamed.select("bucket").unique(), on="bucket", how="anti")
    if lost.is_empty():
        return []
    lost = lost.with_columns(
        (pl.col("bucket") + pl.duration(milliseconds=round(p.bucket_s * 1000))).alias("ts"),
        pl.lit(p.bucket_s).alias("dt_s"),
        pl.lit("fabric").alias("where"),
    )
    eps = episodes(
        lost,
        ["where"],
        gap_s=1.5 * p.bucket_s,
        aggregations=[pl.col("fabric_sent").sum().alias("sent"), pl.col("fabric_handled").sum().alias("handled")],
    )
    findings = []
    for row in eps.iter_rows(named=True):
        start, end = ctx.clip(row["start"], row["end"])
        seconds = (end - start).total_seconds()
        if seconds < max(p.min_seconds, p.bucket_s) - 1e-6:
            continue
        span = nic.filter(pl.col("bucket") >= row["start"], pl.col("bucket") < row["end"], pl.col(SENT) > 0)
        notifying = span.group_by("device", "netdev", "port").agg(pl.col(SENT).sum()).sort(SENT, descending=True)
        receivers = [(d, n, port, float(s)) for d, n, port, s in notifying.iter_rows()]
        queues = dropping_queues(ctx, p, start, end)
        nic_refs = [f"{d}:{n}" for d, n, _, _ in receivers]
        leaf_refs = [f"{lp[0]}:{lp[1]}" for d, n, _, _ in receivers if (lp := ctx.fabric.peer(d, n)) is not None]
        refs = [*nic_refs, *leaf_refs, *(q for q, _ in queues)]
        handled_share = row["handled"] / row["sent"] if row["sent"] else 0.0
        unseen = CnpPeers.read(ctx.frames, start, end).unmonitored([(d, n) for d, n, _, _ in receivers])
        severity: Severity = "critical" if seconds >= p.critical_seconds else "warning"
        verdict = ""
        if unseen is None or unseen:
            severity = "info"
            verdict = (
                "; unverifiable: whom the CNPs went to is not known (no sampled packets or QP records)"
                if unseen is None
                else f"; unverifiable: {len(unseen)} of their peers report no CNP counters ({', '.join(unseen[:3])})"
            )
        findings.append(
            Finding(
                kind="cnp_loss",
                severity=severity,
                start=start,
                end=end,
                devices=tuple(dict.fromkeys([*(d for d, *_ in receivers), *(q.partition(":")[0] for q, _ in queues)])),
                ports=tuple(dict.fromkeys(refs)),
                priority=p.lossless_priorities[0] if p.lossless_priorities else -1,
                score=row["sent"] - row["handled"],
                summary=(
                    f"CNP loss in the fabric: {len(receivers)} NIC(s) sent {row['sent']:.0f} CNPs in {seconds:.0f} s "
                    f"and the fabric's NICs handled {handled_share:.0%} of them"
                    + (
                        f"; {len(queues)} switch queue(s) dropped packets meanwhile, most at {queues[0][0]}"
                        if queues
                        else ""
                    )
                    + verdict
                ),
                evidence={
                    "where": "fabric",
                    "verifiable": not verdict,
                    "unmonitored_peers": unseen,
                    "fabric_cnp_sent": row["sent"],
                    "fabric_cnp_handled": row["handled"],
                    "receivers": [
                        {"nic": f"{d}:{n}", "rdma_port": f"{d}:{port}", "cnp_sent": s} for d, n, port, s in receivers
                    ],
                    "dropping_queues": [{"queue": q, "dropped_packets": n} for q, n in queues],
                    "buckets": row["samples"],
                },
                job_ids=fabric_jobs(ctx, nic_refs, [q for q, _ in queues], start, end),
            )
        )
    return findings
