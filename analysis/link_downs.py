"""Links that went down, per cable: every down event either end saw (an `oper_up` dip, `link_down_events`,
`carrier_transitions`), less the ports an operator shut, grouped per cable (LLDP's, else the ports that went down
together) into outages. Read by the link-health detector (whose docstring gives the method)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

import polars as pl

from rocescope.analysis.align import as_duration, with_intervals
from rocescope.analysis.detectors.base import Context
from rocescope.analysis.detectors.device_events import Incident
from rocescope.analysis.episodes import episodes

__all__ = ["Peers", "down_events", "link_keys", "link_outages"]

Peers = Mapping[tuple[str, str], str]

OPER_UP = "oper_up"
ADMIN_UP = "admin_up"
#: How long after an operator's no-shutdown a link may take to come up (auto-negotiation, IEEE 802.3 clause 73,
#: then the PMD's link training of a 100-400G port: seconds); the peer's carrier change in that time is the shut's.
LINK_UP_S = 10.0
DOWN_COUNTERS = ("link_down_events", "carrier_transitions")


def link_keys(ctx: Context, ports: pl.DataFrame, coincident: Peers) -> pl.DataFrame:
    """(device, port) -> `link`: both ends' `device:port` refs, sorted (a port without a known peer, LLDP's or
    its downs' (`links.coincident_cables`), is a link of one end)."""
    rows = []
    for device, port in ports.select("device", "port").unique().iter_rows():
        iface = ctx.fabric.iface(device, port)  # a host's RDMA port is its netdev's cable where that is known
        peer = ctx.fabric.peer(device, iface)
        other = f"{peer[0]}:{peer[1]}" if peer else coincident.get((device, port))
        rows.append((device, port, sorted([f"{device}:{iface}"] + ([other] if other else []))))
    return pl.DataFrame(rows, schema={"device": pl.String, "port": pl.String, "link": pl.List(pl.String)}, orient="row")


def down_events(ctx: Context) -> pl.DataFrame:
    """Every link-down event in the window: device, port, start, end, downs, source, every_s (the interval of
    the series that saw it: each series is read at its own cadence, SNMP's 30 s beside gNMI's 1 s)."""
    frames = ctx.frames
    schema: dict[str, pl.DataType] = {
        "device": pl.String(),
        "port": pl.String(),
        "start": pl.Datetime("ns", "UTC"),
        "end": pl.Datetime("ns", "UTC"),
        "downs": pl.Float64(),
        "source": pl.String(),
        "every_s": pl.Float64(),
    }
    parts = [pl.DataFrame(schema=schema)]
    dips = frames.gauges_below([OPER_UP], 0.5)
    if not dips.is_empty():
        series = frames.gauges([OPER_UP], devices=sorted(set(dips["device"].to_list())))
        ever_up = series.filter(pl.col("value") >= 0.5).select("device", "port").unique()
        # a down read is down since the read before it; reads one interval apart are one down
        timed = with_intervals(series.join(ever_up, on=["device", "port"]), ["device", "port"])
        dips = timed.filter(pl.col("value") < 0.5)  # never up in the window: unused, not flapping
        eps = episodes(
            dips,
            ["device", "port"],
            gap_s=0.0,
            gap_intervals=1.5,
            aggregations=[pl.col("dt_s").median().alias("every_s")],
        )
        downs, source = pl.lit(1.0).alias("downs"), pl.lit(OPER_UP).alias("source")
        parts.append(eps.select("device", "port", "start", "end", downs, source, "every_s"))
    counted = frames.rates(list(DOWN_COUNTERS), min_rate=1e-9)
    if not counted.is_empty():
        parts.append(
            counted.select(
                "device",
                "port",
                (pl.col("ts") - as_duration(pl.col("dt_s"))).alias("start"),
                pl.col("ts").alias("end"),
                pl.col("delta").alias("downs"),  # transitions: halved per incident (`_flap_incidents`)
                pl.col("metric").alias("source"),
                pl.col("dt_s").alias("every_s"),
            )
        )
    events = pl.concat([p.cast(pl.Schema(schema)) for p in parts])
    shut = _shut(ctx)
    if events.is_empty() or shut.is_empty():
        return events
    ifaces = [ctx.fabric.iface(d, port) for d, port in events.select("device", "port").iter_rows()]
    events = events.with_row_index("_row").with_columns(pl.Series("_if", ifaces, pl.String))
    intended = events.join(shut, left_on=["device", "_if"], right_on=["device", "iface"]).filter(
        pl.col("start") <= pl.col("_until"), pl.col("end") >= pl.col("_from")
    )
    return events.join(intended.select("_row").unique(), on="_row", how="anti").drop("_row", "_if")


