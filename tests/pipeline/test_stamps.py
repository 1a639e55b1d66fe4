"""Samples stamped no later than their series' previous, dropped at the edge where arrival order is known."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.stamps import StampGuard

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Shipped:
    """The producer behind the guard: what reached the transport (a list, as the in-process bus keeps it)."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []

    def publish(self, batch: Batch) -> None:
        self.batches.append(batch)

    def flush(self, timeout: float | None = None) -> None:
        return None

    def close(self) -> None:
        return None


def batch(samples: list[tuple[float, str, float]], source: str = "gnmi") -> Batch:
    """(seconds after T0, port, value) rows of leaf-1's tx_bytes."""
    table = pa.table(
        {
            "ts": pa.array([T0 + dt.timedelta(seconds=t) for t, _, _ in samples], pa.timestamp("ns", tz="UTC")),
            "device": ["leaf-1"] * len(samples),
            "role": ["switch"] * len(samples),
            "port": [p for _, p, _ in samples],
            "priority": pa.array([-1] * len(samples), pa.int8()),
            "metric": ["tx_bytes"] * len(samples),
            "value": pa.array([v for _, _, v in samples], pa.float64()),
            "source": [source] * len(samples),
            "raw_name": ["out-octets"] * len(samples),
        }
    )
    return Batch("counters", conform("counters", table), "leaf-1")


def test_a_clock_stepped_back_drops_the_samples_stamped_before_what_was_shipped() -> None:
    shipped = Shipped()
    guard = StampGuard(shipped)
    for t in (1.0, 2.0, 3.0):
        guard.publish(batch([(t, "Ethernet0", 100 * t), (t, "Ethernet4", 50 * t)]))
    # the device's clock steps back 2.5 s: its next reads are stamped 1.5, 2.5, then 3.5 (after 3: shipped)
    for t in (4.0, 5.0, 6.0):
        guard.publish(batch([(t - 2.5, "Ethernet0", 100 * t)]))
    guard.publish(batch([(3.0, "Ethernet4", 150.0)]))  # a value re-sent with its old stamp
    rows = [r for b in shipped.batches for r in b.data.to_pylist()]
    eth0 = [(r["ts"] - T0).total_seconds() for r in rows if r["port"] == "Ethernet0"]
    assert eth0 == [1.0, 2.0, 3.0, 3.5] and guard.dropped == 3
    assert [r["value"] for r in rows if r["port"] == "Ethernet4"] == [50.0, 100.0, 150.0]


def test_each_source_and_other_streams_pass_on_their_own() -> None:
    shipped = Shipped()
    guard = StampGuard(shipped)
    guard.publish(batch([(2.0, "Ethernet0", 1.0)], source="gnmi"))
    guard.publish(batch([(1.0, "Ethernet0", 1.0)], source="snmp"))  # another source's series: its own order
    guard.publish(batch([(1.0, "Ethernet0", 1.0), (0.5, "Ethernet0", 1.0)], source="snmp"))  # in one batch too
    links = Batch("links", shipped.batches[0].data.slice(0, 0), "x")
    guard.publish(links)
    assert [b.num_rows for b in shipped.batches] == [1, 1, 0] and guard.dropped == 2
    assert shipped.batches[-1] is links
