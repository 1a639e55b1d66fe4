"""What a window's telemetry can judge, per port, device and job and per finding kind, and why not where it
cannot: silence that looks like health is the commonest failure on real gear (a storm dropped because a port
has no speed, PFC counted per interface only, a neighbour nobody monitors, NCCL collectives joined to no job).
Monitoring tools earn trust by saying their blind spots (Prometheus' `up`, node_exporter's `*_scrape_error`).

Computed from what the detectors read, cheaply: which metrics each port reported in the window and how often
(the 1-minute rollup: samples per minute per series), the cabling the fabric knows (`Fabric`), the port speeds
(`PortSpeeds`: reported, from the peer, configured or inferred) and the collectives' job attribution. Each item
is one (kind, place): judged, judged with a caveat (the finding rests on an estimate or an assumption), or not
judged with the reason. The resolving cadences are the exam's (`rocescope.sim.truth`: a burst under a second is
placed by a watermark read every 10 s or less, or by ECN marks or CNPs counted every second).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from rocescope.analysis.cnp_peers import HANDLED, RECEIVED, CnpPeers
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.frames import SWITCH_PORTS, Frames, Window
from rocescope.analysis.impact import INTERVAL_MEANS, ImpactParams
from rocescope.analysis.speeds import PortSpeeds
from rocescope.pipeline.store import Store, query_polars

__all__ = ["Coverage", "Item", "coverage"]

#: a counter read at most this often (seconds) places a burst under a second: queue watermarks (peaks since the
#: last read) between compute phases; ECN marks and CNPs per second (a 10 s count on a half-busy port is either)
WATERMARK_RESOLVES_S, MARKS_RESOLVE_S = 10.0, 1.0
#: a cadence is judged from whole minutes of the rollup: up to this much slower than nominal still counts as it
#: (a device's own clock and collector scheduling stretch a 1 s poll to 1.0x s)
CADENCE_SLACK = 1.5

PFC_DURATION, PFC_FRAMES, PFC_PORT_FRAMES = "pfc_rx_pause_duration_us", "pfc_rx_pause", "pfc_rx_pause_total"
PFC_DURATION_ESTIMATED = "pfc_rx_pause_duration_est_us"
WATERMARK, QUEUE_MARKS, CNP_SENT = "queue_watermark_bytes", "queue_ecn_marked_packets", "cnp_sent"
CNP_HANDLED = (HANDLED, RECEIVED)

#: reason label -> its text, for the reasons that name no place or count (the others are written where they arise)
REASONS = {
    "estimated_pause": "pause time estimated by the PFC watchdog: never critical on it alone",
    "no_speed_pfc": "pause frames and no speed: read at the fastest speed",
    "per_interface_pfc": "PFC counted per interface only: the priority is assumed",
    "no_pfc_counters": "no PFC pause counters",
    "no_lldp_root": "no LLDP on either side: a storm's root cannot be named",
    "no_link_state": "no link state",
    "no_error_counter": "no FCS/FEC error counter",
    "speed_inferred": "speed inferred",
    "no_transmit_counter": "no transmit counter",
    "no_speed": "no speed reported, configured or inferable",
    "no_congestion_evidence": "no congestion evidence (queue watermark, ECN marks, the receiver's CNPs)",
    "no_lldp_kind": "no LLDP on either side: whether it faces a host or a switch is unknown",
    "cnp_one_way": "CNPs counted one way only (sent or handled)",
    "cnp_destinations_unknown": "whom its CNPs go to is unknown (no sampled packets or QP records): a loss on "
    "their way is unverifiable",
    "no_collectives": "no NCCL collectives joined to it",
    "no_collectives_before": "no NCCL collectives joined to it in the look-back",
    "interval_means_only": "only interval means of its collectives (Inspector's Prometheus or OTLP aggregates): "
    "no single operations to time, so its slowdown, hang and GPU-seconds are not measurable from this source",
}


def _item(kind: str, where: str, judged: bool, code: str = "", reason: str | None = None) -> Item:
    """An item whose reason is `REASONS[code]` unless written out (`reason`: one that names places or counts)."""
    return Item(kind, where, judged, REASONS.get(code, "") if reason is None else reason, code)


@dataclass(frozen=True)
class Item:
    """One finding kind at one place (`device:port`, a device, or a job): judged or not, and why."""

    kind: str
    where: str
    judged: bool
    #: why not judged; for a judged item, the caveat its findings carry ("" when none)
    reason: str = ""
    #: the reason as a stable label (`REASONS`), for the metric: the text may name places and counts
    code: str = ""

    @property
    def state(self) -> str:
        return "judged" if self.judged and not self.reason else "judged_with_caveat" if self.judged else "not_judged"


@dataclass
class Coverage:
    window: Window
    items: list[Item] = field(default_factory=list)

    def by_reason(self) -> list[tuple[str, str, int, list[str]]]:
        """(kind, reason, count, up to three examples) for every item not judged or judged with a caveat, the
        most common first."""
        groups: dict[tuple[str, str], list[str]] = {}
        for it in self.items:
            if it.reason:
                groups.setdefault((("" if it.judged else "not judged: ") + it.kind, it.reason), []).append(it.where)
        rows = [(k, r, len(w), sorted(w)[:3]) for (k, r), w in groups.items()]
        return sorted(rows, key=lambda row: (-row[2], row[0], row[1]))

    def states(self) -> dict[tuple[str, str], int]:
        """(kind, state) -> items: judged | judged_with_caveat | not_judged."""
        return dict(Counter((it.kind, it.state) for it in self.items))

    def labelled(self) -> dict[tuple[str, str, str], int]:
        """(kind, state, reason label) -> items: the `rocescope_coverage` metric, so an alert can say why."""
        return dict(Counter((it.kind, it.state, it.code) for it in self.items))

    def lines(self) -> list[str]:
        """One line per kind (judged of all), then one per reason with its count and examples."""
        out = []
        per_kind: dict[str, list[Item]] = {}
        for it in self.items:
            per_kind.setdefault(it.kind, []).append(it)
        for kind, items in sorted(per_kind.items()):
            judged = sum(it.judged for it in items)
            out.append(f"{kind}: {judged} of {len(items)} judged")
        for kind, reason, n, examples in self.by_reason():
            out.append(f"  {kind}: {reason}: {n} ({', '.join(examples)}{', ...' if n > len(examples) else ''})")
        return out

    def summary(self) -> str:
        """One line: per kind with items it cannot judge, how many of all and the commonest reason."""
        parts = []
        for kind in sorted({it.kind for it in self.items}):
            items = [it for it in self.items if it.kind == kind]
            blind = Counter(it.reason for it in items if not it.judged)
            if blind:
                reason, _ = blind.most_common(1)[0]
                parts.append(f"{kind} {sum(blind.values())} of {len(items)} ({reason})")
        return "; ".join(parts) if parts else "every kind judged everywhere"

    def as_dict(self) -> dict[str, Any]:
        return {
            "from": self.window.start.isoformat(),
            "to": self.window.end.isoformat(),
            "states": [{"kind": k, "state": s, "items": n} for (k, s), n in sorted(self.states().items())],
            "items": [
                {
                    "kind": it.kind,
                    "where": it.where,
                    "judged": it.judged,
                    "state": it.state,
                    "reason": it.reason,
                    "code": it.code,
                }
                for it in self.items
            ],
        }


def _inventory(frames: Frames) -> pl.DataFrame:
    """Per device, port and metric in the window: its role and the seconds between its reads (from the rollup:
    a minute holds 60 / cadence reads of a series; its fullest minute, as the window's edges cut the others).

    `FINAL` sums a series' minute across the rollup's unmerged parts as a merge would, streaming in the table's
    key order: a hash aggregation by series and minute (ten million groups for an hour of 128x8) took 4x as long."""
    sql = f"""
SELECT toString(device) AS device, toString(role) AS role, toString(port) AS port, toString(metric) AS metric,
    60 / max(samples) AS every_s
FROM counters_1m FINAL
WHERE minute >= toStartOfMinute({{start:DateTime64(9, 'UTC')}}) AND minute < {{end:DateTime64(9, 'UTC')}}
    {SWITCH_PORTS}
GROUP BY device, role, port, metric"""  # noqa: S608 - a constant and placeholders only
    return query_polars(frames.store, sql, {"start": frames.window.start, "end": frames.window.end})


#: how far before the window a device that reported and fell silent is still said to be missing: a window's
#: length, at least this (an analysis window of a few minutes still names a device gone for a quarter of an hour)
SILENT_LOOKBACK_S = 900.0


def _fell_silent(frames: Frames, reporting: set[str]) -> list[Item]:
    """Devices that reported before the window and sent nothing in it (a dead agent, a rebooted switch, a collector
    that lost its target: Prometheus' `up == 0`), from the rollup's minutes: what no LLDP or placement names."""
    window = frames.window
    back = max(SILENT_LOOKBACK_S, (window.end - window.start).total_seconds())
    sql = """
SELECT toString(device) AS device, toString(any(role)) AS role, max(minute) AS last FROM counters_1m
WHERE minute >= toStartOfMinute({since:DateTime64(9, 'UTC')}) AND minute < toStartOfMinute({start:DateTime64(9, 'UTC')})
GROUP BY device"""
    since = window.start - dt.timedelta(seconds=back)
    before = query_polars(frames.store, sql, {"since": since, "start": window.start})
    items = []
    for device, role, last in before.sort("device").iter_rows():
        if device not in reporting:
            why = f"no telemetry in the window: a {role} last heard in the minute of {last:%Y-%m-%d %H:%M} UTC"
            items.append(_item("telemetry", device, False, "no_telemetry", why))
    return items


def _every(reads: dict[str, float], metrics: Iterable[str]) -> float | None:
    """The finest cadence among the metrics a place reports (None: none of them)."""
    got = [reads[m] for m in metrics if m in reads]
    return min(got) if got else None


def _switch_port(
    device: str,
    port: str,
    reads: dict[str, float],
    fabric: Fabric,
    speeds: PortSpeeds,
    nic_reads: dict[str, float],
    reporting: set[str],
) -> list[Item]:
    where = f"{device}:{port}"
    items = []
    # PFC storms and deadlocks: the best pause evidence the port gives
    if PFC_DURATION in reads:
        pfc = _item("pfc_storm", where, True)
    elif PFC_DURATION_ESTIMATED in reads:
        pfc = _item("pfc_storm", where, True, "estimated_pause")
    elif PFC_FRAMES in reads:
        pfc = _item("pfc_storm", where, True, "" if speeds.of(device, port) is not None else "no_speed_pfc")
    elif PFC_PORT_FRAMES in reads:
        pfc = _item("pfc_storm", where, True, "per_interface_pfc")
    else:
        pfc = _item("pfc_storm", where, False, "no_pfc_counters")
    peer = fabric.peer(device, port)
    if pfc.judged and not pfc.reason and peer is None:
        pfc = _item("pfc_storm", where, True, "no_lldp_root")
    elif pfc.judged and not pfc.reason and peer is not None and peer[0] not in reporting:
        # the pause's asserter is named (LLDP from this side) but says nothing of its own: whether it pauses for
        # congestion or is stuck cannot be read there (the storm detector reports such a root as unverified)
        why = f"its peer {peer[0]} is not monitored: a storm it holds is named without the peer's own evidence"
        pfc = _item("pfc_storm", where, True, "unmonitored_peer", why)
    items += [pfc, Item("pfc_deadlock", where, pfc.judged, pfc.reason, pfc.code)]
    items.append(
        _item("link_flap", where, True) if "oper_up" in reads else _item("link_flap", where, False, "no_link_state")
    )
    optics = "rx_fcs_errors" in reads
    items.append(_item("degraded_optics", where, optics, "" if optics else "no_error_counter"))
    kind = fabric.port_kind(device, port)
    speed = speeds.of(device, port)
    rate = None if "tx_bytes" not in reads else "" if speed is None or speed.source != "inferred" else "speed_inferred"
    load = "no_transmit_counter" if rate is None else "no_speed" if speed is None else ""
    if kind == "downlink":
        congestion = _every(reads, (WATERMARK, QUEUE_MARKS)) or _every(nic_reads, (CNP_SENT,))
        if load:
            items += [_item("incast", where, False, load), _item("microburst", where, False, load)]
        elif congestion is None:
            why = "no_congestion_evidence"
            items += [_item("incast", where, False, why), _item("microburst", where, False, why)]
        else:
            items.append(_item("incast", where, True, rate or ""))
            items.append(_bursts(where, reads, nic_reads, rate or ""))
    elif kind == "uplink":
        items.append(_item("ecmp_imbalance", where, not load, load or rate or ""))
    elif kind == "unknown":
        items += [_item(k, where, False, "no_lldp_kind") for k in ("incast", "microburst", "ecmp_imbalance")]
    return items


def _bursts(where: str, reads: dict[str, float], nic_reads: dict[str, float], caveat: str) -> Item:
    """Microbursts at a downlink: resolved by a watermark read every 10 s or less, or marks or CNPs per second."""
    wm = reads.get(WATERMARK)
    marks = _every(reads, (QUEUE_MARKS,))
    cnps = _every(nic_reads, (CNP_SENT,))
    if (wm is not None and wm <= WATERMARK_RESOLVES_S * CADENCE_SLACK) or any(
        x is not None and x <= MARKS_RESOLVE_S * CADENCE_SLACK for x in (marks, cnps)
    ):
        return _item("microburst", where, True, caveat)
    said = [f"{name} every {x:.0f} s" for name, x in (("watermarks", wm), ("ECN marks", marks), ("CNPs", cnps)) if x]
    why = f"cadence too coarse for bursts under a second ({', '.join(said)})"
    return _item("microburst", where, False, "cadence_too_coarse", why)


def _cnp_item(where: str, unmonitored: list[str] | None) -> Item:
    """A NIC's CNP balance is judged at the NIC either way; a loss on the CNPs' way back needs their destinations
    to count what they handle (`rocescope.analysis.detectors.cnp_loss`): the caveat where they do not."""
    if unmonitored is None:
        return _item("cnp_loss", where, True, "cnp_destinations_unknown")
    if unmonitored:
        shown = ", ".join(unmonitored[:3]) + (", ..." if len(unmonitored) > 3 else "")
        why = f"its CNPs go to peers that count none ({shown}): a loss on their way is unverifiable"
        return _item("cnp_loss", where, True, "unmonitored_peer", why)
    return _item("cnp_loss", where, True)


def _jobs_in(frame: pl.DataFrame) -> set[str]:
    """The distinct `job_id`s of a frame (millions of collectives: made distinct before they become Python)."""
    return set(frame["job_id"].unique().to_list())


def _jobs(frames: Frames) -> list[Item]:
    """Jobs whose slowdown can be measured (their collectives in the window joined to them, as single operations),
    whose hangs can be told (collectives joined to them before it: a hung job's window holds none), and collectives
    joined to none."""
    impact = ImpactParams()  # the frame impact reads anyway (cached): no second read of the collectives
    before = frames.collectives(impact.lookback_s, impact.after_s).filter(pl.col("job_id") != "")
    coll = frames.collectives(impact.lookback_s, impact.after_s)
    coll = coll.filter(pl.col("ts") >= frames.window.start, pl.col("ts") < frames.window.end)
    timed = ~pl.col("source").is_in(INTERVAL_MEANS)
    items = []
    placed = sorted(_jobs_in(frames.endpoints()))
    joined = coll.filter(pl.col("job_id") != "")
    ops = _jobs_in(joined.filter(timed))
    means = _jobs_in(joined) - ops
    earlier = before.filter(pl.col("ts") < frames.window.end)
    heard_ops = _jobs_in(earlier.filter(timed))
    heard_means = _jobs_in(earlier) - heard_ops
    for job in placed:
        code = "" if job in ops else "interval_means_only" if job in means else "no_collectives"
        items.append(_item("unexplained_slowdown", job, not code, code))
        code = "" if job in heard_ops else "interval_means_only" if job in heard_means else "no_collectives_before"
        items.append(_item("nccl_hang", job, not code, code))
    lost = coll.filter(pl.col("job_id") == "")
    for (host,), rows in lost.group_by(["host"]):
        n = rows.height
        why = f"{n} collective(s) joined to no job ({', '.join(sorted(set(rows['attribution'].to_list())))})"
        items.append(_item("unexplained_slowdown", f"collectives from {host}", False, "unjoined_collectives", why))
    return items


def coverage(frames: Frames, fabric: Fabric | None = None, speeds: PortSpeeds | None = None) -> Coverage:
    """The window's coverage (see the module docstring); `fabric` and `speeds` as the detectors had them (each
    costs scans of the window when built again)."""
    fabric = fabric or Fabric.from_frames(frames)
    speeds = speeds or PortSpeeds(frames, fabric)
    inv = _inventory(frames)
    reads: dict[tuple[str, str], dict[str, float]] = {}
    roles: dict[str, str] = {}
    for device, role, port, metric, every in inv.iter_rows():
        roles[device] = role
        reads.setdefault((device, fabric.iface(device, port) if port else ""), {})[metric] = float(every)
    out = Coverage(frames.window)
    reporting = set(roles)
    # every switch's speeds in one load (a query or two), not one load per device as its ports come up in turn
    speeds.frame(sorted(d for d, r in roles.items() if r == "switch"))
    peers: CnpPeers | None = None  # where NICs' CNPs go, read once where a NIC counts CNPs both ways
    for (device, port), got in sorted(reads.items()):
        if roles.get(device) == "switch" and port:
            behind = fabric.nic_behind(device, port)  # its RDMA device's counters are keyed by the netdev too
            nic = reads.get(behind, {}) if behind else {}
            out.items += _switch_port(device, port, got, fabric, speeds, nic, reporting)
        elif roles.get(device) == "nic" and (CNP_SENT in got or any(m in got for m in CNP_HANDLED)):
            if CNP_SENT in got and any(m in got for m in CNP_HANDLED):
                peers = peers or CnpPeers.read(frames, frames.window.start, frames.window.end)
                out.items.append(_cnp_item(f"{device}:{port}", peers.unmonitored([(device, port)])))
            else:
                out.items.append(_item("cnp_loss", f"{device}:{port}", False, "cnp_one_way"))
    silent = _fell_silent(frames, reporting)
    for device in sorted((fabric.switches | fabric.hosts) - reporting - {it.where for it in silent}):
        what = "switch" if device in fabric.switches else "host"
        why = f"a {what} others name (LLDP, placements) sends nothing"
        out.items.append(_item("telemetry", device, False, "no_telemetry", why))
    out.items += silent
    out.items += _jobs(frames)
    return out


def coverage_at(store: Store, start: dt.datetime, end: dt.datetime) -> Coverage:
    """The coverage of [start, end) in `store`."""
    return coverage(Frames(store, Window(start, end)))
