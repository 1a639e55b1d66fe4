"""Frames: per-second rates computed in the engine (wraps, resets, duplicates, out-of-order samples),
gauges, bucket totals, topology and job attribution, on both store backends."""

from __future__ import annotations

import datetime as dt

import polars as pl
import pyarrow as pa
import pytest

from rocescope.analysis.episodes import episodes
from rocescope.analysis.fabric import Fabric
from rocescope.analysis.frames import RATES_SCHEMA, Frames, Window, check_schema
from rocescope.errors import SchemaError
from rocescope.pipeline.batch import conform
from rocescope.pipeline.store import Store

W32 = 2**32


def counters(now: dt.datetime, rows: list[tuple[float, str, str, int, str, float]]) -> pa.Table:
    """Rows of (seconds after `now`, device, port, priority, metric, value)."""
    table = pa.table(
        {
            "ts": pa.array([now + dt.timedelta(seconds=r[0]) for r in rows], pa.timestamp("ns", tz="UTC")),
            "device": [r[1] for r in rows],
            "role": ["nic" if r[1].startswith("gpu") else "switch" for r in rows],
            "port": [r[2] for r in rows],
            "priority": pa.array([r[3] for r in rows], pa.int8()),
            "metric": [r[4] for r in rows],
            "value": pa.array([float(r[5]) for r in rows], pa.float64()),
            "source": ["test"] * len(rows),
            # the 32-bit unwrap is IF-MIB's (a counter 32 bits wide); gNMI and ethtool counters are 64-bit
            "raw_name": ["ifOutOctets" if r[2] == "Ethernet0" else r[4] for r in rows],
        }
    )
    return pa.Table.from_batches([conform("counters", table)])


def series(values: list[float], metric: str = "tx_bytes", device: str = "leaf-1", port: str = "Ethernet0") -> list:
    return [(float(i), device, port, -1, metric, v) for i, v in enumerate(values)]


def test_rates_unwrap_32_and_64_bit_counters_and_never_go_negative_on_reset(any_store: Store, now: dt.datetime) -> None:
    rows = series([100, 300, W32 - 100, 50, 20, 120])  # +200, +(W32 - 400), wrap +150, reset (+20), +100
    rows += series([2.0**64 - 2.0**20, 2.0**20], port="Ethernet4")  # a 64-bit wrap
    rows += [(2.0, "leaf-1", "Ethernet8", -1, "tx_bytes", 7.0), (2.0, "leaf-1", "Ethernet8", -1, "tx_bytes", 7.0)]
    any_store.insert("counters", counters(now, rows))
    frames = Frames(any_store, Window(now, now + dt.timedelta(seconds=10)))
    r = frames.rates(["tx_bytes"])
    check_schema(r, RATES_SCHEMA, "rates")
    by_port = {p: g.sort("ts")["rate"].to_list() for (p,), g in r.group_by("port")}
    assert by_port["Ethernet0"] == [200, W32 - 400, 150, 20, 100]
    assert by_port["Ethernet4"] == [2.0**21]
    assert "Ethernet8" not in by_port  # a duplicated sample gives no rate
    assert frames.rates(["tx_bytes"], min_rate=151)["rate"].to_list() == [200, W32 - 400, 2.0**21]
    # one scan (series landed by several sources, metrics whose values may be re-sent), once; no group changes
    # often enough to re-send (`resent_groups` asks nothing more); each rate query cached
    assert frames.queries == 3 and frames.rates(["tx_bytes"]).height == 6 and frames.queries == 3


def test_a_one_sample_glitch_is_stepped_over_and_an_absurd_increase_gives_no_rate(
    store: Store, now: dt.datetime
) -> None:
    rows = series([1e9, 2e9, 0, 4e9, 5e9, 2.0**64 - 1, 7e9, 8e9])  # read once as 0, once as garbage
    rows += series([1e6, 2e6, 2e6 + 1e12], port="Ethernet4")  # 1 TB in a second on one port: not traffic
    store.insert("counters", counters(now, rows))
    frames = Frames(store, Window(now, now + dt.timedelta(seconds=10)))
    r = {p: g.sort("ts") for (p,), g in frames.rates(["tx_bytes"]).group_by("port")}
    # the dip gives 0 and the sample after it the increase over both intervals; the spike gives nothing
    assert r["Ethernet0"]["rate"].to_list() == [1e9, 0, 1e9, 1e9, 1e9, 1e9]
    assert r["Ethernet0"]["dt_s"].to_list() == [1, 1, 2, 1, 2, 1]
    assert r["Ethernet4"]["rate"].to_list() == [1e6]
    t = frames.totals(["tx_bytes"], bucket_s=100).filter(pl.col("port") == "Ethernet0")
    assert t["delta"].sum() == 7e9  # every byte once, through the glitches (in one bucket or two: `now` decides)


