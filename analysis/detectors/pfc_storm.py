"""PFC storm: a port held paused on a priority, nearly the whole time, for longer than a watchdog would
allow, and the pause tree it spreads.

Method (after SONiC's PFC watchdog, which declares a storm when a queue is paused and transmits
nothing for `detection_time`, 200 ms by default, and Microsoft's "RDMA over Commodity Ethernet at
Scale", SIGCOMM 2016, on NIC pause storms):

* a *stalled edge* is a sample where port P reports it was paused (`pfc_rx_pause_duration_us`) for at
  least `min_paused_fraction` of the interval while P's transmit rate stayed below `stall_fraction`
  of its link speed; the port asserting the pause is P's LLDP peer A;
* consecutive stalled samples of one (P, priority) form an episode; an episode is kept when it lasts
  at least `min_seconds` (and at least one sampling interval, the finest a counter can show);
* an episode whose asserting device is not itself stalled meanwhile is a storm *root* (a stuck NIC,
  a switch asserting pause without cause); episodes whose asserter is stalled are the spread, joined
  to the root's tree by following asserter -> paused device. A closed loop of stalled devices has no
  root: that is a PFC deadlock (`pfc_deadlock` detector), not a storm.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import polars as pl
from pydantic import Field

from rocescope.analysis.detectors.base import Context, Detector, Params
from rocescope.analysis.episodes import episodes
from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import Frames

PAUSED_US = "pfc_rx_pause_duration_us"


class StormParams(Params):
    min_paused_fraction: float = Field(0.8, gt=0, le=1, description="Share of an interval a port must be paused.")
    stall_fraction: float = Field(0.05, ge=0, le=1, description="Transmit below this share of link speed = stalled.")
    min_seconds: float = Field(0.2, ge=0, description="Watchdog detection time.")
    critical_seconds: float = Field(10.0, gt=0, description="Storms at least this long are critical.")


@dataclass(frozen=True)
class Edge:
    """One stalled episode: `paused` port held by `asserter` port on `priority`."""

    paused: tuple[str, str]
    asserter: tuple[str, str]
    priority: int
    start: dt.datetime
    end: dt.datetime
    paused_fraction: float

    def overlaps(self, other: Edge) -> bool:
        return self.start <= other.end and other.start <= self.end


def link_speeds_bps(frames: Frames, devices: list[str]) -> dict[tuple[str, str], float]:
    """Highest reported speed of each port of the devices (for stall judgement)."""
    g = frames.gauges(["port_speed_bps"], devices=devices)
    speeds = g.group_by("device", "port").agg(pl.col("value").max())
    return {(d, p): float(v) for d, p, v in speeds.iter_rows()}


def stalled_edges(ctx: Context, p: StormParams) -> list[Edge]:
    """Every stalled episode in the window, shared with the deadlock detector."""
    frames, fabric = ctx.frames, ctx.fabric
    paused = frames.rates([PAUSED_US], min_rate=p.min_paused_fraction * 1e6)
    if paused.is_empty():
        return []
    devices = sorted(set(paused["device"].to_list()))
    peers = [fabric.peer(d, port) for d, port in paused.select("device", "port").unique().iter_rows()]
    speed = link_speeds_bps(frames, sorted({*devices, *(pd for pd, _ in filter(None, peers))}))
    tx = frames.rates(["tx_bytes"], devices=devices).select("ts", "device", "port", pl.col("rate").alias("tx_Bps"))
    rows = paused.join(tx, on=["ts", "device", "port"], how="left")

    def port_speed(device: str, port: str) -> float:
        peer = fabric.peer(device, port)
        return speed.get((device, port)) or (speed.get(peer, 0.0) if peer else 0.0)

    speeds = [port_speed(d, port) for d, port in rows.select("device", "port").iter_rows()]
    rows = rows.with_columns(pl.Series("speed_Bps", speeds, pl.Float64) / 8)
    # unknown speed or no transmit counter: the pause duration alone decides
    stalled = rows.filter(
        pl.col("tx_Bps").is_null()
        | (pl.col("speed_Bps") <= 0)
        | (pl.col("tx_Bps") <= p.stall_fraction * pl.col("speed_Bps"))
    )
    eps = episodes(
        stalled,
        ["device", "port", "priority"],
        gap_s=1.5 * ctx.poll_s,
        aggregations=[(pl.col("rate").mean() / 1e6).alias("paused_fraction")],
    )
    out = []
    min_span = max(p.min_seconds, 0.5 * ctx.poll_s)
    for d, port, prio, start, end, _n, frac in eps.iter_rows():
        if (end - start).total_seconds() < min_span:
            continue
        asserter = fabric.peer(d, port) or ("?", "?")
        out.append(Edge((d, port), asserter, int(prio), start, end, float(frac)))
    return out


def _tree(root: Edge, edges: list[Edge]) -> list[Edge]:
    """Edges reached from the root by asserter -> paused device, overlapping in time."""
    tree, frontier, seen = [root], [root], {id(root)}
    while frontier:
        parent = frontier.pop()
        for e in edges:
            same = e.asserter[0] == parent.paused[0] and e.priority == parent.priority
            if id(e) not in seen and same and e.overlaps(parent):
                seen.add(id(e))
                tree.append(e)
                frontier.append(e)
    return tree


def detect(ctx: Context, p: StormParams) -> list[Finding]:
    edges = stalled_edges(ctx, p)
    findings = []
    for e in edges:
        if any(o.paused[0] == e.asserter[0] and o.priority == e.priority and o.overlaps(e) for o in edges):
            continue  # the asserter is itself stalled: spread, or a loop
        tree = _tree(e, edges)
        start, end = ctx.clip(e.start, e.end)
        seconds = (end - start).total_seconds()
        root_ref, paused_ref = f"{e.asserter[0]}:{e.asserter[1]}", f"{e.paused[0]}:{e.paused[1]}"
        spread = sorted({t.paused[0] for t in tree[1:]} - {e.asserter[0], e.paused[0]})
        jobs = ctx.fabric.jobs_at_refs([root_ref, paused_ref], start, end)
        hurt = ctx.fabric.jobs_at_refs([f"{t.paused[0]}:{t.paused[1]}" for t in tree], start, end)
        findings.append(
            Finding(
                kind="pfc_storm",
                severity="critical" if seconds >= p.critical_seconds or spread else "warning",
                start=start,
                end=end,
                devices=(e.asserter[0], e.paused[0], *spread),
                ports=(root_ref, paused_ref),
                priority=e.priority,
                score=seconds * e.paused_fraction * (1 + len(tree) - 1),
                summary=(
                    f"PFC storm: {root_ref} held {paused_ref} paused on priority {e.priority} "
                    f"{e.paused_fraction:.0%} of the time for {seconds:.0f} s"
                    + (f"; the pause spread to {len(spread)} more device(s)" if spread else "")
                ),
                evidence={
                    "root": root_ref,
                    "paused_fraction": e.paused_fraction,
                    "tree": [
                        {
                            "asserter": f"{t.asserter[0]}:{t.asserter[1]}",
                            "paused": f"{t.paused[0]}:{t.paused[1]}",
                            "start": t.start,
                            "end": t.end,
                            "paused_fraction": t.paused_fraction,
                        }
                        for t in tree
                    ],
                    "jobs_paused_by_spread": sorted(set(hurt) - set(jobs)),
                },
                job_ids=tuple(jobs),
            )
        )
    return findings


DETECTOR = Detector("pfc_storm", "1", ("pfc_storm",), StormParams, detect)
