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

* counters are summed over buckets of `bucket_s` (NICs are polled at their own instants and clocks: a
  bucket absorbs that skew better than single samples); a NIC's RDMA port is named after its netdev
  through the job placements (`endpoints`) or the inventory, never by a naming convention; a NIC that
  counts CNPs received but does not split handled from ignored (Broadcom `bnxt_re`: `rx_cnp_pkts`) is
  read by what it received;
* per bucket, the fabric's CNP balance: lost = sent (all NICs) - handled (all NICs). Near zero
  when the loop works;
* *loss at a NIC* (a reaction point that drops all or part of its CNPs): a NIC is a suspect in a bucket
  when it handles at most `max_handled_ratio` of what its job-mates that handle CNPs handle (median;
  job-mates = NICs placed in a job with it, the only ones its traffic can be marked next to), and the
  fabric lost at least `min_lost_share` of its shortfall (what it should have handled, at its job-mates'
  rate, minus what it did) and at least `min_lost_rate` per second, and it is evidently in the congestion:
  it counts ignored CNPs, or PFC holds it back on a lossless priority (`min_paused_fraction` of the time, or as
  many pause frames as make that time at 400G): a sender that keeps its rate where its flows are marked is held
  back by PFC instead of DCQCN (ECN marks come before pauses); or it has a queue pair to a NIC that sends CNPs
  meanwhile (a notification point sends them to the senders of what it saw marked: of two senders, the one DCQCN
  never slows takes the line rate as the other backs off, and PFC may never need to pause it), while the fabric
  handles more than `max_fabric_handled_share` of the CNPs sent (where most go unhandled, every sender behind the
  loss on the way falls short alike: that is the fabric's finding, below). Where the NIC's
  pauses are read, handling a few CNPs is no such evidence: under training traffic nearly every NIC handles some,
  at rates spread over decades by its flows' paths; where they are not read, it is all there is (it was marked,
  and handled less). Suspects are taken in order: first the NICs that ignore CNPs or that PFC holds back, the longest
  held first (DCQCN evidently failed to slow them; their flows may be marked less or more than their job-mates', so
  their shortfall says little of what they were sent), each needing some lost CNPs left to explain (`min_lost_rate`);
  then the others, the biggest shortfall first, each explained by what the ones before it left of the lost CNPs
  (`min_lost_share` of its own shortfall), so a NIC that merely sees less congestion than its job-mates is not blamed
  for a loss another NIC explains: first of the CNPs lost in its neighbourhood where its queue pairs are known (the
  NICs they join it to, transitively: a notification point sends its CNPs to its pairs' other ends, so a NIC on a rail
  whose CNPs were all handled explains no loss on another rail), then of the fabric's. A NIC shown in the congestion
  only by a queue pair to a notifying NIC is no suspect beside a held one in its neighbourhood. Only CNPs nobody could
  have handled count as lost here: what NICs with a queue pair to a peer that counts no CNPs (a storage array nobody
  monitors; peers named by `endpoints` or by the pair's other end reporting it) sent is taken out, a lower bound on
  the loss;
* *loss in the fabric* (CNPs dropped on the way: e.g. their priority mapped to a lossy queue that drops
  them at a congested switch): in a bucket where notification points sent at least `min_lost_rate` CNPs/s
  and the fabric handled at most `max_fabric_handled_share` of them, without a NIC suspect explaining it,
  the finding names the NICs that sent them (the receivers) and the switch queues that dropped packets on
  a priority that is not lossless meanwhile (where the CNPs go). It needs CNP counters from NICs other
  than the senders (else nobody could have handled them: not collected is not lost), and the CNPs' destinations:
  the receivers' peers, by sampled packets to them or their QPs' remote addresses (`qp_owners`). Where a peer is
  a NIC that reports no CNP counters (a storage array, a host nobody monitors), or no peer is known at all, the
  balance cannot say whether a CNP was lost or handled where nobody counts: the finding is *unverifiable*
  (info), never a CNP loss;
* suspect buckets closer than 1.5 buckets form an episode; episodes of at least `min_seconds` are findings, and
  shorter ones (a short incast's deaf sender: one bucket) where in each bucket the loss exceeds what the NICs' reads
  at its edges could move (`read_skew`: at each edge, the longest read interval's share of the CNPs sent and handled
  in the busier of the two buckets the edge joins), or, for a NIC PFC holds back or that ignores CNPs, where the
  window holds a longest read before and after the episode, so that every read straddling its edges has landed, and
  the episode holds most of the CNPs lost in its run of lossy buckets (`min_run_share`: not one bucket at the edge of
  a longer loss that another NIC explains); every episode's loss, summed, must stand out of the balance's own jitter
  (`jitter_factor` times the median size of the window's other bucket balances: steady rates read at other instants
  and stamped by other clocks leave every bucket a few counts off, either way) and still be missing at the window's
  end and from the window's whole balance (`min_kept_share`: a CNP counted late or early, by a read or a clock off the
  others', is counted in another bucket and the balance swings back; a lost one is counted in none):
  on the NIC (RDMA port and netdev) with the jobs placed on it, or on the receivers and the dropping queues.

Deployments without DCQCN send no CNPs and give no finding. Only what the counters show is reported:
while nothing is congested nobody sends CNPs and a NIC that drops them looks healthy, so a finding starts
with the first congestion that exposes the loss.
"""

from __future__ import annotations

import datetime as dt

import polars as pl

from rocescope.analysis.cnp_balance import balance as balance_of
from rocescope.analysis.cnp_balance import jitter, loss_runs, verifiable
from rocescope.analysis.cnp_fabric import fabric_findings
from rocescope.analysis.cnp_peers import (
    HANDLED,
    RECEIVED,
    SENT,
    neighbourhood_losses,
    qp_edges,
)
from rocescope.analysis.detectors.base import Context, Detector, Params, lossless_threshold, threshold
from rocescope.analysis.episodes import episodes
from rocescope.analysis.fabric import with_ifaces
from rocescope.analysis.findings import Finding

IGNORED = "cnp_ignored"
PAUSED_US, PAUSE_FRAMES = "pfc_rx_pause_duration_us", "pfc_rx_pause"


class CnpLossParams(Params):
    bucket_s: float = threshold(
        10.0,
        "Seconds of counters summed per balance check.",
        "derivation: NICs are read at their own instants and clocks; a 10 s bucket holds ten 1 s NIC reads, so a read "
        "landing in the neighbouring bucket shifts the balance by about a tenth, not all of it.",
        gt=0,
    )
    min_seconds: float = threshold(
        20.0,
        "A loss must last at least this long, unless it exceeds the read skew in each of its buckets or the window "
        "holds every read that straddles its edges.",
        "derivation: two consecutive 10 s buckets (twice bucket_s), so one bucket's read skew or one late read "
        "cannot make a finding on its own; a loss larger than a read at each edge of the bucket could move is none, "
        "and one that still stands once every read straddling its end has landed is no late read either.",
        ge=0,
    )
    max_handled_ratio: float = threshold(
        0.5,
        "Suspect handles at most this share of its job-mates' median.",
        "derivation: job-mates' traffic can be marked at the same queues, but their shares of it differ; half the "
        "median leaves a factor of two for that spread, and the fabric balance must still explain the shortfall.",
        ge=0,
        lt=1,
    )
    min_peer_handled_rate: float = threshold(
        10.0,
        "CNPs/s a job-mate must handle to count as evidence the loop is active.",
        "derivation: the same floor as the fan-in detectors' min_cnp_rate (10/s, one CNP per 100 ms): a job-mate "
        "notified less is barely in the congestion, so it shows no active loop to compare against.",
        gt=0,
    )
    min_lost_share: float = threshold(
        0.5,
        "Lost CNPs must cover this share of a suspect's shortfall (one that neither ignores CNPs nor is held by PFC).",
        "derivation: a NIC that only sees less congestion than its job-mates leaves no CNPs unhandled; the fabric's "
        "lost CNPs must account for half of its shortfall, leaving room for the skew of bucketed reads.",
        gt=0,
        le=1,
    )
    min_lost_rate: float = threshold(
        5.0,
        "Fabric-wide lost CNPs per second, at least.",
        "derivation: 5/s (50 per 10 s bucket), half of min_peer_handled_rate's 10/s, so a balance a few CNPs off "
        "(reads landing in the neighbouring bucket) is not taken for loss.",
        ge=0,
    )
    max_fabric_handled_share: float = threshold(
        0.5,
        "Loss in the fabric: the NICs handled at most this share of the CNPs sent.",
        "derivation: a working loop handles nearly every CNP sent; most of them never handled is loss on the way, "
        "and half leaves room for read skew and for a loss on some paths only.",
        ge=0,
        lt=1,
    )
    min_paused_fraction: float = threshold(
        0.001,
        "Share of time a suspect PFC-paused counts as held back (lossless priority).",
        "derivation: ECN marks come before pauses, so any sustained pause shows the NIC crossed a marking queue; 1 ms "
        "per s is three full 65535-quanta XOFFs at 100G (802.1Qbb, 512 bit times each), above counter noise.",
        ge=0,
        le=1,
    )
    min_pause_frames_rate: float = threshold(
        12.0,
        "Pause frames/s a suspect receives that count as held back, where no pause duration is counted.",
        "derivation: min_paused_fraction in frames: one XOFF of 65535 quanta (512 bit times each, 802.1Qbb) holds a "
        "400G port 84 us, so 1 ms per s is about 12 frames/s at 400G (and more time at lower speeds: the bar errs "
        "toward missing). A NIC DCQCN slows barely sees a few frames a second.",
        ge=0,
    )
    lossless_priorities: tuple[int, ...] = lossless_threshold(
        "Priorities that run PFC (RoCE traffic).",
    )
    jitter_factor: float = threshold(
        4.0,
        "A loss at a NIC must exceed this many times the balance's own jitter (median bucket imbalance).",
        "derivation: summed over an episode, a steady balance's read-timing errors cancel at its inner edges and leave "
        "about one bucket's; the median of a symmetric error's size is 0.67 sigma, so 4 medians is 2.7 sigma (a 0.4% "
        "one-sided chance that jitter alone makes the loss).",
        ge=0,
    )
    min_kept_share: float = threshold(
        0.5,
        "Share of a NIC's loss the balance must still lack at the window's end and over the whole window.",
        "derivation: counters are cumulative, so a CNP a NIC counted late or early (its read or its clock off the "
        "others' at a step of the rate, or stepped) is counted in another bucket and the balance swings back, while "
        "a lost one is counted in none; half leaves room for the jitter of the other buckets.",
        ge=0,
        le=1,
    )
    min_run_share: float = threshold(
        0.5,
        "A loss shorter than min_seconds must hold more than this share of the CNPs lost in its run of lossy buckets.",
        "derivation: more than half of a run's loss can be in one episode only; a short incast's deaf sender holds "
        "all of it, while one bucket at the edge of a longer loss (where the NIC that explains it was not yet below "
        "its job-mates) holds a small part.",
        ge=0,
        lt=1,
    )
    critical_seconds: float = threshold(
        60.0,
        "Findings at least this long are critical.",
        "derivation: sets severity only, never whether a loss is found: a minute (six 10 s buckets, three times "
        "min_seconds) of CNPs going unhandled is a lasting fault of the loop, not a passing one.",
        gt=0,
    )


def _nic_buckets(ctx: Context, p: CnpLossParams) -> pl.DataFrame:
    """Per bucket and NIC (host, netdev, rdma port): sent, handled, ignored CNPs and the paused share."""
    frames = ctx.frames
    t = frames.totals([SENT, HANDLED, RECEIVED, IGNORED], p.bucket_s, roles=["nic"])
    if t.is_empty():
        return pl.DataFrame()
    # NICs that count CNPs received but not handled (bnxt_re: rx_cnp_pkts) stand in with what they received
    split = sorted(frames.reporting(HANDLED))
    t = t.filter((pl.col("metric") != RECEIVED) | ~pl.col("device").is_in(split)).with_columns(
        pl.when(pl.col("metric") == RECEIVED).then(pl.lit(HANDLED)).otherwise(pl.col("metric")).alias("metric")
    )
    counts = (
        with_ifaces(t, ctx.fabric, out="netdev")
        .group_by("bucket", "device", "netdev", "port")
        .agg(
            *(pl.col("delta").filter(pl.col("metric") == m).sum().alias(m) for m in (SENT, HANDLED, IGNORED)),
            pl.col("seconds").max().alias("seconds"),
            pl.col("longest_read_s").max().alias("longest_read_s"),
        )
    )
    prios = list(p.lossless_priorities)
    paused = frames.totals([PAUSED_US], p.bucket_s, roles=["nic"], priorities=prios)
    paused = (
        with_ifaces(paused, ctx.fabric, out="netdev")
        .group_by("bucket", "device", "netdev")
        .agg((pl.col("delta") / 1e6 / pl.col("seconds")).max().alias("paused_fraction"))
    )
    frames_in = frames.totals([PAUSE_FRAMES], p.bucket_s, roles=["nic"], priorities=prios)
    frames_in = (
        with_ifaces(frames_in, ctx.fabric, out="netdev")
        .group_by("bucket", "device", "netdev")
        .agg((pl.col("delta") / pl.col("seconds")).max().alias("pause_frames_per_s"))
    )
    joined = counts.join(paused, on=["bucket", "device", "netdev"], how="left").join(
        frames_in, on=["bucket", "device", "netdev"], how="left"
    )
    # whether the NIC's pauses are read at all: where they are not, no pause is no evidence either way; and whether
    # their time is, which then says how long PFC held it (pause frames stand in only where it is not: a frame may
    # be cancelled by the next XON within microseconds)
    timed = pl.col("paused_fraction").is_not_null().any()
    counted = timed | pl.col("pause_frames_per_s").is_not_null().any()
    return joined.with_columns(
        counted.over("device", "netdev").alias("pauses_counted"),
        timed.over("device", "netdev").alias("pauses_timed"),
        pl.col("paused_fraction").fill_null(0.0),
        pl.col("pause_frames_per_s").fill_null(0.0),
    )


def _suspects(ctx: Context, p: CnpLossParams, nic: pl.DataFrame, balance: pl.DataFrame) -> pl.DataFrame:
    """Bucket rows of NICs that handle much less than their job-mates while the fabric loses what they miss
    (see the module docstring)."""
    lossy = balance.filter(pl.col("fabric_lost") / pl.col("bucket_seconds") >= p.min_lost_rate)
    if lossy.is_empty():
        return pl.DataFrame()
    nic = nic.join(lossy, on="bucket").with_columns(
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
    # in the congestion without slowing: it ignores CNPs, or PFC holds it back instead of DCQCN; or it has a queue
    # pair to a NIC that sends CNPs meanwhile (a notification point sends them to the senders of the packets it
    # saw marked: where the others backed off, the one that did not may never need a pause), while the fabric
    # handles most CNPs (where most go unhandled the loss is on the way, every sender behind it short alike: the
    # fabric's finding); where its pauses are not read, handling some CNPs (fewer than it is sent) is all that
    # shows it was marked
    held = (pl.col(IGNORED) > 0) | _paused(p)
    marked = held | (~pl.col("pauses_counted") & (pl.col(HANDLED) > 0))
    congested = marked | (
        pl.col("notified") & (pl.col("fabric_handled") > p.max_fabric_handled_share * pl.col("fabric_sent"))
    )
    edges = qp_edges(ctx.frames, nic)
    nic = nic.join(_notified(p, nic, edges), on=["bucket", "device", "netdev"], how="left").with_columns(
        pl.col("notified").fill_null(False)
    )
    rows = nic.join(peers, on=["bucket", "device", "netdev"]).filter(
        pl.col("handled_rate") <= p.max_handled_ratio * pl.col("peer_handled_rate"), congested
    )
    rows = rows.with_columns(
        ((pl.col("peer_handled_rate") - pl.col("handled_rate")) * pl.col("seconds")).alias("shortfall"),
        held.alias("held"),
        marked.alias("marked"),
    )
    # DCQCN failed to slow the NIC that ignores CNPs, or that PFC holds back longest: it is taken first, whatever its
    # shortfall (its flows may be marked less or more than its job-mates', so their rate says little of what it was
    # sent); then the others, the biggest shortfall first (ties: by name)
    order = ["held", IGNORED, "paused_fraction", "pause_frames_per_s", "shortfall"]
    rows = rows.sort(["bucket", *order, "device", "netdev"], descending=[False, *[True] * len(order), False, False])
    rows = rows.join(neighbourhood_losses(nic, edges), on=["bucket", "device", "netdev"], how="left")
    # a NIC shown in the congestion only by a queue pair to a notifying NIC is no suspect beside one PFC holds back
    # or that ignores CNPs: that one is the evident reaction point, and all of its neighbourhood's loss may be its own
    rows = rows.filter(pl.col("marked") | ~pl.col("held").any().over("bucket", "hood"))
    # the lost CNPs must explain the suspects in that order, each by what the ones before it left of them, first of
    # the CNPs lost in its own neighbourhood (where its queue pairs are known), then of the fabric's: half its
    # shortfall (`min_lost_share`: a NIC that merely sees less congestion than its job-mates explains none), or for
    # a held NIC any loss at all (`min_lost_rate`: the balance's jitter and the loss's persistence are judged per
    # episode)
    lost = pl.min_horizontal("fabric_lost", pl.col("hood_lost").fill_null(pl.col("fabric_lost")))
    before = pl.col("shortfall").cum_sum() - pl.col("shortfall")
    bar = (
        pl.when(pl.col("held"))
        .then(p.min_lost_rate * pl.col("seconds"))
        .otherwise(p.min_lost_share * pl.col("shortfall"))
    )
    rows = rows.filter(lost - before.over("bucket", "hood") >= bar)
    return rows.filter(pl.col("fabric_lost") - before.over("bucket") >= bar)


def _paused(p: CnpLossParams) -> pl.Expr:
    """PFC held the NIC back on a lossless priority: by its paused time where that is counted, else by its pause
    frames (`min_pause_frames_rate`)."""
    return (
        pl.when(pl.col("pauses_timed"))
        .then(pl.col("paused_fraction") >= p.min_paused_fraction)
        .otherwise(pl.col("pause_frames_per_s") >= p.min_pause_frames_rate)
    )


def _notified(p: CnpLossParams, nic: pl.DataFrame, edges: pl.DataFrame) -> pl.DataFrame:
    """(bucket, device, netdev, notified) of the NICs with a queue pair to a NIC that sent at least
    `min_peer_handled_rate` CNPs/s in the bucket: the CNPs of a notification point go to the senders of what it saw
    marked, its queue pairs' other ends."""
    notifying = nic.filter(pl.col(SENT) / pl.col("seconds") >= p.min_peer_handled_rate).select(
        "bucket", pl.col("device").alias("peer"), pl.col("netdev").alias("peer_netdev")
    )
    hit = edges.join(notifying, on=["peer", "peer_netdev"])
    return hit.select("bucket", "device", "netdev").unique().with_columns(pl.lit(True).alias("notified"))


def _nic_findings(ctx: Context, p: CnpLossParams, bad: pl.DataFrame, balance: pl.DataFrame) -> list[Finding]:
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
            pl.col("pause_frames_per_s").mean().alias("pause_frames_per_s"),
            pl.col("shared_jobs")
            .list.explode(keep_nulls=False, empty_as_null=False)
            .unique()
            .sort()
            .alias("shared_jobs"),
            (pl.col("fabric_lost") > pl.col("read_skew")).all().alias("beyond_skew"),
            pl.col("bucket_longest_read_s").max().alias("longest_read_s"),
            pl.col("held").all().alias("held"),
            _paused(p).all().alias("paused"),
        ],
    )
    runs = loss_runs(balance, p.bucket_s, p.min_lost_rate)
    at_edges = balance["bucket"].is_in([balance["bucket"].min(), balance["bucket"].max()])
    findings = []
    for row in eps.iter_rows(named=True):
        start, end = ctx.clip(row["start"], row["end"])
        seconds = (end - start).total_seconds()
        # the loss must stand out of the balance's own jitter (641 CNPs "lost" in 20 s of a million sent, where
        # every bucket is a few hundred off either way, is the reads' timing, not a deaf NIC), and still be missing
        # at the window's end, and from the window's whole balance: a CNP a NIC counted late or early (a read or a
        # clock off the others', or stepped) is counted in another bucket, a lost one in none; the window's first
        # and last buckets aside, where reads straddle its edges; and the bucket before the loss where it shows a
        # surplus (one counted early)
        lost, bucket = balance["fabric_lost"], balance["bucket"]
        early = min(0.0, float(lost.filter(bucket == row["start"] - dt.timedelta(seconds=p.bucket_s)).sum()))
        later = float(lost.filter(bucket >= row["start"]).sum()) + early
        whole = float(lost.filter(((bucket >= row["start"]) & (bucket < row["end"])) | ~at_edges).sum())
        kept = min(later, whole)
        typical = jitter(balance, row["start"], row["end"], p.bucket_s)
        if row["fabric_lost"] <= p.jitter_factor * typical or kept < p.min_kept_share * row["fabric_lost"]:
            continue
        # shorter than min_seconds only where no read skew can make the loss (a short incast's deaf sender), or where
        # the reads that straddle its start and its end have all landed inside the window, so that what is still
        # missing is no read's timing, and the NIC itself shows DCQCN failed (PFC held it back or it ignored CNPs: a
        # queue pair alone names any of an incast's senders for one bucket's loss)
        margins = ((row["start"] - ctx.window.start).total_seconds(), (ctx.window.end - row["end"]).total_seconds())
        settled = row["held"] and min(margins) >= row["longest_read_s"]
        # ... and where it holds most of the CNPs lost in its run of lossy buckets: one bucket at the edge of a
        # longer loss is that loss's edge, where the NIC that explains it was not yet (or no longer) below its
        # job-mates and another one took its place
        run = runs.filter(pl.col("run_start") <= row["start"], pl.col("run_end") >= row["end"])["run_lost"].sum()
        settled = settled and row["fabric_lost"] > p.min_run_share * float(run)
        if seconds < (p.bucket_s if row["beyond_skew"] or settled else max(p.min_seconds, p.bucket_s)) - 1e-6:
            continue
        host, netdev, rdma_port = row["device"], row["netdev"], row["port"]
        expected = row["peer_handled_rate"] * seconds
        share = row["handled"] / expected if expected > 0 else 0.0
        jobs = ctx.fabric.jobs_on_nic(host, netdev, start, end)
        findings.append(
            Finding(
                kind="cnp_loss",
                severity="critical" if share < 0.05 and seconds >= p.critical_seconds else "warning",
                start=start,
                end=end,
                devices=(host,),
                ports=(f"{host}:{rdma_port}", f"{host}:{netdev}"),
                priority=p.lossless_priorities[0] if p.lossless_priorities else -1,
                score=row["fabric_lost"],
                summary=(
                    f"CNP loss: {host} {rdma_port} handled {row['handled']:.0f} CNPs in {seconds:.0f} s ({share:.0%} "
                    f"of what its {row['handling_peers']} job-mate NIC(s) handled, ~{row['peer_handled_rate']:.0f}/s "
                    f"each) while {row['fabric_lost']:.0f} of {row['fabric_sent']:.0f} CNPs sent in the fabric were "
                    "never handled" + ("; PFC held it back instead" if row["paused"] else "")
                ),
                evidence={
                    "where": "nic",
                    "cnp_handled": row["handled"],
                    "cnp_ignored": row["ignored"],
                    "handled_share": share,
                    "expected_handled": expected,
                    "peer_handled_rate": row["peer_handled_rate"],
                    "handling_peers": row["handling_peers"],
                    "fabric_cnp_sent": row["fabric_sent"],
                    "fabric_cnp_lost": row["fabric_lost"],
                    "paused_fraction": row["paused_fraction"],
                    "pause_frames_per_s": row["pause_frames_per_s"],
                    "shared_jobs": row["shared_jobs"],
                    "buckets": row["samples"],
                },
                job_ids=tuple(sorted(jobs)),
            )
        )
    return findings


def detect(ctx: Context, p: CnpLossParams) -> list[Finding]:
    nic = _nic_buckets(ctx, p)
    if nic.is_empty():
        return []
    balance = verifiable(ctx.frames, nic, balance_of(nic, p.bucket_s))
    bad = _suspects(ctx, p, nic, balance)
    findings = _nic_findings(ctx, p, bad, balance) if not bad.is_empty() else []
    return findings + fabric_findings(ctx, p, nic, balance, bad)


DETECTOR = Detector("cnp_loss", "3", ("cnp_loss",), CnpLossParams, detect)
