"""Ingest of NCCL collective timings: Inspector JSON files -> `rocescope collect nccl` -> embedded chdb.

A directory holds one `<host>-pid<pid>.log` per rank (Inspector's JSON mode, written as the plugin writes
it: `collectors/nccl/write.py`), 8 ranks per host, a realistic mix of AllReduce / AllGather /
ReduceScatter / Send / Recv, one record in ten verbose (event_trace_ts, two to four kernel channels). The
timed part is what the collector does on a host: read the files (`tail.py`), parse them (pyarrow's JSON
reader), build `collectives` batches, publish them to the in-process bus, and the sink thread landing
them in embedded chdb (the embedded default of `rocescope collect nccl`), until every row is in the table.
Small by default (seconds); --full for a larger run.

    python bench/collectives.py [--full] [--records N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from rocescope.collectors.nccl.collector import NcclCollector
from rocescope.collectors.nccl.tail import InspectorDir
from rocescope.collectors.nccl.write import InspectorRecord, file_name, json_line
from rocescope.config import Settings, StoreConfig
from rocescope.pipeline.runner import publishing
from rocescope.pipeline.store import ChdbStore

RANKS_PER_HOST = 8
OPS = ("AllReduce", "AllReduce", "AllReduce", "AllGather", "ReduceScatter", "Send", "Recv")


def synthesize(folder: Path, records: int, hosts: int, seed: int = 7) -> None:
    """`records` Inspector records spread over `hosts` x 8 rank files, recent timestamps."""
    rng = np.random.default_rng(seed)
    ranks = hosts * RANKS_PER_HOST
    per_rank = max(1, records // ranks)
    t0 = int(time.time() * 1e6) - per_rank * 20_000 - 60_000_000
    for g in range(ranks):
        host, pid = f"gpu-{g // RANKS_PER_HOST:03d}", 10_000 + g
        sizes = (2 ** rng.integers(16, 31, per_rank)).tolist()
        execs = rng.integers(50, 40_000, per_rank).tolist()
        ops = rng.integers(0, len(OPS), per_rank).tolist()
        lines = []
        for i in range(per_rank):
            op, end = OPS[ops[i]], t0 + i * 20_000 + execs[i]
            trace = (end - execs[i] - 150, end - execs[i] - 140, ((end - execs[i], end), (end - execs[i] + 4, end - 3)))
            rec = InspectorRecord(
                host, pid, "0x7f8c496ae9f661", g, ranks, hosts, op, i, sizes[i], execs[i], end + 900,
                comm_name="DP Group 0", peer=(g + 1) % ranks, trace=trace if i % 10 == 0 else None,
            )  # fmt: skip
            lines.append(json_line(rec))
        (folder / file_name(host, pid)).write_text("".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="2,000,000 records (default 200,000)")
    parser.add_argument("--records", type=int, default=None)
    args = parser.parse_args()
    records = args.records or (2_000_000 if args.full else 200_000)
    hosts = 32 if records >= 1_000_000 else 8
    with tempfile.TemporaryDirectory() as tmp:
        dump, data = Path(tmp) / "nccl", Path(tmp) / "chdb"
        dump.mkdir()
        synthesize(dump, records, hosts)
        size = sum(p.stat().st_size for p in dump.iterdir())
        settings = Settings(store=StoreConfig(path=data, ttl_days=0))
        with publishing(settings):  # migrate the store before the clock starts
            pass
        start = time.perf_counter()
        with publishing(settings) as (producer, _):
            collector = NcclCollector(InspectorDir(dump), producer)
            polls = 0
            while True:
                batches = collector.poll()
                polls += 1
                for batch in batches:
                    producer.publish(batch)
                if not batches:
                    break
        seconds = time.perf_counter() - start
        with ChdbStore(data) as store:
            landed = int(store.query_arrow("SELECT count() FROM collectives").column(0)[0].as_py())
    rows = collector.rows
    assert landed == rows, (landed, rows)
    print(
        f"collectives_ingest: {rows / seconds:,.0f} records/s ({rows:,} records, {size / 1e6:,.0f} MB of Inspector "
        f"JSON in {hosts * RANKS_PER_HOST} files, {polls} polls, {seconds:.2f} s, landed in chdb)"
    )


if __name__ == "__main__":
    main()
