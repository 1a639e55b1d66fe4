"""PFC deadlock: a cycle of ports that hold each other paused, none of which can ever drain first.

Method (after Hu et al., "Deadlocks in Datacenter Networks: Why Do They Form, and How to Avoid
Them", HotNets 2016, and Guo et al., "RDMA over Commodity Ethernet at Scale", SIGCOMM 2016, which
describe the deadlock as a cyclic buffer dependency among PFC-paused switches, e.g. after a routing
loop or up-down-up paths; and Shpiner et al., "Unlocking Credit Loop Deadlock", HotNets 2016, for
the wait-for graph view):

* nodes are the *stalled edges* of the PFC storm detector (`pfc_storm.stalled_edges`: egress port P
  of device D paused on a priority at least `min_paused_fraction` of each interval while transmitting
  below `stall_fraction` of its speed; asserted by P's LLDP peer A);
* P *waits for* every stalled egress port of A on the same priority, overlapping in time: A cannot
  drain the buffers that made it pause D while its own egress ports are paused (counters do not say
  which ingress feeds which egress, so any paused egress of A counts);
* a strongly connected component of that graph (Tarjan) holds at least one cycle; the shortest cycle
  through its first node is reported, in wait-for order starting at its smallest `device:port`, when
  all its nodes stay stalled together for at least `min_seconds`. Nodes that wait for the cycle
  without being on it (the hosts and links the deadlock spreads to) are the victims, in evidence.

A storm has a root that is not itself stalled (a NIC or a port asserting pause without cause) and no
cycle, so this detector does not report storms, and the storm detector skips paused ports whose
asserter is stalled, so it does not report deadlocks.
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from collections.abc import Sequence

from rocescope.analysis.detectors.base import Context, Detector, Params, threshold
from rocescope.analysis.detectors.pfc_storm import StormParams
from rocescope.analysis.findings import Finding
from rocescope.analysis.pfc_edges import Edge, stalled_edges


class DeadlockParams(Params):
    min_paused_fraction: float = threshold(
        0.8,
        "Share of an interval a port must be paused.",
        "derivation: the cycle's nodes are pfc_storm's stalled edges, read with its bar: a port paused nearly the "
        "whole interval, so a busy port paused in bursts but still flowing is no node",
        gt=0,
        le=1,
    )
    stall_fraction: float = threshold(
        0.05,
        "Transmit below this share of link speed = stalled.",
        "derivation: as pfc_storm's: a deadlocked port sends (almost) nothing; the port counter also holds other "
        "priorities and control frames, so 5% of speed, far below any flowing port",
        ge=0,
        le=1,
    )
    min_seconds: float = threshold(
        5.0,
        "All ports of the cycle stalled together at least this long.",
        "derivation: a deadlock never drains by itself, so it lasts; 5 s of every cycle port stalled together errs "
        "toward missing cyclic pausing that clears on its own (passing congestion) rather than calling it one",
        ge=0,
    )


def _ref(port: tuple[str, str]) -> str:
    return f"{port[0]}:{port[1]}"


def wait_for(edges: Sequence[Edge]) -> list[list[int]]:
    """Adjacency: edge i waits for edge j when j's paused device asserted i's pause, same priority, in time."""
    return [
        [
            j
            for j, f in enumerate(edges)
            if j != i and f.paused[0] == e.asserter[0] and f.priority == e.priority and f.overlaps(e)
        ]
        for i, e in enumerate(edges)
    ]


def strongly_connected(adj: list[list[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components (iterative), each a list of node indices."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(len(adj)):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            recurse = False
            for k in range(i, len(adj[v])):
                w = adj[v][k]
                if w not in index:
                    work += [(v, k + 1), (w, 0)]
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def shortest_cycle(adj: list[list[int]], members: Sequence[int], start: int) -> list[int]:
    """The shortest cycle through `start` inside `members` (breadth first), in wait-for order."""
    inside = set(members)
    prev: dict[int, int] = {}
    queue = deque([start])
    seen = {start}
    while queue:
        v = queue.popleft()
        for w in adj[v]:
            if w not in inside:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return path[::-1]
            if w not in seen:
                seen.add(w)
                prev[w] = v
                queue.append(w)
    return []


def _victims(adj: list[list[int]], cycle: set[int]) -> set[int]:
    """Nodes outside the cycle from which it can be reached (they wait for it)."""
    reach = set(cycle)
    changed = True
    while changed:
        changed = False
        for v, ws in enumerate(adj):
            if v not in reach and any(w in reach for w in ws):
                reach.add(v)
                changed = True
    return reach - cycle


def detect(ctx: Context, p: DeadlockParams) -> list[Finding]:
    storm = StormParams(min_paused_fraction=p.min_paused_fraction, stall_fraction=p.stall_fraction, min_seconds=0)
    edges = stalled_edges(ctx, storm)
    adj = wait_for(edges)
    findings = []
    for comp in strongly_connected(adj):
        if len(comp) < 2:
            continue
        first = min(comp, key=lambda i: (_ref(edges[i].paused), edges[i].start))
        cycle = shortest_cycle(adj, comp, first)
        if not cycle:
            continue
        start: dt.datetime = max(edges[i].start for i in cycle)
        end: dt.datetime = min(edges[i].end for i in cycle)
        if (end - start).total_seconds() < max(p.min_seconds, 0.5 * max(edges[i].every_s for i in cycle)):
            continue
        start, end = ctx.clip(start, end)
        ports = [_ref(edges[i].paused) for i in cycle]
        devices = list(dict.fromkeys(edges[i].paused[0] for i in cycle))
        victims = sorted(_victims(adj, set(cycle)) | (set(comp) - set(cycle)), key=lambda i: _ref(edges[i].paused))
        jobs = ctx.fabric.jobs_at_refs(ports, start, end)
        hurt = ctx.fabric.jobs_at_refs([_ref(edges[i].paused) for i in victims], start, end)
        seconds = (end - start).total_seconds()
        prio = edges[cycle[0]].priority
        findings.append(
            Finding(
                kind="pfc_deadlock",
                severity="critical",
                start=start,
                end=end,
                devices=tuple(devices),
                ports=tuple(ports),
                priority=prio,
                score=seconds * len(cycle) * (1 + len(victims)),
                summary=(
                    f"PFC deadlock on priority {prio} for {seconds:.0f} s: "
                    + " -> ".join(ports)
                    + f" -> {ports[0]} hold each other paused"
                    + (f"; {len(victims)} more port(s) paused behind the loop" if victims else "")
                ),
                evidence={
                    "cycle": [
                        {
                            "paused": _ref(edges[i].paused),
                            "asserter": _ref(edges[i].asserter),
                            "start": edges[i].start,
                            "end": edges[i].end,
                            "paused_fraction": edges[i].paused_fraction,
                            "read_every_s": edges[i].every_s,
                        }
                        for i in cycle
                    ],
                    "component": [_ref(edges[i].paused) for i in comp],
                    "victims": [
                        {"paused": paused, "asserter": asserter}
                        for paused, asserter in dict.fromkeys(
                            (_ref(edges[i].paused), _ref(edges[i].asserter)) for i in victims
                        )
                    ],
                    "jobs_paused_behind": sorted(set(hurt) - set(jobs)),
                },
                job_ids=tuple(jobs),
            )
        )
    return findings


def _edges_of(f: Finding, key: str) -> set[tuple[str, str]]:
    return {(str(e.get("paused")), str(e.get("asserter"))) for e in f.evidence.get(key) or () if isinstance(e, dict)}


def _formed(deadlock: Finding) -> dt.datetime:
    """The earliest the loop can have formed: a read before the first stalled read of its cycle's edges."""
    cycle = [e for e in deadlock.evidence.get("cycle") or () if isinstance(e, dict)]
    every = dt.timedelta(seconds=max((float(e.get("read_every_s") or 0.0) for e in cycle), default=0.0))
    return min((e["start"] for e in cycle), default=deadlock.start) - every


