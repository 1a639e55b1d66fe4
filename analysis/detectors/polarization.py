"""Hash polarization: the spine tier repeats the leaf tier's ECMP choice, so in every spine's group of
parallel links towards a leaf the same members sit idle while their siblings carry everything.

Background (Cisco's CEF load-sharing notes on "CEF polarization", the reason for the `universal`
algorithm that seeds each router's hash with its own unique ID; Dell OS9's anti-polarization hash
seeds and Nokia SR's system-IP load balancing answer the same problem): when two tiers run the same
hash function with the same seed, a switch of the second tier computes for each flow the same hash as
the tier before it; the flows the leaf sent to spine S all share the bits that chose S, and S's
`hash mod n` over its parallel links is fixed by them. Per-hop imbalance alone is not that: with a
handful of elephant flows per group, random seeds leave links idle by chance (a single flow always
idles its siblings). What polarization adds is *correlation*: the idle member is the same group
position on every group of the spine, all the time.

Method, on the spine downlinks' `tx_bytes` per sample:

* a *group* is a spine's parallel links towards one leaf (ports sorted by number, as ECMP groups
  order their members); groups of one link carry no choice and are left out;
* per spine, sample and group size `n`, the bytes of all groups are summed per member *position*;
  a position is *cold* in a sample when it carries at most `cold_share / n` of them while the spine
  moves at least `min_gbps` (under independent hashing every position tends to `1 / n`);
* consecutive cold samples of (spine, n, position) form an episode (gaps up to `max_gap_polls`
  polls bridged) kept when it lasts `min_seconds` and, over the episode, at least `min_groups`
  active groups and a share `min_group_agreement` of them are individually cold at that position
  (so one heavy group cannot fake it); cold positions of a spine overlapping in time are judged
  together (with 4 links per group, 2 of them idle);
* the agreement must be unlikely under independent hashing (`chance_idle`): a group with b members that each
  carry more than the whole cold set may (so a cold set holds none of them) hashed its flows, however many, onto
  a uniformly random b-set of members, which misses the cold ones with probability C(n - cold, b) / C(n, b)
  (a bound: a cold set must at least miss those); the chance that that many groups miss one same
  set, times the C(n, cold) sets that could have been picked after looking, is at most `max_chance`.
  A small fabric (few leaf groups), or one flow per group on few groups, cannot show polarization
  apart from chance, and is not called; the skew left is the second tier's conditioned on the first;
  spines that agree at once combine their chances as independent tests (Fisher's method: each spine once,
  over every spine with groups of that size, those that showed nothing at chance 1: `_unlikely`);
* episodes of every spine overlapping in time are one incident, one finding: ports are the hot
  members (above their group's mean over the episode), devices the spines then the leaves behind
  the hot ports, jobs those crossing the polarized spines. Severity is critical when a hot member
  runs at `critical_utilization` of its speed (the idle siblings then cost throughput).

Known limit: the counters cannot tell a fabric with about one flow per spine group (e.g. contiguous
placement with one ring crossing per leaf) polarized from unlucky; `max_chance` keeps such cases
quiet rather than guessing.

Evidence carries per group max/mean, coefficient of variation and Jain's fairness index
(R. Jain, D. Chiu, W. Hawe, "A Quantitative Measure of Fairness and Discrimination for Resource
Allocation in Shared Computer Systems", DEC-TR-301, 1984: J = (sum x)^2 / (n sum x^2), 1 when even,
1/n when one member takes all), the spine's position shares outside the incident when the window has
some (the un-polarized reference), the leaf uplink groups' imbalance per `bucket_s` bucket (the first
tier), and, when sampled packets are stored (`packets`, optional: the simulator writes them where a
scenario turns its mirror on), the flow entropy per leaf uplink group: distinct (src, dst, UDP source
port) flows and the Shannon entropy of their packet shares. Few flows per uplink is low entropy, the
reason ECMP cannot spread whatever the hashing; it is reported, never a finding by itself.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import polars as pl

from rocescope.analysis.detectors.base import Context, Detector, Params, threshold
from rocescope.analysis.episodes import episodes
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import Finding


class PolarizationParams(Params):
    cold_share: float = threshold(
        0.2,
        "A member position carrying at most this times 1/n of a spine's bytes is cold.",
        "derivation: under independent hashing each of n positions tends to 1/n of the bytes; one at a fifth of that "
        "is idle, not a wobble around its share (luck is ruled out apart, by max_chance).",
        gt=0,
        lt=1,
    )
    min_gbps: float = threshold(
        1.0,
        "Spine downlink traffic (per group size) below this is not judged.",
        "derivation: a spine moving under 1 Gb/s is all but idle and its position shares say nothing about hashing; "
        "the floor only skips idle samples (errs toward not judging).",
        ge=0,
    )
    min_seconds: float = threshold(
        20.0,
        "Cold position sustained at least this long.",
        "derivation: polarization comes from the hash configuration and lasts while traffic flows; 20 s spans several "
        "reads (never less than one read's interval), so one read or one collective phase cannot make it.",
        gt=0,
    )
    max_gap_polls: float = threshold(
        3.0,
        "Samples this many polls apart still belong to one episode.",
        "derivation: samples drop out where the spine idles under min_gbps (compute phases) or a read is missed; "
        "bridging up to 3 polls keeps one persistent pattern one episode, longer gaps split it.",
        ge=1,
    )
    min_groups: int = threshold(
        4,
        "Active groups of the spine needed to call a correlation.",
        "derivation: polarization is the same idle position across a spine's groups; below 4 groups agreement is too "
        "easily one heavy group or luck, so the floor errs toward silence (max_chance is the test proper).",
        ge=1,
    )
    min_group_agreement: float = threshold(
        0.75,
        "Share of the active groups individually cold at the position.",
        "derivation: polarization idles the same position in every group of the spine; three quarters tolerates a "
        "group whose flows happen to land on the cold member, yet one heavy group cannot fake the pattern.",
        gt=0,
        le=1,
    )
    max_chance: float = threshold(
        0.01,
        "Largest chance that independent hashing idles those members anyway (chance_idle).",
        "derivation: a significance level on the chance computed under the independent-hashing null model "
        "(chance_idle, union-bounded over cold sets): luck calls at most 1% of the time; small fabrics stay quiet.",
        gt=0,
        le=1,
    )
    critical_utilization: float = threshold(
        0.8,
        "A hot member at this share of its speed makes the finding critical.",
        "derivation: near line rate the idle siblings cost throughput, not just headroom: an M/D/1 queue averages "
        "rho^2/2(1-rho) = 1.6 packets at 0.8 and grows fast above it.",
        gt=0,
        le=1,
    )
    bucket_s: float = threshold(
        10.0,
        "Bucket of the first-tier (leaf uplink) imbalance evidence.",
        "derivation: ten seconds hold many training iterations (compute and communication alternate every second or "
        "faster), so a bucket's shares are the hashing's, not one phase's; evidence only.",
        gt=0,
    )
    min_flows_per_link: float = threshold(
        4.0,
        "Sampled flows per uplink below this is low entropy (packets evidence).",
        "derivation: k flows hashed over n links leave a given link empty with chance about e^-(k/n): 37% at one flow "
        "per link, 2% at four; fewer is too few to spread. Evidence only, never a finding.",
        gt=0,
    )


@dataclass(frozen=True)
class SpineEpisode:
    """One spine's position(s) cold over a span, with the groups that agree."""

    spine: str
    n: int
    positions: tuple[int, ...]
    start: dt.datetime
    end: dt.datetime
    hot: tuple[str, ...]
    leaves: tuple[str, ...]
    evidence: dict[str, Any]


