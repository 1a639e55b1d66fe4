"""The NicHost seam. LiveHost: sysfs read from a directory tree laid out like the kernel's, and `ethtool -S` run
as a real process; FixtureHost: recorded sysfs and `ethtool -S` text.

The tree under tmp_path mirrors a ConnectX host: PCI functions under /sys/devices with their driver
link, netdev and RDMA device; /sys/class/{net,infiniband} are symlinks into them, as on a real host.
`ethtool` is either a small executable the test writes (it prints the real recorded output), or the
real binary where one is installed.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import polars as pl
import pytest
from sysfs_tree import link, write

from rocescope.collectors.nic.collector import NicCollector
from rocescope.collectors.nic.ethtool import parse_ethtool_stats
from rocescope.collectors.nic.host import FixtureHost, FixtureNic, LinkState, LiveHost
from rocescope.collectors.nic.sysfs import parse_sysfs_dump
from rocescope.errors import NicReadError

REAL = Path(__file__).resolve().parents[2] / "fixtures" / "realdata"
MLX5 = REAL / "01_ethtool" / "ethq_mlx5_core_cx4_ethtool-S.txt"
BNXT = REAL / "01_ethtool" / "ethq_bnxt_en_ethtool-S.txt"
DUMP = REAL / "02_rdma" / "procfs_fixture_mlx5_0_sysfs.txt"
TS = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


def pci_function(
    root: Path, bdf: str, driver: str, netdev: str | None, rdma: str | None, operstate: str, speed: int
) -> Path:
    """One PCI function: its driver link, netdev (with /sys/class/net link) and RDMA device (with its link)."""
    dev = root / "sys/devices/pci0000:3a/0000:3a:00.0" / bdf
    (root / "sys/bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
    link(dev / "driver", f"../../../../bus/pci/drivers/{driver}")
    if netdev is not None:
        write(dev / "net" / netdev / "operstate", operstate)
        write(dev / "net" / netdev / "speed", str(speed))
        write(dev / "net" / netdev / "dev_port", "0")
        link(dev / "net" / netdev / "device", f"../../../{bdf}")
        link(root / "sys/class/net" / netdev, f"../../devices/pci0000:3a/0000:3a:00.0/{bdf}/net/{netdev}")
    if rdma is not None:
        ib = dev / "infiniband" / rdma
        for path, value in parse_sysfs_dump(DUMP.read_text()).files.items():
            prefix = "/sys/class/infiniband/mlx5_0/"
            if path.startswith(prefix):
                write(ib / path[len(prefix) :], value)
        link(root / "sys/class/infiniband" / rdma, f"../../devices/pci0000:3a/0000:3a:00.0/{bdf}/infiniband/{rdma}")
    return dev


@pytest.fixture
def sysroot(tmp_path: Path) -> Path:
    """mlx5_3 <-> eth3 (named in gid_attrs/ndevs, with a VLAN on GID 2), mlx5_4 <-> eth4 (no usable ndevs:
    found through eth4/device/infiniband/, link down), mlx5_5 (InfiniBand, no netdev), and lo."""
    root = tmp_path / "root"
    d3 = pci_function(root, "0000:3b:00.0", "mlx5_core", "eth3", "mlx5_3", "up", 200000)
    ndevs = d3 / "infiniband/mlx5_3/ports/1/gid_attrs/ndevs"
    for index, name in enumerate(["eth3", "eth3", "eth3.100", "eth3.100", ""]):
        write(ndevs / str(index), name)
    d4 = pci_function(root, "0000:3b:00.1", "mlx5_core", "eth4", "mlx5_4", "down", -1)
    write(d4 / "infiniband/mlx5_4/ports/1/gid_attrs/ndevs/0", "")
    write(d4 / "infiniband/mlx5_4/ports/1/state", "1: DOWN")
    pci_function(root, "0000:5e:00.0", "mlx5_core", None, "mlx5_5", "up", 0)
    write(root / "sys/devices/virtual/net/lo/operstate", "unknown")
    link(root / "sys/class/net/lo", "../../devices/virtual/net/lo")
    write(root / "sys/devices/virtual/net/eth3.100/operstate", "up")
    link(root / "sys/class/net/eth3.100", "../../devices/virtual/net/eth3.100")
    return root


def fake_ethtool(tmp_path: Path, body: str) -> str:
    """An executable standing in for `ethtool` (a real process: nothing in the test is patched)."""
    exe = tmp_path / "bin" / "ethtool"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(exe)


def recording_ethtool(tmp_path: Path) -> str:
    return fake_ethtool(
        tmp_path,
        f"""[ "$1" = "-S" ] || exit 64
case "$2" in
  eth3) cat '{MLX5}' ;;
  eth4) cat '{BNXT}' ;;
  *) echo "Cannot get stats strings information: No such device" >&2; exit 96 ;;
