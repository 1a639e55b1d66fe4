"""CNP loss: congestion notifications that receivers send but a sender NIC never acts on, so DCQCN
cannot slow it down and PFC has to hold it back instead.

Method. DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015)
closes its loop through the CNP: the receiving NIC (notification point) sends one per marked QP per
interval (`np_cnp_sent` in the mlx5 RDMA `hw_counters`), the sending NIC (reaction point) cuts its
rate for each one it handles (`rp_cnp_handled`; received but dropped ones are `rp_cnp_ignored`). A
CNP travels NIC to NIC, so fabric-wide every CNP sent should be handled by some NIC; firmware bugs
that drop them on the reaction point are a known field failure (Meta, "RDMA over Ethernet for
Distributed AI Training at Meta Scale", SIGCOMM 2024, on tuning and debugging the CNP/DCQCN loop;
NVIDIA's mlx5 counter documentation on reading np_cnp_sent against rp_cnp_handled). Who sends to
whom is not known to the analysis (ring neighbours come from the collective library), so:

* counters are summed over buckets of `bucket_s` (NICs are polled at slightly different instants:
  a bucket absorbs that skew better than single samples);
* per bucket, the fabric's CNP balance: lost = sent (all NICs) - handled (all NICs). Near zero
  when the loop works;
* a NIC is a suspect in a bucket when (a) it handles at most `max_handled_ratio` of what its
  job-mates that handle CNPs handle (median; job-mates = NICs placed in a job with it, the only ones
  its traffic can be marked next to), (b) its traffic is evidently being congested without it
  slowing down: it is PFC-paused on a lossless priority at least `min_paused_fraction` of the time
  (ECN marks before PFC pauses in a DCQCN deployment, so a paused sender has crossed a marking
  queue), or it counts ignored CNPs, and (c) the fabric lost at least `min_lost_share` of what a
  job-mate handles (the missing CNPs could be its) and at least `min_lost_rate` per second;
* suspect buckets of one NIC closer than 1.5 buckets form an episode; episodes of at least
  `min_seconds` are findings on the NIC (RDMA port and netdev), with the jobs placed on it.

Only what the counters show is reported: while nothing is congested nobody sends CNPs and a NIC that
drops them looks healthy, so a finding starts with the first congestion that exposes the loss.
"""

from __future__ import annotations

import polars as pl
from pydantic import Field

from rocescope.analysis.detectors.base import Context, Detector, Params
from rocescope.analysis.episodes import episodes
from rocescope.analysis.findings import Finding

SENT, HANDLED, IGNORED = "cnp_sent", "cnp_handled", "cnp_ignored"
PAUSED_US = "pfc_rx_pause_duration_us"


class CnpLossParams(Params):
    bucket_s: float = Field(10.0, gt=0, description="Seconds of counters summed per balance check.")
    min_seconds: float = Field(20.0, ge=0, description="A NIC must look like this for at least this long.")
    max_handled_ratio: float = Field(
        0.1, ge=0, lt=1, description="Suspect handles at most this share of its job-mates' median."
    )
    min_peer_handled_rate: float = Field(
        10.0, gt=0, description="CNPs/s a job-mate must handle to count as evidence the loop is active."
    )
    min_lost_share: float = Field(
        0.3, gt=0, description="Fabric-wide lost CNPs must reach this share of a job-mate's handled ones."
    )
    min_lost_rate: float = Field(5.0, ge=0, description="Fabric-wide lost CNPs per second, at least.")
    min_paused_fraction: float = Field(
        0.001, ge=0, le=1, description="Share of time the suspect is PFC-paused (lossless priority)."
    )
    lossless_priorities: tuple[int, ...] = Field((3,), description="Priorities that run PFC (RoCE traffic).")
    critical_seconds: float = Field(60.0, gt=0, description="Findings at least this long are critical.")


