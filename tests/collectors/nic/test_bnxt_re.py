"""A Broadcom Thor host end to end: bnxt_en `ethtool -S` (real output) and bnxt_re RDMA counters, read by the NIC
collector from a directory tree laid out like the kernel's, land canonical rows.

The bnxt_re trees (tests/fixtures/nic) hold the hw_counters of each driver generation, named as in the driver
sources (Linux 6.6-6.17, 6.18's renames, Broadcom's own driver), for one port state: every generation must land
the same canonical rows. The RDMA device's provider is found by its driver (`device/driver` -> bnxt_en), not by
its name, so a device udev renamed still lands canonical rows.
"""

from __future__ import annotations

import datetime as dt
import re
import stat
from pathlib import Path

import polars as pl
import pytest
from sysfs_tree import link, write

from rocescope.collectors.nic.collector import NicCollector
from rocescope.collectors.nic.host import LiveHost
from rocescope.collectors.nic.normalize import UNKNOWN_PREFIX
from rocescope.collectors.nic.sysfs import parse_sysfs_dump
from rocescope.collectors.nic.vendors import rdma_vendor
from rocescope.pipeline.batch import Batch

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BNXT_EN = FIXTURES / "realdata" / "01_ethtool" / "ethq_bnxt_en_ethtool-S.txt"
TREES = {
    "linux-6.17": FIXTURES / "nic" / "bnxt_re0_sysfs_linux6.17.txt",
    "linux-6.18": FIXTURES / "nic" / "bnxt_re0_sysfs_linux6.18.txt",
    "broadcom-driver": FIXTURES / "nic" / "bnxt_re0_sysfs_broadcom_driver.txt",
}
TS = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
PCI = "sys/devices/pci0000:40/0000:40:01.1"
BDF = "0000:41:00.0"
NETDEV = "ens1f0np0"
#: What the RDMA analysis reads from a NIC (cnp_loss, congestion, transport health).
RDMA_METRICS = {
    "cnp_sent",
    "cnp_received",
    "ecn_marked_roce_packets",
    "out_of_sequence",
    "packet_seq_err",
    "local_ack_timeout_err",
    "duplicate_request",
    "rx_write_requests",
}


def thor_host(root: Path, tree: Path, rdma_name: str = "bnxt_re0", device_link: bool = True) -> Path:
    """One BCM57608 function as the kernel shows it: bound to bnxt_en, netdev ens1f0np0, RDMA device `rdma_name`
    (the bnxt_re tree re-rooted there), /sys/class/{net,infiniband} links into it."""
    dev = root / PCI / BDF
    (root / "sys/bus/pci/drivers/bnxt_en").mkdir(parents=True, exist_ok=True)
    link(dev / "driver", "../../../../bus/pci/drivers/bnxt_en")
    net = dev / "net" / NETDEV
    write(net / "operstate", "up")
    write(net / "speed", "400000")
    write(net / "dev_port", "0")
    link(net / "device", f"../../../{BDF}")
    link(root / "sys/class/net" / NETDEV, f"../../{PCI.removeprefix('sys/')}/{BDF}/net/{NETDEV}")
    ib = dev / "infiniband" / rdma_name
    prefix = "/sys/class/infiniband/bnxt_re0/"
    for path, value in parse_sysfs_dump(tree.read_text()).files.items():
        write(ib / path.removeprefix(prefix), value)
    if device_link:
        link(ib / "device", f"../../../{BDF}")
    link(root / "sys/class/infiniband" / rdma_name, f"../../{PCI.removeprefix('sys/')}/{BDF}/infiniband/{rdma_name}")
    exe = root / "bin" / "ethtool"  # a real process printing the recorded bnxt_en output
    write(exe, f'#!/bin/sh\n[ "$1" = -S ] && [ "$2" = {NETDEV} ] && exec cat \'{BNXT_EN}\'\nexit 96')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return root


