"""The microburst detector on simulated bursts shorter than the polling interval (ground truth from the
simulator), and on runs without them: incasts into the same kind of port must not count."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rocescope.analysis.run import analyze, overrides_from
from rocescope.sim.scoring import KindScore, score

from landed import Landed

BURST = ["microburst"]


def test_finds_the_bursts_per_port_with_count_peak_and_duration(land: Callable[..., Landed]) -> None:
    run = land("microburst")
    (truth,) = run.truths
    with run.open() as store:
        result = analyze(store, run.window, only=BURST, write=False)
    (f,) = result.findings
    assert f.kind == "microburst" and f.priority == 3
    assert f.devices[:2] == truth.devices[:2]  # the receiver, then its leaf
    assert f.ports[:2] == truth.ports[:2]  # the receiver-facing port, the receiver NIC
    assert set(truth.devices[2:]) <= set(f.devices)
    assert set(f.job_ids) == set(truth.job_ids)
    assert abs((f.start - truth.start).total_seconds()) <= 2 and abs((f.end - truth.end).total_seconds()) <= 2
    ev = f.evidence
    assert 110 <= ev["bursts"] <= 121  # one 20 ms burst a second for two minutes
    assert ev["peak_watermark_bytes"] > 1e6 and ev["utilization"] < 0.25
    assert 0.5 < ev["estimated_burst_ms"] <= 20  # a lower bound of the 20 ms bursts
    assert score(run.truths, result.findings, 1.0)["microburst"].recall == 1.0


def test_stricter_thresholds_find_nothing(land: Callable[..., Landed]) -> None:
    run = land("microburst")
    with run.open() as store:
        # (a higher watermark floor alone does not: the queue's own ECN marks show each read passed its Kmin)
        for strict in ({"min_bursts": 200, "min_marked_bursts": 200}, {"saturated_load": 0.05}):
            cfg = overrides_from({"microburst": strict})
            assert analyze(store, run.window, cfg, only=BURST, write=False).findings == [], strict


def test_fan_in_is_a_microburst_or_an_incast_by_what_its_port_did(land: Callable[..., Landed]) -> None:
    """The scenarios inject fan-in; the truth names it by the definitions (`rocescope.sim.truth`), from what the
    receiver's port did: `incast` and `pfc_misconfig` saturate it (an incast), `cnp_loss` does not (DCQCN holds
    the senders below line rate between bursts: microbursts). Each is reported as what it was, once."""
    for name in ("incast", "cnp_loss", "pfc_misconfig"):
        run = land(name)
        with run.open() as store:
            found = analyze(store, run.window, only=["microburst", "incast"], write=False).findings
        scores = score(run.truths, found, 1.0)
        fan_in = {t.kind for t in run.truths if t.kind in ("microburst", "incast")}
        assert fan_in, name
        for kind in ("microburst", "incast"):
            got = scores.get(kind, KindScore(kind))
            assert got.findings == got.recalled == got.incidents == (kind in fan_in), (name, [f.summary for f in found])


@pytest.mark.full  # a sweep of negative controls over other kinds' runs (the exam measures it: precision)
def test_no_bursts_in_storms_deadlocks_polarization_flaps_or_clean_runs(land: Callable[..., Landed]) -> None:
    for name in ("baseline", "pfc_storm", "pfc_deadlock", "polarization", "link_flap"):
        run = land(name, duration_s=120 if name == "baseline" else None)
        with run.open() as store:
            found = analyze(store, run.window, only=BURST, write=False).findings
        assert found == [], (name, [f.summary for f in found])
