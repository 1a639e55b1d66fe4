"""Cables no LLDP reported, found from what they carry: what one end sends, the other end receives.

LLDP is often collected from one side only (lldpd on the GPU hosts, nothing from the switches), which leaves
every leaf-spine cable unknown: no pause tree, deadlock cycle, spine group or link flap can be followed
across it. But a cable conserves what crosses it: the bytes port A transmits per minute are the bytes its
far end B receives (less the frames lost on the wire), and the PFC pause frames A sends are those B
receives. So the ports no LLDP row names are paired by those counts, summed per bucket (10 s in a short
window, at most 120 buckets in a long one; asked of the store only when some switch port has no LLDP peer):

* a *channel* is one of (bytes sent, bytes received) or (pause frames sent, pause frames received); it
  has volume at a pair when either end moved at least its floor (`MIN_BYTES`, `MIN_PAUSES`) over the window
  (a deadlocked cable carries no bytes but many pauses);
* A and B (on different devices) are candidates when what one sent over the window is within `TOLERANCE`
  of what the other received, in a channel with volume;
* they pair when, in both directions of every channel with volume, the running totals of what one sent and
  the other received never drift apart by more than `DRIFT_S` seconds of the busiest bucket's rate (the two
  ends are read at their own phases and cadences, up to 10 s apart, which moves counts between adjacent
  buckets but not out of the running total), at least one channel has volume, each is the other's best
  match, and the best is clearly better than the runner-up (`UNIQUE`). Ports that cannot be told apart
  (idle, or equal steady traffic) stay unpaired: a guess would be worse than the gap;
* cables that carry bytes pair first; those that carry only pauses (the cables of one deadlocked loop all
  pause alike, so read phases and noise pick among them) pair after, never joining two devices by more
  cables than the byte-carrying ones join any two: a Clos cables each leaf alike to every spine;
* except parallel cables between two devices (`_parallel`): when the ports one device has left unpaired that
  fit only ports of another are as many as those of the other that fit only the first, the two devices are
  cabled by them for certain, and they are paired in port order (which one is which is the only guess).

Cables that carry nothing tell by their downs instead (`coincident_cables`): a cable that goes down goes down at
both ends at once, so two ports of no known peer, on two devices, that went down together, down for down, and
with no other such port, are its two ends (a reboot that downs many ports at once pairs nothing).
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable
from weakref import WeakKeyDictionary

import polars as pl

from rocescope.analysis.fabric import netdev_of, port_order
from rocescope.analysis.frames import LINKS_SCHEMA, Frames

__all__ = [
    "CHANNELS",
    "DRIFT_S",
    "MAX_UNPAIRED_ENDS",
    "TOLERANCE",
    "coincident_cables",
    "infer_links",
    "spelled_far_ends",
]

TOLERANCE = 0.15
DRIFT_S = 12.0
UNIQUE = 0.8
MIN_BYTES = 1e8
MIN_PAUSES = 1000.0
#: (sent metric, received metric, floor)
CHANNELS = (("tx_bytes", "rx_bytes", MIN_BYTES), ("pfc_tx_pause", "pfc_rx_pause", MIN_PAUSES))

#: Ports of no known peer are paired by their downs at most among this many (a switch reboot downs them all).
MAX_UNPAIRED_ENDS = 256

Port = tuple[str, str]
Series = dict[object, float]  # minute -> count


def _drift(sent: Series, got: Series) -> float:
    """How far the running totals of two count series drift apart, in buckets of their busiest bucket."""
    peak = max([*sent.values(), *got.values(), 0.0])
    if peak <= 0:
        return 0.0
    run_s = run_g = worst = 0.0
    for m in sorted(set(sent) | set(got)):  # type: ignore[type-var]
        run_s += sent.get(m, 0.0)
        run_g += got.get(m, 0.0)
        worst = max(worst, abs(run_s - run_g))
    return worst / peak


class _Counts:
    def __init__(self, rows: Iterable[tuple[str, str, str, object, float]]) -> None:
        self.series: dict[str, dict[Port, Series]] = defaultdict(lambda: defaultdict(dict))
        for device, port, metric, minute, delta in rows:
            self.series[metric][(device, port)][minute] = delta

    def get(self, metric: str, port: Port) -> Series:
        return self.series[metric].get(port, {})

    def total(self, metric: str, port: Port) -> float:
        return sum(self.get(metric, port).values())

    def mismatch(self, a: Port, b: Port) -> float:  # in buckets of drift
        """The worst mismatch over the channels with volume at the pair (inf when none has volume)."""
        worst, seen = 0.0, False
        for sent, got, floor in CHANNELS:
            for x, y in ((a, b), (b, a)):
                s, g = self.get(sent, x), self.get(got, y)
                if max(sum(s.values()), sum(g.values())) >= floor:
                    seen = True
                    worst = max(worst, _drift(s, g))
        return worst if seen else float("inf")


#: Each window's per-bucket port counts, read once for every cable search of that window (`_cable_counts`).
_COUNTS: WeakKeyDictionary[Frames, tuple[_Counts, float]] = WeakKeyDictionary()


def _cable_counts(frames: Frames) -> tuple[_Counts, float]:
    """The window's bytes and pauses per port and bucket (10 s, at most 120 buckets), and the bucket length."""
    if frames not in _COUNTS:
        bucket_s = max(10.0, frames.window.seconds / 120)
        _COUNTS[frames] = (_Counts(frames.port_buckets(bucket_s).iter_rows()), bucket_s)
    return _COUNTS[frames]


