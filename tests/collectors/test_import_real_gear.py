"""`rocescope import` of what real gear sends about port speed, the PFC watchdog, PG drops and watermarks.

gnmic events are built in the shape gnmic writes them (openconfig/gnmic pkg/formatters/event.go: the path
without keys, the prefix's target in tag `target`, list keys as `<elem>_<key>` tags, a JSON object value
flattened with `/` by karimra/go-map-flattener, an `origin:` in front of the path), around the real values
sonic-gnmi serves (tests/fixtures/realdata/04_gnmi_sonic, tests/fixtures/sonic). SONiC dumps are the real
ones, plain or wrapped as `sonic-db-dump -y` writes each key (`{type, value, ttl, expireat}`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from rocescope.cli import app
from rocescope.collectors.common.rows import CounterRows
from rocescope.collectors.counters_file import canonical_counters
from rocescope.collectors.importers import gnmic_rows
from rocescope.collectors.sonic_dump import Namespace, namespace_of, port_links, sonic_dump

from store_cli import runner, sql_rows, store_config

FIX = Path(__file__).parent.parent / "fixtures"
REAL = FIX / "realdata" / "04_gnmi_sonic"
PORTS = FIX / "sonic"
ETHTOOL = FIX / "realdata" / "01_ethtool"
RDMA = FIX / "realdata" / "02_rdma"
KEYS = ("port", "metric", "priority", "value", "raw_name")
TS = 1_764_000_000_000_000_000


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def flatten(prefix: str, value: object) -> dict[str, object]:
    """gnmic's `values` of one update: a JSON object flattened under the path with `/`."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, object] = {}
    for key, item in value.items():
        out.update(flatten(f"{prefix}/{key}", item))
    return out


def event(source: str, path: str, value: object, target: str = "", **keys: str) -> dict[str, Any]:
    tags = {"source": source, "subscription-name": "rocescope", **keys}
    if target:
        tags["target"] = target
    return {"name": "rocescope", "timestamp": TS, "tags": tags, "values": flatten(path, value)}


def table_of(path: Path, sep: str) -> dict[str, Any]:
    """A dumped redis table keyed by port (`PORT_TABLE:Ethernet0` -> `Ethernet0`), as sonic-gnmi answers a
    subscription to the table."""
    return {key.partition(sep)[2]: fields for key, fields in load(path).items()}


def by_key(rows: CounterRows) -> dict[tuple[str, str, int, str], float]:
    keys = zip(rows.device, rows.port, rows.priority, rows.metric, strict=True)
    return dict(zip(keys, rows.value, strict=True))


def real_gear_events() -> list[dict[str, Any]]:
    appl = table_of(PORTS / "sonic-gnmi_APPL_DB_PORT_TABLE.json", ":")
    return [
        event("leaf1:6030", "/interfaces/interface/ethernet/state/negotiated-port-speed",
              "openconfig-if-ethernet:SPEED_400GB", interface_name="Ethernet1/1"),
        event("leaf1:6030", "/interfaces/interface/ethernet/state/port-speed",
              "openconfig-if-ethernet:SPEED_UNKNOWN", interface_name="Ethernet2/1"),
        event("spine1:57400", "/srl_nokia-interfaces:interface/ethernet/port-speed", "100G",
              interface_name="ethernet-1/1"),
        event("sonic1:8080", "/PORT_TABLE", appl, target="APPL_DB"),
        event("sonic2:8080", "/sonic-db:/APPL_DB/localhost/PORT_TABLE/Ethernet0/speed", "400000"),
        event("sonic2:8080", "sonic-db:/STATE_DB/localhost/PORT_TABLE/Ethernet4/speed", "N/A"),
        event("sonic1:8080", "/COUNTERS/Ethernet68/Pfcwd", load(REAL / "sonic-gnmi_COUNTERS_Ethernet68_Pfcwd.txt"),
              target="COUNTERS_DB"),
        event("sonic1:8080", "/PERIODIC_WATERMARKS/Ethernet16/PriorityGroups",
              load(REAL / "sonic-gnmi_PERIODIC_WATERMARKS_Ethernet16_PriorityGroups.txt"), target="COUNTERS_DB"),
    ]  # fmt: skip


