"""The HTML incident report: one self-contained page per incident review, readable offline.

The page holds the findings per job (worst first) and, per finding, the plots an engineer draws by hand
during an incident: the pause/ECN timeline of its ports around it, the pause tree or deadlock cycle on
the leaf-spine topology, the incast fan-in, the uplink (im)balance. Everything is inline: plots are SVG
drawn here with matplotlib (no JavaScript, no fonts, no network at view time; a plot is tens of KB where
an interactive plotly page would carry ~4 MB of JS), so the file can be mailed, attached to a ticket or
opened on an air-gapped jump host.

Plots read only documented evidence fields and the store. Detectors evolve: a field that is missing
skips that one plot with a note saying why, never the report.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import io
import json
import logging
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import matplotlib as mpl
import matplotlib.dates as mdates
import polars as pl
from matplotlib.figure import Figure

from rocescope.analysis.fabric import Fabric, netdev_of, split_ref
from rocescope.analysis.findings import SEVERITIES
from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.present import NO_JOB, by_job, load_findings
from rocescope.errors import ConfigError, RocescopeError
from rocescope.pipeline.store import Store

__all__ = [
    "Case",
    "Plot",
    "Report",
    "Skip",
    "build_report",
    "fan_in_figure",
    "finding_id",
    "timeline_figure",
    "topology_figure",
    "uplink_figure",
    "write_report",
]

log = logging.getLogger(__name__)

PAUSE_METRICS = ("pfc_rx_pause_duration_us", "pfc_tx_pause_duration_us")
ECN_METRICS = ("tx_ecn_marked_packets", "queue_ecn_marked_packets")
#: the timeline shows this much before and after a finding: the lead-up and the recovery
MARGIN = dt.timedelta(seconds=60)
MAX_SERIES = 6  # ports per timeline: more is unreadable
MAX_POINTS = 400  # per series: keeps each SVG small; buckets keep their maximum so spikes survive
MAX_DRAWN_HOSTS = 48  # beyond this the topology draws only the hosts a finding involves
MAX_UPLINK_ROWS = 16
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
#: keys typed loosely: matplotlib types them as a Literal of every rc name
RC: dict[Any, Any] = {"svg.fonttype": "none", "svg.hashsalt": "rocescope", "font.size": 8.5, "axes.titlesize": 9.5}


class Skip(Exception):
    """A plot that cannot be drawn from what the finding carries or the store holds; the text says why."""


@dataclass(frozen=True)
class Plot:
    """One plot of the page: its SVG, or the reason it was skipped."""

    name: str
    title: str
    svg: str = ""
    note: str = ""

    @property
    def drawn(self) -> bool:
        return bool(self.svg)


@dataclass
class Case:
    """One finding with its plots."""

    id: str
    row: Mapping[str, Any]
    plots: list[Plot] = field(default_factory=list)


@dataclass
class Report:
    html: str
    rows: list[dict[str, Any]]
    cases: list[Case]
    overview: list[Plot]
    not_drawn: int = 0  # findings listed but without a case section (beyond max_cases)

    @property
    def plots(self) -> list[Plot]:
        return [p for p in [*self.overview, *(p for c in self.cases for p in c.plots)] if p.drawn]

    @property
    def skipped(self) -> list[Plot]:
        return [p for p in [*self.overview, *(p for c in self.cases for p in c.plots)] if not p.drawn]


def finding_id(row: Mapping[str, Any]) -> str:
    """A short id stable across re-runs of a window (the findings table has none): kind, start and ports
    identify a problem (`write_findings` keeps them when it replaces rows)."""
    start = row["start"]
    text = f"{row['kind']}|{start.isoformat() if isinstance(start, dt.datetime) else start}|{','.join(row['ports'])}"
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:8]


def _evidence(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("evidence") or "{}"
    try:
        ev = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except ValueError:
        return {}
    return ev if isinstance(ev, dict) else {}


def _rank(row: Mapping[str, Any]) -> tuple[int, float]:
    sev = row["severity"]
    return (-(SEVERITIES.index(sev) if sev in SEVERITIES else 0), -float(row["score"]))


# --- figures (each returns a matplotlib Figure, so notebooks can show them as they are)


def _figure(width: float, height: float) -> Figure:
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


def _ref_expr() -> pl.Expr:
    """`device:port` of a rates row, per-port sub-counters (`mlx5_0/1`) folded into their device (`mlx5_0`)."""
    return pl.concat_str("device", pl.lit(":"), pl.col("port").str.split("/").list.first()).alias("ref")


def _series(rates: pl.DataFrame, refs: Sequence[str], priority: int) -> pl.DataFrame:
    """The rates of the refs' ports (`device:port`; RDMA ports `mlx5_0/1` count for their netdev), on the
    finding's priority (and the port-wide -1 rows), one value per (ref, metric, ts)."""
    want = [f"{d}:{netdev_of(p)}" for d, p in map(split_ref, refs)]
    rows = rates.with_columns(_ref_expr()).filter(pl.col("ref").is_in(want))
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
    fig = _figure(9.5, 4.2)
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
class Arrow:
    """A highlighted directed edge between devices: `src` pauses (or sends to) `dst`."""

    src: str
    dst: str
    color: str
    label: str = ""
    dashed: bool = False


