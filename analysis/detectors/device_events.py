"""Devices whose links went down together: a switch restarting, a line card, a power feed (`link_health`'s
device events). Pure functions over the detector's incidents, so the grouping is tested and read apart from
how incidents are found."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl

__all__ = ["Incident", "Restart", "device_events", "into_restarts", "restarts"]


@dataclass
class Incident:
    """One link's flaps or errors merged in time, before it becomes a finding."""

    link: tuple[str, ...]
    start: dt.datetime
    end: dt.datetime
    flaps: int = 0
    errors: dict[str, dict[str, float]] = field(default_factory=dict)

    def near(self, start: dt.datetime, end: dt.datetime, gap_s: float) -> bool:
        gap = dt.timedelta(seconds=gap_s)
        return start <= self.end + gap and end >= self.start - gap


def device_events(
    outages: list[Incident], ports_of: Callable[[str], list[str]], merge_gap_s: float, device_event_links: int
) -> tuple[list[tuple[str, list[Incident]]], list[Incident]]:
    """Outages of one device overlapping in time (within `merge_gap_s`) on `device_event_links` links or more, or
    on every link the device has (two or more), grouped per device (the largest group first), with that device;
    the rest as they were. A device all of whose cables went down at once restarted or lost power, whatever their
    number: a spine of a small fabric restarting drops only a few links, each once (an outage, not a flap). The
    count is of links whose far end is known: a leaf whose sixteen uplinks to one spine go down together, their far
    ends unknown (LLDP on the hosts only), lost them to the spine restarting as likely as to a line card of its
    own, and naming the leaf sends the operator to the wrong switch."""
    left = list(outages)
    groups: list[tuple[str, list[Incident]]] = []
    while True:
        best: list[Incident] = []
        best_device = ""
        for device in sorted({r.partition(":")[0] for inc in left for r in inc.link}):
            on_it = (i for i in left if any(r.partition(":")[0] == device for r in i.link))
            clusters: list[list[Incident]] = []
            for inc in sorted(on_it, key=lambda i: i.start):
                if clusters and any(inc.near(o.start, o.end, merge_gap_s) for o in clusters[-1]):
                    clusters[-1].append(inc)
                else:
                    clusters.append([inc])
            every = set(ports_of(device))
            for cluster in clusters:
                mine = {r.partition(":")[2] for inc in cluster for r in inc.link if r.partition(":")[0] == device}
                whole = len(cluster) >= 2 and bool(every) and mine >= every
                cables = sum(1 for inc in cluster if len(inc.link) == 2)  # both ends known
                if (cables >= device_event_links or whole) and len(cluster) > len(best):
                    best, best_device = cluster, device
        if not best:
            return groups, left
        groups.append((best_device, best))
        left = [i for i in left if all(i is not b for b in best)]


@dataclass
class Restart:
    """A switch that went away (restarted, lost power) with the outages that were its links."""

    device: str
    outages: list[Incident]
    #: its ports whose counters went back (`restarted`) or went unread meanwhile
    ports: list[str]
    restarted: bool


def restarts(breaks: pl.DataFrame, outages: list[Incident], merge_gap_s: float) -> tuple[list[Restart], list[Incident]]:
    """Switches that went away, with the outages that were theirs. A switch's byte counters going back on two
    ports or more between the same two reads is the device counting again from zero (one port going back is a
    glitch or a cleared port); a switch whose counters went unread on two ports or more meanwhile (the only switch
    silent then: every switch silent at once is the collector's gap) went away without proving it restarted (an
    idle port counts nothing to go back from). Links whose far end is unknown (LLDP on the hosts only) that went
    down from `merge_gap_s` before its last read before to its first read after are its links, where two or more
    did (more than one cable; counters an operator cleared down none). Without this a restarting spine whose far
    ends no LLDP names is silent while it restarts, and its neighbours' downs name no device."""
    if breaks.is_empty() or not outages:
        return [], outages
    spans: list[tuple[str, dt.datetime, dt.datetime, set[str], set[str]]] = []  # device, lo, hi, back, silent
    for (device,), rows in breaks.sort("before").group_by(["device"], maintain_order=True):
        mine: list[tuple[str, dt.datetime, dt.datetime, set[str], set[str]]] = []
        for port, before, after, back in rows.select("port", "before", "after", "went_back").iter_rows():
            went = {port} if back else set()
            if mine and before <= mine[-1][2]:  # overlapping read gaps: one event
                _, lo, hi, backs, silent = mine[-1]
                mine[-1] = (str(device), lo, max(hi, after), backs | went, silent | ({port} - went))
            else:
                mine.append((str(device), before, after, went, {port} - went))
        spans += mine
    left, found = list(outages), []
    slack = dt.timedelta(seconds=merge_gap_s)
    for device, lo, hi, back, silent in spans:
        alone = not any(d != device and len(q) >= 2 and a < hi and lo < b for d, a, b, _, q in spans)
        if len(back) < 2 and not (len(back | silent) >= 2 and alone):
            continue
        theirs = [
            o for o in left
            if len(o.link) == 1 and not o.link[0].startswith(f"{device}:") and lo - slack <= o.start <= hi
        ]  # fmt: skip
        if len(theirs) >= 2:
            found.append(Restart(device, theirs, sorted(f"{device}:{port}" for port in back | silent), len(back) >= 2))
            left = [o for o in left if all(o is not t for t in theirs)]
    return found, left


def into_restarts(
    restarts: list[Restart], devices: list[tuple[str, list[Incident]]], merge_gap_s: float
) -> list[tuple[str, list[Incident]]]:
    """Device events of links to a switch that went away meanwhile (those whose far ends are known, grouped apart
    from the rest, at the switch or at the other end) join that restart: one event, one finding."""

    def theirs(r: Restart, device: str, group: list[Incident]) -> bool:
        to_it = r.device == device or any(ref.startswith(f"{r.device}:") for g in group for ref in g.link)
        return to_it and any(o.near(g.start, g.end, merge_gap_s) for o in r.outages for g in group)

    left = []
    for device, group in devices:
        same = next((r for r in restarts if theirs(r, device, group)), None)
        if same is None:
            left.append((device, group))
        else:
            same.outages += group
    return left