def test_gnmic_events_give_port_speed_pfc_watchdog_and_watermarks() -> None:
    appl = table_of(PORTS / "sonic-gnmi_APPL_DB_PORT_TABLE.json", ":")
    rows = gnmic_rows(iter([real_gear_events()]))
    got = by_key(rows)
    speeds = {(d, p): v for (d, p, _, m), v in got.items() if m == "port_speed_bps"}
    assert speeds == {
        ("leaf1", "Ethernet1/1"): 400e9,
        ("spine1", "ethernet-1/1"): 100e9,
        ("sonic2", "Ethernet0"): 400e9,
        **{("sonic1", port): float(fields["speed"]) * 1e6 for port, fields in appl.items()},
    }
    raws = {(d, r) for d, m, r in zip(rows.device, rows.metric, rows.raw_name, strict=True) if m == "port_speed_bps"}
    assert ("leaf1", "ethernet/state/negotiated-port-speed") in raws and ("sonic1", "PORT_TABLE/speed") in raws
    assert got[("sonic1", "Ethernet0", -1, "oper_up")] == 1.0
    assert got[("sonic1", "Ethernet0", -1, "admin_up")] == 1.0  # APPL_DB PORT_TABLE admin_status "up"
    pfcwd = load(REAL / "sonic-gnmi_COUNTERS_Ethernet68_Pfcwd.txt")
    for key, fields in pfcwd.items():
        port, _, queue = key.partition(":")
        assert got[("sonic1", port, int(queue), "pfcwd_storm_detected")] == float(
            fields["PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED"]
        )
        assert ("sonic1", port, int(queue), "pfcwd_storm_restored") in got
        assert got[("sonic1", port, int(queue), "pfcwd_stormed")] == {"operational": 0.0}[fields["PFC_WD_STATUS"]]
    assert got[("sonic1", "Ethernet16", 5, "pg_watermark_bytes")] == 0.0
    assert not any(v == 0.0 for (_, _, _, m), v in got.items() if m == "port_speed_bps")
    assert rows.malformed == 0 and rows.nonnumeric > 2  # SPEED_UNKNOWN, N/A, and the port table's text fields


def dump_of(*files: Path) -> list[dict[str, Any]]:
    """Several real dumps as one list of databases (sonic-gnmi's db_dump.json shape)."""
    return [load(f) for f in files]


def test_sonic_port_tables_give_one_speed_per_port() -> None:
    """APPL_DB speed (Mb/s), overridden by STATE_DB's operational speed where both are dumped; CONFIG_DB's
    configured speed only where neither is; `N/A` and portsyncd's markers give no row."""
    appl, state, config = (PORTS / f"sonic-gnmi_{db}.json" for db in ("APPL_DB_PORT_TABLE", "STATE_DB_PORT_TABLE",
                                                                        "CONFIG_DB_PORT"))  # fmt: skip
    operational = {p: float(f["speed"]) * 1e6 for p, f in table_of(state, "|").items()}
    applied = {p: float(f["speed"]) * 1e6 for p, f in table_of(appl, ":").items()}
    rows, _, bad = sonic_dump(dump_of(appl, config, state), "sw")
    speeds = Counter((p, r) for p, m, r in zip(rows.port, rows.metric, rows.raw_name, strict=True)
                     if m == "port_speed_bps")  # fmt: skip
    assert set(speeds.values()) == {1} and {r for _, r in speeds} == {"PORT_TABLE/speed"}
    assert {p: v for (_, p, _, m), v in by_key(rows).items() if m == "port_speed_bps"} == applied | operational
    assert bad == 0 and rows.nonnumeric > 0  # rmt_adv_speeds N/A, lanes, alias...
    configured, _, _ = sonic_dump(load(config), "sw")
    assert {(p, r): v for p, m, r, v in zip(configured.port, configured.metric, configured.raw_name,
                                              configured.value, strict=True) if m == "port_speed_bps"} == {
        (p, "PORT/speed"): float(f["speed"]) * 1e6 for p, f in table_of(config, "|").items()
    }  # fmt: skip
    full, _, _ = sonic_dump(load(REAL / "sonic-gnmi_db_dump_full_redis.json"), "sw")
    assert not {p for p in full.port if p in ("PortConfigDone", "PortInitDone")}


def test_sonic_dump_pfc_watchdog_pg_drops_and_watermarks_with_their_priority() -> None:
    """The sonic-utilities mock COUNTERS_DB: PFC watchdog and PG drop counters named through the queue and PG
    name maps (`Ethernet0:3` -> port Ethernet0, priority 3); buffer pools through their own map."""
    doc = load(REAL / "sonic-utilities_mock_counters_db.json")
    rows, _, bad = sonic_dump(doc, "sw")
    got = by_key(rows)
    want = {"PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED": "pfcwd_storm_detected",
            "PFC_WD_QUEUE_STATS_DEADLOCK_RESTORED": "pfcwd_storm_restored",
            "PFC_WD_QUEUE_STATS_TX_DROPPED_PACKETS": "pfcwd_tx_dropped_packets",
            "PFC_WD_QUEUE_STATS_RX_DROPPED_PACKETS": "pfcwd_rx_dropped_packets",
            "SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS": "pg_dropped_packets"}  # fmt: skip
    names = {oid: name for m in ("COUNTERS_QUEUE_NAME_MAP", "COUNTERS_PG_NAME_MAP") for name, oid in doc[m].items()}
    checked = Counter()
    for key, fields in doc.items():
        oid = key.partition(":")[2]
        if not key.startswith("COUNTERS:oid:") or oid not in names:
            continue
        port, _, index = names[oid].partition(":")
        for field, metric in want.items():
            if field in fields:
                assert got[("sw", port, int(index), metric)] == float(fields[field]), (key, field)
                checked[metric] += 1
    assert set(checked) == set(want.values()) and bad == 0
    pools = set(doc["COUNTERS_BUFFER_POOL_NAME_MAP"])
    assert pools & set(rows.port)  # buffer pools are named, not counted as unknown objects


