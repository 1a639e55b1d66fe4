"""bench/snmp.py still runs and ends with its two headline lines (a tiny run against snmpsim)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[3] / "bench" / "snmp.py"


def test_snmp_bench_smoke() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--agent", "snmpsim", "--devices", "2", "--ports", "4", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert "2 up" in lines[0]
    assert re.fullmatch(r"snmp_poll_cpu_per_device: \d+\.\d ms", lines[-2]), lines[-2]
    assert re.fullmatch(r"snmp_core_share_100x64_10s: \d+ %", lines[-1]), lines[-1]
