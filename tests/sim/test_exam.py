"""The exam draws its runs from the tested commit: stratified, on fabrics and runs large enough, with no seed a
test or a developer uses."""

from __future__ import annotations

from collections import Counter

import pytest

from rocescope.sim.evaluate import SCENARIOS
from rocescope.sim.exam import EXAM_FLOOR, MIN_HOSTS, MIN_RAILS, MIN_SECONDS, exam_scenario, plan_exam, seed_base
from rocescope.sim.profile import profile_names
from rocescope.sim.scenario import load_scenario


def test_the_seed_base_comes_from_the_commit_and_lies_above_every_development_seed() -> None:
    a, b = seed_base("424fbf2" + "0" * 33), seed_base("0c8f131" + "0" * 33)
    assert a != b and a == seed_base("424fbf2" + "0" * 33)
    assert min(a, b) >= EXAM_FLOOR
    with pytest.raises(ValueError, match="tested commit"):
        seed_base(" ")


def test_the_exam_is_stratified_over_kinds_profiles_fabrics_and_baselines() -> None:
    plan = plan_exam("0c8f131e")
    runs = [r for r in plan if not r.is_baseline]
    baselines = [r for r in plan if r.is_baseline]
    kind_of = {name: kind for kind, names in SCENARIOS.items() for name in names}
    per_kind = Counter(kind_of[r.name] for r in runs)
    assert set(per_kind) == set(SCENARIOS) and min(per_kind.values()) >= 10
    pairs = {(kind_of[r.name], r.profile) for r in runs}
    assert pairs == {(k, p) for k in SCENARIOS for p in profile_names()}  # every (kind, profile) at least once
    assert len(baselines) >= 5
    seeds = [r.seed for r in plan]
    assert len(set(seeds)) == len(seeds) and min(seeds) >= EXAM_FLOOR
    for r in plan:
        assert not isinstance(r.scenario, str)
        fabric = r.scenario.fabric
        assert fabric.hosts >= MIN_HOSTS and fabric.rails >= MIN_RAILS and r.scenario.duration >= MIN_SECONDS
    assert [(r.name, r.profile, r.seed) for r in plan_exam("0c8f131e")] == [(r.name, r.profile, r.seed) for r in plan]
    other = plan_exam("424fbf2a")
    assert [(r.name, r.profile) for r in other] != [(r.name, r.profile) for r in plan]


def test_the_full_exam_runs_the_whole_factorial() -> None:
    plan = plan_exam("0c8f131e", kinds=["pfc_storm"], seeds_per_kind=2, baselines=0, full=True)
    cells = Counter((r.name, r.profile) for r in plan)
    assert set(cells) == {(n, p) for n in SCENARIOS["pfc_storm"] for p in profile_names()}
    assert set(cells.values()) == {2}


def test_a_scenario_on_the_exams_fabric_keeps_its_incidents_and_jobs() -> None:
    small = exam_scenario("incast")
    assert (small.fabric.hosts, small.fabric.rails, small.duration) == (32, 4, 180.0)
    assert small.jobs == load_scenario("incast").jobs
    (incast,) = small.incidents  # the 8 hosts after gpu-016 on its own 16-host fabric, not gpu-017..024
    assert incast.senders == [f"gpu-{n:03d}" for n in range(1, 9)]
    assert incast.model_copy(update={"senders": 8}) == load_scenario("incast").incidents[0]
    misconfig = exam_scenario("pfc_misconfig")  # PFC off at gpu-001's port: still on the incast's path
    assert "gpu-001" in misconfig.incidents[1].senders
    large = exam_scenario("incast_large")  # a fabric larger than the exam's minimum stays as it is
    assert (large.fabric.hosts, large.fabric.host_ports_per_leaf) == (72, 24)
