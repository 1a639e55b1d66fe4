"""Blame: for each finding, the jobs whose traffic caused it (culprits) apart from the jobs it hurt (victims);
over a window, who hurt whom and how many GPU-seconds it cost.

Culprits by kind, from the finding's evidence and the placement (`endpoints`), shared among them by weight:

* incast, microburst: the job of the transfer: of the jobs on the sender NICs (`senders`), those placed on
  the most of the fan-in's NICs (senders and `receiver`); a training job that merely shares some of the
  senders' hosts covers fewer. Senders that run no job (storage servers) blame none;
* pfc_storm: the jobs on the root's NICs (`root_ports`): the NIC that keeps pausing its leaf;
* cnp_loss at a NIC: the jobs on the NIC that drops its CNPs (its traffic is never slowed, PFC has to);
* ecmp_imbalance: the jobs whose traffic crosses the hot uplink (the finding's jobs; counters carry no flow
  identity, so alike): the elephants behind it;
* polarization, pfc_deadlock, link_flap, degraded_optics, pfc_misconfig, CNP loss in the fabric,
  unexplained_slowdown, nccl_hang: no job's traffic; the fabric (the switches' hashing, a route loop, a cable, a
  setting) or a job's own straggler is the cause, shown as `(no job)`.

Victims are the jobs `impact` (rocescope.analysis.impact) counts as hurt; a culprit may be its own victim.
Without recorded collectives nothing is measured: the finding's jobs other than its culprits are then listed
as victims with no loss (`measured: false`). Who hurt whom gives each victim's GPU-seconds lost to the
finding's culprits by their shares; findings that overlap in time each count their own loss (two findings of
one incident both carry it), so a window's total is an upper bound.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.table import Table

from rocescope.analysis.fabric import Fabric, split_ref
from rocescope.analysis.findings import Finding
from rocescope.analysis.present import not_measured
from rocescope.pipeline.store import Store

__all__ = [
    "NO_JOB",
    "Edge",
    "blame_json",
    "blame_of",
    "blame_table",
    "culprits",
    "load_edges",
    "who_hurt_whom",
    "with_blame",
]

#: the culprit of a finding no job's traffic caused
NO_JOB = "(no job)"
#: what causes each kind (for people): traffic of the culprit jobs, or the fabric itself
CAUSES = {
    "incast": "senders' traffic",
    "microburst": "senders' bursts",
    "pfc_storm": "the storm's root NIC",
    "cnp_loss": "a NIC that drops its CNPs",
    "ecmp_imbalance": "traffic on the hot uplink",
}


def _nic_jobs(fabric: Fabric, refs: Iterable[str], start: dt.datetime, end: dt.datetime) -> Counter[str]:
    """How many of the NICs (`host:netdev`, or the leaf port facing one) each job runs on."""
    count: Counter[str] = Counter()
    for ref in refs:
        count.update(fabric.jobs_at(*split_ref(ref), start, end))
    return count


def culprits(f: Finding, fabric: Fabric) -> dict[str, float]:
    """job -> share of the blame for the finding (see the module docstring); empty: no job's traffic."""
    ev = f.evidence
    count: Counter[str] = Counter()
    if f.kind in ("incast", "microburst"):
        senders = ev.get("senders") or []
        refs = [str(s.get("nic") or s.get("port")) if isinstance(s, dict) else str(s) for s in senders]
        on_senders = _nic_jobs(fabric, [r for r in refs if r], f.start, f.end)
        members = on_senders + _nic_jobs(fabric, [str(ev["receiver"])] if ev.get("receiver") else [], f.start, f.end)
        most = max((members[j] for j in on_senders), default=0)
        count = Counter({j: 1 for j in on_senders if members[j] == most})
    elif f.kind == "pfc_storm":
        roots = ev.get("root_ports") or ([ev["root"]] if ev.get("root") else [])
        count = _nic_jobs(fabric, [str(r) for r in roots], f.start, f.end)
    elif (f.kind == "cnp_loss" and ev.get("where") == "nic") or f.kind == "ecmp_imbalance":
        count = Counter(f.job_ids or ())
    total = sum(count.values())
    return {job: n / total for job, n in sorted(count.items())} if total else {}


def _without_culprit(f: Finding) -> str:
    if f.kind == "unexplained_slowdown":
        return "a straggler in the job" if f.evidence.get("stragglers") else "unknown: every rank slowed alike"
    if f.kind == "nccl_hang":
        return "a rank of the job that stopped (a crashed or wedged process, a GPU or host fault)"
    if f.kind == "pfc_storm" and f.evidence.get("root_unknown"):
        return "root unknown: a neighbour nobody monitors or names"
    if f.kind in CAUSES:
        return f"{CAUSES[f.kind]}, in no job"
    return "the fabric"


def blame_of(f: Finding, fabric: Fabric) -> dict[str, Any]:
    """The finding's `blame` evidence: culprit jobs and shares, victim jobs, and whether loss was measured."""
    shares = culprits(f, fabric)
    impact = f.evidence.get("impact")
    measured = isinstance(impact, dict)
    if isinstance(impact, dict):
        hurt = {j for j, v in impact.items() if isinstance(v, dict) and v.get("hurt")}
        # jobs whose records cannot measure a loss (interval means only) are victims with none measured, as all
        # are where no collectives were recorded
        unmeasured = set(f.evidence.get("impact_not_measured") or ()) & set(f.job_ids or ())
        victims = sorted(hurt | (unmeasured - set(shares)))
    else:
        victims = sorted(set(f.job_ids or ()) - set(shares))
    return {
        "culprit_jobs": sorted(shares),
        "culprit_shares": {j: round(s, 4) for j, s in shares.items()},
        "victim_jobs": victims,
        "cause": CAUSES.get(f.kind, f.kind) if shares else _without_culprit(f),
        "measured": measured,
    }


