"""ECMP imbalance: one member of a leaf's uplink group carries far more than its share of the group's bytes,
sustained, and runs near line rate while its siblings have headroom.

Why it happens (Hopps, RFC 2992, "Analysis of an Equal-Cost Multi-Path Algorithm"; Al-Fares et al.,
Hedera, NSDI 2010, on elephant flows colliding under static hashing): ECMP hashes each flow's 5-tuple
onto one member; AI training moves few, long, line-rate flows (one or a few QPs per NIC pair), so two
elephants hashed onto one uplink halve each other's rate while a sibling idles, whatever the hash
seed. This holds on the common single-link rail fabric (one link per spine), unlike hash polarization
(`polarization.py`), which needs the second tier to repeat the first tier's choice over parallel links.

Method, relative to the group, on each member's own transmit samples (whatever their clocks) in buckets of
`bucket_s` (training alternates compute and communication every second or faster: a member's mean over a bucket
says little, its busy phases say what the hashing did):

* a group is a leaf's ports towards the spines, or a spine's parallel links to one leaf (from LLDP; with LLDP
  from the hosts only, the leaf's ports that face no host); in a 3-tier fabric also a spine's ports towards the
  super-spines and a super-spine's parallel links to one spine; groups of one member have no choice to make;
* a bucket is *imbalanced* when the group moves at least `min_gbps` and its member with the most bytes carries
  `fair_shares` fair shares (1/n) of them (at most `max_share`: with two members twice the fair share is all),
  the 90th percentile of its samples' utilization is `hot_p90` or more (saturated in its busy phases), with
  ECN marks, PFC pauses or a queue watermark on it where the switch counts ECN marks (flows held back, not one
  flow at line rate), while the median sibling's 90th percentile is `sibling_p90` or less (they had room for what
  the hash did not give them). A spine group a polarization finding already covers is left to it;
* imbalanced buckets of one (device, member) closer than 1.5 buckets form an episode, a finding when it lasts
  `min_seconds`; once found, it lasts while the member's 90th percentile stays at `hold_p90` or more with the rest
  of the definition held (hysteresis: a member hovering at 90% dips below it in one bucket or another, and a finding
  that ends and starts again at each dip is noise): the hot member and the port facing it, the share of every
  member, the jobs whose traffic may cross the leaf's uplinks (NICs under it and under another leaf), and, when
  sampled packets are stored, the flows behind it (distinct flows and the entropy of their shares: few flows, low
  entropy, is why hashing could not spread them).

The thresholds are the exam's definition (`rocescope.sim.truth.IMBALANCE`, M/D/1 queueing: a standing backlog
from 90% of line rate, under one packet at 60%), not fitted to any run.
"""

from __future__ import annotations

import datetime as dt

import polars as pl

from rocescope.analysis.detectors.base import Context, Detector, Params, threshold
from rocescope.analysis.detectors.polarization import flow_entropy
from rocescope.analysis.episodes import episodes
from rocescope.analysis.fabric import with_ifaces
from rocescope.analysis.findings import Finding