def _layout(fabric: Fabric, keep: set[str]) -> tuple[dict[str, tuple[float, float]], int]:
    """Spines on top, leaves in the middle, hosts below grouped by their leaf. Returns the positions and
    how many hosts were left out (large fabrics: only the hosts in `keep` are drawn)."""
    leaves = sorted(fabric.leaves)
    leaf_rank = {lf: i for i, lf in enumerate(leaves)}
    hosts = sorted(
        fabric.hosts & {d for d, _ in fabric.peers},
        key=lambda h: (
            min((leaf_rank.get(pd, 99) for (d, _), (pd, _) in fabric.peers.items() if d == h), default=99),
            h,
        ),
    )
    left_out = 0
    if len(hosts) > MAX_DRAWN_HOSTS:
        kept = [h for h in hosts if h in keep]
        left_out, hosts = len(hosts) - len(kept), kept
    pos: dict[str, tuple[float, float]] = {}
    for y, row in ((2.0, sorted(fabric.spines)), (1.0, leaves), (0.0, hosts)):
        for i, name in enumerate(row):
            pos[name] = ((i + 0.5) / len(row), y)
    return pos, left_out


def topology_figure(fabric: Fabric, arrows: Sequence[Arrow], title: str) -> Figure:
    """The leaf-spine topology from `links`, the arrows drawn over it (curved, so A->B and B->A differ)."""
    if not fabric.peers:
        raise Skip("no links (LLDP adjacency) in the store: the topology cannot be drawn")
    involved = {a.src for a in arrows} | {a.dst for a in arrows}
    pos, left_out = _layout(fabric, involved)
    missing = sorted(involved - set(pos))
    hosts_drawn = sum(1 for _, y in pos.values() if y == 0)
    fig = _figure(9.5, 4.4 if hosts_drawn <= 24 else 5.0)
    ax = fig.add_subplot()
    pairs = {tuple(sorted((d, pd))) for (d, _), (pd, _) in fabric.peers.items() if d in pos and pd in pos}
    for one, other in sorted(pairs):
        (x1, y1), (x2, y2) = pos[one], pos[other]
        ax.plot([x1, x2], [y1, y2], color="#c8c8c8", lw=0.6, zorder=1)
    for name, (x, y) in pos.items():
        hit = name in involved
        marker = {2.0: "s", 1.0: "D", 0.0: "o"}[y]
        ax.scatter(
            [x], [y], s=90 if y else 40, marker=marker, zorder=3,
            color="#d62728" if hit else "#6b8fb5", edgecolors="black" if hit else "none",
        )  # fmt: skip
        vertical = y == 0 and hosts_drawn > 8
        ax.text(
            x, y + (0.13 if y else -0.1), name, ha="center", va="bottom" if y else "top",
            rotation=90 if vertical else 0, fontsize=6.5 if vertical else 7.5,
            fontweight="bold" if hit else "normal",
        )  # fmt: skip
    for a in arrows:
        if a.src not in pos or a.dst not in pos or a.src == a.dst:
            continue
        ax.annotate(
            "",
            xy=pos[a.dst],
            xytext=pos[a.src],
            arrowprops={
                "arrowstyle": "-|>,head_length=0.6,head_width=0.3",
                "color": a.color,
                "lw": 2.2,
                "linestyle": "--" if a.dashed else "-",
                "connectionstyle": "arc3,rad=0.18",
                "shrinkA": 7,
                "shrinkB": 7,
            },
            zorder=4,
        )
    labels = list(dict.fromkeys((a.label, a.color, a.dashed) for a in arrows if a.label))
    for label, color, dashed in labels:
        ax.plot([], [], "--" if dashed else "-", color=color, lw=2.2, label=label)
    if labels:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False, fontsize=7.5)
    notes = []
    if left_out:
        notes.append(f"{left_out} uninvolved hosts not drawn")
    if missing:
        notes.append(f"not in the topology: {', '.join(missing[:4])}")
    if notes:
        ax.text(0.0, -0.02, "; ".join(notes), transform=ax.transAxes, fontsize=7, color="gray", va="top")
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.75 if hosts_drawn > 8 else -0.4, 2.45)
    ax.set_yticks([0, 1, 2], ["hosts", "leaves", "spines"])
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(title, loc="left")
    return fig


