"""The evaluation harness: simulated incidents with ground truth, the detectors over them, and a strict score.

For each incident kind, its scenarios (`SCENARIOS`) run with many seeds (placement, QPs and so ECMP paths change
with the seed) through the real pipeline into an embedded store, as a deployment profile's gear reports
it (`rocescope.sim.profile`: the scenario's own, or each profile asked for); the detectors analyze the
run's window; findings are matched to the ground truth (its ports named as the profile names them, so
like is compared with like). A run takes one of two paths (`PATHS`): `fast` lands the gear's rows
directly (`sim.run`), every scenario of a kind with every seed; `served` serves the fabric over gNMI,
SNMP, host views and LLDP as the profile's gear speaks them and gathers it with the real collectors in
lockstep (`sim.serve`, as `rocescope demo` does), one run per seed per kind, the seeds taking the kind's
scenarios in turn (so N seeds cost N served runs per kind). The rules:

* a finding *matches* an incident of the same kind when their times overlap (the incident widened by
  `tolerance` times the coarsest cadence in play, below) and they share a device;
* it *localizes* the incident only when it names one of the incident's ports: sharing a device is
  not enough (a leaf has 64 ports; "somewhere on leaf-r0-01" sends nobody to the right cable);
* precision (per kind) = matching findings / findings; recall = matched incidents / incidents;
* localization = matched incidents whose best finding (localized first, then earliest) names one of
  their ports / matched incidents; job attribution = matched incidents whose best finding names
  exactly the incident's jobs / matched incidents;
* findings per incident (fragmentation) = matching findings / matched incidents: one incident should
  give one finding;
* delay = best finding's start - incident start (0 when it starts before), in seconds and in units of
  the coarsest cadence in play: the slowest metric group the kind's evidence comes from (`KIND_GROUPS`)
  under the profile, never finer than the poll (SONiC watermarks: 60 s; ports: 1 s);
* an incident the truth marks unobservable (nothing collected could show it: degraded optics on a link no
  frame crossed) counts neither as found nor as missed; a finding matching it still counts as true;
* a ratio with nothing to count (no finding, no incident, nothing matched) is `-` (None), never 1.0.

Clean baselines count every finding as a false positive. `scores_table` shows the scores in a terminal,
`evaluation_json` for machines. What the found incidents cost each job and whose traffic they are blamed on
are scored against the truth's losses and culprits in `sim/impact_eval.py` (`impact_table`).
"""

from __future__ import annotations

import datetime as dt
import logging
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
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
from rocescope.sim.impact_eval import impact_json
from rocescope.sim.profile import Profile, load_profile
from rocescope.sim.run import RunSummary, run_scenario
from rocescope.sim.scenario import INCIDENT_KINDS, load_scenario, scenario_names

log = logging.getLogger(__name__)

#: Shipped scenarios that stage no single kind.
NOT_STAGES = frozenset({"baseline", "bad_day", "demo"})
#: How a run reaches the store: the gear's rows directly, or over the protocols through the real collectors.
PATHS = ("fast", "served")


def kind_scenarios() -> dict[str, tuple[str, ...]]:
    """incident kind -> the shipped scenarios that stage it: those named after it (`incast`, `incast_small`,
    `cnp_loss_fabric`: the longest incident kind the name starts with)."""
    out: dict[str, list[str]] = {}
    for name in scenario_names():
        if name in NOT_STAGES:
            continue
        kinds = [k for k in INCIDENT_KINDS if name == k or name.startswith(f"{k}_")]
        if kinds:
            out.setdefault(max(kinds, key=len), []).append(name)
    return {k: tuple(v) for k, v in sorted(out.items())}


#: incident kind -> the shipped scenarios that stage it
SCENARIOS: dict[str, tuple[str, ...]] = kind_scenarios()
#: incident kind -> the metric groups (`rocescope.sim.profile.GROUPS`, `nic`) its evidence comes from.
KIND_GROUPS: dict[str, tuple[str, ...]] = {
    "pfc_storm": ("ports", "pfc"),
    "pfc_deadlock": ("ports", "pfc", "queues"),
    "incast": ("ports", "queues", "nic"),
    "microburst": ("watermarks",),
    "cnp_loss": ("nic",),
    "polarization": ("ports",),
    "ecmp_imbalance": ("ports",),
    "link_flap": ("ports",),
    "pfc_misconfig": ("ports", "pfc", "priority_groups"),
}