def _nic_buckets(ctx: Context, p: CnpLossParams) -> pl.DataFrame:
    """Per bucket and NIC (host, netdev, rdma port): sent, handled, ignored CNPs and the paused share."""
    frames = ctx.frames
    t = frames.totals([SENT, HANDLED, IGNORED], p.bucket_s, roles=["nic"])
    if t.is_empty():
        return pl.DataFrame()
    nics = (
        frames.endpoints()
        .select(pl.col("host").alias("device"), pl.col("rdma_dev").alias("rdma"), pl.col("netdev"))
        .unique(["device", "rdma"])
    )
    counts = (
        t.with_columns(pl.col("port").str.split("/").list.first().alias("rdma"))
        .join(nics, on=["device", "rdma"], how="left")
        # an RDMA device without a placement: mlx5_N is conventionally the port of ethN
        .with_columns(pl.col("netdev").fill_null(pl.col("rdma").str.replace(r"^mlx5_(\d+)$", "eth$1")))
        .group_by("bucket", "device", "netdev", "port")
        .agg(
            *(pl.col("delta").filter(pl.col("metric") == m).sum().alias(m) for m in (SENT, HANDLED, IGNORED)),
            pl.col("seconds").max().alias("seconds"),
        )
    )
    paused = frames.totals([PAUSED_US], p.bucket_s, roles=["nic"], priorities=list(p.lossless_priorities))
    paused = paused.group_by("bucket", "device", pl.col("port").alias("netdev")).agg(
        (pl.col("delta") / 1e6 / pl.col("seconds")).max().alias("paused_fraction")
    )
    return counts.join(paused, on=["bucket", "device", "netdev"], how="left").with_columns(
        pl.col("paused_fraction").fill_null(0.0)
    )


def _suspects(ctx: Context, p: CnpLossParams, nic: pl.DataFrame) -> pl.DataFrame:
    """Bucket rows of NICs that handle (almost) none of the CNPs their job-mates handle while the
    fabric loses CNPs and they are congested (see the module docstring)."""
    balance = nic.group_by("bucket").agg(
        pl.col(SENT).sum().alias("fabric_sent"),
        pl.col(HANDLED).sum().alias("fabric_handled"),
        pl.col("seconds").max().alias("bucket_seconds"),
    )
    balance = balance.with_columns((pl.col("fabric_sent") - pl.col("fabric_handled")).alias("fabric_lost")).filter(
        pl.col("fabric_lost") / pl.col("bucket_seconds") >= p.min_lost_rate
    )
    if balance.is_empty():
        return pl.DataFrame()
    nic = nic.join(balance, on="bucket").with_columns(
        (pl.col(HANDLED) / pl.col("seconds")).alias("handled_rate"),
        (pl.col("bucket") + pl.duration(milliseconds=round(p.bucket_s * 1000))).alias("bucket_end"),
    )
    # job-mates: NICs placed in a common job during the bucket
    ep = ctx.frames.endpoints().select("job_id", pl.col("host").alias("device"), "netdev", "valid_from", "valid_to")
    placed = nic.select("bucket", "bucket_end", "device", "netdev").join(ep, on=["device", "netdev"])
    placed = placed.filter((pl.col("valid_from") < pl.col("bucket_end")) & (pl.col("valid_to") > pl.col("bucket")))
    placed = placed.select("bucket", "job_id", "device", "netdev")
    handling = nic.filter(pl.col("handled_rate") >= p.min_peer_handled_rate).select(
        "bucket", pl.col("device").alias("peer"), pl.col("netdev").alias("peer_netdev"), "handled_rate"
    )
    mates = placed.join(placed.rename({"device": "peer", "netdev": "peer_netdev"}), on=["bucket", "job_id"]).filter(
        (pl.col("device") != pl.col("peer")) | (pl.col("netdev") != pl.col("peer_netdev"))
    )
    peers = (
        mates.join(handling, on=["bucket", "peer", "peer_netdev"])
        .unique(["bucket", "device", "netdev", "peer", "peer_netdev"])
        .group_by("bucket", "device", "netdev")
        .agg(
            pl.col("handled_rate").median().alias("peer_handled_rate"),
            pl.len().alias("handling_peers"),
            pl.col("job_id").unique().sort().alias("shared_jobs"),
        )
    )
    rows = nic.join(peers, on=["bucket", "device", "netdev"])
    congested = (pl.col("paused_fraction") >= p.min_paused_fraction) | (pl.col(IGNORED) > 0)
    return rows.filter(
        (pl.col("handled_rate") <= p.max_handled_ratio * pl.col("peer_handled_rate"))
        & congested
        & (pl.col("fabric_lost") / pl.col("bucket_seconds") >= p.min_lost_share * pl.col("peer_handled_rate"))
    )


