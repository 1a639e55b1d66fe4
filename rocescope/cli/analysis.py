"""The analysis commands: `analyze` (run the detectors), `findings`, `blame` (who hurt whom), `coverage`, `detectors`
(each threshold and its source), `report` and `eval`."""

from __future__ import annotations

import datetime as dt
import json
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

from rocescope.cli.common import console, fail, load_settings, open_migrated_store, run_until_stopped
from rocescope.errors import ConfigError, RocescopeError
from rocescope.units import parse_duration, parse_time


def analyze(
    since: Annotated[
        str | None,
        typer.Option("--from", help="Window start: 15m, 2h (ago) or ISO time (default: analysis.window_minutes)."),
    ] = None,
    until: Annotated[str, typer.Option("--to", help="Window end (default: now).")] = "now",
    detector: Annotated[list[str] | None, typer.Option(help="Only these detectors (repeatable).")] = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep analyzing the latest window.")] = False,
    every: Annotated[str | None, typer.Option(help="Period in follow mode (default: analysis.follow_every_s).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print findings, do not write them.")] = False,
) -> None:
    """Run the detectors over a window and replace that window's findings in the store."""
    from rocescope.analysis.frames import Window
    from rocescope.analysis.present import findings_tables
    from rocescope.analysis.run import analyze as run_analysis
    from rocescope.pipeline.metrics import AnalysisMetrics

    try:
        settings = load_settings()
        cfg = settings.analysis
        span = dt.timedelta(minutes=cfg.window_minutes)
        period = parse_duration(every) if every else cfg.follow_every_s
        stop = run_until_stopped(None) if follow else threading.Event()
        metrics = AnalysisMetrics()
        if follow and cfg.metrics_port:
            metrics.serve(cfg.metrics_host, cfg.metrics_port)
        with open_migrated_store(settings) as store:
            while True:
                end = parse_time(until)
                start = parse_time(since) if since and not follow else end - span
                window = Window(start, end)
                result = run_analysis(store, window, cfg, detector, write=not dry_run, progress=not follow)
                rows = [
                    {**vars(f), "ports": list(f.ports), "devices": list(f.devices), "job_ids": list(f.job_ids or ())}
                    for f in result.findings
                ]
                console.print(
                    f"{window}: {len(result.findings)} finding(s) in {result.total_seconds:.1f} s"
                    + ("" if dry_run else f", {result.written} written")
                    + (f"; [red]failed: {', '.join(result.failed)}[/red]" if result.failed else ""),
                    highlight=False,
                )
                if result.coverage is not None:
                    metrics.record(result.coverage.labelled(), dict(Counter(f.kind for f in result.findings)))
                if not follow:
                    for table in findings_tables(rows):
                        console.print(table)
                if not follow or stop.wait(period):
                    break
    except (RocescopeError, ValueError) as exc:
        raise fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None


def findings(
    job: Annotated[str | None, typer.Option(help="Only findings that concern this job id.")] = None,
    kind: Annotated[str | None, typer.Option(help="Only this kind (pfc_storm, incast...).")] = None,
    since: Annotated[str, typer.Option(help="Findings still open at or after this (15m, 2h, ISO time).")] = "24h",
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables.")] = False,
    limit: Annotated[int, typer.Option()] = 500,
) -> None:
    """Findings grouped per training job, the worst job and the worst finding first."""
    from rocescope.analysis.present import findings_json, findings_tables, load_findings

    try:
        when = parse_time(since)
        with open_migrated_store(load_settings()) as store:
            rows = load_findings(store, when, job or "", kind or "", limit)
    except RocescopeError as exc:
        raise fail(exc) from None
    if as_json:
        sys.stdout.write(findings_json(rows) + "\n")
        return
    if not rows:
        console.print(f"no findings since {when:%Y-%m-%d %H:%M:%S} UTC")
    for table in findings_tables(rows):
        console.print(table)


