"""The one `rocescope` command: a subcommand per area.

The app, its groups and the main callback live here; the commands are plain functions in one module
per area, registered below (area modules import only `common.py`, so nothing imports back):
- `common.py`: consoles, settings, errors as exit codes, option types, tables and target health
- `store.py`: config, migrate, sql, import, serve-http, sink, clickhouse ddl
- `collect.py`: collect nic, ebpf, pcap, jobs, nccl, nccl-otlp (hosts)
- `collect_switches.py`: collect snmp, gnmi, lldp (switches)
- `analysis.py`: analyze, findings, blame, report, eval
- `sim.py`: demo, sim list, sim run
- `broker.py`: broker (a local Kafka-protocol broker)
- `dashboards.py`: dashboards build
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from rocescope import library_logs
from rocescope.cli import analysis, broker, collect, collect_switches, dashboards, sim, store
from rocescope.cli.common import ConfigOpt, state

app = typer.Typer(
    help="Observability for RoCEv2 training fabrics.", no_args_is_help=True, pretty_exceptions_enable=False
)
sim_app = typer.Typer(help="The simulated RoCE fabric: scenarios with ground-truth incidents.", no_args_is_help=True)
collect_app = typer.Typer(
    help="Collect from devices: nic, pcap, snmp, ebpf, gnmi, lldp, jobs, nccl, nccl-otlp.", no_args_is_help=True
)
dashboards_app = typer.Typer(help="Grafana dashboards as code (grafanalib).", no_args_is_help=True)
clickhouse_app = typer.Typer(help="ClickHouse server and cluster helpers.", no_args_is_help=True)


@app.callback()
def main(
    config: ConfigOpt = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR.")] = "",
) -> None:
    """rocescope: collect, ship, store and analyse RoCE fabric telemetry."""
    state.config_path = config
    level = log_level or "WARNING"
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    library_logs.demote()  # kafka-python's retries, urllib3's: to the log at debug level, not the console


app.command("config")(store.config_cmd)
app.command()(store.migrate)
app.command("serve-http")(store.serve_http)
app.command()(store.sql)
app.command("import")(store.import_cmd)
app.command()(analysis.findings)
app.command()(analysis.blame)
app.command()(analysis.coverage)
app.command()(analysis.detectors)
app.command()(store.sink)
app.command()(broker.broker)
app.command()(sim.demo)

app.add_typer(sim_app, name="sim")
sim_app.command("list")(sim.sim_list)
sim_app.command("run")(sim.sim_run)

app.add_typer(collect_app, name="collect")
collect_app.command("nic")(collect.collect_nic)
collect_app.command("ebpf")(collect.collect_ebpf)
collect_app.command("snmp")(collect_switches.collect_snmp)
collect_app.command("gnmi")(collect_switches.collect_gnmi)
collect_app.command("pcap")(collect.collect_pcap)
collect_app.command("lldp")(collect_switches.collect_lldp)
collect_app.command("jobs")(collect.collect_jobs)
collect_app.command("nccl")(collect.collect_nccl)
collect_app.command("nccl-otlp")(collect.collect_nccl_otlp)

app.command()(analysis.analyze)
app.command("eval")(analysis.eval_cmd)

app.add_typer(dashboards_app, name="dashboards")
dashboards_app.command("build")(dashboards.dashboards_build)

app.command()(analysis.report)

app.add_typer(clickhouse_app, name="clickhouse")
clickhouse_app.command("ddl")(store.clickhouse_ddl)
