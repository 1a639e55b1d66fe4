"""The eBPF collector: QP owner rows over the QpSource seam, its targets' health, the run loop, and the BPF
programs attached for real where the kernel allows.

* tracepoints (`skb:kfree_skb`, `tcp:tcp_retransmit_skb`): attached for real; the test makes the events
  in a network namespace it owns: UDP to a port nobody listens on (drop reason NO_SOCKET), and a TCP
  SYN to a listener whose accept queue is full (dropped by the listener, so the client retransmits).
  `sch_netem` would be the obvious way to lose segments, but this kernel is built without it.
* XDP: attached for real to one end of a veth pair inside a namespace the test owns; the other end
  replays real RoCEv2 frames from tests/fixtures/realdata/03_pcap (Soft-RoCE RDMA WRITE + ACKs, RDMA CM
  MADs on QP1, a ConnectX-4 Lx CNP) plus CE-marked copies (no CE-marked RoCEv2 capture was found
  publicly: those are built from a real frame by setting the ECN bits), and the counts per (QP, ECN,
  opcode) must match what a Python decode of the same frames says.
* kprobes (QP ownership): the kernel here has none, so their events are built in the program's own
  layout and fed to the collector; its fallback to `rdma resource show qp` is checked to be taken and
  said once.

BPF tests need root (CAP_BPF + CAP_PERFMON, CAP_NET_ADMIN for XDP and namespaces) and bcc (Debian's
python3-bpfcc, installed by scripts/system-deps and linked into the venv by scripts/bootstrap).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import logging
import os
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from rocescope.collectors.ebpf.collector import EbpfCollector
from rocescope.collectors.ebpf.loader import EbpfUnavailable, kprobes_unavailable, program_text, tracepoint_fields
from rocescope.collectors.ebpf.rdma_qp import FixtureQpSource, roce_udp_sport
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import InProcessBus
from rocescope.sim.roce import gid_from_ipv4
from rocescope.sim.roce import udp_sport as sim_udp_sport
from rocescope.testbed.snmpd import Netns

FIXTURES = Path(__file__).parents[2] / "fixtures"
QP_JSON = FIXTURES / "rdma" / "rdma_resource_show_qp.json"
PCAPS = FIXTURES / "realdata" / "03_pcap"
ROCE_PCAPS = (
    "rdma_ib_tutorial_rdma_write_bw.pcap",
    "rdma_ib_tutorial_rdma_cm.pcap",
    "scapy_realpkts_cnp_cx4lx_and_rocev1.pcap",
)
T = TypeVar("T")
Sleeper = Callable[[str], subprocess.Popen[bytes]]  # the `sleeper` fixture


# --------------------------------------------------------------------------------------------------
# the collector on the QpSource seam (no BPF)


def _rows(batch: Batch) -> list[dict[str, Any]]:
    return batch.data.to_pylist()  # type: ignore[no-any-return]


def test_qp_owner_rows_from_the_fixture_source_ship_on_change(sleeper: Sleeper) -> None:
    child = sleeper("job-7")
    try:
        doc = json.loads(QP_JSON.read_text())
        for rec in doc:
            if rec.get("pid") == 41022:
                rec["pid"] = child.pid  # a live owner, so /proc resolves its cgroup and job
        source = FixtureQpSource(json.dumps(doc))
        collector = EbpfCollector("gpu-07", qp_source=source, host_events=False).start()
        assert collector.qp_mode == "fixture"
        first = collector.poll()
        assert [b.stream for b in first] == ["counters", "qp_owners"]
        assert first[0].num_rows == 0
        rows = _rows(first[1])
        assert len(rows) == 5  # the two kernel QPs have no owner process
        mine = [r for r in rows if r["pid"] == child.pid]
        assert {(r["rdma_dev"], r["qpn"], r["dest_qpn"]) for r in mine} == {
            ("mlx5_0", 4716, 8802),
            ("mlx5_0", 4717, 0),
            ("mlx5_3", 263, 391),
            ("mlx5_3", 264, 0),
        }
        assert all(r["comm"] == "python" and r["job_id"] == "job-7" and r["host"] == "gpu-07" for r in mine)
        sports = {r["qpn"]: r["udp_sport"] for r in mine}
        assert sports == {4716: sim_udp_sport(4716, 8802), 4717: 0, 263: sim_udp_sport(263, 391), 264: 0}
        assert {r["dest_gid"] for r in rows} == {""}  # iproute2 does not show the remote GID
        other = next(r for r in rows if r["pid"] == 30489)
        assert (other["comm"], other["job_id"]) == ("ib_write_bw", "")  # pid not on this machine: as reported
        assert collector.metrics.value("rocescope_ebpf_qp_records_skipped_total", why="kernel") == 2

        assert [b.stream for b in collector.poll()] == ["counters"]  # nothing changed: nothing re-shipped
        doc[2]["rqpn"] = 5000
        source.text = json.dumps(doc)
        changed = collector.poll()
        assert [(r["qpn"], r["dest_qpn"]) for r in _rows(changed[1])] == [(4714, 5000)]
        collector.close()
    finally:
        child.kill()
        child.wait()


def test_run_publishes_owner_batches_through_the_producer() -> None:
    bus = InProcessBus()
    collector = EbpfCollector(
        "gpu-07", bus.producer(), qp_source=FixtureQpSource.from_file(QP_JSON), host_events=False
    ).start()
    stop = threading.Event()
    threading.Timer(0.35, stop.set).start()
    polls = collector.run(0.1, stop)
    assert polls >= 2
    messages = bus.messages("rocescope.qp_owners.v1")
    assert len(messages) == 1  # shipped once, then unchanged; empty counters batches are not published
    assert collector.metrics.value("rocescope_ebpf_values_total", target="qp") == 5
    assert collector.health()["qp"].values == 5 and collector.health()["maps"].polls == polls


def test_bad_qp_records_and_an_unreadable_table_are_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "rocescope.collectors.ebpf.collector")
    good = json.loads(QP_JSON.read_text())
    source = FixtureQpSource(json.dumps([*good, {"ifname": "mlx5_0", "lqpn": -1}]))
    collector = EbpfCollector("gpu-07", qp_source=source, host_events=False).start()
    for _ in range(3):
        collector.poll()
    qp = collector.health()["qp"]
    assert (qp.up, qp.polls, qp.malformed, qp.values) == (True, 3, 3, 5)
    assert collector.metrics.value("rocescope_ebpf_malformed_total", target="qp") == 3
    assert [r.getMessage() for r in caplog.records] == [
        "ebpf gpu-07 qp: skipped 1 malformed QP record(s), e.g. bad lqpn=-1"
    ]
    caplog.clear()
    source.text = "[{"
    collector.poll()
    collector.poll()
    qp = collector.health()["qp"]
    assert (qp.up, qp.failures, qp.consecutive_failures) == (False, 2, 2)
    assert collector.metrics.value("rocescope_ebpf_target_up", target="qp") == 0
    assert len(caplog.records) == 1 and "reading QP owners from fixture failed" in caplog.records[0].getMessage()
    caplog.clear()
    source.text = json.dumps(good)
    owners = collector.poll()[1]
    assert owners.num_rows == 5  # announced again once the table reads
    assert [r.getMessage() for r in caplog.records] == ["ebpf gpu-07 qp: read fine again"]
    assert collector.health()["qp"].up and collector.health()["maps"].up
    collector.close()


def test_without_kprobes_the_collector_falls_back_to_the_rdma_tool_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    if kprobes_unavailable() is None and "ib_create_qp_user" in Path("/proc/kallsyms").read_text():
        pytest.skip("this kernel can kprobe ib_core, so the fallback is not taken")
    caplog.set_level(logging.WARNING, "rocescope.collectors.ebpf.collector")
    collector = EbpfCollector("gpu-07", host_events=False).start()
    try:
        assert collector.qp_mode == "rdma"
        for _ in range(3):
            collector.poll()
    finally:
        collector.close()
    fallback = [r for r in caplog.records if "falling back to polling `rdma resource show qp -j`" in r.message]
    assert len(fallback) == 1
    m = collector.metrics  # per target: up, duration of its last read, failed reads
    errors = m.value("rocescope_ebpf_poll_failures_total", target="qp")
    failures = [r for r in caplog.records if "reading QP owners from rdma failed" in r.message]
    assert len(failures) == (1 if errors else 0)  # a failing tool is logged once, not every poll
    assert errors in (0, 3)
    assert m.value("rocescope_ebpf_target_up", target="qp") == (0 if errors else 1)
    assert m.value("rocescope_ebpf_target_up", target="maps") == 1
    assert m.value("rocescope_ebpf_target_seconds", target="qp") > 0
    qp = collector.health()["qp"]
    assert (qp.up, qp.failures) == (not errors, errors)


# --------------------------------------------------------------------------------------------------
# BPF for real


_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNET = 0x40000000


def in_netns(ns: Netns, fn: Callable[[], T]) -> T:
    """Run `fn` on a thread that has entered `ns` (setns moves only the calling thread), and return its result."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            fd = os.open(f"/run/netns/{ns.name}", os.O_RDONLY)
            try:
                if _libc.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            finally:
                os.close(fd)
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["result"]  # type: ignore[no-any-return]


