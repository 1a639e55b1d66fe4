"""The SNMP collector against real agents on loopback: snmpsim serving the real SR Linux walk and
synthetic switches, and Debian's snmpd (v2c and v3 authPriv SHA + AES-128); plus dead devices.

Nothing here is faked: every poll is pysnmp talking UDP to an agent process the test started.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from rocescope.collectors.snmp.agent import (
    V3,
    EnginePool,
    PysnmpAgent,
    SnmpAgent,
    SnmprecAgent,
    V2c,
    Value,
    run_sync,
)
from rocescope.collectors.snmp.collector import SnmpCollector, SnmpDevice
from rocescope.collectors.snmp.objects import DEFAULT_OBJECTS, DEFAULT_OPTIONAL, OBJECTS, Oid
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import InProcessBus
from rocescope.testbed.snmpd import (
    GarbageAgent,
    Snmpd,
    Snmpsim,
    free_udp_port,
    snmpd_path,
    synthetic_snmprec,
)

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "05_snmp"
SRLINUX = REAL / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:pysnmp.*")
CASTS = ("ifHCInMulticastPkts", "ifHCInBroadcastPkts")
VENDOR_PFC = ("cpfcIfPriorityRequests", "cpfcIfPriorityIndications")


def rows_of(batch: Batch) -> set[tuple[str, str, str, float, int]]:
    d = batch.data.to_pydict()
    return set(zip(d["port"], d["raw_name"], d["metric"], d["value"], d["priority"], strict=True))


def cisco_pfc_snmprec(ports: int = 4) -> str:
    """A switch that answers CISCO-PFC-EXT-MIB per-priority counters but not IEEE8021-PFC-MIB."""
    lines = synthetic_snmprec(ports, pfc=False, first_ifindex=1).splitlines()
    for idx in range(1, ports + 1):
        for prio in range(8):
            lines.append(f"1.3.6.1.4.1.9.9.813.1.2.1.2.{idx}.{prio}|70|{idx * 100 + prio}")
            lines.append(f"1.3.6.1.4.1.9.9.813.1.2.1.3.{idx}.{prio}|70|{idx * 1000 + prio}")
    lines.sort(key=lambda line: tuple(int(x) for x in line.split("|")[0].split(".")))  # snmpsim wants OID order
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def snmpsim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snmpsim]:
    base = tmp_path_factory.mktemp("snmpsim")
    data = base / "data"
    data.mkdir()
    shutil.copy(SRLINUX, data / "srlinux.snmprec")  # community = file stem
    (data / "sw64.snmprec").write_text(synthetic_snmprec(64, pfc=True))
    (data / "cisco.snmprec").write_text(cisco_pfc_snmprec())
    sim = Snmpsim(data, workdir=base / "run")
    try:
        sim.start()
    except Exception as exc:
        pytest.fail(f"snmpsim (PyPI `snmpsim`, test extra) could not serve the walks: {exc}")
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def snmpd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Snmpd]:
    if snmpd_path() is None:
        pytest.skip("Debian's snmpd is not installed (scripts/system-deps installs it as root)")
    agent = Snmpd(tmp_path_factory.mktemp("snmpd")).start()
    yield agent
    agent.stop()


class RecordingAgent(PysnmpAgent):
    """The live agent, remembering which roots each walk asked for."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.walks: list[list[Oid]] = []
        self.received: list[int] = []  # varbinds each walk received

    async def walk(self, roots: Sequence[Oid]) -> list[tuple[Oid, Value]]:
        self.walks.append(list(roots))
        before = self.varbinds
        try:
            return await super().walk(roots)
        finally:
            self.received.append(self.varbinds - before)


def recording_factory(agents: dict[str, RecordingAgent]) -> Callable[[SnmpDevice, EnginePool], SnmpAgent]:
    def factory(device: SnmpDevice, engines: EnginePool) -> SnmpAgent:
        agent = RecordingAgent(
            device.host, device.port, device.auth, timeout_s=device.timeout_s, retries=device.retries, engines=engines
        )
        agents[device.name] = agent
        return agent

    return factory


# --- snmpsim: the real walk and synthetic switches ----------------------------------------------------


