"""PFC storm: a port held paused on a priority, nearly the whole time, for longer than a watchdog would
allow, by a root that asserts pause without cause; and the pause tree it spreads. One storm, one finding.

Method (after SONiC's PFC watchdog, which declares a storm when a queue is paused and transmits
nothing for `detection_time`, 200 ms by default, and Microsoft's "RDMA over Commodity Ethernet at
Scale", SIGCOMM 2016, on NIC pause storms):

* a *stalled sample* of port P on a priority is one where P was held paused and transmitted below
  `stall_fraction` of its speed over the sample's interval. Held paused means, from the best evidence the
  device gives: its pause duration counter (`pfc_rx_pause_duration_us`) covers `min_paused_fraction` of
  the interval; or, where the ASIC has no pause timer but SONiC's PFC watchdog estimates the time from its polls
  (`EST_*`, an upper bound that needs no speed; findings resting on it are never critical), that estimate does;
  or, where the device reports no pause time at all (Broadcom-based switches), its pause frames cover
  `min_frames_paused_fraction` of it (each frame buys 65535 quanta of 512 bit times at the port's speed and a
  paused port's frames come `pause_refresh_fraction` of that apart; without a speed, at the fastest speed, a
  lower bound), counted per priority or, where the gear counts PFC per interface only
  (IEEE8021-PFC-MIB over SNMP: Arista), per port on the first lossless priority (pause frames exist only for
  priorities PFC is enabled on); or the NIC at the cable's other end says it sent pause that share of its own
  interval (`pfc_tx_pause_duration_us`, read every second where the switch may be read every 30 s); or its PFC
  watchdog declared a storm on the queue or dropped the queue's packets (SONiC `PFC_WD_*`). The transmit rate is
  the port's mean over the sample's own interval, whatever the clocks and cadences (`align.mean_over`),
  against its speed (reported, or inferred: `speeds.py`); the port asserting the pause is P's LLDP peer A;
* stalled samples of one (P, priority) form an episode, bridging gaps of `gap_intervals` samples (a
  flickering threshold is one episode); kept when it lasts `min_seconds` and one sampling interval;
* the asserter A of an episode is a storm *root* when it keeps asserting pause while its own receive side
  is not congested: a NIC receiving below `busy_fraction` of its speed, or a switch none of whose other
  ports is stalled (then it is the spread of another storm, or a loop: see `pfc_deadlock`) or busy
  (`busy_fraction` of speed a tenth of the time or more: then its pauses are back-pressure from congestion,
  an incast's or a hot ECMP member's, not a storm). A switch port held paused by a neighbour no LLDP or
  traffic names has no root to report (a loop or a spread nobody can follow);
* a root's episodes on one priority closer than `merge_gap_s` are one storm, one finding, with the spread
  joined by following asserter -> paused device. When a PFC watchdog acted, the finding says so
  (mitigated: storm detections, restorations and the packets it dropped); so it does when the root NIC's own
  stall prevention fired (mlx5 `tx_pause_storm_warning_events`: the device sent pause without a break for its
  warning watermark, 85% of the stall timeout and at least 80 ms; `tx_pause_storm_error_events`: for the whole
  timeout, 8 s by default, after which it stops sending pause and its lossless traffic may drop). The kernel's
  mlx5 documentation says these never count under normal overload, so a storm whose root NIC counted an error
  event is critical however short.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

import polars as pl

from rocescope.analysis.align import as_duration
from rocescope.analysis.detectors.base import Context, Detector, Params, lossless_threshold, threshold
from rocescope.analysis.fabric import with_ifaces
from rocescope.analysis.findings import Finding
from rocescope.analysis.pfc_edges import (
    KEYS,
    NIC_STALL_ERROR,
    NIC_STALL_WARNING,
    WD_DETECTED,
    WD_DROPS,
    WD_RESTORED,
    Edge,
    backpressured,
    stalled_edges,
)


class StormParams(Params):
    min_paused_fraction: float = threshold(
        0.8,
        "Share of an interval a port must be paused.",
        "derivation: a storm holds the queue paused nearly all the time (SONiC's watchdog: paused, sending nothing); "
        "a busy port paused in bursts by congestion but still flowing stays under 80%",
        gt=0,
        le=1,
    )
    min_pause_frames_per_s: float = threshold(
        100.0,
        "Pause frames/s worth a look, where no pause duration is reported.",
        "derivation: a pre-filter that drops nothing the share test could keep at 10 Gb/s or faster: half of 65535 "
        "quanta is 1.7 ms there, so 100 frames/s cover 17% of a second, under min_frames_paused_fraction",
        gt=0,
    )
    pause_refresh_fraction: float = threshold(
        0.5,
        "A paused port's pause frames come this fraction of a full quanta apart.",
        "derivation: an IEEE 802.1Qbb frame pauses up to 65535 quanta of 512 bit times and a held port is refreshed "
        "before that runs out; switches refresh at about half (the code's reading), capped at a share of 1",
        gt=0,
        le=1,
    )
    min_frames_paused_fraction: float = threshold(
        0.5,
        "Share of an interval the pause frames must cover (vendors refresh apart).",
        "derivation: frames give a paused share only through an assumed refresh interval, so the bar sits below "
        "min_paused_fraction: a port held paused by a sender that refreshes less often still passes",
        gt=0,
        le=1,
    )
    stall_fraction: float = threshold(
        0.05,
        "Transmit below this share of link speed = stalled.",
        "derivation: a port held paused sends (almost) nothing (SONiC's watchdog: no transmit); the port counter "
        "also holds other priorities and control frames, so 5% of speed, far below any flowing port",
        ge=0,
        le=1,
    )
    busy_fraction: float = threshold(
        0.5,
        "A port at this share of its speed is busy (congestion, not a stuck root).",
        "derivation: an asserter whose ports run at half their speed (90th percentile: training traffic is bursty) "
        "pauses from congestion; errs toward calling back-pressure congestion, not a storm",
        gt=0,
        le=1,
    )
    min_seconds: float = threshold(
        0.2,
        "Watchdog detection time.",
        "vendor: SONiC's PFC watchdog declares a storm when a queue is paused and transmits nothing for "
        "detection_time, 200 ms by default (bounded below by half a sampling interval in the code)",
        ge=0,
    )
    gap_intervals: float = threshold(
        3.0,
        "Stalled samples this many intervals apart are one episode.",
        "derivation: a sample flickering across a threshold or a missed read or two does not split one storm; "
        "counted in the series' own intervals, so it holds at any poll cadence",
        ge=1,
    )
    merge_gap_s: float = threshold(
        30.0,
        "Episodes of one root closer than this are one storm.",
        "derivation: one storm, one finding: a root asserting pause again within half a minute (after a "
        "watchdog's restore, a gap in the reads) was not repaired meanwhile; errs toward one finding, not several",
        ge=0,
    )
    backpressure_fraction: float = threshold(
        0.5,
        "A switch port paused this share of a read overlapping an episode is back-pressured: its pauses have cause.",
        "derivation: a port paused half the time drains at most half its line rate, the congestion bar of "
        "busy_fraction; a storm's root asserts pause without cause (its own ports flow), while a switch behind a "
        "storm's spread is itself paused. A slow read (10-30 s) that straddles a storm's edge dilutes a port held "
        "paused throughout under min_paused_fraction, so the spread's switch looked like a second root",
        gt=0,
        le=1,
    )
    critical_seconds: float = threshold(
        10.0,
        "Storms at least this long are critical.",
        "derivation: severity only: a storm past 10 s outlasts mlx5's default 8 s stall timeout (module docstring), "
        "past which even the NIC stops its pause; shorter ones warn unless they spread",
        gt=0,
    )
    lossless_priorities: tuple[int, ...] = lossless_threshold(
        "Priorities that run PFC (RoCE's lossless class): pause frames a port counts only per "
        "interface (IEEE8021-PFC-MIB) paused one of them, reported on the first (pause frames exist only for "
        "priorities PFC is enabled on, IEEE 802.1Qbb).",
    )


def _overlapping(rates: pl.DataFrame, start: dt.datetime, end: dt.datetime) -> pl.DataFrame:
    """Rate samples whose interval (ts - dt_s, ts] overlaps [start, end]: each series by its own cadence (a
    watchdog's 10 s queue counters reach further past a storm's end than 1 s port counters)."""
    return rates.filter(pl.col("ts") > start, pl.col("ts") - as_duration(pl.col("dt_s")) <= end)


def _busy_elsewhere(ctx: Context, p: StormParams, edge: Edge) -> bool:
    """The asserter's pauses are explained by congestion: a NIC receiving at `busy_fraction` of its speed, or a
    switch with another port transmitting that busily while it asserted the pause."""
    device, port = edge.asserter
    fabric, frames = ctx.fabric, ctx.frames
    if device == "?":
        return False
    metric = "rx_bytes" if device in fabric.hosts else "tx_bytes"
    rates = frames.rates([metric], devices=[device])
    rates = _overlapping(rates, edge.start, edge.end)
    rates = with_ifaces(rates, fabric)
    rates = rates.filter(pl.col("iface") == port) if device in fabric.hosts else rates.filter(pl.col("iface") != port)
    if rates.is_empty():
        return False
    # a port busy a tenth of the time is congestion enough: traffic in training comes in bursts
    high = rates.group_by("iface").agg(pl.col("rate").quantile(0.9).alias("Bps"))
    speeds = ctx.speeds.frame([device]).select(pl.col("port").alias("iface"), "speed_Bps")
    busy = high.join(speeds, on="iface").filter(pl.col("Bps") >= p.busy_fraction * pl.col("speed_Bps"))
    return not busy.is_empty()


def _tree(roots: Sequence[Edge], edges: Sequence[Edge]) -> list[Edge]:
    """The roots' edges and those reached from them by asserter -> paused device, overlapping in time."""
    tree, frontier, seen = list(roots), list(roots), {id(e) for e in roots}
    while frontier:
        parent = frontier.pop()
        for e in edges:
            same = e.asserter[0] == parent.paused[0] and e.priority == parent.priority
            if id(e) not in seen and same and e.overlaps(parent):
                seen.add(id(e))
                tree.append(e)
                frontier.append(e)
    return tree