def _value(batch: Batch, metric: str, port: str) -> float:
    return float(sum(r["value"] for r in _rows(batch) if r["metric"] == metric and r["port"] == port))


def test_qp_events_laid_out_as_the_kprobe_program_emits_them_become_owner_rows(bcc: Any, sleeper: Sleeper) -> None:
    """The kprobes cannot fire here, so their perf events are built in the program's own event layout
    (bcc derives it from the compiled C) and fed to the collector's perf-buffer callback."""
    prog = bcc.BPF(text=program_text("qp_owner.c").encode())
    child = sleeper("job-9")
    collector = EbpfCollector("gpu-09", host_events=False, qp_ownership=False)
    collector._qp_bpf, collector.qp_mode = prog, "kprobe"  # what a successful _attach_qp_kprobes leaves
    try:
        buf = ctypes.create_string_buffer(512)
        ev = prog[b"qp_events"].event(ctypes.addressof(buf))  # a view into buf

        def emit(kind: int, **fields: Any) -> None:
            ctypes.memset(buf, 0, len(buf))
            ev.kind, ev.pid, ev.qpn, ev.cgroup_id, ev.comm, ev.dev = kind, child.pid, 4714, 77, b"python", b"mlx5_0"
            for name, value in fields.items():
                setattr(ev, name, value)
            collector._on_qp_event(0, ctypes.addressof(buf), len(buf))

        emit(1)
        gid = socket.inet_pton(socket.AF_INET6, "::ffff:10.0.0.2")
        emit(2, has_dest_qpn=1, dest_qpn=4715, has_av=1, dgid=(ctypes.c_ubyte * 16)(*gid), flow_label=0)
        rows = _rows(collector.poll()[1])
        assert [
            (r["rdma_dev"], r["qpn"], r["dest_qpn"], r["dest_ip"], r["pid"], r["comm"], r["job_id"]) for r in rows
        ] == [("mlx5_0", 4714, 4715, "10.0.0.2", child.pid, "python", "job-9")]
        assert [(r["dest_gid"], r["udp_sport"]) for r in rows] == [
            (gid_from_ipv4("10.0.0.2"), sim_udp_sport(4714, 4715))
        ]
        assert collector._qps[("mlx5_0", 4714)].udp_sport == roce_udp_sport(4714, 4715)
        emit(3)
        assert [b.stream for b in collector.poll()] == ["counters"] and not collector._qps
        assert collector.metrics.value("rocescope_ebpf_qp_events_total") == 3
    finally:
        collector.close()
        child.kill()
        child.wait()