def _device(ref: Any) -> str:
    if not isinstance(ref, str) or not ref:
        raise Skip(f"evidence names no device ({ref!r})")
    return split_ref(ref)[0]


def pause_tree_arrows(ev: Mapping[str, Any]) -> list[Arrow]:
    """pfc_storm evidence: `tree` is a list of {asserter, paused} (`device:port`), the root's edge first."""
    tree = ev.get("tree")
    if not isinstance(tree, list) or not tree:
        raise Skip("evidence has no pause tree (`tree`)")
    root = ev.get("root") or (tree[0].get("asserter") if isinstance(tree[0], dict) else None)
    out = []
    for edge in tree:
        if not isinstance(edge, dict):
            raise Skip("evidence `tree` entries are not {asserter, paused} objects")
        from_root = edge.get("asserter") == root
        out.append(
            Arrow(
                _device(edge.get("asserter")),
                _device(edge.get("paused")),
                "#d62728" if from_root else "#ff7f0e",
                "pause from the root" if from_root else "pause spread (asserter -> paused)",
            )
        )
    return out


def deadlock_arrows(ev: Mapping[str, Any]) -> list[Arrow]:
    """pfc_deadlock evidence: `cycle` is a list of {asserter, paused}; `victims` (optional) likewise."""
    cycle = ev.get("cycle")
    if not isinstance(cycle, list) or len(cycle) < 2:
        raise Skip("evidence has no deadlock cycle (`cycle` with at least two edges)")
    out = []
    for edge in cycle:
        if not isinstance(edge, dict):
            raise Skip("evidence `cycle` entries are not {asserter, paused} objects")
        out.append(Arrow(_device(edge.get("asserter")), _device(edge.get("paused")), "#d62728", "cycle"))
    for edge in ev.get("victims") or []:
        if isinstance(edge, dict) and edge.get("asserter") and edge.get("paused"):
            src, dst = _device(edge["asserter"]), _device(edge["paused"])
            out.append(Arrow(src, dst, "#ff7f0e", "paused behind the loop", dashed=True))
    return out


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
    fig = _figure(9.5, max(2.4, 0.32 * n + 1.0))
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
    fig = _figure(9.5, max(1.8, 0.36 * len(rows) + 1.1))
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


# --- data for the figures


