"""One finding's case: the plots an engineer draws by hand for its kind, from its evidence and the store.

Every finding gets the pause/ECN timeline of its ports around it (`MARGIN` before and after); then by
kind: the pause tree, the deadlock cycle, the incast fan-in, the uplink imbalance (`PLOTS`). Plots read
only documented evidence fields and the store. Detectors evolve: a field that is missing skips that one
plot with a note saying why (`draw_plot`), never the report.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import polars as pl
from matplotlib.figure import Figure

from rocescope.analysis.fabric import Fabric, netdev_of, split_ref
from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.report.plots import (
    ECN_METRICS,
    PAUSE_METRICS,
    Sender,
    Skip,
    fan_in_figure,
    port_ref_expr,
    svg_of,
    timeline_figure,
    uplink_figure,
)
from rocescope.analysis.report.topology import deadlock_arrows, pause_tree_arrows, topology_figure
from rocescope.errors import RocescopeError
from rocescope.pipeline.store import Store

log = logging.getLogger(__name__)

#: the timeline shows this much before and after a finding: the lead-up and the recovery
MARGIN = dt.timedelta(seconds=60)


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


def finding_id(row: Mapping[str, Any]) -> str:
    """A short id stable across re-runs of a window (the findings table has none): kind, start and ports
    identify a problem (`write_findings` keeps them when it replaces rows)."""
    start = row["start"]
    text = f"{row['kind']}|{start.isoformat() if isinstance(start, dt.datetime) else start}|{','.join(row['ports'])}"
    return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:8]


def evidence_of(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("evidence") or "{}"
    try:
        ev = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except ValueError:
        return {}
    return ev if isinstance(ev, dict) else {}


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
    mean = dict(tx.with_columns(port_ref_expr()).group_by("ref").agg(pl.col("rate").mean()).iter_rows())
    senders = []
    for ref, cnp in refs:
        d, p = split_ref(ref)
        bps = mean.get(f"{d}:{netdev_of(p)}")
        senders.append(Sender(ref, None if bps is None else bps * 8 / 1e9, cnp))
    receiver = ev.get("receiver")
    return senders, str(receiver) if receiver else "receiver (not in evidence)"


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
    "ecmp_imbalance": [("uplinks", "uplink imbalance", _uplinks)],
}


def draw_plot(name: str, title: str, make: Callable[[], Figure]) -> Plot:
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
    ev = evidence_of(row)
    makers = [("timeline", "pause and ECN timeline", _timeline), *PLOTS.get(row["kind"], [])]
    return [draw_plot(name, title, partial(make, store, fabric, row, ev)) for name, title, make in makers]
