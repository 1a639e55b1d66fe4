"""Live capture in rotating files, for real: dumpcap's ring buffer on a veth pair inside a network
namespace this test creates (and removes), fed real RoCEv2 frames from the public captures through a
raw AF_PACKET socket on the other end of the pair. No traffic leaves the namespace.

Each closed ring file must be decoded by the fast path (pcapng), shipped and removed; the packets
shipped must be the frames sent, field for field (only the capture time differs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.fast import decode_pcap
from rocescope.collectors.pcap.ring import RingCapture, Sampler, capture_live
from rocescope.collectors.pcap.tshark import PcapFile
from rocescope.pipeline.batch import Batch, make_batch
from rocescope.testbed.snmpd import Netns, netns_unavailable

PCAPS = Path(__file__).parents[2] / "fixtures" / "realdata" / "03_pcap"
SENT = ("rdma_ib_tutorial_rdma_write_bw.pcap", "rdma_ib_tutorial_rdma_cm.pcap", "rdma_ib_tutorial_rping.pcap")
_FIELDS = ("src_ip", "dst_ip", "udp_sport", "dscp", "ecn", "opcode", "dest_qp", "psn", "pkey", "becn", "length")

# Sends the frames of classic pcap files, as they were captured, out of one interface.
_SENDER = """
import socket, struct, sys
iface, *files = sys.argv[1:]
with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as tx:
    tx.bind((iface, 0))
    for name in files:
        data = open(name, "rb").read()
        off = 24
        while off + 16 <= len(data):
            incl = struct.unpack_from("<I", data, off + 8)[0]
            tx.send(data[off + 16 : off + 16 + incl])
            off += 16 + incl
"""


def _rows(batches: list[Batch]) -> list[tuple[object, ...]]:
    rows = [r for b in batches for r in pa.Table.from_batches([b.data]).to_pylist()]
    return sorted(tuple(r[f] for f in _FIELDS) for r in rows)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("dumpcap") is None or shutil.which("tshark") is None, reason="no dumpcap/tshark")
def test_ring_capture_on_a_veth_ships_each_closed_file_and_removes_it(tmp_path: Path) -> None:
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    files = [PCAPS / name for name in SENT]
    expected = _rows([b for f in files for b in _decode(f)])
    assert len(expected) > 150
    ring_dir, kept = tmp_path / "ring", tmp_path / "kept"
    kept.mkdir()
    with Netns() as ns:
        _ip("-n", ns.name, "link", "add", "rsring0", "type", "veth", "peer", "name", "rsring1")
        for dev in ("rsring0", "rsring1"):
            _ip("-n", ns.name, "link", "set", dev, "up")
        ring = RingCapture("rsring1", ring_dir, file_seconds=1, files=3, command_prefix=ns.prefix())
        collector = PcapCollector("ns/rsring1")
        shipped: list[Batch] = []
        landed: list[tuple[str, int]] = []

        def on_file(path: Path, n: int) -> None:
            landed.append((path.name, n))
            if n and not any(kept.iterdir()):
                shutil.copy(path, kept / path.name)  # a pcapng dumpcap wrote, for the tshark comparison below

        stop = threading.Event()
        worker = threading.Thread(target=capture_live, args=(ring, collector, shipped.append, stop, on_file))
        worker.start()
        try:
            deadline = time.monotonic() + 20
            while not list(ring_dir.glob("roce_*.pcapng")):  # dumpcap has opened its first file: it is capturing
                assert time.monotonic() < deadline and worker.is_alive(), "dumpcap did not start"
                time.sleep(0.05)
            time.sleep(0.3)
            ns.run(sys.executable, "-c", _SENDER, "rsring0", *map(str, files))
            while sum(b.num_rows for b in shipped) < len(expected) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            stop.set()
            worker.join(30)
    assert not worker.is_alive()
    assert _rows(shipped) == expected  # every frame sent, once, field for field
    assert {b.key for b in shipped} == {"ns/rsring1"} and collector.source_errors == 0
    assert len(landed) >= 2 and sum(n for _, n in landed) == len(expected)  # rotated: several files landed
    assert not list(ring_dir.iterdir())  # each file removed once it landed
    capture = next(kept.iterdir())
    assert capture.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"  # dumpcap's pcapng
    fast = decode_pcap(capture.read_bytes())
    assert fast.num_rows and _rows(list(_decode(capture))) == _rows(list(_decode(capture, fast=False)))


@pytest.mark.skipif(shutil.which("dumpcap") is None, reason="no dumpcap")
def test_ring_capture_of_several_interfaces_names_each_packet_by_its_port(tmp_path: Path) -> None:
    """dumpcap on two veths at once (one pcapng, a packet per interface): each packet lands with the capture
    point configured for its interface, or the interface's own name where none is."""
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    by_port = {"rsa1": PCAPS / SENT[0], "rsb1": PCAPS / SENT[2]}
    expected = {port: _rows(_decode(path)) for port, path in by_port.items()}
    with Netns() as ns:
        for pair in ("rsa", "rsb"):
            _ip("-n", ns.name, "link", "add", f"{pair}0", "type", "veth", "peer", "name", f"{pair}1")
            for dev in (f"{pair}0", f"{pair}1"):
                _ip("-n", ns.name, "link", "set", dev, "up")
        ring = RingCapture(["rsa1", "rsb1"], tmp_path / "ring", file_seconds=1, files=3, command_prefix=ns.prefix())
        collector = PcapCollector("ns", interface_points={"rsa1": "leaf-r0-01/Ethernet0"})
        shipped: list[Batch] = []
        stop = threading.Event()
        worker = threading.Thread(target=capture_live, args=(ring, collector, shipped.append, stop))
        worker.start()
        try:
            deadline = time.monotonic() + 20
            while not list((tmp_path / "ring").glob("roce_*.pcapng")):
                assert time.monotonic() < deadline and worker.is_alive(), "dumpcap did not start"
                time.sleep(0.05)
            time.sleep(0.3)
            for port, path in by_port.items():
                ns.run(sys.executable, "-c", _SENDER, port.replace("1", "0"), str(path))
            want = sum(len(rows) for rows in expected.values())
            while sum(b.num_rows for b in shipped) < want and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            stop.set()
            worker.join(30)
    rows = [r for b in shipped for r in pa.Table.from_batches([b.data]).to_pylist()]
    got = {
        point: sorted(tuple(r[f] for f in _FIELDS) for r in rows if r["capture_point"] == point)
        for point in {r["capture_point"] for r in rows}
    }
    assert got == {"leaf-r0-01/Ethernet0": expected["rsa1"], "rsb1": expected["rsb1"]}


