"""The switch-side collect commands: `collect snmp`, `collect gnmi` and `collect lldp`.

The host-side ones (nic, ebpf, pcap, jobs) are in `collect.py`.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rocescope.cli.common import (
    COUNTER_COLUMNS,
    LimitOpt,
    OnceOpt,
    SecondsOpt,
    ShardOpt,
    collectors_config,
    fail,
    load_settings,
    pick,
    print_health,
    run_until_stopped,
    serve_own_metrics,
    show_batches,
)
from rocescope.errors import ConfigError, RocescopeError

if TYPE_CHECKING:
    from rocescope.collectors.gnmi.targets import GnmiTarget
    from rocescope.config import Settings


def _snmp_targets(path: Path) -> list[object]:
    """Devices from a YAML file (`devices: [{name, host, ...}]`); a value `env:NAME` is read from the
    environment, so communities and v3 keys stay out of the file."""
    from rocescope.collectors.common.config import load_entries
    from rocescope.collectors.snmp.collector import SnmpDevice

    devices: list[object] = list(load_entries(path, "SNMP targets", "devices", SnmpDevice.from_mapping))
    return devices


def collect_snmp(
    targets: Annotated[
        Path | None,
        typer.Option(
            help="YAML file: `devices: [{name, host, port, version, ...}]` (config: collectors.snmp.devices)."
        ),
    ] = None,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls (config: collectors.snmp.interval_s).")
    ] = None,
    seconds: SecondsOpt = None,
    once: OnceOpt = False,
    limit: LimitOpt = 200,
    shard: ShardOpt = None,
) -> None:
    """Poll switches over SNMP (v2c, v3): IF-MIB 64-bit counters, link state and speed, PFC MIB counters."""
    from rocescope.collectors.common.sharding import shard_targets
    from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
    from rocescope.pipeline.runner import publishing

    try:
        settings = load_settings()
        cfg = collectors_config(settings).snmp
        listed = _snmp_targets(targets) if targets is not None else cfg.build()
        devices = [d for d in listed if isinstance(d, SnmpDevice)]
        if not devices:
            raise ConfigError("no SNMP devices: give --targets or list collectors.snmp.devices in the config")
        devices = shard_targets(devices, lambda d: d.name, pick(shard, cfg.shard))
        if once:
            collector = SnmpCollector(devices)
            polled = collector.poll_once()
            found = [b for b in polled.values() if b is not None]
            show_batches(found, ["device", "port", "metric", "priority"], limit, COUNTER_COLUMNS)
        else:
            with publishing(settings, guard=True) as (producer, _):
                collector = SnmpCollector(devices, producer)
                serve_own_metrics(settings, collector.metrics)
                collector.run(pick(interval, cfg.interval_s), run_until_stopped(seconds))
    except RocescopeError as exc:
        raise fail(exc) from None
    down = print_health(collector.health())
    if once and down:
        raise typer.Exit(1)


def gnmi_targets(path: Path | None, settings: Settings) -> list[GnmiTarget]:
    """The gNMI targets of a `--targets` file, else of `collectors.gnmi.targets`."""
    from rocescope.collectors.gnmi.targets import load_targets

    found = load_targets(path) if path is not None else collectors_config(settings).gnmi.build()
    if not found:
        raise ConfigError("no gNMI targets: give --targets or list collectors.gnmi.targets in the config")
    return found


def collect_gnmi(
    targets: Annotated[
        Path | None,
        typer.Option(
            help="YAML file: `targets: [{name, address, vendor, paths, ...}]` (config: collectors.gnmi.targets)."
        ),
    ] = None,
    seconds: SecondsOpt = None,
    once: Annotated[bool, typer.Option("--once", help="Print every target's first full sample; ship nothing.")] = False,
    limit: LimitOpt = 200,
    shard: ShardOpt = None,
) -> None:
    """Stream switch counters over gNMI (Subscribe STREAM/SAMPLE): SONiC COUNTERS_DB, OpenConfig, SR Linux."""
    from rocescope.collectors.common.sharding import shard_targets
    from rocescope.collectors.gnmi.collector import GnmiCollector
    from rocescope.pipeline.runner import publishing

    try:
        settings = load_settings()
        devices = shard_targets(
            gnmi_targets(targets, settings), lambda t: t.name, pick(shard, collectors_config(settings).gnmi.shard)
        )
        if once:
            collector = GnmiCollector(devices)
            show_batches(collector.collect_once(), ["device", "port", "metric"], limit, COUNTER_COLUMNS)
        else:
            with publishing(settings, guard=True) as (producer, _):
                collector = GnmiCollector(devices, producer)
                serve_own_metrics(settings, collector.metrics)
                collector.run(run_until_stopped(seconds))
    except RocescopeError as exc:
        raise fail(exc) from None
    health = collector.health()
    if once:  # each stream closes after its first full sample on purpose: a target that sent one is up
        for h in health.values():
            h.connected = h.synced
    down = print_health(health)
    if once and down:
        raise typer.Exit(1)


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
    seconds: SecondsOpt = None,
    once: OnceOpt = False,
    limit: LimitOpt = 200,
) -> None:
    """LLDP neighbors into `links`: hosts via `lldpcli -f json show neighbors`, switches via gNMI openconfig-lldp.

    Switches are those of --gnmi-targets, or of collectors.gnmi.targets when collectors.lldp.gnmi is true."""
    from rocescope.collectors.lldp.collector import LldpCollector
    from rocescope.collectors.lldp.sources import (
        GnmiLldpSource,
        HostLldp,
        LldpcliCommand,
        LldpcliOutput,
        LldpcliSource,
        LldpSource,
        load_hosts,
    )
    from rocescope.pipeline.runner import publishing

    try:
        settings = load_settings()
        cfg = collectors_config(settings).lldp
        mode = pick(gnmi_mode, cfg.gnmi_mode)
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
        if not sources and pick(local, cfg.local):
            sources.append(HostLldp(hostname or cfg.hostname or socket.gethostname(), LldpcliCommand()))
        if gnmi_targets_file is not None or cfg.gnmi:
            sources.extend(GnmiLldpSource(t, mode) for t in gnmi_targets(gnmi_targets_file, settings))
        if not sources:
            raise ConfigError("nothing to poll: give --targets, --gnmi-targets, or leave --local on")
        if once:
            collector = LldpCollector(sources)
            show_batches(collector.poll_once(), ["device", "port"], limit)
        else:
            with publishing(settings, guard=True) as (producer, _):
                collector = LldpCollector(sources, producer)
                serve_own_metrics(settings, collector.metrics)
                collector.run(pick(interval, cfg.interval_s), run_until_stopped(seconds))
    except (RocescopeError, ValueError) as exc:
        raise fail(exc if isinstance(exc, RocescopeError) else ConfigError(str(exc))) from None
    down = print_health(collector.health())
    if once and down:
        raise typer.Exit(1)
