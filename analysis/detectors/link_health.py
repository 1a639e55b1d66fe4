"""Link and configuration health: flapping links, degraded optics, and lossless traffic dropped where PFC
should have paused it.

Flapping links (`link_flap`). A flap is a down event of a link seen by either end: an `oper_up` gauge
dip (consecutive samples at 0 on a port that is up elsewhere in the window; the link went down after
the sample before), a `link_down_events` increase (mlx5 `link_down_events_phy`, which also counts
downs shorter than a poll) or half the `carrier_transitions` of an incident (Linux `carrier_changes`, both
directions: an outage whose down and up land in two samples is one down). Both ends of a cable are one
link: LLDP's adjacency, else (LLDP from the hosts only says nothing of the cables between switches) the two
ports of no known peer that went down together, down for down, and with no other such port. Events of one
link closer than `merge_gap_s` are one incident (one finding per flapping episode, not per flap: the link
flaps again before anyone could have repaired it); it is reported when it has at least `min_flaps` downs
(one down and up is an outage, not a flap). This is how operators read flaps (e.g. Cisco/Arista
link-flap error-disable: N flaps within an interval; Meta, "RDMA over Ethernet for Distributed AI
Training at Meta Scale", SIGCOMM 2024, on link flaps stalling collectives).

Degraded optics (`degraded_optics`). Frames failing their FCS (`rx_fcs_errors`, IEEE 802.3 clause 3),
symbol errors (`rx_symbol_errors`) or uncorrectable FEC codewords (`fec_uncorrectable_blocks`) rising
on a port: consecutive error samples closer than `error_gap_s` form an episode, kept when it lasts
at least `min_error_seconds` with at least `min_errors` errors that are, where the port's received
frames are known, at least `min_error_ratio` of them (ten times a compliant link's), else at least
`min_error_rate` a second (more than a compliant link errs at line rate; healthy links show none after FEC). Errors on a
link that flaps within `merge_gap_s` of them are the same failing cable: they are evidence of the
`link_flap` finding (and extend it), not a finding of their own; errors on a link whose downs are
too few to be a flapping episode are degraded optics. Optics DOM (`optics_rx_power_dbm`)
is added as evidence where reported.

PFC misconfiguration (`pfc_misconfig`). On a lossless priority (IEEE 802.1Qbb) a switch pauses its
upstream before an ingress priority group overflows, so drops *at an ingress* of a lossless priority mean
the port did not pause: `pg_dropped_packets` (SONiC `PG_DROP`, as `pfcstat`/`show priority-group drop
counters` show) on a lossless priority while the same port sent no PFC pause on that priority
(`pfc_tx_pause` frames or pause duration) around the drops. The direction matters: the ingress that
dropped is the one that should have paused; an egress queue's drops name no ingress (the traffic came in
elsewhere) and a port's own pauses say nothing about its egress, so egress drops are not evidence, and
neither are port-wide discards alone (ACLs, routing and errors explain those): where a switch counts no
priority-group drops (Arista over OpenConfig), a host-facing port's receive discards count only while the
NIC behind it sees its RoCE packets lost (NAKs for sequence errors, retransmissions). Drops a PFC watchdog made while
mitigating a storm (`pfcwd_*_dropped_packets` on the port) are the storm's (see `pfc_storm`), and drops at a
port whose link went down within two polls are link events (see `link_flap`): both are skipped. Drop
samples closer than `misconfig_gap_s` form one finding when they add up to `min_lossless_drops` packets or
more. As with SONiC's PFC watchdog, drops of lossless traffic are the symptom to alarm on; the cause shown
is the port's flat pause counters.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from typing import Any

import polars as pl

from rocescope.analysis.align import as_duration
from rocescope.analysis.detectors.base import Context, Detector, Params, lossless_threshold, threshold
from rocescope.analysis.detectors.device_events import Incident, Restart, device_events, into_restarts, restarts
from rocescope.analysis.episodes import episodes
from rocescope.analysis.fabric import with_ifaces
from rocescope.analysis.findings import Finding
from rocescope.analysis.link_downs import Peers, down_events, link_keys, link_outages
from rocescope.analysis.links import coincident_cables

ERROR_METRICS = ("rx_fcs_errors", "rx_symbol_errors", "fec_uncorrectable_blocks")
#: frames received, all of them where the port counts them, else its unicast frames (one of the two: not their sum)
RX_FRAMES = ("rx_packets", "rx_unicast_packets")
DOM = "optics_rx_power_dbm"
INGRESS_DROPS = "pg_dropped_packets"
PORT_DISCARDS = "rx_discards"
ROCE_LOSS = ("packet_seq_err", "out_of_sequence", "roce_adp_retrans", "local_ack_timeout_err")
WATCHDOG_DROPS = ("pfcwd_rx_dropped_packets", "pfcwd_tx_dropped_packets")
PFC_SENT = ("pfc_tx_pause", "pfc_tx_pause_duration_us")


class LinkHealthParams(Params):
    merge_gap_s: float = threshold(
        60.0,
        "Flaps (and errors) of one link closer than this are one incident.",
        "convention: flaps are counted within an interval, as link-flap error-disable does (Cisco, Arista); a link "
        "down again within a minute was not repaired meanwhile: one incident, one finding",
        gt=0,
    )
    min_flaps: int = threshold(
        2,
        "Down events an incident needs to be a flapping link.",
        "convention: one down and up is an outage, not a flap; a flapping link goes down again within the "
        "interval, as operators' link-flap error-disable counts repeated downs",
        ge=1,
    )
    error_gap_s: float = threshold(
        30.0,
        "Error samples of a port closer than this are one episode.",
        "derivation: one error sample per read at the slowest common cadence (SNMP, 30 s) is still one continuing "
        "episode; errs toward joining error bursts of one port rather than splitting them",
        gt=0,
    )
    min_error_seconds: float = threshold(
        10.0,
        "Degraded optics: errors for at least this long.",
        "derivation: degraded optics err steadily; a short burst (a reseat, one transient) is not degradation. "
        "Errs toward missing brief bursts; errors near a flap count with the flap regardless",
        ge=0,
    )
    min_errors: float = threshold(
        10.0,
        "Degraded optics: errors per episode, at least.",
        "derivation: with `min_error_ratio` at ten times a compliant link's, a compliant link would expect at most "
        "one error where ten were counted, and shows ten or more with probability 1e-7 (Poisson): ten is "
        "degradation, one or two may be a transient",
        ge=1,
    )
    min_error_rate: float = threshold(
        1.0,
        "Degraded optics where the port's received frames are unknown: mean errors per second, at least.",
        "standard: IEEE 802.3's bit error ratio of 1e-12 lets a compliant 400G link at line rate err up to 0.4 "
        "frames a second (800G: 0.8); one a second sustained is out of spec at any speed up to 800G",
        ge=0,
    )
    min_error_ratio: float = threshold(
        1.2e-7,
        "Degraded optics: errors per received frame, at least (where frames are known).",
        "standard: IEEE 802.3 links are specified for a bit error ratio of 1e-12 or better, 1.2e-8 per "
        "1500-byte frame; ten times that is a link out of spec, not a compliant one's bad luck",
        ge=0,
    )
    lossless_priorities: tuple[int, ...] = lossless_threshold(
        "Priorities that must not drop (PFC on).",
    )
    min_lossless_drops: float = threshold(
        10.0,
        "PFC misconfig: dropped packets per episode.",
        "derivation: with PFC working a lossless ingress drops nothing, so any real loss is the symptom; ten "
        "packets, not one, keeps a lone stray count from becoming a critical finding",
        gt=0,
    )
    misconfig_gap_s: float = threshold(
        60.0,
        "Drop samples of a port closer than this are one episode.",
        "derivation: a missing PFC config does not fix itself between reads: drops of one port within a minute "
        "(two reads at SNMP's 30 s) are one episode, one finding, not one per read",
        gt=0,
    )
    critical_flaps: int = threshold(
        5,
        "Flap incidents with at least this many downs are critical.",
        "convention: link-flap error-disable's common default is 5 flaps in 10 s (Cisco IOS, IP Infusion OcNOS): a "
        "link that flaps that often is one a switch would shut",
        ge=1,
    )
    idle_Bps: float = threshold(
        1e6,
        "A link whose ends both sent less than this (bytes/s, window mean) carried no job.",
        "derivation: 1 MB/s is under 0.01% of a 100 Gb/s port: above what an unused link carries (LLDP, routing "
        "keepalives), far below any job's RDMA traffic averaged over a window",
        ge=0,
    )
    device_event_links: int = threshold(
        9,
        "Links of one device flapping together at least this many are one device event (one finding).",
        "derivation: one cable carries at most 8 links (an 800G port broken out to 8 x 100G), so more links of "
        "one device going down together are the device (a reboot, a line card, a power feed), not cables",
        ge=2,
    )


def _error_episodes(ctx: Context, p: LinkHealthParams) -> pl.DataFrame:
    """Per port, episodes of frame/symbol/FEC errors with totals per metric and the frame error ratio."""
    err = ctx.frames.rates(list(ERROR_METRICS), min_rate=1e-9)
    if err.is_empty():
        return pl.DataFrame()
    per_ts = err.group_by("ts", "device", "port").agg(
        pl.col("delta").sum().alias("errors"),
        pl.col("dt_s").max(),
        *(pl.col("delta").filter(pl.col("metric") == m).sum().alias(m) for m in ERROR_METRICS),
    )
    eps = episodes(
        per_ts,
        ["device", "port"],
        gap_s=p.error_gap_s,
        aggregations=[pl.col("errors").sum(), *(pl.col(m).sum() for m in ERROR_METRICS)],
    )
    # frames received over each episode, for the error ratio (only the ports with errors are read)
    rx = ctx.frames.rates(list(RX_FRAMES), devices=sorted(set(eps["device"].to_list())))
    rx = rx.join(eps.select("device", "port").unique(), on=["device", "port"])
    preference = pl.col("metric").replace_strict({m: i for i, m in enumerate(RX_FRAMES)}, return_dtype=pl.Int8)
    rx = rx.filter(preference == preference.min().over("device", "port"))
    frames_rx = (
        eps.join(rx.select("device", "port", "ts", "delta"), on=["device", "port"], how="left")
        .filter(pl.col("ts").is_null() | ((pl.col("ts") > pl.col("start")) & (pl.col("ts") <= pl.col("end"))))
        .group_by("device", "port", "start")
        .agg(pl.col("delta").sum().alias("rx_frames"), pl.col("ts").count().alias("rx_samples"))
    )
    eps = eps.join(frames_rx, on=["device", "port", "start"], how="left")
    seconds = (pl.col("end") - pl.col("start")).dt.total_microseconds() / 1e6
    ratio = pl.when(pl.col("rx_samples") > 0).then(pl.col("errors") / (pl.col("rx_frames") + pl.col("errors")))
    return eps.with_columns(seconds.alias("seconds"), ratio.alias("error_ratio"))


def _merge_errors(
    ctx: Context, p: LinkHealthParams, eps: pl.DataFrame, flaps: list[Incident], coincident: Peers
) -> tuple[list[Incident], list[Incident]]:
    """Error episodes folded into the flap incidents of their link; the rest as optics incidents."""
    if eps.is_empty():
        return flaps, []
    eps = eps.join(link_keys(ctx, eps, coincident), on=["device", "port"])
    alone = []
    for row in eps.iter_rows(named=True):
        link = tuple(row["link"])
        errors = {m: row[m] for m in ("errors", *ERROR_METRICS)} | {"error_ratio": row["error_ratio"]}
        ref = f"{row['device']}:{ctx.fabric.iface(row['device'], row['port'])}"
        hit = next((f for f in flaps if f.link == link and f.near(row["start"], row["end"], p.merge_gap_s)), None)
        if hit is not None:
            hit.start, hit.end = min(hit.start, row["start"]), max(hit.end, row["end"])
            _add(hit.errors, ref, errors)
            continue
        if not _degraded(p, row["errors"], row["seconds"], row["error_ratio"]):
            continue
        alone.append(Incident(link, row["start"], row["end"], 0, {ref: errors}))
    optics: list[Incident] = []
    for inc in sorted(alone, key=lambda i: i.start):  # both ends of one cable erring: one finding
        same = next((o for o in optics if o.link == inc.link and o.near(inc.start, inc.end, p.merge_gap_s)), None)
        if same is None:
            optics.append(inc)
            continue
        same.start, same.end = min(same.start, inc.start), max(same.end, inc.end)
        for ref, errs in inc.errors.items():
            _add(same.errors, ref, errs)
    return flaps, optics


def _degraded(p: LinkHealthParams, errors: float, seconds: float, ratio: float | None) -> bool:
    """An error episode is degradation when it is sustained and counts enough errors, out of spec for the frames
    the port received or, where those are unknown, for any link at line rate."""
    if seconds < p.min_error_seconds or seconds <= 0 or errors < p.min_errors:
        return False
    if ratio is None:
        return errors / seconds >= p.min_error_rate
    return ratio >= p.min_error_ratio


def _add(into: dict[str, dict[str, float]], ref: str, errors: dict[str, Any]) -> None:
    have = into.setdefault(ref, {})
    for k, v in errors.items():
        if k == "error_ratio":
            if v is not None:
                have[k] = max(have.get(k, 0.0), float(v))
        else:
            have[k] = have.get(k, 0.0) + float(v or 0.0)


def _ends(inc: Incident) -> list[str]:
    """The link's refs, the end that received the most errors first."""
    return sorted(inc.link, key=lambda r: (-inc.errors.get(r, {}).get("errors", 0.0), r))


