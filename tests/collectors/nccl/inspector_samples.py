"""What the NCCL tests share: the Inspector fixtures and records written as the plugin writes them."""

from __future__ import annotations

import time
from pathlib import Path

from rocescope.collectors.nccl.write import InspectorRecord

FIX = Path(__file__).parent.parent.parent / "fixtures" / "nccl"


def record(
    sequence: int,
    op: str = "AllReduce",
    rank: int = 3,
    host: str = "gpu-node-07",
    pid: int = 4242,
    traced: bool = False,
    at_us: int | None = None,
) -> InspectorRecord:
    """A recent record of rank `rank` of a 16-rank communicator."""
    end = at_us if at_us is not None else int(time.time() * 1e6) - 60_000_000 + sequence * 1000
    trace = (end - 900, end - 895, ((end - 800, end), (end - 790, end - 5))) if traced else None
    return InspectorRecord(
        host,
        pid,
        "0x1b2c3d4e5f6a7b",
        rank,
        16,
        2,
        op,
        sequence,
        1 << 24,
        700 + sequence % 50,
        end + 100,
        comm_name="DP Group 0",
        peer=(rank + 1) % 16,
        trace=trace,
    )