def coarsest_cadence(profile: Profile, kind: str, poll_s: float) -> float:
    """Seconds between reads of the slowest metric group `kind`'s evidence needs under `profile`."""
    return max(profile.cadence_s(g, poll_s) for g in KIND_GROUPS.get(kind, ("ports",)))


@dataclass(frozen=True)
class Truth:
    kind: str
    start: dt.datetime
    end: dt.datetime
    job_ids: tuple[str, ...]
    devices: tuple[str, ...]
    ports: tuple[str, ...]
    #: jobs whose traffic caused it, jobs whose collectives it slowed, GPU-seconds each job lost (`sim.impact`)
    culprit_jobs: tuple[str, ...] = ()
    victim_jobs: tuple[str, ...] = ()
    gpu_seconds_lost: Mapping[str, float] = field(default_factory=dict)
    #: False: nothing collected could show it (scored neither as found nor as missed)
    observable: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Truth:
        return cls(
            d["kind"],
            dt.datetime.fromisoformat(d["start"]),
            dt.datetime.fromisoformat(d["end"]),
            tuple(d["job_ids"]),
            tuple(d["devices"]),
            tuple(d["ports"]),
            tuple(d.get("culprit_jobs", ())),
            tuple(d.get("victim_jobs", ())),
            dict(d.get("gpu_seconds_lost", {})),
            bool(d.get("observable", True)),
        )


def ratio(num: int, den: int) -> float | None:
    """num / den; None when there is nothing to count (shown as `-`, never as a perfect score)."""
    return num / den if den else None


@dataclass
class KindScore:
    kind: str
    incidents: int = 0
    findings: int = 0
    #: findings that match an incident of their kind
    true_findings: int = 0
    recalled: int = 0
    localized: int = 0
    attributed: int = 0
    #: per matched incident: incident start to its best finding's start, seconds
    delays_s: list[float] = field(default_factory=list)
    #: the coarsest cadence in play for this kind (seconds)
    cadence_s: float = 1.0
    #: each matched incident with its best finding (impact and blame are scored on them: `sim.impact_eval`)
    best: list[tuple[Truth, Finding]] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return ratio(self.true_findings, self.findings)

    @property
    def recall(self) -> float | None:
        return ratio(self.recalled, self.incidents)

    @property
    def localization(self) -> float | None:
        return ratio(self.localized, self.recalled)

    @property
    def attribution(self) -> float | None:
        return ratio(self.attributed, self.recalled)

    @property
    def per_incident(self) -> float | None:
        """Findings per matched incident (1.0: one incident, one finding)."""
        return ratio(self.true_findings, self.recalled)

    @property
    def delays(self) -> list[float]:
        """Delays in units of the coarsest cadence in play."""
        return [d / self.cadence_s for d in self.delays_s]

    def as_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 3)

        d50 = statistics.median(self.delays_s) if self.delays_s else None
        return {
            "kind": self.kind,
            "incidents": self.incidents,
            "findings": self.findings,
            "precision": r(self.precision),
            "recall": r(self.recall),
            "localization": r(self.localization),
            "job_attribution": r(self.attribution),
            "findings_per_incident": r(self.per_incident),
            "delay_p50_s": r(d50),
            "delay_max_s": r(max(self.delays_s)) if self.delays_s else None,
            "cadence_s": self.cadence_s,
            "delay_p50_cadences": r(None if d50 is None else d50 / self.cadence_s),
        }


def _matches(f: Finding, t: Truth, slack: dt.timedelta) -> bool:
    return (
        f.kind == t.kind
        and f.start <= t.end + slack
        and f.end >= t.start - slack
        and bool(set(f.devices) & set(t.devices))
    )


def _localizes(f: Finding, t: Truth) -> bool:
    return bool(set(f.ports) & set(t.ports))


def score(
    truths: Sequence[Truth],
    findings: Sequence[Finding],
    poll_s: float = 1.0,
    tolerance: float = 2.0,
    cadence: Mapping[str, float] | None = None,
) -> dict[str, KindScore]:
    """Scores per kind for one run (see the module docstring); `cadence`: kind -> the coarsest cadence in
    play (seconds; default the poll)."""
    scores: dict[str, KindScore] = defaultdict(lambda: KindScore(""))

    def of(kind: str) -> KindScore:
        s = scores[kind]
        s.kind, s.cadence_s = kind, max(poll_s, (cadence or {}).get(kind, poll_s))
        return s

    def slack(kind: str) -> dt.timedelta:
        return dt.timedelta(seconds=tolerance * of(kind).cadence_s)

    for t in (t for t in truths if t.observable):
        s = of(t.kind)
        s.incidents += 1
        hits = [f for f in findings if _matches(f, t, slack(t.kind))]
        if not hits:
            continue
        s.recalled += 1
        best = min(hits, key=lambda f: (not _localizes(f, t), abs((f.start - t.start).total_seconds())))
        s.localized += _localizes(best, t)
        s.attributed += set(best.job_ids or ()) == set(t.job_ids)
        s.delays_s.append(max(0.0, (best.start - t.start).total_seconds()))
        s.best.append((t, best))
    for f in findings:
        s = of(f.kind)
        s.findings += 1
        s.true_findings += any(_matches(f, t, slack(f.kind)) for t in truths)
    return dict(scores)