def detect(ctx: Context, p: CnpLossParams) -> list[Finding]:
    nic = _nic_buckets(ctx, p)
    if nic.is_empty():
        return []
    bad = _suspects(ctx, p, nic)
    if bad.is_empty():
        return []
    bad = bad.with_columns(pl.col("bucket_end").alias("ts"), pl.lit(p.bucket_s).alias("dt_s"))
    eps = episodes(
        bad,
        ["device", "netdev", "port"],
        gap_s=1.5 * p.bucket_s,
        aggregations=[
            pl.col(HANDLED).sum().alias("handled"),
            pl.col(IGNORED).sum().alias("ignored"),
            pl.col("fabric_sent").sum().alias("fabric_sent"),
            pl.col("fabric_lost").sum().alias("fabric_lost"),
            pl.col("peer_handled_rate").median().alias("peer_handled_rate"),
            pl.col("handling_peers").max().alias("handling_peers"),
            pl.col("paused_fraction").mean().alias("paused_fraction"),
            pl.col("shared_jobs")
            .list.explode(keep_nulls=False, empty_as_null=False)
            .unique()
            .sort()
            .alias("shared_jobs"),
        ],
    )
    findings = []
    min_span = max(p.min_seconds, p.bucket_s)
    for row in eps.iter_rows(named=True):
        start, end = ctx.clip(row["start"], row["end"])
        seconds = (end - start).total_seconds()
        if seconds < min_span - 1e-6:
            continue
        host, netdev, rdma_port = row["device"], row["netdev"], row["port"]
        expected = row["peer_handled_rate"] * seconds
        refs = (f"{host}:{rdma_port}", f"{host}:{netdev}")
        jobs = ctx.fabric.jobs_on_nic(host, netdev, start, end)
        none = row["handled"] <= 0
        findings.append(
            Finding(
                kind="cnp_loss",
                severity="critical" if none and seconds >= p.critical_seconds else "warning",
                start=start,
                end=end,
                devices=(host,),
                ports=refs,
                priority=p.lossless_priorities[0] if p.lossless_priorities else -1,
                score=row["fabric_lost"],
                summary=(
                    f"CNP loss: {host} {rdma_port} handled {row['handled']:.0f} CNPs in {seconds:.0f} s while "
                    f"{row['handling_peers']} job-mate NIC(s) handled ~{row['peer_handled_rate']:.0f}/s each and "
                    f"{row['fabric_lost']:.0f} of {row['fabric_sent']:.0f} CNPs sent in the fabric were never "
                    f"handled; the NIC was PFC-paused {row['paused_fraction']:.1%} of the time instead"
                ),
                evidence={
                    "cnp_handled": row["handled"],
                    "cnp_ignored": row["ignored"],
                    "expected_handled": expected,
                    "peer_handled_rate": row["peer_handled_rate"],
                    "handling_peers": row["handling_peers"],
                    "fabric_cnp_sent": row["fabric_sent"],
                    "fabric_cnp_lost": row["fabric_lost"],
                    "paused_fraction": row["paused_fraction"],
                    "shared_jobs": row["shared_jobs"],
                    "buckets": row["samples"],
                },
                job_ids=tuple(sorted(jobs)),
            )
        )
    return findings


DETECTOR = Detector("cnp_loss", "1", ("cnp_loss",), CnpLossParams, detect)