def test_sonic_watermarks_one_reading_per_queue_and_since_clear_kept_raw() -> None:
    """The real switch dump holds each queue's watermark in COUNTERS (peak since the last poll) and in the
    PERIODIC, USER and PERSISTENT tables: one queue_watermark_bytes per queue; the others kept raw."""
    rows, _, _ = sonic_dump(load(REAL / "sonic-gnmi_db_dump_full_redis.json"), "sw")
    canonical = Counter(
        (p, q, m) for p, q, m in zip(rows.port, rows.priority, rows.metric, strict=True) if not m.startswith("raw:")
    )
    assert canonical and max(canonical.values()) == 1  # no (port, priority, metric) twice in one dump
    queues = {(p, q) for p, q, m in canonical if m == "queue_watermark_bytes"}
    for table in ("USER_WATERMARKS", "PERSISTENT_WATERMARKS", "PERIODIC_WATERMARKS"):
        raw = f"raw:{table}/SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES"
        kept = {(p, q) for p, q, m in zip(rows.port, rows.priority, rows.metric, strict=True) if m == raw}
        assert kept and kept <= queues and all(q >= 0 for _, q in kept), table


def wrapped(db: dict[str, Any]) -> dict[str, Any]:
    """A database as `sonic-db-dump -y` writes it: each key's fields under `value`, with its redis type."""
    return {
        key: {"expireat": 1764000000.0, "ttl": -0.001, "type": "hash", "value": fields} for key, fields in db.items()
    }


def test_sonic_db_dump_wrapped_entries_read_like_plain_ones() -> None:
    plain_doc = load(REAL / "sonic-gnmi_db_dump_full_redis.json")
    plain, links, _ = sonic_dump(plain_doc, "sw")
    dbs = [wrapped(db) for db in plain_doc]
    dbs[0]["SOME_STRING_KEY"] = {"expireat": 0, "ttl": -0.001, "type": "string", "value": "1"}
    wrapped_rows, wrapped_links, bad = sonic_dump(dbs, "sw")
    assert bad == 0 and wrapped_links == links
    assert Counter(zip(wrapped_rows.port, wrapped_rows.metric, wrapped_rows.value, strict=True)) == Counter(
        zip(plain.port, plain.metric, plain.value, strict=True)
    )
    assert "port_speed_bps" in set(wrapped_rows.metric)


def port_aliases(doc: Any) -> dict[str, str]:
    """Port -> alias, from the `alias` rows of `port_links` (the alias is the row's port, its name the peer's)."""
    return {n.peer_port: n.port for n in port_links(doc, "sw")["alias"]}


def test_port_aliases_from_config_db() -> None:
    """SONiC advertises the alias as the LLDP port id; the dump says which port each alias is (here the
    aliases run by port index from etp0, so `etpN` is not the N-th port)."""
    config = PORTS / "sonic-gnmi_CONFIG_DB_PORT.json"
    assert port_aliases(load(config)) == {p: f["alias"] for p, f in table_of(config, "|").items()}
    assert port_aliases(wrapped(load(config))) == port_aliases(load(config))
    assert port_aliases(load(REAL / "sonic-gnmi_db_dump_full_redis.json"))["Ethernet68"] == "hundredGigE1/18"
    assert port_links(load(config), "sw")["config"] == port_links(load(config), "sw")["chassis"] == []


def test_cli_lands_port_speeds_from_gnmic_and_sonic_dumps(tmp_path: Path) -> None:
    """`rocescope import --kind gnmic` and `--kind sonic` put port_speed_bps into the store with the raw names."""
    events = tmp_path / "events.json"
    events.write_text(json.dumps(real_gear_events()))
    dump = tmp_path / "APPL_DB.json"
    dump.write_text(json.dumps(wrapped(load(PORTS / "sonic-gnmi_APPL_DB_PORT_TABLE.json"))))
    for kind, path, extra in (("gnmic", events, []), ("sonic", dump, ["--device", "sonic3"])):
        store = tmp_path / kind
        store.mkdir()
        cfg = store_config(store)
        result = runner.invoke(app, ["--config", cfg, "import", "--kind", kind, str(path), *extra])
        assert result.exit_code == 0, result.output
        sql = "SELECT device, port, value, raw_name FROM counters WHERE metric = 'port_speed_bps' ORDER BY 1, 2"
        lines = sql_rows(cfg, sql)
        if kind == "gnmic":
            assert '"leaf1","Ethernet1/1",400000000000,"ethernet/state/negotiated-port-speed"' in lines
            assert '"spine1","ethernet-1/1",100000000000,"ethernet/port-speed"' in lines
        else:
            assert lines and all(line.startswith('"sonic3",') and '"PORT_TABLE/speed"' in line for line in lines)


