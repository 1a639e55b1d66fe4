"""The leaf-spine topology with a finding's edges drawn over it: a pfc_storm's pause tree, a pfc_deadlock's
cycle (and the victims paused behind it), from their evidence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure

from rocescope.analysis.fabric import Fabric, split_ref
from rocescope.analysis.report.plots import Skip, new_figure

MAX_DRAWN_HOSTS = 48  # beyond this the topology draws only the hosts a finding involves


@dataclass(frozen=True)
class Arrow:
    """A highlighted directed edge between devices: `src` pauses (or sends to) `dst`."""

    src: str
    dst: str
    color: str
    label: str = ""
    dashed: bool = False


def _layout(fabric: Fabric, keep: set[str]) -> tuple[dict[str, tuple[float, float]], int]:
    """Super-spines (a 3-tier fabric's) on top, then spines, leaves, and hosts below grouped by their leaf. Returns
    the positions and how many hosts were left out (large fabrics: only the hosts in `keep` are drawn)."""
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
    tiers = ((3.0, sorted(fabric.super_spines)), (2.0, sorted(fabric.spines - fabric.super_spines)), (1.0, leaves))
    for y, row in (*tiers, (0.0, hosts)):
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
    fig = new_figure(9.5, 4.4 if hosts_drawn <= 24 else 5.0)
    ax = fig.add_subplot()
    pairs = {tuple(sorted((d, pd))) for (d, _), (pd, _) in fabric.peers.items() if d in pos and pd in pos}
    for one, other in sorted(pairs):
        (x1, y1), (x2, y2) = pos[one], pos[other]
        ax.plot([x1, x2], [y1, y2], color="#c8c8c8", lw=0.6, zorder=1)
    for name, (x, y) in pos.items():
        hit = name in involved
        marker = {3.0: "s", 2.0: "s", 1.0: "D", 0.0: "o"}[y]  # switches above the leaves square
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
    ax.set_ylim(-0.75 if hosts_drawn > 8 else -0.4, 3.45 if fabric.super_spines else 2.45)
    tiers = ["hosts", "leaves", "spines", "super-spines"][: 4 if fabric.super_spines else 3]
    ax.set_yticks(range(len(tiers)), tiers)
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
