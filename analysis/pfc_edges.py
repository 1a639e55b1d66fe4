"""The stalled links PFC leaves in the telemetry: which ports were held paused on a priority while they sent (almost)
nothing, by which asserter, on what evidence (pause time, the watchdog's estimate, pause frames per priority or per
interface, the NIC's own pause time, a PFC watchdog), and which switch ports were back-pressured rather than stalled.
Read by the PFC storm detector (whose docstring gives the method) and the deadlock detector."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import polars as pl

from rocescope.analysis.align import as_duration, mean_over
from rocescope.analysis.detectors.base import Context
from rocescope.analysis.episodes import episodes
from rocescope.analysis.fabric import with_ifaces

if TYPE_CHECKING:
    from rocescope.analysis.detectors.pfc_storm import StormParams

__all__ = [
    "KEYS",
    "NIC_STALL_ERROR",
    "NIC_STALL_WARNING",
    "WD_DETECTED",
    "WD_DROPS",
    "WD_RESTORED",
    "Edge",
    "backpressured",
    "stalled_edges",
]

PAUSED_US = "pfc_rx_pause_duration_us"
#: SONiC's PFC watchdog's own estimate where the ASIC has no pause timer (each watchdog poll with pause frames or a
#: paused queue counts whole: an upper bound at the poll's granularity, 200 ms by default, that needs no speed)
PAUSED_US_ESTIMATED = "pfc_rx_pause_duration_est_us"
NIC_PAUSED_US = "pfc_tx_pause_duration_us"
PAUSE_FRAMES = "pfc_rx_pause"
#: pause frames the port received, all priorities together (IEEE8021-PFC-MIB `ieee8021PfcIndications`: Arista and
#: others over SNMP count PFC per interface only)
PORT_PAUSE_FRAMES = "pfc_rx_pause_total"
WD_DETECTED, WD_RESTORED = "pfcwd_storm_detected", "pfcwd_storm_restored"
WD_STORMED = "pfcwd_stormed"
WD_DROPS = ("pfcwd_tx_dropped_packets", "pfcwd_rx_dropped_packets")
NIC_STALL_WARNING, NIC_STALL_ERROR = "pause_storm_warning_events", "pause_storm_error_events"
KEYS = ["device", "port", "priority"]
#: The fastest Ethernet port the catalog knows (bits/s): without a port's speed, its pause frames are read as
#: time at this speed, where each frame buys the least time, so the share they give is a lower bound.
FASTEST_BPS = 800e9


@dataclass(frozen=True)
class Edge:
    """One stalled episode: `paused` port held by `asserter` port on `priority`."""

    paused: tuple[str, str]
    asserter: tuple[str, str]
    priority: int
    start: dt.datetime
    end: dt.datetime
    paused_fraction: float | None  # None where the device reports no pause duration
    evidence: str  # pause_duration | pause_frames | watchdog
    watchdog: bool = False  # a PFC watchdog declared a storm or dropped packets on the queue
    every_s: float = 0.0  # the median interval of the pause reads that time it (0: timed by a watchdog only)

    def overlaps(self, other: Edge, slack_s: float = 0.0) -> bool:
        slack = dt.timedelta(seconds=slack_s)
        return self.start <= other.end + slack and other.start <= self.end + slack


def _held_paused(ctx: Context, p: StormParams) -> pl.DataFrame:
    """Samples (device, port, priority, ts, dt_s) where the port was held paused, with the evidence."""
    frames = ctx.frames

    def held(frame: pl.DataFrame, evidence: str, fraction: pl.Expr) -> pl.DataFrame:
        return frame.select(*KEYS, "ts", "dt_s", fraction.alias("paused_fraction"), pl.lit(evidence).alias("evidence"))

    unknown = pl.lit(None, pl.Float64)
    stall = pl.col("rate") >= p.min_paused_fraction * 1e6
    timed = frames.reporting(PAUSED_US)
    duration = _pause_time(ctx, p, PAUSED_US).filter(stall)
    # the device's own estimate where it has no timer; pause frames only where it gives neither
    estimated = _pause_time(ctx, p, PAUSED_US_ESTIMATED).filter(stall, ~pl.col("device").is_in(sorted(timed)))
    timed |= frames.reporting(PAUSED_US_ESTIMATED)
    pause_frames = frames.rates([PAUSE_FRAMES], min_rate=p.min_pause_frames_per_s)
    pause_frames = pause_frames.filter(~pl.col("device").is_in(sorted(timed)))
    per_priority = timed | frames.reporting(PAUSE_FRAMES)
    port_frames = frames.rates([PORT_PAUSE_FRAMES], min_rate=p.min_pause_frames_per_s)
    port_frames = port_frames.filter(~pl.col("device").is_in(sorted(per_priority))).with_columns(
        pl.lit(p.lossless_priorities[0] if p.lossless_priorities else 3, pl.Int8).alias("priority")
    )
    watchdog = frames.rates([WD_DETECTED, *WD_DROPS], min_rate=1e-9, roles=["switch"])
    return pl.concat(
        [
            held(duration, "pause_duration", pl.col("rate") / 1e6),
            held(estimated, "pause_duration_estimated", pl.col("rate") / 1e6),
            held(pause_frames, "pause_frames", pl.col("rate")),  # frames/s: read as a share once the speed is known
            held(port_frames, "port_pause_frames", pl.col("rate")),
            held(watchdog, "watchdog", unknown),
            held(_stormed(ctx), "watchdog", unknown),
            held(_nic_side(ctx, p), "nic_pause_duration", pl.col("rate") / 1e6),
        ]
    )


def _stormed(ctx: Context) -> pl.DataFrame:
    """The reads in which a PFC watchdog held a queue as stormed (SONiC `PFC_WD_STATUS`), each covering the time
    since its series' previous read; only the devices whose watchdog ever said so are read in full."""
    return ctx.frames.timed_gauges(WD_STORMED, min_value=0.5, roles=["switch"])


