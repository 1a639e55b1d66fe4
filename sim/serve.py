"""Serve a running simulated fabric over real protocols, and collect it back with the real collectors.

`FabricServer` (`sim.facades.server`) publishes each poll of the engine (one `Engine.snapshot` per
poll, FABRIC time) to every facade through a `FabricClock` (`sim.facades.clock`):

* a gNMI target per switch (`GnmiFacade` with the clock: SAMPLE runs on fabric time, notification
  timestamps are the tick's fabric time);
* an SNMP v2c agent per switch (`sim.facades.snmp`: IF-MIB ifTable/ifXTable, ifHighSpeed, PFC MIBs);
* a host-view directory per host (`sim.facades.hostview`: `write_host_view` lays it out once; each tick
  `HostViews` rewrites only the value files: `ethtool -S` text, RDMA `hw_counters/` and `counters/`,
  link state when it changes);
* LLDP (`lldpcli -f json` per device) and the pod list, static for a run;
* NCCL Inspector's dump directory (`sim.facades.nccl`): every training rank's process appends its collectives,
  timed by the fabric (`sim.collectives`), to `<root>/nccl/<host>-pid<pid>.log` as the tick completes them; with
  `collect`, the NCCL collector tails the directory each tick (as `rocescope collect nccl --dir` does);
* a mirror port (`sim.mirror.MirrorFiles`): the packet mirror's sampled RoCEv2 packets as rotating
  pcapng files in `<root>/mirror/` (with `out_dir`: `out_dir/served/mirror/`), one interface per mirrored
  leaf port, for `rocescope collect pcap FILES --sampling-rate N` or `rocescope import --kind pcap`.
  With `collect`, the pcap collector reads each file as it is rotated: the rows the fast path lands,
  each named by its interface.

`serve_scenario` runs a scenario through them as a deployment profile's gear reports it (`--profile`,
or the scenario's `profile:`; `rocescope.sim.gear`), with the collectors set up by `sim.collection`.
Lockstep (`speed=None`, the demo and `rocescope eval --path served`): the engine advances one poll and the
gear says what each device reads at it (each metric group at its own cadence and phase, stamped on the
device's clock); the switches' reads are published to their gNMI streams and the driver waits at the
clock's barrier until every stream has sent that tick (grpc flow control holds a stream whose collector
lags); the hosts that read their NICs at the tick are polled by the NIC collectors, rows stamped on each
host's clock; switches that read what they serve over SNMP only (Arista's PFC MIB) are polled over SNMP;
the gNMI collector streams into the transport. At the end every stream flushes what it still holds and the
driver waits until the collector decoded every value the facades sent. So no read is dropped or duplicated
and the run goes as fast as the pipeline allows. Paced (`speed` = fabric seconds per wall second) serves
for external tools (gnmic, snmpwalk, `rocescope collect gnmi --targets <file>`) with the addresses in
`targets-gnmi.yaml` / `targets-snmp.yaml`, until stopped or the scenario ends.

What the protocols change against the fast path (`sim.run`) with the same profile: the ideal profile's gNMI
serves no port speed (SONiC keeps it outside COUNTERS_DB), so switch `port_speed_bps` comes from an SNMP
ifHighSpeed walk at the start (and every `snmp_every_s` of fabric time if given; rows re-stamped with the
fabric time the agents served), while a real-gear profile serves it as its OS does (APPL_DB `PORT_TABLE`,
OpenConfig `negotiated-port-speed`, SR Linux `port-speed`); NIC rows carry source ethtool/rdma and add
what a real host shows (link state/speed of the netdev and RDMA port, IBTA `counters/` on mlx5's RDMA
port); what a collector cannot read lands under `raw:<name>` or not at all (see `gnmi_paths`). The NIC
collectors run in a child process, as on real hosts they do not share the simulator's CPU; `links` come
through the LLDP collector from the profile's LLDP side; `collectives` through the NCCL collector from the
Inspector files; `endpoints` (no jobs collector yet), `qp_owners` (no eBPF here) and
`incidents` (ground truth) are published as the fast path does, named as the profile names them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rocescope.collectors.gnmi.collector import GnmiCollector
from rocescope.collectors.nccl.collector import NcclCollector
from rocescope.collectors.nccl.tail import InspectorDir
from rocescope.collectors.snmp.objects import DEFAULT_OBJECTS
from rocescope.config import Settings
from rocescope.errors import SimError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.runner import publishing
from rocescope.pipeline.transport import Producer
from rocescope.sim.collection import NicFleet, SnmpPolls, collect_pcap, epoch_ns, publish_links
from rocescope.sim.collectives import CollectiveTimer
from rocescope.sim.facades.nccl import InspectorFiles
from rocescope.sim.facades.server import FabricServer
from rocescope.sim.gear import Gear
from rocescope.sim.incidents import World, build_world
from rocescope.sim.mirror import MirrorFiles, PacketMirror
from rocescope.sim.profile import Profile, load_profile
from rocescope.sim.run import SOURCE, RunSummary, progress_bar, publish_table, static_tables, summarize, with_profile
from rocescope.sim.scenario import LinkFlap, Scenario, load_scenario
from rocescope.sim.topology import Topology

__all__ = ["ServeStats", "serve_scenario"]

log = logging.getLogger(__name__)


@dataclass
class ServeStats:
    """What a served run did beyond `RunSummary`: per-protocol values, barrier waits, where things are."""

    gnmi_values_sent: int = 0
    gnmi_values_decoded: int = 0
    #: of those, stamped no later than the previous value of their series (dropped by the collector)
    gnmi_values_stale: int = 0
    nic_polls: int = 0
    snmp_polls: int = 0
    barrier_timeouts: int = 0
    #: wall seconds of the driver's parts: step, snapshot, hostviews, nic, snmp, barrier (waiting on streams)
    seconds: dict[str, float] = field(default_factory=dict)
    root: Path | None = None
    targets: dict[str, Path] = field(default_factory=dict)
    #: the packet mirror's rotating pcap files (`root/mirror`), and the packets they hold
    mirror_dir: Path | None = None
    mirror_files: list[Path] = field(default_factory=list)
    mirror_packets: int = 0
    #: RoCEv2 packets the pcap collector decoded from those files (with `collect`)
    mirror_packets_collected: int = 0
    #: where `links` came from: every device's lldpcli (ideal), or the profile's LLDP side
    links_from: str = ""
    #: NCCL Inspector's dump directory (`root/nccl`), the records the ranks wrote there and the rows the NCCL
    #: collector read back (with `collect`)
    nccl_dir: Path | None = None
    nccl_records: int = 0
    nccl_rows_collected: int = 0
    #: a deployed run's data faults (`Deployment`), or None
    deployment: Deployment | None = None


#: NTP steps a clock that is off by more than 128 ms (ntpd's step threshold; chrony with `makestep`): a switch
#: whose clock drifted 2.5 s ahead (unsynchronised for a day: tens of ppm) is set back at once when NTP reaches a
#: server again, and its samples after the step come before its last ones.
CLOCK_STEP_S = -2.5
#: An SNMP poller walking the same switch's IF-MIB beside its gNMI stream (an NMS, or `collect snmp` left pointed at
#: it) every 30 s: between rocescope's own SNMP default (10 s) and an NMS's (LibreNMS and Cacti: 300 s), often enough
#: that its samples interleave with the stream's in every window.
LEGACY_SNMP_EVERY_S = 30.0
#: A spine restarted as SONiC's fast-reboot restarts (its design, Azure/SONiC wiki "Fast-Reboot": the data plane
#: disrupted for at most 25 s, the control plane for at most 90 s): the ASIC restarts, so every link of it drops and
#: its counters start from zero, and its telemetry (a control-plane container) sends nothing until it is back. 90 s
#: is under LLDP's default hold time (30 s x 4 = 120 s, IEEE 802.1AB), so its neighbours keep their LLDP rows.
RESTART_LINKS_DOWN_S = 25.0
RESTART_TELEMETRY_DOWN_S = 90.0


@dataclass(frozen=True)
class Deployment:
    """The data faults of a served run as deployed, drawn from the scenario's seed: one switch's clock 2.5 s ahead
    and stepped back to the truth (`CLOCK_STEP_S`) half way through; another's interface counters polled over
    SNMP as well as streamed over gNMI (one counter from two sources, stamped by different clocks); and a spine
    restarted (`RESTART_LINKS_DOWN_S`, `RESTART_TELEMETRY_DOWN_S`) at a drawn time, where the fabric has one and
    the run is long enough."""

    stepped: str
    step_at_s: float
    step_s: float
    snmp_also: str
    snmp_every_s: float
    restarted: str | None = None
    restart_at_s: float = 0.0

    @classmethod
    def draw(cls, scenario: Scenario, duration_s: float) -> Deployment:
        switches = Topology(scenario.fabric).switches
        leaves = [d.name for d in switches if d.role == "leaf"] or [d.name for d in switches]
        spines = [d.name for d in switches if d.role == "spine"]
        rng = np.random.default_rng([scenario.seed, 0xDE9])
        stepped, snmp_also = (str(x) for x in rng.choice(leaves, 2, replace=len(leaves) < 2))
        restarted = str(rng.choice(spines)) if spines else None
        latest = duration_s - RESTART_TELEMETRY_DOWN_S - 10.0  # back, and read again, before the run ends
        if latest < 10.0:
            restarted = None
        at = float(rng.uniform(10.0, latest)) if restarted is not None else 0.0
        return cls(stepped, duration_s / 2, CLOCK_STEP_S, snmp_also, LEGACY_SNMP_EVERY_S, restarted, at)

    def restart(self) -> LinkFlap | None:
        """The spine's restart as an incident (its links down, its counters from zero; scored as a device event)."""
        if self.restarted is None:
            return None
        at, down = self.restart_at_s, RESTART_LINKS_DOWN_S
        return LinkFlap(kind="link_flap", device=self.restarted, start=at, end=at + down, down=down)