def _dom(ctx: Context, incidents: Sequence[Incident]) -> dict[str, float]:
    """Lowest received optical power per ref of the incidents' ports, where reported."""
    refs = {r for i in incidents for r in i.link}
    if not refs:
        return {}
    g = ctx.frames.gauges([DOM], devices=sorted({r.partition(":")[0] for r in refs}))
    low = g.group_by("device", "port").agg(pl.col("value").min())
    out: dict[str, float] = {}
    for d, port, v in low.iter_rows():
        ref = f"{d}:{ctx.fabric.iface(d, port)}"
        if ref in refs:
            out[ref] = min(v, out.get(ref, math.inf))
    return out


def _idle_links(ctx: Context, p: LinkHealthParams, incidents: Sequence[Incident]) -> set[tuple[str, ...]]:
    """Links of the incidents that carried (almost) no traffic either way in the window: no job's
    traffic crossed them, whatever the placement would allow."""
    if not incidents:
        return set()
    devices = sorted({ref.partition(":")[0] for i in incidents for ref in i.link})
    sent = ctx.frames.totals(["tx_bytes"], ctx.window.seconds, devices=devices)
    sent = sent.group_by("device", "port").agg(pl.col("delta").sum())
    tx = {f"{d}:{ctx.fabric.iface(d, port)}": float(v) for d, port, v in sent.iter_rows()}
    floor = p.idle_Bps * ctx.window.seconds
    return {i.link for i in incidents if all(r in tx and tx[r] < floor for r in i.link)}


