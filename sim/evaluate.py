"""The evaluation harness: simulated incidents with ground truth, the detectors over them, and the score.

For each incident kind, its scenario runs with many seeds (placement, QPs and so ECMP paths change
with the seed) through the real pipeline into an embedded store; the detectors analyze the run's
window; findings are matched to the ground truth:

* a finding *matches* an incident of the same kind when their times overlap (the incident widened by
  `tolerance` sampling intervals) and they share a device;
* precision (per kind) = matching findings / findings; recall = incidents matched / incidents;
* localization = matched incidents whose best finding names one of the incident's ports;
* job attribution = matched incidents whose best finding names exactly the incident's jobs;
* delay = best finding's start - incident start, in sampling intervals (target: <= 2).

Clean baselines count every finding as a false positive. `scores_table` shows the scores in a terminal.
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich import box
from rich.table import Table

from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze
from rocescope.config import AnalysisConfig, Settings, StoreConfig
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.run import run_scenario
from rocescope.sim.scenario import load_scenario

log = logging.getLogger(__name__)

#: incident kind -> the shipped scenario that stages it
SCENARIOS: dict[str, str] = {
    "pfc_storm": "pfc_storm",
    "incast": "incast",
    "microburst": "microburst",
    "pfc_deadlock": "pfc_deadlock",
    "cnp_loss": "cnp_loss",
    "polarization": "polarization",
    "link_flap": "link_flap",
    "pfc_misconfig": "pfc_misconfig",
}


@dataclass(frozen=True)
class Truth:
    kind: str
    start: dt.datetime
    end: dt.datetime
    job_ids: tuple[str, ...]
    devices: tuple[str, ...]
    ports: tuple[str, ...]

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Truth:
        return cls(
            d["kind"],
            dt.datetime.fromisoformat(d["start"]),
            dt.datetime.fromisoformat(d["end"]),
            tuple(d["job_ids"]),
            tuple(d["devices"]),
            tuple(d["ports"]),
        )


@dataclass
class KindScore:
    kind: str
    incidents: int = 0
    findings: int = 0
    true_findings: int = 0
    recalled: int = 0
    localized: int = 0
    attributed: int = 0
    delays: list[float] = field(default_factory=list)

    def ratio(self, num: int, den: int) -> float:
        return num / den if den else 1.0

    @property
    def precision(self) -> float:
        return self.ratio(self.true_findings, self.findings)

    @property
    def recall(self) -> float:
        return self.ratio(self.recalled, self.incidents)

    @property
    def localization(self) -> float:
        return self.ratio(self.localized, self.recalled)

    @property
    def attribution(self) -> float:
        return self.ratio(self.attributed, self.recalled)

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "incidents": self.incidents,
            "findings": self.findings,
            "precision": round(self.precision, 3),
            "recall": round(self.recall, 3),
            "localization": round(self.localization, 3),
            "job_attribution": round(self.attribution, 3),
            "delay_p50_intervals": round(statistics.median(self.delays), 2) if self.delays else None,
            "delay_max_intervals": round(max(self.delays), 2) if self.delays else None,
        }


def _matches(f: Finding, t: Truth, slack: dt.timedelta) -> bool:
    return (
        f.kind == t.kind
        and f.start <= t.end + slack
        and f.end >= t.start - slack
        and bool(set(f.devices) & set(t.devices))
    )


def score(
    truths: Sequence[Truth], findings: Sequence[Finding], poll_s: float, tolerance: float = 2.0
) -> dict[str, KindScore]:
    """Scores per kind for one run (see the module docstring)."""
    slack = dt.timedelta(seconds=tolerance * poll_s)
    scores: dict[str, KindScore] = defaultdict(lambda: KindScore(""))
    for t in truths:
        s = scores[t.kind]
        s.kind, s.incidents = t.kind, s.incidents + 1
        hits = [f for f in findings if _matches(f, t, slack)]
        if not hits:
            continue
        s.recalled += 1
        best = min(hits, key=lambda f: (not set(f.ports) & set(t.ports), abs((f.start - t.start).total_seconds())))
        s.localized += bool(set(best.ports) & set(t.ports))
        s.attributed += set(best.job_ids or ()) == set(t.job_ids)
        s.delays.append(max(0.0, (best.start - t.start).total_seconds()) / poll_s)
    for f in findings:
        s = scores[f.kind]
        s.kind, s.findings = f.kind, s.findings + 1
        s.true_findings += any(_matches(f, t, slack) for t in truths)
    return dict(scores)


def merge(into: dict[str, KindScore], other: dict[str, KindScore]) -> None:
    for kind, s in other.items():
        m = into.setdefault(kind, KindScore(kind))
        m.incidents += s.incidents
        m.findings += s.findings
        m.true_findings += s.true_findings
        m.recalled += s.recalled
        m.localized += s.localized
        m.attributed += s.attributed
        m.delays += s.delays


@dataclass
class RunOutcome:
    scenario: str
    seed: int
    truths: list[Truth]
    findings: list[Finding]
    scores: dict[str, KindScore]
    sim_seconds: float
    wall_seconds: float


def evaluate_run(
    scenario: str,
    seed: int,
    store_dir: Path,
    duration_s: float | None = None,
    cfg: AnalysisConfig | None = None,
) -> RunOutcome:
    """One scenario with one seed: simulate into the store (database per run), analyze, score."""
    sc = load_scenario(scenario)
    sc = sc.model_copy(update={"seed": seed})
    db = f"eval_{sc.name}_{seed}".replace("-", "_")
    settings = Settings(store=StoreConfig(path=store_dir, database=db, ttl_days=0))
    summary = run_scenario(settings, sc, duration_s)
    truths = [Truth.from_dict(d) for d in summary.incidents]
    with ChdbStore(store_dir, db) as store:
        result = analyze(store, Window(summary.start, summary.end), cfg, write=False)
        store.command(f"DROP DATABASE IF EXISTS `{db}`")
    scores = score(truths, result.findings, sc.poll_interval_s)
    return RunOutcome(sc.name, seed, truths, result.findings, scores, summary.sim_seconds, summary.wall_seconds)


def evaluate(
    kinds: Sequence[str],
    seeds: Sequence[int],
    baseline_s: float = 0.0,
    cfg: AnalysisConfig | None = None,
    store_dir: Path | None = None,
    on_run: Callable[[RunOutcome], None] | None = None,
) -> tuple[dict[str, KindScore], list[RunOutcome]]:
    """Every kind's scenario over every seed, plus a clean baseline of `baseline_s` fabric seconds."""
    total: dict[str, KindScore] = {}
    runs: list[RunOutcome] = []
    with tempfile.TemporaryDirectory(prefix="rocescope-eval-") as tmp:
        where = store_dir or Path(tmp)
        plan: list[tuple[str, int, float | None]] = [(SCENARIOS[k], s, None) for k in kinds for s in seeds]
        if baseline_s > 0:
            plan.append(("baseline", seeds[0] if seeds else 1, baseline_s))
        for scenario, seed, duration in plan:
            outcome = evaluate_run(scenario, seed, where, duration, cfg)
            merge(total, outcome.scores)
            runs.append(outcome)
            if on_run is not None:
                on_run(outcome)
    return total, runs


