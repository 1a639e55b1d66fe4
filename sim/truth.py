"""What each incident kind is, physically: the definition its ground truth is labelled by, the anchor a finding
must name to match it, the telemetry that can resolve it, and the band that is neither an incident nor clean.

The truth borrows nothing from the detectors (`rocescope.analysis`): it is written from the engine's own state
(flows, queues, pauses, link states) by the definitions below, each with its physical source. Injected
incidents are labelled where they are armed (`rocescope.sim.arming`); injected fan-in takes its kind from
what its receiver's port did, after the run (`World.mark_emergent`: senders that DCQCN holds below line rate
between bursts make microbursts, however the scenario names them); events the traffic makes by itself (hash
collisions, congestion) are labelled after the run by `rocescope.sim.emergent` with the same definitions, in
every run including clean baselines.

The rules were written before any detector was measured against them; no rule names a seed.

* **anchor**: where an operator must be sent. A finding matches an incident only when it names one of the
  incident's anchor ports (`device:port`), or, for a straggler, its host.
* **don't care**: an event near a definition's edge (an imbalance of 10-29 s or just below its thresholds, a
  queue above the ECN threshold at a receiver's port 75-90% busy for incast, runs above it of 100-200 ms for
  microburst); a finding on it is neither true nor false, and the event is neither found nor missed. The
  evaluation reports the share of such events per kind.
* **unobservable**: an injected fault that by its kind's definition never happened where anything could see it
  (`World.mark_unobservable`: PFC off where nothing congested, a CNP-dropping NIC sent no CNP, a route loop that
  kept draining, optics on a link no frame crossed).
* **unobservable by cadence**: the gear under a profile reads the kind's evidence too seldom to resolve it
  (`unobservable_by_cadence`): kept apart from misses.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocescope.sim.profile import NIC_GROUP, Profile

__all__ = [
    "IMBALANCE",
    "INCAST",
    "KINDS",
    "MICROBURST",
    "KindDefinition",
    "clock_error_s",
    "metric_cadence_s",
    "unobservable_by_cadence",
]


@dataclass(frozen=True)
class KindDefinition:
    kind: str
    #: the physical event
    definition: str
    #: where the definition comes from
    source: str
    #: what a finding must name to match an incident of the kind
    anchor: str
    #: metrics (canonical names) any one of which, read often enough, can show the kind
    evidence: tuple[str, ...]
    #: evidence metric -> how often it must be read (seconds) to resolve the kind; a metric not named here: at
    #: least once inside the incident (a counter read inside it shows it)
    resolve: tuple[tuple[str, float], ...] = ()
    #: the band that is neither incident nor clean
    dont_care: str = ""


@dataclass(frozen=True)
class ImbalanceRule:
    """ECMP imbalance, as the engine's byte counts and queues show it (`rocescope.sim.emergent`), relative to the
    group: training traffic alternates compute and communication every second or faster, so a member's mean over
    a bucket says little and its busy phases say what the hashing did."""

    #: the bucket the shares are taken over: ten seconds holds many training iterations (sub-second phases), so a
    #: bucket's share is the hashing's, not one phase's
    bucket_s: float = 10.0
    #: the hot member carries at least this many fair shares (1/n) of the group's bytes: twice what even hashing
    #: gives it ...
    fair_shares: float = 2.0
    #: ... but at most this share (with two members twice the fair share is everything)
    max_share: float = 0.75
    #: the hot member's 90th percentile of per-poll load in the bucket: above ~90% of line rate an egress queue
    #: holds a standing backlog (M/D/1: mean queue rho^2 / 2(1 - rho) = 4 packets at 0.9), so in its busy phases
    #: the member is the bottleneck of the flows on it ...
    hot_p90: float = 0.9
    #: ... with its queue above the ECN threshold in the bucket (flows held back, not one flow at line rate) ...
    #: ... while the median sibling's 90th percentile is at most this: spread evenly, the members would have run
    #: without a standing queue (M/D/1 at 0.6: under one packet): the congestion comes from the spreading
    sibling_p90: float = 0.6
    #: the event must last this long to be an incident: three buckets, so that one long phase of a collective
    #: (a few seconds) cannot make one by itself
    incident_s: float = 30.0
    #: shorter events, a hot member between `dont_care_hot` and `hot_p90`, siblings between `sibling_p90` and
    #: `dont_care_sibling`, or no queue on the hot member, are don't care
    dont_care_hot: float = 0.75
    dont_care_sibling: float = 0.75


@dataclass(frozen=True)
class IncastRule:
    """Incast, as the engine's counters at a receiver's switch port show it (`rocescope.sim.emergent`)."""

    #: at least two senders: one sender cannot offer more than its own line rate to a receiver of equal speed
    min_senders: int = 2
    #: the receiver's port carried at least this share of its line rate with CE marks on it (its queue above the
    #: ECN threshold), so the offered load exceeded the line rate
    saturated: float = 0.9
    #: for at least this long: a second holds thousands of round trips, so DCQCN has settled and the excess
    #: offered load is sustained, not a burst
    min_s: float = 1.0
    #: marks at a port this busy or more, from two senders or more, short of an incast, are don't care; below it
    #: the port had room (an incast finding there is wrong)
    dont_care_load: float = 0.75


@dataclass(frozen=True)
class MicroburstRule:
    """Microbursts, as the engine's queue above the ECN threshold shows them (`rocescope.sim.emergent`)."""

    #: the queue stays above the threshold for less than this at a time: shorter than a tenth of the second any
    #: port counter averages over, so a read interval hides it (the definition the exam writes down)
    max_run_s: float = 0.1
    #: runs of up to this are near the edge: don't care
    dont_care_run_s: float = 0.2
    #: less than this above the threshold in a poll leaves too few marks to tell from noise: don't care (a
    #: millisecond at 400G is 50 MB through the port; a handful of packets marked)
    min_above_s: float = 0.001
    #: bursts at one port less than this apart are one train, one incident: a training job's collectives repeat
    #: their bursts every iteration (sub-second to a few seconds), so a pause between them is not a new cause
    train_gap_s: float = 10.0