def fold_spread_storms(findings: Sequence[Finding]) -> list[Finding]:
    """The findings with each PFC storm that is a deadlock's spread folded into that deadlock's finding: one event,
    one finding. A storm whose every edge (paused port, asserter) is an edge of the loop or of what waits behind it,
    on the loop's priority, while the loop formed or held, is the loop seen from one of its queues: a PFC watchdog
    breaking the deadlock in turns declares storms on its victims' queues, and the storm detector's roots can be
    ports whose own stall shows a read later than the storm's (`storms_on_its_loop` keeps what it said). The loop
    formed up to one read before its first stalled read (its edges pause part of that read, below the stall bar),
    so a storm on its victims that ends in that read is the loop forming."""
    deadlocks = [f for f in findings if f.kind == "pfc_deadlock"]
    if not deadlocks:
        return list(findings)
    folded: dict[int, list[Finding]] = {}
    kept: list[Finding] = []
    for f in findings:
        tree = _edges_of(f, "tree") if f.kind == "pfc_storm" else set()
        owner = next(
            (
                k
                for k, d in enumerate(deadlocks)
                if tree
                and d.priority == f.priority
                and tree <= _edges_of(d, "cycle") | _edges_of(d, "victims")
                and f.start <= d.end
                and f.end >= _formed(d)
            ),
            None,
        )
        if owner is None:
            kept.append(f)
        else:
            folded.setdefault(owner, []).append(f)
    out = []
    for f in kept:
        k = next((k for k, d in enumerate(deadlocks) if d is f), None)
        if k is not None and k in folded:
            said = [{"summary": s.summary, "start": s.start, "end": s.end} for s in folded[k]]
            f = f.with_(evidence={**f.evidence, "storms_on_its_loop": said})
        out.append(f)
    return out


DETECTOR = Detector("pfc_deadlock", "1", ("pfc_deadlock",), DeadlockParams, detect)