def scores_table(scores: Mapping[str, KindScore], title: str = "detector evaluation") -> Table:
    """The scores per kind as a rich table; ratios below 0.95 in red."""
    t = Table(
        title=title, title_justify="left", caption="delay in sampling intervals", caption_justify="left",
        box=box.SIMPLE_HEAD, pad_edge=False,
    )  # fmt: skip
    # short headers and no wrapping, so the table stays whole in an 80-column terminal or a CI log
    for col in ("kind", "truth", "found", "prec", "recall", "local", "jobs", "delay50", "max"):
        t.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True)
    for kind in sorted(scores):
        d = scores[kind].as_dict()

        def cell(v: float) -> str:
            return f"[{'green' if v >= 0.95 else 'red'}]{v:.3f}[/]"

        t.add_row(
            kind,
            str(d["incidents"]),
            str(d["findings"]),
            cell(d["precision"]),
            cell(d["recall"]) if d["incidents"] else "-",
            cell(d["localization"]) if d["incidents"] else "-",
            cell(d["job_attribution"]) if d["incidents"] else "-",
            "-" if d["delay_p50_intervals"] is None else f"{d['delay_p50_intervals']:.1f}",
            "-" if d["delay_max_intervals"] is None else f"{d['delay_max_intervals']:.1f}",
        )
    return t