def _jobs(ctx: Context, refs: Sequence[str], start: dt.datetime, end: dt.datetime, idle: bool) -> tuple[str, ...]:
    return () if idle else tuple(ctx.fabric.jobs_at_refs(refs, start, end))


def _device_finding(
    ctx: Context, p: LinkHealthParams, device: str, group: list[Incident], gone: Restart | None = None
) -> Finding:
    """One finding for a device whose links went down together (a reboot, a line card, a power feed); with
    `gone`, a switch that went away while links whose far ends are unknown went down."""
    start, end = ctx.clip(min(i.start for i in group), max(i.end for i in group))
    own = set(gone.ports) if gone is not None else set()
    ports = sorted({r for inc in group for r in _ends(inc) if r.partition(":")[0] == device} | own)
    why = ""
    if gone is not None:
        why = (
            f"; its counters restarted from zero on {len(own)} ports (a restart)"
            if gone.restarted
            else f"; its telemetry went silent on {len(own)} ports meanwhile (gone away)"
        )
    downs = max(i.flaps for i in group)
    jobs = sorted({j for inc in group for j in _jobs(ctx, _ends(inc), start, end, False)})
    return Finding(
        kind="link_flap",
        severity="critical",
        start=start,
        end=end,
        devices=(device,),
        ports=tuple(ports),
        priority=-1,
        score=float(len(group)),
        summary=(
            f"device event: {len(group)} links of {device} went down together "
            f"({'once' if downs == 1 else f'up to {downs} times'}) in "
            f"{(end - start).total_seconds():.0f} s: a reboot, line card or power event, not {len(group)} cables" + why
        ),
        evidence={
            "device_event": True,
            "links": len(group),
            "flaps": downs,
            "went_away": None if gone is None else ("restarted" if gone.restarted else "silent"),
            "peers": sorted(r for inc in group for r in _ends(inc) if r.partition(":")[0] != device),
        },
        job_ids=tuple(jobs),
    )