def infer_links(frames: Frames, known: set[Port], switches: set[str], leaves: Collection[str] = ()) -> pl.DataFrame:
    """Cables between ports not in `known` (device, port pairs LLDP already named), as `links` rows (both ends).
    Nothing is asked of the store when every switch port with traffic already has an LLDP peer. Two `leaves`
    (switches with hosts) are never paired: a Clos cables leaves to spines, and the two ends of one deadlock
    loop or one ring (the same bytes and pauses, at the same times) would otherwise look like a cable."""
    ports_seen = frames.ports()
    open_ports = [(d, p) for d, p in ports_seen.select("device", "port").iter_rows() if (d, p) not in known]
    if not any(d in switches for d, _ in open_ports):
        return pl.DataFrame(schema=LINKS_SCHEMA)
    counts, bucket_s = _cable_counts(frames)
    drift = DRIFT_S / bucket_s
    ports = sorted({p for m in counts.series.values() for p in m} - known)
    candidates: dict[Port, set[Port]] = defaultdict(set)
    for sent, got, floor in CHANNELS:
        active = [p for p in ports if counts.total(got, p) >= floor]
        active.sort(key=lambda p: counts.total(got, p))
        totals = [counts.total(got, p) for p in active]
        for a in ports:
            out = counts.total(sent, a)
            if out < floor:
                continue
            lo = bisect.bisect_left(totals, out * (1 - TOLERANCE))
            hi = bisect.bisect_right(totals, out * (1 + TOLERANCE))
            for b in active[lo:hi]:
                if b[0] != a[0] and not (a[0] in leaves and b[0] in leaves):  # a candidate from both of its ends
                    candidates[a].add(b)
                    candidates[b].add(a)

    def mutual(pool: Iterable[Port], allowed: Callable[[Port, Port], bool]) -> list[tuple[Port, Port]]:
        """Pairs of the pool each other's clear best among the candidates `allowed`, within the drift."""

        def best(a: Port) -> tuple[float, Port | None]:
            scored = sorted((counts.mismatch(a, b), b) for b in candidates.get(a, ()) if allowed(a, b))
            if not scored or (len(scored) > 1 and scored[0][0] >= UNIQUE * scored[1][0]):
                return float("inf"), None  # nothing fits, or two fit about as well (or exactly: one flow each)
            return scored[0]

        choice = {a: best(a) for a in pool}
        return [
            (a, b)
            for a, (err, b) in choice.items()
            if b is not None and err <= drift and a < b and (choice.get(b) or best(b))[1] == a
        ]

    def carries_bytes(a: Port, b: Port) -> bool:
        sent, got, floor = CHANNELS[0]
        return any(max(counts.total(sent, x), counts.total(got, y)) >= floor for x, y in ((a, b), (b, a)))

    # byte-carrying cables first, then the rest within the Clos shape they show (see the module docstring)
    sure = [(a, b) for a, b in mutual([a for a in ports if a in candidates], lambda a, b: True) if carries_bytes(a, b)]
    paired = {p for pair in sure for p in pair}
    joined = Counter(frozenset((a[0], b[0])) for a, b in sure)
    most = max(joined.values(), default=0)

    def room(a: Port, b: Port) -> bool:
        return not most or joined[frozenset((a[0], b[0]))] < most

    rest = [a for a in ports if a in candidates and a not in paired]
    rows = list(sure)
    for a, b in sorted(mutual(rest, lambda a, b: b not in paired and room(a, b)), key=lambda ab: counts.mismatch(*ab)):
        if room(a, b):
            rows.append((a, b))
            joined[frozenset((a[0], b[0]))] += 1
    paired = {p for pair in rows for p in pair}

    def closest(a: Port) -> set[Port]:
        """The unpaired candidates that fit `a` about as well as the best one (within `UNIQUE`)."""
        fit = {b: counts.mismatch(a, b) for b in candidates.get(a, ()) if b not in paired}
        fit = {b: err for b, err in fit.items() if err <= drift}
        return {b for b, err in fit.items() if err * UNIQUE <= min(fit.values())} if fit else set()

    rows += _parallel([a for a in candidates if a not in paired], closest)
    both = [(a[0], a[1], b[0], b[1]) for a, b in rows] + [(b[0], b[1], a[0], a[1]) for a, b in rows]
    return pl.DataFrame(both, schema=LINKS_SCHEMA, orient="row")