def coverage(
    since: Annotated[str, typer.Option("--from", help="Window start (15m, 2h, ISO time).")] = "1h",
    until: Annotated[str, typer.Option("--to", help="Window end (default: now).")] = "now",
    as_json: Annotated[bool, typer.Option("--json", help="JSON: every item, judged or not, and why.")] = False,
) -> None:
    """What the window's telemetry can judge, per port, device and job and per finding kind, and why not where
    it cannot (no PFC counters or only per interface, no speed, no LLDP, a cadence too coarse for bursts, a
    device others name that sends nothing, collectives joined to no job): no finding is not health."""
    from rocescope.analysis.coverage import coverage_at

    try:
        start, end = parse_time(since), parse_time(until)
        with open_migrated_store(load_settings()) as store:
            cov = coverage_at(store, start, end)
    except RocescopeError as exc:
        raise fail(exc) from None
    if as_json:
        sys.stdout.write(json.dumps(cov.as_dict()) + "\n")
        return
    console.print(f"coverage {start:%Y-%m-%d %H:%M:%S} .. {end:%Y-%m-%d %H:%M:%S} UTC", highlight=False)
    for line in cov.lines() or ["no telemetry in the window"]:
        console.print(line, highlight=False, markup=False)


def detectors(
    as_json: Annotated[bool, typer.Option("--json", help="JSON: every parameter with its value and source.")] = False,
) -> None:
    """The detectors, in run order, and each threshold in effect (the config's overrides applied), its default
    and where its value comes from: a standard, a vendor's documented default, a derivation or a convention."""
    from rich.table import Table

    from rocescope.analysis.detectors.base import source_of
    from rocescope.analysis.run import DETECTORS

    try:
        cfg = load_settings().analysis
        effect = {d.name: d.configure(cfg.detectors.get(d.name)) for d in DETECTORS}
    except RocescopeError as exc:
        raise fail(exc) from None
    rows = [
        {
            "detector": d.name,
            "enabled": d.name not in cfg.disabled,
            "parameter": name,
            "value": getattr(effect[d.name], name),
            "default": f.default,
            "description": f.description,
            "source": source_of(d.params, name),
        }
        for d in DETECTORS
        for name, f in d.params.model_fields.items()
    ]
    if as_json:
        sys.stdout.write(json.dumps(rows, default=str) + "\n")
        return
    for d in DETECTORS:
        state = "" if d.name not in cfg.disabled else " (disabled)"
        table = Table(title=f"{d.name} v{d.version}: {', '.join(d.kinds)}{state}", title_justify="left", expand=True)
        for column in ("parameter", "value", "description", "source"):
            table.add_column(column, overflow="fold")
        for r in (r for r in rows if r["detector"] == d.name):
            value = f"{r['value']}" + ("" if r["value"] == r["default"] else f" (default {r['default']})")
            table.add_row(r["parameter"], value, r["description"], r["source"] or "-")
        console.print(table)


def blame(
    since: Annotated[
        str, typer.Option("--from", help="Findings still open at or after this (15m, 2h, ISO time).")
    ] = "24h",
    until: Annotated[str, typer.Option("--to", help="... and starting before this (default: now).")] = "now",
    as_json: Annotated[bool, typer.Option("--json", help="JSON (edges and the findings behind them).")] = False,
) -> None:
    """Who hurt whom: per culprit job (whose traffic caused findings: an incast's senders, a storm's root) and
    victim job (whose collectives they slowed), the GPU-seconds lost over the window, costliest first.
    `(no job)`: findings no job's traffic caused (a flapping link, a deadlock, a straggler)."""
    from rocescope.analysis.blame import blame_json, blame_table, load_edges

    try:
        start, end = parse_time(since), parse_time(until)
        with open_migrated_store(load_settings()) as store:
            edges, rows = load_edges(store, start, end)
    except RocescopeError as exc:
        raise fail(exc) from None
    if as_json:
        sys.stdout.write(blame_json(edges, rows, start, end) + "\n")
        return
    span = f"{start:%Y-%m-%d %H:%M:%S} .. {end:%Y-%m-%d %H:%M:%S} UTC"
    if not edges:
        console.print(f"no job hurt by a finding open in {span}", highlight=False)
        return
    console.print(blame_table(edges, f"[bold]who hurt whom[/bold], {span}"))