def _link_findings(ctx: Context, p: LinkHealthParams, events: pl.DataFrame, coincident: Peers) -> list[Finding]:
    gone, outages = restarts(
        ctx.frames.byte_counter_breaks(), link_outages(ctx, p.merge_gap_s, events, coincident), p.merge_gap_s
    )
    devices, outages = device_events(outages, ctx.fabric.ports_of, p.merge_gap_s, p.device_event_links)
    devices = into_restarts(gone, devices, p.merge_gap_s)
    flaps = [inc for inc in outages if inc.flaps >= p.min_flaps]
    # errors on a cable of a device event are that event's (a failing uplink to a spine that restarts meanwhile),
    # never an optics finding of their own
    grouped = [inc for _, group in devices for inc in group] + [inc for r in gone for inc in r.outages]
    _, optics = _merge_errors(ctx, p, _error_episodes(ctx, p), [*flaps, *grouped], coincident)
    dom = _dom(ctx, [*flaps, *optics])
    idle = _idle_links(ctx, p, [*flaps, *optics])
    out = [_device_finding(ctx, p, device, group) for device, group in devices]
    out += [_device_finding(ctx, p, r.device, r.outages, r) for r in gone]
    for inc in flaps:
        start, end = ctx.clip(inc.start, inc.end)
        ends = _ends(inc)
        errors = sum(e.get("errors", 0.0) for e in inc.errors.values())
        out.append(
            Finding(
                kind="link_flap",
                severity="critical" if inc.flaps >= p.critical_flaps else "warning",
                start=start,
                end=end,
                devices=tuple(dict.fromkeys(r.partition(":")[0] for r in ends)),
                ports=tuple(ends),
                priority=-1,
                score=float(inc.flaps),
                summary=(
                    f"link flap: {' <-> '.join(ends)} went down {inc.flaps} times in "
                    f"{(end - start).total_seconds():.0f} s"
                    + (f"; {errors:.0f} frames failed FCS/FEC while up (failing optics or cable)" if errors else "")
                ),
                evidence={
                    "flaps": inc.flaps,
                    "errors": inc.errors,
                    "optics_rx_power_dbm": {r: dom[r] for r in ends if r in dom},
                    "idle_link": inc.link in idle,
                },
                job_ids=_jobs(ctx, ends, start, end, inc.link in idle),
            )
        )
    for inc in optics:
        start, end = ctx.clip(inc.start, inc.end)
        ends = _ends(inc)
        seconds = max((end - start).total_seconds(), 1.0)  # a span clipped to nothing at the window's edge
        errors = sum(e.get("errors", 0.0) for e in inc.errors.values())
        ratio = max((e.get("error_ratio", 0.0) for e in inc.errors.values()), default=0.0)
        out.append(
            Finding(
                kind="degraded_optics",
                severity="warning",
                start=start,
                end=end,
                devices=tuple(dict.fromkeys(r.partition(":")[0] for r in ends)),
                ports=tuple(ends),
                priority=-1,
                score=errors,
                summary=(
                    f"degraded optics: {ends[0]} received {errors:.0f} corrupted frames/codewords in {seconds:.0f} s "
                    f"({errors / seconds:.1f}/s" + (f", {ratio:.1e} of frames)" if ratio else ")") + " without a flap"
                ),
                evidence={
                    "errors": inc.errors,
                    "optics_rx_power_dbm": {r: dom[r] for r in ends if r in dom},
                    "idle_link": inc.link in idle,
                },
                job_ids=_jobs(ctx, ends, start, end, inc.link in idle),
            )
        )
    return out