def raw_named_nic_counters() -> pa.Table:
    """One NIC's counters as a Parquet export names them: each metric is the driver's own name (real `ethtool -S`
    of an mlx5 ConnectX-4 on eth0; real sysfs `counters/` and `hw_counters/` of mlx5_0 port 1)."""
    rows: list[tuple[str, str, float]] = []
    for line in (ETHTOOL / "ethq_mlx5_core_cx4_ethtool-S.txt").read_text().splitlines():
        name, _, value = line.partition(":")
        if value.strip().isdigit():
            rows.append(("eth0", name.strip(), float(value)))
    for line in (RDMA / "procfs_fixture_mlx5_0_sysfs.txt").read_text().splitlines():
        path, _, value = line.rpartition(": ")
        if "/ports/1/" in path and value.isdigit():
            rows.append(("mlx5_0/1", path.rsplit("/", 1)[1], float(value)))
    n = len(rows)
    return pa.table(
        {
            "ts": pa.array([TS] * n, pa.timestamp("ns", tz="UTC")),
            "device": ["gpu-001"] * n,
            "role": ["nic"] * n,
            "port": [r[0] for r in rows],
            "priority": pa.array([-1] * n, pa.int8()),
            "metric": [r[1] for r in rows],
            "value": [r[2] for r in rows],
            "source": ["parquet"] * n,
            "raw_name": [""] * n,
        }
    )


def test_counters_named_by_the_driver_are_renamed_as_the_nic_collector_names_them() -> None:
    raw = raw_named_nic_counters()
    out, renamed = canonical_counters(raw)
    assert renamed == raw.num_rows
    got = {(p, m, q): (v, r) for p, m, q, v, r in zip(*(out[c].to_pylist() for c in KEYS), strict=True)}
    source = {(p, m): v for p, m, v in zip(*(raw[c].to_pylist() for c in ("port", "metric", "value")), strict=True)}
    # the port's bytes are the `_phy` counters; the driver's software `rx_bytes` is kept raw beside them
    assert got["eth0", "rx_bytes", -1] == (source["eth0", "rx_bytes_phy"], "rx_bytes_phy")
    assert got["eth0", "raw:rx_bytes", -1] == (source["eth0", "rx_bytes"], "rx_bytes")
    assert got["eth0", "rx_prio_bytes", 0] == (source["eth0", "rx_prio0_bytes"], "rx_prio0_bytes")
    # IBTA data counters count 4-byte words; the provider's hw_counters sit on the same RDMA port
    assert got["mlx5_0/1", "rdma_rx_bytes", -1] == (4 * source["mlx5_0/1", "port_rcv_data"], "port_rcv_data")
    assert got["mlx5_0/1", "rdma_out_of_buffer", -1] == (source["mlx5_0/1", "out_of_buffer"], "out_of_buffer")
    # a file named as the store names it is left alone
    assert canonical_counters(out) == (out, 0)


def test_rdma_counters_keyed_by_the_netdev_are_renamed_beside_its_ethtool_names() -> None:
    """Exporters that key a NIC's RDMA hw_counters by its netdev (one port `eth0` for `ethtool -S` and for
    `rdma statistic show link`, real output of both): the CNP counters land as the CNP-loss detector reads them,
    not as `raw:np_cnp_sent`, and ethtool's own counter of a metric still wins."""
    ethtool = raw_named_nic_counters().filter(pc.equal(raw_named_nic_counters()["port"], "eth0"))
    text = (RDMA / "iproute2_commit_msgs_rdma_statistic_real_outputs.txt").read_text().splitlines()
    start = text.index("$ rdma stat show link mlx5_2/1") + 1
    words = " ".join(text[start : start + 8]).split()[2:]  # "link mlx5_2/1 name value name value ..."
    pairs = list(zip(words[::2], (float(v) + k for k, v in enumerate(words[1::2])), strict=True))  # distinct values
    n = len(pairs)
    rdma = pa.table(
        {
            "ts": pa.array([TS] * n, pa.timestamp("ns", tz="UTC")),
            "device": ["gpu-001"] * n,
            "role": ["nic"] * n,
            "port": ["eth0"] * n,
            "priority": pa.array([-1] * n, pa.int8()),
            "metric": [name for name, _ in pairs],
            "value": [value for _, value in pairs],
            "source": ["parquet"] * n,
            "raw_name": [""] * n,
        }
    )
    out, _ = canonical_counters(pa.concat_tables([ethtool, rdma]))
    got = {(p, m): (v, r) for p, m, _, v, r in zip(*(out[c].to_pylist() for c in KEYS), strict=True)}
    sent = dict(pairs)
    assert got["eth0", "cnp_sent"] == (sent["np_cnp_sent"], "np_cnp_sent")
    assert got["eth0", "cnp_handled"] == (sent["rp_cnp_handled"], "rp_cnp_handled")
    assert got["eth0", "out_of_sequence"][0] == sent["out_of_sequence"]  # a catalog name already: kept as it is
    source = {m: v for m, v in zip(ethtool["metric"].to_pylist(), ethtool["value"].to_pylist(), strict=True)}
    assert got["eth0", "rx_bytes"] == (source["rx_bytes_phy"], "rx_bytes_phy")
    assert not [m for _, m in got if m in ("raw:np_cnp_sent", "raw:rp_cnp_handled")]


