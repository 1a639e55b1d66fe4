"""The HTML incident report: one self-contained page per incident review, readable offline.

The page holds the findings per job (worst first) and, per finding, its case (`cases.py`): the plots an
engineer draws by hand during an incident. Everything is inline: plots are SVG drawn with matplotlib
(no JavaScript, no fonts, no network at view time; a plot is tens of KB where an interactive plotly
page would carry ~4 MB of JS), so the file can be mailed, attached to a ticket or opened on an
air-gapped jump host.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocescope.analysis.blame import who_hurt_whom
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.findings import SEVERITIES
from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.present import NO_JOB, by_job, job_impact, load_findings, severity_rank
from rocescope.analysis.report.blame import blame_figure, case_items, costs_html
from rocescope.analysis.report.cases import (
    MARGIN,
    Case,
    Plot,
    case_plots,
    draw_plot,
    evidence_of,
    finding_id,
    top_leaves,
    uplink_groups,
)
from rocescope.analysis.report.plots import uplink_figure
from rocescope.errors import ConfigError
from rocescope.pipeline.store import Store


@dataclass
class Report:
    """The page and what it shows: the findings' rows, a case per drawn finding, the fabric overview."""

    html: str
    rows: list[dict[str, Any]]
    cases: list[Case]
    overview: list[Plot]
    not_drawn: int = 0  # findings listed but without a case section (beyond max_cases)
    #: who hurt whom, where some finding measured what it cost a job
    jobs: list[Plot] = field(default_factory=list)

    @property
    def plots(self) -> list[Plot]:
        return [p for p in [*self.overview, *self.jobs, *(p for c in self.cases for p in c.plots)] if p.drawn]

    @property
    def skipped(self) -> list[Plot]:
        return [p for p in [*self.overview, *self.jobs, *(p for c in self.cases for p in c.plots)] if not p.drawn]


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


def _table(rows: Sequence[Mapping[str, Any]], drawn: set[str], job: str = "") -> str:
    """One job's findings; `lost`: the GPU-seconds each cost the job (its collectives), `-` unmeasured."""
    out = ["<table><thead><tr><th>id</th><th>severity</th><th>kind</th><th>start (UTC)</th><th>for</th>"
           "<th>lost</th><th>where</th><th>what</th></tr></thead><tbody>"]  # fmt: skip
    for r in rows:
        fid = finding_id(r)
        link = f'<a href="#case-{fid}">{fid}</a>' if fid in drawn else fid
        seconds = (r["end"] - r["start"]).total_seconds()
        cost = job_impact(r, job) or {}
        lost = cost.get("gpu_seconds_lost")
        out.append(
            f'<tr><td class="id">{link}</td><td>{_sev(r["severity"])}</td><td>{_e(r["kind"])}</td>'
            f"<td>{_when(r['start'])}</td><td>{seconds:.0f} s</td>"
            f"<td>{'-' if lost is None else f'{float(lost):.1f}&nbsp;GPU-s'}</td><td>{_e(_where(r))}</td>"
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
        *case_items(r),
    ]
    dl = "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items)
    evidence = json.dumps(evidence_of(r), indent=2, sort_keys=True)
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
    jobs: Sequence[Plot] = (),
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
            parts.append(f"<h3>{_e(job)}: {len(group)} finding(s)</h3>{_table(group, drawn, job)}")
        costs = costs_html(rows)
        if costs or jobs:
            parts.append("<h2>What it cost the jobs</h2>" + costs + "".join(_plot_html(p, "") for p in jobs))
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
    edges = [e for e in who_hurt_whom(rows) if e.gpu_seconds_lost]
    jobs = [draw_plot("blame", "who hurt whom (GPU-seconds lost)", lambda: blame_figure(edges))] if edges else []
    if rows:
        span = Window(min(r["start"] for r in rows) - MARGIN, max(r["end"] for r in rows) + MARGIN)
        frames = Frames(store, span)
        fabric = Fabric.from_frames(frames)
        if not finding and fabric.leaves:
            leaves = top_leaves(frames, fabric)
            overview.append(
                draw_plot(
                    "uplinks",
                    f"leaf uplink balance over {span} (busiest leaves)",
                    lambda: uplink_figure(
                        uplink_groups(frames, fabric, leaves), "tx bytes share of each leaf's uplinks"
                    ),
                )
            )
        unique = sorted({finding_id(r): r for r in rows}.items(), key=lambda kv: severity_rank(kv[1]))
        cases = [Case(fid, r, case_plots(store, fabric, r)) for fid, r in unique[:max_cases]]
    who = f"job {job}" if job else "all jobs"
    header = {
        "title": "rocescope incident report" + (f": {job}" if job else ""),
        "meta": f"{who}; findings open since {_when(since)} UTC; generated {_when(now)} UTC from database "
        f"{getattr(store, 'database', '?')}",
        "empty": f"for {who} since {_when(since)} UTC",
    }
    not_drawn = max(0, len({finding_id(r) for r in rows}) - len(cases))
    page = render_html(rows, cases, overview, header, not_drawn, jobs)
    return Report(page, rows, cases, overview, not_drawn, jobs)


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