def uplink_groups(frames: Frames, fabric: Fabric, devices: Iterable[str]) -> list[tuple[str, list[tuple[str, float]]]]:
    """tx bytes over the frames' window per member of each group of parallel fabric links: a leaf's
    uplinks, and a spine's links to each leaf (polarization shows there)."""
    totals = frames.totals(["tx_bytes"], max(1.0, frames.window.seconds + 1), roles=["switch"])
    sent = {(d, p): float(b) for d, p, b in totals.group_by("device", "port").agg(pl.col("delta").sum()).iter_rows()}
    groups: list[tuple[str, list[tuple[str, float]]]] = []
    for dev in devices:
        if dev in fabric.leaves:
            ups = [p for p in fabric.ports_of(dev) if fabric.port_kind(dev, p) == "uplink"]
            groups.append((f"{dev} uplinks", [(p, sent.get((dev, p), 0.0)) for p in ups]))
        elif dev in fabric.spines:
            by_leaf: dict[str, list[tuple[str, float]]] = {}
            for p in fabric.ports_of(dev):
                peer = fabric.peer(dev, p)
                if peer is not None and peer[0] in fabric.leaves:
                    by_leaf.setdefault(peer[0], []).append((p, sent.get((dev, p), 0.0)))
            groups += [(f"{dev} -> {leaf}", members) for leaf, members in sorted(by_leaf.items())]
    return groups


def top_leaves(frames: Frames, fabric: Fabric, n: int = 8) -> list[str]:
    """The leaves whose uplinks carried the most bytes over the frames' window."""
    groups = uplink_groups(frames, fabric, sorted(fabric.leaves))
    busiest = sorted(groups, key=lambda g: -sum(b for _, b in g[1]))
    return [label.removesuffix(" uplinks") for label, members in busiest[:n] if sum(b for _, b in members) > 0]


def incast_senders(frames: Frames, ev: Mapping[str, Any]) -> tuple[list[Sender], str]:
    """incast/microburst evidence: `senders` ({nic: host:netdev, port, cnp_handled_per_s} or plain refs)
    and `receiver`; transmit rates are the senders' NIC tx_bytes over the finding."""
    raw = ev.get("senders")
    if not isinstance(raw, list) or not raw:
        raise Skip("evidence lists no `senders`")
    refs: list[tuple[str, float | None]] = []
    for s in raw:
        if isinstance(s, str):
            refs.append((s, None))
        elif isinstance(s, dict) and (s.get("nic") or s.get("port")):
            cnp = s.get("cnp_handled_per_s")
            refs.append((str(s.get("nic") or s.get("port")), float(cnp) if isinstance(cnp, int | float) else None))
    if not refs:
        raise Skip("evidence `senders` entries name no NIC or port")
    hosts = sorted({split_ref(r)[0] for r, _ in refs})
    tx = frames.rates(["tx_bytes"], devices=hosts)
    mean = dict(tx.with_columns(_ref_expr()).group_by("ref").agg(pl.col("rate").mean()).iter_rows())
    senders = []
    for ref, cnp in refs:
        d, p = split_ref(ref)
        bps = mean.get(f"{d}:{netdev_of(p)}")
        senders.append(Sender(ref, None if bps is None else bps * 8 / 1e9, cnp))
    receiver = ev.get("receiver")
    return senders, str(receiver) if receiver else "receiver (not in evidence)"


# --- cases


PlotMaker = Callable[[Store, Fabric, Mapping[str, Any], dict[str, Any]], Figure]


def _timeline(store: Store, _fabric: Fabric, row: Mapping[str, Any], _ev: dict[str, Any]) -> Figure:
    start, end = row["start"], row["end"]
    refs = list(row["ports"]) or list(row["devices"])
    if not refs:
        raise Skip("the finding names no ports")
    frames = Frames(store, Window(start - MARGIN, max(end, start + dt.timedelta(seconds=1)) + MARGIN))
    devices = sorted({split_ref(r)[0] for r in refs})
    rates = frames.rates([*PAUSE_METRICS, *ECN_METRICS], devices=devices)
    return timeline_figure(rates, refs, int(row["priority"]), start, end)