def imbalance(values: Sequence[float]) -> dict[str, float]:
    """max/mean, coefficient of variation and Jain's index of per-member loads (even: 1, 0, 1)."""
    n, total = len(values), float(sum(values))
    if n == 0 or total <= 0:
        return {"max_mean": 1.0, "cov": 0.0, "jain": 1.0}
    mean = total / n
    var = sum((v - mean) ** 2 for v in values) / n
    return {
        "max_mean": max(values) / mean,
        "cov": math.sqrt(var) / mean,
        "jain": total**2 / (n * sum(v * v for v in values)),
    }


def _port_order(port: str) -> tuple[tuple[int, ...], str]:
    """Ports in number order (Ethernet4 before Ethernet12, Ethernet1/2 before Ethernet1/10)."""
    return tuple(int(x) for x in re.findall(r"\d+", port)), port


def spine_groups(fabric: Fabric) -> pl.DataFrame:
    """Every spine port facing a leaf: its group (spine, leaf), the group's size and member position."""
    rows: list[tuple[str, str, str, int, int]] = []
    for spine in sorted(fabric.spines):
        by_leaf: dict[str, list[str]] = defaultdict(list)
        for port in fabric.ports_of(spine):
            peer = fabric.peer(spine, port)
            if peer is not None and peer[0] in fabric.leaves:
                by_leaf[peer[0]].append(port)
        for leaf, ports in by_leaf.items():
            ordered = sorted(ports, key=_port_order)
            rows += [(spine, port, leaf, len(ordered), k) for k, port in enumerate(ordered)]
    schema = {"device": pl.String, "port": pl.String, "leaf": pl.String, "n": pl.Int64, "pos": pl.Int64}
    return pl.DataFrame(rows, schema=schema, orient="row").filter(pl.col("n") > 1)


