"""The packet mirror: sampled RoCEv2 data, ACKs and CNPs of the simulated flows, checked by tshark, by the
numpy pcap decoder, against the engine's counters, and fed to the polarization detector."""

from __future__ import annotations

import datetime as dt
import shutil
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze
from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.fast import decode_pcap
from rocescope.collectors.pcap.tshark import PcapFile
from rocescope.config import Settings, StoreConfig, TransportConfig
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.incidents import World, build_world
from rocescope.sim.mirror import (
    CNP,
    RC_ACK,
    RDMA_WRITE_FIRST,
    RDMA_WRITE_LAST,
    PacketMirror,
    Sampled,
    concat,
    icrc,
    write_pcap,
)
from rocescope.sim.run import run_scenario
from rocescope.sim.scenario import Mirror, Polarization, load_scenario, parse_scenario
from rocescope.sim.serve import serve_scenario

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
REAL = Path(__file__).parent.parent / "fixtures" / "realdata" / "03_pcap"
INCAST = parse_scenario(
    {
        "name": "t-mirror",
        "seed": 11,
        "duration": 30,
        "fabric": {"hosts": 16, "rails": 2, "spines": 2, "host_ports_per_leaf": 8},
        "jobs": [
            {"name": "llm-a", "namespace": "team-a", "hosts": 8},
            {"name": "llm-b", "namespace": "team-b", "hosts": 8},
        ],
        "incidents": [
            {"kind": "incast", "start": 10, "end": 22, "receiver": "gpu-016", "rail": 0, "senders": 6, "job": "ckpt"}
        ],
        "mirror": {"enabled": True, "sampling_rate": 5000, "cnp_cap_per_s": 5000},
    }
)
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed (scripts/test)")


def _records(path: Path) -> list[bytes]:
    data, off, out = path.read_bytes(), 24, []
    while off + 16 <= len(data):
        incl = struct.unpack("<I", data[off + 8 : off + 12])[0]
        out.append(data[off + 16 : off + 16 + incl])
        off += 16 + incl
    return out


def test_icrc_reproduces_real_captures() -> None:
    """The ICRC of every RoCEv2 frame of a Soft-RoCE capture and of a ConnectX-4 Lx CNP (real bytes)."""
    frames = [f for f in _records(REAL / "rdma_ib_tutorial_rdma_write_bw.pcap") if f[12:14] == b"\x08\x00"]
    roce = [f for f in frames if f[23] == 17 and f[36:38] == b"\x12\xb7"]
    cnp = _records(REAL / "scapy_realpkts_cnp_cx4lx_and_rocev1.pcap")[0]
    assert len(roce) >= 10 and cnp[42] == CNP
    for frame in [*roce, cnp]:
        assert struct.pack("<I", icrc(frame[:-4])) == frame[-4:]


@dataclass
class Mirrored:
    world: World
    mirror: PacketMirror
    sampled: Sampled
    table: pa.Table
    #: receiver NIC counters per poll second: (CE-marked RoCE packets, RDMA packets received)
    receiver: dict[int, tuple[float, float]]


@pytest.fixture(scope="module")
def mirrored() -> Mirrored:
    world = build_world(INCAST, start=T0)
    mirror = PacketMirror(world.engine, INCAST.mirror, INCAST.seed)
    parts: list[Sampled] = []
    receiver: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}

    def on_poll(ts: dt.datetime, eng: object) -> None:
        parts.append(mirror.sample())
        e = world.engine
        receiver[round(e.now)] = (
            e.counter("gpu-016", "mlx5_0/1", "ecn_marked_roce_packets"),
            e.counter("gpu-016", "eth0", "rdma_rx_packets"),
        )

    world.engine.run(world.duration_s, on_poll, 1.0)
    sampled = concat(parts)
    return Mirrored(world, mirror, sampled, mirror.table(sampled), receiver)


def _ips(world: World, hosts: list[str]) -> set[str]:
    return {world.topology.nic(h, 0).ip for h in hosts}


