"""Import benchmark: `rocescope import --kind gnmic` of a gnmic `--format event` capture, end to end into the
embedded store (the rows and their 1-minute rollup), in a process of its own whose peak RSS is measured.

The capture is what gnmic writes for a fabric's switches polled with SAMPLE subscriptions: one event per
interface (OpenConfig interface and Ethernet counters, list keys in `tags`) and per queue (OpenConfig QoS
queue counters and the queue's peak length) per poll, NDJSON, with a malformed line now and then (a cut
write). Small by default (seconds); `--full` is a 128x8 fabric (24 switches of 64 ports, 8 queues each) read
every 10 s for 10 minutes: about 3.5 M values, the size of a real capture that took 90-130 s to import.

    python bench/import.py [--full] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

T0 = 1_764_000_000_000_000_000
IFACE = (
    "/interfaces/interface/state/counters/in-octets",
    "/interfaces/interface/state/counters/out-octets",
    "/interfaces/interface/state/counters/in-pkts",
    "/interfaces/interface/state/counters/out-pkts",
    "/interfaces/interface/state/counters/in-discards",
    "/interfaces/interface/state/counters/out-discards",
    "/interfaces/interface/state/counters/in-errors",
    "/interfaces/interface/state/counters/in-fcs-errors",
    "/interfaces/interface/ethernet/state/counters/in-mac-pause-frames",
    "/interfaces/interface/ethernet/state/counters/out-mac-pause-frames",
)
QUEUE = (
    "/qos/interfaces/interface/output/queues/queue/state/transmit-octets",
    "/qos/interfaces/interface/output/queues/queue/state/transmit-pkts",
    "/qos/interfaces/interface/output/queues/queue/state/dropped-pkts",
    "/qos/interfaces/interface/output/queues/queue/state/max-queue-len",
)
#: a cut line every this many events (a writer killed mid-line, a disk that filled)
DAMAGE_EVERY = 10_000


def write_capture(path: Path, switches: int, ports: int, queues: int, polls: int, every_s: float) -> int:
    """The capture; returns the values it holds (malformed lines hold none)."""
    values, events = 0, 0
    with path.open("w") as out:
        for k in range(polls):
            for s in range(switches):
                source = f"sw-{s:02d}:57400"
                ts = T0 + int((k * every_s + s * 0.013) * 1e9)
                for p in range(ports):
                    port = f"Ethernet{4 * p}"
                    base = (k + 1) * (p + 1) * 1000
                    tags = {"interface_name": port, "source": source, "subscription-name": "fabric"}
                    values_of = {x: base + i for i, x in enumerate(IFACE)}
                    lines = [{"name": "fabric", "timestamp": ts, "tags": tags, "values": values_of}]
                    for q in range(queues):
                        tags = {"interface_interface-id": port, "queue_name": str(q), "source": source,
                                "subscription-name": "fabric"}  # fmt: skip
                        lines.append({"name": "fabric", "timestamp": ts, "tags": tags,
                                      "values": {x: base + q + i for i, x in enumerate(QUEUE)}})  # fmt: skip
                    for line in lines:
                        events += 1
                        text = json.dumps(line, separators=(",", ":"))
                        if events % DAMAGE_EVERY == 0:
                            out.write(text[: len(text) // 2] + "\n")
                            continue
                        out.write(text + "\n")
                        values += len(line["values"])
    return values


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="a 128x8 fabric's 10-minute capture (~3.5 M values)")
    ap.add_argument("--keep", type=Path, help="write the capture and the store here (kept)")
    args = ap.parse_args()
    switches, ports, queues, polls = (24, 64, 8, 60) if args.full else (4, 32, 8, 12)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        capture = root / "gnmic-events.json"
        t0 = time.perf_counter()
        values = write_capture(capture, switches, ports, queues, polls, 10.0)
        mb = capture.stat().st_size / 1e6
        print(f"capture: {values:,} values, {mb:.0f} MB, written in {time.perf_counter() - t0:.1f} s", flush=True)
        cfg = root / "rocescope.yaml"
        cfg.write_text(f"store:\n  path: {root / 'store'}\n  ttl_days: 0\n  rollup_ttl_days: 0\n")
        cli = str(Path(sys.executable).with_name("rocescope"))
        cmd = [cli, "--config", str(cfg), "import", "--kind", "gnmic", "--json", "--again", str(capture)]
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        seconds = time.perf_counter() - t0
        if done.returncode != 0:
            sys.exit(f"import failed:\n{done.stdout}\n{done.stderr}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        landed = int(summary["landed"])
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        skipped = summary["files"][0]["skipped"]
        print(f"landed {landed:,} rows of {values:,} values in {seconds:.1f} s; skipped: {skipped}")
        if landed != values:
            sys.exit(f"landed {landed} rows, the capture holds {values} values")
        print(f"import_gnmic: {values / seconds:.0f} values/s")
        print(f"import_gnmic_rss: {rss_mb:.0f} MB")


if __name__ == "__main__":
    main()