@pytest.mark.usefixtures("bcc")
def test_drops_by_reason_and_tcp_retransmits_from_tracepoints(netns: Netns) -> None:
    try:
        has_reason = "reason" in tracepoint_fields("skb", "kfree_skb")
        tracepoint_fields("tcp", "tcp_retransmit_skb")
    except EbpfUnavailable as exc:
        pytest.skip(str(exc))
    collector = EbpfCollector("host-a", qp_ownership=False).start()
    try:
        before = collector.poll()[0]

        def make_events() -> list[socket.socket]:
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for _ in range(25):
                udp.sendto(b"x", ("127.0.0.1", 9))  # nobody listens: NO_SOCKET
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen(0)
            port = listener.getsockname()[1]
            clients = []
            for _ in range(3):  # the first fills the accept queue; SYNs of the others are dropped
                c = socket.socket()
                c.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    c.connect(("127.0.0.1", port))
                clients.append(c)
            return [udp, listener, *clients]

        sockets = in_netns(netns, make_events)
        try:
            deadline = time.monotonic() + 6  # the first SYN retransmit comes after the 1 s initial RTO
            while True:
                after = collector.poll()[0]
                retrans = _value(after, "tcp_retransmits", "peer:127.0.0.1") - _value(
                    before, "tcp_retransmits", "peer:127.0.0.1"
                )
                if retrans >= 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        finally:
            for s in sockets:
                s.close()
        assert retrans >= 1
        reason = "reason:NO_SOCKET" if has_reason else "reason:0"
        assert _value(after, "host_drops", reason) - _value(before, "host_drops", reason) >= 25
        rows = _rows(after)
        assert {(r["device"], r["role"], r["source"], r["priority"]) for r in rows} == {("host-a", "host", "ebpf", -1)}
        assert {r["raw_name"] for r in rows if r["metric"] == "host_drops"} == {"skb:kfree_skb"}
    finally:
        collector.close()


