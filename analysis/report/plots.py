"""The report's figures that read series and evidence: the pause/ECN timeline, the incast fan-in, the uplink
(im)balance; and what every figure shares (`new_figure`, `svg_of`, `Skip`).

Each returns a matplotlib Figure, so notebooks can show them as they are; the page inlines them as SVG
(no fonts, no timestamps: the same data gives the same bytes).
"""

from __future__ import annotations

import datetime as dt
import io
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib as mpl
import matplotlib.dates as mdates
import polars as pl
from matplotlib.figure import Figure

from rocescope.analysis.fabric import netdev_of, split_ref

PAUSE_METRICS = ("pfc_rx_pause_duration_us", "pfc_tx_pause_duration_us")
ECN_METRICS = ("tx_ecn_marked_packets", "queue_ecn_marked_packets")
MAX_SERIES = 6  # ports per timeline: more is unreadable
MAX_POINTS = 400  # per series: keeps each SVG small; buckets keep their maximum so spikes survive
MAX_UPLINK_ROWS = 16
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
#: keys typed loosely: matplotlib types them as a Literal of every rc name
RC: dict[Any, Any] = {"svg.fonttype": "none", "svg.hashsalt": "rocescope", "font.size": 8.5, "axes.titlesize": 9.5}


class Skip(Exception):
    """A plot that cannot be drawn from what the finding carries or the store holds; the text says why."""


def new_figure(width: float, height: float) -> Figure:
    with mpl.rc_context(RC):
        return Figure(figsize=(width, height), layout="constrained")


_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)  # RDF boilerplate: bytes, and URLs


def svg_of(fig: Figure) -> str:
    """The figure as an inline <svg> element (no XML prolog, no timestamp: same data, same bytes)."""
    buf = io.StringIO()
    with mpl.rc_context(RC):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = _METADATA.sub("", buf.getvalue())
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def _downsample(frame: pl.DataFrame, keys: Sequence[str], value: str) -> pl.DataFrame:
    """At most MAX_POINTS per series: the maximum per time bucket (a 1-s spike must stay visible)."""
    if frame.is_empty():
        return frame
    span = (frame["ts"].max() - frame["ts"].min()).total_seconds()  # type: ignore[operator, union-attr]
    every = max(1, math.ceil(span / MAX_POINTS))
    if every <= 1:
        return frame
    return (
        frame.with_columns(pl.col("ts").dt.truncate(f"{every}s"))
        .group_by(*keys, "ts")
        .agg(pl.col(value).max())
        .sort(*keys, "ts")
    )


def port_ref_expr() -> pl.Expr:
    """`device:port` of a rates row, per-port sub-counters (`mlx5_0/1`) folded into their device (`mlx5_0`)."""
    return pl.concat_str("device", pl.lit(":"), pl.col("port").str.split("/").list.first()).alias("ref")


def _series(rates: pl.DataFrame, refs: Sequence[str], priority: int) -> pl.DataFrame:
    """The rates of the refs' ports (`device:port`; RDMA ports `mlx5_0/1` count for their netdev), on the
    finding's priority (and the port-wide -1 rows), one value per (ref, metric, ts)."""
    want = [f"{d}:{netdev_of(p)}" for d, p in map(split_ref, refs)]
    rows = rates.with_columns(port_ref_expr()).filter(pl.col("ref").is_in(want))
    if priority >= 0:
        rows = rows.filter(pl.col("priority").is_in([priority, -1]))
    # pause is a share of time (max over priorities when the finding names none); ECN marks add up
    pause = rows.filter(pl.col("metric").is_in(PAUSE_METRICS)).group_by("ref", "metric", "ts").agg(pl.col("rate").max())
    ecn = rows.filter(pl.col("metric").is_in(ECN_METRICS)).group_by("ref", "metric", "ts").agg(pl.col("rate").sum())
    return _downsample(pl.concat([pause, ecn]), ["ref", "metric"], "rate")