def test_real_srlinux_walk_served_by_snmpsim_maps_exactly(snmpsim: Snmpsim) -> None:
    objects = (*DEFAULT_OBJECTS, *CASTS)
    live = SnmpCollector([SnmpDevice("srl1", "127.0.0.1", snmpsim.port, V2c("srlinux"))], objects=objects)
    recorded_agent = SnmprecAgent.from_file(SRLINUX)
    recorded = SnmpCollector([SnmpDevice("srl1", "file")], objects=objects, agent_factory=lambda d, e: recorded_agent)
    live_batch, file_batch = live.poll_once()["srl1"], recorded.poll_once()["srl1"]
    assert live_batch is not None and file_batch is not None, live.health()
    # the agent and the file give the same canonical rows (test_normalize.py pins the file's to a golden list)
    assert rows_of(live_batch) == rows_of(file_batch)
    rows = rows_of(live_batch)
    assert ('ethernet-1/5, "device3"', "ifHCOutOctets", "tx_bytes", 59369953751.0, -1) in rows
    assert ("mgmt0", "ifHCInBroadcastPkts", "raw:ifHCInBroadcastPkts", 5898496.0, -1) in rows
    assert ("ifIndex:537706494", "ifHCInMulticastPkts", "raw:ifHCInMulticastPkts", 12983131.0, -1) in rows
    assert len(rows) == 18
    assert live.names("srl1")[1077952510] == "mgmt0"
    assert live.unsupported("srl1") == set(DEFAULT_OPTIONAL)


def test_snmpsim_switches_with_and_without_pfc(snmpsim: Snmpsim) -> None:
    agents: dict[str, RecordingAgent] = {}
    devices = [
        SnmpDevice("leaf64", "127.0.0.1", snmpsim.port, V2c("sw64")),
        SnmpDevice("srl1", "127.0.0.1", snmpsim.port, V2c("srlinux")),
        SnmpDevice("nexus", "127.0.0.1", snmpsim.port, V2c("cisco")),
    ]
    collector = SnmpCollector(
        devices, optional_objects=(*DEFAULT_OPTIONAL, *VENDOR_PFC), agent_factory=recording_factory(agents)
    )

    async def two_polls() -> tuple[dict[str, Batch | None], dict[str, Batch | None]]:
        try:
            return await collector.poll_all(), await collector.poll_all()
        finally:
            await collector.aclose()

    first, second = run_sync(two_polls())
    leaf = first["leaf64"]
    assert leaf is not None, collector.health()
    assert leaf.num_rows == 64 * (len(DEFAULT_OBJECTS) + 2)
    d = leaf.data.to_pydict()
    assert len(set(d["port"])) == 64 and "Ethernet504" in d["port"]
    pfc = [(p, m, v) for p, m, v in zip(d["port"], d["metric"], d["value"], strict=True) if m.startswith("pfc_")]
    assert ("Ethernet8", "pfc_tx_pause_total", 1_001_102.0) in pfc and len(pfc) == 128
    # the SR Linux walk has no PFC MIB: marked unsupported once, not fatal
    assert collector.unsupported("srl1") == {*DEFAULT_OPTIONAL, *VENDOR_PFC}
    assert collector.unsupported("leaf64") == set(VENDOR_PFC)
    assert collector.metrics.value("rocescope_snmp_unsupported_object", target="srl1") == 4
    # the Cisco-style switch: per-priority rows, priority from the OID index
    nexus = first["nexus"]
    assert nexus is not None
    rows = rows_of(nexus)
    assert ("Ethernet0", "cpfcIfPriorityRequests", "pfc_tx_pause", 103.0, 3) in rows
    assert ("Ethernet24", "cpfcIfPriorityIndications", "pfc_rx_pause", 4007.0, 7) in rows
    assert sum(1 for r in rows if r[2] in ("pfc_tx_pause", "pfc_rx_pause")) == 4 * 8 * 2
    assert collector.unsupported("nexus") == set(DEFAULT_OPTIONAL)
    # second poll: the same rows but the slow ifHighSpeed; unsupported objects not asked again
    assert second["leaf64"] is not None
    assert rows_of(second["leaf64"]) == {r for r in rows_of(leaf) if r[1] != "ifHighSpeed"}
    assert second["nexus"] is not None and rows_of(second["nexus"]) == {r for r in rows if r[1] != "ifHighSpeed"}
    pfc_roots = {OBJECTS[name].oid for name in (*DEFAULT_OPTIONAL, *VENDOR_PFC)}
    assert len(agents["srl1"].walks) == 2
    assert pfc_roots <= set(agents["srl1"].walks[0]) and not pfc_roots & set(agents["srl1"].walks[1])
    assert OBJECTS["ifHighSpeed"].oid not in agents["leaf64"].walks[1]
    # the second walk knew the table sizes: at most one varbind past the end of each column
    columns = len(agents["leaf64"].walks[1])
    assert columns == len(DEFAULT_OBJECTS) - 1 + len(DEFAULT_OPTIONAL)
    assert 64 * columns <= agents["leaf64"].received[1] <= 64 * columns + columns
    assert collector.metrics.value("rocescope_snmp_name_walks_total", target="leaf64") == 1


