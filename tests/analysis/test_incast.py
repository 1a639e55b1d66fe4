"""The incast detector on simulated incasts (ground truth from the simulator), an incast with a
CNP-dropping sender, and runs with no incast at all (including microbursts into the same kind of port)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rocescope.analysis.run import analyze, overrides_from
from rocescope.sim.scoring import score

from landed import Landed

INCAST = ["incast"]


def test_finds_the_incast_its_receiver_senders_and_jobs(land: Callable[..., Landed]) -> None:
    run = land("incast")
    (truth,) = [t for t in run.truths if t.kind == "incast"]
    with run.open() as store:
        result = analyze(store, run.window, only=INCAST, write=False)
    (f,) = result.findings
    assert f.kind == "incast" and f.priority == 3 and f.severity == "critical"
    assert f.devices[0] == truth.devices[0] and f.devices[1] == truth.devices[1]  # receiver, then its leaf
    assert f.ports[0] == truth.ports[0] and f.ports[1] == truth.ports[1]  # the receiver-facing port, the NIC
    senders = set(truth.devices[2:])
    assert senders <= set(f.devices) and f.evidence["fan_in"] >= len(senders)
    assert set(truth.ports[2:]) <= set(f.ports)  # the leaf ports facing every sender
    assert set(f.job_ids) == set(truth.job_ids)
    assert abs((f.start - truth.start).total_seconds()) <= 2 and abs((f.end - truth.end).total_seconds()) <= 2
    assert f.evidence["utilization"] > 0.9 and f.evidence["receiver_cnp_sent_per_s"] > 0
    assert score(run.truths, result.findings, 1.0)["incast"].recall == 1.0


def test_a_sender_that_drops_its_cnps_is_still_a_sender(land: Callable[..., Landed]) -> None:
    """gpu-001 handles no CNP: only its leaf's PFC pauses show it sending. DCQCN holds the other senders below
    line rate between bursts, so the fan-in is microbursts by the definitions; the senders are found the same way
    for both kinds."""
    run = land("cnp_loss")
    (truth,) = [t for t in run.truths if t.kind in ("incast", "microburst")]
    with run.open() as store:
        (f,) = analyze(store, run.window, only=["incast", "microburst"], write=False).findings
    assert f.kind == truth.kind and f.devices[0] == truth.devices[0] and truth.ports[0] in f.ports
    assert set(truth.devices[2:]) <= set(f.devices)
    dropper = next(s for s in f.evidence["senders"] if s["nic"] == "gpu-001:eth0")
    assert dropper["cnp_handled_per_s"] == 0 and dropper["paused_us_per_s"] > 0
    assert set(f.job_ids) == set(truth.job_ids)


def test_stricter_thresholds_find_nothing(land: Callable[..., Landed]) -> None:
    run = land("incast")
    with run.open() as store:
        for strict in ({"min_seconds": 90}, {"min_senders": 20}, {"saturated_load": 0.99}):
            cfg = overrides_from({"incast": strict})
            assert analyze(store, run.window, cfg, only=INCAST, write=False).findings == [], strict


@pytest.mark.parametrize(
    "name",
    [
        "microburst",  # the confusion independent data showed (every microburst reported as an incast)
        *(
            pytest.param(n, marks=pytest.mark.full)
            for n in ("baseline", "pfc_storm", "pfc_deadlock", "polarization", "link_flap")
        ),
    ],
)
def test_no_incast_in_bursts_storms_deadlocks_polarization_flaps_or_clean_runs(
    land: Callable[..., Landed], name: str
) -> None:
    run = land(name, duration_s=120 if name == "baseline" else None)
    with run.open() as store:
        found = analyze(store, run.window, only=INCAST, write=False).findings
    assert found == [], (name, [f.summary for f in found])
