"""`rocescope coverage`: what a window's telemetry can judge, and why not, on data shaped like the gear that
causes each blind spot: PFC counted per interface only (IEEE8021-PFC-MIB), no PFC counters at all, watermarks
read every 60 s with ECN marks every 10 s (no burst under a second can be placed), a switch LLDP names that sends
nothing, a job whose collectives nobody collects; and the same port judged where the gear reads often enough."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pytest

from rocescope.analysis.coverage import coverage_at
from rocescope.cli import app
from rocescope.pipeline.store import Store

from gear import HOSTS, PORT_CLOCK, PORTS, QUEUE_CLOCK, UPLINKS, WM_CLOCK, fabric
from store_cli import runner
from telemetry import Clock, Telemetry, steps


def _gear(t: Telemetry) -> None:
    fabric(t)
    for host in HOSTS:
        port = PORTS[host]
        t.counter("leaf1", "switch", port, "tx_bytes", steps(base=1e9), PORT_CLOCK)
        t.counter("leaf1", "switch", port, "oper_up", steps(), PORT_CLOCK)
    a, b = PORTS["gpu-01"], PORTS["gpu-02"]
    t.counter("leaf1", "switch", a, "pfc_rx_pause_total", steps(), Clock(30.0, 0.2))  # Arista over SNMP
    t.counter("leaf1", "switch", b, "pfc_rx_pause_duration_us", steps(), PORT_CLOCK, priority=3)
    t.gauge("leaf1", "switch", a, "queue_watermark_bytes", steps(base=3e4), WM_CLOCK, priority=3)  # SONiC: 60 s
    t.counter("leaf1", "switch", a, "queue_ecn_marked_packets", steps(), QUEUE_CLOCK, priority=3)  # ... and 10 s
    t.gauge("leaf1", "switch", b, "queue_watermark_bytes", steps(base=3e4), Clock(10.0, 0.3), priority=3)
    t.link("leaf2", "Ethernet1/1", "gpu-01", "eth1")  # a leaf the hosts' LLDP names, which sends nothing


def test_each_blind_spot_is_named_with_its_reason(store: Store, now: dt.datetime) -> None:
    t = Telemetry(now, 180)
    _gear(t)
    t.land(store)
    cov = coverage_at(store, t.window.start, t.window.end)
    got = {(it.kind, it.where): (it.judged, it.reason) for it in cov.items}
    a, b, c = (f"leaf1:{PORTS[h]}" for h in ("gpu-01", "gpu-02", "gpu-03"))
    assert got[("pfc_storm", a)] == (True, "PFC counted per interface only: the priority is assumed")
    assert got[("pfc_storm", b)] == (True, "")
    assert got[("pfc_storm", c)] == (False, "no PFC pause counters")
    judged, why = got[("microburst", a)]
    assert (judged, why) == (
        False,
        "cadence too coarse for bursts under a second (watermarks every 60 s, ECN marks every 10 s)",
    )
    assert got[("microburst", b)][0] and got[("incast", a)][0]
    assert got[("microburst", c)] == (False, "no congestion evidence (queue watermark, ECN marks, the receiver's CNPs)")
    assert got[("telemetry", "leaf2")][0] is False
    assert got[("unexplained_slowdown", "team-a/train")] == (False, "no NCCL collectives joined to it")
    assert any(line.startswith("  not judged: pfc_storm: no PFC pause counters: 9 (") for line in cov.lines())


def test_the_cli_prints_one_line_per_reason_and_json_lists_every_item(tmp_path: Path, now: dt.datetime) -> None:
    from rocescope.pipeline.store import ChdbStore

    from store_cli import store_config

    cfg = store_config(tmp_path)
    t = Telemetry(now, 180)
    _gear(t)
    migrated = runner.invoke(app, ["--config", cfg, "migrate"])
    assert migrated.exit_code == 0, migrated.output
    with ChdbStore(tmp_path / "data", "rocescope") as store:
        t.land(store)
    window = ["--from", t.window.start.isoformat(), "--to", t.window.end.isoformat()]
    text = runner.invoke(app, ["--config", cfg, "coverage", *window])
    assert text.exit_code == 0, text.output
    assert "not judged: microburst: cadence too coarse" in text.output
    out = runner.invoke(app, ["--config", cfg, "coverage", *window, "--json"])
    doc = json.loads(out.stdout)
    assert {"kind": "pfc_storm", "state": "not_judged", "items": 9} in doc["states"]
    assert len(doc["items"]) == sum(s["items"] for s in doc["states"])


def test_analyze_says_what_it_could_not_judge_and_exports_it_for_alerts(store: Store, now: dt.datetime) -> None:
    import socket
    import urllib.request

    from rocescope.analysis.run import analyze
    from rocescope.pipeline.metrics import AnalysisMetrics

    t = Telemetry(now, 180)
    _gear(t)
    t.land(store)
    result = analyze(store, t.window, write=False)
    assert result.coverage is not None and "pfc_storm 9 of 11 (no PFC pause counters)" in result.coverage.summary()
    metrics = AnalysisMetrics()
    metrics.record(result.coverage.labelled(), {})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    metrics.serve("127.0.0.1", port)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'rocescope_coverage{kind="pfc_storm",reason="no_pfc_counters",state="not_judged"} 9.0' in text


def test_findings_say_why_a_jobs_loss_is_not_measured_instead_of_a_dash(now: dt.datetime) -> None:
    from rich.console import Console

    from rocescope.analysis.present import findings_tables

    row = {"kind": "incast", "severity": "warning", "start": now, "end": now + dt.timedelta(seconds=60),
           "summary": "incast", "job_ids": ["team-a/train"], "score": 1.0}  # fmt: skip
    seen = []
    for evidence in ("{}", json.dumps({"impact": {}})):
        console = Console(record=True, width=200)
        for table in findings_tables([{**row, "evidence": evidence}]):
            console.print(table)
        seen.append(console.export_text())
    assert "not measured: no NCCL collectives in the window" in seen[0]
    assert "not measured: no collectives of the job around it" in seen[1]
    # a loss measured from records Inspector partly dropped is shown as what it is: a lower bound
    partial = {"impact": {"team-a/train": {"gpu_seconds_lost": 12.5, "records_dropped": 40, "lower_bound": True}}}
    console = Console(record=True, width=200)
    for table in findings_tables([{**row, "evidence": json.dumps(partial)}]):
        console.print(table)
    assert ">= 12.5 GPU-s" in console.export_text()


def test_a_storm_trace_without_speeds_is_judged_and_says_the_missing_speed(tmp_path: Path) -> None:
    """A real SONiC storm (sonic-buildimage issue 6530, `redis-cli MONITOR` of COUNTERS_DB): pause frames per
    priority, no speed, no pause duration, no LLDP. Storms are judged on the frames, read at the fastest speed."""
    from store_cli import store_config

    trace = Path(__file__).resolve().parents[1] / "fixtures" / "sonic" / "redis_monitor_pfc_storm_issue6530.txt"
    cfg = store_config(tmp_path)
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "sonic-monitor", "--device", "dut", str(trace)])
    assert done.exit_code == 0, done.output
    out = runner.invoke(
        app, ["--config", cfg, "coverage", "--from", "2021-01-14T08:14:00Z", "--to", "2021-01-14T08:16:00Z", "--json"]
    )
    assert out.exit_code == 0, out.output
    storms = [i for i in json.loads(out.stdout)["items"] if i["kind"] == "pfc_storm" and i["judged"]]
    assert storms and {i["reason"] for i in storms} <= {
        "pause frames and no speed: read at the fastest speed",
        "no LLDP on either side: a storm's root cannot be named",
    }
    assert any(i["reason"] == "pause frames and no speed: read at the fastest speed" for i in storms)


def test_nccl_in_pods_before_their_placement_is_known_is_joined_to_no_job(store: Store, now: dt.datetime) -> None:
    """Collectives whose hostname is a pod nobody placed yet (no `endpoints` row): coverage says they are joined
    to no job, per host, instead of the job looking healthy."""
    import pyarrow as pa

    from rocescope.collectors.nccl.parse import collectives_table
    from rocescope.pipeline.batch import conform

    t = Telemetry(now, 180)
    _gear(t)
    t.land(store)
    n = 3
    cols = {
        "ts": [int((now + dt.timedelta(seconds=30 + k)).timestamp() * 1e9) for k in range(n)],
        "host": ["train-worker-0"] * n,
        "pid": pa.array([45] * n, pa.uint32()),
        "collective": ["AllReduce"] * n,
        "ranks": pa.array([16] * n, pa.int32()),
        "rank": pa.array([0] * n, pa.int32()),
        "exec_time_us": [100.0] * n,
        "source": ["inspector_json"] * n,
        "communicator": ["0x1"] * n,
    }
    store.insert("collectives", pa.Table.from_batches([conform("collectives", collectives_table(cols, n))]))
    cov = coverage_at(store, t.window.start, t.window.end)
    got = {(it.kind, it.where): (it.judged, it.reason) for it in cov.items}
    assert got[("unexplained_slowdown", "collectives from train-worker-0")] == (
        False,
        "3 collective(s) joined to no job (none)",
    )


def test_inferred_speeds_unknown_cabling_and_an_unmonitored_peer_are_each_said(store: Store, now: dt.datetime) -> None:
    """No speed anywhere (Arista over SNMP before its speeds are read): the leaf's rates rest on inferred speeds;
    a port no LLDP names on either side cannot be told a downlink from an uplink; a storage array named by the
    leaf's LLDP only holds pause on its port, and says nothing of its own."""
    t = Telemetry(now, 180)
    _gear(t)
    t.link("leaf1", UPLINKS[0], "spine1", "Ethernet1")  # the leaf's LLDP names a spine: its cabling is known...
    t.counter("spine1", "switch", "Ethernet1", "tx_bytes", steps(base=1e9), PORT_CLOCK)
    t.counter("leaf1", "switch", "Ethernet3/1", "tx_bytes", steps(base=1e9), PORT_CLOCK)  # ... but for this port
    t.link("leaf1", "Ethernet3/2", "storage-01", "eth0")
    t.counter("leaf1", "switch", "Ethernet3/2", "pfc_rx_pause_duration_us", steps(), PORT_CLOCK, priority=3)
    t.land(store)
    cov = coverage_at(store, t.window.start, t.window.end)
    got = {(it.kind, it.where): (it.judged, it.code) for it in cov.items}
    b = f"leaf1:{PORTS['gpu-02']}"
    assert got[("incast", b)] == (True, "speed_inferred")
    for kind in ("incast", "microburst", "ecmp_imbalance"):
        assert got[(kind, "leaf1:Ethernet3/1")] == (False, "no_lldp_kind")
    assert got[("pfc_storm", "leaf1:Ethernet3/2")] == (True, "unmonitored_peer")
    assert got[("pfc_deadlock", "leaf1:Ethernet3/2")] == (True, "unmonitored_peer")
    lines = cov.lines()
    assert any("its peer storage-01 is not monitored" in line for line in lines)
    assert any("whether it faces a host or a switch is unknown: " in line for line in lines)
    silent = {it.where: it.reason for it in cov.items if it.kind == "telemetry"}
    assert silent["leaf2"] == "a switch others name (LLDP, placements) sends nothing"
    assert silent["storage-01"] == "a host others name (LLDP, placements) sends nothing"
    labelled = cov.labelled()
    assert labelled[("pfc_storm", "judged_with_caveat", "unmonitored_peer")] == 1
    assert labelled[("incast", "not_judged", "no_lldp_kind")] >= 1