class EcmpImbalanceParams(Params):
    bucket_s: float = threshold(
        10.0,
        "Seconds per bucket (many training iterations).",
        "derivation: ten seconds hold many training iterations (compute and communication alternate every second or "
        "faster), so a bucket's shares are the hashing's, not one phase's.",
        gt=0,
    )
    fair_shares: float = threshold(
        2.0,
        "The hot member's bytes, in fair shares (1/n) of the group's.",
        "derivation: under independent hashing each of n ECMP members tends to 1/n of the bytes; twice that is a "
        "member carrying a sibling's share on top of its own, as when two elephant flows hash onto it.",
        gt=1,
    )
    max_share: float = threshold(
        0.75,
        "... at most this share (two members: three quarters).",
        "derivation: from fair_shares, which with two members would demand all the bytes (2 x 1/2); three quarters "
        "is the hot member carrying three times its sibling's bytes.",
        gt=0,
        le=1,
    )
    hot_p90: float = threshold(
        0.9,
        "90th percentile of the hot member's utilization (M/D/1: a standing queue).",
        "derivation: M/D/1 queueing: the mean queue rho^2/2(1-rho) is about 4 packets at 0.9 of line rate, a standing "
        "backlog, so in its busy phases the member is the bottleneck of its flows.",
        gt=0,
        le=1,
    )
    hold_p90: float = threshold(
        0.75,
        "An imbalance found lasts while its hot member's 90th percentile stays at least this (with the rest held).",
        "derivation: hysteresis, as an alarm on a noisy measure needs: a member hovering at 90% of line rate dips "
        "below it in one bucket or another (its samples' 90th percentile moves a few percent from bucket to bucket), "
        "and at 0.75 M/D/1 still queues about one packet (rho^2/2(1-rho) = 1.1): the member is still its group's "
        "bottleneck. It only extends an imbalance that met hot_p90 for min_seconds, never starts one.",
        gt=0,
        le=1,
    )
    sibling_p90: float = threshold(
        0.6,
        "Median of the siblings' 90th percentiles, at most (M/D/1: under one packet).",
        "derivation: M/D/1 queueing: at 0.6 of line rate the mean queue rho^2/2(1-rho) is under one packet (0.45), "
        "so siblings this busy had room for what the hash did not give them.",
        gt=0,
        le=1,
    )
    min_watermark_bytes: float = threshold(
        1e6,
        "A queue watermark that shows flows held back (above a 400G ECN Kmin of a few 100 KB).",
        "derivation: 1 MB is above the ECN marking threshold (Kmin) of a few 100 KB a 400G lossless queue marks "
        "from, so a watermark that high means the queue held flows back; one flow at line rate builds none.",
        gt=0,
    )
    min_gbps: float = threshold(
        1.0,
        "Group traffic below this is not judged.",
        "derivation: a group moving under 1 Gb/s is all but idle and its members' shares say nothing about the "
        "hashing; the floor only skips idle buckets (errs toward not judging).",
        ge=0,
    )
    min_seconds: float = threshold(
        30.0,
        "Imbalance sustained at least this long (three buckets).",
        "derivation: three 10 s buckets, so one long phase of a collective (a few seconds) or one bucket's reads "
        "cannot make a finding by itself.",
        gt=0,
    )
    min_flows_per_link: float = threshold(
        4.0,
        "Sampled flows per uplink below this is low entropy.",
        "derivation: k flows hashed over n links leave a given link empty with chance about e^-(k/n): 37% at one flow "
        "per link, 2% at four; fewer is too few to spread. Evidence only, never a finding.",
        gt=0,
    )
    critical_utilization: float = threshold(
        0.95,
        "A hot member this busy on average is critical.",
        "derivation: a mean (not busy-phase) utilization of 95% leaves the hot member almost no idle phase: it caps "
        "its flows throughout, not only in bursts; below it the finding stays a warning.",
        gt=0,
        le=1,
    )


#: ECN marks and PFC pauses on a member, or its queue's watermark: its queue held flows back (one flow at line
#: rate builds no queue)
ECN = ("queue_ecn_marked_packets", "tx_ecn_marked_packets")
HELD = (*ECN, "pfc_rx_pause", "pfc_rx_pause_duration_us")
WATERMARK = "queue_watermark_bytes"


