"""The CNP loss detector on a simulated sender NIC that drops its CNPs (ground truth from the simulator)
and on runs where every CNP is handled."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rocescope.analysis.frames import Window
from rocescope.analysis.run import analyze, overrides_from
from rocescope.sim.scenario import load_scenario
from rocescope.sim.scoring import score

from landed import Landed

CNP = ["cnp_loss"]


def _incast_start(run: Landed) -> float:
    """When the scenario's fan-in began (an incast or microbursts, by what its receiver's port made of it)."""
    (incast,) = [t for t in run.truths if t.kind in ("incast", "microburst")]
    return (incast.start - run.window.start).total_seconds()


def test_finds_the_nic_that_never_handles_its_cnps(land: Callable[..., Landed]) -> None:
    run = land("cnp_loss")
    (truth,) = [t for t in run.truths if t.kind == "cnp_loss"]
    with run.open() as store:
        result = analyze(store, run.window, only=CNP, write=False)
    (f,) = result.findings
    assert f.kind == "cnp_loss" and f.priority == 3 and f.severity == "critical"
    assert f.devices == truth.devices and f.ports == truth.ports  # RDMA port, then the netdev
    assert set(f.job_ids) == set(truth.job_ids)
    # the loss shows once something is congested (the incast): from its first bucket to its end
    incast_at = _incast_start(run)
    assert abs((f.start - run.at(incast_at)).total_seconds()) <= 10
    assert f.end >= run.at(incast_at + 50)
    ev = f.evidence
    assert ev["cnp_handled"] == 0 and ev["handling_peers"] >= 1 and ev["fabric_cnp_lost"] > 0
    assert ev["paused_fraction"] > 0.001  # held back by PFC instead of DCQCN
    assert score(run.truths, result.findings, 1.0)["cnp_loss"].recall == 1.0


def test_ignored_cnps_are_reported_too(land: Callable[..., Landed]) -> None:
    sc = load_scenario("cnp_loss")
    incidents = [{**i.model_dump(), "ignored": True} if i.kind == "cnp_loss" else i.model_dump() for i in sc.incidents]
    sc = sc.model_validate({**sc.model_dump(), "name": "cnp_ignored", "incidents": incidents})
    run = land(sc, duration_s=130)
    with run.open() as store:
        (f,) = analyze(store, run.window, only=CNP, write=False).findings
    assert f.devices == ("gpu-001",) and f.evidence["cnp_ignored"] > 0


def test_a_loss_still_running_at_the_windows_end_needs_min_seconds(land: Callable[..., Landed]) -> None:
    """A window that ends 40 s into the loss holds reads that straddle its end: what it lacks there may yet be
    counted, so the loss needs `min_seconds` (20 s by default, not 100)."""
    run = land("cnp_loss")
    cut = Window(run.window.start, run.at(_incast_start(run) + 40))
    with run.open() as store:
        (f,) = analyze(store, cut, only=CNP, write=False).findings
        assert f.kind == "cnp_loss"
        cfg = overrides_from({"cnp_loss": {"min_seconds": 100}})
        assert analyze(store, cut, cfg, only=CNP, write=False).findings == []


@pytest.mark.full  # a sweep of negative controls over other kinds' runs (the exam measures it: precision)
def test_runs_where_every_cnp_is_handled_find_nothing(land: Callable[..., Landed]) -> None:
    for name in ("baseline", "incast"):  # the other kinds' scenarios: `rocescope eval`
        run = land(name, duration_s=120 if name == "baseline" else None)
        with run.open() as store:
            found = analyze(store, run.window, only=CNP, write=False).findings
        assert found == [], (name, [f.summary for f in found])
