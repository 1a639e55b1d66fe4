"""Real RoCEv2 captures through the collector (the fast path; real tshark, through pyshark, for other formats)
into the `packets` stream."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from rocescope import schema
from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.tshark import CNP_OPCODE, PcapFile
from rocescope.errors import DecodeError
from rocescope.pipeline.batch import decode, encode
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore

PCAPS = Path(__file__).parents[2] / "fixtures" / "realdata" / "03_pcap"
pytestmark = pytest.mark.skipif(
    shutil.which("tshark") is None, reason="tshark is not installed (scripts/test installs it)"
)


def _collect(path: Path, point: str = "gpu-001/eth0") -> tuple[pa.Table, PcapCollector, PcapFile]:
    collector = PcapCollector(point, sampling_rate=1)
    source = PcapFile(path)
    batches = list(collector.collect(source))
    source.close()
    return pa.Table.from_batches([b.data for b in batches], schema=schema.arrow_schema("packets")), collector, source


def test_cnp_from_a_connectx4_lx() -> None:
    """The one public capture of a real CNP: its BTH, BECN and DSCP come out as the NIC sent them."""
    table, collector, _ = _collect(PCAPS / "scapy_realpkts_cnp_cx4lx_and_rocev1.pcap")
    assert table.num_rows == 1
    cnp = table.to_pylist()[0]
    assert cnp["opcode"] == CNP_OPCODE
    assert cnp["becn"] == 1
    assert cnp["dest_qp"] == 0x118
    assert (cnp["src_ip"], cnp["dst_ip"], cnp["udp_sport"]) == ("10.0.17.1", "10.0.18.1", 0)
    assert (cnp["dscp"], cnp["ecn"], cnp["pkey"], cnp["length"]) == (48, 2, 0xFFFF, 74)
    assert cnp["ts"].timestamp() == 1600000000
    # the two RoCEv1 frames in the same file are not RoCEv2: skipped and counted, not guessed at
    assert collector.skipped == {"RoCEv1 or native InfiniBand (no UDP/IP)": 2}


def test_soft_roce_rdma_write_capture() -> None:
    table, collector, _ = _collect(PCAPS / "rdma_ib_tutorial_rdma_write_bw.pcap")
    assert table.num_rows == 20  # tshark -Y 'udp.dstport==4791' counts 20 of the 60 frames
    assert collector.skipped["not infiniband"] == 40
    rows = table.to_pylist()
    assert {r["dst_ip"] for r in rows} <= {"10.1.16.61", "10.1.16.62"}
    assert all(r["becn"] == 0 for r in rows)
    assert all(49152 <= r["udp_sport"] <= 65535 for r in rows if r["opcode"] != 100)  # RoCE's entropy range
    writes = [r for r in rows if r["opcode"] in (6, 7, 8, 10)]  # RC RDMA WRITE First/Middle/Last/Only
    assert writes, "an RDMA write benchmark carries RDMA WRITE packets"
    psns = [r["psn"] for r in rows if r["src_ip"] == writes[0]["src_ip"] and r["dest_qp"] == writes[0]["dest_qp"]]
    assert psns == sorted(psns), "PSNs of one QP increase"


def test_native_infiniband_is_not_roce() -> None:
    table, collector, _ = _collect(PCAPS / "native_infiniband_erf.pcap")
    assert table.num_rows == 0
    assert sum(collector.skipped.values()) == 43


def test_truncated_capture_keeps_what_came_before(tmp_path: Path) -> None:
    whole, _, _ = _collect(PCAPS / "rdma_ib_tutorial_rdma_write_bw.pcap")
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((PCAPS / "rdma_ib_tutorial_rdma_write_bw.pcap").read_bytes()[:9000])
    table, collector, source = _collect(cut)
    assert 0 < table.num_rows < whole.num_rows
    assert table.to_pylist() == whole.slice(0, table.num_rows).to_pylist()
    assert collector.source_errors == 1 and source.error is not None and "cut short" in source.error


def test_a_whole_file_is_not_cut_short_when_something_else_reaps_tshark(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """pyshark learns tshark's exit status from asyncio's child watcher, which reports 255 when anything else in
    the process reaped tshark first (seen once in CI: a whole file counted as one that ends early). A stray
    waitpid does that here; the source reads the file again before it calls it cut short."""
    source = PcapFile(PCAPS / "scapy_realpkts_cnp_cx4lx_and_rocev1.pcap")
    packets = source.packets()
    first = next(packets)
    (tshark,) = source._capture._running_processes  # the tshark pyshark started, still running or a zombie
    os.waitpid(tshark.pid, 0)  # the stray reaper
    with caplog.at_level(logging.WARNING):
        rest = list(packets)
    assert [first, *rest] and len(rest) == 2 and source.error is None
    assert "exit status was lost" in caplog.text
    cut = tmp_path / "cut.pcap"  # and a file tshark cannot read whole still says so, in tshark's words
    cut.write_bytes((PCAPS / "rdma_ib_tutorial_rdma_write_bw.pcap").read_bytes()[:9000])
    assert "cut short" in str(PcapFile(cut)._confirm("retcode 255"))


def test_garbage_and_missing_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.pcap"
    junk.write_bytes(b"\x17" * 300)
    table, collector, source = _collect(junk)
    assert table.num_rows == 0 and collector.source_errors == 1
    assert source.error is not None and "format" in source.error
    with pytest.raises(DecodeError, match="no such capture file"):
        PcapFile(tmp_path / "nope.pcap")


def test_packets_travel_and_land(tmp_path: Path) -> None:
    collector = PcapCollector("leaf-r0-01/mirror", sampling_rate=1000)
    source = PcapFile(PCAPS / "rdma_ib_tutorial_rdma_cm.pcap")
    batches = [decode("packets", encode(b)) for b in collector.collect(source, batch_rows=40)]
    source.close()
    assert [b.num_rows for b in batches] == [40, 40, 16]
    with ChdbStore(tmp_path / "db") as store:
        migrate(store, ttl_days=0)  # the capture is months old: keep it
        for batch in batches:
            store.insert("packets", pa.Table.from_batches([batch.data]))
        got = store.query_arrow("SELECT count() AS n, any(sampling_rate) AS s, any(capture_point) AS c FROM packets")
    assert got.to_pylist() == [{"n": 96, "s": 1000, "c": "leaf-r0-01/mirror"}]


def test_import_of_a_capture_accounts_for_every_frame(tmp_path: Path) -> None:
    """`rocescope import --kind pcap --json`: the real capture's three frames are one CNP landed and two RoCE v1
    frames skipped with their reason, counts that add up to the file's frames."""
    import json

    from rocescope.cli import app

    from store_cli import runner, store_config

    cfg = store_config(tmp_path)
    path = PCAPS / "scapy_realpkts_cnp_cx4lx_and_rocev1.pcap"
    out = runner.invoke(app, ["--config", cfg, "import", "--kind", "pcap", "--json", str(path)])
    assert out.exit_code == 0, out.output
    (done,) = json.loads(out.stdout.strip().splitlines()[-1])["files"]
    assert done["landed"] == 1
    assert done["skipped"] == {"malformed": 0, "RoCEv1 or native InfiniBand (no UDP/IP)": 2}
    assert done["landed"] + sum(done["skipped"].values()) == 3  # tshark counts 3 frames in the file


def test_what_became_of_a_captures_frames_is_in_the_collectors_own_metrics() -> None:
    """`rocescope_pcap_values_total{outcome,reason}`, as every collector counts its values: the CNP landed, the
    two RoCE v1 frames skipped with their reason."""
    _, collector, _ = _collect(PCAPS / "scapy_realpkts_cnp_cx4lx_and_rocev1.pcap")
    m = collector.metrics
    assert m.value("rocescope_pcap_values_total", target="gpu-001/eth0", outcome="landed") == 1
    skipped = m.value(
        "rocescope_pcap_values_total", outcome="skipped", reason="RoCEv1 or native InfiniBand (no UDP/IP)"
    )
    assert skipped == 2
