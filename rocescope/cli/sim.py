"""The simulator's commands: `demo` (simulate, land, analyze, report) and `sim list` / `sim run`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rocescope.cli.common import console, fail, load_settings, open_migrated_store, run_until_stopped, write_table
from rocescope.errors import ConfigError, RocescopeError
from rocescope.units import parse_duration

if TYPE_CHECKING:
    from rocescope.sim.facades.server import FabricServer


def demo(
    scenario: Annotated[str, typer.Option(help="Scenario name or YAML file (`rocescope sim list`).")] = "demo",
    duration: Annotated[str | None, typer.Option(help="Fabric time to simulate, e.g. 10m, 90s.")] = None,
    fast: Annotated[
        bool, typer.Option("--fast", help="Land the simulator's snapshots directly (no protocols, no collectors).")
    ] = False,
    out: Annotated[Path, typer.Option(help="Where to write the HTML report and the Grafana dashboards.")] = Path(
        "rocescope-demo"
    ),
    kafka: Annotated[
        bool,
        typer.Option(
            "--kafka",
            help="Send the batches through the Kafka broker at kafka.bootstrap_servers (a sink runs here); with the "
            "default address and nothing listening there, a local broker (Tansu) is started for the run.",
        ),
    ] = False,
    processes: Annotated[
        bool,
        typer.Option(
            "--processes",
            help="With --kafka: the sink and the analysis run as `rocescope sink` / `rocescope analyze` processes "
            "of their own, as in a deployment (logs in --out).",
        ),
    ] = False,
    profile: Annotated[
        str | None,
        typer.Option(help="Deployment profile (name or YAML file, `rocescope sim list`); default: the scenario's."),
    ] = None,
) -> None:
    """Simulate a RoCE training fabric with incidents, land its telemetry in the store, analyze it, show
    the findings per training job next to the ground truth, and write the HTML report and dashboards.

    By default the simulator serves its switches over gNMI and SNMP and its hosts as /sys + `ethtool -S`
    views, and the real collectors gather them (in lockstep with fabric time) through the transport into
    the store: in-process by default, or with `--kafka` through the configured broker (a local one is started
    when kafka.bootstrap_servers is the default and nothing listens there) and a sink on a thread of this
    process, or (`--processes`) a sink process and an analysis process; `--fast` skips the protocols.

    The default scenario is 32 hosts x 4 rails, two training jobs, 10 minutes of fabric time with an
    incast, a PFC storm, microbursts and a flapping uplink (ground truth in the `incidents` table).
    """
    from rocescope.analysis.blame import blame_table, who_hurt_whom
    from rocescope.analysis.frames import Window
    from rocescope.analysis.present import findings_tables, load_findings
    from rocescope.analysis.report.page import write_report
    from rocescope.analysis.run import analyze as run_analysis
    from rocescope.cli.processes import SinkProcess, analyze_process, kafka_settings, start_local_broker
    from rocescope.dashboards.build import build_all
    from rocescope.pipeline.kafka import check_reachable
    from rocescope.sim.profile import load_profile
    from rocescope.sim.run import run_scenario

    stack = contextlib.ExitStack()
    try:
        settings = load_settings()
        if processes and not kafka:
            raise ConfigError("--processes goes with --kafka")
        seconds = parse_duration(duration) if duration else None
        if profile is not None:
            load_profile(profile)  # a bad profile fails before anything runs
        if kafka:
            settings = kafka_settings(settings, processes)
            local = start_local_broker(settings, out / "broker")
            if local is not None:
                stack.callback(local.stop)
            check_reachable(settings.kafka)  # before the simulator builds its fabric
        sink = stack.enter_context(SinkProcess(settings, out / "sink.log")) if processes else None
        if fast:
            summary = run_scenario(settings, scenario, seconds, None, progress=True, profile=profile)
        else:
            from rocescope.sim.serve import serve_scenario

            summary, served = serve_scenario(settings, scenario, seconds, None, progress=True, profile=profile)
            console.print(
                f"served over gNMI/SNMP/host views: {served.gnmi_values_decoded} of {served.gnmi_values_sent} gNMI "
                f"values decoded, {served.nic_polls} NIC polls, {served.snmp_polls} SNMP walk(s)",
                highlight=False,
            )
        analysis_line = ""
        if sink is not None:
            sink.wait_landed()
            console.print(sink.stop(), highlight=False, soft_wrap=True)
            analysis_line = analyze_process(settings, summary.start, summary.end, out / "analyze.log")
        stack.close()  # the local broker is not needed past this point
        with open_migrated_store(settings) as store:
            landed = store.query_arrow(
                "SELECT 'counters' AS stream, count() AS rows FROM counters UNION ALL "
                "SELECT 'links', count() FROM links UNION ALL SELECT 'endpoints', count() FROM endpoints UNION ALL "
                "SELECT 'incidents', count() FROM incidents"
            )
            incidents = store.query_arrow(
                "SELECT kind, start, end, devices, job_ids FROM incidents WHERE scenario = {s:String} ORDER BY start",
                {"s": summary.scenario},
            )
            if sink is None:
                result = run_analysis(store, Window(summary.start, summary.end), settings.analysis, progress=True)
                analysis_line = f"analysis took {result.total_seconds:.1f} s"
            rows = load_findings(store, summary.start)
            report = write_report(store, out / "report.html", since=summary.start)
        dashboards = build_all(out / "grafana", settings.store)
    except RocescopeError as exc:
        raise fail(exc) from None
    finally:
        stack.close()  # the local broker and the sink process never outlive the demo
    where = settings.store.path if settings.store.backend == "chdb" else settings.store.url
    console.print(f"[bold]landed in {settings.store.backend} at {where}[/bold]")
    for line in summary.lines():
        console.print(line, highlight=False)
    write_table(landed)
    console.print("[bold]ground truth[/bold]")
    write_table(incidents)
    console.print(f"[bold]findings per training job[/bold] ({analysis_line})", highlight=False)
    for table in findings_tables(rows):
        console.print(table)
    if not rows:
        console.print("no findings")
    edges = who_hurt_whom(rows)
    if edges:
        console.print(blame_table(edges, "[bold]who hurt whom[/bold] (GPU-seconds lost: the jobs' collectives)"))
    console.print(f"[bold]report[/bold]: {report.resolve()}", highlight=False, soft_wrap=True)
    console.print(
        f"[bold]dashboards[/bold]: {len(dashboards)} files in {(out / 'grafana').resolve()} "
        f"(start Grafana with GF_PATHS_PROVISIONING={(out / 'grafana' / 'provisioning').resolve()})",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        'Next: rocescope findings --job <job> --json | rocescope sql "SELECT * FROM findings" | '
        "rocescope sql \"SELECT * FROM port_rates WHERE metric = 'cnp_sent' AND rate > 0 LIMIT 20\"",
        highlight=False,
        soft_wrap=True,
    )


def sim_list() -> None:
    """The shipped scenarios and deployment profiles."""
    from rocescope.sim.profile import load_profile, profile_names
    from rocescope.sim.scenario import load_scenario, scenario_names

    console.print("[bold]scenarios[/bold]")
    for name in scenario_names():
        sc = load_scenario(name)
        kinds = ", ".join(sorted({i.kind for i in sc.incidents})) or "no incidents"
        console.print(f"{name}: {sc.duration:g} s; {kinds}", highlight=False)
    console.print("[bold]profiles[/bold] (--profile)")
    for name in profile_names():
        console.print(f"{name}: {load_profile(name).description}", highlight=False)


def sim_run(
    scenario: Annotated[str, typer.Option(help="Scenario name (`rocescope sim list`) or YAML file.")] = "demo",
    duration: Annotated[str | None, typer.Option(help="Fabric time, e.g. 10m (default: the scenario's).")] = None,
    out: Annotated[Path | None, typer.Option(help="Directory for ground_truth.json and summary.json.")] = None,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Serve gNMI/SNMP per switch and host views on loopback, paced, for external collectors "
            "(targets files in --out); stop with Ctrl-C.",
        ),
    ] = False,
    speed: Annotated[float, typer.Option(help="With --serve: fabric seconds per wall second (1 = real time).")] = 1.0,
    profile: Annotated[
        str | None,
        typer.Option(help="Deployment profile (name or YAML file); default: the scenario's `profile:`."),
    ] = None,
) -> None:
    """Simulate a scenario and send its telemetry through the pipeline into the store (fast path), as a
    deployment profile's gear reports it, or serve it over the real protocols (`--serve`)."""
    from rocescope.sim.profile import load_profile
    from rocescope.sim.run import run_scenario

    try:
        settings = load_settings()
        seconds = parse_duration(duration) if duration else None
        if profile is not None:
            load_profile(profile)  # a bad profile fails before anything runs
        if serve:
            from rocescope.sim.serve import serve_scenario

            summary, _ = serve_scenario(
                settings, scenario, seconds, out, progress=True, speed=speed, collect=False,
                stop=run_until_stopped(None), on_ready=lambda server: _print_served(server, out), profile=profile,
            )  # fmt: skip
        else:
            summary = run_scenario(settings, scenario, seconds, out, progress=True, profile=profile)
    except RocescopeError as exc:
        raise fail(exc) from None
    for line in summary.lines():
        console.print(line, highlight=False)


def _print_served(server: FabricServer, out: Path | None) -> None:
    """Where each switch and host is served, and the targets files for the collectors."""
    for sw in server.switches:
        g, s = server.gnmi.get(sw), server.snmp.get(sw)
        gnmi, snmp = g.address if g else "-", s.address if s else "-"
        console.print(f"{sw}: gNMI {gnmi}  SNMP v2c public@{snmp}", highlight=False)
    console.print(f"host views (sysfs + bin/ethtool): {server.root / 'hosts'}/<host>", highlight=False)
    console.print(f"LLDP JSON: {server.root / 'lldp'}, pods: {server.root / 'pods.json'}", highlight=False)
    for kind, path in server.write_targets(out or server.root).items():
        console.print(f"targets for `rocescope collect {kind} --targets {path}`", highlight=False)