def _port_bytes(ctx: Context, devices: list[str]) -> pl.DataFrame:
    """Per-port transmitted bytes per sample (port totals; per-priority rows summed where no total)."""
    r = ctx.frames.rates(["tx_bytes"], devices=devices)
    if r.is_empty():
        return r
    totals = r.filter(pl.col("priority") < 0)
    has_total = totals.select("device", "port").unique()
    per_prio = r.join(has_total, on=["device", "port"], how="anti")
    if not per_prio.is_empty():
        summed = per_prio.group_by("ts", "device", "role", "port", "metric").agg(
            pl.lit(-1, pl.Int8).alias("priority"), pl.col("delta").sum(), pl.col("dt_s").max()
        )
        summed = summed.with_columns((pl.col("delta") / pl.col("dt_s")).alias("rate"))
        totals = pl.concat([totals, summed.select(totals.columns)])
    return totals


def _cold_samples(data: pl.DataFrame, p: PolarizationParams) -> pl.DataFrame:
    """Per (spine, n, position, sample): the position's share of the spine's bytes and whether it is cold."""
    per_pos = data.group_by("device", "n", "pos", "t").agg(pl.col("delta").sum(), pl.col("dt_s").max())
    keys = ["device", "n", "t"]
    return (
        per_pos.with_columns(
            pl.col("delta").sum().over(keys).alias("total"), pl.col("dt_s").max().over(keys).alias("dt_s")
        )
        .with_columns((pl.col("delta") / pl.col("total")).alias("share"))
        .filter(pl.col("total") * 8 / pl.col("dt_s") >= max(p.min_gbps * 1e9, 1.0))
        .with_columns((pl.col("share") <= p.cold_share / pl.col("n")).alias("cold"))
        .rename({"t": "ts"})
    )


def chance_idle(busy: Sequence[int], agreeing: int, n: int, cold: int) -> float:
    """Under independent hashing, the chance that at least `agreeing` of the active groups leave one same
    set of `cold` of their `n` members idle, whichever set that is. A group whose traffic sits on `b`
    members carries at least `b` flows; however many, hashing put them on a uniformly random b-set of
    members, which misses a given cold set with probability C(n - cold, b) / C(n, b). The count of groups
    missing it is Poisson-binomial; the cold set, picked after looking, costs a factor C(n, cold) (union
    bound over the sets it could have been)."""
    dist = [1.0]  # dist[k]: chance that k of the groups so far miss the set
    for b in busy:
        miss = math.comb(n - cold, b) / math.comb(n, b)
        dist = [a * (1 - miss) + c * miss for a, c in zip([*dist, 0.0], [0.0, *dist], strict=True)]
    return min(1.0, math.comb(n, cold) * sum(dist[agreeing:]))


