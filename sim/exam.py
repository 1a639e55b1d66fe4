"""The exam: runs drawn from the tested commit, so the repository holds no exam seed anyone could tune on.

`rocescope eval --exam` derives a seed base from the commit's hash (`seed_base`: every exam seed is at least
`EXAM_FLOOR`, above any seed a test or a development run uses) and draws, stratified (`plan_exam`):

* every incident kind `seeds_per_kind` times (>= 10), each run drawing one of the kind's shipped scenarios and a
  profile, the profiles dealt so that every (kind, profile) pair runs at least once when there are as many
  seeds as profiles;
* `baselines` clean runs (>= 5), each drawing a profile;
* each run on a fabric of at least `MIN_HOSTS` hosts x `MIN_RAILS` rails for at least `MIN_SECONDS` of fabric
  time (`exam_scenario`: the scenario's fabric grown, its jobs and incidents kept where they are);
* each run's fabric shape, job placements and collectives, and its incidents' places, sizes and windows drawn
  from its seed within each kind's range (`rocescope.sim.draw`): the shipped scenario says what happens, the
  seed where, how large and when. `drawn=False` runs the scenarios as written (to compare with exams before).

With `full`, the whole factorial instead: every scenario of every kind under every profile, `seeds_per_kind`
seeds each (a nightly's work). The plan is printed with the commit it came from, so a table can be reproduced.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

import numpy as np

from rocescope.sim.draw import draw_scenario
from rocescope.sim.evaluate import SCENARIOS, PlannedRun
from rocescope.sim.profile import profile_names
from rocescope.sim.scenario import Incast, IncidentModel, Microburst, Scenario, load_scenario
from rocescope.sim.topology import host_name

__all__ = ["EXAM_FLOOR", "MIN_HOSTS", "MIN_RAILS", "MIN_SECONDS", "exam_scenario", "plan_exam", "seed_base"]

#: every exam seed is at least this (development and unit tests use small fixed seeds)
EXAM_FLOOR = 1_000_000_000
MIN_HOSTS = 32
MIN_RAILS = 4
MIN_SECONDS = 180.0
MIN_SEEDS_PER_KIND = 10
MIN_BASELINES = 5


def seed_base(commit: str) -> int:
    """The exam's first seed for `commit` (a git hash, or any text that names the tested tree)."""
    if not commit.strip():
        raise ValueError("the exam needs the tested commit (a git hash) to draw its seeds from")
    digest = hashlib.sha256(commit.strip().encode()).digest()
    return EXAM_FLOOR + int.from_bytes(digest[:4], "big") * 1000


def exam_scenario(name: str) -> Scenario:
    """A shipped scenario on a fabric of at least `MIN_HOSTS` x `MIN_RAILS`, for at least `MIN_SECONDS`: more
    hosts and rails than its incidents need, so the jobs' and the background's traffic cross what they would
    not cross on the small fabric. Its incidents keep their geometry: fan-in senders given as a count (the
    hosts after the receiver, wrapping round the fabric) are named as the scenario's own fabric names them, so
    a misconfigured port or a CNP-dropping NIC on their path stays on it."""
    sc = load_scenario(name)
    fabric = dataclasses.replace(
        sc.fabric, hosts=max(sc.fabric.hosts, MIN_HOSTS), rails=max(sc.fabric.rails, MIN_RAILS)
    )
    hosts = [host_name(n) for n in range(1, sc.fabric.hosts + 1)]
    incidents = [_pinned(inc, hosts) for inc in sc.incidents]
    return sc.model_copy(update={"fabric": fabric, "duration": max(sc.duration, MIN_SECONDS), "incidents": incidents})


def _pinned(inc: IncidentModel, hosts: list[str]) -> IncidentModel:
    """A fan-in whose senders are a count, with them named as on `hosts` (the scenario's own fabric)."""
    if not isinstance(inc, Incast | Microburst) or not isinstance(inc.senders, int) or inc.owner is not None:
        return inc
    k = hosts.index(inc.receiver)
    senders = [hosts[(k + 1 + j) % len(hosts)] for j in range(inc.senders)]
    return inc.model_copy(update={"senders": senders})


def plan_exam(
    commit: str,
    kinds: Sequence[str] | None = None,
    seeds_per_kind: int = MIN_SEEDS_PER_KIND,
    baselines: int = MIN_BASELINES,
    profiles: Sequence[str] | None = None,
    full: bool = False,
    drawn: bool = True,
) -> list[PlannedRun]:
    """The exam's runs for `commit` (see the module docstring)."""

    def run(profile: str, name: str) -> PlannedRun:
        seed = next(seeds)
        sc = exam_scenario(name)
        return PlannedRun(profile, draw_scenario(sc, seed) if drawn else sc, seed)

    kinds = list(kinds or SCENARIOS)
    profiles = list(profiles or profile_names())
    base = seed_base(commit)
    rng = np.random.default_rng(base)
    seeds = iter(range(base, base + 1_000_000))
    plan: list[PlannedRun] = []
    for kind in kinds:
        names = SCENARIOS[kind]
        if full:
            plan += [run(p, n) for n in names for p in profiles for _ in range(seeds_per_kind)]
            continue
        dealt = [str(p) for p in rng.permutation(profiles)]
        while len(dealt) < seeds_per_kind:
            dealt += [str(p) for p in rng.permutation(profiles)]
        for k in range(seeds_per_kind):
            plan.append(run(dealt[k], str(rng.choice(names))))
    for _ in range(baselines):
        plan.append(run(str(rng.choice(profiles)), "baseline"))
    return plan
