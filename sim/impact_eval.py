"""Scores of what the analysis says each incident cost each job and whose traffic it blames, against the
simulator's truth (`rocescope.sim.impact`: GPU-seconds lost per job, victims; `arming`: culprits).

Over every incident the detectors found (its best finding, as `scoring.score` picks it; finding it at all is
recall's business):

* loss: per incident and victim job (a job the truth says it slowed), the finding's `impact` GPU-seconds
  lost against the true loss; right within `LOSS_TOLERANCE` of it (a job the finding does not measure is
  wrong); the median relative error alongside;
* blame, on multi-job incidents (two or more jobs among the true culprits and victims): the finding's
  `blame` culprit jobs equal the true culprits, and its victim jobs the true victims (sets);
* stragglers (truth kind `unexplained_slowdown`): found at the right host (an unexplained_slowdown finding
  naming it, which is how `evaluate` matches) with no fabric finding blamed: no finding of another kind,
  overlapping it, counts the straggler's job among its victims.

A ratio with nothing to count is `-` (None), never 1.0.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from rocescope.analysis.findings import Finding

if TYPE_CHECKING:
    from rocescope.sim.evaluate import RunOutcome
    from rocescope.sim.scoring import Truth

__all__ = ["LOSS_TOLERANCE", "ImpactScore", "impact_json", "impact_scores", "impact_table"]

#: an estimate of GPU-seconds lost is right within this share of the true loss
LOSS_TOLERANCE = 0.2
STRAGGLER = "unexplained_slowdown"
#: a fabric finding this close to a straggler in time is one that could be blamed for it
BLAME_SLACK = dt.timedelta(seconds=10)


def _ratio(num: int, den: int) -> float | None:
    return num / den if den else None


@dataclass
class ImpactScore:
    kind: str
    #: (incident, victim job) pairs of found incidents, and those whose loss was estimated within tolerance
    losses: int = 0
    losses_right: int = 0
    errors: list[float] = field(default_factory=list)
    multi_job: int = 0
    culprits_right: int = 0
    victims_right: int = 0
    blame_right: int = 0
    stragglers: int = 0
    stragglers_right: int = 0

    def add(self, other: ImpactScore) -> None:
        for name in ("losses", "losses_right", "multi_job", "culprits_right", "victims_right", "blame_right",
                     "stragglers", "stragglers_right"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors

    @property
    def loss(self) -> float | None:
        return _ratio(self.losses_right, self.losses)

    @property
    def blame(self) -> float | None:
        return _ratio(self.blame_right, self.multi_job)

    @property
    def straggler(self) -> float | None:
        return _ratio(self.stragglers_right, self.stragglers)

    def as_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        return {
            "kind": self.kind,
            "victim_losses": self.losses,
            "loss_within_20pct": r(self.loss),
            "loss_error_p50": r(statistics.median(self.errors)) if self.errors else None,
            "multi_job_incidents": self.multi_job,
            "culprits_right": r(_ratio(self.culprits_right, self.multi_job)),
            "victims_right": r(_ratio(self.victims_right, self.multi_job)),
            "blame_right": r(self.blame),
            "stragglers": self.stragglers,
            "stragglers_at_host": r(self.straggler),
        }


def _blame(f: Finding) -> dict[str, Any]:
    b = f.evidence.get("blame")
    return b if isinstance(b, dict) else {}


def _lost(f: Finding, job: str) -> float | None:
    impact = f.evidence.get("impact")
    entry = impact.get(job) if isinstance(impact, dict) else None
    value = entry.get("gpu_seconds_lost") if isinstance(entry, dict) else None
    return float(value) if isinstance(value, int | float) else None


def _fabric_blamed(t: Truth, findings: Sequence[Finding]) -> bool:
    """A finding of another kind overlapping the straggler counts its job among the jobs it hurt."""
    return any(
        f.kind != STRAGGLER
        and f.start <= t.end + BLAME_SLACK
        and f.end >= t.start - BLAME_SLACK
        and bool(set(t.job_ids) & set(_blame(f).get("victim_jobs") or ()))
        for f in findings
    )


def score_run(best: Sequence[tuple[Truth, Finding]], findings: Sequence[Finding]) -> dict[str, ImpactScore]:
    """Scores per kind of one run: `best`, each found incident with its best finding; `findings`, all the run's."""
    out: dict[str, ImpactScore] = {}
    for t, f in best:
        s = out.setdefault(t.kind, ImpactScore(t.kind))
        for job in t.victim_jobs:
            true = float(t.gpu_seconds_lost.get(job, 0.0))
            est = _lost(f, job)
            s.losses += 1
            if est is not None and true > 0:
                err = abs(est - true) / true
                s.errors.append(err)
                s.losses_right += err <= LOSS_TOLERANCE
        if len(set(t.culprit_jobs) | set(t.victim_jobs)) >= 2:
            b = _blame(f)
            culprits = set(b.get("culprit_jobs") or ()) == set(t.culprit_jobs)
            victims = set(b.get("victim_jobs") or ()) == set(t.victim_jobs)
            s.multi_job += 1
            s.culprits_right += culprits
            s.victims_right += victims
            s.blame_right += culprits and victims
        if t.kind == STRAGGLER:
            s.stragglers_right += not _fabric_blamed(t, findings)
    return out


def impact_scores(runs: Sequence[RunOutcome]) -> dict[str, ImpactScore]:
    """Scores per kind over the runs (each run's incidents with their best findings: `KindScore.best`)."""
    total: dict[str, ImpactScore] = {}
    for o in runs:
        best = [pair for s in o.scores.values() for pair in s.best]
        for kind, s in score_run(best, o.findings).items():
            total.setdefault(kind, ImpactScore(kind)).add(s)
        for t in o.truths:  # stragglers not found count too: found at the right host is the score
            if t.kind == STRAGGLER and t.scored:
                total.setdefault(t.kind, ImpactScore(t.kind)).stragglers += 1
    return dict(sorted(total.items()))


def _cell(v: float | None, good: float = 0.95) -> str:
    return "-" if v is None else f"[{'green' if v >= good else 'red'}]{v:.3f}[/]"


def impact_table(scores: Mapping[str, ImpactScore], title: str = "impact and blame") -> Table:
    """The scores per kind: loss right within 20% (green from 0.95), its median error, blame on multi-job
    incidents, stragglers at their host; `-` where there is nothing to score."""
    t = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, caption_justify="left",
        caption="loss: victim jobs of found incidents whose GPU-seconds lost are within 20% of the truth (n: how "
        "many), err: median relative error; multi: multi-job incidents found, culprits/victims/both: right sets; "
        "straggler: stragglers found at their host with no fabric finding blamed",
    )  # fmt: skip
    for col in ("kind", "n", "loss", "err", "multi", "culprits", "victims", "both", "straggler"):
        t.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True)
    for kind, s in scores.items():
        d = s.as_dict()
        err = "-" if d["loss_error_p50"] is None else f"{d['loss_error_p50']:.3f}"
        t.add_row(
            kind, str(s.losses), _cell(s.loss), err, str(s.multi_job), _cell(d["culprits_right"]),
            _cell(d["victims_right"]), _cell(s.blame), _cell(s.straggler),
        )  # fmt: skip
    return t


def impact_json(runs: Sequence[RunOutcome]) -> list[dict[str, Any]]:
    return [s.as_dict() for s in impact_scores(runs).values()]