def merge(into: dict[str, KindScore], other: Mapping[str, KindScore]) -> None:
    for kind, s in other.items():
        m = into.setdefault(kind, KindScore(kind, cadence_s=s.cadence_s))
        m.incidents += s.incidents
        m.findings += s.findings
        m.true_findings += s.true_findings
        m.recalled += s.recalled
        m.localized += s.localized
        m.attributed += s.attributed
        m.delays_s += s.delays_s
        m.best += s.best
        m.cadence_s = max(m.cadence_s, s.cadence_s)


@dataclass
class RunOutcome:
    scenario: str
    seed: int
    truths: list[Truth]
    findings: list[Finding]
    scores: dict[str, KindScore]
    sim_seconds: float
    wall_seconds: float
    profile: str = "ideal"
    path: str = "fast"
    #: wall seconds the detectors took over the run's window
    analyze_seconds: float = 0.0


@dataclass
class ProfileScores:
    """One profile's evaluation: scores per kind over every run, and what the clean baseline found."""

    profile: str
    scores: dict[str, KindScore] = field(default_factory=dict)
    runs: list[RunOutcome] = field(default_factory=list)
    baseline_s: float = 0.0
    baseline_findings: list[Finding] = field(default_factory=list)


def evaluate_run(
    scenario: str,
    seed: int,
    store_dir: Path,
    duration_s: float | None = None,
    cfg: AnalysisConfig | None = None,
    profile: str | Path | Profile | None = None,
    path: str = "fast",
) -> RunOutcome:
    """One scenario with one seed under one profile (default: the scenario's): simulate into the store
    (a database per run) on the `fast` or `served` path, analyze, score."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, not {path!r}")
    sc = load_scenario(scenario)
    sc = sc.model_copy(update={"seed": seed})
    prof = load_profile(profile if profile is not None else sc.profile)
    db = "".join(c if c.isalnum() else "_" for c in f"eval_{sc.name}_{prof.name}_{seed}_{path}")
    settings = Settings(store=StoreConfig(path=store_dir, database=db, ttl_days=0))
    summary: RunSummary
    if path == "served":
        from rocescope.sim.serve import serve_scenario

        summary, _stats = serve_scenario(settings, sc, duration_s, profile=prof)
    else:
        summary = run_scenario(settings, sc, duration_s, profile=prof)
    truths = [Truth.from_dict(d) for d in summary.incidents]
    t0 = time.perf_counter()
    with ChdbStore(store_dir, db) as store:
        result = analyze(store, Window(summary.start, summary.end), cfg, write=False)
        store.command(f"DROP DATABASE IF EXISTS `{db}`")
    analyze_s = time.perf_counter() - t0
    poll = sc.poll_interval_s
    kinds = {t.kind for t in truths} | {f.kind for f in result.findings} | set(KIND_GROUPS)
    cadence = {k: coarsest_cadence(prof, k, poll) for k in kinds}
    scores = score(truths, result.findings, poll, cadence=cadence)
    return RunOutcome(
        sc.name, seed, truths, result.findings, scores, summary.sim_seconds, summary.wall_seconds, prof.name, path,
        analyze_s,
    )  # fmt: skip


def evaluate(
    kinds: Sequence[str],
    seeds: Sequence[int],
    baseline_s: float = 0.0,
    cfg: AnalysisConfig | None = None,
    store_dir: Path | None = None,
    on_run: Callable[[RunOutcome], None] | None = None,
    profiles: Sequence[str | None] = (None,),
    progress: bool = False,
    path: str = "fast",
) -> list[ProfileScores]:
    """Every kind's scenarios over the seeds (`fast`: each scenario with every seed; `served`: one run per
    seed, the seeds taking the kind's scenarios in turn), plus a clean baseline of `baseline_s` fabric
    seconds, under each profile (None: each scenario's own)."""
    plan: list[tuple[str | None, str, int, float | None]] = []
    for prof in profiles:
        if path == "served":
            plan += [(prof, SCENARIOS[k][i % len(SCENARIOS[k])], s, None) for k in kinds for i, s in enumerate(seeds)]
        else:
            plan += [(prof, sc, s, None) for k in kinds for sc in SCENARIOS[k] for s in seeds]
        if baseline_s > 0:
            plan.append((prof, "baseline", seeds[0] if seeds else 1, baseline_s))
    results: dict[str | None, ProfileScores] = {}
    with tempfile.TemporaryDirectory(prefix="rocescope-eval-") as tmp, _bar(progress, len(plan)) as step:
        where = store_dir or Path(tmp)
        for prof, scenario, seed, duration in plan:
            step(f"{prof or 'own profile'}: {scenario} seed {seed}")
            outcome = evaluate_run(scenario, seed, where, duration, cfg, prof, path)
            res = results.setdefault(prof, ProfileScores(outcome.profile if prof is None else str(prof)))
            merge(res.scores, outcome.scores)
            res.runs.append(outcome)
            if scenario == "baseline":
                res.baseline_s = float(duration or 0.0)
                res.baseline_findings += outcome.findings
            if on_run is not None:
                on_run(outcome)
        step("")
    return list(results.values())


@contextmanager
def _bar(enabled: bool, total: int) -> Iterator[Callable[[str], None]]:
    """A progress bar over the runs on stderr (`step(label)` before each run; `step("")` at the end)."""
    if not enabled:
        yield lambda _label: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        TextColumn("{task.description}"), console=Console(stderr=True),
    ) as bar:  # fmt: skip
        task = bar.add_task("", total=total)
        started = [False]

        def step(label: str) -> None:
            if started[0]:
                bar.advance(task)
            started[0] = True
            bar.update(task, description=label)

        yield step


