"""The host-side collect commands: `collect nic`, `collect ebpf`, `collect pcap`, `collect jobs`, `collect nccl`,
`collect nccl-otlp`.

The switch-side ones (snmp, gnmi, lldp) are in `collect_switches.py`.
"""

from __future__ import annotations

import contextlib
import logging
import shlex
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from rocescope.cli.common import (
    COUNTER_COLUMNS,
    LimitOpt,
    OnceOpt,
    SecondsOpt,
    collectors_config,
    console,
    err_console,
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
    from rocescope.pipeline.batch import Batch

log = logging.getLogger("rocescope.cli")


def collect_nic(
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls (config: collectors.nic.interval_s).")
    ] = None,
    seconds: SecondsOpt = None,
    once: OnceOpt = False,
    limit: LimitOpt = 200,
    hostname: Annotated[str | None, typer.Option(help="Device name for the rows (default: this host's).")] = None,
    sysfs_root: Annotated[Path | None, typer.Option(help="Where /sys is (a container's host mount).")] = None,
    netdev: Annotated[list[str] | None, typer.Option(help="Only these netdevs (default: every RoCE one).")] = None,
) -> None:
    """Poll this host's NICs: `ethtool -S` of every RoCE netdev and the RDMA port counters."""
    import socket

    from rocescope.collectors.nic.collector import NicCollector
    from rocescope.collectors.nic.host import LiveHost
    from rocescope.pipeline.runner import publishing

    try:
        settings = load_settings()
        cfg = collectors_config(settings).nic
        host = LiveHost(sysfs_root=str(pick(sysfs_root, cfg.sysfs_root)), netdevs=netdev or cfg.netdevs or None)
        name = hostname or cfg.hostname or socket.gethostname()
        if once:
            collector = NicCollector(host, name)
            show_batches([collector.poll()], ["port", "metric", "priority"], limit, COUNTER_COLUMNS)
            polls = 1
        else:
            with publishing(settings, guard=True) as (producer, _):
                collector = NicCollector(host, name, producer)
                serve_own_metrics(settings, collector.metrics)
                polls = collector.run(pick(interval, cfg.interval_s), run_until_stopped(seconds))
    except RocescopeError as exc:
        raise fail(exc) from None
    console.print(f"{polls} polls of {len(collector.port_map)} RDMA ports")
    failed = print_health(collector.health())
    if once and failed:
        raise typer.Exit(1)


def collect_ebpf(
    interface: Annotated[
        list[str] | None, typer.Option(help="Count RoCEv2 packets per QP here with XDP (repeatable).")
    ] = None,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls of the BPF maps (config: collectors.ebpf.interval_s).")
    ] = None,
    seconds: SecondsOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="Attach, count for one interval, print what would be shipped, ship nothing.")
    ] = False,
    limit: LimitOpt = 200,
    hostname: Annotated[str | None, typer.Option(help="Device name for the rows (default: this host's).")] = None,
    allow_privileged: Annotated[
        bool,
        typer.Option(
            "--allow-privileged",
            help="Run even when fully privileged (CAP_SYS_MODULE/CAP_SYS_RAWIO, e.g. plain root); "
            "otherwise grant only CAP_BPF, CAP_PERFMON (+CAP_NET_ADMIN for XDP).",
        ),
    ] = False,
) -> None:
    """eBPF (bcc): host drops by reason, TCP retransmits by peer, RoCEv2 packets per QP (XDP), QP owners."""
    import socket

    from rocescope.collectors.ebpf.capabilities import check_ebpf
    from rocescope.collectors.ebpf.collector import EbpfCollector
    from rocescope.pipeline.runner import publishing

    try:
        settings = load_settings()
        cfg = collectors_config(settings).ebpf
        name = hostname or cfg.hostname or socket.gethostname()
        period = pick(interval, cfg.interval_s)
        interfaces = interface or cfg.interfaces
        check_ebpf(xdp=bool(interfaces), allow_privileged=allow_privileged)
        if once:
            collector = EbpfCollector(name, None, interfaces=interfaces)
            with collector:
                threading.Event().wait(period)
                show_batches(collector.poll(), ["metric", "port"], limit, (*COUNTER_COLUMNS, "qpn", "pid", "comm"))
            polls = 1
        else:
            with publishing(settings, guard=True) as (producer, _):
                collector = EbpfCollector(name, producer, interfaces=interfaces)
                serve_own_metrics(settings, collector.metrics)
                with collector:
                    polls = collector.run(period, run_until_stopped(seconds))
    except RocescopeError as exc:
        raise fail(exc) from None
    health = collector.health()
    counters = health["maps"].values
    owners = health["qp"].values if "qp" in health else 0
    console.print(
        f"{polls} polls; {counters} counter rows, {owners} QP owner rows (QP source: {collector.qp_mode})",
        highlight=False,
    )
    failed = print_health(health)
    if once and failed:
        raise typer.Exit(1)