def _nic_confirmed_discards(ctx: Context, p: LinkHealthParams) -> pl.DataFrame:
    """Where a switch counts no priority-group drops (Arista over OpenConfig), a host-facing port's receive
    discards stand in when the NIC behind it meanwhile saw its RoCE packets lost (NAKs for sequence errors,
    retransmissions): lossless traffic was dropped at that ingress, not packets an ACL or a route refused.
    Rows as `frames.rates` gives them, on the first lossless priority."""
    frames = ctx.frames
    counted = frames.reporting(INGRESS_DROPS)
    discards = frames.rates([PORT_DISCARDS], min_rate=1e-9, roles=["switch"])
    discards = discards.filter(~pl.col("device").is_in(sorted(counted)))
    if discards.is_empty():
        return discards
    lost = frames.rates(list(ROCE_LOSS), min_rate=1e-9, roles=["nic"])
    discards = discards.with_row_index("_row")
    keep: list[int] = []
    for device, port in discards.select("device", "port").unique().iter_rows():
        nic = ctx.fabric.nic_behind(device, port)
        if nic is None:
            continue
        theirs = with_ifaces(lost.filter(pl.col("device") == nic[0]), ctx.fabric).filter(pl.col("iface") == nic[1])
        mine = discards.filter((pl.col("device") == device) & (pl.col("port") == port))
        theirs_every = theirs["dt_s"].median()
        for row, ts, dt_s in mine.select("_row", "ts", "dt_s").iter_rows():
            # two reads of the slower series either side: the NIC and the switch count on their own clocks
            every = max(dt_s, float(theirs_every) if isinstance(theirs_every, int | float) else dt_s)
            slack = dt.timedelta(seconds=2 * every)
            lo, hi = ts - dt.timedelta(seconds=dt_s) - slack, ts + slack
            if not theirs.filter(pl.col("ts").is_between(lo, hi)).is_empty():
                keep.append(row)
    prio = p.lossless_priorities[0]
    return (
        discards.filter(pl.col("_row").is_in(keep)).drop("_row").with_columns(pl.lit(prio, pl.Int8).alias("priority"))
    )