# --- snmpd: v2c and v3 authPriv ---------------------------------------------------------------------


def test_snmpd_v2c_and_v3_authpriv(snmpd: Snmpd) -> None:
    user = snmpd.v3_users[0]
    devices = [
        SnmpDevice("host-v2c", "127.0.0.1", snmpd.port, V2c("public")),
        SnmpDevice("host-v3", "127.0.0.1", snmpd.port, V3(user.name, user.auth_pass, user.priv_pass)),
    ]
    collector = SnmpCollector(devices)
    batches = collector.poll_once()
    v2c, v3 = batches["host-v2c"], batches["host-v3"]
    assert v2c is not None and v3 is not None, collector.health()
    for batch in (v2c, v3):
        d = batch.data.to_pydict()
        assert "lo" in d["port"]
        assert set(d["metric"]) >= {"rx_bytes", "tx_bytes", "oper_up", "rx_errors", "tx_discards"}
        lo_up = [v for p, m, v in zip(d["port"], d["metric"], d["value"], strict=True) if p == "lo" and m == "oper_up"]
        assert lo_up == [1.0]
    assert set(v2c.data.column("port").to_pylist()) == set(v3.data.column("port").to_pylist())
    assert collector.unsupported("host-v2c") == set(DEFAULT_OPTIONAL)  # net-snmp has no PFC MIB


def test_snmpd_wrong_v3_secret_is_reported_as_such(snmpd: Snmpd) -> None:
    user = snmpd.v3_users[0]
    collector = SnmpCollector(
        [
            SnmpDevice("bad-auth", "127.0.0.1", snmpd.port, V3(user.name, "not-the-pass", user.priv_pass)),
            SnmpDevice("bad-user", "127.0.0.1", snmpd.port, V3("nobody", user.auth_pass, user.priv_pass)),
            SnmpDevice("good", "127.0.0.1", snmpd.port, V3(user.name, user.auth_pass, user.priv_pass)),
        ]
    )
    batches = collector.poll_once()
    health = collector.health()
    assert batches["good"] is not None and health["good"].up
    assert batches["bad-auth"] is None and batches["bad-user"] is None
    assert "credentials refused" in str(health["bad-auth"].last_error)
    assert "credentials refused" in str(health["bad-user"].last_error)


# --- dead devices --------------------------------------------------------------------------------


def test_dead_devices_do_not_delay_the_others(snmpd: Snmpd, snmpsim: Snmpsim) -> None:
    silent = free_udp_port()
    devices = [
        SnmpDevice("good-snmpd", "127.0.0.1", snmpd.port, V2c("public"), timeout_s=5.0, retries=1),
        SnmpDevice("good-sim", "127.0.0.1", snmpsim.port, V2c("sw64"), timeout_s=5.0, retries=1),
        SnmpDevice("wrong-community", "127.0.0.1", snmpd.port, V2c("guess"), timeout_s=1.5, retries=1),
        SnmpDevice("nobody-home", "127.0.0.1", silent, V2c("public"), timeout_s=1.5, retries=1),
    ]
    collector = SnmpCollector(devices)
    started = time.perf_counter()
    batches = collector.poll_once()
    elapsed = time.perf_counter() - started
    health = collector.health()
    assert batches["good-snmpd"] is not None and batches["good-sim"] is not None
    assert batches["wrong-community"] is None and batches["nobody-home"] is None
    assert health["good-snmpd"].up and health["good-sim"].up
    for dead in ("wrong-community", "nobody-home"):
        h = health[dead]
        assert h.up is False and h.consecutive_failures == 1 and h.last_success_ts is None
        assert "no response within 1.5 s x 2 tries" in str(h.last_error)
        assert h.last_seconds >= 3.0  # 1.5 s x 2 tries
    # concurrently: the whole round takes about the slowest device's time, not the sum of every device's
    # time (relative, so a loaded machine cannot fail it; the live ones' generous timeout neither)
    assert elapsed < sum(h.last_seconds for h in health.values()) - 2.0