def _decode(path: Path, fast: bool = True) -> list[Batch]:
    collector = PcapCollector("x", fast_files=fast)
    source = PcapFile(path)
    try:
        return list(collector.collect(source))
    finally:
        source.close()


@pytest.mark.skipif(shutil.which("dumpcap") is None, reason="no dumpcap")
def test_cli_live_once_in_a_namespace_samples_and_ships_nothing(tmp_path: Path) -> None:
    """`rocescope collect pcap --once` run inside the namespace, interface, ring and sampling from the config:
    it captures until a ring file holds packets, prints 1 in 2 of them, and ships nothing."""
    reason = netns_unavailable()
    if reason is not None:
        pytest.skip(reason)
    files = [PCAPS / name for name in SENT]
    sent = len(_rows([b for f in files for b in _decode(f)]))
    ring_dir = tmp_path / "ring"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"store:\n  path: {tmp_path / 'data'}\ncollectors:\n  pcap:\n    interface: rsring1\n"
        f"    sampling_rate: 2\n    file_seconds: 2\n    capture_dir: {ring_dir}\n"
    )
    with Netns() as ns:
        _ip("-n", ns.name, "link", "add", "rsring0", "type", "veth", "peer", "name", "rsring1")
        for dev in ("rsring0", "rsring1"):
            _ip("-n", ns.name, "link", "set", dev, "up")
        args = ["--config", str(cfg), "collect", "pcap", "--once", "--seconds", "30", "--limit", "3"]
        cli = subprocess.Popen(
            [*ns.prefix(), sys.executable, "-m", "rocescope.cli", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        try:
            deadline = time.monotonic() + 30
            while not list(ring_dir.glob("roce_*.pcapng")):
                assert time.monotonic() < deadline and cli.poll() is None, "the capture did not start"
                time.sleep(0.05)
            time.sleep(0.3)
            ns.run(sys.executable, "-c", _SENDER, "rsring0", *map(str, files))
            out, _ = cli.communicate(timeout=40)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
    assert cli.returncode == 0, out
    shown = re.search(r"(\d+) rows", out)
    assert shown is not None and int(shown.group(1)) == (sent + 1) // 2, out  # 1 in 2 of everything sent
    assert f"{shown.group(1)} RoCEv2 packets from rsring1" in out
    assert not (tmp_path / "data").exists()  # --once opened no store: nothing shipped


def test_sampler_keeps_one_in_n_across_batches() -> None:
    def batch(first: int, n: int) -> Batch:
        return make_batch(
            "packets",
            {
                "ts": pa.array(range(first, first + n), pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
                "capture_point": ["p"] * n,
                "src_ip": ["10.0.0.1"] * n,
                "dst_ip": ["10.0.0.2"] * n,
                **{c: [0] * n for c in ("udp_sport", "dscp", "ecn", "opcode", "dest_qp", "psn", "pkey", "becn")},
                "length": [60] * n,
                "sampling_rate": [3] * n,
            },
        )

    sample = Sampler(3)
    kept = [sample(batch(0, 7)), sample(batch(7, 2)), sample(batch(9, 5))]
    ts = [t.value for b in kept for t in b.data.column("ts")]
    assert ts == [0, 3, 6, 9, 12]  # every third packet, the phase carried over file boundaries


def test_dumpcap_failure_is_a_clear_error(tmp_path: Path) -> None:
    if shutil.which("dumpcap") is None:
        pytest.skip("no dumpcap")
    from rocescope.collectors.pcap.ring import CaptureError

    ring = RingCapture("rs-no-such-if0", tmp_path / "ring", file_seconds=1, files=2)
    with pytest.raises(CaptureError, match="rs-no-such-if0"):
        capture_live(ring, PcapCollector("x"), lambda b: None, threading.Event())


def test_cli_pcap_once_takes_config_and_flags_override(tmp_path: Path) -> None:
    capture = str(PCAPS / "rdma_ib_tutorial_rping.pcap")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"store:\n  path: {tmp_path / 'data'}\ncollectors:\n  pcap:\n    capture_point: from-config\n"
        "    sampling_rate: 10\n"
    )
    result = CliRunner().invoke(app, ["--config", str(cfg), "collect", "pcap", "--once", capture])
    assert result.exit_code == 0, result.output
    assert (
        "packets:" in result.output
        and "65 rows" in result.output
        and "65 RoCEv2 packets from from-config" in result.output
    )
    result = CliRunner().invoke(
        app, ["--config", str(cfg), "collect", "pcap", "--once", capture, "--capture-point", "from-flag"]
    )
    assert "65 RoCEv2 packets from from-flag" in result.output
    result = CliRunner().invoke(app, ["--config", str(cfg), "sql", "SELECT count() AS n FROM packets", "-f", "csv"])
    assert result.stdout.splitlines()[1] == "0"  # --once shipped nothing
