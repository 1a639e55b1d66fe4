"""One analysis run: a window, every enabled detector over it, findings attributed to jobs and written.

Detectors share one `Frames` (so a rate two detectors need is queried once) and one `Fabric`. A
detector that fails is logged and counted, and the others still run: a bug in one must not hide what
the others found. Findings without job ids get the jobs at their ports. Each detector sees what the ones
before it found (`Context.prior`). Then every finding gets what it cost each job (`impact.py`, from NCCL
collective timings) and whose traffic caused it (`blame.py`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from rocescope.analysis.blame import with_blame
from rocescope.analysis.coverage import Coverage, coverage
from rocescope.analysis.detectors import (
    cnp_loss,
    ecmp_imbalance,
    incast,
    link_health,
    microburst,
    nccl_hang,
    pfc_deadlock,
    pfc_storm,
    polarization,
    unexplained_slowdown,
)
from rocescope.analysis.detectors.base import Context, Detector
from rocescope.analysis.fabric import Fabric, split_ref
from rocescope.analysis.findings import Finding, write_findings
from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.impact import ImpactParams, with_impact
from rocescope.analysis.priorities import paused_priorities, with_observed
from rocescope.config import AnalysisConfig
from rocescope.errors import ConfigError, RocescopeError
from rocescope.pipeline.store import Store

log = logging.getLogger(__name__)

#: The detector suite, in run order.
DETECTORS: tuple[Detector[Any], ...] = (
    pfc_storm.DETECTOR,
    pfc_deadlock.DETECTOR,
    polarization.DETECTOR,
    ecmp_imbalance.DETECTOR,
    incast.DETECTOR,
    microburst.DETECTOR,
    cnp_loss.DETECTOR,
    link_health.DETECTOR,
    nccl_hang.DETECTOR,  # after the fabric's: a deadlock, storm or link down on its path owns a job's silence
    unexplained_slowdown.DETECTOR,  # last: it reports the slowdowns the others' findings do not explain
)


@dataclass
class AnalysisResult:
    run_id: str
    window: Window
    findings: list[Finding]
    seconds: dict[str, float] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    queries: int = 0
    written: int = 0
    #: metric -> counter samples dropped as drops that prove no reset (`Frames.dropped`)
    dropped_samples: dict[str, int] = field(default_factory=dict)
    #: what the window's telemetry could judge (`rocescope.analysis.coverage`); None if it could not be told
    coverage: Coverage | None = None

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())


def selected(cfg: AnalysisConfig, only: Sequence[str] | None = None) -> list[tuple[Detector[Any], Any]]:
    """Enabled detectors with their validated thresholds (ConfigError on an unknown name or key)."""
    known = {d.name for d in DETECTORS}
    unknown = sorted((set(cfg.detectors) | set(cfg.disabled) | set(only or ())) - known)
    if unknown:
        raise ConfigError(f"analysis: unknown detector(s) {unknown}; known: {sorted(known)}")
    return [
        (d, d.configure(cfg.detectors.get(d.name)))
        for d in DETECTORS
        if d.name not in cfg.disabled and (not only or d.name in only)
    ]


def _progress(enabled: bool) -> Any:
    if not enabled:
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("[bold]analyze"), BarColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    )  # fmt: skip


def analyze(
    store: Store,
    window: Window,
    cfg: AnalysisConfig | None = None,
    only: Sequence[str] | None = None,
    write: bool = True,
    progress: bool = False,
) -> AnalysisResult:
    """Run the detectors over `window`; with `write`, replace the window's findings in the store."""
    cfg = cfg or AnalysisConfig()
    suite = selected(cfg, only)
    frames = Frames(store, window)
    result = AnalysisResult(uuid.uuid4().hex, window, [])
    t0 = time.perf_counter()
    fabric = Fabric.from_frames(frames)
    ctx = Context(frames, fabric)
    observed = paused_priorities(frames)
    unnamed = sorted({q for _, p in suite for q in observed - set(getattr(p, "lossless_priorities", observed))})
    if unnamed:
        log.info("PFC frames counted on priorities %s the config does not name lossless: judged lossless too", unnamed)
    suite = [(det, with_observed(params, observed)) for det, params in suite]
    result.seconds["frames"] = time.perf_counter() - t0
    with _progress(progress) as bar:
        task = bar.add_task("", total=len(suite)) if bar is not None else None
        for det, params in suite:
            if bar is not None:
                bar.update(task, description=det.name)
            t = time.perf_counter()
            ctx.prior = list(result.findings)
            try:
                found = det.detect(ctx, params)
            except RocescopeError as exc:
                log.error("detector %s failed on %s: %s", det.name, window, exc)
                result.failed[det.name] = str(exc)
                found = []
            result.seconds[det.name] = time.perf_counter() - t
            result.findings += [capped_on_estimates(_attributed(f, fabric)) for f in found]
            if bar is not None:
                bar.advance(task)
    result.findings = pfc_deadlock.fold_spread_storms(result.findings)  # a loop's spread is the loop's finding
    t = time.perf_counter()
    result.findings = _assessed(result, frames, fabric)
    result.seconds["impact"] = time.perf_counter() - t
    result.findings.sort(key=lambda f: (f.start, f.kind))
    t = time.perf_counter()
    try:
        result.coverage = coverage(frames, fabric, ctx.speeds)
        log.info("could not judge in %s: %s", window, result.coverage.summary())
    except (RocescopeError, pl.exceptions.PolarsError) as exc:
        log.error("coverage failed on %s: %s", window, exc)
        result.failed["coverage"] = str(exc)
    result.seconds["coverage"] = time.perf_counter() - t
    result.queries = frames.queries
    result.dropped_samples = dict(frames.dropped)
    if frames.dropped:
        log.info(
            "%d counter samples dropped in %s: their drop proves no reset (a clock stepped back, a stale value "
            "re-sent): %s",
            sum(frames.dropped.values()), window, dict(sorted(frames.dropped.items())),
        )  # fmt: skip
    if write:
        result.written = write_findings(store, result.findings, window, result.run_id)
    return result


