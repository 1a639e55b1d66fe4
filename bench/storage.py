"""ClickHouse storage of `counters`: compressed bytes per row, and what that makes per day per 1000 ports.

Fills an embedded store with the simulator's demo scenario (120 s of fabric time, the simulator's polls
of every switch port and NIC), forces the parts to merge (OPTIMIZE FINAL, as they would be after a day),
reads `bytes_on_disk / rows` of the active parts of `counters` from `system.parts`, and scales by the
rows per port per second the simulator emitted:

    storage/day/1000 ports = bytes_per_row x rows_per_port_per_s x 86,400 x 1000

A "port" is a distinct (device, port) series of `counters`. The demo samples at the simulator's poll
rate with its metric set; a fabric polled less often, or with fewer metrics per port, scales linearly.

    python bench/storage.py [--duration 120]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from rocescope.config import Settings, StoreConfig
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.run import run_scenario


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--duration", type=float, default=120.0, help="Fabric seconds to simulate.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store"
        summary = run_scenario(Settings(store=StoreConfig(path=path, ttl_days=0)), "demo", duration_s=args.duration)
        store = ChdbStore(path)
        try:
            store.command("OPTIMIZE TABLE counters FINAL")
            parts = store.query_arrow(
                "SELECT sum(rows) AS rows, sum(bytes_on_disk) AS disk, sum(data_uncompressed_bytes) AS raw "
                "FROM system.parts WHERE database = {db:String} AND table = 'counters' AND active",
                {"db": store.database},
            ).to_pylist()[0]
            shape = store.query_arrow(
                "SELECT uniqExact(device, port) AS ports, count() AS n, "
                "dateDiff('nanosecond', min(ts), max(ts)) / 1e9 AS span FROM counters"
            ).to_pylist()[0]
        finally:
            store.close()
    rows, disk = int(parts["rows"]), int(parts["disk"])
    span = max(float(shape["span"]), summary.sim_seconds)
    bytes_per_row = disk / rows
    rows_per_port_s = int(shape["n"]) / int(shape["ports"]) / span
    per_day_gb = bytes_per_row * rows_per_port_s * 86_400 * 1000 / 1e9
    print(f"counters: {rows:,} rows, {disk:,} bytes on disk ({int(parts['raw']):,} uncompressed)")
    print(f"bytes_per_row: {bytes_per_row:.2f}")
    print(f"ports: {int(shape['ports'])}, rows_per_port_per_s: {rows_per_port_s:.2f} over {span:.0f} s")
    print(f"storage_per_day_per_1000_ports: {per_day_gb:.1f} GB")


if __name__ == "__main__":
    main()
