"""Deployment profiles on the fast path: `ideal` changes nothing; real-gear profiles rename, drop, slow down,
stamp on device clocks and see LLDP from one side, as their files say."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rocescope.errors import SimError
from rocescope.sim.counters import SERIES
from rocescope.sim.gear import WATERMARKS, Gear
from rocescope.sim.incidents import World, build_world
from rocescope.sim.profile import GROUPS, Profile, ProfileError, load_profile, profile_names
from rocescope.sim.run import simulate, static_tables, with_profile
from rocescope.sim.scenario import LinkFlap, Scenario, load_scenario

START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
#: the pfc_storm scenario (16 hosts x 2 rails, gpu-005:eth0 storms from 60 s to 90 s), long enough for
#: two 60 s watermark reads per device
SECONDS = 130.0

#: the links LLDP reports, not the NIC inventory's RDMA port -> netdev rows
LLDP = "source != 'rdma'"


@dataclass
class Run:
    world: World
    gear: Gear
    raw: list[pa.Table]
    out: list[pa.Table]

    def frame(self) -> pd.DataFrame:
        df = pa.concat_tables(self.out).to_pandas()
        for col in ("device", "role", "port", "metric", "raw_name"):
            df[col] = df[col].astype(str)
        return df

    def roles(self) -> dict[str, str]:
        return {d.name: d.role for d in self.world.topology.devices}


_RUNS: dict[str, Run] = {}


def run(profile: str | Profile, scenario: Scenario | None = None, seconds: float = SECONDS) -> Run:
    """A scenario (default: pfc_storm) under a profile, each simulated once per session."""
    prof = load_profile(profile)
    sc = scenario or load_scenario("pfc_storm")
    key = f"{prof.name}/{sc.name}"
    if key in _RUNS:
        return _RUNS[key]
    world = build_world(with_profile(sc, prof), seconds, START)
    gear = Gear(prof, world)
    raw: list[pa.Table] = []
    out: list[pa.Table] = []

    def poll(ts: dt.datetime, table: pa.Table) -> None:
        raw.append(table)
        out.append(gear.counters(ts, table))

    simulate(world, poll)
    return _RUNS.setdefault(key, Run(world, gear, raw, out))


def decoded(table: pa.Table) -> pa.Table:
    """The table with its dictionary columns as plain strings (dictionaries may be laid out differently)."""
    table = table.combine_chunks()
    columns = {n: table[n] for n in table.column_names}
    return pa.table({n: c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for n, c in columns.items()})


def test_the_shipped_profiles_load() -> None:
    assert set(profile_names()) >= {"ideal", "sonic-spectrum", "sonic-broadcom", "arista-eos", "srlinux", "cumulus"}
    assert [n for n in profile_names() if load_profile(n).is_ideal] == ["ideal"]


def test_the_ideal_profile_is_todays_fast_path_bit_for_bit() -> None:
    ideal = run("ideal")
    assert ideal.gear.identity and len(ideal.out) == SECONDS
    assert all(o is r for o, r in zip(ideal.out, ideal.raw, strict=True))
    # and the same as a world that never saw a profile: counters, links, endpoints, incidents, ground truth
    bare = build_world(load_scenario("pfc_storm"), SECONDS, START)
    tables: list[pa.Table] = []
    simulate(bare, lambda _ts, t: tables.append(t))
    assert all(a.equals(b) for a, b in zip(ideal.out, tables, strict=True))
    with_gear, without = static_tables(ideal.world, ideal.gear), static_tables(bare)
    assert all(with_gear[k].equals(without[k]) for k in without)
    assert ideal.gear.ground_truth(ideal.world.ground_truth()) == bare.ground_truth()


def test_a_profile_spelling_out_ideal_lands_the_same_rows_through_the_transform() -> None:
    switch_metrics = tuple(dict.fromkeys(s.metric for s in SERIES if s.style in ("switch", "pool")))
    spelled = Profile.model_validate(
        {"name": "ideal-spelled", "switch": {"groups": {"ports": {"every": 1, "metrics": switch_metrics}}}}
    )
    r = run(spelled)
    assert not r.gear.identity
    assert all(decoded(o).equals(decoded(t)) for o, t in zip(r.out, r.raw, strict=True))


def test_sonic_broadcom_switches_report_no_pause_duration_and_bnxt_counts_cnps_received() -> None:
    sc = load_scenario("cnp_loss")  # an incast from 60 s; gpu-001 ignores the CNPs sent to it
    incidents = [{**i.model_dump(), "ignored": True} if i.kind == "cnp_loss" else i.model_dump() for i in sc.incidents]
    sc = Scenario.model_validate({**sc.model_dump(), "incidents": incidents})
    r = run("sonic-broadcom", sc, 75.0)
    df = r.frame()
    switch = df[df.role == "switch"]
    assert not switch.metric.str.contains("duration").any()
    assert {"pfc_rx_pause", "pfc_tx_pause"} <= set(switch.metric)
    nic = df[df.role == "nic"]
    assert not {"cnp_handled", "cnp_ignored"} & set(nic.metric)
    cnp = nic[nic.metric == "cnp_received"]
    assert set(cnp.raw_name) == {"rx_cnp_pkts"} and cnp.port.str.match(r"bnxt_re\d/1$").all()
    # rx_cnp_pkts counts every CNP that arrived: what the model handled plus what it ignored
    raw = decoded(pa.concat_tables(r.raw)).to_pandas()
    model = raw[raw.metric.isin(["cnp_handled", "cnp_ignored"])].groupby(["ts", "device", "port"]).value.sum()
    assert raw[raw.metric == "cnp_ignored"].value.max() > 0 and raw[raw.metric == "cnp_handled"].value.max() > 0
    polled = cnp.assign(ts=cnp.ts.dt.floor("1s"), port=cnp.port.str.replace("bnxt_re", "mlx5_"))  # no host skew here
    got = polled.set_index(["ts", "device", "port"]).value
    assert (got == model.reindex(got.index)).all()
    assert set(nic[nic.metric == "pfc_rx_pause"].raw_name) == {"rx_pfc_ena_frames_pri0", "rx_pfc_ena_frames_pri3"}


def test_each_group_is_read_at_its_cadence_on_its_device_clock() -> None:
    df = run("sonic-spectrum").frame()
    prof = load_profile("sonic-spectrum")
    assert prof.switch.groups is not None
    for group, metric in (
        ("ports", "tx_bytes"),
        ("queues", "queue_tx_bytes"),
        ("priority_groups", "pg_dropped_packets"),
    ):
        series = df[(df.metric == metric) & (df.role == "switch")].sort_values("ts")
        gaps = series.groupby(["device", "port", "priority"]).ts.diff().dropna().dt.total_seconds()
        assert len(gaps) and np.allclose(gaps, prof.switch.groups[group].every), group
    # the watchdog's 200 ms is read at every poll: the fast path snapshots once per second
    paused = df[df.metric == "queue_paused"]
    assert set(paused.priority) == {3} and len(paused) == len(paused[["device", "port"]].drop_duplicates()) * SECONDS
    # each device at its own phase: stamps off the poll grid by an amount of its own, the same for all its ports
    ports = df[(df.metric == "tx_bytes") & (df.role == "switch")]
    phase = (ports.ts - ports.ts.dt.floor("1s")).dt.total_seconds()
    per_device = phase.groupby(ports.device).nunique()
    assert (per_device == 1).all() and phase.groupby(ports.device).first().nunique() == len(per_device)
    # and each (device, group) at its own slot within the interval
    queues = df[df.metric == "queue_tx_bytes"]
    first_read = queues.groupby("device").ts.min().dt.floor("1s")
    assert first_read.nunique() > 1 and (first_read - START).dt.total_seconds().max() <= 10
    # groups stamped milliseconds apart on one device
    one = df[(df.device == "leaf-r0-01") & df.metric.isin(["tx_bytes", "queue_tx_bytes"])]
    offsets = sorted(set((one.ts - one.ts.dt.floor("1s")).dt.total_seconds().round(6)))
    assert len(offsets) == 2 and 0.001 < offsets[1] - offsets[0] < 0.01


def test_a_watermark_read_holds_the_max_of_the_peaks_since_the_last_read() -> None:
    r = run("sonic-spectrum")
    df = r.frame()
    raw = decoded(pa.concat_tables(r.raw)).to_pandas()
    key = ["device", "port", "priority", "metric"]
    wm = df[df.metric.isin(WATERMARKS)].sort_values("ts")
    gaps = wm.groupby(key).ts.diff().dropna().dt.total_seconds()
    assert len(gaps) and np.allclose(gaps, 60)
    peaks = raw[raw.metric.isin(WATERMARKS)].set_index(key)
    checked = 0
    for name, reads in wm.groupby(key):
        series = peaks.loc[name].sort_values("ts")
        previous = START
        for ts, value in zip(reads.ts.dt.floor("1s"), reads.value, strict=True):
            window = series[(series.ts > previous) & (series.ts <= ts)]
            assert value == window.value.max()
            previous = ts
            checked += value > 0
    assert checked > 0  # the storm filled queues: some reads are non-zero peaks


def test_hosts_only_lldp_and_slash_names_on_arista() -> None:
    r = run("arista-eos")
    links = (
        static_tables(r.world, r.gear)["links"].to_pandas().query("source != 'rdma'")
    )  # LLDP's, not the NIC inventory
    roles = r.roles()
    assert {roles[d] for d in links.device} == {"host"}
    assert links.peer_port.str.fullmatch(r"Ethernet\d+/1").all()
    df = r.frame()
    switch_ports = set(df[(df.role == "switch") & (df.port != "ingress_lossless_pool")].port)
    assert switch_ports and all("/" in p for p in switch_ports)
    assert "port_speed_bps" in set(df.metric) and "pg_watermark_bytes" not in set(df.metric)


def test_sonic_advertises_its_alias_and_broadcom_sees_lldp_from_the_switches_only() -> None:
    spectrum = run("sonic-spectrum")
    links = (
        static_tables(spectrum.world, spectrum.gear)["links"].to_pandas().query("source != 'rdma'")
    )  # LLDP's, not the NIC inventory
    roles = spectrum.roles()
    to_switch = links[[roles[p] != "host" for p in links.peer_device]]
    assert to_switch.peer_port.str.fullmatch(r"etp\d+").all() and set(links.port) & {"eth0", "Ethernet0"}
    broadcom = run("sonic-broadcom")
    links = (
        static_tables(broadcom.world, broadcom.gear)["links"].to_pandas().query("source != 'rdma'")
    )  # LLDP's, not the NIC inventory
    assert {roles[d] for d in links.device} == {"leaf", "spine"}


def test_cumulus_breaks_host_ports_out_and_names_every_port_once() -> None:
    r = run("cumulus")
    links = (
        static_tables(r.world, r.gear)["links"].to_pandas().query("source != 'rdma'")
    )  # LLDP's, not the NIC inventory
    leaf = links[links.device == "leaf-r0-01"]
    assert {"swp1s0", "swp1s1", "swp8s1"} <= set(leaf.port)
    assert leaf.port.str.fullmatch(r"swp\d+(s[01])?").all() and leaf.port.is_unique
    assert links[links.device == "spine-01"].port.str.fullmatch(r"swp\d+").all()


def test_the_ground_truth_names_ports_as_the_gear_does() -> None:
    r = run("srlinux")
    (storm,) = r.gear.ground_truth(r.world.ground_truth())["incidents"]
    leaf_port = next(p for p in storm["ports"] if p.startswith("leaf"))
    assert leaf_port.split(":")[1].startswith("ethernet-1/")
    incidents = static_tables(r.world, r.gear)["incidents"].to_pandas()
    assert list(incidents.ports[0]) == storm["ports"]
    df = r.frame()
    assert leaf_port in set(df.device + ":" + df.port)


def test_the_profile_turns_the_pfc_watchdog_on() -> None:
    sc = load_scenario("pfc_storm")
    assert with_profile(sc, load_profile("sonic-spectrum")).engine_params().pfcwd
    assert not with_profile(sc, load_profile("ideal")).engine_params().pfcwd
    df = run("sonic-spectrum").frame()
    detected = df[df.metric == "pfcwd_storm_detected"]
    assert set(detected.raw_name) == {"PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED"} and detected.value.max() >= 1


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"clocks": {"host_skew_max": 0.6}}, "at most 0.5"),
        ({"switch": {"groups": {"ports": {"every": 1, "metrics": ["no_such_metric"]}}}}, "not in the catalog"),
        ({"switch": {"groups": {g: {"every": 1, "metrics": ["tx_bytes"]} for g in GROUPS[:2]}}}, "in both"),
        ({"switch": {"vendors": ["cumulus"], "groups": {"ports": {"every": 1, "metrics": ["tx_bytes"]}}}}, "no raw"),
        ({"nic": {"driver": "bnxt", "metrics": ["cnp_sent"]}}, "rdma_names"),
        ({"lldp": "sideways"}, "lldp"),
    ],
)
def test_a_bad_profile_says_what_is_wrong(change: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Profile.model_validate({"name": "bad", **change})


def test_an_unknown_profile_names_the_shipped_ones() -> None:
    with pytest.raises(ProfileError, match="sonic-spectrum"):
        load_profile("sonic-nope")


def test_a_restarted_switch_reads_nothing_until_it_is_back() -> None:
    """`Gear.restart`: from the restart until it is back the switch reads nothing (its telemetry is down with its
    control plane); the other switches read on."""
    world = build_world(load_scenario("pfc_storm"), 12.0, START)
    gear = Gear(load_profile("sonic-broadcom"), world)
    gear.restart("spine-01", START + dt.timedelta(seconds=4), 5.0)
    layout = gear.layout()
    device = dict(zip(layout.column("row").to_pylist(), layout.column("device").to_pylist(), strict=True))
    read_at: dict[str, list[int]] = {"spine-01": [], "spine-02": []}
    for k in range(1, 12):
        world.engine.run(1.0)
        ts = START + dt.timedelta(seconds=k)
        rows, _, _ = gear.read(ts, world.engine.snapshot(ts))
        for name in {device[int(r)] for r in rows} & set(read_at):
            read_at[name].append(k)
        assert ("spine-01" in gear.offline_at(ts)) == (4 <= k < 9)
    assert read_at["spine-02"] == list(range(1, 12))
    assert read_at["spine-01"] == [1, 2, 3, 9, 10, 11]
    with pytest.raises(SimError, match="no device"):
        gear.restart("spine-99", START, 1.0)


@pytest.mark.parametrize("profile", ["ideal", "sonic-broadcom", "arista-eos"])
def test_an_unmonitored_device_reports_nothing_but_its_neighbours_lldp_names_it(profile: str) -> None:
    """A storage array (a host no job runs on) that no collector reads: none of its counters, LLDP, NIC inventory
    or QP records land; the switches' LLDP (where the profile has it) still names it; every other host reports."""
    sc = load_scenario("pfc_storm")
    array = sc.model_copy(update={"name": f"pfc_storm_unmonitored_{profile}", "unmonitored": ["gpu-016"]})
    r = run(profile, array, seconds=4.0)
    reporting = {str(d) for t in r.out for d in t.column("device").to_pylist()}
    hosts = {d.name for d in r.world.topology.devices if d.role == "host"}
    assert "gpu-016" not in reporting and hosts - {"gpu-016"} <= reporting
    assert {str(d) for d in r.raw[-1].column("device").to_pylist()} >= hosts  # the engine still runs it
    tables = static_tables(r.world, r.gear)
    links = tables["links"].to_pandas()
    assert "gpu-016" not in set(links.device)
    if r.gear.profile.lldp != "hosts":
        assert "gpu-016" in set(links.peer_device)  # its leaf's LLDP sees it
    assert "gpu-016" not in set(tables["qp_owners"].column("host").to_pylist())
    assert r.gear.monitored("gpu-015") and not r.gear.monitored("gpu-016")
    with pytest.raises(SimError, match="no device gpu-999"):
        Gear(load_profile(profile), build_world(array.model_copy(update={"unmonitored": ["gpu-999"]}), 1.0, START))