# --- XDP


def _pcap_frames(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    magic, _, _, _, _, _, linktype = struct.unpack("<IHHiIII", data[:24])
    assert magic == 0xA1B2C3D4 and linktype == 1, path  # classic pcap, Ethernet
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8 : off + 12])[0]
        yield data[off + 16 : off + 16 + incl]
        off += 16 + incl


def _roce_key(frame: bytes) -> tuple[int, int, int] | None:
    """(dest QP, ECN, opcode) of a RoCEv2 frame, decoded in Python to check the XDP program against."""
    ethertype, l3 = struct.unpack("!H", frame[12:14])[0], 14
    if ethertype in (0x8100, 0x88A8):
        ethertype, l3 = struct.unpack("!H", frame[16:18])[0], 18
    if ethertype == 0x0800 and frame[l3 + 9] == 17 and not struct.unpack("!H", frame[l3 + 6 : l3 + 8])[0] & 0x3FFF:
        ecn, udp = frame[l3 + 1] & 3, l3 + (frame[l3] & 0xF) * 4
    elif ethertype == 0x86DD and frame[l3 + 6] == 17:
        ecn, udp = (frame[l3 + 1] >> 4) & 3, l3 + 40
    else:
        return None
    if struct.unpack("!H", frame[udp + 2 : udp + 4])[0] != 4791 or len(frame) < udp + 8 + 12:
        return None
    bth = frame[udp + 8 :]
    return int.from_bytes(bth[5:8], "big"), ecn, bth[0]


def _ce_marked(frame: bytes) -> bytes:
    """The same IPv4 frame with ECN = CE (3) and its header checksum redone."""
    out = bytearray(frame)
    out[15] |= 3
    ihl = (out[14] & 0xF) * 4
    out[24:26] = b"\0\0"
    words = struct.unpack(f"!{ihl // 2}H", bytes(out[14 : 14 + ihl]))
    total = sum(words)
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    out[24:26] = struct.pack("!H", ~total & 0xFFFF)
    return bytes(out)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.mark.usefixtures("bcc")
