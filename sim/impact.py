"""What each incident cost each training job, from the model: the ground truth impact and blame are scored on.

For every incident and every placed training job, the job's collectives (`rocescope.sim.collectives`: one per
communication phase, at every rank) that overlap the incident's window, from the first rank's issue to the
phase's end, are compared with what the same collectives take with the incident switched off:

* a fabric incident changes the phase's time in the fabric. Switched off, a phase takes
  - when nothing else happens meanwhile (no other incident, no `traffic:` entry overlaps the window), the job's
    clean time: the median phase of the job over iterations that overlap no incident or traffic
    (`baseline_comm_s`; the fastest phase seen when every one overlaps one);
  - otherwise, what the same fabric with only this incident switched off gives (a counterfactual run,
    `build_world(switched_off=...)`, up to the window's end): the counterfactual phase of the job at the same
    moment (interpolated between phase midpoints).
  Each rank loses `phase - baseline` (the ring waits for its slowest member, so every rank loses the same);
* a straggler leaves the fabric alone and makes the other ranks wait; switched off, that rank's extra compute
  is gone: each rank loses its wait with the straggler minus its wait without it.

`gpu_seconds_lost[job]` sums the loss over those collectives and ranks (GPU-seconds; it may be slightly
negative when a job ran faster than its baseline). A phase still running when the run ended (a job hung by a
deadlock) counts as if it ended then, never as a gain; Inspector reports no such collective. The job is a
*victim* when the loss is at least `VICTIM_SHARE` of the clean GPU time of those collectives. Overlapping
incidents each count only what switching them off would give back.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from rocescope.sim.collectives import floor_s, waits
from rocescope.sim.stepper import ComputeChange, IterationRecord

if TYPE_CHECKING:
    from rocescope.sim.arming import GroundTruth
    from rocescope.sim.incidents import World
    from rocescope.sim.jobs import Job

F64 = npt.NDArray[np.float64]

__all__ = ["SETTLE_S", "VICTIM_SHARE", "Impact", "JobPhases", "incident_impacts"]

#: A job is a victim of an incident when it lost at least this share of its collectives' clean GPU time.
VICTIM_SHARE = 0.05
#: Queues and rates settle within this after an incident or traffic ends.
SETTLE_S = 1.0


@dataclass(frozen=True)
class Impact:
    """One incident's toll: the jobs it slowed and the GPU-seconds each job lost."""

    victim_jobs: tuple[str, ...]
    gpu_seconds_lost: dict[str, float]

    def as_dict(self) -> dict[str, object]:
        return {"victim_jobs": list(self.victim_jobs), "gpu_seconds_lost": self.gpu_seconds_lost}


@dataclass(frozen=True)
class JobPhases:
    """A job's communication phases and every rank's wait in each (phases x ranks); the last may be open."""

    job_id: str
    ranks: int
    message_bytes: int
    start: F64
    end: F64
    waits: F64
    prev_end: F64  # the previous phase's end (NaN for the first): whose compute the waits follow
    open_last: bool = False  # the last phase was still running when the run ended

    @property
    def comm(self) -> F64:
        return self.end - self.start

    @property
    def issued(self) -> F64:
        """When the first rank issued each collective."""
        return self.start - (self.waits.max(axis=1) if self.waits.size else 0.0)

    @classmethod
    def of(cls, job: Job, its: Sequence[IterationRecord], log: Sequence[ComputeChange], open_last: bool) -> JobPhases:
        ranks = job.world_size
        start = np.array([r.start_s for r in its])
        end = np.array([r.end_s for r in its])
        prev = np.r_[np.nan, end[:-1]] if len(its) else np.zeros(0)
        w = np.zeros((len(its), ranks))
        for k in range(1, len(its)):
            w[k] = waits(log, job.job_id, float(prev[k]), ranks)
        return cls(job.job_id, ranks, job.spec.message_bytes, start, end, w, prev, open_last and bool(len(its)))


def job_phases(world: World) -> dict[str, JobPhases]:
    """Every training job's phases so far, a running one included (as if it ended now)."""
    eng = world.engine
    by_job: dict[str, list[IterationRecord]] = {}
    for it in eng.iterations:
        by_job.setdefault(it.job_id, []).append(it)
    running = {it.job_id: it for it in eng.open_iterations()}
    out = {}
    for j in world.training_jobs:
        its = by_job.get(j.job_id, [])
        if j.job_id in running:
            its = [*its, running[j.job_id]]
        out[j.job_id] = JobPhases.of(j, its, eng.compute_log, j.job_id in running)
    return out