def test_garbage_answers_are_a_dead_device_not_a_crash(snmpd: Snmpd) -> None:
    with GarbageAgent() as junk:
        collector = SnmpCollector(
            [
                SnmpDevice("junk", "127.0.0.1", junk.port, V2c("public"), timeout_s=0.5, retries=1),
                SnmpDevice("good", "127.0.0.1", snmpd.port, V2c("public"), timeout_s=0.5, retries=1),
            ]
        )
        batches = collector.poll_once()
    health = collector.health()
    assert junk.answered >= 1
    assert batches["good"] is not None and health["good"].up
    assert batches["junk"] is None and health["junk"].up is False
    assert health["junk"].last_error  # a timeout or a protocol error, said in words


def test_run_publishes_on_time_and_logs_one_line_per_streak(
    snmpd: Snmpd, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    late_port = free_udp_port()
    devices = [
        SnmpDevice("good", "127.0.0.1", snmpd.port, V2c("public"), timeout_s=0.5, retries=0),
        SnmpDevice("wrong-community", "127.0.0.1", snmpd.port, V2c("guess"), timeout_s=1.0, retries=1),
        SnmpDevice("late", "127.0.0.1", late_port, V2c("public"), timeout_s=0.5, retries=0),
    ]
    bus = InProcessBus()
    collector = SnmpCollector(devices, bus.producer())
    late = Snmpd(tmp_path / "late", port=late_port)

    def failures(device: str) -> float:
        return collector.metrics.value("rocescope_snmp_poll_failures_total", target=device)

    async def until(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < deadline, "timed out"
            await asyncio.sleep(0.05)

    async def scenario() -> int:
        stop = asyncio.Event()
        run = asyncio.create_task(collector.arun(0.5, stop, spread=False))
        # wait for events, not for wall time, so a loaded machine changes nothing but the duration
        await until(lambda: failures("late") >= 2)  # a streak of failures: one log line for all of it
        await asyncio.to_thread(late.start)
        await until(lambda: collector.metrics.value("rocescope_snmp_target_up", target="late") == 1)
        await asyncio.sleep(1.0)
        stop.set()
        polls = await run
        await collector.aclose()
        return polls

    caplog.set_level(logging.INFO, logger="rocescope.collectors.snmp.collector")
    try:
        polls = run_sync(scenario())
    finally:
        late.stop()
    keys = Counter(m.key.decode() for m in bus.messages("rocescope.counters.v1") if m.key)
    # every 0.5 s, not held up by the device that takes 2 s to fail each poll
    assert keys["good"] > failures("wrong-community") >= 1, keys
    assert keys["wrong-community"] == 0
    assert keys["late"] >= 1  # it came up and its batches flowed
    assert polls >= keys["good"] + 3  # late's failures count too
    health = collector.health()
    assert health["good"].up and health["late"].up and health["late"].consecutive_failures == 0
    assert health["wrong-community"].up is False and health["wrong-community"].consecutive_failures >= 1
    assert collector.metrics.value("rocescope_snmp_overruns_total", target="wrong-community") >= 1
    warnings = [r.getMessage() for r in caplog.records if "poll failed" in r.getMessage()]
    assert sorted(w.split(":")[0] for w in warnings) == ["snmp late", "snmp wrong-community"], warnings
    recovered = [r.getMessage() for r in caplog.records if "read fine again" in r.getMessage()]
    assert len(recovered) == 1 and recovered[0].startswith("snmp late"), recovered
    assert collector.metrics.value("rocescope_snmp_target_up", target="late") == 1
    assert collector.metrics.value("rocescope_snmp_poll_failures_total", target="late") >= 2
