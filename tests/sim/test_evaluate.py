"""The strict score on hand-made findings: the right port, one finding per incident, delay per cadence, `-`."""

from __future__ import annotations

import datetime as dt

from rich.console import Console

from rocescope.analysis.findings import Finding
from rocescope.sim.evaluate import KindScore, Truth, coarsest_cadence, merge, score, scores_table
from rocescope.sim.profile import load_profile

T0 = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)
STORM = Truth(
    "pfc_storm",
    T0,
    T0 + dt.timedelta(seconds=30),
    ("team-a/llm",),
    ("gpu-005", "leaf-r0-01"),
    ("gpu-005:eth0", "leaf-r0-01:Ethernet5/1"),
)


def finding(
    kind: str = "pfc_storm",
    start_s: float = 1.0,
    end_s: float = 30.0,
    ports: tuple[str, ...] = ("leaf-r0-01:Ethernet5/1",),
    jobs: tuple[str, ...] = ("team-a/llm",),
) -> Finding:
    return Finding(
        kind=kind,
        severity="critical",
        start=T0 + dt.timedelta(seconds=start_s),
        end=T0 + dt.timedelta(seconds=end_s),
        devices=tuple(dict.fromkeys(p.split(":")[0] for p in ports)),
        ports=ports,
        priority=3,
        score=1.0,
        summary=f"{kind} at {ports}",
        job_ids=jobs,
    )


def test_a_finding_on_the_right_device_but_another_port_matches_without_localizing() -> None:
    s = score([STORM], [finding(ports=("leaf-r0-01:Ethernet9/1",))])["pfc_storm"]
    assert (s.recall, s.precision, s.localization) == (1.0, 1.0, 0.0)
    s = score([STORM], [finding(ports=("leaf-r0-01:Ethernet9/1",)), finding(start_s=4.0)])["pfc_storm"]
    assert s.localization == 1.0 and s.delays_s == [4.0]  # the localized finding is the best one, though later
    assert score([STORM], [finding(ports=("leaf-r1-01:Ethernet5/1",))])["pfc_storm"].recall == 0.0


def test_an_incident_split_into_findings_shows_as_findings_per_incident() -> None:
    pieces = [finding(start_s=a, end_s=a + 9) for a in (0, 10, 20)]
    s = score([STORM], pieces)["pfc_storm"]
    assert (s.precision, s.recall, s.per_incident) == (1.0, 1.0, 3.0)
    assert score([STORM], pieces[:1])["pfc_storm"].per_incident == 1.0


def test_a_kind_with_nothing_to_score_is_a_dash_never_a_perfect_score() -> None:
    missed = score([STORM], [])["pfc_storm"]
    assert missed.recall == 0.0 and missed.precision is None and missed.localization is None
    assert missed.per_incident is None and missed.as_dict()["delay_p50_s"] is None
    false_alarm = score([], [finding(kind="incast")])["incast"]
    assert false_alarm.precision == 0.0 and false_alarm.recall is None
    console = Console(width=140, record=True)
    console.print(scores_table({"pfc_storm": missed, "incast": false_alarm}))
    text = console.export_text()
    assert "1.000" not in text
    (storm_row,) = [line for line in text.splitlines() if line.strip().startswith("pfc_storm")]
    assert storm_row.split()[1:5] == ["1", "0", "-", "0.000"]


def test_delay_counts_in_seconds_and_in_the_coarsest_cadence_in_play() -> None:
    sonic = load_profile("sonic-spectrum")
    assert coarsest_cadence(sonic, "microburst", 1.0) == 60.0 and coarsest_cadence(sonic, "pfc_storm", 1.0) == 1.0
    assert coarsest_cadence(load_profile("ideal"), "microburst", 1.0) == 1.0
    burst = Truth("microburst", T0, T0 + dt.timedelta(seconds=60), (), ("leaf-r1-01",), ("leaf-r1-01:Ethernet44",))
    late = finding("microburst", 90.0, 150.0, ("leaf-r1-01:Ethernet44",), ())
    on_a_minute = score([burst], [late], cadence={"microburst": 60.0})["microburst"]
    assert on_a_minute.recall == 1.0 and on_a_minute.delays_s == [90.0] and on_a_minute.delays == [1.5]
    assert on_a_minute.as_dict()["delay_p50_cadences"] == 1.5
    # a watermark read a minute later is still the burst; at a 1 s cadence it is 30 s too late to be one
    assert score([burst], [late])["microburst"].recall == 0.0


def test_scores_merge_over_runs() -> None:
    total: dict[str, KindScore] = {}
    merge(total, score([STORM], [finding()]))
    merge(total, score([STORM], [finding(ports=("leaf-r0-01:Ethernet9/1",)), finding(kind="incast")]))
    storm, incast = total["pfc_storm"], total["incast"]
    assert (storm.incidents, storm.recalled, storm.localized, storm.localization) == (2, 2, 1, 0.5)
    assert (incast.findings, incast.precision, incast.recall) == (1, 0.0, None)


def test_an_unobservable_incident_is_neither_found_nor_missed() -> None:
    silent = Truth(**{**STORM.__dict__, "kind": "degraded_optics", "observable": False})
    assert "degraded_optics" not in score([silent], [])
    scores = score([silent], [finding("degraded_optics")])
    assert scores["degraded_optics"].incidents == 0 and scores["degraded_optics"].precision == 1.0