def timeline_figure(
    rates: pl.DataFrame, refs: Sequence[str], priority: int, start: dt.datetime, end: dt.datetime, title: str = ""
) -> Figure:
    """Paused share (rx solid, tx dashed) and ECN marks per second of the refs' ports, the finding shaded."""
    data = _series(rates, refs, priority)
    if data.is_empty():
        raise Skip(f"no pause or ECN counters for {', '.join(refs[:4])} around the finding")
    active = data.group_by("ref").agg(pl.col("rate").max().alias("peak"))
    order = {r: i for i, r in enumerate(refs)}
    shown = sorted(active.filter(pl.col("peak") > 0)["ref"].to_list(), key=lambda r: order.get(r, 99))[:MAX_SERIES]
    fig = new_figure(9.5, 4.2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    panels = [
        (top, PAUSE_METRICS, 1e-4, "paused (% of time)"),
        (bottom, ECN_METRICS, 1.0, "ECN marked (pkts/s)"),
    ]
    for ax, metrics, scale, label in panels:
        ax.axvspan(start, end, color="#f4cccc", alpha=0.5, lw=0, label="finding")
        drew = False
        for i, ref in enumerate(shown):
            for metric, style in zip(metrics, ("-", "--"), strict=True):
                s = data.filter((pl.col("ref") == ref) & (pl.col("metric") == metric)).sort("ts")
                if s.is_empty() or not (s["rate"] > 0).any():
                    continue
                short = metric.split("_")[1] if metric.startswith("pfc") else metric.split("_")[0]
                ax.plot(
                    s["ts"].to_list(),
                    (s["rate"] * scale).to_list(),
                    style,
                    color=PALETTE[i % len(PALETTE)],
                    lw=1.3 if style == "-" else 1.6,
                    zorder=2 if style == "-" else 3,
                    label=f"{ref} {short}",
                )
                drew = True
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if drew:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        else:
            ax.text(0.5, 0.5, "none on these ports", transform=ax.transAxes, ha="center", va="center", color="gray")
    bottom.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=dt.UTC))  # type: ignore[no-untyped-call]
    bottom.set_xlabel("UTC")
    top.set_title(title or "PFC pause and ECN marking around the finding", loc="left")
    return fig


@dataclass(frozen=True)
class Sender:
    ref: str
    gbps: float | None
    cnp_per_s: float | None


def fan_in_figure(senders: Sequence[Sender], receiver: str, title: str) -> Figure:
    """Senders on the left, the receiver on the right; a line's width is the sender's transmit rate."""
    if not senders:
        raise Skip("evidence lists no senders")
    n = len(senders)
    fig = new_figure(9.5, max(2.4, 0.32 * n + 1.0))
    ax = fig.add_subplot()
    top = max((s.gbps or 0.0 for s in senders), default=0.0)
    for i, s in enumerate(senders):
        y = n - 1 - i
        width = 1.0 + 7.0 * (s.gbps or 0.0) / top if top > 0 else 2.0
        ax.annotate(
            "", xy=(0.78, (n - 1) / 2), xytext=(0.30, y),
            arrowprops={"arrowstyle": "-|>", "lw": width, "color": PALETTE[i % len(PALETTE)], "alpha": 0.75,
                        "shrinkA": 2, "shrinkB": 10},
        )  # fmt: skip
        rate = "" if s.gbps is None else f"{s.gbps:.1f} Gb/s"
        cnp = "" if s.cnp_per_s is None else f"{s.cnp_per_s:,.0f} CNP/s"
        ax.text(0.29, y, f"{s.ref}  {' · '.join(x for x in (rate, cnp) if x)}", ha="right", va="center", fontsize=7.5)
    ax.scatter([0.8], [(n - 1) / 2], s=160, color="#d62728", zorder=3)
    ax.text(0.82, (n - 1) / 2, receiver, ha="left", va="center", fontweight="bold")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(-0.8, n - 0.2)
    ax.axis("off")
    ax.set_title(title, loc="left")
    return fig


def uplink_figure(groups: Sequence[tuple[str, Sequence[tuple[str, float]]]], title: str) -> Figure:
    """One 100% bar per group of parallel links (a leaf's uplinks, a spine's links to one leaf): the
    share of the bytes each member carried, and the fair share as ticks. ECMP should make them equal."""
    rows = [(label, members) for label, members in groups if len(members) > 1 and sum(b for _, b in members) > 0]
    if not rows:
        raise Skip("no transmitted bytes on groups of parallel uplinks in the window")
    if len(rows) > MAX_UPLINK_ROWS:
        title += f" (first {MAX_UPLINK_ROWS} of {len(rows)} groups)"
        rows = rows[:MAX_UPLINK_ROWS]
    fig = new_figure(9.5, max(1.8, 0.36 * len(rows) + 1.1))
    ax = fig.add_subplot()
    for y, (_label, members) in enumerate(reversed(rows)):
        total = sum(b for _, b in members)
        left = 0.0
        for k, (port, b) in enumerate(members):
            share = b / total
            ax.barh(y, share, left=left, color=PALETTE[k % len(PALETTE)], edgecolor="white", height=0.7)
            if share >= 0.07:
                ax.text(left + share / 2, y, f"{port} {share:.0%}", ha="center", va="center", fontsize=6.5, color="w")
            left += share
        for k in range(1, len(members)):
            ax.plot([k / len(members)] * 2, [y - 0.4, y + 0.4], color="black", lw=0.8, ls=":")
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)])
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:.0%}")
    ax.set_xlabel("share of tx bytes (dotted: equal shares)")
    ax.set_title(title, loc="left")
    return fig
