"""The evaluation harness: simulated incidents with ground truth, the detectors over them, and a strict score.

For each incident kind, its scenarios (`SCENARIOS`) run with many seeds (placement, QPs and so ECMP paths change
with the seed) through the real pipeline into an embedded store, as a deployment profile's gear reports
it (`rocescope.sim.profile`: the scenario's own, or each profile asked for); the detectors analyze the
run's window; findings are matched to the ground truth (its ports named as the profile names them, so
like is compared with like). A run takes one of two paths (`PATHS`): `fast` lands the gear's rows
directly (`sim.run`), every scenario of a kind with every seed; `served` serves the fabric over gNMI,
SNMP, host views and LLDP as the profile's gear speaks them and gathers it with the real collectors in
lockstep (`sim.serve`, as `rocescope demo` does), one run per seed per kind, the seeds taking the kind's
scenarios in turn (so N seeds cost N served runs per kind). Findings are scored by `rocescope.sim.scoring`
(matching at the incident's anchor, in its time widened only by the profile's clock error; fragments count
against precision); a detector that raises fails the run (`EvalError`): a score without it would be a lie.
`rocescope eval --exam` draws its runs from the tested commit (`rocescope.sim.exam`).

Clean baselines count every finding as a false positive. `scores_table` shows the scores in a terminal,
`evaluation_json` for machines. What the found incidents cost each job and whose traffic they are blamed on
are scored against the truth's losses and culprits in `sim/impact_eval.py` (`impact_table`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import Window
from rocescope.analysis.run import AnalysisResult, analyze
from rocescope.config import AnalysisConfig, Settings, StoreConfig
from rocescope.errors import SimError
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.impact_eval import impact_json
from rocescope.sim.other_detectors import analyze_with
from rocescope.sim.profile import Profile, load_profile
from rocescope.sim.run import RunSummary, run_scenario
from rocescope.sim.scenario import INCIDENT_KINDS, Scenario, load_scenario, scenario_names
from rocescope.sim.scoring import KindScore, Truth, merge, score
from rocescope.sim.truth import clock_error_s, unobservable_by_cadence

log = logging.getLogger(__name__)


class EvalError(SimError):
    """A run that cannot be scored (a detector raised)."""


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
    #: where another commit's detectors scored the run: this tree's on the same store (the guard's other column)
    own: RunOutcome | None = None


@dataclass
class ProfileScores:
    """One profile's evaluation: scores per kind over every run, and what the clean baselines found that matches
    nothing the traffic made by itself there (a tree's fan-in makes real microbursts in a clean baseline)."""

    profile: str
    scores: dict[str, KindScore] = field(default_factory=dict)
    runs: list[RunOutcome] = field(default_factory=list)
    baseline_s: float = 0.0
    baseline_findings: list[Finding] = field(default_factory=list)


def detectors_ran(result: AnalysisResult, scenario: str, seed: int, profile: str, path: str) -> None:
    """Raise `EvalError` when a detector raised in the run: its kind would score as silence, not as a bug."""
    if result.failed:
        failed = "; ".join(f"{name}: {why}" for name, why in sorted(result.failed.items()))
        raise EvalError(f"{scenario} seed {seed} ({profile}, {path}): detector(s) raised: {failed}")


def evaluate_run(
    scenario: str | Scenario,
    seed: int,
    store_dir: Path,
    duration_s: float | None = None,
    cfg: AnalysisConfig | None = None,
    profile: str | Path | Profile | None = None,
    path: str = "fast",
    impact: bool = True,
    detectors: Path | None = None,
) -> RunOutcome:
    """One scenario (a shipped name, or a `Scenario` as the exam draws it) with one seed under one profile
    (default: the scenario's): simulate into the store (a database per run) on the `fast` or `served` path,
    analyze, score. A detector that raises fails the run (`EvalError`). Without `impact`, the incidents' toll
    is not measured against counterfactual runs (each overlapping incident costs a rerun of the fabric): for
    scoring detection alone. `detectors`: another commit's package install whose detectors analyze the run
    (`rocescope.sim.other_detectors`: the difficulty guard); the outcome is theirs, with this tree's on the same
    store as its `own` (one simulation for both columns of the guard)."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, not {path!r}")
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    sc = sc.model_copy(update={"seed": seed})
    prof = load_profile(profile if profile is not None else sc.profile)
    db = "".join(c if c.isalnum() else "_" for c in f"eval_{sc.name}_{prof.name}_{seed}_{path}")
    settings = Settings(store=StoreConfig(path=store_dir, database=db, ttl_days=0))
    summary: RunSummary
    if path == "served":
        from rocescope.sim.serve import serve_scenario

        # as deployed: the collectors subscribe their own defaults, the switches answer as their OS does
        summary, _stats = serve_scenario(settings, sc, duration_s, profile=prof, counterfactuals=impact, deployed=True)
    else:
        summary = run_scenario(settings, sc, duration_s, profile=prof, counterfactuals=impact)
    poll = sc.poll_interval_s
    truths = [Truth.from_dict(d) for d in summary.incidents]
    truths = [replace(t, unresolved=unobservable_by_cadence(t.kind, prof, poll, t.seconds) or "") for t in truths]
    t0 = time.perf_counter()
    window = Window(summary.start, summary.end)
    other = analyze_with(detectors, store_dir, db, window) if detectors is not None else None
    other_s = time.perf_counter() - t0
    with ChdbStore(store_dir, db) as store:
        result = analyze(store, window, cfg, write=False)
        detectors_ran(result, sc.name, seed, prof.name, path)
        store.command(f"DROP DATABASE IF EXISTS `{db}`")
    own_s = time.perf_counter() - t0 - other_s

    def outcome(findings: list[Finding], analyze_s: float) -> RunOutcome:
        kinds = {t.kind for t in truths} | {f.kind for f in findings} | set(KIND_GROUPS)
        cadence = {k: coarsest_cadence(prof, k, poll) for k in kinds}
        scores = score(truths, findings, poll, cadence=cadence, clock_s=clock_error_s(prof))
        return RunOutcome(
            sc.name, seed, truths, findings, scores, summary.sim_seconds, summary.wall_seconds, prof.name, path,
            analyze_s,
        )  # fmt: skip

    mine = outcome(result.findings, own_s)
    return mine if other is None else replace(outcome(other, other_s), own=mine)


@dataclass(frozen=True)
class PlannedRun:
    """One run of an evaluation: a scenario (a shipped name, or one the exam drew) with a seed under a profile
    (None: the scenario's own), for `duration_s` (None: the scenario's)."""

    profile: str | None
    scenario: str | Scenario
    seed: int
    duration_s: float | None = None

    @property
    def name(self) -> str:
        return self.scenario if isinstance(self.scenario, str) else self.scenario.name

    @property
    def is_baseline(self) -> bool:
        return self.name == "baseline"


def plan_runs(
    kinds: Sequence[str], seeds: Sequence[int], baseline_s: float, profiles: Sequence[str | None], path: str
) -> list[PlannedRun]:
    """Every kind's scenarios over the seeds (`fast`: each scenario with every seed; `served`: one run per seed,
    the seeds taking the kind's scenarios in turn), plus a clean baseline of `baseline_s`, under each profile."""
    plan: list[PlannedRun] = []
    for prof in profiles:
        if path == "served":
            plan += [
                PlannedRun(prof, SCENARIOS[k][i % len(SCENARIOS[k])], s) for k in kinds for i, s in enumerate(seeds)
            ]
        else:
            plan += [PlannedRun(prof, sc, s) for k in kinds for sc in SCENARIOS[k] for s in seeds]
        if baseline_s > 0:
            plan.append(PlannedRun(prof, "baseline", seeds[0] if seeds else 1, baseline_s))
    return plan


def die_with_parent() -> None:
    """A worker process ends when the process that started it dies (Linux `PR_SET_PDEATHSIG`): an `eval` killed
    alone (its workers in other processes) leaves no orphan finishing runs nobody reads, each holding a core."""
    import contextlib
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):  # not Linux: workers stop when they next read their queue
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG (linux/prctl.h)