def test_totals_sum_every_increase_once(store: Store, now: dt.datetime) -> None:
    """Bucket totals are the per-sample increases summed, a reset included, the sample before the window
    start giving the first one."""
    rows = series([0, 10, 30, 60, 100, 150, 210]) + series([500, 600, 10, 40, 90, 150, 220], port="Ethernet4")
    rows += series([7, 7, 7, 7, 7, 7, 7], port="Ethernet8")
    store.insert("counters", counters(now, rows))
    frames = Frames(store, Window(now + dt.timedelta(seconds=1), now + dt.timedelta(seconds=10)))
    t = frames.totals(["tx_bytes"], bucket_s=2)
    r = frames.rates(["tx_bytes"]).with_columns(pl.col("ts").dt.truncate("2s").alias("bucket"))
    want = r.group_by("port", "bucket").agg(pl.col("delta").sum(), pl.col("dt_s").sum().alias("seconds"))
    got = t.select("port", "bucket", "delta", "seconds")
    assert got.sort("port", "bucket").rows() == want.sort("port", "bucket").select(got.columns).rows()
    assert got.filter(pl.col("port") == "Ethernet0")["delta"].sum() == 210
    assert got.filter(pl.col("port") == "Ethernet4")["delta"].sum() == 100 + 10 + 210


def test_out_of_order_arrival_gives_the_same_rates(store: Store, now: dt.datetime) -> None:
    rows = series([0, 1000, 3000, 6000])
    store.insert("counters", counters(now, rows[2:]))
    store.insert("counters", counters(now, rows[:2]))  # the older samples arrive last
    r = Frames(store, Window(now, now + dt.timedelta(seconds=10))).rates(["tx_bytes"])
    assert r["rate"].to_list() == [1000, 2000, 3000]


def test_the_sample_before_the_window_gives_its_first_rate(store: Store, now: dt.datetime) -> None:
    store.insert("counters", counters(now, series([0, 10, 30, 60])))
    r = Frames(store, Window(now + dt.timedelta(seconds=2), now + dt.timedelta(seconds=10))).rates(["tx_bytes"])
    assert r["rate"].to_list() == [20, 30]


def test_gauges_filters_and_totals(store: Store, now: dt.datetime) -> None:
    rows = series([5, 50, 500], metric="queue_watermark_bytes") + series([0, 10, 20, 30, 40], port="Ethernet4")
    rows += series([7, 8], metric="queue_watermark_bytes", device="leaf-2")
    store.insert("counters", counters(now, rows))
    frames = Frames(store, Window(now, now + dt.timedelta(seconds=10)))
    g = frames.gauges(["queue_watermark_bytes"], min_value=40)
    assert g["value"].to_list() == [50, 500]
    assert frames.gauges(["queue_watermark_bytes"], devices=["leaf-2"])["value"].to_list() == [7, 8]
    t = frames.totals(["tx_bytes"], bucket_s=2)
    assert t["delta"].sum() == 40 and t["seconds"].sum() == 4