def _nic_side(ctx: Context, p: StormParams) -> pl.DataFrame:
    """The NIC's own account of the pause it sends, as samples of the switch port it held paused: a NIC reads
    its counters every second where a switch's may come every 10-30 s (SNMP), and one 8 s storm averaged over a
    30 s read falls below any stall bar. Rows of NICs whose cable no LLDP names are left out."""
    sent = ctx.frames.rates([NIC_PAUSED_US], min_rate=p.min_paused_fraction * 1e6, roles=["nic"])
    if sent.is_empty():
        return sent
    peers = [
        (d, port, *(ctx.fabric.peer(d, port) or (None, None)))
        for d, port in sent.select("device", "port").unique().iter_rows()
    ]
    mapping = pl.DataFrame(peers, schema=["device", "port", "peer", "peer_port"], orient="row")
    sent = sent.join(mapping, on=["device", "port"]).filter(pl.col("peer").is_not_null())
    sent = sent.with_columns(pl.min_horizontal(pl.col("rate"), pl.lit(1e6)).alias("rate"))
    return sent.drop("device", "port").rename({"peer": "device", "peer_port": "port"})


def _stalled(ctx: Context, p: StormParams, held: pl.DataFrame) -> pl.DataFrame:
    """The held samples whose port transmitted (almost) nothing meanwhile, or whose watchdog acted."""
    fabric = ctx.fabric
    devices = sorted(set(held["device"].to_list()))
    tx = ctx.frames.rates(["tx_bytes"], devices=devices)
    # ports whose counters name the RDMA device count against their netdev's transmit counter
    rows = with_ifaces(held, fabric)
    tx = tx.with_columns(pl.col("port").alias("iface"))
    rows = mean_over(rows, tx, ["device", "iface"], "tx_Bps", late_reads=0.5)
    speeds = ctx.speeds.frame(devices).select("device", pl.col("port").alias("iface"), "speed_Bps")
    rows = rows.join(speeds, on=["device", "iface"], how="left")
    # pause frames as a share of time: each frame buys 65535 quanta (512 bit times) and is refreshed after a
    # fraction of that (IEEE 802.1Qbb; switches refresh at about half), so frames/s x refresh = paused share;
    # without a speed, at the fastest speed (a lower bound: a frame buys the least time there), marked so
    speed_bps = pl.coalesce(pl.col("speed_Bps") * 8, pl.lit(FASTEST_BPS))
    refresh_s = p.pause_refresh_fraction * 65535 * 512 / speed_bps
    frames = pl.col("evidence").is_in(["pause_frames", "port_pause_frames"])
    no_speed = frames & pl.col("speed_Bps").is_null()
    rows = rows.with_columns(
        pl.when(frames)
        .then(pl.min_horizontal(pl.col("paused_fraction") * refresh_s, pl.lit(1.0)))
        .otherwise(pl.col("paused_fraction")),
        pl.when(no_speed).then(pl.lit("pause_frames_no_speed")).otherwise(pl.col("evidence")).alias("evidence"),
    ).filter(~frames | (pl.col("paused_fraction") >= p.min_frames_paused_fraction))
    # with no speed the transmit rate cannot be judged: the pause evidence alone (duration, or frames enough to
    # hold even the fastest port) stands; so it does for a port that reports no transmit counter at all, but a
    # port that does and missed a read is no stall for the missing read
    counted = tx.select("device", "iface").unique().with_columns(pl.lit(True).alias("_counted"))
    rows = rows.join(counted, on=["device", "iface"], how="left")
    still = (
        (pl.col("tx_Bps").is_null() & pl.col("_counted").is_null())
        | (pl.col("tx_Bps") <= p.stall_fraction * pl.col("speed_Bps"))
        | (pl.col("speed_Bps").is_null() & (pl.col("evidence") != "watchdog"))
    )
    return rows.filter(still | (pl.col("evidence") == "watchdog")).drop("_counted")


