"""The hash polarization detector on simulated polarization (ground truth from the simulator), on the same
fabric with independent per-switch seeds, and on other kinds' runs."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

import numpy as np
import polars as pl
import pyarrow as pa
import pytest

from rocescope.analysis.detectors.polarization import (
    PolarizationParams,
    SpineEpisode,
    _judge,
    _unlikely,
    chance_idle,
    imbalance,
)
from rocescope.analysis.run import analyze, overrides_from
from rocescope.pipeline.batch import conform
from rocescope.sim.scenario import load_scenario
from rocescope.sim.scoring import score

from landed import Landed

POL = ["polarization"]


def test_one_finding_per_incident_with_the_hot_spine_links_and_the_jobs(land: Callable[..., Landed]) -> None:
    run = land("polarization")
    (truth,) = run.truths
    with run.open() as store:
        result = analyze(store, run.window, only=POL, write=False)
    (f,) = result.findings  # every spine and group in one finding, not one per link
    assert f.kind == "polarization"
    assert abs((f.start - truth.start).total_seconds()) <= 2 and abs((f.end - truth.end).total_seconds()) <= 2
    assert set(f.ports) == set(truth.ports)  # the members above their group's mean
    assert f.devices[:2] == ("spine-01", "spine-02") and set(f.devices) == set(truth.devices)
    assert set(f.job_ids) == set(truth.job_ids)
    spines = f.evidence["spines"]
    assert all(s["agreeing_groups"] == s["active_groups"] == 8 for s in spines)
    assert all(max(s["position_share"]) > 0.99 and s["jain_positions"] < 0.51 for s in spines)
    # before the incident the same spines spread (the un-polarized reference in the window)
    assert all(max(s["reference_position_share"]) < 0.75 for s in spines)
    assert "flow_entropy" not in f.evidence  # this scenario runs without a packet mirror
    assert score(run.truths, result.findings, 1.0)["polarization"].recall == 1.0


def test_stricter_thresholds_find_nothing(land: Callable[..., Landed]) -> None:
    run = land("polarization")
    with run.open() as store:
        for strict in ({"min_seconds": 150}, {"min_groups": 9}, {"cold_share": 0.001, "min_gbps": 1e6}):
            cfg = overrides_from({"polarization": strict})
            assert analyze(store, run.window, cfg, only=POL, write=False).findings == [], strict


def test_independent_seeds_with_few_elephant_flows_are_not_polarization(land: Callable[..., Landed]) -> None:
    """The polarization fabric and job with per-switch seeds all along: natural imbalance only. Seed 7
    is the most skewed of seeds 1-12 (a spine sends 67% of its bytes on its groups' first members)."""
    clean = load_scenario("polarization").model_copy(update={"incidents": [], "seed": 7})
    run = land(clean, duration_s=60)
    with run.open() as store:
        assert analyze(store, run.window, only=POL, write=False).findings == []
        loose = overrides_from({"polarization": {"cold_share": 0.7, "min_group_agreement": 0.5, "max_chance": 1}})
        assert analyze(store, run.window, loose, only=POL, write=False).findings  # the thresholds are what holds


@pytest.mark.full  # a sweep of negative controls over other kinds' runs (the exam measures it: precision)
def test_other_runs_are_not_polarization(land: Callable[..., Landed]) -> None:
    for name in ("baseline", "pfc_deadlock", "link_flap"):
        run = land(name, duration_s=120 if name == "baseline" else None)
        with run.open() as store:
            found = analyze(store, run.window, only=POL, write=False).findings
        assert found == [], (name, [f.summary for f in found])


@pytest.mark.parametrize(
    ("groups", "n", "flows"), [(4, 4, (1, 1)), (8, 4, (1, 1)), (8, 2, (1, 1)), (6, 4, (1, 3)), (8, 4, (2, 2))]
)
def test_chance_idle_does_not_understate_chance(groups: int, n: int, flows: tuple[int, int]) -> None:
    """Independent hashing, simulated: each group hashes its flows onto random members; the cold set is
    picked after looking, as the detector does (positions idle in 3/4 of the groups). Calls at level a
    must happen at most a of the time (Monte Carlo, 3 sigma). The earlier test (binomial tail, one flow
    per group, no factor for picking the set) called 4 single-flow groups of 4 links 1.6% of the time
    at a = 1%: the false polarization on a large, nearly idle fabric."""
    rng = np.random.default_rng(groups * 100 + n)
    trials, p_values = 4000, []
    for _ in range(trials):
        hit = np.zeros((groups, n), dtype=bool)
        for g in range(groups):
            hit[g, rng.integers(0, n, rng.integers(flows[0], flows[1] + 1))] = True
        cold = [k for k in range(n) if (~hit[:, k]).mean() >= 0.75]
        agreeing = int((~hit[:, cold]).all(axis=1).sum()) if 0 < len(cold) < n else 0
        if agreeing >= max(4, 0.75 * groups):
            p_values.append(chance_idle(hit.sum(axis=1).tolist(), agreeing, n, len(cold)))
    for level in (0.01, 0.05):
        called = sum(p <= level for p in p_values) / trials
        assert called <= level + 3 * (level / trials) ** 0.5, (level, called)


def test_chance_idle_values() -> None:
    assert chance_idle([1] * 4, 4, 4, 3) == pytest.approx(4 * 0.25**4)  # one flow each, same member hot
    assert chance_idle([2] * 8, 8, 4, 2) == pytest.approx(6 * (1 / 6) ** 8)  # two busy members per group
    assert chance_idle([3, 1], 1, 4, 2) == pytest.approx(1.0)  # capped: a set picked after looking
    assert chance_idle([4], 1, 4, 1) == 0.0  # every member busy: it idles none


def _episode(spine: str, chance: float, start_s: float = 60.0) -> SpineEpisode:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    at, to = t0 + dt.timedelta(seconds=start_s), t0 + dt.timedelta(seconds=start_s + 120)
    return SpineEpisode(spine, 2, (1,), at, to, (), (), {"chance_independent": chance})


@pytest.mark.parametrize(
    ("chances", "kept"),
    [
        ((0.005,), 1),  # unlikely alone
        ((0.0156,), 0),  # seven groups of one flow: 2 / 2^7, could be luck
        ((0.0156, 0.031), 2),  # two spines, 7 and 6 groups agreeing at once: Fisher-combined 0.004
        ((0.05, 0.05), 0),  # two borderline spines: combined 0.017, could still be luck
    ],
)
def test_spines_that_agree_at_once_combine_their_chances(chances: tuple[float, ...], kept: int) -> None:
    tested = {2: len(chances)}
    eps = [_episode(f"spine-{k}", c) for k, c in enumerate(chances)]
    assert len(_unlikely(eps, 0.01, tested)) == kept
    far_apart = [_episode(f"spine-{k}", c, start_s=1000.0 * k) for k, c in enumerate(chances)]
    assert len(_unlikely(far_apart, 0.01, tested)) == sum(c <= 0.01 for c in chances)  # not at once: each alone


def test_a_spine_counts_once_and_every_spine_tested_counts() -> None:
    """Fisher's method combines independent tests, all of them. An exam run with no polarization (srlinux, 4
    spines, groups of 4) showed spine-02 idle in 8 of 9 groups twice (chance 0.032 each: the same groups looked at
    in two spans) and spine-04 in 10 of 11 (0.11): multiplied as three tests they gave 0.006, a false
    polarization; one spine once among the four tested, 0.19."""
    eps = [_episode("spine-02", 0.0322), _episode("spine-04", 0.111), _episode("spine-02", 0.0322, start_s=150.0)]
    assert _unlikely(eps, 0.01, {2: 4}) == []
    assert _unlikely(eps, 0.01, {2: 2}) == []  # each spine once: 0.024, even counting only these two
    two = [_episode("spine-0", 0.0156), _episode("spine-1", 0.031)]
    assert len(_unlikely(two, 0.01, {2: 2})) == 2
    assert _unlikely(two, 0.01, {2: 4}) == []  # two more spines tested that showed nothing: 0.054


def _groups(elephants: list[list[int]], trickle: list[int], n: int = 16) -> pl.DataFrame:
    """One spine's groups (one per leaf) over one sample: each group's elephants share 90% of its bytes, and a
    trickle (1.5% each: small flows, control traffic) sits on the `trickle` positions of every group."""
    t0 = dt.datetime(2026, 1, 1, 0, 1, tzinfo=dt.UTC)
    rows = []
    for g, big in enumerate(elephants):
        share = [0.0] * n
        for k in big:
            share[k] += 90.0 / len(big)
        for k in trickle:
            share[k] += 1.5
        rows += [("s1", f"leaf-{g}", f"Ethernet{k}", n, k, t0, share[k] * 1e9) for k in range(n)]
    schema = ["device", "leaf", "port", "n", "pos", "t", "delta"]
    return pl.DataFrame(rows, schema=schema, orient="row")


def test_a_trickle_on_the_cold_members_does_not_make_agreement_look_rare() -> None:
    """An exam run with no polarization (16 links per group, one or two elephants each): six of eight groups
    carried under the cold allowance on one same set of six members, a trickle of small flows on three of them.
    Counting those trickles as busy members put the chance of that agreement at 5e-5; a cold set may hold them,
    so only the members each above the whole set's allowance are busy: the agreement is likely luck."""
    start, end = dt.datetime(2026, 1, 1, tzinfo=dt.UTC), dt.datetime(2026, 1, 1, 0, 2, tzinfo=dt.UTC)
    cold = (0, 3, 9, 12, 13, 14)
    elephants = [[15], [1, 4], [2, 4], [6, 15], [5], [7, 11], [10], [8]]
    trickle = [3, 9, 1, 2, 5, 6, 7, 8, 10, 11]
    ep = _judge(_groups(elephants, trickle), "s1", 16, cold, start, end, PolarizationParams())
    assert ep is not None and ep.evidence["agreeing_groups"] == 8
    assert ep.evidence["chance_independent"] > 0.01
    # the spine repeating the leaves' hash idles the same members with every group's traffic spread on the others
    spread = [[k for k in range(16) if k not in cold]] * 8
    ep = _judge(_groups(spread, []), "s1", 16, cold, start, end, PolarizationParams())
    assert ep is not None and ep.evidence["chance_independent"] < 1e-6


def test_imbalance_measures() -> None:
    assert imbalance([5, 5, 5, 5]) == {"max_mean": 1.0, "cov": 0.0, "jain": 1.0}
    skew = imbalance([10, 0])
    assert skew["max_mean"] == 2.0 and skew["cov"] == 1.0 and skew["jain"] == 0.5


def _synthetic_packets(at: dt.datetime, rows: list[tuple[str, str, str, int, int]]) -> pa.Table:
    """SYNTHETIC sampled packets (the simulator captures none): (capture point, src, dst, sport, count)."""
    cols: dict[str, list[object]] = {k: [] for k in ("capture_point", "src_ip", "dst_ip", "udp_sport")}
    ts: list[dt.datetime] = []
    for point, src, dst, sport, count in rows:
        for k in range(count):
            ts.append(at + dt.timedelta(milliseconds=10 * k))
            for key, value in zip(cols, (point, src, dst, sport), strict=True):
                cols[key].append(value)
    n = len(ts)
    table = pa.table(
        {
            "ts": pa.array(ts, pa.timestamp("ns", tz="UTC")),
            **{k: pa.array(v, pa.string()) for k, v in cols.items() if k != "udp_sport"},
            "udp_sport": pa.array(cols["udp_sport"], pa.uint16()),
            "dscp": pa.array([26] * n, pa.uint8()),
            "ecn": pa.array([2] * n, pa.uint8()),
            "opcode": pa.array([0x0A] * n, pa.uint8()),
            "dest_qp": pa.array([0x100] * n, pa.uint32()),
            "psn": pa.array(list(range(n)), pa.uint32()),
            "pkey": pa.array([0xFFFF] * n, pa.uint16()),
            "becn": pa.array([0] * n, pa.uint8()),
            "length": pa.array([4154] * n, pa.uint32()),
            "sampling_rate": pa.array([1000] * n, pa.uint32()),
        }
    )
    return pa.Table.from_batches([conform("packets", table)])


def test_sampled_packets_add_flow_entropy_evidence(land: Callable[..., Landed]) -> None:
    """SYNTHETIC packets table inserted into the landed polarization run: two flows from gpu-001 (under
    leaf-r0-01) to another leaf seen at the host, three flows captured at a spine port."""
    run = land("polarization")
    with run.open() as store:
        sql = "SELECT DISTINCT toString(host) AS h, toString(netdev) AS n, toString(ip) AS ip FROM endpoints"
        ep = {f"{r['h']}/{r['n']}": r["ip"] for r in store.query_arrow(sql).to_pylist()}
        src, far = ep["gpu-001/eth0"], ep["gpu-009/eth0"]  # leaf-r0-01 and leaf-r0-02 (rail 0)
        rows = [
            ("gpu-001/eth0", src, far, 50001, 60),
            ("gpu-001/eth0", src, far, 50002, 60),
            ("spine-01:Ethernet0", far, src, 50003, 40),
            ("spine-01:Ethernet0", far, src, 50004, 40),
            ("spine-01:Ethernet0", far, src, 50005, 20),
        ]
        store.insert("packets", _synthetic_packets(run.at(100), rows), dedup_token="test-polarization-packets")
        try:
            (f,) = analyze(store, run.window, only=POL, write=False).findings
        finally:
            store.command("TRUNCATE TABLE packets")
    entropy = {e["where"]: e for e in f.evidence["flow_entropy"]}
    up = entropy["leaf-r0-01 uplinks"]
    assert (up["flows"], up["udp_sports"], up["packets"], up["links"], up["low"]) == (2, 2, 120, 4, True)
    assert up["entropy_bits"] == pytest.approx(1.0)
    spine = entropy["spine-01:Ethernet0"]
    assert spine["flows"] == 3 and spine["entropy_bits"] == pytest.approx(1.5219, abs=1e-3)
    assert "low flow entropy" in f.summary
