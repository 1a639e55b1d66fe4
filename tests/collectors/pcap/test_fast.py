"""The numpy fast path on classic pcap against tshark's dissection (through pyshark) on the real captures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope.collectors.pcap.collector import PcapCollector
from rocescope.collectors.pcap.fast import decode_pcap
from rocescope.collectors.pcap.framing import CUT_SHORT, UnsupportedCapture
from rocescope.collectors.pcap.tshark import PcapFile

from damaged_capture import check_damaged_capture

PCAPS = Path(__file__).parents[2] / "fixtures" / "realdata" / "03_pcap"
ROCE_PCAPS = sorted(p for p in PCAPS.glob("*.pcap") if "native_infiniband" not in p.name)
tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")


def _collect(path: Path, fast: bool) -> tuple[list[dict[str, object]], PcapCollector]:
    collector = PcapCollector("gpu-001/eth0", sampling_rate=100, fast_files=fast)
    source = PcapFile(path)
    rows = [row for b in collector.collect(source, batch_rows=7) for row in pa.Table.from_batches([b.data]).to_pylist()]
    source.close()
    return rows, collector


@tshark
@pytest.mark.parametrize("path", ROCE_PCAPS, ids=lambda p: p.name)
def test_fast_path_equals_tshark_field_for_field(path: Path) -> None:
    """Every column of every row, and the skip counts by reason, as the pyshark/tshark path gives them."""
    fast_rows, fast = _collect(path, fast=True)
    slow_rows, slow = _collect(path, fast=False)
    assert fast_rows, "every file here carries RoCEv2"
    assert fast_rows == slow_rows
    assert (fast.skipped, fast.malformed, fast.source_errors) == (slow.skipped, slow.malformed, slow.source_errors)


@tshark
def test_other_formats_fall_back_to_tshark() -> None:
    """ERF (native InfiniBand) is not a classic Ethernet pcap: tshark decodes it, with the same result."""
    with pytest.raises(UnsupportedCapture):
        decode_pcap((PCAPS / "native_infiniband_erf.pcap").read_bytes())
    rows, collector = _collect(PCAPS / "native_infiniband_erf.pcap", fast=True)
    assert rows == [] and sum(collector.skipped.values()) == 43


WRITE_BW = (PCAPS / "rdma_ib_tutorial_rdma_write_bw.pcap").read_bytes()
CM = (PCAPS / "rdma_ib_tutorial_rdma_cm.pcap").read_bytes()


def test_truncated_file_keeps_the_records_before_the_cut() -> None:
    whole = decode_pcap(WRITE_BW)
    cut = decode_pcap(WRITE_BW[:9000])
    assert cut.error == CUT_SHORT and 0 < cut.num_rows < whole.num_rows
    assert cut.table("p", 1).to_pylist() == whole.table("p", 1).slice(0, cut.num_rows).to_pylist()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from([WRITE_BW, CM]),
    cut=st.integers(0, 30_000),
    garble=st.lists(st.tuples(st.integers(0, 30_000), st.integers(0, 255)), max_size=8),
)
def test_fuzz_damaged_pcaps(base: bytes, cut: int, garble: list[tuple[int, int]]) -> None:
    """Only DecodeError escapes; the rows of the records wholly before the first damaged byte are kept."""
    check_damaged_capture(base, cut, garble)