def serve_scenario(
    settings: Settings,
    scenario: str | Path | Scenario,
    duration_s: float | None = None,
    out_dir: Path | None = None,
    progress: bool = False,
    *,
    speed: float | None = None,
    collect: bool = True,
    stop: threading.Event | None = None,
    snmp_every_s: float | None = None,
    on_ready: Callable[[FabricServer], None] | None = None,
    profile: str | Path | Profile | None = None,
    counterfactuals: bool = True,
    deployed: bool = False,
) -> tuple[RunSummary, ServeStats]:
    """Run a scenario with its facades served as the deployment `profile` reports it (default: the
    scenario's `profile:`); lockstep with the collectors (`speed=None`), or paced.

    With `collect`, the gNMI, NIC, SNMP and LLDP collectors gather over the protocols and publish through
    the configured transport into the store, with the `endpoints` and `incidents` (ground truth) streams.
    The lockstep run ends now (as the fast path); a paced run starts now. Without `counterfactuals`, the
    incidents' toll is measured against the jobs' clean times only (as `run_scenario`).

    `deployed` runs it as a deployment would see it: the gNMI collector subscribes its own default paths at its
    own intervals (nobody tells it the gear's cadences; else each metric group at the cadence the profile reads
    it), and the data faults of `Deployment` happen (a clock step, one counter from two sources, a spine
    restarting). The switches answer SAMPLE as their profile says either way (`SwitchSide.sample`).
    """
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    prof = load_profile(profile if profile is not None else sc.profile)
    sc = with_profile(sc, prof)
    duration = float(duration_s if duration_s is not None else sc.duration)
    if speed is not None and speed <= 0:
        raise SimError("speed must be positive (fabric seconds per wall second)")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    start = now - dt.timedelta(seconds=duration) if speed is None else now
    faults = Deployment.draw(sc, duration) if deployed and not prof.is_ideal else None
    restart = faults.restart() if faults is not None else None
    if restart is not None:
        sc = sc.model_copy(update={"incidents": [*sc.incidents, restart]})
    world = build_world(sc, duration, start)
    gear = Gear(prof, world)
    if faults is not None:
        gear.step_clock(faults.stepped, start + dt.timedelta(seconds=faults.step_at_s), faults.step_s)
    if faults is not None and faults.restarted is not None:
        at = start + dt.timedelta(seconds=faults.restart_at_s)
        gear.restart(faults.restarted, at, RESTART_TELEMETRY_DOWN_S)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        truth = gear.ground_truth(world.ground_truth())
        (out_dir / "ground_truth.json").write_text(json.dumps(truth, indent=2) + "\n")
        root = out_dir / "served"
        shutil.rmtree(root, ignore_errors=True)
        cleanup = None
    else:
        shm = Path("/dev/shm")
        cleanup = Path(tempfile.mkdtemp(prefix="rocescope-serve-", dir=shm if shm.is_dir() else None))
        root = cleanup
    stats = ServeStats(root=root, deployment=faults)
    rows: dict[str, int] = {s: 0 for s in ("links", "endpoints", "qp_owners", "incidents", "counters", "collectives")}
    stop = stop or threading.Event()
    t0 = time.perf_counter()
    try:
        with publishing(settings, guard=True) if collect else _no_publishing() as (producer, _metrics):
            counting = _Counting(producer, rows) if producer is not None else None
            with FabricServer(world, root, gear=gear, own_subscriptions=deployed) as server:
                if producer is not None:
                    stats.links_from = publish_links(server, producer, rows)
                    tables = static_tables(world, gear)
                    for stream in ("endpoints", "qp_owners", "incidents"):
                        publish_table(producer, stream, tables[stream], SOURCE, rows)
                stats.targets = server.write_targets(out_dir or root)
                if on_ready is not None:
                    on_ready(server)
                polls = _drive(world, server, counting, stats, progress, speed, stop, snmp_every_s)
    finally:
        if cleanup is not None:
            shutil.rmtree(cleanup, ignore_errors=True)
    wall = time.perf_counter() - t0
    return summarize(world, world.engine.now, wall, polls, rows, out_dir, gear, counterfactuals), stats


