"""The strict score on hand-made findings: matching at the anchor, in the evidence interval, fragments against
precision, don't care and unobservable apart from misses, delay per cadence, `-` where nothing counts."""

from __future__ import annotations

import ast
import datetime as dt
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from rocescope.analysis.findings import Finding
from rocescope.analysis.frames import Window
from rocescope.analysis.run import AnalysisResult
from rocescope.sim.evaluate import EvalError, RunOutcome, coarsest_cadence, detectors_ran, group_scores
from rocescope.sim.profile import load_profile
from rocescope.sim.scoring import KindScore, Truth, merge, score, scores_table
from rocescope.sim.truth import clock_error_s, unobservable_by_cadence

T0 = dt.datetime(2025, 1, 1, 12, tzinfo=dt.UTC)
SIM = Path(__file__).resolve().parents[2] / "sim"
STORM = Truth(
    "pfc_storm",
    T0,
    T0 + dt.timedelta(seconds=30),
    ("team-a/llm",),
    ("gpu-005", "leaf-r0-01"),
    ("gpu-005:eth0", "leaf-r0-01:Ethernet5/1"),
    anchor=("gpu-005:eth0",),  # the root: the NIC asserting the pauses
)
INCAST = Truth(
    "incast",
    T0,
    T0 + dt.timedelta(seconds=60),
    (),
    ("gpu-016", "leaf-r0-01", "gpu-001", "gpu-002"),
    ("leaf-r0-01:Ethernet60", "gpu-016:eth0", "leaf-r0-01:Ethernet0", "leaf-r0-01:Ethernet4"),
    anchor=("leaf-r0-01:Ethernet60", "gpu-016:eth0"),
)