def test_a_placement_naming_no_nic_stands_for_every_nic_of_its_host(store: Store, now: dt.datetime) -> None:
    """A pod list read without an inventory places jobs on hosts only: each such placement stands for the
    host's netdevs with counters (its RDMA devices where no netdev reports), each paired with an RDMA device in
    order where the host has as many; placements that name a NIC stay as they are, and one that names a netdev
    only gets its paired RDMA device."""
    rows = series([0, 10], device="gpu-1", port="eth1") + series([0, 10], device="gpu-1", port="eth0")
    rows += [r for dev in ("mlx5_1/1", "mlx5_0/1") for r in series([0, 10], "cnp_handled", "gpu-1", dev)]
    rows += series([0, 10], metric="cnp_handled", device="gpu-2", port="mlx5_3/1")  # RDMA counters only
    rows += series([0, 10], device="gpu-3", port="eth2")
    rows += series([0, 10], device="gpu-5", port="eth0") + series([0, 10], device="gpu-5", port="eth1")
    rows += series([0, 10], metric="cnp_handled", device="gpu-5", port="mlx5_0/1")  # one RDMA device, two netdevs
    store.insert("counters", counters(now, rows))
    far = now + dt.timedelta(days=1)
    placed = [
        ("ns/a", "gpu-1", "", "", "10.0.0.1", 0, now, far),
        ("ns/a", "gpu-2", "", "", "10.0.0.2", 1, now, far),
        ("ns/b", "gpu-3", "eth2", "mlx5_2", "10.0.0.3", 0, now, far),
        ("ns/c", "gpu-4", "", "", "10.0.0.4", 0, now, far),  # no counters from its host: left as it is
        ("ns/c", "gpu-5", "", "", "10.0.0.5", 1, now, far),
        ("ns/d", "gpu-1", "eth1", "", "10.0.1.1", 3, now, far),  # an inventory of netdevs only
    ]
    cols = ("job_id", "host", "netdev", "rdma_dev", "ip", "rank", "valid_from", "valid_to")
    table = pa.table({c: [r[i] for r in placed] for i, c in enumerate(cols)})
    for extra in ("job_name", "namespace", "pod", "gid"):
        table = table.append_column(extra, pa.array([""] * len(placed)))
    store.insert("endpoints", pa.Table.from_batches([conform("endpoints", table)]))
    ep = Frames(store, Window(now, now + dt.timedelta(seconds=10))).endpoints()
    assert ep.select("job_id", "host", "netdev", "rdma_dev", "ip", "rank").rows() == [
        ("ns/a", "gpu-1", "eth0", "mlx5_0", "", -1),
        ("ns/a", "gpu-1", "eth1", "mlx5_1", "", -1),
        ("ns/a", "gpu-2", "mlx5_3", "mlx5_3", "", -1),
        ("ns/b", "gpu-3", "eth2", "mlx5_2", "10.0.0.3", 0),
        ("ns/c", "gpu-4", "", "", "10.0.0.4", 0),
        ("ns/c", "gpu-5", "eth0", "", "", -1),
        ("ns/c", "gpu-5", "eth1", "", "", -1),
        ("ns/d", "gpu-1", "eth1", "mlx5_1", "10.0.1.1", 3),
    ]


def test_schema_check_names_what_is_wrong() -> None:
    with pytest.raises(SchemaError, match="missing columns"):
        check_schema(pl.DataFrame({"ts": [1]}), RATES_SCHEMA, "rates")
    bad = pl.DataFrame(schema={**RATES_SCHEMA, "rate": pl.String()})
    with pytest.raises(SchemaError, match="rate"):
        check_schema(bad, RATES_SCHEMA, "rates")


def test_window_must_be_aware_and_not_empty(now: dt.datetime) -> None:
    with pytest.raises(ValueError, match="timezone"):
        Window(now.replace(tzinfo=None), now.replace(tzinfo=None))
    with pytest.raises(ValueError, match="empty"):
        Window(now, now)


def test_episodes_join_close_samples_and_split_at_gaps(now: dt.datetime) -> None:
    ts = [now + dt.timedelta(seconds=s) for s in (1, 2, 3, 10, 11)]
    frame = pl.DataFrame({"ts": ts, "port": ["a"] * 5, "dt_s": [1.0] * 5, "v": [1, 2, 3, 4, 5]})
    eps = episodes(frame, ["port"], gap_s=1.5, aggregations=[pl.col("v").max().alias("peak")])
    assert eps["samples"].to_list() == [3, 2] and eps["peak"].to_list() == [3, 5]
    assert eps["start"][0] == now and eps["end"][1] == ts[-1]
    empty = episodes(frame.clear(), ["port"], 1.5, aggregations=[pl.col("v").max().alias("peak")])
    assert empty.is_empty() and empty.schema["peak"] == pl.Int64 and empty.schema["start"] == frame.schema["ts"]