def with_blame(findings: Sequence[Finding], fabric: Fabric) -> list[Finding]:
    """The findings with `blame` in their evidence."""
    return [f.with_(evidence={**f.evidence, "blame": blame_of(f, fabric)}) for f in findings]


@dataclass
class Edge:
    """Culprit job -> victim job over a window: GPU-seconds lost (None: not measured) and through what."""

    culprit: str
    victim: str
    gpu_seconds_lost: float | None = None
    findings: int = 0
    kinds: set[str] = field(default_factory=set)
    worst_inflation: float | None = None
    #: why the loss is not measured (`present.not_measured`), while it is not
    not_measured: str = ""

    def as_dict(self) -> dict[str, Any]:
        lost = None if self.gpu_seconds_lost is None else round(self.gpu_seconds_lost, 3)
        worst = None if self.worst_inflation is None else round(self.worst_inflation, 3)
        return {
            "culprit": self.culprit,
            "victim": self.victim,
            "gpu_seconds_lost": lost,
            "findings": self.findings,
            "kinds": sorted(self.kinds),
            "worst_inflation": worst,
            **({"not_measured": self.not_measured} if lost is None else {}),
        }


def _evidence(row: Mapping[str, Any]) -> dict[str, Any]:
    raw = row.get("evidence") or {}
    try:
        ev = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except ValueError:
        return {}
    return ev if isinstance(ev, dict) else {}


def who_hurt_whom(rows: Iterable[Mapping[str, Any]]) -> list[Edge]:
    """Edges from findings rows (`findings` table rows, or Finding fields), the costliest first."""
    edges: dict[tuple[str, str], Edge] = {}
    for row in rows:
        ev = _evidence(row)
        blame, impact = ev.get("blame"), ev.get("impact") or {}
        if not isinstance(blame, dict):
            continue
        shares = blame.get("culprit_shares") or {}
        for victim in blame.get("victim_jobs") or []:
            hit = impact.get(victim) if isinstance(impact, dict) else None
            lost = hit.get("gpu_seconds_lost") if isinstance(hit, dict) else None
            inflation = hit.get("exec_inflation") if isinstance(hit, dict) else None
            for culprit, share in (shares or {NO_JOB: 1.0}).items():
                e = edges.setdefault((culprit, victim), Edge(culprit, victim))
                e.findings += 1
                e.kinds.add(str(row["kind"]))
                if lost is not None:
                    e.gpu_seconds_lost = (e.gpu_seconds_lost or 0.0) + float(lost) * float(share)
                elif not e.not_measured:
                    e.not_measured = not_measured(row, victim)
                if inflation is not None:
                    e.worst_inflation = max(e.worst_inflation or 0.0, float(inflation))
    return sorted(edges.values(), key=lambda e: (-(e.gpu_seconds_lost or 0.0), -e.findings, e.culprit, e.victim))


BLAME_SQL = """
SELECT toString(kind) AS kind, start, end, job_ids, summary, evidence
FROM findings
WHERE start < {until:DateTime64(9, 'UTC')} AND end >= {since:DateTime64(9, 'UTC')}
ORDER BY start"""


def load_edges(store: Store, since: dt.datetime, until: dt.datetime) -> tuple[list[Edge], list[dict[str, Any]]]:
    """Who hurt whom over the findings open in [since, until), and those findings' rows."""
    rows: list[dict[str, Any]] = store.query_arrow(BLAME_SQL, {"since": since, "until": until}).to_pylist()
    return who_hurt_whom(rows), rows


def blame_table(edges: Sequence[Edge], title: str) -> Table:
    t = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("culprit job", "victim job", "GPU-s lost", "findings", "worst", "through"):
        t.add_column(col, justify="right" if col in ("GPU-s lost", "findings", "worst") else "left")
    for e in edges:
        # no collectives of the victim joined around the findings (`rocescope coverage` says which and why)
        lost = (e.not_measured or "not measured") if e.gpu_seconds_lost is None else f"{e.gpu_seconds_lost:.1f}"
        worst = (
            f"{e.worst_inflation:.2f}x"
            if e.worst_inflation is not None
            else "-"
            if e.gpu_seconds_lost is not None
            else ""
        )
        style = "dim" if e.culprit == NO_JOB else ("bold" if e.culprit != e.victim else "")
        t.add_row(
            f"[{style}]{e.culprit}[/]" if style else e.culprit,
            e.victim,
            lost,
            str(e.findings),
            worst,
            ", ".join(sorted(e.kinds)),
        )
    return t


def blame_json(edges: Sequence[Edge], rows: Sequence[Mapping[str, Any]], since: dt.datetime, until: dt.datetime) -> str:
    findings = []
    for r in rows:
        ev = _evidence(r)
        if isinstance(ev.get("blame"), dict):
            findings.append(
                {
                    "kind": r["kind"],
                    "start": r["start"].isoformat(),
                    "end": r["end"].isoformat(),
                    "summary": r["summary"],
                    "blame": ev["blame"],
                    "impact": ev.get("impact") or {},
                }
            )
    doc = {
        "window": {"from": since.isoformat(), "to": until.isoformat()},
        "edges": [e.as_dict() for e in edges],
        "findings": findings,
    }
    return json.dumps(doc, indent=2)