def report(
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write.")] = Path("report.html"),
    job: Annotated[str | None, typer.Option(help="Only findings that concern this job id.")] = None,
    finding: Annotated[str | None, typer.Option(help="Only this finding (its id in the report, or a prefix).")] = None,
    since: Annotated[
        str, typer.Option("--from", help="Findings still open at or after this (15m, 2h, ISO time).")
    ] = "24h",
) -> None:
    """Write the HTML incident report: findings per job, worst first, with their plots; one
    self-contained file (inline SVG, no scripts) that opens offline."""
    from rocescope.analysis.report.page import build_report

    try:
        when = parse_time(since)
        with open_migrated_store(load_settings()) as store:
            built = build_report(store, job, when, finding)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(built.html, encoding="utf-8")
    except (RocescopeError, OSError) as exc:
        raise fail(exc if isinstance(exc, RocescopeError) else ConfigError(f"{out}: {exc}")) from None
    console.print(
        f"wrote {out}: {len(built.rows)} finding(s), {len(built.cases)} case(s), {len(built.plots)} plot(s)"
        + (f", {len(built.skipped)} skipped (see the notes)" if built.skipped else ""),
        highlight=False,
        soft_wrap=True,
    )


def eval_cmd(
    kind: Annotated[list[str] | None, typer.Option(help="Only these incident kinds (repeatable).")] = None,
    seeds: Annotated[int | None, typer.Option(help="Seeds per kind (default 20; the exam: 10).")] = None,
    first_seed: Annotated[int, typer.Option(help="The first seed.")] = 1,
    baseline: Annotated[str, typer.Option(help="Fabric time of the clean baseline run (0 to skip).")] = "1h",
    profile: Annotated[
        list[str] | None,
        typer.Option(help="Profiles to score on (repeatable, `rocescope sim list`); default: the scenario's."),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Every shipped profile; with --exam, the whole factorial (a nightly).")
    ] = False,
    exam: Annotated[
        bool,
        typer.Option(
            "--exam",
            help="Runs drawn from the tested commit (seeds, scenarios, profiles; fabrics of 32x4 hosts or more, "
            "180 s or more; 5 clean baselines): no seed in the repository, none to tune on.",
        ),
    ] = False,
    commit: Annotated[
        str | None, typer.Option(help="The tested commit the exam draws from (default: git HEAD of the source).")
    ] = None,
    drawn: Annotated[
        bool,
        typer.Option(
            "--drawn/--as-written",
            help="The exam draws each run's fabric shape, placements and incidents (places, sizes, windows) from "
            "its seed; --as-written runs the shipped scenarios' own (as exams before the draw did).",
        ),
    ] = True,
    workers: Annotated[int, typer.Option(min=1, help="Runs at a time, each in a process of its own.")] = 1,
    impact: Annotated[
        bool | None,
        typer.Option(
            "--impact/--no-impact",
            help="Measure each incident's toll against counterfactual runs and score impact and blame (a rerun of "
            "the fabric per overlapping incident; default: on, off for the exam).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the evaluation as JSON (no tables).")] = False,
    out: Annotated[Path | None, typer.Option(help="Also write the evaluation as JSON here.")] = None,
    path: Annotated[
        str,
        typer.Option(
            help="fast: land the simulator's rows directly (every scenario of a kind, every seed); served: serve "
            "the fabric over gNMI/SNMP/host views/LLDP and gather it with the real collectors, as `demo` does "
            "(one run per seed and kind, the seeds taking the kind's scenarios in turn)."
        ),
    ] = "fast",
    detectors_from: Annotated[
        Path | None,
        typer.Option(
            help="Analyze each run with the detectors of another commit's package install (`pip install --no-deps "
            "--target DIR <checkout>`) as well as this tree's, both scored on the same runs: the exam's difficulty "
            "guard (the twin as hard for an old commit's detectors as independent data was)."
        ),
    ] = None,
) -> None:
    """Score the detectors on simulated incidents with ground truth, per deployment profile: precision,
    recall, localization (matched at the anchor, not merely the device), job attribution, findings per incident
    and delay per kind, the shares don't care and unobservable, and findings on clean baselines. A score with
    nothing to count shows `-`."""
    import json

    from rich.console import Console

    from rocescope.sim import evaluate as ev
    from rocescope.sim.exam import plan_exam, seed_base
    from rocescope.sim.impact_eval import impact_scores, impact_table
    from rocescope.sim.profile import load_profile, profile_names
    from rocescope.sim.scoring import groups_table, scores_table

    kinds = kind or list(ev.SCENARIOS)
    bad = sorted(set(kinds) - set(ev.SCENARIOS))
    if bad:
        raise fail(ConfigError(f"unknown kind(s) {bad}; known: {sorted(ev.SCENARIOS)}"))
    if path not in ev.PATHS:
        raise fail(ConfigError(f"--path must be one of {', '.join(ev.PATHS)}, not {path!r}"))

    def on_run(o: ev.RunOutcome) -> None:
        if as_json:
            return
        found = ", ".join(f"{f.kind}@{f.devices[0] if f.devices else '?'}" for f in o.findings) or "none"
        console.print(
            f"{o.profile}: {o.scenario} seed {o.seed} ({o.path}, {o.wall_seconds + o.analyze_seconds:.0f} s): "
            f"{len(o.truths)} incident(s), findings: {found}",
            highlight=False,
            soft_wrap=True,
        )

    try:
        settings = load_settings()
        if exam:
            commit = commit or _source_commit()
            plan = plan_exam(commit, kinds, seeds or 10, profiles=profile or None, full=full, drawn=drawn)
            title = f"exam of commit {commit[:12]} (seed base {seed_base(commit)}), {path} path" + (
                "" if drawn else ", scenarios as written"
            )
            if not as_json:
                console.print(f"{title}: {len(plan)} runs", highlight=False)
        else:
            profiles: list[str | None] = list(profile_names()) if full else list(profile or []) or [None]
            for name in profiles:
                load_profile(name)
            n = seeds or 20
            plan = ev.plan_runs(
                kinds, list(range(first_seed, first_seed + n)), parse_duration(baseline), profiles, path
            )
            title = f"{n} seed(s) per kind, {path} path"
        measure = impact if impact is not None else not exam
        if detectors_from is not None:
            measure = False  # impact and blame are this tree's, on this tree's findings
            title += f", detectors of {detectors_from}"
        outcomes = ev.run_plan(
            plan, settings.analysis, path, on_run, not as_json, workers, impact=measure, detectors=detectors_from
        )
    except (RocescopeError, ValueError) as exc:
        raise fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None
    results = ev.group_scores(outcomes, lambda o: "exam" if exam else o.profile)
    by_profile = ev.group_scores(outcomes, lambda o: o.profile)
    # with another commit's detectors, this tree's scored the same stores: the guard's other column
    own = [o.own for o in outcomes if o.own is not None]
    own_results = ev.group_scores(own, lambda o: "exam" if exam else o.profile)
    document = (
        ev.evaluation_json(results)
        | ({"commit": commit, "by_profile": ev.evaluation_json(by_profile)} if exam else {})
        | ({"this_tree": ev.evaluation_json(own_results)} if own else {})
    )
    if out is not None:
        out.write_text(json.dumps(document, indent=2) + "\n")
    if as_json:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        return
    wide = Console(width=max(console.width, 160))  # the tables stay whole in a CI log or a pipe
    for r in results:
        wide.print(scores_table(r.scores, f"profile {r.profile}: {title}" if not exam else title))
        tolls = impact_scores(r.runs) if measure else {}
        if tolls:
            wide.print(impact_table(tolls, f"impact and blame, {r.profile}, {path} path"))
        if r.baseline_s > 0:
            wide.print(
                f"clean baselines ({r.baseline_s:g} s of fabric time, {r.profile}): {len(r.baseline_findings)} "
                "false finding(s) (matching nothing the traffic made by itself)",
                highlight=False,
            )
    if exam:
        wide.print(groups_table({r.profile: r.scores for r in by_profile}, "by profile: recall / precision per kind"))
    for r in own_results:
        wide.print(scores_table(r.scores, f"this tree's detectors on the same runs ({r.profile})"))
        if r.baseline_s > 0:
            wide.print(
                f"clean baselines, this tree's detectors: {len(r.baseline_findings)} false finding(s)", highlight=False
            )


def _source_commit() -> str:
    """git HEAD of the tree rocescope runs from (the exam draws its runs from it)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ConfigError(f"the exam needs the tested commit: {root} is no git checkout (give --commit)") from exc
    return done.stdout.strip()