IMBALANCE = ImbalanceRule()
INCAST = IncastRule()
MICROBURST = MicroburstRule()

KINDS: dict[str, KindDefinition] = {
    d.kind: d
    for d in (
        KindDefinition(
            "incast",
            "at least two senders whose aggregate offered load exceeds the receiver's line rate for at least 1 s: "
            "the receiver's switch port runs at line rate with its queue above the ECN threshold",
            "queueing: an egress queue grows only while arrivals exceed its service rate; DCQCN (Zhu et al. 2015) "
            "settles in milliseconds, so a second of overload is sustained demand, not a transient",
            "the receiver's port: its switch egress port or its NIC",
            (
                "tx_bytes",
                "queue_ecn_marked_packets",
                "tx_ecn_marked_packets",
                "queue_watermark_bytes",
                "cnp_sent",
                "pfc_tx_pause",
            ),
            dont_care="CE marks from two senders or more at a receiver's port 75-90% busy, or saturated for less "
            "than 1 s",
        ),
        KindDefinition(
            "microburst",
            "a queue above the ECN threshold for less than 100 ms at a time, with no span of 1 s at 90% or more of "
            "the port's line rate",
            "a burst shorter than a read interval: counters averaged over the interval hide it; only a peak "
            "(watermark), ECN marks or CNPs show it",
            "the receiver's port: its switch egress port or its NIC",
            (
                "queue_watermark_bytes",
                "queue_ecn_marked_packets",
                "tx_ecn_marked_packets",
                "cnp_sent",
                "ecn_marked_roce_packets",
            ),
            # a peak read every 10 s or less still places the burst between two compute phases; a mark or CNP
            # count tells a burst from load only per second (a 10 s count on a half-busy port is either)
            resolve=(
                ("queue_watermark_bytes", 10.0),
                ("queue_ecn_marked_packets", 1.0),
                ("tx_ecn_marked_packets", 1.0),
                ("cnp_sent", 1.0),
                ("ecn_marked_roce_packets", 1.0),
            ),
            dont_care="runs above the threshold of 100-200 ms, or less than 1 ms above it in a poll",
        ),
        KindDefinition(
            "pfc_storm",
            "a queue held paused by its peer with no dequeue (the PFC watchdog's definition: paused and not "
            "draining), continuously or in on/off episodes",
            "SONiC PFC watchdog (sonic-swss pfcwd: storm = queue paused for the detection time with no dequeue); "
            "mlx5 stall prevention (tx_pause_storm_* counters)",
            "the root's port: the port asserting the pauses",
            (
                "pfc_rx_pause",
                "pfc_tx_pause",
                "pfc_rx_pause_duration_us",
                "pfc_tx_pause_duration_us",
                "pfcwd_storm_detected",
            ),
        ),
        KindDefinition(
            "pfc_deadlock",
            "a cycle of buffer dependencies: every link of a loop paused by the next, nothing drains",
            "Hu et al., Deadlocks in Datacenter Networks (HotNets 2016): a cyclic buffer dependency under PFC",
            "a link of the cycle (either end)",
            ("pfc_rx_pause", "pfc_tx_pause", "tx_bytes"),
        ),
        KindDefinition(
            "cnp_loss",
            "CNPs sent by a notification point that its reaction point never handles (lost, ignored or dropped in a "
            "lossy queue)",
            "DCQCN (Zhu et al. 2015): a sender that handles no CNP never slows; NVIDIA mlx5 rp_cnp_handled / "
            "np_cnp_sent counters",
            "the NIC whose CNPs go unhandled, or the switch queue that drops them",
            ("cnp_sent", "cnp_handled", "queue_dropped_packets"),
        ),
        KindDefinition(
            "polarization",
            "every switch hashes with the same function and seed, so the tiers make the same choice and some spine "
            "links carry many flows while their siblings carry none",
            "ECMP hash polarization (e.g. Cisco's hash seed guidance; Zhang et al., Hashing Linearity, 2021)",
            "a hot spine link of the polarized hashing",
            ("tx_bytes",),
        ),
        KindDefinition(
            "ecmp_imbalance",
            "one member of an ECMP group runs at >= 90% of line rate over 10 s buckets while the group as a whole "
            "runs at <= 60%, for at least 30 s, with no member down",
            "queueing (M/D/1): a standing queue forms only near line rate; evenly spread, the same load would not "
            "queue",
            "the hot member",
            ("tx_bytes",),
            dont_care="10-29 s, or a hot member at 75-90%, or a group at 60-75%",
        ),
        KindDefinition(
            "link_flap",
            "a cable whose carrier goes down and up again",
            "IEEE 802.3 link status; IF-MIB ifOperStatus / linkDown",
            "the flapping cable (either end)",
            ("oper_up", "link_down_events"),
        ),
        KindDefinition(
            "degraded_optics",
            "a link that corrupts frames (FCS errors) while it stays up",
            "IEEE 802.3 FCS; a frame that fails it is counted and dropped by the receiver",
            "the cable (either end)",
            ("rx_fcs_errors",),
        ),
        KindDefinition(
            "pfc_misconfig",
            "a lossless priority whose PFC is off on an ingress port: its traffic drops instead of pausing",
            "IEEE 802.1Qbb: without PFC the ingress buffer overflows and drops",
            "the misconfigured port",
            ("pg_dropped_packets", "rx_discards"),
        ),
        KindDefinition(
            "unexplained_slowdown",
            "a rank whose compute takes longer, so every collective of its job waits for it",
            "NCCL collectives are synchronous: the slowest rank gates each one",
            "the straggler's host",
            ("coll_exec_time_us",),
        ),
    )
}