_PACKET_COLUMNS = ("ts", "src_ip", "dst_ip", "udp_sport", "dscp", "ecn", "opcode", "dest_qp", "psn", "becn", "length")


def collect_pcap(
    files: Annotated[list[Path] | None, typer.Argument(help="Capture files (pcap/pcapng).")] = None,
    interface: Annotated[
        list[str] | None,
        typer.Option(
            help="Capture live here, in rotating files; repeat for several (config: collectors.pcap.interface)."
        ),
    ] = None,
    seconds: Annotated[float | None, typer.Option(help="Live: stop after this long (default: until killed).")] = None,
    file_seconds: Annotated[
        float | None, typer.Option(help="Live: rotate capture files this often (config: collectors.pcap.file_seconds).")
    ] = None,
    ring_files: Annotated[
        int | None, typer.Option(help="Live: at most this many files on disk (config: collectors.pcap.ring_files).")
    ] = None,
    capture_dir: Annotated[
        Path | None,
        typer.Option(help="Live: where the files go (default: a temp dir) (config: collectors.pcap.capture_dir)."),
    ] = None,
    keep_files: Annotated[
        bool | None, typer.Option("--keep-files/--remove-files", help="Live: keep files after they landed.")
    ] = None,
    capture_point: Annotated[
        str | None, typer.Option(help="Where the packets were seen (host/netdev, mirror) (config: collectors.pcap).")
    ] = None,
    sampling_rate: Annotated[
        int | None, typer.Option(help="Keep 1 in N packets (config: collectors.pcap.sampling_rate).", min=1)
    ] = None,
    once: Annotated[
        bool,
        typer.Option(
            "--once", help="Decode the files (live: until a capture file holds packets), print them, ship nothing."
        ),
    ] = False,
    limit: LimitOpt = 200,
) -> None:
    """Sampled RoCEv2 packets (data, ACKs, CNPs) from capture files or a live interface (rotating files)."""
    from rocescope.collectors.pcap.collector import PcapCollector
    from rocescope.collectors.pcap.tshark import PcapFile
    from rocescope.pipeline.runner import publishing

    try:
        settings = load_settings()
    except RocescopeError as exc:
        raise fail(exc) from None
    cfg = collectors_config(settings).pcap
    configured = [cfg.interface] if isinstance(cfg.interface, str) else cfg.interface
    live = (interface or configured) if not files else interface
    if not files and not live:
        raise typer.BadParameter("give capture files or --interface (or collectors.pcap.interface)")
    point = pick(capture_point, cfg.capture_point) or (live[0] if live and len(live) == 1 else "") or "import"
    collector = PcapCollector(point, pick(sampling_rate, cfg.sampling_rate), interface_points=cfg.capture_points)
    total = 0
    shown: list[Batch] = []
    sink_metrics = None
    try:
        with contextlib.ExitStack() as stack:
            producer = None
            if not once:
                producer, sink_metrics = stack.enter_context(publishing(settings, guard=True))
                serve_own_metrics(settings, collector.metrics)

            def ship(batch: Batch) -> None:
                nonlocal total
                total += batch.num_rows
                if producer is None:
                    shown.append(batch)
                else:
                    producer.publish(batch)

            for path in files or []:
                source = PcapFile(path)
                try:
                    for batch in collector.collect(source):
                        ship(batch)
                finally:
                    source.close()
            if live:
                from rocescope.collectors.pcap.ring import RingCapture, capture_live

                ring = RingCapture(
                    live,
                    pick(capture_dir, cfg.capture_dir),
                    pick(file_seconds, cfg.file_seconds),
                    pick(ring_files, cfg.ring_files),
                    cfg.bpf_filter,
                    pick(keep_files, cfg.keep_files),
                )
                stop = run_until_stopped(seconds)

                def landed(path: Path, n: int) -> None:
                    log.info("%s: %d packets landed", path.name, n)
                    if once and n:
                        stop.set()  # --once: until the first capture file that holds packets

                capture_live(ring, collector, ship, stop, on_file=landed)
    except RocescopeError as exc:
        raise fail(exc) from None
    if once:
        show_batches(shown, ["ts"], limit, _PACKET_COLUMNS)
    skipped = ", ".join(f"{n} {why}" for why, n in collector.skipped.items()) or "none"
    console.print(
        f"{total} RoCEv2 packets from {point}; skipped: {skipped}; "
        f"malformed: {collector.malformed}; capture errors: {collector.source_errors}"
    )
    expired = sink_metrics.value("rocescope_sink_rows_expired_total") if sink_metrics else 0
    if expired:
        err_console.print(
            f"[yellow]{expired:.0f} packets are older than the retention (store.ttl_days="
            f"{settings.store.ttl_days}) and were dropped by the store; set store.ttl_days: 0 to keep old captures"
            "[/yellow]"
        )
    if collector.source_errors:
        raise typer.Exit(1)


