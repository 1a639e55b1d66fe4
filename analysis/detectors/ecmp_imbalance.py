"""ECMP imbalance: one member of a leaf's uplink group carries far more than its share of the group's bytes,
sustained, and runs near line rate while its siblings have headroom.

Why it happens (Hopps, RFC 2992, "Analysis of an Equal-Cost Multi-Path Algorithm"; Al-Fares et al.,
Hedera, NSDI 2010, on elephant flows colliding under static hashing): ECMP hashes each flow's 5-tuple
onto one member; AI training moves few, long, line-rate flows (one or a few QPs per NIC pair), so two
elephants hashed onto one uplink halve each other's rate while a sibling idles, whatever the hash
seed. This holds on the common single-link rail fabric (one link per spine), unlike hash polarization
(`polarization.py`), which needs the second tier to repeat the first tier's choice over parallel links.

Method, on the leaf uplinks' `tx_bytes` summed per `bucket_s` bucket (each member's own samples, whatever
their clocks):

* a group is a leaf's ports towards the spines (from LLDP; with LLDP from the hosts only, the leaf's ports
  that face no host); groups of one member have no choice to make;
* a bucket is *imbalanced* when the group moves at least `min_gbps`, its hottest member carries at least
  1/n + `min_excess` (1 - 1/n) of the group's bytes (85% of two members, ~69% of four), runs at
  `min_hot_utilization` of its speed or more, and its siblings average at most `max_sibling_utilization`
  (they had room for the traffic the hash did not give them);
* imbalanced buckets of one (leaf, member) closer than 1.5 buckets form an episode, a finding when it lasts
  `min_seconds`: the hot uplink and the spine port facing it, the share of every member, the jobs whose
  traffic may cross the leaf's uplinks (NICs under it and under another leaf), and, when sampled packets
  are stored, the flows behind it (distinct flows and the entropy of their shares: few flows, low
  entropy, is why hashing could not spread them).
"""

from __future__ import annotations

import datetime as dt

import polars as pl
from pydantic import Field

from rocescope.analysis.detectors.base import Context, Detector, Params
from rocescope.analysis.detectors.polarization import flow_entropy
from rocescope.analysis.episodes import episodes
from rocescope.analysis.findings import Finding


class EcmpImbalanceParams(Params):
    bucket_s: float = Field(10.0, gt=0, description="Seconds of transmit bytes summed per member and bucket.")
    min_excess: float = Field(
        0.5, gt=0, lt=1, description="Hot member's share above 1/n, as a fraction of the way from 1/n to all."
    )
    min_hot_utilization: float = Field(0.7, gt=0, le=1, description="The hot member runs at this share of its speed.")
    max_sibling_utilization: float = Field(0.5, gt=0, le=1, description="Its siblings average at most this.")
    min_gbps: float = Field(1.0, ge=0, description="Group traffic below this is not judged.")
    min_seconds: float = Field(30.0, gt=0, description="Imbalance sustained at least this long.")
    min_flows_per_link: float = Field(4.0, gt=0, description="Sampled flows per uplink below this is low entropy.")
    critical_utilization: float = Field(0.95, gt=0, le=1, description="A hot member this busy is critical.")


def _groups(ctx: Context) -> pl.DataFrame:
    """(device, port, n): every leaf uplink of a group of two or more members."""
    rows = []
    for leaf in sorted(ctx.fabric.leaves):
        ups = ctx.fabric.uplinks(leaf)
        rows += [(leaf, port, len(ups)) for port in ups if len(ups) > 1]
    return pl.DataFrame(rows, schema={"device": pl.String, "port": pl.String, "n": pl.Int32}, orient="row")