def _storms(edges: list[Edge], merge_gap_s: float, by: Callable[[Edge], object]) -> list[list[Edge]]:
    """Episodes grouped per `by(edge)` and priority (the asserting device for roots, the paused port where the
    root is unknown), those closer than `merge_gap_s` together."""
    groups: list[list[Edge]] = []
    for e in sorted(edges, key=lambda e: (str(by(e)), e.priority, e.start)):
        last = groups[-1] if groups else None
        if (
            last is not None
            and by(last[0]) == by(e)
            and last[0].priority == e.priority
            and any(e.overlaps(o, merge_gap_s) for o in last)
        ):
            last.append(e)
        else:
            groups.append([e])
    return groups


def _ref(port: tuple[str, str]) -> str:
    return f"{port[0]}:{port[1]}"


def _watchdog(ctx: Context, storm: list[Edge], start: dt.datetime, end: dt.datetime) -> dict[str, float] | None:
    """What a PFC watchdog did on the storm's paused ports (None when none acted)."""
    if not any(e.watchdog for e in storm):
        return None
    devices = sorted({e.paused[0] for e in storm})
    rates = ctx.frames.rates([WD_DETECTED, WD_RESTORED, *WD_DROPS], devices=devices)
    ports = {(e.paused[0], e.paused[1], e.priority) for e in storm}
    rows = _overlapping(rates, start, end)
    schema = {"device": pl.String, "port": pl.String, "priority": pl.Int8}
    keep = pl.DataFrame(sorted(ports), schema=schema, orient="row")
    rows = with_ifaces(rows, ctx.fabric).drop("port").rename({"iface": "port"}).join(keep, on=KEYS, how="semi")
    total = rows.group_by("metric").agg(pl.col("delta").sum())
    got = dict(total.iter_rows())
    return {
        "storms_detected": float(got.get(WD_DETECTED, 0.0)),
        "storms_restored": float(got.get(WD_RESTORED, 0.0)),
        "dropped_packets": float(sum(got.get(m, 0.0) for m in WD_DROPS)),
    }