def test_xdp_counts_rocev2_packets_by_qp_ecn_and_opcode_on_a_veth(netns: Netns) -> None:
    frames = [f for name in ROCE_PCAPS for f in _pcap_frames(PCAPS / name)]
    write = next(f for f in frames if _roce_key(f) is not None and _roce_key(f)[2] == 6)  # type: ignore[index]
    frames += [_ce_marked(write)] * 4
    expected = collections.Counter(k for k in map(_roce_key, frames) if k is not None)
    assert len(expected) >= 10 and any(ecn == 3 for _, ecn, _ in expected) and any(op == 0x81 for *_, op in expected)

    _ip("-n", netns.name, "link", "add", "rsroce0", "type", "veth", "peer", "name", "rsroce1")
    for dev in ("rsroce0", "rsroce1"):
        _ip("-n", netns.name, "link", "set", dev, "up")
    collector = EbpfCollector("host-x", interfaces=["rsroce1"], host_events=False, qp_ownership=False)
    try:
        in_netns(netns, collector.start)
    except EbpfUnavailable as exc:
        if "XDP" in str(exc):
            pytest.skip(f"this kernel cannot attach XDP to a veth: {exc}")
        raise
    try:
        attached = subprocess.run(
            ["ip", "-n", netns.name, "link", "show", "rsroce1"], capture_output=True, text=True, check=True
        ).stdout
        assert "xdp" in attached

        def replay() -> None:
            with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as tx:
                tx.bind(("rsroce0", 0))
                for frame in frames:
                    tx.send(frame)

        in_netns(netns, replay)
        deadline = time.monotonic() + 5
        while True:
            counters = collector.poll()[0]
            got = {
                r["port"]: r["value"]
                for r in _rows(counters)
                if r["metric"] == "roce_rx_qp_packets" and r["port"].startswith("rsroce1/")
            }
            if sum(got.values()) >= sum(expected.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert got == {f"rsroce1/qp{q}/ecn{e}/op{o}": float(n) for (q, e, o), n in expected.items()}
        assert got["rsroce1/qp280/ecn2/op129"] == 1.0  # the ConnectX-4 Lx CNP
        assert {r["raw_name"] for r in _rows(counters)} == {"xdp:roce_counts"}
    finally:
        in_netns(netns, collector.close)
    detached = subprocess.run(
        ["ip", "-n", netns.name, "link", "show", "rsroce1"], capture_output=True, text=True, check=True
    ).stdout
    assert "xdp" not in detached


@pytest.mark.usefixtures("bcc")
def test_cli_collect_ebpf_lands_counters(tmp_path: Path) -> None:
    """The poll interval comes from the config's collectors.ebpf section; one poll lands before --seconds."""
    from typer.testing import CliRunner

    from rocescope.cli import app
    from rocescope.config import load
    from rocescope.pipeline.store import open_store

    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n  ttl_days: 0\ncollectors:\n  ebpf:\n    interval_s: 1\n")

    done = threading.Event()

    def drops() -> None:  # until the command is over: it compiles first, and only counts once attached
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            while not done.wait(0.02):
                udp.sendto(b"x", ("127.0.0.1", 9))

    sender = threading.Thread(target=drops, daemon=True)
    sender.start()
    try:
        result = CliRunner().invoke(
            app, ["--config", str(cfg), "collect", "ebpf", "--seconds", "1.6", "--allow-privileged"]
        )
    finally:
        done.set()
        sender.join()
    assert result.exit_code == 0, result.output
    assert "QP source:" in result.output
    with open_store(load(cfg).store) as store:
        rows = store.query_arrow(
            "SELECT metric, port, value FROM counters WHERE source = 'ebpf' AND metric = 'host_drops'", {}
        ).to_pylist()
    assert any(r["port"] == "reason:NO_SOCKET" and r["value"] >= 10 for r in rows), rows


def test_qp_owner_gid_and_port_land_in_a_store_upgraded_from_before_the_columns(tmp_path: Path) -> None:
    """A store migrated before qp_owners had dest_gid/udp_sport gets them from migration 7; old rows read
    empty, new rows keep their values."""
    import datetime as dt

    import pyarrow as pa

    from rocescope.pipeline.migrations import MIGRATIONS, applied_versions, migrate
    from rocescope.pipeline.store import ChdbStore

    store = ChdbStore(tmp_path / "chdb")
    try:
        applied_versions(store)
        for mig in MIGRATIONS:
            if mig.version >= 7:
                continue
            for sql in mig.statements(store.database, 30, 400):
                store.command(sql)
            store.insert(
                "schema_migrations",
                pa.table(
                    {
                        "version": pa.array([mig.version], pa.uint32()),
                        "name": [mig.name],
                        "applied_at": pa.array([dt.datetime.now(dt.UTC)], pa.timestamp("ns", tz="UTC")),
                    }
                ),
            )
        store.command("ALTER TABLE qp_owners DROP COLUMN dest_gid, DROP COLUMN udp_sport")  # as version 6 made it
        store.command(
            "INSERT INTO qp_owners (host, rdma_dev, qpn, dest_qpn, dest_ip, pid, comm, cgroup, job_id, seen_at) "
            "VALUES ('old', 'mlx5_0', 1, 2, '', 3, 'x', '', '', now64(9))"
        )
        assert migrate(store)[0] == "applied migration 7: qp_owners dest_gid and udp_sport"
        collector = EbpfCollector("gpu-07", qp_source=FixtureQpSource.from_file(QP_JSON), host_events=False).start()
        owners = collector.poll()[1]
        collector.close()
        store.insert("qp_owners", pa.Table.from_batches([owners.data]))
        got = store.query_arrow("SELECT host, qpn, dest_gid, udp_sport FROM qp_owners ORDER BY host, qpn").to_pylist()
    finally:
        store.close()
    assert got[0] == {"host": "gpu-07", "qpn": 263, "dest_gid": "", "udp_sport": sim_udp_sport(263, 391)}
    assert got[-1] == {"host": "old", "qpn": 1, "dest_gid": "", "udp_sport": 0}
