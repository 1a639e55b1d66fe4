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
