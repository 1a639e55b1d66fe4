"""Which priorities run PFC: those the config names, and those whose pause frames the window counts.

A port sends PFC frames only for the priorities it enables PFC on (IEEE 802.1Qbb: a pause frame asks the peer to
stop the priorities in its class-enable vector), so pause frames counted on a priority prove that priority
lossless. Fabrics run more than one: SONiC's default QoS enables PFC on 3 and 4, and RoCE storage often takes
the second. The configured priorities stay first (the one assumed where gear counts PFC per interface only)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from rocescope.analysis.frames import Frames
from rocescope.pipeline.store import query_polars

log = logging.getLogger(__name__)

#: per-priority PFC frame counters (either direction proves the priority enabled on one end of the cable)
PFC_FRAMES = ("pfc_tx_pause", "pfc_rx_pause")
#: frames a priority needs over the window, all ports together: a single counter glitch of a few counts is no
#: proof of a configuration, while one congestion episode sends thousands (a refresh every few ms per port)
MIN_FRAMES = 10


def paused_priorities(frames: Frames) -> set[int]:
    """The priorities PFC frames were counted on in the window (from the 1-minute rollup: one small scan)."""
    sql = """
SELECT priority FROM (
    SELECT priority, max(max_value) - min(min_value) AS counted FROM counters_1m
    WHERE minute >= toStartOfMinute({start:DateTime64(9, 'UTC')}) AND minute < {end:DateTime64(9, 'UTC')}
        AND metric IN {metrics:Array(String)} AND priority >= 0
    GROUP BY device, port, priority, metric
)
GROUP BY priority HAVING sum(counted) >= {floor:Float64}"""
    params = {"start": frames.window.start, "end": frames.window.end, "metrics": list(PFC_FRAMES), "floor": MIN_FRAMES}
    got = query_polars(frames.store, sql, params)
    return {int(p) for p in got["priority"].to_list()} if got.height else set()


def in_effect(configured: Sequence[int], observed: set[int]) -> tuple[int, ...]:
    """The configured lossless priorities, then the observed ones the config left out."""
    return (*configured, *sorted(observed - set(configured)))


def with_observed(params: Any, observed: set[int]) -> Any:
    """A detector's thresholds with the priorities PFC was seen on added to its `lossless_priorities`."""
    configured = getattr(params, "lossless_priorities", None)
    if configured is None or not observed - set(configured):
        return params
    return params.model_copy(update={"lossless_priorities": in_effect(configured, observed)})