def _run_in_worker(
    run: PlannedRun, cfg: AnalysisConfig | None, path: str, root: str, impact: bool, detectors: Path | None
) -> RunOutcome:
    """One planned run in a worker process, in a store directory of the worker's own (one process per chdb
    directory)."""
    import os

    where = Path(root) / f"worker-{os.getpid()}"
    return evaluate_run(run.scenario, run.seed, where, run.duration_s, cfg, run.profile, path, impact, detectors)


def run_plan(
    plan: Sequence[PlannedRun],
    cfg: AnalysisConfig | None = None,
    path: str = "fast",
    on_run: Callable[[RunOutcome], None] | None = None,
    progress: bool = False,
    workers: int = 1,
    store_dir: Path | None = None,
    impact: bool = True,
    detectors: Path | None = None,
) -> list[RunOutcome]:
    """Every planned run's outcome, in plan order; with `workers` > 1, that many runs at a time, each in a process
    of its own (the simulator and the detectors are single-threaded); `impact` and `detectors` as
    `evaluate_run`."""
    outcomes: list[RunOutcome | None] = [None] * len(plan)
    with tempfile.TemporaryDirectory(prefix="rocescope-eval-") as tmp, _bar(progress, len(plan)) as step:
        where = store_dir or Path(tmp)
        if workers <= 1:
            for i, run in enumerate(plan):
                step(f"{run.profile or 'own profile'}: {run.name} seed {run.seed}")
                outcomes[i] = evaluate_run(
                    run.scenario, run.seed, where, run.duration_s, cfg, run.profile, path, impact, detectors
                )
                if on_run is not None:
                    on_run(outcomes[i])  # type: ignore[arg-type]
        else:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=die_with_parent) as pool:
                futures = {
                    pool.submit(_run_in_worker, run, cfg, path, str(where), impact, detectors): i
                    for i, run in enumerate(plan)
                }
                for done in as_completed(futures):
                    i = futures[done]
                    step(f"{plan[i].profile or 'own profile'}: {plan[i].name} seed {plan[i].seed}")
                    outcomes[i] = done.result()
                    if on_run is not None:
                        on_run(outcomes[i])  # type: ignore[arg-type]
        step("")
    return [o for o in outcomes if o is not None]


def group_scores(outcomes: Sequence[RunOutcome], label: Callable[[RunOutcome], str]) -> list[ProfileScores]:
    """Scores per group of runs (`label(outcome)`: e.g. its profile), baselines' findings apart."""
    results: dict[str, ProfileScores] = {}
    for o in outcomes:
        res = results.setdefault(label(o), ProfileScores(label(o)))
        merge(res.scores, o.scores)
        res.runs.append(o)
        if o.scenario == "baseline":
            res.baseline_s += o.sim_seconds
            res.baseline_findings += [f for s in o.scores.values() for f in s.unmatched]
    return list(results.values())


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
    workers: int = 1,
) -> list[ProfileScores]:
    """`plan_runs` run and scored per profile (None: each scenario's own)."""
    plan = plan_runs(kinds, seeds, baseline_s, profiles, path)
    outcomes = run_plan(plan, cfg, path, on_run, progress, workers, store_dir)
    return group_scores(outcomes, lambda o: o.profile)


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
