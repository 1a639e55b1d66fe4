"""The impact and blame scores against hand-made truths and findings: a loss within 20% is right and outside it
wrong, a job the finding does not measure is wrong, blame counts only on multi-job incidents and needs both
sets, and a straggler a fabric finding claims as its victim is not found."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from rocescope.analysis.findings import Finding
from rocescope.sim.evaluate import RunOutcome
from rocescope.sim.impact_eval import impact_json, impact_scores, impact_table
from rocescope.sim.scoring import Truth, score

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(a: float, b: float) -> tuple[dt.datetime, dt.datetime]:
    return T0 + dt.timedelta(seconds=a), T0 + dt.timedelta(seconds=b)


def truth(kind: str, span: tuple[float, float], culprits: tuple[str, ...], lost: dict[str, float]) -> Truth:
    return Truth(kind, *at(*span), tuple(lost), ("gpu-1",), ("gpu-1:eth0",), culprits, tuple(lost), lost)


def finding(kind: str, span: tuple[float, float], culprits: list[str], lost: dict[str, float]) -> Finding:
    impact = {j: {"gpu_seconds_lost": v, "hurt": True} for j, v in lost.items()}
    blame: dict[str, Any] = {"culprit_jobs": culprits, "victim_jobs": sorted(lost)}
    ev = {"impact": impact, "blame": blame}
    return Finding(kind, "warning", *at(*span), ("gpu-1",), ("gpu-1:eth0",), 3, 1.0, kind, ev, tuple(lost))


def run(truths: list[Truth], findings: list[Finding]) -> RunOutcome:
    return RunOutcome("s", 1, truths, findings, score(truths, findings), 1.0, 1.0)


def test_losses_blame_and_stragglers_are_scored_against_the_truth() -> None:
    incast = truth("incast", (60, 120), ("b",), {"a": 100.0, "b": 10.0})
    storm = truth("pfc_storm", (200, 230), ("a",), {"a": 50.0})
    straggler = truth("unexplained_slowdown", (300, 360), (), {"c": 80.0})
    lonely = truth("unexplained_slowdown", (400, 460), (), {"c": 80.0})
    found = [
        finding("incast", (60, 120), ["b"], {"a": 115.0, "b": 13.0}),  # a within 20%, b 30% off
        finding("pfc_storm", (200, 230), ["a"], {}),  # a not measured
        finding("unexplained_slowdown", (300, 360), [], {"c": 79.0}),
        finding("unexplained_slowdown", (400, 460), [], {"c": 80.0}),
        finding("link_flap", (395, 470), [], {"c": 1.0}),  # a fabric finding blamed for the second straggler
    ]
    scores = impact_scores([run([incast, storm, straggler, lonely], found)])
    assert (scores["incast"].losses, scores["incast"].losses_right) == (2, 1)
    assert (scores["incast"].multi_job, scores["incast"].blame_right) == (1, 1)
    assert (scores["pfc_storm"].losses, scores["pfc_storm"].loss, scores["pfc_storm"].blame) == (1, 0.0, None)
    s = scores["unexplained_slowdown"]
    assert (s.stragglers, s.stragglers_right, s.losses_right) == (2, 1, 2)
    assert [d["kind"] for d in impact_json([run([incast], found[:1])])] == ["incast"]
    assert impact_table(scores).row_count == 3


def test_a_wrong_culprit_fails_blame_and_unfound_stragglers_count() -> None:
    incast = truth("incast", (60, 120), ("b",), {"a": 100.0})
    missed = truth("unexplained_slowdown", (300, 360), (), {"c": 80.0})
    scores = impact_scores([run([incast, missed], [finding("incast", (60, 120), ["a"], {"a": 100.0})])])
    assert (scores["incast"].culprits_right, scores["incast"].victims_right, scores["incast"].blame) == (0, 1, 0.0)
    assert (scores["unexplained_slowdown"].stragglers, scores["unexplained_slowdown"].straggler) == (1, 0.0)
    # a don't-care slowdown (a job sharing its links with traffic of no incident) is no straggler to find
    contention = replace(missed, dont_care=True)
    assert "unexplained_slowdown" not in impact_scores([run([incast, contention], [])])
