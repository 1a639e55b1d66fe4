"""Reading sysfs: the real mlx5_0 sysfs dump (prometheus/procfs fixture), RDMA port values, MemorySysfs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocescope.collectors.nic.host import rerooted
from rocescope.collectors.nic.sysfs import MemorySysfs, ib_rate_mbps, ib_state_active, parse_sysfs_dump

DUMP = Path(__file__).resolve().parents[2] / "fixtures" / "realdata" / "02_rdma" / "procfs_fixture_mlx5_0_sysfs.txt"


def dump_text() -> str:
    return DUMP.read_text()


def test_dump_parses_every_file() -> None:
    dump = parse_sysfs_dump(dump_text())
    assert dump.malformed == 0
    assert len(dump.files) == 54  # 55 lines, one comment
    port = "/sys/class/infiniband/mlx5_0/ports/1"
    assert dump.files[f"{port}/state"] == "4: ACTIVE"
    assert dump.files[f"{port}/rate"] == "25 Gb/sec (1X EDR)"
    assert dump.files[f"{port}/hw_counters/local_ack_timeout_err"] == "131"
    assert dump.files["/sys/class/infiniband/mlx5_0/fw_ver"] == "14.28.2006"


def test_dump_malformed_lines_counted(caplog: pytest.LogCaptureFixture) -> None:
    text = dump_text().replace("/sys/class/infiniband/mlx5_0/hca_type: MT4118", "hca_type MT4118 garbage")
    with caplog.at_level(logging.WARNING):
        dump = parse_sysfs_dump(text + "\nnot a path: 5\n", source="mlx5_0 dump")
    assert dump.malformed == 2 and len(dump.files) == 53
    assert len(caplog.records) == 1 and "mlx5_0 dump: skipped 2 malformed line(s)" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("rate", "mbps"),
    [("25 Gb/sec (1X EDR)", 25000), ("2.5 Gb/sec (1X SDR)", 2500), ("400 Gb/sec (4X NDR)", 400000), ("?", None)],
)
def test_ib_rate(rate: str, mbps: int | None) -> None:
    assert ib_rate_mbps(rate) == mbps


@pytest.mark.parametrize(
    ("state", "up"), [("4: ACTIVE", True), ("1: DOWN", False), ("2: INIT", False), ("3: ARMED", False), ("", None)]
)
def test_ib_state(state: str, up: bool | None) -> None:
    assert ib_state_active(state) is up


def test_memory_sysfs_behaves_like_a_filesystem() -> None:
    fs = MemorySysfs(rerooted(parse_sysfs_dump(dump_text()).files, "mlx5_7"), {"/sys/class/net/eth7/device": "../x"})
    assert fs.listdir("/sys/class/infiniband") == ["mlx5_7"]
    assert fs.listdir("/sys/class/infiniband/mlx5_7/ports") == ["1"]
    assert "port_rcv_data" in fs.listdir("/sys/class/infiniband/mlx5_7/ports/1/counters/")
    assert fs.read("/sys/class/infiniband/mlx5_7/ports/1/counters/port_rcv_data") == "18126345378"
    assert fs.readlink("/sys/class/net/eth7/device") == "../x"
    assert fs.exists("/sys/class/net/eth7") and not fs.exists("/sys/class/net/eth8")
    with pytest.raises(FileNotFoundError):
        fs.read("/sys/class/infiniband/mlx5_7/nope")
    with pytest.raises(NotADirectoryError):
        fs.listdir("/sys/class/infiniband/mlx5_7/fw_ver")
    with pytest.raises(OSError):
        fs.readlink("/sys/class/infiniband/mlx5_7/fw_ver")


# --- property test: a garbled dump never crashes the parser and keeps the good lines

_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_garbled_dump_keeps_good_lines(data: st.DataObject) -> None:
    lines = dump_text().splitlines()
    bad = st.text(st.characters(codec="utf-8", exclude_characters="/#" + _LINE_BREAKS), min_size=1)
    inserts = data.draw(st.lists(st.tuples(st.integers(0, len(lines)), bad.filter(str.strip)), max_size=6))
    mixed = list(lines)
    for at, line in sorted(inserts, reverse=True):
        mixed.insert(at, line)
    dump = parse_sysfs_dump("\n".join(mixed), logger=None)
    assert dump.files == parse_sysfs_dump(dump_text()).files
    assert dump.malformed == len(inserts)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_dump_never_raises(blob: str) -> None:
    dump = parse_sysfs_dump(blob, logger=None)
    assert all(path.startswith("/") for path in dump.files)