def _groups(ctx: Context) -> pl.DataFrame:
    """(device, port, group, n): every member of a group of two or more: a leaf's uplinks, a spine's parallel
    links to one leaf; in a 3-tier fabric also a spine's uplinks to the super-spines and a super-spine's parallel
    links to one spine."""
    fabric = ctx.fabric
    rows = []
    for leaf in sorted(fabric.leaves):
        ups = fabric.uplinks(leaf)
        rows += [(leaf, port, f"{leaf} uplinks", len(ups)) for port in ups if len(ups) > 1]
    spines = fabric.spines - fabric.super_spines
    for spine in sorted(spines):
        for leaf, ports in sorted(fabric.parallel_links(spine, fabric.leaves).items()):
            rows += [(spine, port, f"{spine} links to {leaf}", len(ports)) for port in ports if len(ports) > 1]
        ups = [p for ports in fabric.parallel_links(spine, fabric.super_spines).values() for p in ports]
        rows += [(spine, port, f"{spine} uplinks", len(ups)) for port in ups if len(ups) > 1]
    for top in sorted(fabric.super_spines):
        for spine, ports in sorted(fabric.parallel_links(top, spines).items()):
            rows += [(top, port, f"{top} links to {spine}", len(ports)) for port in ports if len(ports) > 1]
    schema = {"device": pl.String, "port": pl.String, "group": pl.String, "n": pl.Int32}
    return pl.DataFrame(rows, schema=schema, orient="row")


def _polarized(ctx: Context) -> list[tuple[str, dt.datetime, dt.datetime]]:
    return [(d, f.start, f.end) for f in ctx.prior if f.kind == "polarization" for d in f.devices]


def imbalanced_buckets(ctx: Context, p: EcmpImbalanceParams) -> pl.DataFrame:
    """Per (device, hot member, bucket): the imbalanced buckets (see the module docstring)."""
    groups = _groups(ctx)
    if groups.is_empty():
        return pl.DataFrame()
    devices = sorted(set(groups["device"].to_list()))
    # per bucket in SQL: the 90th percentile of each member's sample rates over its speed is its samples' utilization
    tx = ctx.frames.totals(["tx_bytes"], p.bucket_s, roles=["switch"], devices=devices, rate_quantile=0.9)
    tx = with_ifaces(tx, ctx.fabric).drop("port").rename({"iface": "port"}).join(groups, on=["device", "port"])
    if tx.is_empty():
        return pl.DataFrame()
    speeds = ctx.speeds.frame(devices).select("device", "port", "speed_Bps", "speed_source")
    ms = max(1, round(p.bucket_s * 1000))
    members = (
        tx.join(speeds, on=["device", "port"], how="left")
        .group_by("device", "group", "n", "port", "bucket")
        .agg(
            pl.col("delta").sum().alias("bytes"),
            pl.col("seconds").sum().alias("seconds"),
            (pl.col("rate_quantile") / pl.col("speed_Bps")).max().alias("p90"),
            pl.col("speed_Bps").first(),
            pl.col("speed_source").first(),
        )
    )
    per_group = ["device", "group", "bucket"]
    members = members.with_columns(
        (pl.col("bytes") / pl.col("seconds") / pl.col("speed_Bps")).alias("util"),
        pl.col("bytes").sum().over(per_group).alias("group_bytes"),
        (pl.col("bytes") / pl.col("seconds")).sum().over(per_group).alias("group_Bps"),
        pl.len().over(per_group).alias("members_seen"),
        pl.col("bytes").rank("ordinal", descending=True).over(per_group).alias("_rank"),
    )
    siblings = (
        members.filter(pl.col("_rank") > 1)
        .group_by(per_group)
        .agg(pl.col("p90").median().alias("sibling_p90"), pl.col("util").mean().alias("sibling_util"))
    )
    hot = (
        members.filter(pl.col("_rank") == 1)
        .join(siblings, on=per_group)
        .with_columns((pl.col("bytes") / pl.col("group_bytes")).alias("share"))
    )
    need = pl.min_horizontal(p.fair_shares / pl.col("n"), pl.lit(p.max_share))
    hot = hot.filter(
        pl.col("members_seen") == pl.col("n"),
        pl.col("group_Bps") * 8 >= p.min_gbps * 1e9,
        pl.col("share") >= need,
        pl.col("p90") >= min(p.hold_p90, p.hot_p90),
        pl.col("sibling_p90") <= p.sibling_p90,
    ).with_columns((pl.col("p90") >= p.hot_p90).alias("hot"))
    hot = _held_back(ctx, p, hot, devices)
    for device, start, end in _polarized(ctx):
        hot = hot.filter(~((pl.col("device") == device) & (pl.col("bucket") < end) & (pl.col("bucket") >= start)))
    return hot.with_columns(
        (pl.col("bucket") + pl.duration(milliseconds=ms)).alias("ts"),
        pl.lit(p.bucket_s).alias("dt_s"),
    )