def test_cli_imports_a_parquet_of_driver_names(tmp_path: Path) -> None:
    path = tmp_path / "nic.parquet"
    pq.write_table(raw_named_nic_counters(), path)
    cfg = store_config(tmp_path)
    result = runner.invoke(app, ["--config", cfg, "import", str(path)])
    assert result.exit_code == 0, result.output
    assert "named by their vendor's counter names, renamed" in result.output
    sql = "SELECT value, raw_name FROM counters WHERE port = 'eth0' AND metric = 'tx_bytes'"
    assert sql_rows(cfg, sql) == ['2662454044895,"tx_bytes_phy"']


def test_a_counters_file_with_a_null_metric_is_refused_whole_with_a_clear_error(tmp_path: Path) -> None:
    raw = raw_named_nic_counters()
    metric = raw["metric"].to_pylist()
    metric[3] = None
    bad = raw.set_column(raw.schema.get_field_index("metric"), "metric", pa.array(metric, pa.string()))
    out, renamed = canonical_counters(bad)
    assert renamed == raw.num_rows - 1 and out["metric"].null_count == 1
    path = tmp_path / "nic.parquet"
    pq.write_table(bad, path)
    result = runner.invoke(app, ["--config", store_config(tmp_path), "import", str(path)])
    assert result.exit_code != 0 and "counters.metric: null values are not allowed" in result.output


def lldp_events() -> list[dict[str, Any]]:
    """An Arista leaf's openconfig-lldp neighbour state as gnmic writes it (openconfig-lldp.yang:
    /lldp/interfaces/interface[name]/neighbors/neighbor[id]/state): a host's lldpd that sends its MAC as port id
    and its interface name as description, and a spine that sends its interface name."""
    state = "/lldp/interfaces/interface/neighbors/neighbor/state"
    mac = "openconfig-lldp-types:MAC_ADDRESS"
    host = {"system-name": "gpu-01", "port-id": "b8:ce:f6:00:00:01", "port-id-type": mac,
            "port-description": "eth0", "chassis-id": "b8:ce:f6:00:00:00", "ttl": 120}  # fmt: skip
    spine = {"system-name": "spine1", "port-id": "Ethernet1/1", "port-id-type": "openconfig-lldp-types:INTERFACE_NAME"}
    return [
        event("leaf1:6030", state, host, interface_name="Ethernet1/1", neighbor_id="1"),
        event("leaf1:6030", state, spine, interface_name="Ethernet2/1", neighbor_id="2"),
        event("leaf1:6030", "/interfaces/interface/state/counters/out-octets", 12345, interface_name="Ethernet1/1"),
    ]


def test_gnmic_lldp_neighbour_state_lands_as_links_not_as_non_numeric(tmp_path: Path) -> None:
    from rocescope.collectors.importers import lldp_neighbors

    rows = gnmic_rows(iter([lldp_events()]))
    cables = sorted((n.device, n.port, n.peer_device, n.peer_port) for n, _ in lldp_neighbors(rows))
    assert cables == [("leaf1", "Ethernet1/1", "gpu-01", "eth0"), ("leaf1", "Ethernet2/1", "spine1", "Ethernet1/1")]
    assert rows.nonnumeric == 0 and "tx_bytes" in rows.metric
    events = tmp_path / "lldp.json"
    events.write_text(json.dumps(lldp_events()))
    cfg = store_config(tmp_path)
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "gnmic", str(events)])
    assert done.exit_code == 0, done.output
    assert "2 LLDP neighbour(s) as links" in done.output
    # every value of the capture is accounted for: landed as a counter, read as cabling, or skipped with its reason
    (tmp_path / "json").mkdir()
    other = store_config(tmp_path / "json")
    again = runner.invoke(app, ["--config", other, "import", "--kind", "gnmic", "--json", str(events)])
    assert again.exit_code == 0, again.output
    (only,) = json.loads(again.stdout.strip().splitlines()[-1])["files"]
    (counters,) = (int(n) for n in sql_rows(other, "SELECT count() FROM counters"))
    values = sum(len(e["values"]) for e in lldp_events())
    assert only["skipped"]["LLDP fields (read as links)"] >= 6
    assert counters + sum(only["skipped"].values()) == values
    got = sql_rows(cfg, "SELECT device, port, peer_device, peer_port, source FROM links ORDER BY port")
    assert got == [
        '"leaf1","Ethernet1/1","gpu-01","eth0","gnmi"',
        '"leaf1","Ethernet2/1","spine1","Ethernet1/1","gnmi"',
    ]