def metric_cadence_s(profile: Profile, metric: str, poll_s: float) -> float | None:
    """How often the gear under `profile` reports `metric` (seconds), None if it does not report it at all."""
    nic = profile.nic
    if metric.startswith("coll_"):  # NCCL Inspector: on every host, whatever the gear
        return poll_s
    switch_group = profile.switch.group_of(metric)
    on_nic = nic.metrics is None or metric in nic.metrics or (metric == "cnp_handled" and "cnp_received" in nic.metrics)
    cadences = []
    if switch_group is not None:
        cadences.append(profile.cadence_s(switch_group, poll_s))
    if on_nic and metric in _NIC_METRICS:
        cadences.append(profile.cadence_s(NIC_GROUP, poll_s))
    return min(cadences) if cadences else None


#: Metrics a NIC counts (the others are switch metrics).
_NIC_METRICS = frozenset(
    {"tx_bytes", "rx_bytes", "cnp_sent", "cnp_handled", "ecn_marked_roce_packets", "pfc_rx_pause", "pfc_tx_pause",
     "pfc_rx_pause_duration_us", "pfc_tx_pause_duration_us", "oper_up", "rx_fcs_errors"}
)  # fmt: skip


def unobservable_by_cadence(kind: str, profile: Profile, poll_s: float, duration_s: float) -> str | None:
    """Why the gear under `profile` cannot resolve an incident of `kind` lasting `duration_s`, or None if it can:
    none of the kind's evidence is reported at all, or none is read at least once inside the incident (or as often
    as the kind's `resolve` asks: a 60 s read-and-clear watermark cannot tell a 20 ms burst from a minute of
    load)."""
    d = KINDS.get(kind)
    if d is None:
        return None
    cadences = {m: c for m in d.evidence if (c := metric_cadence_s(profile, m, poll_s)) is not None}
    if not cadences:
        return f"{profile.name} reports none of {', '.join(d.evidence)}"
    need = dict(d.resolve)
    if any(c <= need.get(m, duration_s) for m, c in cadences.items()):
        return None
    best = min(cadences, key=cadences.__getitem__)
    return (
        f"{profile.name} reads {best} every {cadences[best]:g} s at best; {kind} needs it every "
        f"{need.get(best, duration_s):g} s"
    )


def clock_error_s(profile: Profile) -> float:
    """The clock error the profile allows between a device's stamps and fabric time: a host's skew plus the
    spread of one notification's paths."""
    return float(profile.clocks.host_skew_max) + profile.clocks.path_spread_ms / 1000.0