def _nic_stall(ctx: Context, root: str, start: dt.datetime, end: dt.datetime) -> dict[str, float] | None:
    """What the root NIC's own stall prevention counted during the storm (None: nothing, or no such counters).
    Its reads come every second or so, stamped by the host's clock: a read up to two intervals after the storm's
    last stalled sample is still the storm's (the error event is what ends it)."""
    if root not in ctx.fabric.hosts:
        return None
    rates = ctx.frames.rates([NIC_STALL_WARNING, NIC_STALL_ERROR], devices=[root])
    rows = rates.filter(
        pl.col("ts") > start, pl.col("ts") - as_duration(2 * pl.col("dt_s")) <= end, pl.col("delta") > 0
    )
    if rows.is_empty():
        return None
    got = dict(rows.group_by("metric").agg(pl.col("delta").sum()).iter_rows())
    return {
        "warning_events": float(got.get(NIC_STALL_WARNING, 0.0)),
        "error_events": float(got.get(NIC_STALL_ERROR, 0.0)),
    }


def detect(ctx: Context, p: StormParams) -> list[Finding]:
    edges = stalled_edges(ctx, p)
    # the links a stall test misses: a switch paused part of a slow read is behind a spread, not a root
    links = [*edges, *backpressured(ctx, p, edges)] if edges else edges
    roots = [
        e
        for e in edges
        if not any(o.paused[0] == e.asserter[0] and o.priority == e.priority and o.overlaps(e) for o in links)
        and not _busy_elsewhere(ctx, p, e)
        and e.asserter[0] != "?"
    ]
    # a port held paused by a neighbour nobody monitors or names (a storage array, a NIC without telemetry): a
    # storm whose root is unknown, unless a known storm on the priority overlaps it (then it is its spread) or the
    # port faces the fabric's core (a leaf's uplink, a spine's port: the pause there is a spread or a loop among
    # switches no LLDP names, which the deadlock detector follows where it can)
    unknown = [
        e
        for e in edges
        if e.asserter[0] == "?"
        and ctx.fabric.port_kind(*e.paused) not in ("uplink", "spine")
        and not any(r.priority == e.priority and r.overlaps(e) for r in roots)
    ]
    findings = [_finding(ctx, p, storm, links) for storm in _storms(roots, p.merge_gap_s, lambda e: e.asserter[0])]
    findings += [_root_unknown(ctx, p, storm) for storm in _storms(unknown, p.merge_gap_s, lambda e: e.paused)]
    return findings