def _fabric(now: dt.datetime) -> Fabric:
    links = pl.DataFrame(
        [
            ("gpu-1", "eth0", "leaf-a", "Ethernet0"),
            ("leaf-a", "Ethernet0", "gpu-1", "eth0"),
            ("gpu-2", "eth0", "leaf-b", "Ethernet0"),
            ("leaf-b", "Ethernet0", "gpu-2", "eth0"),
            ("gpu-3", "eth0", "leaf-a", "Ethernet4"),
            ("leaf-a", "Ethernet4", "gpu-3", "eth0"),
            ("leaf-a", "Ethernet32", "spine-1", "Ethernet0"),
            ("spine-1", "Ethernet0", "leaf-a", "Ethernet32"),
        ],
        schema=["device", "port", "peer_device", "peer_port"],
        orient="row",
    )
    far = now + dt.timedelta(days=3650)
    endpoints = pl.DataFrame(
        [
            ("ns/wide", "gpu-1", "eth0", "mlx5_0", now, far),
            ("ns/wide", "gpu-2", "eth0", "mlx5_0", now, far),
            ("ns/local", "gpu-3", "eth0", "mlx5_0", now, far),
        ],
        schema=["job_id", "host", "netdev", "rdma_dev", "valid_from", "valid_to"],
        orient="row",
    )
    roles = pl.DataFrame({"device": ["gpu-1", "leaf-a", "spine-1"], "role": ["nic", "switch", "switch"]})
    return Fabric.build(links, endpoints, roles)


def test_fabric_tiers_and_job_attribution(now: dt.datetime) -> None:
    fab = _fabric(now)
    later = now + dt.timedelta(minutes=1)
    assert fab.leaves == {"leaf-a", "leaf-b"} and fab.spines == {"spine-1"}
    assert fab.port_kind("leaf-a", "Ethernet0") == "downlink" and fab.port_kind("leaf-a", "Ethernet32") == "uplink"
    assert fab.port_kind("gpu-1", "mlx5_0/1") == "host" and fab.port_kind("spine-1", "Ethernet0") == "spine"
    assert fab.jobs_at("leaf-a", "Ethernet4", now, later) == {"ns/local"}
    assert fab.jobs_at("gpu-1", "mlx5_0/1", now, later) == {"ns/wide"}
    # only the job that spans two leaves can use leaf-a's uplink or the spine port facing leaf-a
    assert fab.jobs_at("leaf-a", "Ethernet32", now, later) == {"ns/wide"}
    assert fab.jobs_at_refs(["spine-1:Ethernet0", "leaf-a:Ethernet4"], now, later) == ["ns/local", "ns/wide"]
    assert fab.jobs_at("leaf-a", "Ethernet4", now - dt.timedelta(hours=2), now - dt.timedelta(hours=1)) == set()


def test_other_sources_names_of_a_device_are_its_counters_name(store: Store, now: dt.datetime) -> None:
    """LLDP and Kubernetes may give a device's FQDN, or another case, where its counters carry the short name
    (and the reverse): links, placements and QP owners come out under the counters' names; an address or a
    label that two devices share stays as it is."""
    rows = series([0, 10], device="leaf-1", port="Ethernet0") + series(
        [0, 10], device="gpu-1.dc1.example.com", port="eth0"
    )
    rows += series([0, 10], device="spine-1.a.example.com", port="Ethernet0")
    rows += series([0, 10], device="spine-1.b.example.com", port="Ethernet0")
    store.insert("counters", counters(now, rows))
    links = [
        ("gpu-1", "eth0", "LEAF-1.dc1.example.com", "Ethernet0"),
        ("leaf-1.dc1.example.com", "Ethernet0", "gpu-1", "eth0"),
        ("leaf-1", "Ethernet8", "spine-1", "Ethernet0"),  # two spines share the label: ambiguous
        ("leaf-1", "Ethernet9", "10.0.0.9", "Ethernet0"),  # an address names no host
    ]
    cols = ("device", "port", "peer_device", "peer_port")
    table = pa.table({c: [r[i] for r in links] for i, c in enumerate(cols)})
    table = table.append_column("seen_at", pa.array([now] * len(links), pa.timestamp("ns", tz="UTC")))
    table = table.append_column("source", pa.array(["lldp"] * len(links)))
    store.insert("links", pa.Table.from_batches([conform("links", table)]))
    frames = Frames(store, Window(now, now + dt.timedelta(seconds=10)))
    assert frames.links().rows() == [
        ("gpu-1.dc1.example.com", "eth0", "leaf-1", "Ethernet0"),
        ("leaf-1", "Ethernet0", "gpu-1.dc1.example.com", "eth0"),
        ("leaf-1", "Ethernet8", "spine-1", "Ethernet0"),
        ("leaf-1", "Ethernet9", "10.0.0.9", "Ethernet0"),
    ]
    placed = {"job_id": ["ns/a"], "host": ["GPU-1"], "netdev": [""], "rdma_dev": [""], "ip": [""], "rank": [0]}
    placed |= {"valid_from": [now], "valid_to": [now + dt.timedelta(days=1)]}
    placed |= {c: [""] for c in ("job_name", "namespace", "pod", "gid")}
    store.insert("endpoints", pa.Table.from_batches([conform("endpoints", pa.table(placed))]))
    ep = Frames(store, Window(now, now + dt.timedelta(seconds=10))).endpoints()
    assert ep.select("host", "netdev").rows() == [("gpu-1.dc1.example.com", "eth0")]  # a Kubernetes node name