def cli_table(path: Path) -> list[list[str]]:
    """The rows of a table SONiC's CLI prints with tabulate (columns split on runs of two or more spaces)."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [[c.strip() for c in line.split("  ") if c.strip()] for line in lines
            if line and not line.startswith(("-", "For namespace")) and "Port" not in line]  # fmt: skip


def cli_number(text: str) -> float | None:
    return None if text == "N/A" else float(text.replace(",", ""))


def test_sonic_pfc_history_estimates_equal_pfcstat_and_stay_apart_from_hardware_timers() -> None:
    """SONiC's own `show pfc counters --history` over the mock COUNTERS_DB is the oracle: pfcstat shows the
    ASIC's pause time and transitions where it counts them, else the PFC watchdog's `EST_*` estimates. Ours
    land as their own metrics (an estimate at the watchdog's poll granularity is no hardware timer)."""
    rows, _, bad = sonic_dump(load(REAL / "sonic-utilities_mock_counters_db.json"), "sw")
    got = by_key(rows)
    expected = cli_table(PORTS / "sonic-utilities_pfcstat_history.txt")
    assert len(expected) == 24 and bad == 0

    def shown(port: str, prio: int, hardware: str, estimate: str) -> float | None:
        """What pfcstat prints: the ASIC's counter where it has one, else the watchdog's estimate."""
        return got.get(("sw", port, prio, hardware), got.get(("sw", port, prio, estimate)))

    for port, pfc, transitions, total_us, recent_us, when in expected:
        prio = int(pfc.removeprefix("PFC"))
        # the latest episode: its length, and its start as pfcstat prints it (UTC, to the second)
        assert got[("sw", port, prio, "pfc_rx_recent_pause_est_us")] == cli_number(recent_us)
        start = dt.datetime.fromtimestamp(got[("sw", port, prio, "pfc_rx_recent_pause_start_est_us")] / 1e6, dt.UTC)
        assert f"{start:%m/%d/%Y, %H:%M:%S}" == when
        assert shown(port, prio, "pfc_rx_pause_transition", "pfc_rx_pause_transition_est") == cli_number(transitions)
        assert shown(port, prio, "pfc_rx_pause_duration_us", "pfc_rx_pause_duration_est_us") == cli_number(total_us)
        assert ("sw", port, prio, "pfc_rx_pause_duration_est_us") in got  # these ports have no ASIC timer
        assert ("sw", port, prio, "pfc_rx_pause_duration_us") not in got


def test_sonic_trim_counters_equal_portstat_and_queuestat() -> None:
    """Packet-trimming counters per port (`portstat --trim -j`) and per queue (`queuestat`'s Trim columns)."""
    rows, _, _ = sonic_dump(load(REAL / "sonic-utilities_mock_counters_db.json"), "sw")
    got = by_key(rows)
    ports = load(PORTS / "sonic-utilities_portstat_trim.json")
    names = {"TRIM_PKTS": "trimmed_packets", "TRIM_TX_PKTS": "trimmed_tx_packets",
             "TRIM_DRP_PKTS": "trimmed_dropped_packets"}  # fmt: skip
    for port, shown in ports.items():
        for column, metric in names.items():
            assert got.get(("sw", port, -1, metric)) == cli_number(shown[column]), (port, column)
    queues = cli_table(PORTS / "sonic-utilities_queuestat_counters_all.txt")
    checked = 0
    for port, txq, *_counts, trim, sent, dropped in queues:
        index = int(txq.lstrip("UCMAL"))
        for text, metric in ((trim, "queue_trimmed_packets"), (sent, "queue_trimmed_tx_packets"),
                             (dropped, "queue_trimmed_dropped_packets")):  # fmt: skip
            assert got.get(("sw", port, index, metric)) == cli_number(text), (port, txq, metric)
            checked += text != "N/A"
    assert checked >= 6


MULTI_ASIC = PORTS / "multi_asic" / "dump"  # sonic-utilities' multi-ASIC mock, named as a techsupport names it


def test_a_multi_asic_switch_is_a_device_per_asic_whose_pfc_counters_equal_pfcstat() -> None:
    """SONiC's own `show pfc counters` on its multi-ASIC mock lists the ports of every namespace in one table;
    each namespace's COUNTERS_DB (its own oids: one dump per ASIC) lands as a device of its own, with the
    counts pfcstat shows."""
    got: dict[tuple[str, str, int, str], float] = {}
    for n in (0, 1):
        path = MULTI_ASIC / f"COUNTERS_DB.json.{n}"
        doc = load(path)
        ns = namespace_of(path, doc, "sonic")
        assert ns == Namespace("sonic", n) and ns.device == f"sonic-asic{n}"
        rows, _, bad = sonic_dump(doc, ns.device)
        assert bad == 0
        got |= by_key(rows)
    table = cli_table(PORTS / "sonic-utilities_pfcstat_all_multi_asic.txt")
    assert len(table) == 12  # six ports received, then the same six sent
    owner = {port: dev for dev, port, _, metric in got if metric == "pfc_rx_pause"}
    assert owner == {"Ethernet0": "sonic-asic0", "Ethernet4": "sonic-asic0", "Ethernet-BP0": "sonic-asic0",
                     "Ethernet-BP4": "sonic-asic0", "Ethernet-BP256": "sonic-asic1",
                     "Ethernet-BP260": "sonic-asic1"}  # fmt: skip
    for k, (port, *counts) in enumerate(table):
        metric = "pfc_rx_pause" if k < 6 else "pfc_tx_pause"
        assert [got[(owner[port], port, prio, metric)] for prio in range(8)] == [cli_number(c) for c in counts]


def test_a_front_end_asics_queue_counters_equal_queuestat_of_its_namespace() -> None:
    """SONiC's own `queuestat -n asic0` on the multi-ASIC mock: every queue of the front-panel and back-plane ports
    (unicast, multicast, and a back-plane port's `ALL` queues) as ASIC 0's device lands them."""
    path = MULTI_ASIC / "COUNTERS_DB.json.0"
    doc = load(path)
    ns = namespace_of(path, doc, "sonic")
    assert ns is not None
    rows, _, _ = sonic_dump(doc, ns.device)
    got = by_key(rows)
    table = cli_table(PORTS / "sonic-utilities_queuestat_multi_asic_asic0.txt")
    assert len(table) == 64 and {r[0] for r in table} == {"Ethernet0", "Ethernet4", "Ethernet-BP0", "Ethernet-BP4"}
    metrics = ("queue_tx_packets", "queue_tx_bytes", "queue_dropped_packets", "queue_dropped_bytes")
    for port, txq, *counts in table:
        index = int(txq.lstrip("UCMAL"))
        assert [got.get(("sonic-asic0", port, index, m)) for m in metrics] == [cli_number(c) for c in counts], txq


def test_a_namespace_is_read_from_the_file_name_or_the_dumps_own_metadata() -> None:
    config = load(MULTI_ASIC / "CONFIG_DB.json.1")
    assert namespace_of(Path("x.json"), config, "sw") == Namespace("sw", 1)  # DEVICE_METADATA asic_name: asic1
    assert namespace_of(Path("COUNTERS_DB.json.3"), {}, "sw") == Namespace("sw", 3)
    assert namespace_of(Path("COUNTERS_DB.json"), load(REAL / "sonic-utilities_mock_counters_db.json"), "sw") is None


def test_cli_lands_a_namespaces_dump_saved_under_any_name_as_the_asic_it_names(tmp_path: Path) -> None:
    """`sonic-db-dump -n asic1 -n COUNTERS_DB` saved as `sw1-counters.json`: neither the name nor the dump says the
    namespace (no CONFIG_DB), so `--namespace asic1` does; a name that is no ASIC's is refused before any import."""
    saved = tmp_path / "sw1-counters.json"
    saved.write_bytes((MULTI_ASIC / "COUNTERS_DB.json.1").read_bytes())
    cfg = store_config(tmp_path)
    at = ["--at", "2025-03-01T10:15:00Z"]
    bad = runner.invoke(app, ["--config", cfg, "import", "--kind", "sonic", "--namespace", "asic-one", *at, str(saved)])
    assert bad.exit_code != 0 and "not a SONiC ASIC namespace" in bad.output
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "sonic", "--device", "sw1", "--namespace", "asic1",
                               *at, str(saved)])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert sql_rows(cfg, "SELECT DISTINCT device FROM counters ORDER BY device") == ['"sw1-asic1"']


