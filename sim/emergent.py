"""What the traffic does by itself, labelled after the run by the kinds' definitions (`rocescope.sim.truth`).

Nobody injects a hash collision or the congestion of a many-to-one collective, yet a detector that reports
one is right, and one that reports a false one is wrong: the truth must say which. `Ledger` reads, at every
poll, the engine's own state (`Engine.port_load`, `queue_above_kmin`, `flow_delivery`):

* every ECMP group's members (a leaf's uplinks, a spine's parallel links to one leaf): bytes sent, time its
  lossless queue spent above the ECN threshold, and whether each was up; `imbalance` finds, per
  `IMBALANCE.bucket_s` bucket, a member with `fair_shares` of the group's bytes (at most `max_share`), its 90th
  percentile of per-poll load at `hot_p90` or more with its queue above the threshold, while the median sibling's
  90th percentile is `sibling_p90` or less, no member down; such buckets in a row (the same hot member) for
  `incident_s` are an incident, shorter ones and the band around the thresholds are don't care;
* every receiver-facing switch port (a leaf port cabled to a NIC): bytes sent, the time its lossless queue
  spent above the ECN threshold and its longest unbroken run there (the engine tracks both step by step), and
  the distinct senders whose bytes it delivered; `congestion` labels incasts (saturated, two senders or more,
  for a second) and microbursts (runs above the threshold shorter than 100 ms, the port below saturation).

`World.mark_emergent` keeps the events no injected incident explains. Nothing here reads a detector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from rocescope.sim.truth import IMBALANCE, INCAST, MICROBURST

if TYPE_CHECKING:
    from rocescope.sim.engine import Engine
    from rocescope.sim.topology import Port, Topology

__all__ = ["Event", "Ledger"]


@dataclass(frozen=True)
class Event:
    """One emergent event of `kind` at `port`, from `start_s` to `end_s` (fabric seconds)."""

    kind: str
    port: Port
    start_s: float
    end_s: float
    dont_care: bool
    what: str


def _runs(mask: npt.NDArray[np.bool_], key: npt.NDArray[np.int64] | None = None) -> list[tuple[int, int]]:
    """[first, last] index of each run of True in `mask` (a run also ends where `key` changes)."""
    out: list[tuple[int, int]] = []
    k = 0
    while k < len(mask):
        if not mask[k]:
            k += 1
            continue
        j = k
        while j + 1 < len(mask) and mask[j + 1] and (key is None or key[j + 1] == key[k]):
            j += 1
        out.append((k, j))
        k = j + 1
    return out


class Ledger:
    """The engine state the emergent labels need, read at each poll (`observe`)."""

    def __init__(self, topology: Topology) -> None:
        self.groups: list[tuple[Port, ...]] = []
        for leaf in topology.leaves:
            ups = topology.uplinks(leaf.name)
            if len(ups) > 1:
                self.groups.append(ups)
        for spine in topology.spines:
            for leaf in topology.leaves:
                parallel = topology.downlinks(spine.name, leaf.name)
                if len(parallel) > 1:
                    self.groups.append(parallel)
        self.ids = np.array([p.id for g in self.groups for p in g], dtype=np.int64)
        hosts = {h.name for h in topology.hosts}
        self.receivers: tuple[Port, ...] = tuple(
            p for leaf in topology.leaves for p in topology.ports_of(leaf.name) if p.peer_device in hosts
        )
        self.rx_ids = np.array([p.id for p in self.receivers], dtype=np.int64)
        self._slot = np.full(len(topology.ports), -1, dtype=np.int64)
        self._slot[self.rx_ids] = np.arange(len(self.rx_ids))
        self.times: list[float] = []
        self.sent: list[npt.NDArray[np.float64]] = []
        #: per poll, per group member: cumulative seconds its lossless queue spent above the ECN threshold
        self.queued: list[npt.NDArray[np.float64]] = []
        self.up: list[npt.NDArray[np.bool_]] = []
        self.rx_sent: list[npt.NDArray[np.float64]] = []
        #: per poll, per receiver port: cumulative seconds its lossless queue spent above the ECN threshold, and
        #: its longest unbroken run above it since the previous poll
        self.rx_above: list[npt.NDArray[np.float64]] = []
        self.rx_run: list[npt.NDArray[np.float64]] = []
        #: per poll, per receiver port: distinct senders whose bytes it delivered since the previous poll
        self.senders: list[npt.NDArray[np.int64]] = []
        self._delivered: npt.NDArray[np.float64] | None = None
        self._src: npt.NDArray[np.int64] | None = None

    def observe(self, engine: Engine) -> None:
        self.times.append(engine.now)
        if len(self.ids):
            sent, cap = engine.port_load(self.ids)
            self.sent.append(sent)
            self.up.append(cap > 0)
            self.queued.append(engine.queue_above_kmin(self.ids)[0])
        if not len(self.rx_ids):
            return
        rx_sent, _ = engine.port_load(self.rx_ids)
        self.rx_sent.append(rx_sent)
        above, run = engine.queue_above_kmin(self.rx_ids)
        self.rx_above.append(above)
        self.rx_run.append(run)
        delivered, last = engine.flow_delivery()
        if self._src is None:
            names: dict[str, int] = {}
            self._src = np.array([names.setdefault(f.src.host, len(names)) for f in engine.flows], dtype=np.int64)
        moved = delivered - (self._delivered if self._delivered is not None else 0.0)
        self._delivered = delivered
        slot = np.where(last >= 0, self._slot[np.maximum(last, 0)], -1)
        live = (moved > 0) & (slot >= 0)
        pairs = np.unique(np.stack([slot[live], self._src[live]]), axis=1) if live.any() else np.zeros((2, 0), int)
        self.senders.append(np.bincount(pairs[0], minlength=len(self.rx_ids)).astype(np.int64))

    def imbalance(self) -> list[Event]:
        """ECMP imbalance by `rocescope.sim.truth.IMBALANCE` (incidents and don't-care events)."""
        rule = IMBALANCE
        if len(self.times) < 3 or not len(self.ids):
            return []
        t = np.array(self.times)
        moved = np.diff(np.vstack(self.sent), axis=0)  # poll interval k: t[k] .. t[k + 1]
        queued = np.diff(np.vstack(self.queued), axis=0)
        down = np.logical_not(np.vstack(self.up))
        polls = np.diff(t)
        bucket = np.floor(t[1:] / rule.bucket_s - 1e-9).astype(np.int64)  # the bucket each interval ends in
        first = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        last = np.r_[first[1:], len(bucket)]  # a bucket: intervals first[i] .. last[i] - 1
        starts, ends = t[first], t[last]
        out: list[Event] = []
        col = 0
        for group in self.groups:
            n = len(group)
            cols = slice(col, col + n)
            col += n
            speed = np.array([p.speed_bps / 8 for p in group])
            load = moved[:, cols] / (polls[:, None] * speed[None, :])
            need = min(rule.fair_shares / n, rule.max_share)
            hot = np.zeros(len(first), dtype=np.int64)
            share, hot_p90, sibling_p90 = (np.zeros(len(first)) for _ in range(3))
            hot_queued, flapped = np.zeros(len(first), dtype=bool), np.zeros(len(first), dtype=bool)
            for i, (a, b) in enumerate(zip(first, last, strict=True)):
                sent = moved[a:b, cols].sum(axis=0)
                p90 = np.quantile(load[a:b], 0.9, axis=0)
                hot[i] = int(sent.argmax())
                share[i] = sent[hot[i]] / sent.sum() if sent.sum() > 0 else 0.0
                hot_p90[i], sibling_p90[i] = p90[hot[i]], float(np.median(np.delete(p90, hot[i])))
                hot_queued[i] = queued[a:b, cols][:, hot[i]].sum() > 0
                flapped[i] = down[a : b + 1, cols].any()
            near = (share >= need) & (hot_p90 >= rule.dont_care_hot) & (sibling_p90 <= rule.dont_care_sibling)
            near &= ~flapped
            bad = near & (hot_p90 >= rule.hot_p90) & (sibling_p90 <= rule.sibling_p90) & hot_queued
            for k, j in _runs(near, hot):
                member = group[int(hot[k])]
                incidents = [
                    (k + x, k + y)
                    for x, y in _runs(bad[k : j + 1])
                    if ends[k + y] - starts[k + x] >= rule.incident_s - 1e-9
                ]
                for lo, hi in incidents:
                    what = (
                        f"{member.device}:{member.name} carried {share[lo : hi + 1].mean():.0%} of its group's bytes, "
                        "saturated in its busy phases with its queue up, while its siblings had room"
                    )
                    out.append(Event("ecmp_imbalance", member, float(starts[lo]), float(ends[hi]), False, what))
                # the rest of the run, around its incidents too: a member hovering at 90% for minutes is an incident
                # where three buckets held it and near the edge where one dipped (a finding there is not wrong)
                after = [k - 1] + [hi for _, hi in incidents]
                edges = [(a + 1, b - 1) for a, b in zip(after, [lo for lo, _ in incidents] + [j + 1], strict=True)]
                for lo, hi in (e for e in edges if e[0] <= e[1]):
                    what = f"{member.device}:{member.name} ran hot while its group had room, near the definition's edge"
                    out.append(Event("ecmp_imbalance", member, float(starts[lo]), float(ends[hi]), True, what))
        return out

    def congestion(self) -> list[Event]:
        """Incasts and microbursts at receiver-facing ports by `rocescope.sim.truth` (`INCAST`, `MICROBURST`), from
        the time each port's lossless queue spent above the ECN threshold and its longest unbroken run there:

        * incast: polls at `INCAST.saturated` of line rate or more with the queue above the threshold and
          `min_senders` or more, for `INCAST.min_s`; the same from 75% busy, or for less than `min_s`: don't care;
        * microburst: polls below saturation whose queue went above the threshold only in runs shorter than
          `MICROBURST.max_run_s`, those less than `MICROBURST.train_gap_s` apart one train (one incident); runs up
          to `MICROBURST.dont_care_run_s`, or less than `MICROBURST.min_above_s` above in a poll, are don't care,
          as is a train between or beside polls of the port at or near saturation (an incast's dips: the
          definition wants no span of 1 s near line rate, and the port had them).
          Longer runs below saturation are a queue held up by something else (a pause, a loop): neither kind."""
        rule, burst = INCAST, MICROBURST
        if len(self.rx_sent) < 2:
            return []
        t = np.array(self.times)
        span = np.diff(t)
        speed = np.array([p.speed_bps / 8 for p in self.receivers])
        load = np.diff(np.vstack(self.rx_sent), axis=0) / (span[:, None] * speed[None, :])
        above = np.diff(np.vstack(self.rx_above), axis=0)
        run = np.vstack(self.rx_run)[1:]
        queued = above > 0
        senders = np.vstack(self.senders)[1:]
        incast = queued & (load >= rule.saturated) & (senders >= rule.min_senders)
        near_incast = queued & (load >= rule.dont_care_load) & (senders >= rule.min_senders)
        below = queued & (load < rule.saturated)
        bursts = below & (run < burst.max_run_s) & (above >= burst.min_above_s)
        near_bursts = below & ~bursts & (run < burst.dont_care_run_s)
        out: list[Event] = []
        for i in np.flatnonzero(queued.any(axis=0)):
            port = self.receivers[int(i)]
            where = f"{port.device}:{port.name}"

            def add(kind: str, k: int, j: int, dont_care: bool, what: str, port: Port = port) -> None:
                out.append(Event(kind, port, float(t[k]), float(t[j + 1]), dont_care, what))

            real = [(k, j) for k, j in _runs(incast[:, i]) if t[j + 1] - t[k] >= rule.min_s - 1e-9]
            covered = np.zeros(len(span), dtype=bool)
            for k, j in real:
                covered[k : j + 1] = True
                add("incast", k, j, False, f"incast (emergent): {int(senders[k : j + 1, i].max())} senders "
                    f"overloaded {where} for {t[j + 1] - t[k]:g} s")  # fmt: skip
            for k, j in _runs(near_incast[:, i] & ~covered):
                add("incast", k, j, True, f"congestion at {where} near saturation, short of an incast (don't care)")
            saturated = incast[:, i] | near_incast[:, i]
            for k, j in _trains(bursts[:, i] | near_bursts[:, i], t, burst.train_gap_s):
                if not bursts[k : j + 1, i].any():
                    add("microburst", k, j, True, f"queueing at {where} near a microburst's edge (don't care)")
                    continue
                if saturated[max(k - 1, 0) : j + 2].any():  # the definition: no span of 1 s near line rate
                    add("microburst", k, j, True, f"bursts at {where} between or beside its saturated seconds (an "
                        "incast's edges, don't care)")  # fmt: skip
                    continue
                longest = float(run[k : j + 1, i][bursts[k : j + 1, i]].max()) * 1000
                add("microburst", k, j, False, f"microbursts (emergent) into {where}: its queue above the ECN "
                    f"threshold in runs of {longest:.0f} ms at most, the port below saturation")  # fmt: skip
        return out


def _trains(mask: npt.NDArray[np.bool_], t: npt.NDArray[np.float64], gap_s: float) -> list[tuple[int, int]]:
    """Runs of `mask` (poll intervals: interval k spans t[k]..t[k+1]) with those less than `gap_s` apart joined."""
    out: list[tuple[int, int]] = []
    for k, j in _runs(mask):
        if out and t[k] - t[out[-1][1] + 1] < gap_s:
            out[-1] = (out[-1][0], j)
        else:
            out.append((k, j))
    return out
