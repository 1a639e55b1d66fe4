"""NIC collector benchmark: CPU cost of one poll of a 16-NIC GPU host (target: < 5% of a core at 1 s).

The host is a FixtureHost with 16 copies of the real mlx5 `ethtool -S` output (751 lines each, of
which ~600 per-queue lines are skipped) and 16 RDMA devices built from the real mlx5_0 sysfs dump
(counters + hw_counters), each mapped to its netdev; so a poll parses, normalizes and builds the
Arrow batch exactly as on a live host, minus the reads. Two more figures bound what the live reads
add: the same sysfs laid out as files on disk and read by LiveHost (real open/read per counter), and,
where an `ethtool` binary exists, the CPU of spawning `ethtool -S` once per NIC (parent + child).

    python bench/nic.py [--seconds S] [--nics N]

The last two lines are the headline: `nic_poll_cpu: X ms` (CPU per poll, fixture host) and
`nic_poll_core_share_1s: Y %` (that poll every second, as a share of one core).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rocescope.collectors.nic.collector import NicCollector
from rocescope.collectors.nic.host import NET, FixtureHost, FixtureNic, LiveHost, NicHost
from rocescope.collectors.nic.sysfs import MemorySysfs

REALDATA = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "realdata"
MLX5_ETHTOOL = REALDATA / "01_ethtool" / "ethq_mlx5_core_cx4_ethtool-S.txt"
MLX5_SYSFS = REALDATA / "02_rdma" / "procfs_fixture_mlx5_0_sysfs.txt"


def fixture_host(nics: int) -> FixtureHost:
    ethtool, sysfs = MLX5_ETHTOOL.read_text(), MLX5_SYSFS.read_text()
    return FixtureHost.from_nics(
        FixtureNic(f"eth{i}", "mlx5_core", ethtool, f"mlx5_{i}", 1, sysfs, speed_mbps=400_000) for i in range(nics)
    )


def write_tree(host: FixtureHost, root: Path) -> None:
    """The fixture host's sysfs as real files and symlinks under `root`."""
    fs = host.sysfs
    assert isinstance(fs, MemorySysfs)
    for path, value in fs.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(value + "\n")
    for path, dest in fs.links.items():
        link = root / path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(dest)


class DiskHost(LiveHost):
    """LiveHost reads (sysfs files on disk) with the recorded ethtool text: measures the sysfs reads."""

    def __init__(self, root: Path, ethtool: dict[str, str | None]):
        super().__init__(root)
        self.texts = ethtool

    def ethtool_stats(self, netdev: str) -> str:
        return self.texts[netdev] or ""


def measure(host: NicHost, seconds: float) -> tuple[float, float, int, int]:
    """(CPU ms per poll, wall ms per poll, rows per poll, polls)."""
    collector = NicCollector(host, "gpu-bench-01", rediscover_s=3600)
    for _ in range(3):
        batch = collector.poll()
    polls = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds or polls < 5:
        batch = collector.poll()
        polls += 1
    cpu = (time.process_time() - cpu0) / polls * 1000
    wall = (time.perf_counter() - wall0) / polls * 1000
    return cpu, wall, batch.num_rows, polls


def ethtool_spawn_ms(netdev: str, runs: int = 50) -> float | None:
    """CPU (this process + children) of one `ethtool -S` call; None without an ethtool binary."""
    exe = shutil.which("ethtool")
    if exe is None or not os.path.exists(f"{NET}/{netdev}"):
        return None
    before = os.times()
    for _ in range(runs):
        subprocess.run([exe, "-S", netdev], capture_output=True, check=False, timeout=5)
    after = os.times()
    used = sum(after[i] - before[i] for i in range(4))  # user, system, children user, children system
    return used / runs * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=3.0, help="measuring time per variant (default 3)")
    ap.add_argument("--nics", type=int, default=16, help="NICs (netdev + RDMA device) on the host (default 16)")
    args = ap.parse_args()

    host = fixture_host(args.nics)
    print(f"host: {args.nics} x mlx5 (ethtool -S: {len(MLX5_ETHTOOL.read_text().splitlines())} lines each) + RDMA port")
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(host, Path(tmp))
        disk = DiskHost(Path(tmp), host.ethtool)
        d_cpu, _, _, d_polls = measure(disk, args.seconds)
    print(f"sysfs on disk (LiveHost reads, recorded ethtool text): {d_cpu:.2f} ms CPU/poll, {d_polls} polls")
    spawn = ethtool_spawn_ms("eth0")
    if spawn is None:
        print("ethtool subprocess: not measured (no `ethtool` binary or no eth0)")
    else:
        print(
            f"ethtool subprocess (`ethtool -S eth0`, parent+child CPU): {spawn:.2f} ms per NIC, "
            f"{spawn * args.nics:.1f} ms per {args.nics}-NIC poll on top"
        )
    cpu, wall, rows, polls = measure(host, args.seconds)
    print(f"fixture host: {rows} rows/poll, {wall:.2f} ms wall/poll, {polls} polls")
    print(f"nic_poll_cpu: {cpu:.2f} ms")
    print(f"nic_poll_core_share_1s: {cpu / 1000 * 100:.2f} %")


if __name__ == "__main__":
    main()