def imbalanced_buckets(ctx: Context, p: EcmpImbalanceParams) -> pl.DataFrame:
    """Per (leaf, hot member, bucket): the imbalanced buckets (see the module docstring)."""
    groups = _groups(ctx)
    if groups.is_empty():
        return pl.DataFrame()
    leaves = sorted(set(groups["device"].to_list()))
    t = ctx.frames.totals(["tx_bytes"], p.bucket_s, roles=["switch"], devices=leaves)
    t = t.join(groups, on=["device", "port"]).filter(pl.col("seconds") > 0)
    if t.is_empty():
        return pl.DataFrame()
    speeds = ctx.speeds.frame(leaves).select("device", "port", "speed_Bps", "speed_source")
    t = t.join(speeds, on=["device", "port"], how="left").with_columns(
        (pl.col("delta") / pl.col("seconds")).alias("Bps"),
    )
    t = t.with_columns(
        (pl.col("Bps") / pl.col("speed_Bps")).alias("util"),
        pl.col("delta").sum().over("device", "bucket").alias("group_bytes"),
        pl.col("Bps").sum().over("device", "bucket").alias("group_Bps"),
        pl.len().over("device", "bucket").alias("members_seen"),
    )
    t = t.with_columns(
        (pl.col("delta") / pl.col("group_bytes")).alias("share"),
        ((pl.col("group_Bps") - pl.col("Bps")) / (pl.col("members_seen") - 1) / pl.col("speed_Bps")).alias(
            "sibling_util"
        ),
    )
    need = 1 / pl.col("n") + p.min_excess * (1 - 1 / pl.col("n"))
    return t.filter(
        pl.col("members_seen") == pl.col("n"),
        pl.col("group_Bps") * 8 >= p.min_gbps * 1e9,
        pl.col("share") >= need,
        pl.col("util") >= p.min_hot_utilization,
        pl.col("sibling_util") <= p.max_sibling_utilization,
    ).with_columns(
        (pl.col("bucket") + pl.duration(milliseconds=round(p.bucket_s * 1000))).alias("ts"),
        pl.lit(p.bucket_s).alias("dt_s"),
    )


def _member_shares(
    ctx: Context, p: EcmpImbalanceParams, leaf: str, start: dt.datetime, end: dt.datetime
) -> dict[str, float]:
    t = ctx.frames.totals(["tx_bytes"], p.bucket_s, roles=["switch"], devices=[leaf])
    ups = ctx.fabric.uplinks(leaf)
    t = t.filter(pl.col("port").is_in(ups), pl.col("bucket") >= start, pl.col("bucket") < end)
    got = dict(t.group_by("port").agg(pl.col("delta").sum()).iter_rows())
    total = sum(got.values()) or 1.0
    return {f"{leaf}:{u}": float(got.get(u, 0.0)) / total for u in ups}


def detect(ctx: Context, p: EcmpImbalanceParams) -> list[Finding]:
    hot = imbalanced_buckets(ctx, p)
    if hot.is_empty():
        return []
    eps = episodes(
        hot,
        ["device", "port"],
        gap_s=1.5 * p.bucket_s,
        aggregations=[
            pl.col("share").mean().alias("share"),
            pl.col("util").mean().alias("util"),
            pl.col("sibling_util").mean().alias("sibling_util"),
            pl.col("n").first().alias("n"),
            pl.col("speed_source").first().alias("speed_source"),
        ],
    )
    findings = []
    fabric = ctx.fabric
    for row in eps.iter_rows(named=True):
        start, end = ctx.clip(row["start"], row["end"])
        seconds = (end - start).total_seconds()
        if seconds < p.min_seconds - 1e-6:
            continue
        leaf, port, n = row["device"], row["port"], int(row["n"])
        peer = fabric.peer(leaf, port)
        ports = [f"{leaf}:{port}", *([f"{peer[0]}:{peer[1]}"] if peer else [])]
        evidence: dict[str, object] = {
            "group": f"{leaf} uplinks",
            "members": n,
            "hot_member": f"{leaf}:{port}",
            "hot_share": row["share"],
            "fair_share": 1 / n,
            "hot_utilization": row["util"],
            "sibling_utilization": row["sibling_util"],
            "member_shares": _member_shares(ctx, p, leaf, row["start"], row["end"]),
            "speed_source": row["speed_source"],
        }
        flows = flow_entropy(ctx.frames.flow_samples(start, end), fabric, ctx.frames.endpoints(), p.min_flows_per_link)
        entropy = [x for x in flows if x["where"] in (f"{leaf} uplinks", f"{leaf}:{port}")]
        if entropy:
            evidence["flow_entropy"] = entropy
        findings.append(
            Finding(
                kind="ecmp_imbalance",
                severity="critical" if row["util"] >= p.critical_utilization else "warning",
                start=start,
                end=end,
                devices=tuple(dict.fromkeys([leaf, *([peer[0]] if peer else [])])),
                ports=tuple(ports),
                priority=-1,
                score=seconds * float(row["share"]) * n,
                summary=(
                    f"ECMP imbalance: {leaf}:{port} carried {row['share']:.0%} of {leaf}'s {n} uplinks' bytes "
                    f"({row['util']:.0%} busy) for {seconds:.0f} s while its siblings averaged "
                    f"{row['sibling_util']:.0%}"
                ),
                evidence=evidence,
                job_ids=tuple(sorted(fabric.jobs_crossing_leaf(leaf, start, end))),
            )
        )
    return findings


DETECTOR = Detector("ecmp_imbalance", "1", ("ecmp_imbalance",), EcmpImbalanceParams, detect)
