"""A served run as deployed: the gNMI collector subscribes its own default paths at its own intervals (nobody tells
it the gear's cadences), SONiC's switches send every subscribed path's current value at every sample interval,
stamped with the send time, as sonic-gnmi does, one switch's clock runs 2.5 s ahead until NTP steps it back half
way, another's interface counters are polled over SNMP as well, and a spine restarts (SONiC's fast-reboot: its links
down 25 s, its counters from zero, its telemetry silent 90 s). The re-sends, the step, the second source and the
restart reach the store; the detectors read them as the gear refreshed them: the storm is found at its root, the
restart is one device event at the spine, and nothing anywhere else. One host (`UNMONITORED`) runs no collector: none
of its own rows land, its leaf's LLDP still names it."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pytest
import yaml

from rocescope.analysis.frames import Frames, Window
from rocescope.analysis.run import analyze
from rocescope.config import Settings, StoreConfig, TransportConfig
from rocescope.pipeline.store import open_store, query_polars
from rocescope.sim.run import RunSummary
from rocescope.sim.scenario import load_scenario
from rocescope.sim.serve import ServeStats, serve_scenario

SCENARIO = "pfc_storm"  # gpu-005 eth0 stuck pausing 60-90 s
UNMONITORED = "gpu-012"  # a host of the job the storm does not start in, no collector on it
SECONDS = 130.0  # long enough for the spine's restart: 90 s of silent telemetry, and reads on either side
PROFILE = "sonic-broadcom"  # queue counters refreshed every 10 s, watermarks every 60 s


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, RunSummary, ServeStats]:
    tmp = tmp_path_factory.mktemp("deployed")
    cfg = Settings(store=StoreConfig(path=tmp / "store", ttl_days=0), transport=TransportConfig(kind="inprocess"))
    scenario = load_scenario(SCENARIO).model_copy(update={"unmonitored": [UNMONITORED]})
    summary, stats = serve_scenario(cfg, scenario, SECONDS, profile=PROFILE, out_dir=tmp, deployed=True)
    assert stats.barrier_timeouts == 0 and stats.gnmi_values_sent == stats.gnmi_values_decoded > 0
    return cfg, summary, stats


def test_the_collector_subscribes_its_own_defaults(deployed: tuple[Settings, RunSummary, ServeStats]) -> None:
    targets = yaml.safe_load(deployed[2].targets["gnmi"].read_text())["targets"]
    assert targets and all("paths" not in t and t["vendor"] == "sonic" for t in targets)


def test_sample_re_sends_reach_the_store(deployed: tuple[Settings, RunSummary, ServeStats]) -> None:
    """A 10 s queue counter sampled every second (the collector's default for queue paths) lands every second,
    changing once in ten; the read-and-clear watermark (60 s) as often, changing once a minute at most."""
    cfg, _, _ = deployed
    sql = """SELECT toString(metric) AS metric, count() AS reads, uniqExact(value) AS values FROM counters
        WHERE device = 'leaf-r0-01' AND port = 'Ethernet0' AND priority = 3
            AND metric IN ('queue_tx_bytes', 'queue_watermark_bytes') GROUP BY metric ORDER BY metric"""
    with open_store(cfg.store) as store:
        got = {r["metric"]: r for r in query_polars(store, sql).to_dicts()}
    assert got["queue_tx_bytes"]["reads"] >= SECONDS - 5 and got["queue_tx_bytes"]["values"] <= SECONDS / 10 + 2
    assert got["queue_watermark_bytes"]["reads"] >= SECONDS - 5 and got["queue_watermark_bytes"]["values"] <= 3


def test_a_stepped_clock_and_a_second_source_reach_the_store(deployed: tuple[Settings, RunSummary, ServeStats]) -> None:
    cfg, summary, stats = deployed
    faults = stats.deployment
    assert faults is not None and faults.stepped != faults.snmp_also
    with open_store(cfg.store) as store:
        sources = query_polars(
            store,
            """SELECT toString(source) AS source, count() AS n FROM counters
            WHERE device = {d:String} AND metric = 'rx_bytes' AND role = 'switch' GROUP BY source ORDER BY source""",
            {"d": faults.snmp_also},
        )
        stamps = query_polars(
            store,
            """SELECT ts FROM counters WHERE device = {d:String} AND metric = 'queue_tx_bytes' AND port = 'Ethernet0'
            AND priority = 3 ORDER BY ts""",
            {"d": faults.stepped},
        )["ts"].to_list()
    assert sources["source"].to_list() == ["gnmi", "snmp"] and sources["n"].min() >= 3
    # sent every second, stamped on the switch's clock: 2.5 s ahead until the step, then right, back over seconds
    # it already sent
    step = summary.start + dt.timedelta(seconds=faults.step_at_s)
    ahead = [t for t in stamps if t.microsecond != 0]
    right = {t.microsecond for t in stamps if t > step + dt.timedelta(seconds=3)}
    assert len(stamps) >= SECONDS - 5 and right == {0} and len(ahead) >= SECONDS / 2 - 5
    assert max(ahead) > step and {t.microsecond for t in ahead} == {500_000}


def test_a_host_no_collector_reads_lands_nothing_of_its_own(deployed: tuple[Settings, RunSummary, ServeStats]) -> None:
    cfg, _, stats = deployed
    own = """SELECT 'counters' AS t, count() AS n FROM counters WHERE device = {h:String}
        UNION ALL SELECT 'links', count() FROM links WHERE device = {h:String}
        UNION ALL SELECT 'qp_owners', count() FROM qp_owners WHERE host = {h:String}
        UNION ALL SELECT 'collectives', count() FROM collectives WHERE host = {h:String}
        UNION ALL SELECT 'named', count() FROM links WHERE peer_device = {h:String}
        UNION ALL SELECT 'others', uniqExact(device) FROM counters WHERE role = 'nic'"""
    with open_store(cfg.store) as store:
        got = dict(query_polars(store, own, {"h": UNMONITORED}).iter_rows())
    assert got["counters"] == got["links"] == got["qp_owners"] == got["collectives"] == 0
    assert got["named"] >= 1 and got["others"] == 15 and stats.nccl_rows_collected > 0


def test_the_detectors_read_the_re_sends_as_the_gear_refreshed(
    deployed: tuple[Settings, RunSummary, ServeStats],
) -> None:
    cfg, summary, _ = deployed
    window = Window(summary.start, summary.end)
    with open_store(cfg.store) as store:
        frames = Frames(store, window)
        groups = frames.resent_groups()
        assert any("|queue_tx_bytes|" in k for k in groups)  # (this run's watermarks stay 0: test_counter_hygiene)
        assert all(r == pytest.approx(10.0) for k, (r, _) in groups.items() if "|queue_tx_bytes|" in k)
        rates = frames.rates(["queue_tx_bytes"], roles=["switch"])
        per = rates.group_by("device", "port", "priority").agg(reads=pl.len(), moved=(pl.col("rate") > 0).any())
        assert per.filter("moved")["reads"].max() <= SECONDS / 10 + 2  # one rate per refresh, never 9 zeros a jump
        result = analyze(store, window, write=False)
    kinds = {f.kind for f in result.findings}
    storms = [f for f in result.findings if f.kind == "pfc_storm"]
    assert storms and kinds == {"pfc_storm", "link_flap"}, [(f.kind, f.ports[:2]) for f in result.findings]
    assert any(p.startswith("gpu-005:") for f in storms for p in f.ports), [f.ports for f in storms]


def test_a_restarted_spine_is_one_device_event_and_its_counters_start_again(
    deployed: tuple[Settings, RunSummary, ServeStats],
) -> None:
    """The spine's telemetry stops for 90 s and its counters come back from zero: it is read again, no rate
    exceeds its line rate, and its links going down together are one device event at the spine."""
    cfg, summary, stats = deployed
    faults = stats.deployment
    assert faults is not None and faults.restarted is not None and faults.restarted.startswith("spine")
    at = summary.start + dt.timedelta(seconds=faults.restart_at_s)
    window = Window(summary.start, summary.end)
    with open_store(cfg.store) as store:
        tx = query_polars(
            store,
            """SELECT ts, value FROM counters WHERE device = {d:String} AND metric = 'tx_bytes' AND source = 'gnmi'
            AND port = (SELECT min(port) FROM counters WHERE device = {d:String} AND metric = 'tx_bytes')
            ORDER BY ts""",
            {"d": faults.restarted},
        )
        rates = Frames(store, window).rates(["tx_bytes"], roles=["switch"]).filter(pl.col("device") == faults.restarted)
        result = analyze(store, window, write=False)
    since = tx.with_columns(((pl.col("ts") - at).dt.total_microseconds() / 1e6).alias("s"))["s"]
    assert (since < 0).sum() and (since >= 90).sum() >= 5
    assert not ((since >= 2) & (since < 89)).any()  # silent while its control plane restarts (a read's stamp lags)
    assert rates.filter(pl.col("ts") > at).height and rates["rate"].max() <= 800e9 / 8
    flaps = [f for f in result.findings if f.kind == "link_flap"]
    assert len(flaps) == 1 and flaps[0].devices == (faults.restarted,) and flaps[0].evidence["device_event"]


def test_a_cumulus_switch_on_the_collectors_defaults_reports_its_pfc(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Cumulus Linux serves PFC under NVIDIA's `switch-priority` paths, which OpenConfig has no model for: on the
    OpenConfig defaults a deployed collector read no switch PFC at all, and a deadlock between leaves and spines
    was seen as two storms. The `cumulus` defaults read it (every second; the switch refreshes it every 10 s)."""
    tmp = tmp_path_factory.mktemp("cumulus")
    cfg = Settings(store=StoreConfig(path=tmp / "store", ttl_days=0), transport=TransportConfig(kind="inprocess"))
    serve_scenario(cfg, SCENARIO, 30.0, profile="cumulus", deployed=True)
    sql = """SELECT toString(metric) AS metric, count() / uniqExact(device, port, priority) AS reads FROM counters
        WHERE role = 'switch' AND source = 'gnmi' AND metric IN ('pfc_rx_pause', 'pfc_tx_pause_duration_us')
        GROUP BY metric ORDER BY metric"""
    with open_store(cfg.store) as store:
        got = dict(query_polars(store, sql).iter_rows())
    assert set(got) == {"pfc_rx_pause", "pfc_tx_pause_duration_us"} and min(got.values()) >= 2
