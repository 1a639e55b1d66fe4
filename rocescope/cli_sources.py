"""`rocescope collect lldp`, `collect jobs` and `import --kind ...`: registered on the CLI from here.

Kept out of cli.py so the areas can grow without every change touching the one shared file; cli.py
imports this module at its end (the command groups already exist by then).
"""

from __future__ import annotations

import datetime as dt
import logging
import socket
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rocescope.cli import (
    _collectors,
    _fail,
    _pick,
    _run_until_stopped,
    _settings,
    collect_app,
    console,
    err_console,
    gnmi_targets,
    show_batches,
)
from rocescope.errors import ConfigError, RocescopeError
from rocescope.pipeline.batch import Batch

if TYPE_CHECKING:
    from rocescope.collectors.common.health import Health

log = logging.getLogger("rocescope.cli")


def _show(batches: Sequence[Batch], sort: Sequence[str], limit: int, columns: Sequence[str] = ()) -> None:
    show_batches(batches, sort, limit, columns)


def _health_lines(health: dict[str, Health]) -> int:
    """Each target's health as one line; the number of targets down."""
    for h in health.values():
        console.print(h.summary(), highlight=False)
    return sum(not h.up for h in health.values())


@collect_app.command("lldp")
def collect_lldp(
    gnmi_targets_file: Annotated[
        Path | None,
        typer.Option("--gnmi-targets", help="Switches: the gNMI targets file (`collect gnmi --targets`)."),
    ] = None,
    targets: Annotated[
        Path | None,
        typer.Option(
            help="Hosts: YAML `hosts: [{name, command: [argv]} | {name, file}]` (config: collectors.lldp.hosts)."
        ),
    ] = None,
    local: Annotated[
        bool | None, typer.Option("--local/--no-local", help="Also this host's `lldpcli` (default: when no hosts).")
    ] = None,
    hostname: Annotated[str | None, typer.Option(help="Device name of this host (default: its hostname).")] = None,
    gnmi_mode: Annotated[
        str | None, typer.Option(help="get (falls back to ONCE when unimplemented) or once (config: collectors.lldp).")
    ] = None,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls (config: collectors.lldp.interval_s).")
    ] = None,
    seconds: Annotated[float | None, typer.Option(help="Stop after this long (default: until killed).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Poll once, print what would be shipped, ship nothing.")] = False,
    limit: Annotated[int, typer.Option(help="--once: rows shown.")] = 200,
) -> None:
    """LLDP neighbors into `links`: hosts via `lldpcli -f json show neighbors`, switches via gNMI openconfig-lldp.

    Switches are those of --gnmi-targets, or of collectors.gnmi.targets when collectors.lldp.gnmi is true."""
    from rocescope.collectors.lldp import (
        GnmiLldpSource,
        HostLldp,
        LldpcliCommand,
        LldpcliOutput,
        LldpcliSource,
        LldpCollector,
        LldpSource,
        load_hosts,
    )
    from rocescope.pipeline.runner import publishing

    try:
        settings = _settings()
        cfg = _collectors(settings).lldp
        mode = _pick(gnmi_mode, cfg.gnmi_mode)
        if mode not in ("get", "once"):
            raise typer.BadParameter("--gnmi-mode is get or once")
        sources: list[LldpSource] = []
        if targets is not None:
            sources.extend(load_hosts(targets))
        else:
            for h in cfg.hosts:
                cli: LldpcliSource = (
                    LldpcliOutput(h.file)
                    if h.file is not None
                    else LldpcliCommand(tuple(h.command or LldpcliCommand.argv), h.timeout_s)
                )
                sources.append(HostLldp(h.name, cli))
        if not sources and _pick(local, cfg.local):
            sources.append(HostLldp(hostname or cfg.hostname or socket.gethostname(), LldpcliCommand()))
        if gnmi_targets_file is not None or cfg.gnmi:
            sources.extend(GnmiLldpSource(t, mode) for t in gnmi_targets(gnmi_targets_file, settings))
        if not sources:
            raise ConfigError("nothing to poll: give --targets, --gnmi-targets, or leave --local on")
        if once:
            collector = LldpCollector(sources)
            _show(collector.poll_once(), ["device", "port"], limit)
        else:
            with publishing(settings) as (producer, _):
                collector = LldpCollector(sources, producer)
                collector.run(_pick(interval, cfg.interval_s), _run_until_stopped(seconds))
    except (RocescopeError, ValueError) as exc:
        raise _fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None
    down = _health_lines(dict(collector.health()))
    if once and down:
        raise typer.Exit(1)