def _lldp(store: Store, at: dt.datetime, rows: list[tuple[str, str, str, str]], source: str = "lldp") -> None:
    """One LLDP read of a device: every neighbour it names, stamped with the read's time."""
    cols = ("device", "port", "peer_device", "peer_port")
    table = pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)})
    table = table.append_column("seen_at", pa.array([at] * len(rows), pa.timestamp("ns", tz="UTC")))
    table = table.append_column("source", pa.array([source] * len(rows)))
    store.insert("links", pa.Table.from_batches([conform("links", table)]))


def test_a_neighbour_its_device_no_longer_names_ages_out(store: Store, now: dt.datetime) -> None:
    """LLDP's TTL (IEEE 802.1AB: 4 x 30 s by default) removes a neighbour that stopped advertising from the
    agent's table, so a device's later reads without it say the cable is gone (a storage array unplugged, a port
    re-cabled to nothing): that row ages out. A neighbour read in the window stays (a link that went down in it
    dropped out of LLDP for that reason), and so do the last reads of a device that stopped reporting (the best
    known cabling); one read jittered by the dump's own stamps is no absence."""
    day = dt.timedelta(days=1)
    _lldp(store, now - day, [("leaf-1", "Ethernet0", "array-1", "eth0"), ("leaf-1", "Ethernet4", "gpu-1", "eth0")])
    _lldp(store, now - day, [("leaf-1", "Ethernet8", "spine-1", "Ethernet0")])
    # leaf-2 fell silent two hours ago, after a dump whose neighbours carry stamps 30 ms apart
    _lldp(store, now - dt.timedelta(hours=2), [("leaf-2", "Ethernet0", "gpu-2", "eth0")])
    _lldp(
        store, now - dt.timedelta(hours=2) + dt.timedelta(milliseconds=30), [("leaf-2", "Ethernet4", "gpu-4", "eth0")]
    )
    for minutes in (30, 1):
        # Ethernet12's neighbour went away with the window's first minute: seen in the window, kept
        seen = [("leaf-1", "Ethernet4", "gpu-1", "eth0"), ("leaf-1", "Ethernet8", "spine-1", "Ethernet0")]
        _lldp(store, now - dt.timedelta(minutes=minutes), [*seen, ("leaf-1", "Ethernet12", "gpu-3", "eth0")])
    _lldp(store, now + dt.timedelta(minutes=1), [("leaf-1", "Ethernet4", "gpu-1", "eth0")])
    frames = Frames(store, Window(now, now + dt.timedelta(minutes=5)))
    assert frames.links().select("device", "port", "peer_device").rows() == [
        ("leaf-1", "Ethernet12", "gpu-3"),
        ("leaf-1", "Ethernet4", "gpu-1"),
        ("leaf-1", "Ethernet8", "spine-1"),
        ("leaf-2", "Ethernet0", "gpu-2"),
        ("leaf-2", "Ethernet4", "gpu-4"),
    ]