def _held_back(ctx: Context, p: EcmpImbalanceParams, hot: pl.DataFrame, devices: list[str]) -> pl.DataFrame:
    """The hot buckets whose member's queue held flows back, on switches that count ECN marks (DCQCN's signal:
    where they are not counted, zero pauses say nothing): ECN marks or PFC pauses in the bucket, or a queue
    watermark of `min_watermark_bytes` read over it (a watermark covers the interval since the previous read:
    SONiC's 60 s reads vouch for every bucket they span)."""
    frames = ctx.frames
    counting = set().union(*(frames.reporting(m) for m in ECN)) & set(devices)
    if hot.is_empty() or not counting:
        return hot
    ms = max(1, round(p.bucket_s * 1000))
    marked = frames.totals(list(HELD), p.bucket_s, roles=["switch"], devices=sorted(counting))
    parts = [
        with_ifaces(marked.filter(pl.col("delta") > 0), ctx.fabric).select(
            "device", pl.col("iface").alias("port"), (pl.col("bucket").dt.epoch("ms") // ms).alias("_b")
        )
    ]
    timed = frames.timed_gauges(
        WATERMARK, min_value=p.min_watermark_bytes, roles=["switch"], devices=sorted(counting), default_s=p.bucket_s
    )
    if not timed.is_empty():
        first = (pl.col("ts").dt.epoch("ms") - (pl.col("dt_s") * 1000).cast(pl.Int64)) // ms
        spans = timed.select("device", "port", pl.int_ranges(first, pl.col("ts").dt.epoch("ms") // ms + 1).alias("_b"))
        parts.append(with_ifaces(spans.explode("_b"), ctx.fabric).select("device", pl.col("iface").alias("port"), "_b"))
    held = pl.concat(parts, how="vertical_relaxed").unique()
    ours = hot.with_columns((pl.col("bucket").dt.epoch("ms") // ms).alias("_b"))
    kept = ours.join(held, on=["device", "port", "_b"], how="semi").drop("_b")
    return pl.concat([kept, hot.filter(~pl.col("device").is_in(sorted(counting)))])


def _member_shares(
    ctx: Context, p: EcmpImbalanceParams, device: str, members: list[str], start: dt.datetime, end: dt.datetime
) -> dict[str, float]:
    t = ctx.frames.totals(["tx_bytes"], p.bucket_s, roles=["switch"], devices=[device])
    t = with_ifaces(t, ctx.fabric).filter(
        pl.col("iface").is_in(members), pl.col("bucket") >= start, pl.col("bucket") < end
    )
    got = dict(t.group_by("iface").agg(pl.col("delta").sum()).iter_rows())
    total = sum(got.values()) or 1.0
    return {f"{device}:{m}": float(got.get(m, 0.0)) / total for m in members}


def _entered(buckets: pl.DataFrame, p: EcmpImbalanceParams) -> pl.DataFrame:
    """The imbalanced buckets from the first run of `hot` ones lasting `min_seconds` on, in each stretch of consecutive
    buckets (hysteresis: once found, an imbalance lasts while its member stays above `hold_p90`)."""
    keys = ["device", "port"]
    apart = pl.col("ts").diff().over(keys) > pl.duration(milliseconds=round(1.5 * p.bucket_s * 1000))
    runs = buckets.sort([*keys, "ts"]).with_columns(
        apart.fill_null(True).cast(pl.UInt32).cum_sum().over(keys).alias("_stretch"),
        (apart.fill_null(True) | (pl.col("hot") != pl.col("hot").shift(1).over(keys))).cast(pl.UInt32).alias("_new"),
    )
    runs = runs.with_columns(pl.col("_new").cum_sum().over(keys).alias("_run"))
    lasting = pl.col("hot") & (pl.len().over([*keys, "_run"]) * p.bucket_s >= p.min_seconds - 1e-6)
    entry = pl.when(lasting).then(pl.col("ts").min().over([*keys, "_run"])).min().over([*keys, "_stretch"])
    return runs.filter(pl.col("ts") >= entry).drop("_stretch", "_new", "_run")


def detect(ctx: Context, p: EcmpImbalanceParams) -> list[Finding]:
    hot = imbalanced_buckets(ctx, p)
    if hot.is_empty():
        return []
    hot = _entered(hot, p)
    if hot.is_empty():
        return []
    eps = episodes(
        hot,
        ["device", "port"],
        gap_s=1.5 * p.bucket_s,
        aggregations=[
            pl.col("share").mean().alias("share"),
            pl.col("util").mean().alias("util"),
            pl.col("p90").mean().alias("p90"),
            pl.col("sibling_util").mean().alias("sibling_util"),
            pl.col("sibling_p90").mean().alias("sibling_p90"),
            pl.col("n").first().alias("n"),
            pl.col("group").first().alias("group"),
            pl.col("speed_source").first().alias("speed_source"),
        ],
    )
    findings = []
    fabric = ctx.fabric
    groups = _groups(ctx)
    for row in eps.iter_rows(named=True):
        start, end = ctx.clip(row["start"], row["end"])
        seconds = (end - start).total_seconds()
        if seconds < p.min_seconds - 1e-6:
            continue
        device, port, n, group = row["device"], row["port"], int(row["n"]), row["group"]
        members = groups.filter(pl.col("group") == group)["port"].to_list()
        peer = fabric.peer(device, port)
        ports = [f"{device}:{port}", *([f"{peer[0]}:{peer[1]}"] if peer else [])]
        leaf = device if device in fabric.leaves else peer[0] if peer else device
        evidence: dict[str, object] = {
            "group": group,
            "members": n,
            "hot_member": f"{device}:{port}",
            "hot_share": row["share"],
            "fair_share": 1 / n,
            "hot_utilization": row["util"],
            "hot_p90_utilization": row["p90"],
            "sibling_utilization": row["sibling_util"],
            "sibling_p90_utilization": row["sibling_p90"],
            "member_shares": _member_shares(ctx, p, device, members, row["start"], row["end"]),
            "speed_source": row["speed_source"],
        }
        flows = flow_entropy(ctx.frames.flow_samples(start, end), fabric, ctx.frames.endpoints(), p.min_flows_per_link)
        entropy = [x for x in flows if x["where"] in (group, f"{device}:{port}")]
        if entropy:
            evidence["flow_entropy"] = entropy
        findings.append(
            Finding(
                kind="ecmp_imbalance",
                severity="critical" if row["util"] >= p.critical_utilization else "warning",
                start=start,
                end=end,
                devices=tuple(dict.fromkeys([device, *([peer[0]] if peer else [])])),
                ports=tuple(ports),
                priority=-1,
                score=seconds * float(row["share"]) * n,
                summary=(
                    f"ECMP imbalance: {device}:{port} carried {row['share']:.0%} of the bytes of {group} ({n}), "
                    f"{row['p90']:.0%} busy at its 90th percentile ({row['util']:.0%} on average), for "
                    f"{seconds:.0f} s while its siblings' 90th percentile was {row['sibling_p90']:.0%}"
                ),
                evidence=evidence,
                job_ids=tuple(sorted(fabric.jobs_crossing_leaf(leaf, start, end))),
            )
        )
    return findings


DETECTOR = Detector("ecmp_imbalance", "2", ("ecmp_imbalance",), EcmpImbalanceParams, detect)
