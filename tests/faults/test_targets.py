"""Dead and flapping targets (issue 8, item 4): while one gNMI target is killed (SIGKILL of its process) and
restarted, then hung (SIGSTOP: its TCP connection stays up, nothing comes) and continued, one SNMP agent goes
silent (snmpd stopped with SIGSTOP, then continued), one SNMP "agent" answers junk bytes and one gNMI target
streams junk, the healthy targets' data keeps flowing on time, the gNMI collector reconnects within its
backoff bound (and reopens a hung stream after its stall time), and the self-metrics (scraped in Prometheus'
text format while it happens) say exactly which target was down and when.

Everything on the wire is real: grpc gNMI targets on loopback (the simulator's facade, one in a child
process so it can be killed) serving a real sonic-gnmi COUNTERS output, Debian's snmpd, UDP sockets.
Waits are for events; the only time bounds asserted are the collector's own (its backoff, and the time
a dead target could hold the others up: one connect or poll timeout), and the figures are printed.
"""

from __future__ import annotations

import inspect
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pyarrow as pa
import pytest

from rocescope.collectors.gnmi.collector import GnmiCollector
from rocescope.collectors.gnmi.decode import GnmiDecoder
from rocescope.collectors.gnmi.paths import parse_path
from rocescope.collectors.gnmi.proto import pb
from rocescope.collectors.gnmi.targets import GnmiPath, GnmiTarget
from rocescope.collectors.snmp.agent import V2c
from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
from rocescope.sim.facades.gnmi import GnmiFacade
from rocescope.testbed.snmpd import GarbageAgent, Snmpd, snmpd_path

from watching import Arrivals, Scraper, max_gap, wait_all, wait_for

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "realdata" / "04_gnmi_sonic"
PORT_COUNTERS = REAL / "sonic-gnmi_COUNTERS_Ethernet68.txt"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pysnmp.*")

SAMPLE_S = 0.5  # gNMI SAMPLE interval of the healthy targets
SNMP_INTERVAL_S = 0.5
BACKOFF_INITIAL_S, BACKOFF_MAX_S, JITTER = 0.2, 1.0, 1.2  # the collector's backoff (jitter: x0.8..1.2)
SNMP_TIMEOUT_S, SNMP_RETRIES = 1.5, 1
DEAD_POLL_S = SNMP_TIMEOUT_S * (SNMP_RETRIES + 1)  # what one poll of a dead SNMP device takes
GNMI_TIMEOUT_S = 10.0  # the gNMI connect timeout (the default): a dead target's attempt lasts this long
STALL_S = 3.0  # a gNMI stream silent this long is reopened (6 samples of the healthy targets)
HANDSHAKE_S = 1.0  # allowance for connect + subscribe + first sample on a loaded machine


def stamped_now(table: pa.Table) -> pa.Table:
    """The table with every row stamped now: each sample stamped when it is sent, as sonic-gnmi stamps it (a value
    re-sent with its old stamp is stale, and the collector drops it)."""
    ts = pa.array([time.time_ns()] * table.num_rows, pa.int64()).cast(table.schema.field("ts").type)
    return table.set_column(table.schema.get_field_index("ts"), "ts", ts)


#: The killed gNMI target: the simulator's facade in a process of its own, serving a counters table from an
#: Arrow IPC file. Loaded, it says `ready` and listens when told to (a line on stdin), then prints its port
#: and the wall time just before it began listening.
CHILD = f"""
import sys, time
import pyarrow as pa
from rocescope.sim.facades.gnmi import GnmiFacade
{inspect.getsource(stamped_now)}
table = pa.ipc.open_file(sys.argv[1]).read_all()
print("ready", flush=True)
sys.stdin.readline()
started = time.time()
facade = GnmiFacade(lambda: stamped_now(table), port=int(sys.argv[2])).start()
print(facade.port, started, flush=True)
while True:
    time.sleep(3600)
"""


# --- real targets --------------------------------------------------------------------------------------------


def served_table() -> pa.Table:
    """A real sonic-gnmi answer (COUNTERS/Ethernet68) decoded into a `counters` table: what the facades serve."""
    n = pb.Notification(timestamp=time.time_ns(), prefix=pb.Path(target="COUNTERS_DB"))
    u = n.update.add()
    u.path.CopyFrom(parse_path("COUNTERS/Ethernet68"))
    u.val.json_ietf_val = PORT_COUNTERS.read_bytes()
    decoder = GnmiDecoder("served")
    decoder.feed(pb.SubscribeResponse(update=n).SerializeToString())
    batch = decoder.flush()
    assert batch is not None and decoder.stats.malformed == 0
    return pa.Table.from_batches([batch.data])