_JOB_COLUMNS = ("job_id", "pod", "rank", "host", "netdev", "rdma_dev", "ip")


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
    slurm: Annotated[
        str | None,
        typer.Option(help="Slurm: a command printing `squeue --json` (`squeue --json`, or over ssh), or such a file."),
    ] = None,
    inventory: Annotated[
        Path | None, typer.Option(help="Host inventory YAML: `hosts: {host: [{netdev, rdma_dev, ip, gid}]}`.")
    ] = None,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between polls (config: collectors.jobs.interval_s).")
    ] = None,
    seconds: SecondsOpt = None,
    once: OnceOpt = False,
    limit: LimitOpt = 200,
) -> None:
    """Training jobs into `endpoints`: Kubeflow pods (rank, node) or Slurm jobs, and the node NICs their ranks use.

    Sources given on the command line replace those of collectors.jobs."""
    from rocescope.collectors.common.command import Command
    from rocescope.collectors.jobs.collector import JobsCollector, JobSource, PodListFile, SlurmJobs, StaticJobs
    from rocescope.collectors.jobs.kube import KubeApi
    from rocescope.collectors.jobs.placement import Inventory
    from rocescope.pipeline.runner import publishing

    try:
        settings = load_settings()
        cfg = collectors_config(settings).jobs
        if any(x is not None for x in (kubeconfig, in_cluster, static, pods, slurm)):
            cleared = {"kubeconfig": None, "in_cluster": False, "static": None, "pods": None, "slurm": None}
            cfg = cfg.model_copy(update=cleared)
        kubeconfig, static, pods = pick(kubeconfig, cfg.kubeconfig), pick(static, cfg.static), pick(pods, cfg.pods)
        inventory = pick(inventory, cfg.inventory)
        inv = Inventory.from_yaml(inventory) if inventory is not None else Inventory()
        sources: list[JobSource] = []
        if kubeconfig is not None:
            sources.append(KubeApi.from_kubeconfig(kubeconfig, pick(context, cfg.context)))
        if pick(in_cluster, cfg.in_cluster):
            sources.append(KubeApi.in_cluster())
        if static is not None:
            sources.append(StaticJobs(static))
        if pods is not None:
            sources.append(PodListFile(pods))
        if slurm is not None:  # a file of its output, else the command
            sources.append(SlurmJobs(Path(slurm) if Path(slurm).is_file() else Command(shlex.split(slurm), 30.0)))
        elif cfg.slurm:
            sources.append(SlurmJobs(Command(cfg.slurm, 30.0)))
        if not sources:
            raise ConfigError(
                "give --kubeconfig, --in-cluster, --static, --pods or --slurm (or set them in collectors.jobs)"
            )
        if inventory is None:
            err_console.print("[yellow]no --inventory: rows name hosts but no NICs (rank -1)[/yellow]")
        if once:
            collector = JobsCollector(sources, inv)
            show_batches(collector.poll_once(changes_only=False), ["job_id", "rank"], limit, _JOB_COLUMNS)
        else:
            with publishing(settings, guard=True) as (producer, _):
                collector = JobsCollector(sources, inv, producer)
                serve_own_metrics(settings, collector.metrics)
                collector.run(pick(interval, cfg.interval_s), run_until_stopped(seconds))
    except RocescopeError as exc:
        raise fail(exc) from None
    down = print_health(collector.health())
    if once and down:
        raise typer.Exit(1)