def _misconfig_findings(ctx: Context, p: LinkHealthParams, events: pl.DataFrame, coincident: Peers) -> list[Finding]:
    frames, fabric = ctx.frames, ctx.fabric
    lossless = list(p.lossless_priorities)
    if not lossless:
        return []
    drops = frames.rates([INGRESS_DROPS], min_rate=1e-9, roles=["switch"], priorities=lossless)
    drops = pl.concat([drops, _nic_confirmed_discards(ctx, p)])
    if drops.is_empty():
        return []
    eps = episodes(
        drops,
        ["device", "port", "priority"],
        gap_s=p.misconfig_gap_s,
        aggregations=[
            pl.col("delta").sum().alias("dropped"),
            pl.col("dt_s").median().alias("interval_s"),
            pl.col("metric").first().alias("counted"),
        ],
    ).filter(pl.col("dropped") >= p.min_lossless_drops)
    if eps.is_empty():
        return []
    devices = sorted(set(eps["device"].to_list()))
    paused = frames.rates(list(PFC_SENT), min_rate=1e-9, devices=devices, priorities=lossless)
    mitigated = frames.rates(list(WATCHDOG_DROPS), min_rate=1e-9, devices=devices)
    downs = events.join(link_keys(ctx, events, coincident), on=["device", "port"]) if not events.is_empty() else events
    out = []
    for row in eps.iter_rows(named=True):
        device, port, prio = row["device"], row["port"], int(row["priority"])
        slack = dt.timedelta(seconds=2 * float(row["interval_s"]))
        lo, hi = row["start"] - slack, row["end"] + slack
        here = (pl.col("device") == device) & (pl.col("port") == port) & pl.col("ts").is_between(lo, hi)
        # PFC acted while it dropped: a pause sample whose own interval overlaps the drops' (half a read either
        # side for the two counters' stamps); pauses that ended before the first drop (PFC turned off then) do not
        jitter = dt.timedelta(seconds=0.5 * float(row["interval_s"]))
        during = (
            (pl.col("device") == device)
            & (pl.col("port") == port)
            & (pl.col("priority") == prio)
            & (pl.col("ts") > row["start"] - jitter)
            & (pl.col("ts") - as_duration(pl.col("dt_s")) < row["end"] + jitter)
        )
        if not paused.filter(during).is_empty():
            continue  # PFC acted and still dropped: headroom, not a missing PFC config
        if not mitigated.filter(here).is_empty():
            continue  # a PFC watchdog dropped them while mitigating a storm
        ref = f"{device}:{port}"
        if not downs.is_empty():
            down_here = downs.filter(
                pl.col("link").list.contains(ref) & (pl.col("start") <= hi) & (pl.col("end") >= lo)
            )
            if not down_here.is_empty():
                continue  # frames queued on a link that went down: a link event
        start, end = ctx.clip(row["start"], row["end"])
        peer = fabric.peer(device, port)
        jobs = fabric.jobs_at(*peer, start, end) if peer else fabric.jobs_at(device, port, start, end)
        out.append(
            Finding(
                kind="pfc_misconfig",
                severity="critical",
                start=start,
                end=end,
                devices=(device, peer[0]) if peer else (device,),
                ports=(ref,),
                priority=prio,
                score=row["dropped"],
                summary=(
                    f"PFC misconfig: {ref} dropped {row['dropped']:.0f} packets of lossless priority {prio} at its "
                    + (
                        "ingress priority group"
                        if row["counted"] == INGRESS_DROPS
                        else "ingress (receive discards while the NIC behind it lost RoCE packets)"
                    )
                    + " without sending a single PFC pause (PFC off for that priority?)"
                ),
                evidence={
                    "dropped": row["dropped"],
                    row["counted"]: row["dropped"],
                    "pfc_pause_sent": 0,
                    "peer": f"{peer[0]}:{peer[1]}" if peer else None,
                },
                job_ids=tuple(sorted(jobs)),
            )
        )
    return out


def detect(ctx: Context, p: LinkHealthParams) -> list[Finding]:
    events = down_events(ctx)
    coincident = coincident_cables(events, ctx.fabric.peer, p.min_flaps)
    return _link_findings(ctx, p, events, coincident) + _misconfig_findings(ctx, p, events, coincident)


DETECTOR = Detector("link_health", "2", ("link_flap", "degraded_optics", "pfc_misconfig"), LinkHealthParams, detect)
