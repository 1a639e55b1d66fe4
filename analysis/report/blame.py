"""The report's job side: who hurt whom (culprit jobs on the left, victim jobs on the right, an arrow per pair as
thick as the GPU-seconds it cost) and what the findings cost each job, from the findings' `impact` and `blame`
evidence (rocescope.analysis.impact, blame)."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from matplotlib.figure import Figure

from rocescope.analysis.blame import NO_JOB, Edge
from rocescope.analysis.present import job_impact
from rocescope.analysis.report.cases import evidence_of
from rocescope.analysis.report.plots import PALETTE, Skip, new_figure

MAX_EDGES = 12  # beyond that the graph is a hairball: the table lists them all


def blame_figure(edges: Sequence[Edge]) -> Figure:
    """A two-column graph: culprits left, victims right, arrows weighted by GPU-seconds lost."""
    shown = [e for e in edges if e.gpu_seconds_lost][:MAX_EDGES]
    if not shown:
        raise Skip("no finding measured a loss (no collectives recorded for the jobs it touched)")
    left = list(dict.fromkeys(e.culprit for e in shown))
    right = list(dict.fromkeys(e.victim for e in shown))
    rows = max(len(left), len(right))
    fig = new_figure(7.5, max(2.2, 0.55 * rows + 0.9))
    ax = fig.add_subplot()
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, rows - 0.4)
    ax.axis("off")

    def y(names: list[str], name: str) -> float:
        return rows - 1 - names.index(name) * (rows / max(len(names), 1))

    top = max(e.gpu_seconds_lost or 0.0 for e in shown)
    for e in shown:
        y0, y1 = y(left, e.culprit), y(right, e.victim)
        width = 0.8 + 5.0 * (e.gpu_seconds_lost or 0.0) / top
        color = "#9aa3ae" if e.culprit == NO_JOB else PALETTE[left.index(e.culprit) % len(PALETTE)]
        ax.annotate(
            "", xy=(0.68, y1), xytext=(0.32, y0),
            arrowprops={"arrowstyle": "-|>", "lw": width, "color": color, "alpha": 0.75, "shrinkA": 2, "shrinkB": 2},
        )  # fmt: skip
        at = 0.3 + 0.4 * ((len(shown) - shown.index(e)) % 3 + 1) / 4  # labels along the arrows, staggered
        ax.text(
            at, y0 + (y1 - y0) * (at - 0.32) / 0.36, f"{e.gpu_seconds_lost:.1f} GPU-s", ha="center", va="center",
            fontsize=7.5, color=color, bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.9},
        )  # fmt: skip
    for name in left:
        ax.text(0.3, y(left, name), name, ha="right", va="center", fontsize=8.5)
    for name in right:
        ax.text(0.7, y(right, name), name, ha="left", va="center", fontsize=8.5)
    ax.set_title("who hurt whom: culprit job (its traffic) -> victim job (its collectives slowed)")
    return fig


def job_costs(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float, int, float | None]]:
    """(job, GPU-seconds lost, findings that hurt it, worst inflation) per job, costliest first; an amplifier's
    share of a congestion's loss is not added again."""
    per: dict[str, list[Any]] = {}
    for r in rows:
        impact = evidence_of(r).get("impact")
        for job in set(r.get("job_ids") or []) | set(impact if isinstance(impact, dict) else []):
            entry = job_impact(r, job)
            if not entry or not entry.get("hurt"):
                continue
            acc = per.setdefault(job, [0.0, 0, None])
            if "amplifies" not in entry:  # lost CNPs' share is part of the congestion's loss, counted there
                acc[0] += float(entry.get("gpu_seconds_lost") or 0.0)
            acc[1] += 1
            inflation = entry.get("exec_inflation")
            if isinstance(inflation, int | float):
                acc[2] = max(acc[2] or 0.0, float(inflation))
    return sorted(((j, a[0], a[1], a[2]) for j, a in per.items()), key=lambda x: (-x[1], x[0]))


def costs_html(rows: Sequence[Mapping[str, Any]]) -> str:
    """The table of what the findings cost each job ('' when nothing was measured)."""
    costs = job_costs(rows)
    if not costs:
        return ""
    out = ["<table><thead><tr><th>job</th><th>GPU-seconds lost</th><th>findings that hurt it</th>"
           "<th>worst slowdown</th></tr></thead><tbody>"]  # fmt: skip
    for job, lost, n, worst in costs:
        w = "-" if worst is None else f"{worst:.2f}x"
        out.append(f"<tr><td>{html.escape(job)}</td><td>{lost:.1f}</td><td>{n}</td><td>{w}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def case_items(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A case's lines on cost and blame: each measured job's loss, and culprits -> victims."""
    ev = evidence_of(row)
    items = []
    impact = ev.get("impact")
    if isinstance(impact, dict) and impact:
        parts = []
        for job, v in sorted(impact.items()):
            if not isinstance(v, dict):
                continue
            bw = v.get("busbw_drop")
            drop = f", bus bandwidth -{bw:.0%}" if isinstance(bw, int | float) and bw > 0 else ""
            lost, shared = v.get("gpu_seconds_lost"), v.get("amplifies")
            if isinstance(shared, dict):  # lost CNPs: their share of the congestion's loss
                whole = f"the {shared.get('kind')}'s {float(shared.get('gpu_seconds_lost') or 0.0):.1f} GPU-s"
                cost = f"part of {whole}" if lost is None else f"{float(lost):.1f} GPU-s of {whole}"
            else:
                cost = f"{float(lost or 0.0):.1f} GPU-s"
            parts.append(
                f"{job}: {cost} ({float(v.get('exec_inflation') or 0.0):.2f}x{drop})"
                + ("" if v.get("hurt") else ", not hurt")
            )
        items.append(("cost", "; ".join(parts)))
    blame = ev.get("blame")
    if isinstance(blame, dict):
        culprits = ", ".join(blame.get("culprit_jobs") or []) or NO_JOB
        victims = ", ".join(blame.get("victim_jobs") or []) or "none measured"
        items.append(("blame", f"{culprits} -> {victims} ({blame.get('cause', '?')})"))
    return items
