"""The link health detector: a flapping uplink with failing optics (and those optics alone, where the flaps fall
short of an episode), and a port without PFC on the lossless priority (ground truth from the simulator), and runs
without any."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

from rocescope.analysis.run import analyze, overrides_from
from rocescope.pipeline.store import Store
from rocescope.sim.scoring import score

from gear import PORT_CLOCK, fabric, found
from landed import Landed
from telemetry import Telemetry, steps

LINK = ["link_health"]


def _find(run: Landed, cfg: Any = None) -> list[Any]:
    with run.open() as store:
        return analyze(store, run.window, cfg, only=LINK, write=False).findings


def test_one_finding_per_flapping_episode_with_its_errors(land: Callable[..., Landed]) -> None:
    run = land("link_flap")
    (truth,) = run.truths
    found = _find(run)
    (f,) = found  # six flaps, one finding; the FCS errors are its evidence, not a degraded_optics finding
    assert f.kind == "link_flap" and f.priority == -1 and f.severity == "critical"
    assert set(f.ports) == set(truth.ports) and set(f.devices) == set(truth.devices)
    assert set(f.job_ids) == set(truth.job_ids)
    assert abs((f.start - truth.start).total_seconds()) <= 2 and abs((f.end - truth.end).total_seconds()) <= 2
    assert f.evidence["flaps"] == 6
    assert f.evidence["errors"]["leaf-r0-01:Ethernet32"]["rx_fcs_errors"] > 0
    assert score(run.truths, found, 1.0)["link_flap"].recall == 1.0


def test_flap_thresholds_leave_the_failing_optics(land: Callable[..., Landed]) -> None:
    """Where the flaps are no flapping episode, the errors the failing optics made while up remain: one
    degraded-optics finding over the incident, at the leaf's port, with its error ratio."""
    run = land("link_flap")
    fewer = _find(run, overrides_from({"link_health": {"min_flaps": 7}}))
    # six downs are no flapping episode then; what remains is the failing optics
    (f,) = fewer
    assert f.kind == "degraded_optics"
    assert f.ports[0] == "leaf-r0-01:Ethernet32" and set(f.devices) == {"leaf-r0-01", "spine-01"}
    assert abs((f.start - run.at(60)).total_seconds()) <= 2 and abs((f.end - run.at(120)).total_seconds()) <= 2
    assert f.evidence["errors"]["leaf-r0-01:Ethernet32"]["error_ratio"] > 1e-4
    # flaps 10 s apart are separate outages when the merge gap is shorter: none is a flapping episode
    split = _find(run, overrides_from({"link_health": {"merge_gap_s": 5}}))
    assert [f.kind for f in split] == ["degraded_optics"]
    strict = _find(run, overrides_from({"link_health": {"min_flaps": 7, "min_error_ratio": 0.01}}))
    assert strict == []


def test_drops_on_the_lossless_priority_without_pause_are_a_pfc_misconfig(land: Callable[..., Landed]) -> None:
    run = land("pfc_misconfig")
    (truth,) = [t for t in run.truths if t.kind == "pfc_misconfig"]
    found = _find(run)
    (f,) = found
    assert f.kind == "pfc_misconfig" and f.priority == 3
    assert f.ports == truth.ports and f.devices == truth.devices
    assert set(f.job_ids) == set(truth.job_ids)
    assert f.evidence["pg_dropped_packets"] > 0 and f.evidence["pfc_pause_sent"] == 0
    assert score(run.truths, found, 1.0)["pfc_misconfig"].recall == 1.0
    assert _find(run, overrides_from({"link_health": {"min_lossless_drops": 1e9}})) == []


@pytest.mark.full  # a sweep of negative controls over other kinds' runs (the exam measures it: precision)
def test_healthy_links_and_working_pfc_find_nothing(land: Callable[..., Landed]) -> None:
    for name in ("baseline", "pfc_storm"):  # the other kinds' scenarios: `rocescope eval`
        run = land(name, duration_s=120 if name == "baseline" else None)
        found = _find(run)
        assert found == [], (name, [f.summary for f in found])


@pytest.mark.parametrize(
    ("frames", "errors", "degraded"),
    [
        # a failing optic on a lightly used link: 1e-6 of its frames fail, fewer than one a second
        ({"rx_packets": 4e5}, 0.4, True),
        # a compliant 400G link near line rate: 0.3 errors a second are 1e-8 of its frames (IEEE 802.3, BER 1e-12)
        ({"rx_packets": 3e7}, 0.3, False),
        # both frame counters reported: the ratio is of one of them (1.7e-7 of 3e6 frames/s), not of their sum
        ({"rx_packets": 3e6, "rx_unicast_packets": 3e6}, 0.5, True),
        # frames unknown: 0.3/s is what a compliant 400G link may err at line rate; 2/s is out of spec at any speed
        ({}, 0.3, False),
        ({}, 2.0, True),
    ],
)  # fmt: skip
def test_degraded_optics_is_judged_against_a_compliant_links_error_ratio(
    store: Store, now: dt.datetime, frames: dict[str, float], errors: float, degraded: bool
) -> None:
    """A degraded optic is a link out of IEEE 802.3's error spec for the frames it carries, not a fixed number of
    errors a second: a lightly used failing link errs rarely, a busy compliant one now and then."""
    t = Telemetry(now, 180)
    fabric(t)
    for metric, rate in frames.items():
        t.counter("leaf1", "switch", "Ethernet2/1", metric, steps(base=rate), PORT_CLOCK)
    t.counter("leaf1", "switch", "Ethernet2/1", "rx_fcs_errors", steps((30.0, 150.0, errors)), PORT_CLOCK)
    t.land(store)

    optics = found(store, t, "degraded_optics")
    assert [f.ports[0] for f in optics] == (["leaf1:Ethernet2/1"] if degraded else []), [f.summary for f in optics]


def test_a_transient_burst_of_errors_is_no_degraded_optic(store: Store, now: dt.datetime) -> None:
    """A reseat or one transient: five errors over a minute, far above a compliant link's ratio, are too few to
    call the optic failing."""
    t = Telemetry(now, 180)
    fabric(t)
    t.counter("leaf1", "switch", "Ethernet2/1", "rx_packets", steps(base=1e5), PORT_CLOCK)
    t.counter("leaf1", "switch", "Ethernet2/1", "rx_fcs_errors", steps((30.0, 90.0, 5 / 60)), PORT_CLOCK)
    t.land(store)

    assert not found(store, t, "degraded_optics")
