"""A tiny generated fabric poll for the foundation demo, until the simulator (rocescope.sim) lands.

It produces what a real poll of a few leaves and NICs looks like (cumulative 64-bit counters per
port and priority, a watermark gauge, one device reboot that resets its counters) so the whole
path (Batch -> transport -> sink -> store -> rate views) runs for real.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from rocescope.pipeline.batch import Batch, conform

SWITCH_METRICS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_discards")
PRIORITY_METRICS = ("pfc_rx_pause", "pfc_tx_pause", "ecn_marked_packets", "queue_watermark_bytes")


def poll_batch(
    device: str,
    role: str,
    ports: list[str],
    ts: dt.datetime,
    step: int,
    rates: np.ndarray,
    rng: np.random.Generator,
    reset_at: int | None = None,
) -> Batch:
    """One poll of one device: every port x metric (x priority where the metric has one)."""
    rows_port, rows_prio, rows_metric = [], [], []
    for port in ports:
        for metric in SWITCH_METRICS:
            rows_port.append(port)
            rows_prio.append(-1)
            rows_metric.append(metric)
        for metric in PRIORITY_METRICS:
            for prio in (0, 3):
                rows_port.append(port)
                rows_prio.append(prio)
                rows_metric.append(metric)
    n = len(rows_port)
    steps_since_reset = step - reset_at if reset_at is not None and step >= reset_at else step
    values = rates[:n] * (steps_since_reset + 1)
    gauge = np.array([m == "queue_watermark_bytes" for m in rows_metric])
    values[gauge] = rng.uniform(0, 4e6, int(gauge.sum()))
    table = pa.table(
        {
            "ts": pa.array(np.full(n, int(ts.timestamp() * 1e9), dtype="int64"), pa.timestamp("ns", tz="UTC")),
            "device": pa.array([device] * n).dictionary_encode(),
            "role": pa.array([role] * n).dictionary_encode(),
            "port": pa.array(rows_port).dictionary_encode(),
            "priority": pa.array(rows_prio, pa.int8()),
            "metric": pa.array(rows_metric).dictionary_encode(),
            "value": pa.array(np.floor(values)),
            "source": pa.array(["import"] * n).dictionary_encode(),
            "raw_name": pa.array(rows_metric).dictionary_encode(),
        }
    )
    return Batch("counters", conform("counters", table), key=device)


def generate(
    switches: int = 4, ports: int = 16, seconds: int = 30, seed: int = 7, start: dt.datetime | None = None
) -> Iterator[Batch]:
    """Polls of `switches` leaves every second for `seconds`; leaf 0 reboots half-way."""
    rng = np.random.default_rng(seed)
    start = start or dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(seconds=seconds)
    names = [f"leaf-r{i % 8}-{i // 8 + 1:02d}" for i in range(switches)]
    port_names = [f"Ethernet{4 * p}" for p in range(ports)]
    rates = [rng.uniform(1e3, 5e9, values_per_poll(ports)) for _ in names]
    for step in range(seconds):
        ts = start + dt.timedelta(seconds=step)
        for i, device in enumerate(names):
            yield poll_batch(device, "switch", port_names, ts, step, rates[i], rng, seconds // 2 if i == 0 else None)


def values_per_poll(ports: int) -> int:
    return ports * (len(SWITCH_METRICS) + 2 * len(PRIORITY_METRICS))