def _assessed(result: AnalysisResult, frames: Frames, fabric: Fabric) -> list[Finding]:
    """The findings with what they cost each job (`impact`) and whose traffic caused them (`blame`); a failure
    here is logged and counted, and the findings are kept as the detectors gave them."""
    try:
        span = ImpactParams().lookback_s, ImpactParams().after_s
        coll, rows = frames.collectives(*span), frames.usable_collectives(*span)
        # Inspector's own word that its records are incomplete, by the names the collectives' hosts go by
        dropped = frames.named(frames.gauges(["nccl_records_dropped"]), ("device",))
        return with_blame(with_impact(result.findings, coll, fabric, dropped=dropped, rows=rows), fabric)
    except (RocescopeError, pl.exceptions.PolarsError) as exc:
        log.error("impact and blame failed on %s: %s", result.window, exc)
        result.failed["impact"] = str(exc)
        return result.findings


#: Evidence that is an estimate: a speed inferred from traffic, pause frames read as time without a speed, pause
#: time a PFC watchdog estimated from its polls (SONiC `EST_*`: an upper bound).
_ESTIMATES = {"inferred", "pause_frames_no_speed", "pause_duration_estimated"}


def capped_on_estimates(f: Finding) -> Finding:
    """A finding that rests on an estimate (`_ESTIMATES`) is never critical: a 400G uplink inferred at 100G
    quadruples its utilization. A finding the device itself declared critical (`critical_by_device`: a NIC
    that had to stop its own pause) rests on no estimate for its severity."""
    ev = f.evidence
    if ev.get("critical_by_device"):
        return f
    said = {ev.get("speed_source"), *(ev.get("speed_sources") or {}).values(), *(ev.get("pause_evidence") or ())}
    estimates = sorted(str(x) for x in said & _ESTIMATES)
    if f.severity != "critical" or not estimates:
        return f
    return f.with_(severity="warning", evidence={**ev, "severity_capped": f"rests on an estimate: {estimates}"})


#: How directly a job is known to pass a port (`Fabric.path_evidence`), the strongest first.
_PATHS = ("placed", "observed", "possible")


def _attributed(f: Finding, fabric: Fabric) -> Finding:
    """The finding with its jobs (the detector's, else the jobs at its ports) and, in `job_paths`, how each job is
    known to pass the finding's ports: on the NIC (`placed`), its connections seen crossing the leaf (`observed`),
    or only its placement allowing it (`possible`)."""
    if f.job_ids is None:
        f = f.with_(job_ids=tuple(fabric.jobs_at_refs(f.ports, f.start, f.end)))
    paths: dict[str, str] = {}
    for ref in f.ports:
        device, port = split_ref(ref)
        for job in set(f.job_ids or ()) & fabric.jobs_at(device, port, f.start, f.end):
            seen = fabric.path_evidence(job, device, port)
            paths[job] = min(paths.get(job, seen), seen, key=_PATHS.index)
    return f.with_(evidence={**f.evidence, "job_paths": dict(sorted(paths.items()))}) if paths else f


def overrides_from(mapping: Mapping[str, Mapping[str, Any]]) -> AnalysisConfig:
    """An analysis config with only detector thresholds set (tests, eval)."""
    return AnalysisConfig(detectors={k: dict(v) for k, v in mapping.items()})