def finding(
    kind: str = "pfc_storm",
    start_s: float = 1.0,
    end_s: float = 30.0,
    ports: tuple[str, ...] = ("gpu-005:eth0", "leaf-r0-01:Ethernet5/1"),
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


def test_a_finding_at_a_senders_port_does_not_match_an_incast() -> None:
    at_sender = finding("incast", 0, 60, ("leaf-r0-01:Ethernet0", "gpu-001:eth0"), ())
    s = score([INCAST], [at_sender])["incast"]
    assert (s.recall, s.precision, s.localization) == (0.0, 0.0, 0.0)  # found in time on its leaf, not at its port
    at_receiver = finding("incast", 0, 60, ("leaf-r0-01:Ethernet60", "leaf-r0-01:Ethernet0"), ())
    s = score([INCAST], [at_receiver])["incast"]
    assert (s.recall, s.precision, s.localization) == (1.0, 1.0, 1.0)


def test_the_finding_located_at_an_incidents_anchor_is_its_best_not_one_naming_it_as_a_sender() -> None:
    # microbursts into two NICs in one tree job: each finding names the other's receive port among its senders
    at = {h: f"leaf-r0-01:Ethernet{4 * k}" for k, h in enumerate(("gpu-001", "gpu-002"))}
    truths = [
        Truth("microburst", T0, T0 + dt.timedelta(seconds=60), (), ("leaf-r0-01",), (at[h], f"{h}:eth0"),
              anchor=(at[h], f"{h}:eth0"))
        for h in at
    ]  # fmt: skip
    one = finding("microburst", 0.0, 60.0, (at["gpu-001"], "gpu-001:eth0", at["gpu-002"]), ())
    two = finding("microburst", 0.5, 60.0, (at["gpu-002"], "gpu-002:eth0", at["gpu-001"]), ())
    s = score(truths, [one, two])["microburst"]
    assert (s.recall, s.true_findings, s.fragments, s.precision) == (1.0, 2, 0, 1.0)  # before: 1 true, 1 fragment


def test_a_senders_port_a_finding_names_as_context_claims_no_incident_there() -> None:
    """A burst into gpu-003 whose own incident sits at a definition's edge (don't care) names, as its senders'
    ports, gpu-001's receive port, where a scored burst has its own finding: the first finding is neither that
    burst's fragment nor, alone, its detection (an exam draw, 867d8df ideal baseline: 66 such "fragments")."""
    ports = {h: f"leaf-r0-01:Ethernet{4 * k}" for k, h in enumerate(("gpu-001", "gpu-002", "gpu-003"))}

    def burst(host: str, dont_care: bool = False) -> Truth:
        at = (ports[host], f"{host}:eth0")
        return Truth("microburst", T0, T0 + dt.timedelta(seconds=60), (), ("leaf-r0-01",), at, anchor=at,
                     dont_care=dont_care)  # fmt: skip

    truths = [burst("gpu-001"), burst("gpu-003", dont_care=True)]
    own = finding("microburst", 0.0, 60.0, (ports["gpu-001"], "gpu-001:eth0"), ())
    naming = replace(
        finding("microburst", 0.0, 60.0, (ports["gpu-003"], "gpu-003:eth0", ports["gpu-001"], ports["gpu-002"]), ()),
        evidence={"senders": [{"nic": f"{h}:eth0", "port": ports[h]} for h in ("gpu-001", "gpu-002")]},
    )
    s = score(truths, [own, naming])["microburst"]
    assert (s.recall, s.true_findings, s.fragments, s.findings, s.precision) == (1.0, 1, 0, 1, 1.0)
    alone = score(truths, [naming])["microburst"]
    assert (alone.recall, alone.findings) == (0.0, 0)  # its own incident is don't care: neither true nor false


def test_a_clean_baselines_false_findings_are_those_matching_nothing_the_traffic_made() -> None:
    burst = Truth("microburst", T0, T0 + dt.timedelta(seconds=60), (), ("leaf-r0-01",), ("leaf-r0-01:Ethernet0",))
    real = finding("microburst", 0.0, 60.0, ("leaf-r0-01:Ethernet0",), ())  # a tree parent's fan-in, labelled
    false = finding("incast", 0.0, 60.0, ("leaf-r0-01:Ethernet0",), ())
    run = RunOutcome("baseline", 1, [burst], [real, false], score([burst], [real, false]), 180.0, 1.0)
    (profile,) = group_scores([run], lambda o: o.profile)
    assert profile.baseline_findings == [false] and profile.baseline_s == 180.0


def test_a_finding_on_the_peer_of_a_storms_root_does_not_match() -> None:
    s = score([STORM], [finding(ports=("leaf-r0-01:Ethernet5/1",))])["pfc_storm"]
    assert (s.recall, s.precision) == (0.0, 0.0)
    assert score([STORM], [finding(ports=("leaf-r1-01:Ethernet5/1",))])["pfc_storm"].localization is None


def test_a_late_finding_outside_the_evidence_interval_does_not_match() -> None:
    burst = Truth("microburst", T0, T0 + dt.timedelta(seconds=60), (), ("leaf-r1-01",), ("leaf-r1-01:Ethernet44",))
    late = finding("microburst", 90.0, 150.0, ("leaf-r1-01:Ethernet44",), ())
    assert score([burst], [late], cadence={"microburst": 60.0})["microburst"].recall == 0.0  # no 2x-cadence slack
    # a 60 s watermark whose interval (the read before it to the read that showed it) holds the burst matches
    read = finding("microburst", 50.0, 110.0, ("leaf-r1-01:Ethernet44",), ())
    s = score([burst], [read], cadence={"microburst": 60.0})["microburst"]
    assert s.recall == 1.0 and s.delays_s == [50.0] and s.delays == [pytest.approx(50 / 60)]
    # the clock error the profile allows widens the incident, and nothing else does
    just_after = finding("microburst", 60.4, 70.0, ("leaf-r1-01:Ethernet44",), ())
    assert score([burst], [just_after])["microburst"].recall == 0.0
    assert score([burst], [just_after], clock_s=clock_error_s(load_profile("arista-eos")))["microburst"].recall == 1.0


def test_a_fragment_lowers_precision() -> None:
    pieces = [finding(start_s=a, end_s=a + 9) for a in (0, 10, 20)]
    s = score([STORM], pieces)["pfc_storm"]
    assert (s.recall, s.true_findings, s.fragments, s.findings) == (1.0, 1, 2, 3)
    assert s.precision == pytest.approx(1 / 3) and s.per_incident == 3.0
    assert score([STORM], pieces[:1])["pfc_storm"].per_incident == 1.0


def test_dont_care_and_unobservable_incidents_are_neither_found_nor_missed_nor_false() -> None:
    edge = Truth(**{**STORM.__dict__, "dont_care": True})
    s = score([edge], [finding()])["pfc_storm"]
    assert (s.incidents, s.findings, s.dont_care, s.precision, s.recall) == (0, 0, 1, None, None)
    silent = Truth(**{**STORM.__dict__, "observable": False})
    coarse = Truth(**{**STORM.__dict__, "unresolved": "read every 60 s"})
    s = score([silent, coarse, STORM], [])["pfc_storm"]
    assert (s.incidents, s.unobservable, s.unresolved, s.recall) == (1, 1, 1, 0.0)
    assert s.as_dict()["unobservable_share"] == 0.667
    elsewhere = finding(ports=("gpu-009:eth0",))  # matches nothing: false, whatever else the run holds
    assert score([edge], [elsewhere])["pfc_storm"].precision == 0.0


def test_a_finding_that_cannot_verify_its_kind_is_neither_a_detection_nor_false() -> None:
    """CNPs no monitored NIC handled, sent to peers that count none: the detector says it cannot tell lost from
    handled where nobody counts (info, `verifiable` false). That claims no loss: on a run without one it is no
    false finding, and on a run with one it finds nothing."""
    loss = Truth("cnp_loss", T0, T0 + dt.timedelta(seconds=60), (), ("gpu-016",), ("gpu-016:eth0",),
                 anchor=("gpu-016:eth0",))  # fmt: skip
    said = replace(finding("cnp_loss", ports=("gpu-016:eth0",)), severity="info", evidence={"verifiable": False})
    assert score([], [said]).get("cnp_loss") is None  # nothing to count: no false finding
    s = score([loss], [said])["cnp_loss"]
    assert (s.findings, s.recalled, s.recall) == (0, 0, 0.0)
    verified = replace(said, severity="critical", evidence={"verifiable": True})
    assert score([loss], [verified])["cnp_loss"].recall == 1.0


def test_a_whole_job_slowed_by_an_incident_its_detectors_missed_is_neither_found_nor_false() -> None:
    """A slowdown of every rank alike (no straggler named) of the job a storm concerned while it lasted: the storm
    went unreported, the job did slow: neither true nor false. One naming a straggler, or of another job, or after
    the storm, is false."""

    def slow(ports: tuple[str, ...] = (), jobs: tuple[str, ...] = ("team-a/llm",), at: float = 5.0) -> Finding:
        f = finding("unexplained_slowdown", at, at + 30.0, ports, jobs)
        return f if ports else f.with_(devices=())

    s = score([STORM], [slow()])
    assert s["unexplained_slowdown"].findings == 0 and s["pfc_storm"].recall == 0.0
    for false in (slow(ports=("gpu-007:eth0",)), slow(jobs=("team-b/llm",)), slow(at=120.0)):
        assert score([STORM], [false])["unexplained_slowdown"].precision == 0.0


def test_a_raising_detector_fails_the_run() -> None:
    window = Window(T0, T0 + dt.timedelta(seconds=60))
    detectors_ran(AnalysisResult("r", window, []), "incast", 1, "ideal", "fast")
    broken = AnalysisResult("r", window, [], failed={"incast": "ZeroDivisionError: float division by zero"})
    with pytest.raises(EvalError, match="incast: ZeroDivisionError"):
        detectors_ran(broken, "incast", 1, "ideal", "fast")


def test_a_kind_with_nothing_to_score_is_a_dash_never_a_perfect_score() -> None:
    missed = score([STORM], [])["pfc_storm"]
    assert missed.recall == 0.0 and missed.precision is None and missed.localization is None
    assert missed.per_incident is None and missed.as_dict()["delay_p50_s"] is None
    false_alarm = score([], [finding(kind="incast")])["incast"]
    assert false_alarm.precision == 0.0 and false_alarm.recall is None
    console = Console(width=160, record=True)
    console.print(scores_table({"pfc_storm": missed, "incast": false_alarm}))
    text = console.export_text()
    assert "1.000" not in text
    (storm_row,) = [line for line in text.splitlines() if line.strip().startswith("pfc_storm")]
    assert storm_row.split()[1:5] == ["1", "0", "-", "0.000"]


def test_delay_counts_in_the_coarsest_cadence_in_play() -> None:
    sonic = load_profile("sonic-spectrum")
    assert coarsest_cadence(sonic, "microburst", 1.0) == 60.0 and coarsest_cadence(sonic, "pfc_storm", 1.0) == 1.0
    assert coarsest_cadence(load_profile("ideal"), "microburst", 1.0) == 1.0


def test_microbursts_the_gear_reads_too_seldom_are_unresolved_not_missed() -> None:
    sonic = load_profile("sonic-spectrum")  # watermarks every 60 s, no ECN counters, but CNPs counted every second
    assert unobservable_by_cadence("microburst", sonic, 1.0, 120.0) is None
    slow_nics = sonic.model_copy(update={"nic": sonic.nic.model_copy(update={"every": 10.0})})
    why = unobservable_by_cadence("microburst", slow_nics, 1.0, 120.0)
    assert why is not None and "every 10 s" in why
    assert unobservable_by_cadence("pfc_storm", slow_nics, 1.0, 30.0) is None  # pause counters integrate


def test_scores_merge_over_runs() -> None:
    total: dict[str, KindScore] = {}
    merge(total, score([STORM], [finding()]))
    merge(total, score([STORM], [finding(ports=("leaf-r0-01:Ethernet5/1",)), finding(kind="incast")]))
    storm, incast = total["pfc_storm"], total["incast"]
    assert (storm.incidents, storm.recalled, storm.near, storm.localization) == (2, 1, 2, 0.5)
    assert (incast.findings, incast.precision, incast.recall) == (1, 0.0, None)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_module_under_sim_imports_a_detector_and_the_truth_reads_no_analysis() -> None:
    """The truth borrows nothing: no sim module reaches a detector (its rule or constants), and the modules that
    write the truth read nothing of the analysis at all; only the harness that runs and scores it does."""
    harness = {"evaluate.py", "scoring.py", "impact_eval.py", "exam.py", "other_detectors.py"}
    for path in sorted(SIM.rglob("*.py")):
        imported = _imports(path)
        assert not [m for m in imported if m.startswith("rocescope.analysis.detectors")], path.name
        if path.name not in harness:
            assert not [m for m in imported if m.startswith("rocescope.analysis")], path.name


def test_a_job_wide_slowdown_while_traffic_of_no_incident_shared_its_links_is_neither_true_nor_false() -> None:
    """A don't-care slowdown truth (`World._label_contention`: a storage read on the job's links) excuses a slowdown
    of that job, found without a host, and of no other job."""
    contention = Truth("unexplained_slowdown", T0, T0 + dt.timedelta(seconds=60), ("team-b/ft",), (), (),
                       dont_care=True)  # fmt: skip
    for job, counted in (("team-b/ft", 0), ("team-a/llm", 1)):
        slow = finding("unexplained_slowdown", 10, 50, (), (job,))
        s = score([contention], [slow])["unexplained_slowdown"]
        assert (s.incidents, s.findings, s.dont_care) == (0, counted, 1)