def test_cli_lands_a_multi_asic_techsupport_as_asics_cabled_by_their_backplane(tmp_path: Path) -> None:
    """A techsupport's `dump/` of a two-ASIC switch, imported without naming the switch: the hostname comes from
    the techsupport's folder, each namespace's files from their suffix. The back-plane cables CONFIG_DB describes
    join the ASICs; the front-panel ports are mapped, by name and alias, from the switch to their ASIC."""
    dump = tmp_path / "sonic_dump_sonic_20250301_101500" / "dump"
    dump.mkdir(parents=True)
    files = []
    for src in sorted(MULTI_ASIC.glob("*_DB.json.[01]")):
        files.append(dump / src.name)
        files[-1].write_bytes(src.read_bytes())
    cfg = store_config(tmp_path)
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "sonic", "--at", "2025-03-01T10:15:00Z",
                               *map(str, files)])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert sql_rows(cfg, "SELECT DISTINCT device FROM counters ORDER BY device") == ['"sonic-asic0"', '"sonic-asic1"']
    backplane = sql_rows(cfg, "SELECT DISTINCT device, port, peer_device, peer_port FROM links "
                              "WHERE source = 'config' ORDER BY device, port")  # fmt: skip
    assert backplane == [
        '"sonic-asic0","Ethernet-BP0","sonic-asic1","Eth0-ASIC1"',
        '"sonic-asic0","Ethernet-BP4","sonic-asic1","Eth1-ASIC1"',
        '"sonic-asic1","Ethernet-BP256","sonic-asic0","Eth16-ASIC0"',
        '"sonic-asic1","Ethernet-BP260","sonic-asic0","Eth17-ASIC0"',
    ]
    chassis = sql_rows(cfg, "SELECT DISTINCT port, peer_device, peer_port FROM links "
                            "WHERE source = 'chassis' AND device = 'sonic' ORDER BY port")  # fmt: skip
    assert '"Ethernet1/1","sonic-asic0","Ethernet0"' in chassis and '"Ethernet64","sonic-asic1","Ethernet64"' in chassis
    assert not any("Ethernet-BP" in row for row in chassis)  # back-plane ports face no neighbour outside
    # the back-plane names the peer's `asic_port_name`: an alias of that ASIC's port, where it names one port (the
    # mock gives asic1's Ethernet64 and Ethernet-BP256 both `Eth0-ASIC1`: no alias)
    aliases = sql_rows(cfg, "SELECT DISTINCT port, peer_port FROM links WHERE source = 'alias' "
                            "AND device = 'sonic-asic1' AND port LIKE 'Eth%-ASIC1' ORDER BY port")  # fmt: skip
    assert aliases == ['"Eth1-ASIC1","Ethernet-BP260"']


