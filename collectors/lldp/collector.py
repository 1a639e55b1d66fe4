"""LLDP collector: which port faces which, into `links`.

The detectors join counters across a cable (a leaf port's PFC pauses to the host NIC they stop), so the
adjacency must come from what devices see, not from a drawing. Every source (hosts via lldpcli, switches
via gNMI openconfig-lldp: `sources.py`) is polled on its own; one that fails never stops the others.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Sequence

import pyarrow as pa

from rocescope.collectors.common.health import CollectorMetrics, Health, Targets
from rocescope.collectors.common.polling import poll_target, run_polls
from rocescope.collectors.lldp.parse import Neighbor
from rocescope.collectors.lldp.sources import LldpSource
from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.transport import Producer

__all__ = ["LldpCollector", "links_batch"]

log = logging.getLogger(__name__)

_SOURCE = "lldp"


def links_batch(
    neighbors: Sequence[Neighbor], seen_at: dt.datetime | None = None, key: str = "", source: str = _SOURCE
) -> Batch:
    """A `links` Batch of these neighbors (source `lldp`; `alias` for a switch's port alias rows, where the
    peer is the device itself and the peer port the name its counters use)."""
    when = seen_at or dt.datetime.now(dt.UTC)
    n = len(neighbors)
    table = pa.table(
        {
            "device": [x.device for x in neighbors],
            "port": [x.port for x in neighbors],
            "peer_device": [x.peer_device for x in neighbors],
            "peer_port": [x.peer_port for x in neighbors],
            "source": [source] * n,
            "seen_at": pa.array([when] * n, pa.timestamp("ns", tz="UTC")),
        }
    )
    return Batch("links", conform("links", table), key=key or (neighbors[0].device if neighbors else ""))


class LldpCollector:
    """Polls every source (hosts, switches), one `links` Batch per source that answered."""

    def __init__(
        self, sources: Sequence[LldpSource], producer: Producer | None = None, metrics: CollectorMetrics | None = None
    ):
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"LLDP source names must be unique: {names}")
        self.sources = list(sources)
        self.producer = producer
        self.metrics = metrics or CollectorMetrics("lldp")
        self.targets = Targets(self.metrics, log)
        self.targets.add(*(s.name for s in sources))

    def health(self) -> dict[str, Health]:
        return dict(self.targets.health)

    def poll_once(self, now: dt.datetime | None = None) -> list[Batch]:
        """One poll of every source; failures are logged and counted, never raised."""
        when = now or dt.datetime.now(dt.UTC)
        out: list[Batch] = []
        for src in self.sources:

            def poll(src: LldpSource = src) -> tuple[list[Neighbor], int, int]:
                found, bad = src.neighbors()
                return found, len(found), bad

            found = poll_target(src.name, poll, self.targets)
            if found:
                out.append(links_batch(found, when, src.name))
        return out

    def run(self, interval_s: float, stop: threading.Event, on_batch: Callable[[Batch], None] | None = None) -> int:
        """Poll and publish every `interval_s` until `stop`; returns the number of polls."""
        return run_polls(self.poll_once, self.producer, interval_s, stop, on_batch)