def frame(batch: Batch) -> pl.DataFrame:
    df = pl.from_arrow(batch.data)
    assert isinstance(df, pl.DataFrame)
    return df.with_columns(pl.col("port", "metric", "raw_name", "source").cast(pl.String))


def poll(root: Path, keep_unknown: bool = True) -> tuple[NicCollector, pl.DataFrame]:
    collector = NicCollector(LiveHost(root, ethtool=str(root / "bin/ethtool")), "gpu-t01", keep_unknown=keep_unknown)
    return collector, frame(collector.poll(TS))


def hw_counters(tree: Path) -> dict[str, int]:
    files = parse_sysfs_dump(tree.read_text()).files
    return {p.rpartition("/")[2]: int(v) for p, v in files.items() if "/hw_counters/" in p and v.isdigit()}


def canonical(df: pl.DataFrame, port: str) -> dict[tuple[str, int], tuple[float, str]]:
    rows = df.filter((pl.col("port") == port) & ~pl.col("metric").str.starts_with(UNKNOWN_PREFIX))
    return {(m, p): (v, r) for m, p, v, r in rows.select("metric", "priority", "value", "raw_name").iter_rows()}


@pytest.mark.parametrize("generation", sorted(TREES))
def test_a_bnxt_re_port_lands_canonical_rows_under_its_drivers_names(generation: str, tmp_path: Path) -> None:
    collector, df = poll(thor_host(tmp_path / "root", TREES[generation]))
    assert collector.inventory.rdma_vendors == {"bnxt_re0": "bnxt_rdma"}
    assert collector.port_map == {"bnxt_re0/1": NETDEV}
    got = canonical(df, "bnxt_re0/1")
    files = hw_counters(TREES[generation])
    for metric in RDMA_METRICS:
        value, raw = got[(metric, -1)]
        assert value == files[raw], (metric, raw)  # each from the file of the driver's own name
    unmapped_cnps = [f"{UNKNOWN_PREFIX}{n}" for n in ("tx_cnp_pkts", "rx_cnp_pkts", "np_cnp_pkts", "rp_cnp_handled")]
    assert not df.filter(pl.col("metric").is_in(unmapped_cnps)).height
    assert df.filter(pl.col("port") == "bnxt_re0/1")["source"].unique().to_list() == ["rdma"]
    # one series per (port, metric, priority), link state and speed of the RDMA port too
    named = df.filter(~pl.col("metric").str.starts_with(UNKNOWN_PREFIX))
    assert named.select("port", "metric", "priority").is_unique().all()
    assert got[("oper_up", -1)][0] == 1.0 and got[("port_speed_bps", -1)][0] == 400e9
    assert collector.health()["bnxt_re0/1"].up


def test_every_driver_generation_lands_the_same_canonical_rows(tmp_path: Path) -> None:
    """One port state under three namings: the same metrics with the same values (the raw names differ). Broadcom's
    driver has no `rx_roce_only_*`: its RoCE receive volume comes from the PMA, good packets only."""
    seen = {}
    for generation, tree in TREES.items():
        _, df = poll(thor_host(tmp_path / generation, tree))
        seen[generation] = {key: value for key, (value, _) in canonical(df, "bnxt_re0/1").items()}
    common = set.intersection(*(set(rows) for rows in seen.values()))
    assert {(m, -1) for m in RDMA_METRICS} <= common
    for key in common - {("rdma_rx_bytes", -1), ("rdma_rx_packets", -1)}:
        assert len({rows[key] for rows in seen.values()}) == 1, key