def _judge(
    data: pl.DataFrame,
    spine: str,
    n: int,
    cold_at: tuple[int, ...],
    start: dt.datetime,
    end: dt.datetime,
    p: PolarizationParams,
) -> SpineEpisode | None:
    """The spine's groups over the episode: enough of them individually idle at `cold_at`, or None."""
    span = data.filter((pl.col("device") == spine) & (pl.col("n") == n) & (pl.col("t") > start) & (pl.col("t") <= end))
    ports = span.group_by("leaf", "port", "pos").agg(pl.col("delta").sum()).sort("leaf", "pos")
    groups = ports.group_by("leaf", maintain_order=True).agg(
        pl.col("port"), pl.col("pos"), pl.col("delta"), pl.col("delta").sum().alias("total")
    )
    active = groups.filter(pl.col("total") > 0)
    cold_groups, hot, leaves, detail, busy = 0, [], [], [], []
    shares = [0.0] * n
    for leaf, gports, gpos, gbytes, total in active.iter_rows():
        by_pos = dict(zip(gpos, gbytes, strict=True))
        for k in range(n):
            shares[k] += by_pos.get(k, 0.0)
        allowance = p.cold_share * len(cold_at) / n * total  # what the cold set may carry, all its members together
        # busy: the members a cold set cannot hold (each carries more than the whole set may), so a cold group's
        # set missed every one of them; a member under it may sit in a cold set, and counting it busy would make
        # that miss look rarer than it is (chance_idle understated)
        busy.append(sum(b > allowance for b in gbytes))
        cold = sum(by_pos.get(k, 0.0) for k in cold_at) <= allowance
        cold_groups += cold
        if cold:
            mean = total / n
            group_hot = [f"{spine}:{port}" for port, b in zip(gports, gbytes, strict=True) if b > mean]
            hot += group_hot
            leaves.append(leaf)
            detail.append(
                {"group": f"{spine}->{leaf}", "hot": group_hot, **imbalance(list(gbytes) + [0.0] * (n - len(gbytes)))}
            )
    chance = chance_idle(busy, cold_groups, n, len(cold_at))
    enough = cold_groups >= max(p.min_groups, p.min_group_agreement * active.height)
    if not enough:
        return None
    grand = sum(shares) or 1.0
    position_share = [s / grand for s in shares]
    evidence = {
        "spine": spine,
        "links_per_group": n,
        "cold_positions": list(cold_at),
        "position_share": position_share,
        "jain_positions": imbalance(position_share)["jain"],
        "active_groups": active.height,
        "agreeing_groups": cold_groups,
        "chance_independent": chance,
        "groups": detail,
    }
    return SpineEpisode(spine, n, cold_at, start, end, tuple(hot), tuple(leaves), evidence)


def spine_episodes(ctx: Context, p: PolarizationParams) -> tuple[list[SpineEpisode], pl.DataFrame]:
    """Every spine's sustained, group-agreed cold positions, and the per-port sample data they came from."""
    groups = spine_groups(ctx.fabric)
    if groups.is_empty():
        return [], pl.DataFrame()
    raw = _port_bytes(ctx, sorted(set(groups["device"].to_list())))
    if raw.is_empty():
        return [], pl.DataFrame()
    # a spine's ports are read together, each spine at its own cadence: its samples meet on a grid of its reads
    every = raw.group_by("device").agg(pl.col("dt_s").median().alias("every_s"))
    step = pl.format("{}ms", (pl.col("every_s") * 1000).round().cast(pl.Int64).clip(lower_bound=1))
    data = raw.join(groups, on=["device", "port"]).join(every, on="device")
    data = data.with_columns(pl.col("ts").dt.round(step).alias("t"))
    samples = _cold_samples(data, p).filter(pl.col("cold"))
    eps = episodes(
        samples,
        ["device", "n", "pos"],
        gap_s=0.0,
        gap_intervals=p.max_gap_polls + 0.5,
        aggregations=[pl.col("dt_s").median().alias("every_s")],
    )
    min_span = pl.max_horizontal(pl.lit(p.min_seconds), pl.col("every_s")) * 1e6
    eps = eps.filter((pl.col("end") - pl.col("start")).dt.total_microseconds() >= min_span).drop("every_s")
    # cold positions of one spine and group size overlapping in time are one pattern (n > 2 may idle several)
    clusters: list[tuple[str, int, set[int], dt.datetime, dt.datetime]] = []
    for spine, n, pos, start, end, _samples in eps.sort("device", "n", "start").iter_rows():
        last = clusters[-1] if clusters else None
        if last and (last[0], last[1]) == (spine, n) and start <= last[4]:
            clusters[-1] = (spine, n, last[2] | {pos}, min(last[3], start), max(last[4], end))
        else:
            clusters.append((spine, n, {pos}, start, end))
    found = [_judge(data, spine, n, tuple(sorted(cold)), start, end, p) for spine, n, cold, start, end in clusters]
    tested = dict(data.select("device", "n").unique().group_by("n").len().iter_rows())
    return _unlikely([e for e in found if e is not None], p.max_chance, tested), data