def baseline_comm_s(phases: JobPhases, windows: Sequence[tuple[float, float]]) -> float:
    """The job's clean phase time: the median over completed phases (the first aside) that overlap no window."""
    comm = phases.comm[:-1] if phases.open_last else phases.comm
    if not len(comm):
        return 0.0
    clean = np.ones(len(comm), bool)
    clean[0] = len(comm) == 1
    issued, end = phases.issued[: len(comm)], phases.end[: len(comm)]
    for lo, hi in windows:
        clean &= ~((end > lo) & (issued < hi + SETTLE_S))
    return float(statistics.median(comm[clean])) if clean.any() else float(comm.min())


def _hit(phases: JobPhases, truth: GroundTruth) -> npt.NDArray[np.bool_]:
    return (phases.end > truth.start_s) & (phases.issued < truth.end_s)


def _fabric_loss(phases: JobPhases, hit: npt.NDArray[np.bool_], base: float | JobPhases) -> float:
    """GPU-seconds the phases `hit` took beyond the baseline: a clean time, or a counterfactual run's phases."""
    comm = phases.comm
    if isinstance(base, JobPhases):
        if not len(base.start):
            return 0.0
        mid = (phases.start + phases.end) / 2
        ref = np.interp(mid, (base.start + base.end) / 2, base.comm)
    else:
        ref = np.full(len(comm), base)
    extra = comm - ref
    if phases.open_last:
        extra[-1] = max(0.0, extra[-1])
    return float((extra[hit] * phases.ranks).sum())


def _straggler_loss(phases: JobPhases, hit: npt.NDArray[np.bool_], rank: int, log: Sequence[ComputeChange]) -> float:
    """GPU-seconds the ranks waited for `rank` in the phases `hit`, beyond what they would without its slowness."""
    without = [c._replace(extra_s={r: d for r, d in c.extra_s.items() if r != rank}) for c in log]
    lost = 0.0
    for k in np.flatnonzero(hit):
        if k > 0:
            alone = waits(without, phases.job_id, float(phases.prev_end[k]), phases.ranks)
            lost += float(phases.waits[k].sum() - alone.sum())
    return lost


def _busy(world: World, i: int) -> bool:
    """Whether another incident or traffic entry is active during incident `i` (then only a counterfactual run
    says what switching it off would give back)."""
    t = world.truth[i]
    others = [(o.start_s, o.end_s) for k, o in enumerate(world.truth) if k != i and o.slow_rank is None]
    others += [(bg.start, bg.end if bg.end is not None else world.duration_s) for bg in world.scenario.traffic]
    return any(lo < t.end_s + SETTLE_S and hi + SETTLE_S > t.start_s for lo, hi in others)


def counterfactual(world: World, i: int) -> dict[str, JobPhases]:
    """The training jobs' phases in the same fabric with incident `i` switched off, up to just after its end."""
    from rocescope.sim.incidents import build_world

    index = _scenario_index(world, i)
    cf = build_world(world.scenario, world.duration_s, world.start, switched_off={index})
    cf.engine.run(min(world.duration_s, world.truth[i].end_s + 2 * SETTLE_S))
    return job_phases(cf)


def _scenario_index(world: World, i: int) -> int:
    """The scenario's index of the incident that gave truth row `i` (incidents starting after the run give none)."""
    active = [k for k, inc in enumerate(world.scenario.incidents) if inc.start < world.duration_s]
    return active[i]


def incident_impacts(world: World, counterfactual_runs: bool = True) -> list[Impact]:
    """The impact of each of the world's incidents (`world.truth` order), from the engine's run so far; with
    `counterfactual_runs`, overlapping incidents are measured against a run without them (else against the
    jobs' clean times)."""
    phases = job_phases(world)
    windows = [(t.start_s, t.end_s) for t in world.truth]
    windows += [(bg.start, bg.end if bg.end is not None else world.duration_s) for bg in world.scenario.traffic]
    bases = {j: baseline_comm_s(p, windows) for j, p in phases.items()}
    log = world.engine.compute_log
    out = []
    for i, truth in enumerate(world.truth):
        cf = counterfactual(world, i) if counterfactual_runs and truth.slow_rank is None and _busy(world, i) else None
        lost: dict[str, float] = {}
        victims = []
        for job_id, p in phases.items():
            hit = _hit(p, truth)
            if not hit.any():
                continue
            if truth.slow_rank is not None:
                loss = _straggler_loss(p, hit, truth.slow_rank[1], log) if truth.slow_rank[0] == job_id else 0.0
            else:
                loss = _fabric_loss(p, hit, cf[job_id] if cf is not None else bases[job_id])
            lost[job_id] = round(loss, 3)
            clean = int(hit.sum()) * p.ranks * (bases[job_id] + floor_s(p.message_bytes))
            if loss >= VICTIM_SHARE * clean:
                victims.append(job_id)
        out.append(Impact(tuple(victims), lost))
    return out