def test_cnps_go_only_to_the_incast_senders_while_it_lasts(mirrored: Mirrored) -> None:
    t = mirrored.table
    is_cnp = t.column("opcode").to_numpy() == CNP
    cnps = t.filter(pa.array(is_cnp)).to_pylist()
    assert len(cnps) > 100
    receiver = mirrored.world.topology.nic("gpu-016", 0)
    # the senders of the congested receiver: the incast's, and its ring neighbour (a victim at the same queue)
    senders = {f.src.ip for f in mirrored.world.flows if f.dst == receiver}
    assert _ips(mirrored.world, [f"gpu-{n:03d}" for n in range(1, 7)]) < senders
    assert {r["src_ip"] for r in cnps} == {receiver.ip}
    assert {r["dst_ip"] for r in cnps} <= senders and len({r["dst_ip"] for r in cnps}) >= 4
    assert all(T0 + dt.timedelta(seconds=10) <= r["ts"] <= T0 + dt.timedelta(seconds=23) for r in cnps)
    assert all(r["becn"] == 1 and r["dscp"] == 48 and r["psn"] == 0 for r in cnps)
    assert not t.column("becn").to_numpy()[~is_cnp].any()
    assert {r["capture_point"] for r in cnps} == {f"{receiver.leaf}/{receiver.leaf_port}"}
    # every CNP's destination QP is the sending QP of an incast flow
    qps = {(f.src.ip, f.src_qpn) for f in mirrored.world.flows if f.dst == receiver}
    assert {(r["dst_ip"], r["dest_qp"]) for r in cnps} <= qps


def test_ce_fraction_of_sampled_data_tracks_the_engine_marks(mirrored: Mirrored) -> None:
    rec = mirrored.receiver
    (ce0, rx0), (ce1, rx1) = rec[10], rec[22]
    expected = (ce1 - ce0) / (rx1 - rx0)
    receiver = mirrored.world.topology.nic("gpu-016", 0)
    t = mirrored.table
    ts = t.column("ts").cast(pa.int64()).to_numpy()
    lo, hi = (int((T0 + dt.timedelta(seconds=s)).timestamp() * 1e9) for s in (10, 22))
    at = np.array(t.column("capture_point").to_pylist()) == f"{receiver.leaf}/{receiver.leaf_port}"
    data = (t.column("opcode").to_numpy() <= RDMA_WRITE_LAST) & at & (ts >= lo) & (ts < hi)
    ce = t.column("ecn").to_numpy()[data] == 3
    n = len(ce)
    assert n > 2000 and expected > 0.01
    sigma = np.sqrt(expected * (1 - expected) / n)
    assert abs(ce.mean() - expected) < 4 * sigma + 0.01 * expected
    # outside congestion nothing is marked, and data is ECN-capable
    calm = (t.column("opcode").to_numpy() <= RDMA_WRITE_LAST) & (ts < lo)
    assert set(t.column("ecn").to_numpy()[calm]) == {2}


def test_headers_come_from_the_qps(mirrored: Mirrored) -> None:
    every = np.arange(0, mirrored.sampled.size, 97)
    t = mirrored.table.take(pa.array(every)).to_pydict()
    flows = mirrored.world.flows
    f = mirrored.sampled.flow[every]
    for k in range(len(every)):
        flow, op = flows[f[k]], t["opcode"][k]
        data = op <= RDMA_WRITE_LAST
        assert (t["src_ip"][k], t["dst_ip"][k]) == ((flow.src.ip, flow.dst.ip) if data else (flow.dst.ip, flow.src.ip))
        assert t["udp_sport"][k] == flow.udp_sport and t["pkey"][k] == 0xFFFF
        assert t["dest_qp"][k] == (flow.dst_qpn if data else flow.src_qpn)
        assert t["length"][k] == {True: 4154 + 16 * (op == RDMA_WRITE_FIRST), False: 62 if op == RC_ACK else 74}[data]
    # PSNs advance with time along a flow (24-bit wrap aside)
    f = mirrored.sampled.flow
    busiest = np.bincount(f[mirrored.sampled.opcode <= RDMA_WRITE_LAST]).argmax()
    mine = (f == busiest) & (mirrored.sampled.opcode <= RDMA_WRITE_LAST)
    steps = np.diff(mirrored.sampled.psn[mine]) % (1 << 24)
    assert (steps < 1 << 23).all() and steps.sum() > 1000