@pytest.mark.parametrize("profile", ["srlinux", "cumulus"])
def test_switches_that_count_carrier_transitions_count_each_flap_twice(profile: str) -> None:
    """SR Linux (`statistics/carrier-transitions`) and Cumulus Linux (OpenConfig `state/counters/carrier-transitions`)
    count every oper status change, down and up: a flap of 2 s every 10 s is two transitions at both ends of the
    cable, however briefly the link was down between two reads."""
    flaps = load_scenario("link_flap").model_copy(
        update={
            "name": f"link_flap_{profile}",
            "incidents": [
                LinkFlap(
                    kind="link_flap", start=2.0, end=25.0, device="leaf-r0-01", port="Ethernet32", period=10.0, down=2.0
                )
            ],
        }
    )
    r = run(profile, flaps, seconds=30.0)
    df = r.frame()
    seen = df[df.metric == "carrier_transitions"]
    assert set(seen.device) >= {"leaf-r0-01"} and (seen.role == "switch").all()
    peer = r.world.topology.port("leaf-r0-01", "Ethernet32")
    ends = {("leaf-r0-01", r.gear.names.local("leaf-r0-01", "Ethernet32")),
            (peer.peer_device, r.gear.names.local(peer.peer_device, peer.peer_port))}  # fmt: skip
    for device, port in ends:
        last = seen[(seen.device == device) & (seen.port == port)].sort_values("ts").value.iloc[-1]
        assert last == 2 * 3  # downs at 2, 12 and 22 s, each back up 2 s later
    quiet = seen[~seen.apply(lambda row: (row.device, row.port) in ends, axis=1)]
    assert (quiet.value == 0).all()