def test_the_providers_roce_bytes_are_kept_and_the_pma_copy_lands_raw(tmp_path: Path) -> None:
    """bnxt_re gives its RoCE bytes twice: hw_counters rx_roce_only_bytes and the PMA's port_rcv_data (in 4-byte
    words). One series: the provider's; the IBTA copy is kept as `raw:` with its raw value."""
    tree = TREES["linux-6.17"]
    _, df = poll(thor_host(tmp_path / "root", tree))
    files = parse_sysfs_dump(tree.read_text()).files
    counters = {p.rpartition("/")[2]: int(v) for p, v in files.items() if "/ports/1/counters/" in p}
    got = canonical(df, "bnxt_re0/1")
    assert got[("rdma_rx_bytes", -1)] == (hw_counters(tree)["rx_roce_only_bytes"], "rx_roce_only_bytes")
    assert got[("rdma_tx_packets", -1)] == (hw_counters(tree)["tx_roce_only_pkts"], "tx_roce_only_pkts")
    raw = df.filter(pl.col("metric") == f"{UNKNOWN_PREFIX}port_rcv_data")
    assert raw["value"].to_list() == [counters["port_rcv_data"]]
    # what the provider does not give still comes from the IBTA counters
    assert got[("tx_discards", -1)] == (counters["port_xmit_discards"], "port_xmit_discards")
    _, strict = poll(thor_host(tmp_path / "strict", tree), keep_unknown=False)
    assert not strict.filter(pl.col("metric").str.starts_with(UNKNOWN_PREFIX)).height
    assert canonical(strict, "bnxt_re0/1") == got


def test_the_bnxt_en_netdev_lands_its_pfc_names(tmp_path: Path) -> None:
    """The real bnxt_en `ethtool -S`: PFC frames, pause durations and transitions per priority resolve."""
    _, df = poll(thor_host(tmp_path / "root", TREES["linux-6.17"]))
    stats = dict(re.findall(r"^\s+(\w+): (\d+)$", BNXT_EN.read_text(), re.MULTILINE))
    got = canonical(df, NETDEV)
    for p in range(8):
        for metric, raw in (
            ("pfc_rx_pause", f"rx_pfc_ena_frames_pri{p}"),
            ("pfc_tx_pause", f"tx_pfc_ena_frames_pri{p}"),
            ("pfc_rx_pause_duration_us", f"pfc_pri{p}_rx_duration_us"),
            ("pfc_tx_pause_duration_us", f"pfc_pri{p}_tx_duration_us"),
            ("pfc_rx_pause_transition", f"pfc_pri{p}_rx_transitions"),
        ):
            assert got[(metric, p)] == (int(stats[raw]), raw)
    assert got[("pfc_rx_pause_total", -1)] == (int(stats["rx_pfc_frames"]), "rx_pfc_frames")
    assert got[("port_speed_bps", -1)][0] == 400e9


def test_a_renamed_rdma_device_is_named_by_its_driver(tmp_path: Path) -> None:
    """udev's `rocep65s0f0np0` says nothing of the provider: the device's driver link (bnxt_en) does."""
    _, df = poll(thor_host(tmp_path / "root", TREES["linux-6.18"], rdma_name="rocep65s0f0np0"))
    assert canonical(df, "rocep65s0f0np0/1")[("cnp_sent", -1)][1] == "np_cnp_pkts"


def test_without_a_device_link_the_parent_directory_or_the_name_tells(tmp_path: Path) -> None:
    root = thor_host(tmp_path / "root", TREES["linux-6.17"], device_link=False)
    host = LiveHost(root)
    assert host.rdma_driver("bnxt_re0") == "bnxt_en"  # /sys/class/infiniband/bnxt_re0/../../driver
    assert host.rdma_driver("mlx5_9") == ""
    assert rdma_vendor("", "bnxt_re3") == "bnxt_rdma"
    assert rdma_vendor("", "mlx5_3") == "mlx5_rdma"
    assert rdma_vendor("mlx5_core", "rocep8s0f0") == "mlx5_rdma"
    assert rdma_vendor("ice", "irdma0") == "irdma"  # no catalog names: its counters land raw
    assert rdma_vendor("", "rocep8s0f0") == "unknown"