@needs_tshark
def test_tshark_dissects_every_packet_as_roce(mirrored: Mirrored, tmp_path: Path) -> None:
    s = mirrored.sampled
    pick = np.flatnonzero(s.ts_ns >= int((T0 + dt.timedelta(seconds=15)).timestamp() * 1e9))[:1500]
    pk = s.take(pick)
    assert {RDMA_WRITE_FIRST, RDMA_WRITE_LAST, RC_ACK, CNP} <= set(pk.opcode.tolist())
    frames = mirrored.mirror.frames(pk)
    path = tmp_path / "mirror.pcap"
    write_pcap(path, pk.ts_ns, frames, mirrored.mirror.frame_lengths(pk))
    fields = [
        "frame.len", "ip.src", "ip.dst", "udp.srcport", "ip.dsfield.dscp", "ip.dsfield.ecn", "ip.checksum.status",
        "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.bth.p_key",
        "infiniband.invariant.crc", "infiniband.vendor", "_ws.expert", "_ws.malformed",
    ]  # fmt: skip
    cmd = ["tshark", "-r", str(path), "-o", "ip.check_checksum:TRUE", "-T", "fields", "-E", "separator=|"]
    out = subprocess.run([*cmd, *(a for f in fields for a in ("-e", f))], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert len(lines) == len(frames)
    t = mirrored.mirror.table(pk).to_pydict()
    for k, line in enumerate(lines):
        got = dict(zip(fields, line.split("|"), strict=True))
        assert got["_ws.expert"] == "" and got["_ws.malformed"] == "", line
        assert got["ip.checksum.status"] == "1"  # good (0 bad, 2 unverified)
        assert int(got["frame.len"]) == t["length"][k] == len(frames[k])
        assert (got["ip.src"], got["ip.dst"]) == (t["src_ip"][k], t["dst_ip"][k])
        assert int(got["udp.srcport"]) == t["udp_sport"][k]
        assert (int(got["ip.dsfield.dscp"]), int(got["ip.dsfield.ecn"])) == (t["dscp"][k], t["ecn"][k])
        assert int(got["infiniband.bth.opcode"]) == t["opcode"][k]
        assert int(got["infiniband.bth.destqp"], 0) == t["dest_qp"][k]
        assert int(got["infiniband.bth.psn"]) == t["psn"][k]
        assert int(got["infiniband.bth.p_key"], 0) == 0xFFFF
        # tshark shows the ICRC where RoCEv2 carries it (it reads the 4 bytes big-endian; they are stored LE)
        assert frames[k][-4:] == struct.pack("<I", icrc(frames[k][:-4]))
        if t["opcode"][k] == CNP:  # tshark 4.0 shows a CNP's rest as vendor data, as for a real ConnectX CNP
            assert got["infiniband.vendor"].replace(",", "").endswith(frames[k][54:].hex())
        else:
            assert int(got["infiniband.invariant.crc"], 0) == int.from_bytes(frames[k][-4:], "big")
    # the numpy decoder (equal to tshark on real captures) reads the same rows, BECN included
    fast = decode_pcap(path.read_bytes()).table("x", 1).to_pydict()
    for col in ("src_ip", "dst_ip", "udp_sport", "dscp", "ecn", "opcode", "dest_qp", "psn", "pkey", "becn", "length"):
        assert fast[col] == t[col], col
    assert fast["ts"] == t["ts"]


def test_truncated_files_keep_the_true_length(mirrored: Mirrored, tmp_path: Path) -> None:
    pk = mirrored.sampled.take(slice(0, 200))
    path = tmp_path / "cut.pcap"
    frames = mirrored.mirror.frames(pk, snaplen=128)
    assert frames == [whole[:128] for whole in mirrored.mirror.frames(pk)]  # the same bytes, cut
    write_pcap(path, pk.ts_ns, frames, mirrored.mirror.frame_lengths(pk), snaplen=128)
    fast = decode_pcap(path.read_bytes())
    assert (
        fast.num_rows == 200
        and fast.table("x", 1).column("length").to_pylist() == mirrored.mirror.table(pk).column("length").to_pylist()
    )
    assert path.stat().st_size < 24 + 200 * (16 + 128) + 1


def test_fast_path_lands_packets_and_polarization_measures_their_entropy(tmp_path: Path) -> None:
    base = load_scenario("polarization")
    sc = base.model_copy(
        update={
            "incidents": [Polarization(kind="polarization", start=10)],
            "mirror": Mirror(enabled=True, sampling_rate=200_000),
        }
    )
    settings = Settings(
        store=StoreConfig(path=tmp_path / "chdb", ttl_days=0), transport=TransportConfig(kind="inprocess")
    )
    summary = run_scenario(settings, sc, 45)
    assert summary.rows["packets"] > 1000
    with ChdbStore(tmp_path / "chdb") as store:
        n = store.query_arrow("SELECT count() AS n FROM packets").column("n")[0].as_py()
        assert n == summary.rows["packets"]
        (f,) = analyze(store, Window(summary.start, summary.end), only=["polarization"], write=False).findings
    entropy = f.evidence["flow_entropy"]
    assert entropy and all(e["flows"] >= 1 and e["entropy_bits"] >= 0 for e in entropy)
    assert any(e["where"].endswith(" uplinks") and e["flows"] > 4 for e in entropy)


def test_serve_mode_writes_rotating_pcaps_the_pcap_collector_reads(tmp_path: Path) -> None:
    sc = INCAST.model_copy(update={"mirror": INCAST.mirror.model_copy(update={"sampling_rate": 50_000, "rotate_s": 5})})
    settings = Settings(store=StoreConfig(path=tmp_path / "chdb"), transport=TransportConfig(kind="inprocess"))
    _summary, stats = serve_scenario(settings, sc, 12, tmp_path / "out", collect=False)
    assert stats.mirror_dir == tmp_path / "out" / "served" / "mirror"
    files = sorted(stats.mirror_dir.glob("*.pcapng"))
    assert [p.name for p in files] == ["mirror-00001.pcapng", "mirror-00002.pcapng", "mirror-00003.pcapng"]
    assert files == stats.mirror_files and not list(stats.mirror_dir.glob(".*"))  # no partial file left
    collector = PcapCollector(capture_point="mirror", sampling_rate=50_000)
    rows = [b.data for path in files for b in collector.collect(PcapFile(path))]
    table = pa.concat_tables([pa.Table.from_batches([b]) for b in rows])
    assert table.num_rows == stats.mirror_packets > 1000 and not collector.skipped and collector.malformed == 0
    ts = table.column("ts").cast(pa.int64()).to_numpy()
    assert (np.diff(ts) >= 0).all()  # files rotate in time order
    assert set(table.column("opcode").to_pylist()) >= {RDMA_WRITE_LAST, RC_ACK, CNP}


def test_served_run_lands_its_mirror_through_the_pcap_collector(tmp_path: Path) -> None:
    sc = INCAST.model_copy(update={"mirror": INCAST.mirror.model_copy(update={"sampling_rate": 50_000, "rotate_s": 5})})
    store_cfg = StoreConfig(path=tmp_path / "chdb", ttl_days=0)
    settings = Settings(store=store_cfg, transport=TransportConfig(kind="inprocess"))
    summary, stats = serve_scenario(settings, sc, 12, tmp_path / "out")
    assert stats.mirror_packets > 1000 and stats.mirror_packets_collected == stats.mirror_packets
    assert summary.rows["packets"] == stats.mirror_packets
    with ChdbStore(tmp_path / "chdb") as store:
        got = store.query_arrow(
            "SELECT count() AS n, groupUniqArray(toString(capture_point)) AS points, min(sampling_rate) AS rate "
            "FROM packets"
        ).to_pylist()[0]
    assert (got["n"], got["rate"]) == (stats.mirror_packets, 50_000)
    # the same rows as the fast path lands, each named by the mirrored leaf port (the pcapng interface)
    fast_cfg = Settings(store=StoreConfig(path=tmp_path / "fast", ttl_days=0), transport=TransportConfig())
    fast = run_scenario(fast_cfg, sc, 12)
    cols = "toString(capture_point) AS point, src_ip, dst_ip, udp_sport, ecn, opcode, dest_qp, psn, becn, length"
    rows = {}
    for name, start in (("chdb", summary.start), ("fast", fast.start)):  # fabric time: each run starts at its now
        sql = f"SELECT toUnixTimestamp64Nano(ts) - {{t0:Int64}} AS at, {cols} FROM packets ORDER BY ALL"
        with ChdbStore(tmp_path / name) as store:
            rows[name] = store.query_arrow(sql, {"t0": round(start.timestamp() * 1e3) * 10**6}).to_pylist()
    assert len(got["points"]) > 1 and rows["chdb"] == rows["fast"]