_JOB_COLUMNS = ("job_id", "pod", "rank", "host", "netdev", "rdma_dev", "ip")


@collect_app.command("jobs")
def collect_jobs(
    kubeconfig: Annotated[
        Path | None, typer.Option(help="Read pods from the cluster of this kubeconfig (config: collectors.jobs).")
    ] = None,
    context: Annotated[str | None, typer.Option(help="kubeconfig context (default: the current one).")] = None,
    in_cluster: Annotated[
        bool | None, typer.Option("--in-cluster/--no-in-cluster", help="Use the pod's service account.")
    ] = None,
    static: Annotated[
        Path | None, typer.Option(help="YAML `jobs: [{name, namespace, hosts, nics}]` instead of Kubernetes.")
    ] = None,
    pods: Annotated[Path | None, typer.Option(help="`kubectl get pods -A -o json` output instead.")] = None,
    inventory: Annotated[
        Path | None, typer.Option(help="Host inventory YAML: `hosts: {host: [{netdev, rdma_dev, ip, gid}]}`.")
    ] = None,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls (config: collectors.jobs.interval_s).")
    ] = None,
    seconds: Annotated[float | None, typer.Option(help="Stop after this long (default: until killed).")] = None,
    once: Annotated[bool, typer.Option("--once", help="Poll once, print what would be shipped, ship nothing.")] = False,
    limit: Annotated[int, typer.Option(help="--once: rows shown.")] = 200,
) -> None:
    """Training jobs into `endpoints`: Kubeflow pods (rank, node) and the node NICs their ranks use.

    Sources given on the command line replace those of collectors.jobs."""
    from rocescope.collectors.jobs.collector import (
        Inventory,
        JobsCollector,
        JobSource,
        KubeApi,
        PodListFile,
        StaticJobs,
    )
    from rocescope.pipeline.runner import publishing

    try:
        settings = _settings()
        cfg = _collectors(settings).jobs
        if any(x is not None for x in (kubeconfig, in_cluster, static, pods)):
            cfg = cfg.model_copy(update={"kubeconfig": None, "in_cluster": False, "static": None, "pods": None})
        kubeconfig, static, pods = _pick(kubeconfig, cfg.kubeconfig), _pick(static, cfg.static), _pick(pods, cfg.pods)
        inventory = _pick(inventory, cfg.inventory)
        inv = Inventory.from_yaml(inventory) if inventory is not None else Inventory()
        sources: list[JobSource] = []
        if kubeconfig is not None:
            sources.append(KubeApi.from_kubeconfig(kubeconfig, _pick(context, cfg.context)))
        if _pick(in_cluster, cfg.in_cluster):
            sources.append(KubeApi.in_cluster())
        if static is not None:
            sources.append(StaticJobs(static))
        if pods is not None:
            sources.append(PodListFile(pods))
        if not sources:
            raise ConfigError("give --kubeconfig, --in-cluster, --static or --pods (or set them in collectors.jobs)")
        if inventory is None:
            err_console.print("[yellow]no --inventory: rows name hosts but no NICs (rank -1)[/yellow]")
        if once:
            collector = JobsCollector(sources, inv)
            _show(collector.poll_once(changes_only=False), ["job_id", "rank"], limit, _JOB_COLUMNS)
        else:
            with publishing(settings) as (producer, _):
                collector = JobsCollector(sources, inv, producer)
                collector.run(_pick(interval, cfg.interval_s), _run_until_stopped(seconds))
    except RocescopeError as exc:
        raise _fail(exc) from None
    down = _health_lines(dict(collector.health()))
    if once and down:
        raise typer.Exit(1)


class ImportKind(StrEnum):
    table = "table"
    gnmic = "gnmic"
    pcap = "pcap"
    lldpcli = "lldpcli"
    kubectl = "kubectl"
    sonic = "sonic"