def _pause_tree(_store: Store, fabric: Fabric, row: Mapping[str, Any], ev: dict[str, Any]) -> Figure:
    arrows = pause_tree_arrows(ev)
    return topology_figure(fabric, arrows, f"pause tree from {ev.get('root') or arrows[0].src}")


def _deadlock(_store: Store, fabric: Fabric, row: Mapping[str, Any], ev: dict[str, Any]) -> Figure:
    arrows = deadlock_arrows(ev)
    cycle = sum(1 for a in arrows if not a.dashed)
    return topology_figure(fabric, arrows, f"deadlock cycle of {cycle} pause edges on priority {row['priority']}")


def _fan_in(store: Store, _fabric: Fabric, row: Mapping[str, Any], ev: dict[str, Any]) -> Figure:
    end = max(row["end"], row["start"] + dt.timedelta(seconds=1))
    senders, receiver = incast_senders(Frames(store, Window(row["start"], end)), ev)
    return fan_in_figure(senders, receiver, f"fan-in: {len(senders)} senders -> {receiver} (mean over the finding)")


def _uplinks(store: Store, fabric: Fabric, row: Mapping[str, Any], _ev: dict[str, Any]) -> Figure:
    devices = [d for d in row["devices"] if d in fabric.leaves or d in fabric.spines]
    if not devices:
        raise Skip("the finding names no leaf or spine of the topology")
    end = max(row["end"], row["start"] + dt.timedelta(seconds=1))
    groups = uplink_groups(Frames(store, Window(row["start"], end)), fabric, devices)
    return uplink_figure(groups, "tx bytes share of parallel links during the finding")


#: plots per finding kind, after the timeline every finding gets
PLOTS: dict[str, list[tuple[str, str, PlotMaker]]] = {
    "pfc_storm": [("pause_tree", "pause tree", _pause_tree)],
    "pfc_deadlock": [("deadlock_cycle", "deadlock cycle", _deadlock)],
    "incast": [("fan_in", "incast fan-in", _fan_in)],
    "microburst": [("fan_in", "senders behind the burst", _fan_in)],
    "polarization": [("uplinks", "uplink imbalance", _uplinks)],
}


def _plot(name: str, title: str, make: Callable[[], Figure]) -> Plot:
    """Draw one plot; a Skip, or a failure on evidence shaped unlike what it expects (detectors evolve) or
    in the store, costs that plot only, and its note says why."""
    try:
        return Plot(name, title, svg=svg_of(make()))
    except Skip as why:
        return Plot(name, title, note=str(why))
    except (RocescopeError, KeyError, TypeError, ValueError) as exc:
        log.warning("report: %s plot failed: %s: %s", name, type(exc).__name__, exc)
        return Plot(name, title, note=f"failed: {type(exc).__name__}: {exc}")


def case_plots(store: Store, fabric: Fabric, row: Mapping[str, Any]) -> list[Plot]:
    ev = _evidence(row)
    makers = [("timeline", "pause and ECN timeline", _timeline), *PLOTS.get(row["kind"], [])]
    return [_plot(name, title, partial(make, store, fabric, row, ev)) for name, title, make in makers]