def _cell(v: float | None, good: float = 0.95, higher_is_better: bool = True) -> str:
    if v is None:
        return "-"
    ok = v >= good if higher_is_better else v <= good
    return f"[{'green' if ok else 'red'}]{v:.3f}[/]"


def scores_table(scores: Mapping[str, KindScore], title: str = "detector evaluation") -> Table:
    """The scores per kind as a rich table; ratios below 0.95 (or more than 1.1 findings per incident) in red,
    `-` where there is nothing to score."""
    t = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, caption_justify="left",
        caption="f/inc: findings per matched incident; delay: incident start to the best finding's start (s), "
        "p50 and max; /cad: p50 in the coarsest cadence in play (cad, s); -: nothing to score",
    )  # fmt: skip
    # short headers and no wrapping, so the table stays whole in a 100-column terminal or a CI log
    for col in ("kind", "truth", "found", "prec", "recall", "local", "jobs", "f/inc", "delay", "max", "cad", "/cad"):
        t.add_column(col, justify="left" if col == "kind" else "right", no_wrap=True)
    for kind in sorted(scores):
        s = scores[kind]
        d = s.as_dict()

        def num(v: float | None, fmt: str = ".1f") -> str:
            return "-" if v is None else format(v, fmt)

        t.add_row(
            kind, str(s.incidents), str(s.findings), _cell(s.precision), _cell(s.recall), _cell(s.localization),
            _cell(s.attribution), _cell(s.per_incident, 1.1, higher_is_better=False), num(d["delay_p50_s"]),
            num(d["delay_max_s"]), f"{s.cadence_s:g}", num(d["delay_p50_cadences"], ".2f"),
        )  # fmt: skip
    return t


def evaluation_json(results: Sequence[ProfileScores]) -> dict[str, Any]:
    """The evaluation for machines: per profile, the scores per kind, the baseline and every run's findings."""
    return {
        "profiles": [
            {
                "profile": r.profile,
                "scores": [r.scores[k].as_dict() for k in sorted(r.scores)],
                "baseline": {"seconds": r.baseline_s, "findings": [f.summary for f in r.baseline_findings]},
                "impact": impact_json(r.runs),
                "runs": [
                    {
                        "scenario": o.scenario,
                        "seed": o.seed,
                        "path": o.path,
                        "sim_seconds": o.sim_seconds,
                        "wall_seconds": round(o.wall_seconds, 2),
                        "analyze_seconds": round(o.analyze_seconds, 2),
                        "incidents": len(o.truths),
                        "findings": [
                            {"kind": f.kind, "ports": list(f.ports), "summary": f.summary} for f in o.findings
                        ],
                    }
                    for o in r.runs
                ],
            }
            for r in results
        ]
    }