def stalled_edges(ctx: Context, p: StormParams) -> list[Edge]:
    """Every stalled episode in the window, shared with the deadlock detector."""
    held = _held_paused(ctx, p)
    if held.is_empty():
        return []
    stalled = _stalled(ctx, p, held)
    if stalled.is_empty():
        return []
    eps = episodes(
        stalled,
        KEYS,
        gap_s=0.0,
        gap_intervals=p.gap_intervals,
        aggregations=[
            pl.col("paused_fraction").mean().alias("paused_fraction"),
            pl.col("evidence").filter(pl.col("evidence") != "watchdog").first().alias("evidence"),
            (pl.col("evidence") == "watchdog").any().alias("watchdog"),
            pl.col("dt_s").filter(pl.col("evidence") != "watchdog").median().alias("interval_s"),
            # the pause counters time it; a watchdog's queue counters (often 10 s) only confirm it
            (pl.col("ts") - as_duration(pl.col("dt_s"))).filter(pl.col("evidence") != "watchdog").min().alias("first"),
            pl.col("ts").filter(pl.col("evidence") != "watchdog").max().alias("last"),
        ],
    )
    out = []
    for d, port, prio, start, end, _n, frac, evidence, watchdog, interval, first, last in eps.iter_rows():
        if first is not None:
            start, end = first, last
        if (end - start).total_seconds() < max(p.min_seconds, 0.5 * float(interval or 0.0)):
            continue
        asserter = ctx.fabric.peer(d, port) or ("?", "?")
        paused = (d, ctx.fabric.iface(d, port))
        every = float(interval or 0.0)
        out.append(Edge(paused, asserter, int(prio), start, end, frac, evidence or "watchdog", bool(watchdog), every))
    return out


def _pause_time(ctx: Context, p: StormParams, metric: str) -> pl.DataFrame:
    """Reads of a pause-time counter (`PAUSED_US` or `PAUSED_US_ESTIMATED`) covering at least the lower of the stall
    and back-pressure bars of their interval, as shares capped at all of it: one read serves both tests."""
    floor = min(p.min_paused_fraction, p.backpressure_fraction) * 1e6
    # a share of time, at most all of it (two clocks stamp the counter and its read: 1.02 s paused in a second)
    return ctx.frames.rates([metric], min_rate=floor).with_columns(pl.min_horizontal(pl.col("rate"), pl.lit(1e6)))


def backpressured(ctx: Context, p: StormParams, stalled: Sequence[Edge]) -> list[Edge]:
    """Switch ports paused, by their own pause timer or their watchdog's estimate, for `backpressure_fraction` of
    their reads but not stalled through them, as episodes (`gap_intervals` bridged): a switch paused so is
    back-pressured, never a root, and the storm's spread reaches what it pauses through it. Reads inside a stalled
    episode of the port add nothing. Gear that counts pause frames only gives no such link (its share rests on an
    assumed refresh)."""
    reads = pl.concat([_pause_time(ctx, p, m) for m in (PAUSED_US, PAUSED_US_ESTIMATED)])
    reads = reads.filter(pl.col("role") == "switch", pl.col("rate") >= p.backpressure_fraction * 1e6)
    if reads.is_empty():
        return []
    reads = with_ifaces(reads, ctx.fabric).with_row_index("_read")
    if stalled:
        spans = pl.DataFrame(
            [(e.paused[0], e.paused[1], e.priority, e.start, e.end) for e in stalled],
            schema=["device", "iface", "priority", "_from", "_to"],
            orient="row",
        ).with_columns(
            pl.col("priority").cast(reads.schema["priority"]), pl.col("_from", "_to").cast(reads.schema["ts"])
        )
        inside = reads.join(spans, on=["device", "iface", "priority"]).filter(
            pl.col("ts") - as_duration(pl.col("dt_s")) <= pl.col("_to"), pl.col("ts") >= pl.col("_from")
        )
        reads = reads.join(inside.select("_read"), on="_read", how="anti")
    eps = episodes(
        reads,
        ["device", "iface", "priority"],
        gap_s=0.0,
        gap_intervals=p.gap_intervals,
        aggregations=[(pl.col("rate") / 1e6).mean().alias("paused_fraction")],
    )
    out = []
    for device, iface, prio, start, end, _n, frac in eps.iter_rows():
        asserter = ctx.fabric.peer(device, iface)
        if asserter is not None:
            out.append(Edge((device, iface), asserter, int(prio), start, end, float(frac), "pause_duration"))
    return out
