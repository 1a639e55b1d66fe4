"""Simulator benchmark: the default demo scenario (32 hosts x 4 rails, 2 jobs, 10 minutes of fabric time
with incidents; target <= 60 s wall), simulation only (a counters snapshot and the packet mirror's
`packets` rows per 1 s poll, dropped), then
the same run landing everything in an embedded chdb store through the pipeline (`run_scenario`).
With `--full`, a 128 hosts x 8 rails fabric (4 jobs, an incast) for `--full-seconds` of fabric time.

    python bench/sim.py [--duration S] [--no-store] [--full] [--full-seconds S]

The last lines are the headline: `sim_demo_wall: X s`, `sim_demo_speed: Y sim_s/wall_s` and, with
`--full`, `sim_128x8_speed: Z sim_s/wall_s`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rocescope.config import Settings, StoreConfig, TransportConfig
from rocescope.sim.incidents import build_world
from rocescope.sim.mirror import CNP, PacketMirror, Sampled
from rocescope.sim.run import run_scenario, simulate
from rocescope.sim.scenario import Scenario, load_scenario


def full_fabric(seconds: float) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "bench-128x8",
            "seed": 7,
            "duration": seconds,
            "fabric": {
                "hosts": 128,
                "rails": 8,
                "spines": 4,
                "host_ports_per_leaf": 32,
                "uplinks_per_spine": 8,
            },
            "jobs": [
                {"name": "llm-a", "namespace": "team-a", "hosts": 64},
                {"name": "llm-b", "namespace": "team-b", "hosts": 32},
                {"name": "llm-c", "namespace": "team-c", "hosts": 16},
                {"name": "llm-d", "namespace": "team-d", "hosts": 16},
            ],
            "incidents": [
                {"kind": "incast", "start": seconds / 3, "end": 2 * seconds / 3, "receiver": "gpu-128", "senders": 8}
            ],
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=None, help="fabric seconds of the demo (default: all 600)")
    ap.add_argument("--no-store", action="store_true", help="skip the run that lands in chdb")
    ap.add_argument("--full", action="store_true", help="also run 128 hosts x 8 rails")
    ap.add_argument("--full-seconds", type=float, default=60.0)
    args = ap.parse_args()

    demo = load_scenario("demo")
    world = build_world(demo, args.duration)
    rows = [0, 0, 0]
    mirror_s = [0.0]

    def packets(_ts: object, sampled: Sampled, mirror: PacketMirror) -> None:
        t = time.perf_counter()
        rows[1] += mirror.table(sampled).num_rows
        rows[2] += int((sampled.opcode == CNP).sum())
        mirror_s[0] += time.perf_counter() - t

    collectives = [0]
    wall, polls = simulate(
        world,
        lambda _ts, t: rows.__setitem__(0, rows[0] + t.num_rows),
        on_packets=packets,
        on_collectives=lambda records: collectives.__setitem__(0, collectives[0] + len(records)),
    )
    sim_s = world.engine.now
    print(f"demo: {sim_s:.0f} s fabric time, {polls} polls, {rows[0]} counter rows, steps {world.engine.step_stats()}")
    print(f"demo collectives: {collectives[0]} Inspector records (one per rank and training step)")
    print(f"demo packet mirror: {rows[1]} packets ({rows[2]} CNPs), rows built in {mirror_s[0]:.2f} s")

    if not args.no_store:
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(store=StoreConfig(path=Path(tmp) / "chdb"), transport=TransportConfig(kind="inprocess"))
            s = run_scenario(settings, demo, args.duration, None, progress=False)
        print(f"sim_demo_landed_wall: {s.wall_seconds:.1f} s ({s.rows_published} rows into chdb)")
        print(f"sim_demo_landed_speed: {s.speed:.1f} sim_s/wall_s")

    print(f"sim_demo_wall: {wall:.1f} s")
    print(f"sim_demo_speed: {sim_s / wall:.1f} sim_s/wall_s")
    if args.full:
        big = build_world(full_fabric(args.full_seconds))
        big_wall, _ = simulate(big)
        print(f"sim_128x8_speed: {big.engine.now / big_wall:.2f} sim_s/wall_s")


if __name__ == "__main__":
    main()