_COLLECTIVE_COLUMNS = ("ts", "host", "pid", "communicator", "rank", "ranks", "collective", "sequence", "bytes",
                       "exec_time_us", "bus_bw_gbs", "source")  # fmt: skip


def collect_nccl(
    directory: Annotated[
        Path | None, typer.Option("--dir", help="NCCL_INSPECTOR_DUMP_DIR (config: collectors.nccl.dir).")
    ] = None,
    interval: Annotated[
        float | None, typer.Option(help="Seconds between reads (config: collectors.nccl.interval_s).")
    ] = None,
    state_file: Annotated[
        Path | None, typer.Option("--state", help="Keep read offsets here (config: collectors.nccl.state_file).")
    ] = None,
    seconds: SecondsOpt = None,
    once: Annotated[
        bool, typer.Option("--once", help="Read what is there, print it, ship nothing (offsets not saved).")
    ] = False,
    limit: LimitOpt = 200,
) -> None:
    """NCCL collective timings: tail NCCL Inspector's output (JSON or Prometheus mode) into `collectives`."""
    from rocescope.collectors.nccl.collector import NcclCollector
    from rocescope.collectors.nccl.tail import InspectorDir
    from rocescope.pipeline.runner import publishing

    try:
        settings = load_settings()
        cfg = collectors_config(settings).nccl
        root = pick(directory, cfg.dir)
        if root is None:
            raise ConfigError("give --dir (or collectors.nccl.dir): where NCCL Inspector writes")
        folder = InspectorDir(root, cfg.patterns, cfg.recursive, cfg.max_read_mb << 20)
        if once:
            collector = NcclCollector(folder)
            show_batches(collector.poll(), ["host", "ts"], limit, _COLLECTIVE_COLUMNS)
        else:
            with publishing(settings, guard=True) as (producer, _):
                collector = NcclCollector(folder, producer, state_file=pick(state_file, cfg.state_file))
                serve_own_metrics(settings, collector.metrics)
                collector.run(pick(interval, cfg.interval_s), run_until_stopped(seconds))
    except RocescopeError as exc:
        raise fail(exc) from None
    console.print(f"{collector.rows} collectives from {len(folder.offsets)} files in {root}", highlight=False)
    down = print_health(collector.health())
    if once and down:
        raise typer.Exit(1)


def collect_nccl_otlp(
    listen: Annotated[
        str, typer.Option(help="HOST:PORT to receive OTLP/HTTP JSON on (point Inspector's OTEL endpoint here).")
    ] = "127.0.0.1:4318",
    seconds: SecondsOpt = None,
) -> None:
    """NCCL collective timings from NCCL Inspector's OpenTelemetry export (`NCCL_INSPECTOR_OTEL_EXPORT=1`, with
    `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT=http://HOST:PORT/v1/metrics`) into `collectives`."""
    from rocescope.collectors.nccl.otlp_receiver import OtlpReceiver
    from rocescope.pipeline.runner import publishing

    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise typer.BadParameter(f"--listen wants HOST:PORT, not {listen!r}")
    try:
        settings = load_settings()
        with publishing(settings) as (producer, _):
            try:
                receiver = OtlpReceiver(producer.publish, host.strip("[]"), int(port))
            except OSError as exc:
                raise ConfigError(f"cannot listen on {listen}: {exc}") from exc
            err_console.print(f"receiving OTLP/HTTP on http://{host}:{receiver.port}/v1/metrics", highlight=False)
            serve_own_metrics(settings, receiver.metrics)
            receiver.serve(run_until_stopped(seconds))
    except RocescopeError as exc:
        raise fail(exc) from None
    console.print(f"{receiver.rows} collectives received", highlight=False)
    print_health(receiver.health())