def spelled_far_ends(
    frames: Frames, near: dict[Port, str], devices: Collection[str], port_of: Callable[[str, str], str]
) -> dict[Port, Port]:
    """For ports whose LLDP neighbor is a name no counters device carries (`near`: port -> the neighbor port as
    LLDP spells it), the far end among `devices`' ports of that spelling (`port_of(device, spelled)`: the port
    as the device's counters name it, `Ethernet8` for `Ethernet8`, `Eth8` or alias `etp3`): the one whose
    traffic is the cable's other end, where it fits clearly better than the others."""
    if not near or not devices:
        return {}
    counts, bucket_s = _cable_counts(frames)
    has = set(frames.ports().select("device", "port").iter_rows())
    out = {}
    for a, spelled in near.items():
        alike = [(d, port_of(d, spelled)) for d in devices if d != a[0]]
        scored = sorted((counts.mismatch(a, b), b) for b in alike if b in has)
        clear = len(scored) == 1 or (len(scored) > 1 and scored[0][0] < UNIQUE * scored[1][0])
        if clear and scored[0][0] <= DRIFT_S / bucket_s:
            out[a] = scored[0][1]
    return out


def _by_name(port: Port) -> tuple[tuple[int, int | str], ...]:
    return port_order(port[1])  # the ports of one device: `Ethernet9/1` before `Ethernet11/1`


def _parallel(ports: list[Port], closest: Callable[[Port], set[Port]]) -> list[tuple[Port, Port]]:
    """Parallel cables between two devices that carry alike (idle, deadlocked, or evenly loaded by the hash)
    cannot be told apart, but their devices can: when every port of device A left unpaired whose `closest`
    candidates all sit on device B has its like on B (as many B ports whose closest all sit on A), they are
    paired in port order. Which of them is which is a guess; that A and B are cabled is not, and a pause
    tree, a deadlock cycle or a spine's group towards a leaf needs only that."""
    groups: dict[tuple[str, str], list[Port]] = defaultdict(list)
    for a in ports:
        devices = {b[0] for b in closest(a)}
        if len(devices) == 1:
            groups[(a[0], devices.pop())].append(a)
    out = []
    for (x, y), ours in groups.items():
        theirs = groups.get((y, x), [])
        if x < y and ours and len(ours) == len(theirs):
            out += list(zip(sorted(ours, key=_by_name), sorted(theirs, key=_by_name), strict=True))
    return out


def coincident_cables(downs: pl.DataFrame, peer: Callable[[str, str], Port | None], min_downs: int) -> dict[Port, str]:
    """The two ends of each cable no LLDP names, from `downs` (device, port, start, end, every_s: each down event
    of a port and the interval of the series that saw it): ports that `peer` knows no peer of, that went down
    at least `min_downs` times, each time together (each event widened by half its own read interval either
    side: the two ends are read on two devices' clocks and cadences) with exactly one other such port on
    another device, and it with them. (device, port) -> the other end's `device:netdev`. Ends that coincide
    with several others stay apart."""
    spans: dict[Port, list[tuple[dt.datetime, dt.datetime]]] = defaultdict(list)
    for device, port, start, end, every in downs.select("device", "port", "start", "end", "every_s").iter_rows():
        if peer(device, netdev_of(port)) is None:
            half = dt.timedelta(seconds=0.5 * (every or 0.0))
            spans[(device, port)].append((start - half, end + half))
    ends = [e for e, s in spans.items() if len(s) >= min_downs]
    if len(ends) > MAX_UNPAIRED_ENDS:
        return {}

    def within(a: Port, b: Port) -> bool:
        return all(any(s <= e1 and s1 <= e for s, e in spans[b]) for s1, e1 in spans[a])

    partners = {a: [b for b in ends if b[0] != a[0] and within(a, b) and within(b, a)] for a in ends}
    return {a: f"{b[0][0]}:{netdev_of(b[0][1])}" for a, b in partners.items() if len(b) == 1 and partners[b[0]] == [a]}