def _priority(storm: list[Edge]) -> str:
    """The storm's priority as a finding says it: assumed where the gear counts pause frames per interface."""
    if all(e.evidence == "port_pause_frames" for e in storm):
        return f"priority {storm[0].priority} (assumed: the port counts pause frames per interface only)"
    return f"priority {storm[0].priority}"


def _root_unknown(ctx: Context, p: StormParams, storm: list[Edge]) -> Finding:
    start, end = ctx.clip(min(e.start for e in storm), max(e.end for e in storm))
    seconds = (end - start).total_seconds()
    paused = _ref(storm[0].paused)
    fractions = [e.paused_fraction for e in storm if e.paused_fraction is not None]
    frac = sum(fractions) / len(fractions) if fractions else None
    held = f"{frac:.0%} of the time " if frac is not None else ""
    return Finding(
        kind="pfc_storm",
        severity="critical" if seconds >= p.critical_seconds else "warning",
        start=start,
        end=end,
        devices=(storm[0].paused[0],),
        ports=(paused,),
        priority=storm[0].priority,
        score=seconds * (frac or 1.0),
        summary=(
            f"PFC storm: {paused} held paused on {_priority(storm)} {held}for {seconds:.0f} s by a "
            "neighbour nobody monitors or names (root unknown)"
        ),
        evidence={
            "root": None,
            "root_unknown": True,
            "root_ports": [],
            "paused_fraction": frac,
            "pause_evidence": sorted({e.evidence for e in storm}),
            "tree": [],
            "watchdog": _watchdog(ctx, storm, start, end),
            "speed_sources": ctx.speeds.sources([e.paused for e in storm]),
            "jobs_paused_by_spread": [],
        },
        job_ids=tuple(ctx.fabric.jobs_at_refs([paused], start, end)),
    )