def _unlikely(eps: list[SpineEpisode], max_chance: float, tested: Mapping[int, int]) -> list[SpineEpisode]:
    """The episodes independent hashing would hardly give: alone (`chance_independent` at most `max_chance`),
    or jointly with the other spines' episodes at the same time. Each spine hashes on its own, so their chances
    combine as independent tests do (Fisher: the chance that a product of k uniform chances is at most t is
    t * sum_{i<k} (-ln t)^i / i!): a fabric whose spines each have too few groups to tell (or lost a group to a
    cable no LLDP named) still shows it across its spines. Fisher's method holds for independent tests, all of
    them: each spine counts once (its smallest chance: two episodes of one spine are its same groups looked at
    twice), and every spine with groups of that size (`tested`: size -> spines) is one of the k, a spine that showed
    nothing with chance 1. Counting one spine twice, or only the spines that showed something, calls luck."""
    keep: list[SpineEpisode] = []
    for incident in _incidents(eps):
        best: dict[str, float] = {}
        for e in incident:
            best[e.spine] = min(best.get(e.spine, 1.0), float(e.evidence["chance_independent"]))
        k = max(len(best), *(tested.get(e.n, 0) for e in incident))
        product = math.prod(best.values())
        joint = (
            min(1.0, product * sum((-math.log(product)) ** i / math.factorial(i) for i in range(k)))
            if product > 0
            else 0.0
        )
        for e in incident:
            alone = float(e.evidence["chance_independent"]) <= max_chance
            if alone or joint <= max_chance:
                keep.append(replace(e, evidence={**e.evidence, "chance_joint": joint}) if not alone else e)
    return keep


def _incidents(eps: list[SpineEpisode]) -> list[list[SpineEpisode]]:
    """Spine episodes overlapping in time, chained: one incident each."""
    out: list[list[SpineEpisode]] = []
    end: dt.datetime | None = None
    for e in sorted(eps, key=lambda e: e.start):
        if out and end is not None and e.start <= end:
            out[-1].append(e)
            end = max(end, e.end)
        else:
            out.append([e])
            end = e.end
    return out


def _reference_shares(data: pl.DataFrame, spine: str, n: int, start: dt.datetime, end: dt.datetime) -> list[float]:
    """The spine's position shares outside [start, end] (the un-polarized reference), [] without data."""
    outside = data.filter(
        (pl.col("device") == spine) & (pl.col("n") == n) & ((pl.col("t") <= start) | (pl.col("t") > end))
    )
    by_pos = outside.group_by("pos").agg(pl.col("delta").sum())
    total = float(by_pos["delta"].sum()) if by_pos.height else 0.0
    if total <= 0:
        return []
    got = dict(by_pos.iter_rows())
    return [float(got.get(k, 0.0)) / total for k in range(n)]


def _uplink_imbalance(
    ctx: Context, p: PolarizationParams, leaves: Sequence[str], start: dt.datetime, end: dt.datetime
) -> list[dict[str, Any]]:
    """First tier: each leaf's uplink group imbalance over the buckets inside the incident."""
    t = ctx.frames.totals(["tx_bytes"], p.bucket_s, roles=["switch"])
    if t.is_empty():
        return []
    t = t.filter(pl.col("device").is_in(list(leaves)) & (pl.col("bucket") >= start) & (pl.col("bucket") < end))
    out = []
    for leaf in leaves:
        ups = [port for port in ctx.fabric.ports_of(leaf) if ctx.fabric.port_kind(leaf, port) == "uplink"]
        got = dict(
            t.filter((pl.col("device") == leaf) & pl.col("port").is_in(ups))
            .group_by("port")
            .agg(pl.col("delta").sum())
            .iter_rows()
        )
        if len(ups) > 1 and sum(got.values()) > 0:
            out.append({"leaf": leaf, **imbalance([float(got.get(u, 0.0)) for u in ups])})
    return out


def flow_entropy(
    samples: pl.DataFrame, fabric: Fabric, ips: pl.DataFrame, min_flows_per_link: float
) -> list[dict[str, Any]]:
    """Per leaf uplink group (from the packets' source and destination NICs) or per captured fabric port:
    sampled packets, distinct flows (src, dst, UDP source port), UDP source ports and the Shannon entropy
    (bits) of the flows' packet shares; `low` when the flows per uplink are below `min_flows_per_link`."""
    if samples.is_empty():
        return []
    leaf_of = {
        ip: fabric.leaf_of(host, netdev) for ip, host, netdev in ips.select("ip", "host", "netdev").unique().iter_rows()
    }
    where: list[str | None] = []
    for point, src, dst in samples.select("capture_point", "src_ip", "dst_ip").iter_rows():
        device, _, port = point.replace("/", ":", 1).partition(":")
        kind = fabric.port_kind(device, port) if port else "unknown"
        if kind in ("uplink", "spine"):
            where.append(f"{device}:{port}")
            continue
        a, b = leaf_of.get(src), leaf_of.get(dst)
        where.append(f"{a} uplinks" if a and b and a != b else None)
    tagged = samples.with_columns(pl.Series("where", where, pl.String)).filter(pl.col("where").is_not_null())
    per_flow = tagged.group_by("where", "src_ip", "dst_ip", "udp_sport").agg(pl.col("packets").sum())
    stats = per_flow.group_by("where").agg(
        pl.col("packets").sum().alias("packets"),
        pl.len().alias("flows"),
        pl.col("udp_sport").n_unique().alias("udp_sports"),
        (-(pl.col("packets") / pl.col("packets").sum()) * (pl.col("packets") / pl.col("packets").sum()).log(2))
        .sum()
        .alias("entropy_bits"),
    )
    out = []
    for w, packets, flows, sports, bits in stats.sort("where").iter_rows():
        leaf = w.removesuffix(" uplinks")
        links = (
            sum(1 for port in fabric.ports_of(leaf) if fabric.port_kind(leaf, port) == "uplink")
            if w.endswith(" uplinks")
            else 1
        )
        out.append(
            {
                "where": w,
                "packets": int(packets),
                "flows": int(flows),
                "udp_sports": int(sports),
                "entropy_bits": float(bits),
                "links": links,
                "low": flows < min_flows_per_link * links,
            }
        )
    return out