def _dump_values(doc: dict[str, Any]) -> int:
    """A redis dump's values: a hash's fields (plain, as the mocks and sonic-gnmi write it, or `sonic-db-dump`'s
    `{"type": "hash", "value": {...}}`), one for any other key."""
    dump_entry = {"type", "value", "ttl", "expireat"}
    n = 0
    for v in doc.values():
        if isinstance(v, dict) and {"type", "value"} <= set(v) <= dump_entry:
            n += len(v["value"]) if v["type"] == "hash" and isinstance(v["value"], dict) else 1
        else:
            n += len(v) if isinstance(v, dict) else 1
    return n


@pytest.mark.parametrize(
    "path",
    [
        REAL / "sonic-utilities_mock_counters_db.json",
        MULTI_ASIC / "COUNTERS_DB.json.0",
        MULTI_ASIC / "APPL_DB.json.0",
        MULTI_ASIC / "CONFIG_DB.json.0",
    ],
    ids=lambda p: p.name,
)
def test_a_sonic_dump_import_accounts_for_every_value(tmp_path: Path, path: Path) -> None:
    """`import --kind sonic --json` of SONiC's own dumps (sonic-utilities' mock COUNTERS_DB, a multi-ASIC
    techsupport's `sonic-db-dump`s): every field of every key is landed or counted, by reason (oid maps, tables not
    read, objects without a name map, superseded port fields, non-numeric), so the counts add up to the dump's
    values; before, the maps and unread tables (half of the mock COUNTERS_DB) were counted nowhere."""
    cfg = store_config(tmp_path)
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "sonic", "--device", "sw", "--json", str(path)])
    assert done.exit_code == 0, done.output
    (only,) = json.loads(done.stdout.strip().splitlines()[-1])["files"]
    (counters,) = (int(n) for n in sql_rows(cfg, "SELECT count() FROM counters"))  # `landed` adds cabling rows
    assert 0 < counters <= only["landed"]
    assert counters + sum(only["skipped"].values()) == _dump_values(load(path))


@pytest.mark.parametrize(
    "path",
    [FIX / "snmp" / "zyxel_xgs1210_snmpwalk.txt",
     FIX / "realdata" / "05_snmp" / "librenms_srlinux_7220-IXR-D2L_snmprec_EXCERPT.snmprec"],
    ids=lambda p: p.name,
)  # fmt: skip
def test_an_snmp_walk_import_accounts_for_every_line(tmp_path: Path, path: Path) -> None:
    """`import --kind snmp --json` of a real switch's `snmpwalk` (and LibreNMS' snmpsim recording of an SR Linux
    switch): each line (one value) is landed (under a catalog name or raw), or counted by why not (objects not read,
    names read apart, non-numeric), adding up to the walk."""
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    cfg = store_config(tmp_path)
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "snmp", "--json", str(path)])
    assert done.exit_code == 0, done.output
    (only,) = json.loads(done.stdout.strip().splitlines()[-1])["files"]
    assert only["skipped"]["not a counter column (names such as ifName, sysName: read apart)"] > 0
    assert only["landed"] + sum(only["skipped"].values()) == len(lines)


@pytest.mark.parametrize("name", ["dev-v4.1.log", "dev-v4.2.log"])
def test_an_inspector_dump_import_accounts_for_every_line(tmp_path: Path, name: str) -> None:
    """`import --kind nccl-inspector --json` of NCCL Inspector's v4.1/v4.2 output (NVIDIA's own examples): each line
    is a collective landed or counted, the `dump_stats` markers (one per dump, read as Inspector's drop counts)
    among them, adding up to the file's lines."""
    path = FIX / "nccl" / name
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    cfg = store_config(tmp_path)
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "nccl-inspector", "--json", str(path)])
    assert done.exit_code == 0, done.output
    (only,) = json.loads(done.stdout.strip().splitlines()[-1])["files"]
    counted = {k: v for k, v in only["skipped"].items() if k != "dropped by Inspector before writing"}
    assert counted["dump_stats markers (read as drop counts)"] > 0
    assert only["landed"] + sum(counted.values()) == len(lines)