class GnmiTargetProcess:
    """A gNMI target in a child process: `spawn()` loads it, `serve()` makes it listen (on the same port again
    after `kill()`, which is SIGKILL), so a restart's listening moment is not blurred by Python's start-up."""

    def __init__(self, table_file: Path, log_path: Path):
        self.table_file = table_file
        self.log_path = log_path
        self.port = 0
        self.listening_ts = 0.0
        self.proc: subprocess.Popen[str] | None = None

    def spawn(self) -> GnmiTargetProcess:
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", CHILD, str(self.table_file), str(self.port)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        assert self._line() == "ready"
        return self

    def serve(self) -> GnmiTargetProcess:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        port, ts = self._line().split()
        self.port, self.listening_ts = int(port), float(ts)
        return self

    def _line(self, timeout_s: float = 60.0) -> str:
        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as waiting:  # epoll: select() refuses descriptors above 1023
            waiting.register(self.proc.stdout, selectors.EVENT_READ)
            ready = waiting.select(timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.kill()
            raise AssertionError(f"the gNMI target process failed: {self.log_path.read_text()[-2000:]}")
        return line.strip()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        for pipe in (proc.stdin, proc.stdout) if proc is not None else ():
            if pipe is not None:
                pipe.close()


class JunkGnmiTarget:
    """A real grpc server whose gNMI Subscribe answers only bytes that are no SubscribeResponse."""

    JUNK = (b"\x0a\xff\xff\xff\xff garbage", b"\xff\xff\xff\xff\xff\xff", b"\x12\x05\x08")

    def __init__(self) -> None:
        self.sent = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.server = grpc.server(ThreadPoolExecutor(max_workers=4, thread_name_prefix="junk-gnmi"))
        handler = grpc.stream_stream_rpc_method_handler(self._subscribe)  # raw bytes both ways
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("gnmi.gNMI", {"Subscribe": handler}),)
        )
        self.port = self.server.add_insecure_port("127.0.0.1:0")

    def _subscribe(self, requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
        next(requests, None)
        while context.is_active() and not self._stop.is_set():
            for junk in self.JUNK:
                with self._lock:  # a reconnecting client may have two streams open for a moment
                    self.sent += 1
                yield junk
            self._stop.wait(SAMPLE_S)

    def __enter__(self) -> JunkGnmiTarget:
        self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.server.stop(None).wait()


def snmp_device(name: str, port: int) -> SnmpDevice:
    return SnmpDevice(name, "127.0.0.1", port, V2c("public"), timeout_s=SNMP_TIMEOUT_S, retries=SNMP_RETRIES)


# --- the fault ---------------------------------------------------------------------------------------


@pytest.fixture
def snmpds(tmp_path: Path) -> Iterator[tuple[Snmpd, Snmpd]]:
    if snmpd_path() is None:
        pytest.skip("Debian's snmpd is not installed (scripts/system-deps installs it as root)")
    good = Snmpd(tmp_path / "snmpd-good").start()
    silent = Snmpd(tmp_path / "snmpd-silent")
    try:
        silent.start()
        yield good, silent
    finally:
        if silent.proc is not None and silent.proc.poll() is None:
            silent.proc.send_signal(signal.SIGCONT)  # a stopped process would not act on the SIGTERM
        silent.stop()
        good.stop()


def test_dead_and_flapping_targets(tmp_path: Path, snmpds: tuple[Snmpd, Snmpd]) -> None:
    good_agent, silent_agent = snmpds
    assert silent_agent.proc is not None
    table = served_table()
    table_file = tmp_path / "served.arrow"
    with pa.ipc.new_file(table_file, table.schema) as writer:
        writer.write_table(table)
    paths = (GnmiPath("COUNTERS/Ethernet*", target="COUNTERS_DB", interval_s=SAMPLE_S),)
    arrivals = Arrivals()
    flappy = GnmiTargetProcess(table_file, tmp_path / "gnmi-flappy.log").spawn().serve()
    stop_gnmi, stop_snmp = threading.Event(), threading.Event()
    try:
        with (
            GnmiFacade(lambda: stamped_now(table)) as steady,
            JunkGnmiTarget() as junk_gnmi,
            GarbageAgent() as junk_udp,
        ):
            gnmi = GnmiCollector(
                [
                    GnmiTarget("gnmi-steady", steady.address, vendor="sonic", paths=paths),
                    GnmiTarget("gnmi-flappy", flappy.address, vendor="sonic", paths=paths, timeout_s=GNMI_TIMEOUT_S),
                    GnmiTarget("gnmi-junk", f"127.0.0.1:{junk_gnmi.port}", vendor="sonic", paths=paths),
                ],
                arrivals,
                flush_s=0.2,
                backoff_initial_s=BACKOFF_INITIAL_S,
                backoff_max_s=BACKOFF_MAX_S,
                stall_s=STALL_S,
            )
            snmp = SnmpCollector(
                [
                    snmp_device("snmp-good", good_agent.port),
                    snmp_device("snmp-silent", silent_agent.port),
                    snmp_device("snmp-junk", junk_udp.port),
                ],
                arrivals,
            )
            scraper = Scraper(
                [
                    (gnmi.metrics, "rocescope_gnmi_target_up", "target"),
                    (snmp.metrics, "rocescope_snmp_target_up", "target"),
                ]
            )
            threads = [
                threading.Thread(target=gnmi.run, args=(stop_gnmi,), name="gnmi-collector"),
                threading.Thread(target=snmp.run, args=(SNMP_INTERVAL_S, stop_snmp), name="snmp-collector"),
            ]
            for t in threads:
                t.start()
            try:
                with scraper:  # stopped before the collectors, whose stop closes every stream
                    marks = run_fault(gnmi, snmp, arrivals, flappy, silent_agent.proc)
            finally:
                stop_gnmi.set()
                stop_snmp.set()
                for t in threads:
                    t.join(30)
            assert not any(t.is_alive() for t in threads), "a collector did not stop"
            # counted once the collectors stopped: junk still in flight before the stop is received and counted
            marks.junk_sent = {"gnmi-junk": junk_gnmi.sent, "snmp-junk": junk_udp.answered}
    finally:
        flappy.kill()
    check(marks, gnmi, snmp, arrivals, scraper)


@dataclass
class Marks:
    """When things happened (epoch seconds), and what health said meanwhile."""

    start: float = 0.0  # every target was streaming or polled
    kill: float = 0.0  # the gNMI target got SIGKILL and snmpd SIGSTOP
    gnmi_seen_down: float = 0.0  # the self-metrics said so
    snmp_seen_down: float = 0.0
    listening: float = 0.0  # the restarted gNMI target began listening
    cont: float = 0.0  # snmpd got SIGCONT (just after)
    gnmi_up: float = 0.0  # the self-metrics said so
    snmp_up: float = 0.0
    attempts_after_restart: int = 0
    hang: float = 0.0  # the restarted gNMI target got SIGSTOP
    hang_seen: float = 0.0  # the self-metrics said it was down
    resume: float = 0.0  # it got SIGCONT
    hang_up: float = 0.0  # the self-metrics said it was up
    junk_sent: dict[str, int] = field(default_factory=dict)  # junk messages (gNMI), junk answers (SNMP)
    before: dict[str, Any] = field(default_factory=dict)
    during: dict[str, Any] = field(default_factory=dict)


def run_fault(
    gnmi: GnmiCollector,
    snmp: SnmpCollector,
    arrivals: Arrivals,
    flappy: GnmiTargetProcess,
    silent: subprocess.Popen[bytes],
) -> Marks:
    m = Marks()
    g, s = gnmi.health, snmp.health

    def gnmi_up(target: str) -> float:
        return gnmi.metrics.value("rocescope_gnmi_target_up", target=target)

    def snmp_up(device: str) -> float:
        return snmp.metrics.value("rocescope_snmp_target_up", target=device)

    wait_for(lambda: g()["gnmi-steady"].synced and g()["gnmi-flappy"].synced, "both gNMI targets streaming")
    wait_for(lambda: bool(s()["snmp-good"].up and s()["snmp-silent"].up), "both snmpd answering")
    m.start = time.time()
    wait_for(lambda: len(arrivals.between("gnmi-steady", m.start, time.time())) >= 4, "a baseline of batches")
    m.before = {"gnmi": g()["gnmi-flappy"], "snmp": s()["snmp-silent"]}

    m.kill = time.time()
    flappy.kill()
    os.kill(silent.pid, signal.SIGSTOP)
    with ThreadPoolExecutor(1) as pool:
        loading = pool.submit(flappy.spawn)  # loaded meanwhile, listening only when told
        seen = wait_all({"gnmi": lambda: gnmi_up("gnmi-flappy") == 0, "snmp": lambda: snmp_up("snmp-silent") == 0})
        loading.result()
    m.gnmi_seen_down, m.snmp_seen_down = seen["gnmi"], seen["snmp"]
    # the outage lasts until the healthy targets have shown they go on, and the backoff reached its maximum
    for device in ("gnmi-steady", "snmp-good"):
        wait_for(lambda d=device: len(arrivals.between(d, m.kill, time.time())) >= 4, f"{device} batches meanwhile")
    wait_for(lambda: time.time() - m.kill >= 3 * BACKOFF_MAX_S, "the backoff to reach its maximum")
    m.during = {"gnmi": g()["gnmi-flappy"], "snmp": s()["snmp-silent"]}

    attempts = g()["gnmi-flappy"].reconnects
    m.listening = flappy.serve().listening_ts
    m.cont = time.time()
    os.kill(silent.pid, signal.SIGCONT)
    seen = wait_all({"gnmi": lambda: gnmi_up("gnmi-flappy") == 1, "snmp": lambda: snmp_up("snmp-silent") == 1})
    m.gnmi_up, m.snmp_up = seen["gnmi"], seen["snmp"]
    m.attempts_after_restart = g()["gnmi-flappy"].reconnects - attempts
    values = g()["gnmi-flappy"].values
    wait_for(lambda: g()["gnmi-flappy"].values >= values + 2 * sample_rows(arrivals), "samples after the restart")
    wait_for(lambda: len(arrivals.between("snmp-silent", m.snmp_up, time.time())) >= 1, "snmpd batches again")

    m.hang = time.time()
    flappy.signal(signal.SIGSTOP)
    m.hang_seen = wait_for(lambda: gnmi_up("gnmi-flappy") == 0, "the hung target seen down")
    m.during["hung"] = g()["gnmi-flappy"]
    wait_for(lambda: len(arrivals.between("gnmi-steady", m.hang_seen, time.time())) >= 1, "batches while it hangs")
    m.resume = time.time()
    flappy.signal(signal.SIGCONT)
    m.hang_up = wait_for(lambda: gnmi_up("gnmi-flappy") == 1, "the continued target streaming again")
    return m


def sample_rows(arrivals: Arrivals) -> int:
    """Rows of one sample of a healthy gNMI target (a batch holds one or more whole samples)."""
    batches = [msg.batch for msg in arrivals.bus.messages("rocescope.counters.v1") if msg.batch is not None]
    return min(b.num_rows for b in batches if b.key == "gnmi-steady")


def check(m: Marks, gnmi: GnmiCollector, snmp: SnmpCollector, arrivals: Arrivals, scraper: Scraper) -> None:
    g, s = gnmi.health(), snmp.health()
    outage_end = max(m.gnmi_up, m.snmp_up)
    reconnect_s = m.gnmi_up - m.listening
    dh = m.during["hung"]
    stall_seen_s = m.hang_seen - dh.last_update_ts
    bound_s = JITTER * BACKOFF_MAX_S
    # a healthy target held up by a dead one would wait out one connect attempt (gNMI) or one dead poll (SNMP)
    held_up = {"gnmi-steady": GNMI_TIMEOUT_S, "snmp-good": DEAD_POLL_S}
    figures: dict[str, Any] = {
        "gnmi_kill_seen_after_s": round(m.gnmi_seen_down - m.kill, 3),
        "snmp_silence_seen_after_s": round(m.snmp_seen_down - m.kill, 3),
        "snmp_dead_poll_s": DEAD_POLL_S,
        "gnmi_down_s": round(m.gnmi_up - m.kill, 3),
        "gnmi_reconnect_after_restart_s": round(reconnect_s, 3),
        "gnmi_reconnect_bound_s": bound_s,
        "gnmi_attempts_after_restart": m.attempts_after_restart,
        "snmp_answering_after_sigcont_s": round(m.snmp_up - m.cont, 3),
        "gnmi_hang_seen_after_last_update_s": round(stall_seen_s, 3),
        "gnmi_stall_s": STALL_S,
        "gnmi_streaming_after_sigcont_s": round(m.hang_up - m.resume, 3),
        "others_while_down": {},
        "outages_scraped_s_after_kill": {},
    }
    for device, cadence in (("gnmi-steady", SAMPLE_S), ("snmp-good", SNMP_INTERVAL_S)):
        times = arrivals.between(device, m.kill, outage_end)  # the kill and the silence
        figures["others_while_down"][device] = {
            "batches": len(times),
            "window_s": round(outage_end - m.kill, 3),
            "cadence_s": cadence,
            "max_gap_s": round(max_gap(times, m.kill, outage_end), 3),
            "max_gap_before_s": round(max_gap(arrivals.between(device, m.start, m.kill), m.start, m.kill), 3),
        }
    for target in ("gnmi-steady", "gnmi-flappy", "gnmi-junk", "snmp-good", "snmp-silent", "snmp-junk"):
        figures["outages_scraped_s_after_kill"][target] = [
            [round(o.first_down.ts1 - m.kill, 2), None if o.first_up is None else round(o.first_up.ts1 - m.kill, 2)]
            for o in scraper.outages(target)
        ]
    print("\nfigures (seconds):")
    for key, value in figures.items():
        print(f"  {key}: {json.dumps(value)}")

    # the others kept flowing, never waiting on a dead target
    for device, seen in figures["others_while_down"].items():
        assert seen["batches"] >= 4 and seen["max_gap_s"] < held_up[device], (device, figures)
    # the collector reconnects within its backoff bound, with its first attempt after the target came back
    assert reconnect_s <= bound_s + HANDSHAKE_S, figures
    assert m.attempts_after_restart <= 1, figures
    # a hung target (connection up, no data) is seen down after its stall time, not before, and comes back
    # (less 0.1 s: its last update is stamped after the decode, the stall clock starts at the receipt)
    assert stall_seen_s >= STALL_S - 0.1, figures
    assert not dh.connected and "no data for" in str(dh.last_error) and m.hang <= dh.down_since_ts <= m.hang_seen
    assert m.hang_up - m.resume <= bound_s + HANDSHAKE_S, figures

    # health during the outage: which target, since when, why
    dg, ds = m.during["gnmi"], m.during["snmp"]
    assert not dg.connected and dg.last_error and dg.failures > m.before["gnmi"].failures
    assert m.kill <= dg.down_since_ts <= m.gnmi_seen_down
    assert dg.last_update_ts is not None and m.before["gnmi"].last_update_ts <= dg.last_update_ts <= m.gnmi_seen_down
    assert ds.up is False and "no response" in str(ds.last_error) and ds.consecutive_failures >= 1
    assert m.before["snmp"].last_success_ts <= ds.last_success_ts <= ds.down_since_ts <= m.snmp_seen_down
    assert ds.down_since_ts >= m.kill - SNMP_INTERVAL_S - DEAD_POLL_S  # the poll the SIGSTOP caught, at the earliest
    # the scraped self-metrics show the same: one outage of each flapping target, bracketed by the events
    for target, events in {
        "gnmi-flappy": [(m.kill, m.gnmi_seen_down, m.listening, m.gnmi_up), (m.hang, m.hang_seen, m.resume, m.hang_up)],
        "snmp-silent": [(m.kill, m.snmp_seen_down, m.cont, m.snmp_up)],
    }.items():
        outages = scraper.outages(target)
        assert len(outages) == len(events), (target, figures)
        for o, (down, seen_down, back, seen_up) in zip(outages, events, strict=True):
            assert o.last_up is not None and o.first_up is not None, target
            assert o.last_up.ts0 <= seen_down and o.first_down.ts1 >= down, target
            assert o.last_down.ts0 <= seen_up and o.first_up.ts1 >= back, target
    # the healthy targets were never down; the junk SNMP agent never up
    for healthy in ("gnmi-steady", "snmp-good"):
        assert scraper.outages(healthy) == [] and scraper.seen_up(healthy), healthy
    (junk,) = scraper.outages("snmp-junk")
    assert junk.last_up is None and junk.first_up is None

    # afterwards: every real target answered again; the junk was counted and none of it shipped
    assert g["gnmi-steady"].failures == 0 and g["gnmi-steady"].malformed == 0
    assert g["gnmi-flappy"].failures >= 1 and g["gnmi-flappy"].last_error is None
    assert s["snmp-good"].failures == 0 and s["snmp-silent"].consecutive_failures == 0
    junk_g, junk_s = g["gnmi-junk"], s["snmp-junk"]
    assert m.junk_sent["gnmi-junk"] >= junk_g.malformed >= 3 and m.junk_sent["snmp-junk"] >= 1
    assert junk_g.values == 0 and not junk_g.synced and junk_g.last_update_ts is None
    assert gnmi.metrics.value("rocescope_gnmi_malformed_total", target="gnmi-junk") == junk_g.malformed >= 3
    assert junk_s.up is False and junk_s.last_success_ts is None and junk_s.failures >= 1
    assert arrivals.times["gnmi-junk"] == [] and arrivals.times["snmp-junk"] == []
    rows = sample_rows(arrivals)
    for device in ("gnmi-steady", "gnmi-flappy"):
        assert g[device].values % rows == 0  # whole samples only: nothing half-decoded around the outage