def test_analyze_logs_one_line_of_what_it_could_not_judge(
    store: Store, now: dt.datetime, caplog: pytest.LogCaptureFixture
) -> None:
    from rocescope.analysis.run import analyze

    t = Telemetry(now, 180)
    _gear(t)
    t.land(store)
    with caplog.at_level(logging.INFO, logger="rocescope.analysis.run"):
        analyze(store, t.window, write=False)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("could not judge in")]
    assert len(said) == 1
    assert "pfc_storm 9 of 11 (no PFC pause counters)" in said[0]


def _interval_means(store: Store, now: dt.datetime, hosts: list[str]) -> None:
    """NCCL Inspector's Prometheus output (2.30+) of the job's ranks: per interval, a mean per message size."""
    import pyarrow as pa

    from rocescope.collectors.nccl.parse import collectives_table
    from rocescope.pipeline.batch import conform

    n = 12 * len(hosts)
    cols = {
        "ts": [int((now + dt.timedelta(seconds=10 * (k // len(hosts)) + 5)).timestamp() * 1e9) for k in range(n)],
        "host": [hosts[k % len(hosts)] for k in range(n)],
        "pid": pa.array([100 + k % len(hosts) for k in range(n)], pa.uint32()),
        "collective": ["AllReduce"] * n,
        "ranks": pa.array([len(hosts)] * n, pa.int32()),
        "rank": pa.array([-1] * n, pa.int32()),
        "sequence": pa.array([-1] * n, pa.int64()),
        "exec_time_us": [2000.0] * n,
        "source": ["inspector_prom_agg"] * n,
        "communicator": ["0xabc"] * n,
    }
    store.insert("collectives", pa.Table.from_batches([conform("collectives", collectives_table(cols, n))]))


def test_a_job_known_only_by_interval_means_says_its_loss_cannot_be_measured(store: Store, now: dt.datetime) -> None:
    """Inspector 2.30's Prometheus output carries one mean per interval and size, no single operation: the job is
    joined, yet its slowdown, hang and GPU-seconds cannot be measured from it, and every place that shows a loss
    says so instead of a dash (coverage, `findings`, `blame`)."""
    from rich.console import Console

    from rocescope.analysis.blame import blame_table, who_hurt_whom, with_blame
    from rocescope.analysis.fabric import Fabric
    from rocescope.analysis.findings import Finding
    from rocescope.analysis.frames import Frames
    from rocescope.analysis.impact import MEANS_ONLY, with_impact
    from rocescope.analysis.present import not_measured

    t = Telemetry(now, 180)
    _gear(t)
    t.land(store)
    _interval_means(store, now, HOSTS[:4])
    cov = coverage_at(store, t.window.start, t.window.end)
    got = {(it.kind, it.where): (it.judged, it.code) for it in cov.items}
    assert got[("unexplained_slowdown", "team-a/train")] == (False, "interval_means_only")
    assert got[("nccl_hang", "team-a/train")] == (False, "interval_means_only")

    frames = Frames(store, t.window)
    fabric = Fabric.from_frames(frames)
    storm = Finding(
        kind="pfc_storm", severity="warning", start=now + dt.timedelta(seconds=60), end=now + dt.timedelta(seconds=90),
        devices=("leaf1",), ports=(f"leaf1:{PORTS['gpu-01']}",), priority=3, score=30.0, summary="storm",
        evidence={}, job_ids=("team-a/train",),
    )  # fmt: skip
    (judged,) = with_blame(with_impact([storm], frames.collectives(600), fabric), fabric)
    assert judged.evidence["impact"] == {}
    assert judged.evidence["impact_not_measured"] == {"team-a/train": MEANS_ONLY}
    row = {"kind": judged.kind, "evidence": json.dumps(judged.evidence, default=str)}
    assert not_measured(row, "team-a/train") == f"not measured: {MEANS_ONLY}"
    (edge,) = who_hurt_whom([row])
    assert (edge.victim, edge.gpu_seconds_lost, edge.not_measured) == (
        "team-a/train",
        None,
        f"not measured: {MEANS_ONLY}",
    )
    console = Console(record=True, width=250)
    console.print(blame_table([edge], "who hurt whom"))
    assert "not measured: GPU-seconds not measurable from this source" in console.export_text()


def test_a_device_that_reported_before_the_window_and_fell_silent_is_named(store: Store, now: dt.datetime) -> None:
    """A switch whose agent died (or a collector that lost its target) before the window: nothing names it in
    LLDP or placements, yet its silence is said, with when it was last heard (Prometheus' `up == 0`)."""
    t = Telemetry(now, 180)
    _gear(t)
    t.land(store)
    earlier = Telemetry(now - dt.timedelta(minutes=8), 120)
    earlier.counter("leaf9", "switch", "Ethernet1", "tx_bytes", steps(base=1e9), PORT_CLOCK)
    earlier.land(store)
    cov = coverage_at(store, t.window.start, t.window.end)
    silent = {it.where: it for it in cov.items if it.kind == "telemetry"}
    assert silent["leaf9"].judged is False and silent["leaf9"].code == "no_telemetry"
    said = silent["leaf9"].reason
    assert said.startswith("no telemetry in the window: a switch last heard in the minute of ")
    heard = dt.datetime.strptime(said.rsplit("of ", 1)[1], "%Y-%m-%d %H:%M UTC").replace(tzinfo=dt.UTC)
    assert now - dt.timedelta(minutes=7) <= heard <= now - dt.timedelta(minutes=6)  # its last read, 6 minutes before
    assert "leaf1" not in silent


def test_a_cadence_counts_a_minute_the_rollup_holds_in_several_unmerged_parts_once(
    store: Store, now: dt.datetime
) -> None:
    """Each insert adds its own rows to the per-minute rollup; until they merge, one minute of a series is several
    rows. Watermarks read every 10 s and landed in two batches must still read as every 10 s, not every 20 s (too
    coarse for bursts under a second)."""
    store.command("SYSTEM STOP MERGES counters_1m")  # the parts stay apart, as between a deployment's merges
    t = Telemetry(now, 180)
    _gear(t)
    b = PORTS["gpu-02"]
    every_other = {id(r) for r in [r for r in t.counters if r[3] == b and r[5] == "queue_watermark_bytes"][1::2]}
    later = Telemetry(now, 180, counters=[r for r in t.counters if id(r) in every_other])
    t.counters = [r for r in t.counters if id(r) not in every_other]
    t.land(store)
    later.land(store)
    rows = store.query_arrow(
        "SELECT max(n) AS most FROM (SELECT count() AS n FROM counters_1m WHERE metric = 'queue_watermark_bytes' "
        "AND port = {port:String} GROUP BY minute)",
        {"port": b},
    )
    assert rows.column("most")[0].as_py() >= 2  # the minute is in two rows indeed
    cov = coverage_at(store, t.window.start, t.window.end)
    bursts = next(it for it in cov.items if (it.kind, it.where) == ("microburst", f"leaf1:{b}"))
    assert bursts.judged, bursts.reason