esac
""",
    )


def test_sysfs_tree_maps_netdevs_and_rdma_devices(sysroot: Path, tmp_path: Path) -> None:
    host = LiveHost(sysroot, ethtool=recording_ethtool(tmp_path))
    assert host.rdma_devices() == ["mlx5_3", "mlx5_4", "mlx5_5"]
    assert host.rdma_ports("mlx5_3") == [1]
    assert host.netdev_of("mlx5_3", 1) == "eth3"  # GID 0's netdev, not the VLAN's
    assert host.netdev_of("mlx5_4", 1) == "eth4"  # through /sys/class/net/eth4/device/infiniband/mlx5_4
    assert host.netdev_of("mlx5_5", 1) is None
    assert host.netdevs() == ["eth3", "eth4"]  # the RoCE netdevs only: not lo, not the VLAN
    assert host.driver("eth3") == "mlx5_core" and host.driver("lo") == ""
    assert host.link("eth3") == LinkState(True, 200000)
    assert host.link("eth4") == LinkState(False, None)
    assert host.link("lo") == LinkState(None, None)
    assert host.link("eth7") == LinkState(None, None)
    assert host.rdma_link("mlx5_3", 1) == LinkState(True, 25000)
    assert host.rdma_link("mlx5_4", 1) == LinkState(False, 25000)
    assert host.rdma_port_counters("mlx5_3", 1, "hw_counters")["local_ack_timeout_err"] == "131"


def rdma_host() -> FixtureHost:
    return FixtureHost.from_nics([FixtureNic("eth3", "mlx5_core", None, "mlx5_3", 1, DUMP.read_text())])


def test_fixture_host_rdma_seam() -> None:
    host = rdma_host()
    assert host.rdma_devices() == ["mlx5_3"]
    assert host.rdma_ports("mlx5_3") == [1]
    assert host.netdev_of("mlx5_3", 1) == "eth3"
    assert host.rdma_link("mlx5_3", 1) == LinkState(True, 25000)
    counters = host.rdma_port_counters("mlx5_3", 1, "counters")
    hw = host.rdma_port_counters("mlx5_3", 1, "hw_counters")
    assert len(counters) == 21 and len(hw) == 25
    assert counters["port_xmit_data"] == "2880761508848" and hw["out_of_sequence"] == "1"
    assert host.rdma_port_counters("mlx5_9", 1, "counters") == {}
    with pytest.raises(ValueError, match="unknown RDMA counter group"):
        host.rdma_port_counters("mlx5_3", 1, "../../../etc")


def test_collector_over_the_tree_and_a_real_process(sysroot: Path, tmp_path: Path) -> None:
    collector = NicCollector(LiveHost(sysroot, ethtool=recording_ethtool(tmp_path)), "gpu-b02")
    df = pl.from_arrow(collector.poll(TS).data)
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(pl.col("port", "metric", "source", "raw_name").cast(pl.String))
    assert set(df["port"]) == {"eth3", "eth4", "mlx5_3/1", "mlx5_4/1", "mlx5_5/1"}
    assert collector.port_map == {"mlx5_3/1": "eth3", "mlx5_4/1": "eth4", "mlx5_5/1": None}

    def one(port: str, metric: str) -> float:
        hit = df.filter((pl.col("port") == port) & (pl.col("metric") == metric) & (pl.col("priority") == -1))
        assert hit.height == 1
        return float(hit["value"][0])

    assert one("eth3", "rx_bytes") == 2202570777997  # mlx5_core (driver link) -> mlx5 names
    # eth4's driver link says mlx5_core while its (stand-in) ethtool prints bnxt_en's names: the vendor
    # comes from the driver, so they do not resolve, and are kept raw (next test: the bnxt_en link)
    assert one("eth4", "raw:rx_total_ring_discards") == 655430134
    assert one("eth3", "port_speed_bps") == 200e9 and one("eth4", "oper_up") == 0
    assert one("mlx5_4/1", "oper_up") == 0 and one("mlx5_3/1", "rdma_tx_bytes") == 2880761508848 * 4
    assert collector.metrics.value("rocescope_nic_poll_failures_total") == 0


def test_rx_out_of_buffer_for_bnxt_needs_the_bnxt_driver(sysroot: Path, tmp_path: Path) -> None:
    """The vendor comes from the driver link: relink eth4 to bnxt_en and its names resolve as bnxt."""
    dev = sysroot / "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.1"
    (sysroot / "sys/bus/pci/drivers/bnxt_en").mkdir()
    (dev / "driver").unlink()
    (dev / "driver").symlink_to("../../../../bus/pci/drivers/bnxt_en")
    host = LiveHost(sysroot, ethtool=recording_ethtool(tmp_path))
    assert host.driver("eth4") == "bnxt_en"
    df = pl.from_arrow(NicCollector(host, "h").poll(TS).data)
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(pl.col("port", "metric", "raw_name").cast(pl.String))
    hit = df.filter((pl.col("port") == "eth4") & (pl.col("metric") == "rx_out_of_buffer"))
    assert hit["raw_name"].to_list() == ["rx_total_ring_discards"] and hit["value"].to_list() == [655430134.0]


def test_ethtool_failures_are_per_netdev(sysroot: Path, tmp_path: Path) -> None:
    missing = LiveHost(sysroot, ethtool=str(tmp_path / "no-such-ethtool"))
    with pytest.raises(NicReadError, match="not found"):
        missing.ethtool_stats("eth3")
    failing = LiveHost(sysroot, ethtool=recording_ethtool(tmp_path))
    with pytest.raises(NicReadError, match=r"exited 96: Cannot get stats strings information: No such device"):
        failing.ethtool_stats("eth7")
    with pytest.raises(NicReadError, match="not a netdev name"):
        failing.ethtool_stats("-i")
    slow = LiveHost(sysroot, ethtool=fake_ethtool(tmp_path, "exec sleep 10\n"), timeout_s=0.3)
    with pytest.raises(NicReadError, match=r"timed out after 0.3 s"):
        slow.ethtool_stats("eth3")
    # in a poll: the failing netdevs are counted, the RDMA ports are still read
    collector = NicCollector(missing, "h")
    df = pl.from_arrow(collector.poll(TS).data)
    assert isinstance(df, pl.DataFrame)
    assert set(df["port"].cast(pl.String)) == {"mlx5_3/1", "mlx5_4/1", "mlx5_5/1"}
    assert collector.metrics.value("rocescope_nic_poll_failures_total", target="eth3") == 1
    assert collector.metrics.value("rocescope_nic_poll_failures_total", target="eth4") == 1


def real_netdev() -> str | None:
    """A netdev of this machine backed by a device (so `ethtool -S` has statistics), if any."""
    net = Path("/sys/class/net")
    if not net.is_dir():
        return None
    return next((p.name for p in sorted(net.iterdir()) if (p / "device").exists()), None)


@pytest.mark.skipif(
    shutil.which("ethtool") is None,
    reason="the `ethtool` binary is not installed (Debian package `ethtool`): LiveHost's run of the real "
    "`ethtool -S` is not exercised here (the same code path runs against a stand-in executable above)",
)
def test_real_ethtool_on_this_machine() -> None:
    netdev = real_netdev()
    if netdev is None:
        pytest.skip("no device-backed netdev under /sys/class/net to run `ethtool -S` on")
    host = LiveHost("/", netdevs=[netdev])
    text = host.ethtool_stats(netdev)
    stats = parse_ethtool_stats(text)
    assert stats.malformed == 0 and stats.values
    direct = subprocess.run(["ethtool", "-S", netdev], capture_output=True, text=True, check=True, timeout=10)
    assert [n for n, _ in parse_ethtool_stats(direct.stdout).values] == [n for n, _ in stats.values]
    collector = NicCollector(host, os.uname().nodename)
    df = pl.from_arrow(collector.poll().data)
    assert isinstance(df, pl.DataFrame)
    df = df.with_columns(pl.col("port", "source", "raw_name").cast(pl.String))
    mine = df.filter(pl.col("port") == netdev)
    assert set(mine["source"]) == {"ethtool"}
    assert {n for n, _ in stats.values} <= set(mine["raw_name"])
    assert collector.metrics.value("rocescope_nic_poll_failures_total") == 0
    # lo has no statistics: ethtool exits non-zero and says why
    if Path("/sys/class/net/lo").exists():
        with pytest.raises(NicReadError, match="no stats available"):
            host.ethtool_stats("lo")


def test_cli_once_prints_the_rows_and_each_target(sysroot: Path, tmp_path: Path) -> None:
    """`collect nic --once` over the tree (sysfs_root from the config): the RDMA counters read fine, and
    `ethtool -S` of netdevs this machine does not have fails per netdev: DOWN lines, exit 1, nothing shipped."""
    from typer.testing import CliRunner

    from rocescope.cli import app

    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\ncollectors:\n  nic:\n    sysfs_root: {sysroot}\n")
    result = CliRunner().invoke(app, ["--config", str(cfg), "collect", "nic", "--once", "--hostname", "gpu-b02"])
    out = " ".join(result.output.split())  # the console wraps long lines
    assert "counters:" in out and "1 polls of 3 RDMA ports" in out
    assert re.search(r"mlx5_3/1: up, 1 polls \(\d+\.\d+ s last\), 47 values \(19 unknown, 0 malformed\), 0 failed", out)
    assert re.search(r"eth3: DOWN, 0 polls .*?, 1 failed; last error: \S", out), out  # ethtool missing or failing
    assert result.exit_code == 1
    assert not (tmp_path / "data").exists()  # --once opened no store