def import_kind(
    kind: ImportKind,
    files: Sequence[Path],
    device: str | None,
    inventory: Path | None,
    kafka_topic: str | None,
    bootstrap: str | None,
    kafka_idle: float,
    at: str | None,
) -> None:
    """Import recorded device output of one kind through the configured transport."""
    from rocescope.collectors import importers
    from rocescope.collectors.common.json_text import load_json
    from rocescope.collectors.common.rows import CounterRows
    from rocescope.collectors.jobs.collector import Inventory, endpoints_batch, parse_pods
    from rocescope.collectors.lldp import links_batch, parse_lldpcli
    from rocescope.errors import DecodeError
    from rocescope.pipeline.runner import publishing

    if kafka_topic and kind is not ImportKind.gnmic:
        raise typer.BadParameter("--kafka-topic reads gnmic's Kafka output: use it with --kind gnmic")
    if not files and not kafka_topic:
        raise typer.BadParameter("give files (or --kafka-topic with --kind gnmic)")
    total = malformed = 0
    try:
        settings = _settings()
        when = dt.datetime.fromisoformat(at).astimezone(dt.UTC) if at else dt.datetime.now(dt.UTC)
        inv = Inventory.from_yaml(inventory) if inventory is not None else Inventory()
        with publishing(settings) as (producer, sink_metrics):

            def ship(batches: Sequence[Batch], what: str, bad: int, note: str = "") -> None:
                nonlocal total, malformed
                rows = sum(b.num_rows for b in batches)
                for b in batches:
                    if b.num_rows:
                        producer.publish(b)
                total += rows
                malformed += bad
                console.print(f"{what}: {rows} rows, {bad} malformed{note}", highlight=False)

            if kafka_topic:
                servers = (bootstrap or ",".join(settings.kafka.bootstrap_servers)).split(",")
                rows = CounterRows()
                bad_msgs = 0
                for value in importers.kafka_messages(servers, kafka_topic, kafka_idle):
                    try:
                        importers.gnmic_rows(importers.gnmic_documents(value), device or "", rows)
                    except DecodeError:
                        bad_msgs += 1
                ship(rows.to_batches("switch", "import"), f"kafka {kafka_topic}", rows.malformed + bad_msgs)
            for path in files:
                try:
                    data = path.read_bytes()
                except OSError as exc:
                    raise DecodeError(f"{path}: {exc}") from exc
                name = device or path.name.split(".")[0]
                if kind is ImportKind.gnmic:
                    rows = importers.gnmic_rows(importers.gnmic_documents(data), device or "")
                    batches = rows.to_batches("switch", "import")
                    ship(batches, str(path), rows.malformed, f", {rows.nonnumeric} non-numeric")
                elif kind is ImportKind.lldpcli:
                    found, bad = parse_lldpcli(data, name)
                    ship([links_batch(found, when, name)] if found else [], str(path), bad)
                elif kind is ImportKind.kubectl:
                    placed, bad = parse_pods(data, inv, when)
                    ship([endpoints_batch(placed, "kubectl")] if placed else [], str(path), bad)
                elif kind is ImportKind.sonic:
                    rows, links, bad = importers.sonic_dump(load_json(data, str(path)), name, when)
                    batches = rows.to_batches("switch", "import") + ([links_batch(links, when, name)] if links else [])
                    ship(batches, str(path), bad, f", {rows.unknown} objects without a name map")
                elif kind is ImportKind.pcap:
                    from rocescope.collectors.pcap.collector import PcapCollector, PcapFile

                    collector = PcapCollector(device or "import")
                    source = PcapFile(path)
                    try:
                        ship(list(collector.collect(source)), str(path), collector.malformed)
                    finally:
                        source.close()
    except (RocescopeError, ValueError) as exc:
        raise _fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None
    console.print(f"imported {total} rows ({kind.value}); {malformed} malformed records skipped")
    expired = sink_metrics.value("rocescope_sink_rows_expired_total") if sink_metrics else 0
    if expired:
        err_console.print(
            f"[yellow]{expired:.0f} rows are older than the retention (store.ttl_days={settings.store.ttl_days}) "
            "and were dropped by the store; set store.ttl_days: 0 to keep old data[/yellow]"
        )