# --- the page


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
main{max-width:1180px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:22px;margin:8px 0 2px} h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #d9dde3}
h3{font-size:15px;margin:18px 0 6px} .meta{color:#5b6472;margin:0 0 12px}
table{border-collapse:collapse;width:100%;background:#fff;margin:4px 0 14px;font-size:13px}
th,td{border-bottom:1px solid #e4e7eb;padding:5px 8px;text-align:left;vertical-align:top}
th{background:#eef1f5;font-weight:600} td.id a{font-family:ui-monospace,monospace}
.sev{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;font-weight:600}
.critical{background:#fde2e1;color:#a4161a}.warning{background:#fff1c2;color:#7a5200}.info{background:#e7ecf3;color:#445}
section.case{background:#fff;border:1px solid #dfe3e8;border-radius:6px;padding:10px 16px;margin:14px 0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:6px 0 10px;font-size:13px}
dt{color:#5b6472} dd{margin:0}
figure.plot{margin:10px 0;overflow-x:auto} figure.plot svg{max-width:100%;height:auto}
figcaption{font-size:12px;color:#5b6472} p.note{color:#8a6d00;font-style:italic;font-size:13px}
pre{background:#f3f4f6;padding:8px;overflow:auto;max-height:320px;font-size:12px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _when(ts: dt.datetime) -> str:
    return f"{ts:%Y-%m-%d %H:%M:%S}"


def _where(row: Mapping[str, Any]) -> str:
    ports = list(row["ports"])
    return ", ".join(ports[:3]) + (f" +{len(ports) - 3}" if len(ports) > 3 else "") or ", ".join(row["devices"][:3])


def _sev(sev: str) -> str:
    return f'<span class="sev {_e(sev)}">{_e(sev)}</span>'


def _plot_html(p: Plot, fid: str) -> str:
    if not p.drawn:
        return f'<p class="note" data-skipped="{_e(p.name)}">{_e(p.title)} not drawn: {_e(p.note)}</p>'
    return (
        f'<figure class="plot" data-plot="{_e(p.name)}" data-finding="{_e(fid)}">{p.svg}'
        f"<figcaption>{_e(p.title)}</figcaption></figure>"
    )


def _table(rows: Sequence[Mapping[str, Any]], drawn: set[str]) -> str:
    out = ["<table><thead><tr><th>id</th><th>severity</th><th>kind</th><th>start (UTC)</th><th>for</th>"
           "<th>where</th><th>what</th></tr></thead><tbody>"]  # fmt: skip
    for r in rows:
        fid = finding_id(r)
        link = f'<a href="#case-{fid}">{fid}</a>' if fid in drawn else fid
        seconds = (r["end"] - r["start"]).total_seconds()
        out.append(
            f'<tr><td class="id">{link}</td><td>{_sev(r["severity"])}</td><td>{_e(r["kind"])}</td>'
            f"<td>{_when(r['start'])}</td><td>{seconds:.0f} s</td><td>{_e(_where(r))}</td>"
            f"<td>{_e(r['summary'])}</td></tr>"
        )
    out.append("</tbody></table>")
    return "".join(out)


def _case_html(case: Case) -> str:
    r = case.row
    items = [
        ("id", case.id),
        ("window", f"{_when(r['start'])} .. {_when(r['end'])} UTC ({(r['end'] - r['start']).total_seconds():.0f} s)"),
        ("jobs", ", ".join(r["job_ids"]) or NO_JOB),
        ("devices", ", ".join(r["devices"])),
        ("ports", ", ".join(r["ports"])),
        ("priority", "none" if r["priority"] < 0 else r["priority"]),
        ("score", f"{float(r['score']):.1f}"),
        ("detector", r.get("detector") or "?"),
    ]
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    evidence = json.dumps(_evidence(r), indent=2, sort_keys=True)
    return (
        f'<section class="case" id="case-{_e(case.id)}" data-kind="{_e(r["kind"])}">'
        f"<h3>{_sev(r['severity'])} {_e(r['kind'])}: {_e(r['summary'])}</h3><dl>{dl}</dl>"
        + "".join(_plot_html(p, case.id) for p in case.plots)
        + f"<details><summary>evidence</summary><pre>{_e(evidence)}</pre></details></section>"
    )


def render_html(
    rows: Sequence[Mapping[str, Any]],
    cases: Sequence[Case],
    overview: Sequence[Plot],
    header: Mapping[str, str],
    not_drawn: int = 0,
) -> str:
    """The page. `header`: plain-text title, meta line and what an empty page says there is none of."""
    drawn = {c.id for c in cases}
    parts = [f'<h1>{_e(header["title"])}</h1><p class="meta">{_e(header["meta"])}</p>']
    if not rows:
        parts.append(f"<p>No findings {_e(header['empty'])}.</p>")
    else:
        counts = {s: sum(r["severity"] == s for r in rows) for s in reversed(SEVERITIES)}
        kinds = sorted({r["kind"] for r in rows})
        parts.append(
            f"<p>{len(rows)} finding(s): "
            + ", ".join(f"{_sev(s)} {n}" for s, n in counts.items() if n)
            + f"; kinds: {_e(', '.join(kinds))}.</p><h2>Findings by job</h2>"
        )
        for job, group in by_job(rows):
            parts.append(f"<h3>{_e(job)}: {len(group)} finding(s)</h3>{_table(group, drawn)}")
        if overview:
            parts.append("<h2>Fabric</h2>" + "".join(_plot_html(p, "") for p in overview))
        parts.append("<h2>Cases</h2>" + "".join(_case_html(c) for c in cases))
        if not_drawn:
            parts.append(f'<p class="note">{not_drawn} less severe finding(s) have no case section.</p>')
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{_e(header['title'])}</title><style>{CSS}</style></head><body><main>"
        + "".join(parts)
        + "</main></body></html>\n"
    )


def build_report(
    store: Store,
    job: str | None = None,
    since: dt.datetime | None = None,
    finding: str | None = None,
    *,
    max_cases: int = 25,
    now: dt.datetime | None = None,
) -> Report:
    """Load the findings still open at or after `since` (default: the last 24 h), optionally of one job or
    one finding (its id, or a prefix of it), and draw them."""
    now = now or dt.datetime.now(dt.UTC)
    since = since or now - dt.timedelta(hours=24)
    rows = load_findings(store, since, job or "")
    if finding:
        rows = [r for r in rows if finding_id(r).startswith(finding.lower())]
        if not rows:
            raise ConfigError(f"no finding with id {finding!r} open since {_when(since)} UTC (ids: `rocescope report`)")
    overview: list[Plot] = []
    cases: list[Case] = []
    if rows:
        span = Window(min(r["start"] for r in rows) - MARGIN, max(r["end"] for r in rows) + MARGIN)
        frames = Frames(store, span)
        fabric = Fabric.from_frames(frames)
        if not finding and fabric.leaves:
            leaves = top_leaves(frames, fabric)
            overview.append(
                _plot(
                    "uplinks",
                    f"leaf uplink balance over {span} (busiest leaves)",
                    lambda: uplink_figure(
                        uplink_groups(frames, fabric, leaves), "tx bytes share of each leaf's uplinks"
                    ),
                )
            )
        unique = sorted({finding_id(r): r for r in rows}.items(), key=lambda kv: _rank(kv[1]))
        cases = [Case(fid, r, case_plots(store, fabric, r)) for fid, r in unique[:max_cases]]
    who = f"job {job}" if job else "all jobs"
    header = {
        "title": "rocescope incident report" + (f": {job}" if job else ""),
        "meta": f"{who}; findings open since {_when(since)} UTC; generated {_when(now)} UTC from database "
        f"{getattr(store, 'database', '?')}",
        "empty": f"for {who} since {_when(since)} UTC",
    }
    not_drawn = max(0, len({finding_id(r) for r in rows}) - len(cases))
    return Report(render_html(rows, cases, overview, header, not_drawn), rows, cases, overview, not_drawn)


def write_report(
    store: Store,
    out_path: Path | str,
    job: str | None = None,
    since: dt.datetime | None = None,
    finding: str | None = None,
) -> Path:
    """Write the report (see `build_report`) to `out_path`; returns the path written."""
    report = build_report(store, job, since, finding)
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(report.html, encoding="utf-8")
    return path


_SVG = re.compile(r"<svg\b")


def count_svgs(page: str) -> int:
    """SVG elements in a page (a plot is one; for tests)."""
    return len(_SVG.findall(page))