class _no_publishing:
    def __enter__(self) -> tuple[None, None]:
        return None, None

    def __exit__(self, *exc: object) -> None:
        return None


class _Counting:
    """A Producer that counts the rows it forwards per stream (thread-safe: collectors publish from threads)."""

    def __init__(self, inner: Producer, rows: dict[str, int]) -> None:
        self.inner = inner
        self.rows = rows
        self._lock = threading.Lock()

    def publish(self, batch: Batch) -> None:
        self.inner.publish(batch)
        with self._lock:
            self.rows[batch.stream] = self.rows.get(batch.stream, 0) + batch.num_rows

    def flush(self, timeout: float | None = None) -> None:
        self.inner.flush(timeout)

    def close(self) -> None:
        self.inner.close()


def _drive(
    world: World,
    server: FabricServer,
    producer: _Counting | None,
    stats: ServeStats,
    progress: bool,
    speed: float | None,
    stop: threading.Event,
    snmp_every_s: float | None,
) -> int:
    """The tick loop; returns the number of polls published."""
    eng, poll = world.engine, world.scenario.poll_interval_s
    gnmi: GnmiCollector | None = None
    gstop = threading.Event()
    gthread: threading.Thread | None = None
    nics: NicFleet | None = None
    speeds: SnmpPolls | None = None  # the ideal profile's ifHighSpeed walk
    pfc: SnmpPolls | None = None  # what the profile's switches serve over SNMP only
    legacy: SnmpPolls | None = None  # a deployment's NMS polling one switch's IF-MIB beside the telemetry
    if producer is not None:
        targets = server.gnmi_targets()
        gnmi = GnmiCollector(targets, producer, flush_s=1.0, stall_s=3600.0)
        gthread = threading.Thread(target=gnmi.run, args=(gstop,), name="served-gnmi", daemon=True)
        gthread.start()
        streams = sum(len(t.groups()) for t in targets)
        if not server.clock.wait_consumers(streams, 30.0):
            raise SimError(f"gNMI collector: {server.clock.consumers} of {streams} streams subscribed within 30 s")
        assert server.hostviews is not None
        nics = NicFleet({h: server.hostviews.host_root(h) for h in server.hostviews.hosts})
        if server.snmp and server.dialect == "ideal":
            speeds = SnmpPolls(server, ("ifHighSpeed",))
            if server.clock.ts is not None:  # port speeds, before the streams load the CPU
                _publish(producer, speeds.poll(dict.fromkeys(server.snmp, epoch_ns(server.clock.ts))))
                stats.snmp_polls += 1
        if server.snmp and server.snmp_objects:
            pfc = SnmpPolls(server, server.snmp_objects)
        if server.snmp and stats.deployment is not None:
            legacy = SnmpPolls(server, DEFAULT_OBJECTS)
    timer = CollectiveTimer(world, server.gear.host_skew_s)
    inspector = InspectorFiles(server.root / "nccl")
    stats.nccl_dir = inspector.directory
    nccl = NcclCollector(InspectorDir(inspector.directory)) if producer is not None else None

    def collectives() -> None:
        if inspector.write(server.gear.inspector_records(timer.take())) and nccl is not None and producer is not None:
            batches = nccl.poll()
            _publish(producer, batches)
            stats.nccl_rows_collected += sum(b.num_rows for b in batches)

    pcaps = None
    if world.scenario.mirror.enabled:
        mirror = PacketMirror(eng, world.scenario.mirror, world.scenario.seed)
        if not server.gear.names.identity:  # one interface per mirrored port, named as the profile names it
            mirror.points = [server.gear.names.capture_point(p) for p in mirror.points]
        pcaps = MirrorFiles(mirror, server.root / "mirror")
        stats.mirror_dir = pcaps.directory
    polls = 0
    next_snmp = snmp_every_s or 0.0
    next_nms = 0.0
    wall0 = time.monotonic()
    try:
        with progress_bar(progress, world.duration_s, world.scenario.name) as bar:
            task = bar.add_task(world.scenario.name, total=world.duration_s) if bar is not None else None
            secs = stats.seconds
            clock = time.perf_counter
            while polls * poll < world.duration_s - 1e-9 and not stop.is_set():
                t = clock()
                eng.run(min(poll, world.duration_s - eng.now))
                world.observe()
                ts = eng.time
                t, secs["step"] = clock(), secs.get("step", 0.0) + clock() - t
                if speed is None:
                    if not server.clock.barrier(60.0):  # the previous tick is out of every stream
                        stats.barrier_timeouts += 1
                elif stop.wait(max(0.0, wall0 + eng.now / speed - time.monotonic())):
                    break
                t, secs["barrier"] = clock(), secs.get("barrier", 0.0) + clock() - t
                if nics is not None and producer is not None:  # the previous tick's host reads, before rewriting
                    batches = nics.collect()
                    _publish(producer, batches)
                    stats.nic_polls += sum(b.stream == "counters" for b in batches)
                    t, secs["nic"] = clock(), secs.get("nic", 0.0) + clock() - t
                table = eng.snapshot(ts)
                t, secs["snapshot"] = clock(), secs.get("snapshot", 0.0) + clock() - t
                reads = server.publish(ts, table)
                t, secs["publish"] = clock(), secs.get("publish", 0.0) + clock() - t
                if pcaps is not None:
                    written = pcaps.add(pcaps.mirror.sample(), ts)
                    if written is not None and producer is not None:
                        stats.mirror_packets_collected += collect_pcap(written, pcaps.mirror.spec, producer)
                    t, secs["mirror"] = clock(), secs.get("mirror", 0.0) + clock() - t
                polls += 1
                collectives()
                t, secs["nccl"] = clock(), secs.get("nccl", 0.0) + clock() - t
                if nics is not None:
                    nics.poll(reads.hosts)
                if producer is not None and pfc is not None and reads.snmp:
                    _publish(producer, pfc.poll(reads.snmp))
                    stats.snmp_polls += 1
                    t, secs["snmp"] = clock(), secs.get("snmp", 0.0) + clock() - t
                faults = stats.deployment
                if producer is not None and legacy is not None and faults is not None and eng.now + 1e-9 >= next_nms:
                    _publish(producer, legacy.poll({faults.snmp_also: epoch_ns(ts)}))
                    stats.snmp_polls += 1
                    next_nms = eng.now + faults.snmp_every_s
                if producer is not None and speeds is not None and snmp_every_s and eng.now + 1e-9 >= next_snmp:
                    _publish(producer, speeds.poll(dict.fromkeys(server.snmp, epoch_ns(ts))))
                    stats.snmp_polls += 1
                    next_snmp = eng.now + snmp_every_s
                    secs["snmp"] = secs.get("snmp", 0.0) + clock() - t
                if bar is not None:
                    bar.update(task, completed=min(eng.now, world.duration_s))
        collectives()
        server.clock.barrier(60.0)
        server.clock.finish()  # every stream sends what it still holds
        server.clock.barrier(60.0)
        if pcaps is not None:
            written = pcaps.flush()
            if written is not None and producer is not None:
                stats.mirror_packets_collected += collect_pcap(written, pcaps.mirror.spec, producer)
            stats.mirror_files, stats.mirror_packets = list(pcaps.files), pcaps.packets
        if nics is not None and producer is not None:
            batches = nics.collect()
            _publish(producer, batches)
            stats.nic_polls += sum(b.stream == "counters" for b in batches)
        if gnmi is not None:
            _drain(server, gnmi, 120.0)
    finally:
        stats.nccl_records = inspector.records
        inspector.close()
        gstop.set()
        server.clock.close()
        if gthread is not None:
            gthread.join(30)
        for polls_of in (speeds, pfc, legacy):
            if polls_of is not None:
                polls_of.close()
        if nics is not None:
            nics.close()
    stats.gnmi_values_sent = sum(server.values_sent().values())
    if gnmi is not None:
        stats.gnmi_values_decoded = sum(h.values + h.stale for h in gnmi.health().values())
        stats.gnmi_values_stale = sum(h.stale for h in gnmi.health().values())
    return polls


def _publish(producer: Producer, batches: list[Batch]) -> None:
    for b in batches:
        producer.publish(b)


def _drain(server: FabricServer, gnmi: GnmiCollector, timeout_s: float) -> None:
    """Wait until the collector decoded every value the facades sent (then stopping loses nothing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        sent = server.values_sent()
        got = {n: h.values + h.stale for n, h in gnmi.health().items()}  # stale values were decoded, then dropped
        if all(got.get(n, 0) >= v for n, v in sent.items()):
            return
        time.sleep(0.02)
    log.warning("gNMI collector did not catch up within %g s: sent %s, decoded %s", timeout_s, sent, got)
