"""Startup benchmark: how long the installed `rocescope` command takes to answer `--help` and `findings`.

Each run is a fresh process of the entry point on PATH (or next to this Python), as a user types it; the
figure is the median wall time of several runs (the first run is a warm-up and not counted: it fills the
OS page cache and Python's bytecode cache). `findings` runs against an embedded store in a temporary
directory, migrated beforehand (not timed), so what is measured is imports, opening the store and one query.
The issue's target: `rocescope --help` under 0.5 s, `findings` well under a second.

    python bench/startup.py [--runs N] [--full]

Headline lines: `cli_help_startup: N ms`, `cli_findings_startup: N ms` (median wall time; each line also gives the
median CPU time, user + system, which a loaded machine disturbs less), and the load average while measuring (wall
times are only comparable at a similar load).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


def entry_point() -> str:
    """The installed `rocescope` script: next to this interpreter (a venv), else on PATH."""
    beside = Path(sys.executable).parent / "rocescope"
    found = str(beside) if beside.exists() else shutil.which("rocescope")
    if found is None:
        sys.exit("no `rocescope` entry point installed (pip install -e .)")
    return found


def run_ms(argv: Sequence[str], env: Mapping[str, str], cwd: Path) -> tuple[float, float]:
    """One run's wall time and CPU time (user + system); a failing run stops the benchmark (a fast error is not a
    startup figure). The CPU time is the figure that a loaded machine disturbs least."""
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    wall = (time.perf_counter() - start) * 1000
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode(errors='replace')[-500:]}")
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime + cpu_after.ru_stime - cpu_before.ru_stime) * 1000
    return wall, cpu


def measure(argv: Sequence[str], runs: int, env: Mapping[str, str], cwd: Path) -> tuple[list[float], list[float]]:
    """Wall and CPU times of `runs` runs after one warm-up."""
    run_ms(argv, env, cwd)
    times = [run_ms(argv, env, cwd) for _ in range(runs)]
    return [wall for wall, _ in times], [cpu for _, cpu in times]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per command (default 5)")
    ap.add_argument("--full", action="store_true", help="21 timed runs per command")
    args = ap.parse_args()
    runs = 21 if args.full else args.runs
    command = entry_point()
    with tempfile.TemporaryDirectory(prefix="rocescope-bench-startup-") as tmp:
        folder = Path(tmp)
        config = folder / "rocescope.yaml"
        config.write_text(f"store:\n  path: {folder / 'data'}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ROCESCOPE_")}
        env["ROCESCOPE_CONFIG"] = str(config)
        run_ms([command, "migrate"], env, folder)  # the store exists before findings is timed
        load_before = os.getloadavg()
        figures = {
            "cli_help_startup": measure([command, "--help"], runs, env, folder),
            "cli_findings_startup": measure([command, "findings"], runs, env, folder),
        }
        load_after = os.getloadavg()
    for name, (walls, cpus) in figures.items():
        spread = ", ".join(f"{t:.0f}" for t in sorted(walls))
        print(
            f"{name}: {statistics.median(walls):.0f} ms  (median wall of {runs}: {spread} ms; "
            f"median CPU {statistics.median(cpus):.0f} ms)"
        )
    print(f"load_average_1m: {load_before[0]:.2f} -> {load_after[0]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
