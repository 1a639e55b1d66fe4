"""The PFC storm detector on simulated storms (ground truth from the simulator) and clean runs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rocescope.analysis.run import analyze, overrides_from
from rocescope.sim.scoring import score

from landed import Landed

STORM = ["pfc_storm"]


def test_finds_the_storm_its_root_its_spread_and_the_job(land: Callable[..., Landed]) -> None:
    run = land("pfc_storm")
    (truth,) = run.truths
    with run.open() as store:
        result = analyze(store, run.window, only=STORM, write=False)
    (f,) = result.findings
    assert f.kind == "pfc_storm" and f.priority == 3 and f.severity == "critical"
    assert f.ports == truth.ports  # the asserting NIC port first, then the leaf port it holds paused
    assert f.devices[:2] == truth.devices
    assert set(f.job_ids) == set(truth.job_ids)
    assert abs((f.start - truth.start).total_seconds()) <= 2 and abs((f.end - truth.end).total_seconds()) <= 2
    tree = f.evidence["tree"]
    assert tree[0]["asserter"] == truth.ports[0] and len(tree) >= 2  # the pause spread upstream
    assert f.evidence["paused_fraction"] > 0.95
    assert score(run.truths, result.findings, 1.0)["pfc_storm"].recall == 1.0


def test_a_longer_watchdog_time_than_the_storm_finds_nothing(land: Callable[..., Landed]) -> None:
    run = land("pfc_storm")
    with run.open() as store:
        cfg = overrides_from({"pfc_storm": {"min_seconds": 45}})
        assert analyze(store, run.window, cfg, only=STORM, write=False).findings == []


@pytest.mark.full  # a sweep of negative controls over other kinds' runs (the exam measures it: precision)
def test_congestion_pauses_and_deadlocks_are_not_storms(land: Callable[..., Landed]) -> None:
    for name in ("baseline", "incast", "pfc_deadlock", "pfc_misconfig"):
        run = land(name, duration_s=120 if name == "baseline" else None)
        with run.open() as store:
            found = analyze(store, run.window, only=STORM, write=False).findings
        assert found == [], (name, [f.summary for f in found])
