"""Scenario files, incidents with ground truth, and the fast path into a real (embedded chdb) store."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from rocescope.config import Settings, StoreConfig, TransportConfig
from rocescope.pipeline.store import ChdbStore
from rocescope.sim.incidents import build_world
from rocescope.sim.run import RunSummary, run_end, run_scenario, simulate
from rocescope.sim.scenario import Scenario, ScenarioError, load_scenario, scenario_names

SHIPPED = {
    "baseline",
    "incast",
    "pfc_storm",
    "pfc_deadlock",
    "cnp_loss",
    "polarization",
    "microburst",
    "link_flap",
    "pfc_misconfig",
    "bad_day",
    "demo",
}
FABRIC = {"hosts": 8, "rails": 1, "spines": 2, "host_speed_gbps": 100, "uplink_speed_gbps": 100}
JOBS = [{"name": "llm", "namespace": "team", "hosts": 4, "message_mib": 32, "compute_ms": 50}]


def small(name: str, incidents: list[dict[str, Any]], duration: str = "12s", **extra: Any) -> Scenario:
    return Scenario.model_validate(
        {"name": name, "seed": 5, "duration": duration, "fabric": FABRIC, "jobs": JOBS, "incidents": incidents, **extra}
    )


INCAST = small("t-incast", [{"kind": "incast", "start": "5s", "end": "9s", "receiver": "gpu-008", "senders": 3}])


def settings(tmp_path: Path) -> Settings:
    return Settings(store=StoreConfig(path=tmp_path / "chdb"), transport=TransportConfig(kind="inprocess"))


# --- files


def test_every_shipped_scenario_validates_and_builds() -> None:
    assert set(scenario_names()) >= SHIPPED
    for name in scenario_names():
        sc = load_scenario(name)
        assert sc.name == name
        world = build_world(sc, start=dt.datetime(2025, 1, 1, tzinfo=dt.UTC))
        assert len(world.truth) == len(sc.incidents), name
        for g in world.truth:
            assert g.kind and g.devices and g.description, (name, g)
            assert 0 <= g.start_s < g.end_s <= sc.duration
        for inc in world.ground_truth()["incidents"]:  # who caused it; whom it cost what (none before the run)
            assert set(inc["culprit_jobs"]) <= set(inc["job_ids"]) | {j.job_id for j in world.jobs}, (name, inc)
            assert inc["victim_jobs"] == [] and inc["gpu_seconds_lost"] == {}, name
    kinds = {inc.kind for name in SHIPPED - {"bad_day", "demo", "baseline"} for inc in load_scenario(name).incidents}
    assert kinds == {n for n in SHIPPED if n not in {"bad_day", "demo", "baseline"}}
    demo = load_scenario("demo")
    assert demo.fabric.hosts >= 32 and demo.fabric.rails >= 4 and len(demo.jobs) == 2 and demo.duration == 600


def test_a_bad_scenario_file_names_the_key(tmp_path: Path) -> None:
    data = yaml.safe_load(Path(__file__).parents[2].joinpath("sim", "scenarios", "incast.yaml").read_text())
    data["incidents"][0]["senders"] = "many"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match=r"incidents\.0\.senders") as err:
        load_scenario(bad)
    assert "incast" not in str(err.value).split(":")[-1]
    data["incidents"][0]["senders"] = 4
    data["incidents"][0]["colour"] = "red"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match=r"incidents\.0\.colour: unknown key"):
        load_scenario(bad)
    data["incidents"][0].pop("colour")
    data["fabric"]["host_speed_gbps"] = 123
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ScenarioError, match=r"fabric.*host_speed_gbps"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="no scenario 'nope'"):
        load_scenario("nope")


def test_unknown_devices_are_reported_with_the_incident() -> None:
    sc = small("t", [{"kind": "pfc_storm", "start": 1, "device": "gpu-999", "port": "eth0"}])
    with pytest.raises(ScenarioError, match=r"incidents\.0 \(pfc_storm\): no port gpu-999:eth0"):
        build_world(sc)


# --- the fast path into the store


def _series(store: ChdbStore, device: str, port: str, metric: str, priority: int = -1) -> dict[float, float]:
    """Seconds since the first poll -> value."""
    t = store.query_arrow(
        "SELECT toUnixTimestamp64Nano(ts) AS t, value FROM counters WHERE device = {d:String} AND port = {p:String} "
        "AND metric = {m:String} AND priority = {q:Int8} ORDER BY ts",
        {"d": device, "p": port, "m": metric, "q": priority},
    ).to_pylist()
    t0 = min(r["t"] for r in t)
    return {round((r["t"] - t0) / 1e9) + 1: r["value"] for r in t}


def _rise(series: dict[float, float], lo: float, hi: float) -> float:
    """Counter increase between polls at seconds lo and hi."""
    return series[hi] - series[lo]


def test_incast_lands_counters_links_endpoints_and_ground_truth(tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = run_scenario(settings(tmp_path), INCAST, None, out, progress=False)
    assert isinstance(summary, RunSummary)
    assert summary.polls == 12 and summary.sim_seconds == pytest.approx(12)
    assert summary.end - summary.start == dt.timedelta(seconds=12)
    assert 0 <= (dt.datetime.now(dt.UTC) - summary.end).total_seconds() < 120  # the run ends just before now
    assert summary.rows["counters"] > 0 and summary.rows["links"] > 0 and summary.rows["endpoints"] > 0
    assert summary.rows["incidents"] == 1
    assert {j.job_id for j in summary.jobs} == {"team/llm", "background/incast-1"}
    truth = json.loads((out / "ground_truth.json").read_text())
    assert [i["kind"] for i in truth["incidents"]] == ["incast"]

    with ChdbStore(tmp_path / "chdb") as store:
        counts = {
            t: store.query_arrow(f"SELECT count() AS n FROM {t}").column("n")[0].as_py()
            for t in ("counters", "links", "endpoints", "incidents")
        }
        assert counts == {k: summary.rows[k] for k in counts}
        inc = store.query_arrow("SELECT * FROM incidents").to_pylist()[0]
        assert inc["kind"] == "incast" and inc["scenario"] == "t-incast"
        assert inc["devices"][:2] == ["gpu-008", "leaf-r0-01"]
        leaf, leaf_port = inc["ports"][0].split(":")
        assert "background/incast-1" in inc["job_ids"] and "team/llm" in inc["job_ids"]
        start = inc["start"].replace(tzinfo=dt.UTC) if inc["start"].tzinfo is None else inc["start"]
        assert start == summary.start + dt.timedelta(seconds=5)
        ranks = store.query_arrow("SELECT job_id, count() AS n FROM endpoints GROUP BY job_id ORDER BY job_id")
        assert ranks.to_pylist() == [{"job_id": "background/incast-1", "n": 4}, {"job_id": "team/llm", "n": 4}]

        # the receiver's leaf port marks ECN and the receiver sends CNPs in the window, not before
        ecn = _series(store, leaf, leaf_port, "queue_ecn_marked_packets", 3)
        cnp = _series(store, "gpu-008", "mlx5_0/1", "cnp_sent")
        assert _rise(ecn, 1, 5) == 0 and _rise(ecn, 5, 9) > 0
        assert _rise(cnp, 1, 5) == 0 and _rise(cnp, 5, 9) > 0
        # senders' leaf ports pause them (PFC) or their CNPs slow them (DCQCN): both are visible
        handled = sum(_rise(_series(store, f"gpu-00{k}", "mlx5_0/1", "cnp_handled"), 5, 9) for k in (1, 2, 3))
        assert handled > 0
        wm = _series(store, leaf, leaf_port, "queue_watermark_bytes", 3)
        assert max(wm[s] for s in range(2, 6)) < max(wm[s] for s in range(6, 10))


def test_pfc_storm_shows_pause_duration_on_the_storming_port(tmp_path: Path) -> None:
    sc = small("t-storm", [{"kind": "pfc_storm", "start": "4s", "end": "8s", "device": "gpu-002", "port": "eth0"}])
    run_scenario(settings(tmp_path), sc, 10, None, progress=False)
    with ChdbStore(tmp_path / "chdb") as store:
        tx = _series(store, "gpu-002", "eth0", "pfc_tx_pause_duration_us", 3)
        assert _rise(tx, 1, 4) == 0
        assert _rise(tx, 4, 8) > 0.9 * 4e6  # paused ~all of the 4 s window
        assert _rise(tx, 9, 10) == 0
        leaf = store.query_arrow("SELECT ports FROM incidents").column("ports")[0].as_py()[1]
        rx = _series(store, *leaf.split(":"), "pfc_rx_pause_duration_us", 3)
        assert _rise(rx, 4, 8) > 0.9 * 4e6


def test_same_seed_same_ground_truth_and_counters() -> None:
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)

    def run() -> tuple[dict[str, Any], float, int]:
        world = build_world(INCAST, start=start)
        total = [0.0]

        def keep(_ts: dt.datetime, table: Any) -> None:
            total[0] = float(sum(v for v in table.column("value").to_pylist()))

        simulate(world, keep)
        return world.ground_truth(), total[0], len(world.engine.iterations)

    a, b = run(), run()
    assert a == b
    assert a[1] > 0


@pytest.mark.parametrize("name", ["pfc_deadlock", "link_flap", "polarization", "cnp_loss", "microburst"])
def test_each_incident_kind_runs_briefly(name: str) -> None:
    """Every kind arms and runs on its own fabric (a short window of its shipped scenario)."""
    sc = load_scenario(name)
    world = build_world(sc, 3.0 + min(i.start for i in sc.incidents))
    simulate(world, snapshots=False)
    assert world.engine.now == pytest.approx(world.duration_s)


def test_a_device_restart_downs_every_link_of_it_once_and_restarts_its_counters() -> None:
    """A `link_flap` without a port is the device restarting: every cable of it down for `down` from the start, its
    counters from zero, one truth anchored at all its ports."""
    restart = {"kind": "link_flap", "start": "4s", "end": "6s", "device": "spine-01", "down": "2s"}
    fabric = {**FABRIC, "hosts": 16, "host_ports_per_leaf": 4}  # four leaves: traffic crosses the spines
    sc = small("t-restart", [restart], fabric=fabric, jobs=[{**JOBS[0], "hosts": 16}])
    world = build_world(sc, 8.0)
    eng, topo = world.engine, world.topology
    ports = topo.ports_of("spine-01")
    [truth] = world.truth
    assert truth.kind == "link_flap" and set(truth.anchor) == {f"spine-01:{p.name}" for p in ports}
    assert truth.devices[0] == "spine-01" and set(truth.devices[1:]) == {p.peer_device for p in ports}
    assert (truth.start_s, truth.end_s) == (4.0, 6.0)
    ids = np.array([p.id for p in ports])
    eng.run(3.9)
    assert eng.port_load(ids)[1].min() > 0 and sum(eng.counter("spine-01", p.name, "tx_bytes") for p in ports) > 0
    eng.run(1.1)  # 5 s: down
    assert eng.port_load(ids)[1].max() == 0 and eng.port_load(topo.peer_ids[ids])[1].max() == 0  # both ends
    assert all(eng.counter("spine-01", p.name, "tx_bytes") == 0 for p in ports)  # nothing since it restarted
    eng.run(2.0)  # 7 s: back, carrying traffic again
    assert eng.port_load(ids)[1].min() > 0 and sum(eng.counter("spine-01", p.name, "tx_bytes") for p in ports) > 0
    with pytest.raises(ValueError, match="0 < down"):
        small("t-bad", [{"kind": "link_flap", "start": "4s", "device": "spine-01", "down": "0s"}])


def test_a_seed_puts_its_run_at_the_same_place_in_every_bucket() -> None:
    """Runs of one seed end at the same second of the minute whenever they run (so an exam's before and after on
    one draw read the same buckets alike), other seeds elsewhere, each within two minutes before now."""
    now = dt.datetime(2026, 12, 1, 4, 14, 36, 512000, tzinfo=dt.UTC)
    later = now + dt.timedelta(hours=3, seconds=17.3)
    for seed in (1, 2, 948558964001):
        for at in (now, later):
            end = run_end(seed, at)
            assert 0 < (at - end).total_seconds() < 120
        assert run_end(seed, now).second == run_end(seed, later).second
        assert run_end(seed, now).microsecond == run_end(seed, later).microsecond
    assert len({run_end(seed, now) for seed in range(20)}) > 15  # phases vary across seeds
