"""The PFC deadlock detector on a simulated route loop (ground truth from the simulator), on storms and
congestion, and its wait-for graph helpers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rocescope.analysis.detectors.pfc_deadlock import shortest_cycle, strongly_connected
from rocescope.analysis.run import analyze, overrides_from
from rocescope.sim.scoring import score

from landed import Landed

DEADLOCK = ["pfc_deadlock"]


def test_finds_the_loop_in_order_with_its_jobs(land: Callable[..., Landed]) -> None:
    run = land("pfc_deadlock")
    (truth,) = run.truths
    with run.open() as store:
        result = analyze(store, run.window, only=DEADLOCK, write=False)
    (f,) = result.findings
    assert f.kind == "pfc_deadlock" and f.severity == "critical" and f.priority == 3
    assert f.ports == truth.ports  # leaf1 up -> spine1 down -> leaf2 up -> spine2 down, in wait-for order
    assert f.devices == truth.devices
    assert set(f.job_ids) == set(truth.job_ids)
    assert abs((f.start - truth.start).total_seconds()) <= 2 and abs((f.end - truth.end).total_seconds()) <= 2
    cycle = f.evidence["cycle"]
    assert [c["paused"] for c in cycle] == list(truth.ports)
    # each port is held by the next one's device: the loop closes
    assert all(cycle[k]["asserter"].split(":")[0] == cycle[(k + 1) % 4]["paused"].split(":")[0] for k in range(4))
    assert f.evidence["victims"]  # the hosts feeding the loop are paused behind it, not part of it
    assert score(run.truths, result.findings, 1.0)["pfc_deadlock"].recall == 1.0


def test_a_longer_minimum_than_the_loop_finds_nothing(land: Callable[..., Landed]) -> None:
    run = land("pfc_deadlock")
    with run.open() as store:
        cfg = overrides_from({"pfc_deadlock": {"min_seconds": 150}})
        assert analyze(store, run.window, cfg, only=DEADLOCK, write=False).findings == []


@pytest.mark.full  # a sweep of negative controls over other kinds' runs (the exam measures it: precision)
def test_storms_and_congestion_are_not_deadlocks(land: Callable[..., Landed]) -> None:
    for name in ("baseline", "pfc_storm", "incast", "pfc_misconfig"):
        run = land(name, duration_s=120 if name == "baseline" else None)
        with run.open() as store:
            found = analyze(store, run.window, only=DEADLOCK, write=False).findings
        assert found == [], (name, [f.summary for f in found])


def test_tarjan_and_the_shortest_cycle() -> None:
    # 0 -> 1 -> 2 -> 0 is a loop with 3 -> 0 feeding it and 2 -> 4 a dead end
    adj = [[1], [2], [0, 4], [0], []]
    comps = sorted(strongly_connected(adj))
    assert comps == [[0, 1, 2], [3], [4]]
    assert shortest_cycle(adj, [0, 1, 2], 0) == [0, 1, 2]
    assert shortest_cycle(adj, [0, 1, 2], 1) == [1, 2, 0]
    # two loops through 0: the shorter one
    adj = [[1, 3], [2], [0], [0]]
    assert shortest_cycle(adj, [0, 1, 2, 3], 0) == [0, 3]
    assert strongly_connected([[]]) == [[0]]


def test_a_storm_on_the_loops_own_queues_is_the_deadlocks_finding_not_one_of_its_own() -> None:
    """One event, one finding (issue 29 item 6): SONiC's PFC watchdog breaks a deadlock in turns and declares storms
    on the queues behind the loop (the 369bbde exam, sonic-broadcom: a storm at spine-03:Ethernet36 holding
    leaf-r0-03:Ethernet88, a victim of the loop, in the seconds the loop formed). It is folded into the deadlock's
    finding; a storm elsewhere, or on those queues long before the loop, stays a storm."""
    import datetime as dt

    from rocescope.analysis.detectors.pfc_deadlock import fold_spread_storms
    from rocescope.analysis.findings import Finding

    t0 = dt.datetime(2026, 11, 30, 20, 8, tzinfo=dt.UTC)

    def at(s: float) -> dt.datetime:
        return t0 + dt.timedelta(seconds=s)

    loop = [("leaf-r0-01:Ethernet64", "spine-01:Ethernet0"), ("spine-01:Ethernet16", "leaf-r0-02:Ethernet84")]
    cycle = [{"paused": p, "asserter": a, "start": at(25.6 + k), "end": at(126.0), "read_every_s": 1.0}
             for k, (p, a) in enumerate(loop)]  # fmt: skip
    victim = {"paused": "leaf-r0-03:Ethernet88", "asserter": "spine-03:Ethernet36"}
    deadlock = Finding("pfc_deadlock", "critical", at(30.4), at(126.0), ("leaf-r0-01",), ("leaf-r0-01:Ethernet64",), 3,
                       1.0, "PFC deadlock", evidence={"cycle": cycle, "victims": [victim]})  # fmt: skip

    def storm(start: float, end: float, edge: dict[str, str], prio: int = 3) -> Finding:
        tree = [{**edge, "start": at(start), "end": at(end)}]
        return Finding("pfc_storm", "warning", at(start), at(end), ("spine-03",), (edge["asserter"],), prio, 1.0,
                       f"PFC storm at {edge['asserter']} from {start}", evidence={"tree": tree})  # fmt: skip

    spread = storm(24.6, 28.6, victim)
    # the loop forming, a read before its edges' first stalled read (the 3bffac8 draw, sonic-broadcom 314747072003:
    # a 1 s storm on a victim's queue ending 0.75 s before the cycle's first stalled read, reported on its own)
    forming = storm(23.6, 24.9, victim)
    elsewhere = storm(40.0, 60.0, {"paused": "leaf-r1-01:Ethernet8", "asserter": "gpu-003:eth1"})
    before = storm(-60.0, -40.0, victim)
    other_priority = storm(40.0, 60.0, victim, prio=4)
    out = fold_spread_storms([spread, forming, deadlock, elsewhere, before, other_priority])
    assert [f.summary for f in out if f.kind == "pfc_storm"] == [elsewhere.summary, before.summary,
                                                                 other_priority.summary]  # fmt: skip
    (merged,) = [f for f in out if f.kind == "pfc_deadlock"]
    assert [s["summary"] for s in merged.evidence["storms_on_its_loop"]] == [spread.summary, forming.summary]
