"""Analysis benchmark: the full detector suite over a window of 1 s telemetry, against one plain scan.

The telemetry comes from the simulator's fast path through the pipeline into an embedded chdb store:
by default the demo fabric (32 hosts x 4 rails) for `--seconds` (300) of fabric time; with `--full`,
a 128 hosts x 8 rails fabric for one hour (the issue's target: <= 60 s for the whole suite). Landing
the data is not timed; the analysis and the scan are, in the same process on the same store.

    python bench/analyze.py [--seconds S] [--full] [--keep DIR]

Headline lines: `analyze_<fabric>: X s`, `plain_scan_<fabric>: Y s`, `analyze_vs_scan: Z x`,
`analyzed_values: N values`, `coverage_share_<fabric>: P %` (the coverage map's part of the analysis).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze
from rocescope.config import Settings, StoreConfig
from rocescope.pipeline.migrations import migrate
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.run import run_scenario
from rocescope.sim.scenario import Scenario, load_scenario


def big_fabric(seconds: float) -> Scenario:
    """128 hosts x 8 rails, four jobs, one incident of each switch-visible kind spread over the run."""
    at = [seconds * k / 6 for k in range(1, 6)]
    incidents: list[dict[str, Any]] = [
        {"kind": "incast", "start": at[0], "end": at[0] + 60, "receiver": "gpu-128", "senders": 8, "job": "ckpt"},
        {"kind": "pfc_storm", "start": at[1], "end": at[1] + 30, "device": "gpu-010", "port": "eth1"},
        {"kind": "microburst", "start": at[2], "end": at[2] + 60, "receiver": "gpu-064", "rail": 2, "senders": 6},
        {"kind": "link_flap", "start": at[3], "end": at[3] + 60, "device": "leaf-r3-01", "port": "Ethernet128"},
        # CNPs are lost only where there are CNPs: gpu-001 sends into a second incast at gpu-128 meanwhile
        {"kind": "incast", "start": at[4], "end": at[4] + 60, "receiver": "gpu-128", "senders": 8, "job": "ckpt2"},
        {"kind": "cnp_loss", "start": at[4], "end": at[4] + 60, "host": "gpu-001", "rail": 0},
    ]
    return Scenario.model_validate(
        {
            "name": "bench-128x8",
            "seed": 7,
            "duration": seconds,
            "fabric": {"hosts": 128, "rails": 8, "spines": 4, "host_ports_per_leaf": 32, "uplinks_per_spine": 8},
            "jobs": [
                {"name": "llm-a", "namespace": "team-a", "hosts": 64},
                {"name": "llm-b", "namespace": "team-b", "hosts": 32},
                {"name": "llm-c", "namespace": "team-c", "hosts": 16},
                {"name": "llm-d", "namespace": "team-d", "hosts": 16},
            ],
            "incidents": [i for i in incidents if i["start"] + 5 < seconds],
        }
    )


def land(path: Path, label: str, scenario: Scenario, seconds: float) -> None:
    """Simulate the run into the store at `path`; its summary goes to `<label>-summary.json` beside it."""
    settings = Settings(store=StoreConfig(path=path, database=f"bench_{label}"))
    t0 = time.perf_counter()
    summary = run_scenario(settings, scenario, seconds, progress=True, counterfactuals=False)
    print(f"landed {summary.rows['counters']} counter rows in {time.perf_counter() - t0:.1f} s", flush=True)
    (path / f"{label}-summary.json").write_text(json.dumps(summary.as_dict()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=300.0, help="fabric seconds of the default (demo) run")
    ap.add_argument("--full", action="store_true", help="128 hosts x 8 rails for one hour (slow to land)")
    ap.add_argument("--full-seconds", type=float, default=3600.0)
    ap.add_argument(
        "--keep",
        type=Path,
        default=None,
        help="keep the store here; a later run with the same --keep "
        "re-uses the landed data instead of simulating again",
    )
    args = ap.parse_args()

    scenario = big_fabric(args.full_seconds) if args.full else load_scenario("demo")
    seconds = args.full_seconds if args.full else args.seconds
    label = "128x8" if args.full else "32x4"
    with tempfile.TemporaryDirectory(prefix="rocescope-bench-") as tmp:
        path = args.keep or Path(tmp) / "chdb"
        landed = path / f"{label}-summary.json"
        if landed.exists():
            done = json.loads(landed.read_text())
            print(f"re-using {done['rows']['counters']} counter rows landed in {path}")
        else:
            # in a process of its own: the embedded engine keeps the memory a landing used (the full hour's
            # 568 M rows left 12 GB resident, and the analysis after it in the same process ran out of 24 GB)
            lander = multiprocessing.get_context("spawn").Process(target=land, args=(path, label, scenario, seconds))
            lander.start()
            lander.join()
            if lander.exitcode != 0 or not landed.exists():
                raise SystemExit(f"landing the run failed (exit code {lander.exitcode})")
            done = json.loads(landed.read_text())
        start, end = dt.datetime.fromisoformat(done["start"]), dt.datetime.fromisoformat(done["end"])
        window = Window(start, end + dt.timedelta(seconds=1))
        with ChdbStore(path, f"bench_{label}") as store:
            for action in migrate(store):  # a store kept by an earlier version is brought up to date
                print(action)
            store.command("OPTIMIZE TABLE counters FINAL")  # a settled table, as an hour-old window is
            t = time.perf_counter()
            scan = store.query_arrow(
                "SELECT count() AS n, sum(value) AS s FROM counters "
                "WHERE ts >= {a:DateTime64(9, 'UTC')} AND ts < {b:DateTime64(9, 'UTC')}",
                {"a": window.start, "b": window.end},
            )
            scan_s = time.perf_counter() - t
            values = int(scan.column("n")[0].as_py())
            t = time.perf_counter()
            result = analyze(store, window, write=True, progress=True)
            analyze_s = time.perf_counter() - t
    for name, s in sorted(result.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {s:.2f} s")
    for f in result.findings:
        print(f"  finding: {f.summary}")
    if result.failed:
        print(f"  FAILED detectors: {result.failed}")
    print(f"analyzed_values: {values} values")
    print(f"findings: {len(result.findings)} findings")
    print(f"plain_scan_{label}: {scan_s:.2f} s")
    print(f"analyze_{label}: {analyze_s:.2f} s")
    print(f"analyze_vs_scan: {analyze_s / scan_s:.1f} x")
    # what the coverage map adds to an analysis (issue: <= 10% on a 128x8 fabric's hour)
    print(f"coverage_share_{label}: {100 * result.seconds.get('coverage', 0.0) / analyze_s:.1f} %")


if __name__ == "__main__":
    main()
