"""Findings as terminal tables (rich) and JSON, for the CLI, the demo and the report; their ranking per job."""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich import box
from rich.table import Table

from rocescope.analysis.findings import SEVERITIES
from rocescope.pipeline.store import Store

SEVERITY_STYLE = {"critical": "bold red", "warning": "yellow", "info": "dim"}
NO_JOB = "(no job)"

FINDINGS_SQL = """
SELECT toString(kind) AS kind, toString(severity) AS severity, start, end, job_ids, devices, ports, priority,
    score, summary, evidence, toString(detector) AS detector, run_id
FROM findings
WHERE end >= {since:DateTime64(9, 'UTC')}
    AND ({job:String} = '' OR has(job_ids, {job:String}))
    AND ({kind:String} = '' OR kind = {kind:String})
ORDER BY start DESC
LIMIT {limit:UInt32}"""


def load_findings(
    store: Store, since: dt.datetime, job: str = "", kind: str = "", limit: int = 1000
) -> list[dict[str, Any]]:
    params = {"since": since, "job": job, "kind": kind, "limit": limit}
    rows: list[dict[str, Any]] = store.query_arrow(FINDINGS_SQL, params).to_pylist()
    return rows


def severity_rank(row: Mapping[str, Any]) -> tuple[int, float]:
    """Sort key: the most severe first, then the highest score."""
    sev = row["severity"]
    return (-(SEVERITIES.index(sev) if sev in SEVERITIES else 0), -float(row["score"]))


def by_job(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """Findings grouped per job (a finding appears under each of its jobs), worst job first."""
    groups: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        for job in r["job_ids"] or [NO_JOB]:
            groups[job].append(r)
    for g in groups.values():
        g.sort(key=severity_rank)
    return sorted(groups.items(), key=lambda kv: (severity_rank(kv[1][0]), -len(kv[1]), kv[0]))


def job_impact(row: Mapping[str, Any], job: str) -> dict[str, Any] | None:
    """What the finding cost the job (its evidence's `impact` entry, rocescope.analysis.impact), if measured."""
    raw = row.get("evidence") or {}
    try:
        ev = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        return None
    impact = ev.get("impact") if isinstance(ev, dict) else None
    entry = impact.get(job) if isinstance(impact, dict) else None
    return entry if isinstance(entry, dict) else None


def _lost(row: Mapping[str, Any], job: str) -> float | None:
    entry = job_impact(row, job)
    lost = entry.get("gpu_seconds_lost") if entry else None
    return float(lost) if isinstance(lost, int | float) else None


def _at_least(row: Mapping[str, Any], job: str) -> str:
    """`>= ` where Inspector dropped records while the finding lasted (`impact._incomplete`): a lower bound."""
    entry = job_impact(row, job)
    return ">= " if entry and entry.get("lower_bound") else ""


def not_measured(row: Mapping[str, Any], job: str) -> str:
    """Why a finding's cost to a job is not shown (`rocescope coverage` lists the jobs it cannot judge)."""
    raw = row.get("evidence") or {}
    try:
        ev = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        ev = {}
    if not isinstance(ev, dict) or "impact" not in ev:
        return "not measured: no NCCL collectives in the window"
    why = (ev.get("impact_not_measured") or {}).get(job)
    return f"not measured: {why}" if isinstance(why, str) else "not measured: no collectives of the job around it"


def findings_tables(rows: Sequence[Mapping[str, Any]]) -> list[Table]:
    """One table per job, worst job and worst finding first. The summary names the ports, so the table
    keeps to six columns and stays readable in an 80-column terminal; dates and the job's GPU-seconds lost
    (measured from its collectives) go in the title, each finding's in `lost`."""
    tables = []
    for job, group in by_job(rows):
        days = sorted({f"{r['start']:%Y-%m-%d}" for r in group})
        losses = [x for x in (_lost(r, job) for r in group) if x is not None]
        cost = f", {sum(losses):.1f} GPU-s lost" if losses else ""
        t = Table(
            title=f"[bold]{job}[/bold]: {len(group)} finding(s), {', '.join(days)} UTC{cost}",
            title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
        )  # fmt: skip
        t.add_column("severity", no_wrap=True)
        t.add_column("kind", no_wrap=True)
        t.add_column("start", no_wrap=True)
        t.add_column("for", justify="right", no_wrap=True)
        t.add_column("lost", justify="right")
        t.add_column("what", ratio=1, overflow="fold")
        for r in group:
            seconds = (r["end"] - r["start"]).total_seconds()
            lost = _lost(r, job)
            t.add_row(
                f"[{SEVERITY_STYLE.get(r['severity'], '')}]{r['severity']}[/]",
                r["kind"],
                f"{r['start']:%H:%M:%S}",
                f"{seconds:.0f} s",
                not_measured(r, job) if lost is None else f"{_at_least(r, job)}{lost:.1f} GPU-s",
                r["summary"],
            )
        tables.append(t)
    return tables


def findings_json(rows: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for r in rows:
        d = dict(r)
        d["start"], d["end"] = r["start"].isoformat(), r["end"].isoformat()
        d["evidence"] = json.loads(r["evidence"]) if r.get("evidence") else {}
        out.append(d)
    return json.dumps(out, indent=2)
