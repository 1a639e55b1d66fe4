"""Full-demo benchmark: `rocescope demo` as a user runs it, minus the printing: the default scenario served
over gNMI/SNMP/host views and gathered by the real collectors in lockstep (`sim.serve.serve_scenario`),
landed in a fresh embedded chdb store, then analyzed (`analysis.run.analyze` over the run's window).
Target: <= 180 s on 2 cores.

    python bench/demo.py [--duration S] [--scenario NAME]

Headline: `demo_full_wall: X s`, with the parts (`demo_serve_wall`, `demo_analyze_wall`) and the
driver's breakdown above it.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze
from rocescope.config import Settings, StoreConfig, TransportConfig
from rocescope.pipeline.store import open_store
from rocescope.sim.serve import serve_scenario


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default="demo")
    ap.add_argument("--duration", type=float, default=None, help="fabric seconds (default: the scenario's)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(store=StoreConfig(path=Path(tmp) / "chdb"), transport=TransportConfig(kind="inprocess"))
        t0 = time.perf_counter()
        summary, stats = serve_scenario(settings, args.scenario, args.duration)
        t1 = time.perf_counter()
        with open_store(settings.store) as store:
            result = analyze(store, Window(summary.start, summary.end), settings.analysis)
        t2 = time.perf_counter()
    print(f"rows: {summary.rows}; gNMI values sent/decoded {stats.gnmi_values_sent}/{stats.gnmi_values_decoded}")
    print("driver seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in stats.seconds.items()))
    print(f"findings: {len(result.findings)} ({', '.join(sorted({f.kind for f in result.findings}))})")
    print(f"demo_serve_wall: {t1 - t0:.1f} s ({summary.sim_seconds / (t1 - t0):.1f} sim_s/wall_s)")
    print(f"demo_analyze_wall: {t2 - t1:.1f} s")
    print(f"demo_full_wall: {t2 - t0:.1f} s")


if __name__ == "__main__":
    main()