def _shut(ctx: Context) -> pl.DataFrame:
    """(device, iface, _from, _until): where an operator had shut a port (`admin_up` 0), on both ends of its
    cable, until the link could be up again: a shut port goes down by intent and its peer sees its carrier
    drop; neither is a flap."""
    schema: dict[str, pl.DataType] = {
        "device": pl.String(),
        "iface": pl.String(),
        "_from": pl.Datetime("ns", "UTC"),
        "_until": pl.Datetime("ns", "UTC"),
    }
    dips = ctx.frames.gauges_below([ADMIN_UP], 0.5)
    if dips.is_empty():
        return pl.DataFrame(schema=schema)
    series = ctx.frames.gauges([ADMIN_UP], devices=sorted(set(dips["device"].to_list())))
    rows = []
    shut = with_intervals(series, ["device", "port"]).filter(pl.col("value") < 0.5)
    for device, port, ts, dt_s in shut.select("device", "port", "ts", "dt_s").iter_rows():
        start, until = ts - dt.timedelta(seconds=dt_s), ts + dt.timedelta(seconds=dt_s + LINK_UP_S)
        iface = ctx.fabric.iface(device, port)
        rows.append((device, iface, start, until))
        peer = ctx.fabric.peer(device, iface)
        if peer:
            rows.append((peer[0], peer[1], start, until))
    return pl.DataFrame(rows, schema=schema, orient="row")


def _clusters(frame: pl.DataFrame, gap_s: float) -> pl.DataFrame:
    """Rows of one `link` whose spans come within `gap_s` of each other get the same `cluster`."""
    gap = pl.duration(microseconds=round(gap_s * 1e6))
    ordered = frame.sort("link", "start")
    reach = pl.col("end").cum_max().shift(1).over("link")
    new = ((pl.col("start") - reach) > gap).fill_null(True)
    return ordered.with_columns(new.cast(pl.UInt32).cum_sum().over("link").alias("cluster"))


def link_outages(ctx: Context, merge_gap_s: float, downs: pl.DataFrame, coincident: Peers) -> list[Incident]:
    """Every link that went down, its downs merged in time (`merge_gap_s`), with how many times: a flap where that
    is often enough, else one outage (part of a device event, or nothing)."""
    if downs.is_empty():
        return []
    ev = _clusters(downs.join(link_keys(ctx, downs, coincident), on=["device", "port"]), merge_gap_s)
    # carrier transitions count both directions: a down is half of them over the whole incident, so one outage
    # whose down and up land in two samples is one down, not two rounded up
    per_end = ev.group_by("link", "cluster", "device", "port", "source").agg(pl.col("downs").sum())
    per_end = per_end.with_columns(
        pl.when(pl.col("source") == "carrier_transitions").then((pl.col("downs") / 2).ceil()).otherwise("downs")
    )
    counts = per_end.group_by("link", "cluster").agg(pl.col("downs").max().alias("flaps"))
    spans = ev.group_by("link", "cluster").agg(pl.col("start").min(), pl.col("end").max())
    rows = spans.join(counts, on=["link", "cluster"]).filter(pl.col("flaps") >= 1).sort("start")
    return [
        Incident(tuple(link), start, end, int(flaps))
        for link, _, start, end, flaps in rows.select("link", "cluster", "start", "end", "flaps").iter_rows()
    ]