def _finding(ctx: Context, p: StormParams, storm: list[Edge], edges: list[Edge]) -> Finding:
    tree = _tree(storm, edges)
    start, end = ctx.clip(min(e.start for e in storm), max(e.end for e in storm))
    seconds = (end - start).total_seconds()
    root = storm[0].asserter[0]
    root_refs = list(dict.fromkeys(_ref(e.asserter) for e in storm))
    paused_refs = list(dict.fromkeys(_ref(e.paused) for e in storm))
    spread = sorted({t.paused[0] for t in tree} - {root} - {e.paused[0] for e in storm})
    fractions = [e.paused_fraction for e in storm if e.paused_fraction is not None]
    frac = sum(fractions) / len(fractions) if fractions else None
    jobs = ctx.fabric.jobs_at_refs([*root_refs, *paused_refs], start, end)
    hurt = ctx.fabric.jobs_at_refs([_ref(t.paused) for t in tree], start, end)
    watchdog = _watchdog(ctx, tree, start, end)
    stall = _nic_stall(ctx, root, start, end)
    broke = stall is not None and stall["error_events"] > 0
    held = f"{frac:.0%} of the time " if frac is not None else ""
    return Finding(
        kind="pfc_storm",
        severity="critical" if seconds >= p.critical_seconds or spread or broke else "warning",
        start=start,
        end=end,
        devices=tuple(dict.fromkeys([root, *(e.paused[0] for e in storm), *spread])),
        ports=tuple(dict.fromkeys([*root_refs, *paused_refs])),
        priority=storm[0].priority,
        score=seconds * (frac or 1.0) * len(tree),
        summary=(
            f"PFC storm: {', '.join(root_refs)} held {', '.join(paused_refs)} paused on {_priority(storm)} "
            f"{held}for {seconds:.0f} s"
            + (f"; the pause spread to {len(spread)} more device(s)" if spread else "")
            + ("; mitigated by the PFC watchdog" if watchdog else "")
            + (
                "; the NIC's stall prevention stopped its pause (its lossless traffic may drop)"
                if broke
                else "; the NIC's stall prevention warned"
                if stall
                else ""
            )
        ),
        evidence={
            "root": root_refs[0],
            "root_device": root,
            "root_ports": root_refs,
            "paused_fraction": frac,
            "pause_evidence": sorted({e.evidence for e in storm}),
            "tree": [
                {
                    "asserter": _ref(t.asserter),
                    "paused": _ref(t.paused),
                    "start": t.start,
                    "end": t.end,
                    "paused_fraction": t.paused_fraction,
                }
                for t in tree
            ],
            "watchdog": watchdog,
            "nic_stall_prevention": stall,
            "critical_by_device": "nic_stall_prevention" if broke else None,
            "speed_sources": ctx.speeds.sources([e.paused for e in storm]),
            "jobs_paused_by_spread": sorted(set(hurt) - set(jobs)),
        },
        job_ids=tuple(jobs),
    )


DETECTOR = Detector("pfc_storm", "2", ("pfc_storm",), StormParams, detect)
