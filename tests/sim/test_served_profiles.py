"""A deployment profile on the served path: the switches speak their vendor's gNMI paths (and SNMP MIBs) at each
metric group's cadence, stamped on their own clocks, the hosts show their NIC driver's names, LLDP comes from
the profile's side, and the real collectors land the rows the fast path lands under the same profile."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import polars as pl
import pytest

from rocescope.config import Settings, StoreConfig, TransportConfig
from rocescope.pipeline.store import open_store
from rocescope.sim.evaluate import evaluate_run
from rocescope.sim.profile import load_profile
from rocescope.sim.run import RunSummary, run_scenario
from rocescope.sim.serve import ServeStats, serve_scenario

SCENARIO = "pfc_storm"  # gpu-005 eth0 stuck pausing 60-90 s
SECONDS = 65.0  # past one 60 s watermark read of every SONiC switch
KEY = ["device", "port", "metric", "priority"]
#: What a collector cannot read of what the vendor serves (see the report in sim/facades/gnmi_paths.py):
#: SONiC's buffer pool watermark is on no sonic-gnmi virtual path. (bnxt_re's RDMA hw_counters resolve under
#: the catalog vendor `bnxt_rdma`, picked by the RDMA device's driver.)
NOT_COLLECTED = {
    "sonic-broadcom": {"buffer_pool_watermark_bytes"},
    "arista-eos": set(),
}
BNXT_RDMA = {"cnp_sent", "cnp_received", "ecn_marked_roce_packets", "out_of_sequence", "packet_seq_err"} | {
    f"rdma_{d}_{u}" for d in ("rx", "tx") for u in ("bytes", "packets")
}
#: What a real host adds that the fast path does not have: link state/speed of the netdev and RDMA port, IBTA
#: `counters/` on mlx5's RDMA port.
HOST_EXTRAS = {"oper_up", "port_speed_bps", "rdma_tx_bytes", "rdma_rx_bytes", "rdma_tx_packets", "rdma_rx_packets"}
Q = (
    "SELECT ts, toString(device) AS device, toString(role) AS role, toString(port) AS port, toString(metric) AS metric,"
    " priority, value, toString(source) AS source, toString(raw_name) AS raw FROM counters"
)
LINKS = (
    "SELECT toString(device), toString(port), toString(peer_device), toString(peer_port), toString(source), "
    "seen_at <= (SELECT max(ts) FROM counters) FROM links"
)


def settings(tmp: Path) -> Settings:
    return Settings(store=StoreConfig(path=tmp, ttl_days=0), transport=TransportConfig(kind="inprocess"))


def landed(cfg: Settings, start: dt.datetime) -> tuple[pl.DataFrame, set[tuple[str, ...]]]:
    with open_store(cfg.store) as store:
        df = pl.from_arrow(store.query_arrow(Q))
        links = {tuple(r.values()) for r in store.query_arrow(LINKS).to_pylist()}
    assert isinstance(df, pl.DataFrame)
    return df.with_columns((pl.col("ts") - pl.lit(start)).dt.total_nanoseconds().alias("ns")), links


Run = tuple[RunSummary, pl.DataFrame, set[tuple[str, ...]]]


@pytest.fixture(
    scope="module",
    # Arista's served path (OpenConfig, PFC over SNMP) in the full run only: CI's ten minutes; the served exam and
    # `test_served_deployment` (sonic-broadcom) exercise the served path on every fast run
    params=["sonic-broadcom", pytest.param("arista-eos", marks=pytest.mark.full)],
)
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Run, Run, ServeStats]:
    """The profile's run served and on the fast path. The switches send each read once, at its own stamp, so that
    every read of the fast path can be matched with its served twin (what they send in a deployment, current
    values at every sample interval, is `test_served_deployment`'s)."""
    profile = str(request.param)
    a, b = settings(tmp_path_factory.mktemp("served")), settings(tmp_path_factory.mktemp("fast"))
    prof = load_profile(profile)
    once = prof.model_copy(update={"switch": prof.switch.model_copy(update={"sample": "reads"})})
    summary, stats = serve_scenario(a, SCENARIO, SECONDS, profile=once)
    fast = run_scenario(b, SCENARIO, SECONDS, profile=profile)
    return profile, (summary, *landed(a, summary.start)), (fast, *landed(b, fast.start)), stats


def test_every_read_is_delivered_once(runs: tuple[str, Run, Run, ServeStats]) -> None:
    _, (summary, _, _), _, stats = runs
    assert summary.polls == SECONDS and stats.barrier_timeouts == 0
    assert stats.gnmi_values_sent == stats.gnmi_values_decoded > 0


def test_a_served_run_lands_the_fast_paths_rows_names_and_cadences(runs: tuple[str, Run, Run, ServeStats]) -> None:
    profile, (_, served, _), (_, fast, _), _ = runs
    prof = load_profile(profile)
    bnxt = prof.nic.driver == "bnxt"
    gaps = NOT_COLLECTED[profile]
    want = fast.filter(~pl.col("metric").is_in(gaps))
    mine = served.filter(~pl.col("metric").str.starts_with("raw:"))
    # every read the fast path lands is landed once (same rows per key: same metrics, names, cadences)
    counts = want.group_by(KEY).len().join(mine.group_by(KEY).len(), on=KEY, how="left", suffix="_served")
    short = counts.filter(pl.col("len_served").is_null() | (pl.col("len") != pl.col("len_served")))
    assert short.is_empty(), short
    extra = mine.join(want, on=KEY, how="anti")
    assert set(extra["metric"]) <= HOST_EXTRAS and set(extra["role"]) == {"nic"}, extra
    # the n-th read of each key: the same value, stamped within the clock rules (a SONiC document carries one
    # stamp for its group's paths, which the fast path spreads by up to path_spread_ms)
    rank = [pl.col("ns").rank("ordinal").over(KEY).alias("n")]
    pairs = want.with_columns(rank).join(mine.with_columns(rank), on=[*KEY, "n"], suffix="_served")
    assert pairs.height == want.height
    assert (pairs["value"] == pairs["value_served"]).all()
    skew = (pairs["ns_served"] - pairs["ns"]).abs().max()
    assert isinstance(skew, int) and skew <= prof.clocks.path_spread_ms * 1e6 + 1000, skew
    if bnxt:  # bnxt_re's hw_counters land canonical (catalog vendor bnxt_rdma), under the driver's own names
        named = served.filter(pl.col("metric").is_in(BNXT_RDMA))
        assert {"tx_cnp_pkts", "rx_cnp_pkts"} <= set(named["raw"])
        assert named.height == fast.filter(pl.col("metric").is_in(BNXT_RDMA)).height


def test_each_vendor_serves_its_own_paths_at_each_groups_cadence(runs: tuple[str, Run, Run, ServeStats]) -> None:
    profile, (_, served, _), _, _ = runs
    raw = {(m, s): r for m, s, r in served.filter(pl.col("role") == "switch").select("metric", "source", "raw").rows()}
    reads = served.filter((pl.col("role") == "switch") & (pl.col("priority") == 3)).sort("ns")
    gaps = reads.with_columns(pl.col("ns").diff().over(["device", "port", "metric"]).alias("gap")).drop_nulls("gap")
    every = {str(m): set((g["gap"] / 1e9).round().cast(pl.Int64).to_list()) for (m,), g in gaps.group_by("metric")}
    if profile == "sonic-broadcom":  # COUNTERS_DB fields, speed from APPL_DB PORT_TABLE (Mb/s), counterpoll cadences
        assert raw["rx_bytes", "gnmi"] == "SAI_PORT_STAT_IF_IN_OCTETS"
        assert raw["port_speed_bps", "gnmi"] == "PORT_TABLE/speed"
        assert raw["pfcwd_storm_detected", "gnmi"] == "PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED"
        assert "pfc_rx_pause_duration_us" not in {m for m, _ in raw}  # Broadcom reports no pause duration
        assert every["pfc_rx_pause"] == {1} and every["queue_tx_bytes"] == {10}
        assert every["pfcwd_storm_detected"] == {1}  # 200 ms, read at the poll
    else:  # OpenConfig interfaces and QoS queues, PFC over SNMP (ARISTA-PFC-MIB)
        assert raw["rx_bytes", "gnmi"] == "state/counters/in-octets"
        assert raw["port_speed_bps", "gnmi"] == "ethernet/state/negotiated-port-speed"
        assert raw["queue_tx_bytes", "gnmi"] == "state/transmit-octets"
        assert raw["pfc_rx_pause", "snmp"] == "aristaPfcPriorityIndications"
        assert every["queue_tx_bytes"] == {2} and every["pfc_rx_pause"] == {10}
    ports = set(served.filter(pl.col("role") == "switch")["port"])
    assert ("Ethernet1/1" in ports) == (profile == "arista-eos")


def test_lldp_comes_from_the_profiles_side_with_its_port_ids(runs: tuple[str, Run, Run, ServeStats]) -> None:
    profile, (_, _, landed_links), (_, _, fast_links), stats = runs
    assert {r[:4] for r in landed_links} == {r[:4] for r in fast_links}
    # the NIC collectors' inventory beside LLDP: every host NIC's RDMA port named after its netdev
    rdma = {r[:4] for r in landed_links if r[4] == "rdma"}
    assert rdma and all(d == pd and "/" in p for d, p, pd, _ in rdma)
    assert all(r[5] for r in landed_links if r[4] == "rdma")  # seen on the fabric's clock, inside the run
    links = {r[:4] for r in landed_links if r[4] != "rdma"}
    by = {d for d, *_ in links}
    if profile == "sonic-broadcom":  # the switches, over openconfig-lldp; SONiC advertises its alias
        assert stats.links_from == "switches" and not any(d.startswith("gpu") for d in by)
        assert any(pp == "etp1" for *_, pp in links)
    else:  # lldpd on the hosts only, seeing Arista's names
        assert stats.links_from == "hosts" and all(d.startswith("gpu") for d in by)
        assert ("gpu-001", "eth0", "leaf-r0-01", "Ethernet1/1") in links


@pytest.mark.full  # a third served run of the storm: the served path runs above, eval's scoring in tests/cli
def test_eval_scores_a_served_run_with_the_ground_truth_named_as_the_gear_names_it(tmp_path: Path) -> None:
    outcome = evaluate_run(SCENARIO, 3, tmp_path, 100.0, profile="arista-eos", path="served")
    assert outcome.path == "served" and outcome.profile == "arista-eos"
    (truth,) = outcome.truths
    assert truth.kind == "pfc_storm" and all("/" in p.partition(":")[2] or "gpu" in p for p in truth.ports)
    assert outcome.scores["pfc_storm"].incidents == 1
