"""ECMP imbalance nobody injected: elephants that the hashing put on one uplink of a leaf, labeled after the run.

A scenario's traffic (an incast across leaves, storage streams) hashes its few long flows onto a leaf's uplinks
as ECMP does: now and then all of them land on one member while a sibling idles. That is an ECMP imbalance as
real as an injected one (`ecmp_imbalance` in a scenario pins the elephants to one uplink), and a detector that
reports it is right: the ground truth says so. `UplinkLedger` reads every leaf uplink group's transmitted
bytes at each poll from the engine (`Engine.port_load`); after the run, `episodes` finds where one member
carried far more than its share, the definition the kind has (`rocescope.analysis.detectors.ecmp_imbalance`):
per `BUCKET_S` bucket, the hot member carries at least 1/n + `MIN_EXCESS` (1 - 1/n) of the group's bytes, runs
at `HOT_UTILIZATION` of its speed or more, its siblings average at most `SIBLING_UTILIZATION` of theirs, and no
member of the group is down (a flap moves flows, it is no hashing); such buckets in a row for `MIN_SECONDS`
are one episode. `World.mark_emergent` labels those no injected incident explains.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from rocescope.sim.engine import Engine
    from rocescope.sim.topology import Port, Topology

__all__ = ["BUCKET_S", "MIN_SECONDS", "Episode", "UplinkLedger"]

BUCKET_S = 10.0
MIN_SECONDS = 30.0
MIN_EXCESS = 0.5
HOT_UTILIZATION = 0.7
SIBLING_UTILIZATION = 0.5


@dataclass(frozen=True)
class Episode:
    """One member of a leaf's uplink group carrying far more than its share, from `start_s` to `end_s`."""

    hot: Port
    start_s: float
    end_s: float
    share: float  # of the group's bytes over the episode


class UplinkLedger:
    """Every leaf uplink group's (two members or more) cumulative transmitted bytes and state at each poll."""

    def __init__(self, topology: Topology) -> None:
        self.groups: list[tuple[Port, ...]] = []
        for leaf in topology.leaves:
            ups = topology.uplinks(leaf.name)
            if len(ups) > 1:
                self.groups.append(ups)
        self.ids = np.array([p.id for g in self.groups for p in g], dtype=np.int64)
        self.times: list[float] = []
        self.sent: list[npt.NDArray[np.float64]] = []
        self.up: list[npt.NDArray[np.bool_]] = []

    def observe(self, engine: Engine) -> None:
        if not len(self.ids):
            return
        sent, cap = engine.port_load(self.ids)
        self.times.append(engine.now)
        self.sent.append(sent)
        self.up.append(cap > 0)

    def episodes(self) -> list[Episode]:
        if len(self.times) < 2:
            return []
        t = np.array(self.times)
        edges = np.arange(0.0, t[-1] + BUCKET_S, BUCKET_S)
        at = np.searchsorted(t, edges[edges <= t[-1]])  # the first poll at or after each bucket edge
        at = np.unique(np.clip(at, 0, len(t) - 1))
        sent = np.vstack(self.sent)[at]  # (edges, ports)
        down = np.logical_not(np.vstack(self.up))
        span = np.diff(t[at])
        moved = np.diff(sent, axis=0)  # bytes per bucket
        out: list[Episode] = []
        col = 0
        for group in self.groups:
            n = len(group)
            cols = slice(col, col + n)
            col += n
            speed = np.array([p.speed_bps / 8 for p in group])
            b = moved[:, cols]
            total = b.sum(axis=1)
            hot = b.argmax(axis=1)
            share = np.divide(b.max(axis=1), total, out=np.zeros_like(total), where=total > 0)
            util = b / (span[:, None] * speed[None, :])
            hot_util = util[np.arange(len(hot)), hot]
            siblings = (util.sum(axis=1) - hot_util) / (n - 1)
            flapped = np.array([down[lo : hi + 1, cols].any() for lo, hi in itertools.pairwise(at)], dtype=bool)
            bad = (
                (share >= 1 / n + MIN_EXCESS * (1 - 1 / n))
                & (hot_util >= HOT_UTILIZATION)
                & (siblings <= SIBLING_UTILIZATION)
                & ~flapped
            )
            k = 0
            while k < len(bad):
                if not bad[k]:
                    k += 1
                    continue
                j = k
                while j + 1 < len(bad) and bad[j + 1] and hot[j + 1] == hot[k]:
                    j += 1
                t0, t1 = float(t[at[k]]), float(t[at[j + 1]])
                if t1 - t0 >= MIN_SECONDS - 1e-9:
                    carried = b[k : j + 1, hot[k]].sum() / max(total[k : j + 1].sum(), 1.0)
                    out.append(Episode(group[hot[k]], t0, t1, float(carried)))
                k = j + 1
        return out