def detect(ctx: Context, p: PolarizationParams) -> list[Finding]:
    eps, data = spine_episodes(ctx, p)
    findings = []
    for incident in _incidents(eps):
        start, end = ctx.clip(min(e.start for e in incident), max(e.end for e in incident))
        spines = sorted({e.spine for e in incident})
        hot = list(dict.fromkeys(r for e in incident for r in e.hot))
        leaves = list(dict.fromkeys(lf for e in incident for lf in e.leaves))
        fabric = ctx.fabric
        spine_ports = [
            f"{s}:{port}"
            for s in spines
            for port in fabric.ports_of(s)
            if (fabric.peer(s, port) or ("", ""))[0] in fabric.leaves
        ]
        jobs = fabric.jobs_at_refs(spine_ports, start, end)
        speeds = {(d, port): Bps * 8 for d, port, Bps, _ in ctx.speeds.frame(spines).iter_rows()}
        rates = (
            data.filter(
                pl.concat_str("device", pl.lit(":"), "port").is_in(hot) & (pl.col("t") > start) & (pl.col("t") <= end)
            )
            .group_by("device", "port")
            .agg((pl.col("delta").sum() / pl.col("dt_s").sum() * 8).alias("bps"))
        )
        util = max(
            (bps / speeds[(d, port)] for d, port, bps in rates.iter_rows() if speeds.get((d, port))), default=0.0
        )
        per_spine = []
        for e in incident:
            ev = dict(e.evidence)
            ev["reference_position_share"] = _reference_shares(data, e.spine, e.n, e.start, e.end)
            ev["start"], ev["end"] = e.start, e.end
            per_spine.append(ev)
        seconds = (end - start).total_seconds()
        evidence: dict[str, Any] = {
            "spines": per_spine,
            "hot_ports": hot,
            "max_hot_utilization": util,
            "first_tier": _uplink_imbalance(ctx, p, leaves, start, end),
        }
        entropy = flow_entropy(
            ctx.frames.flow_samples(start, end), fabric, ctx.frames.endpoints(), p.min_flows_per_link
        )
        if entropy:
            evidence["flow_entropy"] = entropy
        low = [x["where"] for x in entropy if x["low"]]
        groups_hit = sum(len(g["hot"]) > 0 for e in incident for g in e.evidence["groups"])
        shares = "; ".join(
            f"{e.spine} leaves member(s) {', '.join(str(k + 1) for k in e.positions)} of {e.n} idle in "
            f"{e.evidence['agreeing_groups']} of {e.evidence['active_groups']} leaf groups"
            for e in incident
        )
        findings.append(
            Finding(
                kind="polarization",
                severity="critical" if util >= p.critical_utilization else "warning",
                start=start,
                end=end,
                devices=(*spines, *(lf for lf in leaves if lf not in spines)),
                ports=tuple(hot),
                priority=-1,
                score=seconds * groups_hit,
                summary=(
                    f"ECMP hash polarization for {seconds:.0f} s: the spines repeat the leaves' hash ({shares}); "
                    f"{len(hot)} spine links carry the load while their siblings idle"
                    + (f"; sampled packets show low flow entropy at {', '.join(low)}" if low else "")
                ),
                evidence=evidence,
                job_ids=tuple(jobs),
            )
        )
    return findings


DETECTOR = Detector("polarization", "1", ("polarization",), PolarizationParams, detect)
