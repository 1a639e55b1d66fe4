"""`rocescope import --kind ...`: gnmic files and Kafka topic, SONiC dumps, lldpcli, kubectl, pcap."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope.cli import app
from rocescope.collectors.importers import gnmic_documents, gnmic_rows, source_device
from rocescope.collectors.lldp.parse import Neighbor
from rocescope.collectors.sonic_dump import sonic_dump
from rocescope.errors import DecodeError
from rocescope.sim.facades.lldp import lldp_neighbors_json
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.jobs import JobSpec, place_jobs
from rocescope.sim.topology import FabricSpec, Topology
from rocescope.testbed.tansu import Broker

from samples import sample_table
from store_cli import runner, sql_rows, store_config

FIX = Path(__file__).parent.parent / "fixtures"
SONIC = FIX / "realdata" / "04_gnmi_sonic"
GNMIC = (FIX / "gnmic" / "srl_event.json").read_text()


def test_gnmic_event_and_json_formats_golden() -> None:
    rows = gnmic_rows(gnmic_documents(GNMIC))
    got = list(zip(rows.device, rows.port, rows.priority, rows.metric, rows.value, strict=True))
    assert got == [
        ("203.0.113.12", "ethernet-1/1", -1, "rx_bytes", 43355.0),
        ("203.0.113.12", "ethernet-1/1", -1, "tx_bytes", 98127.0),
        ("203.0.113.12", "ethernet-1/1", -1, "carrier_transitions", 1.0),
        ("203.0.113.12", "ethernet-1/1", -1, "oper_up", 1.0),
        ("leaf-r0-01", "Ethernet0", 3, "queue_tx_packets", 1200.0),  # queue key from the queue_name tag
        ("leaf-r0-01", "Ethernet0", 3, "queue_dropped_packets", 7.0),
        ("leaf1", "ethernet-1/1", -1, "tx_packets", 552.0),  # gnmic's default JSON format
    ]
    assert rows.malformed == 0
    assert [b.key for b in rows.to_batches("switch", "import")] == ["203.0.113.12", "leaf-r0-01", "leaf1"]


def test_a_gnmic_capture_of_a_multi_asic_switch_lands_each_asic_on_its_own_device() -> None:
    """gnmic events and JSON messages from sonic-gnmi's per-ASIC databases (`sonic-db:COUNTERS_DB/asic<n>`):
    the same back-plane port on two ASICs stays two series, on the devices `--namespace` imports name."""
    octets = "SAI_PORT_STAT_IF_IN_OCTETS"
    events = [
        {"name": "sub", "timestamp": 1_740_830_400_000_000_000, "tags": {"source": "sw1:8080"},
         "values": {f"sonic-db:COUNTERS_DB/{ns}/COUNTERS/Ethernet-BP0/{octets}": v}}
        for ns, v in (("asic0", 10), ("asic1", 11), ("localhost", 12))
    ]  # fmt: skip
    message = {"source": "sw1:8080", "timestamp": 1_740_830_401_000_000_000, "updates": [
        {"Path": f"sonic-db:COUNTERS_DB/asic1/COUNTERS/Ethernet-BP0/{octets}", "values": {"": 13}}]}  # fmt: skip
    rows = gnmic_rows(gnmic_documents(json.dumps(events) + "\n" + json.dumps(message)))
    got = list(zip(rows.device, rows.port, rows.metric, rows.value, strict=True))
    assert got == [
        ("sw1-asic0", "Ethernet-BP0", "rx_bytes", 10.0),
        ("sw1-asic1", "Ethernet-BP0", "rx_bytes", 11.0),
        ("sw1", "Ethernet-BP0", "rx_bytes", 12.0),
        ("sw1-asic1", "Ethernet-BP0", "rx_bytes", 13.0),
    ]


def test_a_gnmic_source_names_its_device_without_the_port() -> None:
    cases = {
        "leaf-01": "leaf-01",
        "leaf-01:57400": "leaf-01",
        "leaf-01.dc1.example.com:6030": "leaf-01.dc1.example.com",
        "clab-fabric-leaf1:57400": "clab-fabric-leaf1",
        "10.0.0.1:57400": "10.0.0.1",
        "[fd00::1]:57400": "fd00::1",
        "fd00::1": "fd00::1",  # a bare IPv6 address: its last group is no port
        "": "",
    }
    assert {source: source_device(source) for source in cases} == cases


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, len(GNMIC)), junk=st.text(max_size=12))
def test_fuzz_gnmic_truncated_or_garbled(cut: int, junk: str) -> None:
    """Truncation raises DecodeError or keeps only whole records: a half-read event adds nothing."""
    try:
        rows = gnmic_rows(gnmic_documents(GNMIC[:cut] + junk))
    except DecodeError:
        return
    full = gnmic_rows(gnmic_documents(GNMIC))
    assert (
        set(zip(rows.device, rows.metric, rows.value, strict=True))
        <= set(zip(full.device, full.metric, full.value, strict=True))
        or junk
    )  # junk may itself be a valid number-free JSON value: nothing else is added


@settings(max_examples=80, deadline=None)
@given(bad=st.none() | st.integers() | st.text(max_size=5) | st.dictionaries(st.text(max_size=4), st.integers()))
def test_fuzz_a_bad_gnmic_event_keeps_the_others(bad: object) -> None:
    good = json.loads(GNMIC.split("\n]\n")[0] + "\n]")
    rows = gnmic_rows(iter([[good[0], bad, good[1]]]))
    assert len(rows) == 6 and rows.malformed <= 1


def test_sonic_full_redis_dump_golden() -> None:
    """sonic-gnmi's db_dump.json (a real SONiC switch): COUNTERS_DB into counters, APPL_DB LLDP into links."""
    assert (SONIC / "sonic-gnmi_db_dump_full_redis.json.source.txt").exists()
    rows, links, bad = sonic_dump(json.loads((SONIC / "sonic-gnmi_db_dump_full_redis.json").read_text()), "sonic")
    assert bad == 0 and links == [Neighbor("sonic", "eth0", "swtor-b2lab2-1103", "ethernet1/1/3")]
    metrics = dict.fromkeys(rows.metric, 0)
    for m in rows.metric:
        metrics[m] += 1
    assert metrics["pfc_rx_pause"] == metrics["pfc_tx_pause"] == 33 * 8  # 32 ports + CPU, 8 priorities
    assert metrics["queue_watermark_bytes"] > 0 and metrics["pg_watermark_bytes"] > 0
    by = {(p, q, m) for p, q, m in zip(rows.port, rows.priority, rows.metric, strict=True)}
    assert ("Ethernet0", 3, "pfc_rx_pause") in by and ("Ethernet0", 3, "queue_tx_packets") in by
    assert not any(p.startswith("oid:") for p in rows.port)


def test_sonic_utilities_counters_and_snmpagent_lldp_golden() -> None:
    rows, _, bad = sonic_dump(json.loads((SONIC / "sonic-utilities_mock_counters_db.json").read_text()), "sw")
    assert bad == 0 and len(rows) > 1000 and "queue_ecn_marked_packets" in rows.metric
    lldp = FIX / "realdata" / "06_lldp" / "sonic-snmpagent_mock_appl_db_LLDP_ENTRY_TABLE.json"
    _, links, bad = sonic_dump(json.loads(lldp.read_text()), "sw")
    assert bad == 0 and len(links) == 34
    assert links[0] == Neighbor("sw", "Ethernet0", "switch13", "Ethernet1")


@settings(max_examples=60, deadline=None)
@given(junk=st.none() | st.integers() | st.text(max_size=4) | st.lists(st.integers(), max_size=2))
def test_fuzz_sonic_bad_entries_are_skipped(junk: object) -> None:
    doc = {
        "COUNTERS_PORT_NAME_MAP": {"Ethernet0": "oid:0x1"},
        "COUNTERS:oid:0x1": {"SAI_PORT_STAT_IF_IN_OCTETS": "10"},
        "COUNTERS:oid:0x2": junk,
        "LLDP_ENTRY_TABLE:Ethernet4": junk,
        "LLDP_ENTRY_TABLE:Ethernet0": {
            "lldp_rem_sys_name": "s", "lldp_rem_port_id": "e1", "lldp_rem_port_id_subtype": "5"
        },
    }  # fmt: skip
    rows, links, _ = sonic_dump(doc, "sw")
    assert rows.metric == ["rx_bytes"] and Neighbor("sw", "Ethernet0", "s", "e1") in links
    with pytest.raises(DecodeError):
        sonic_dump([1, 2], "sw")


# --- through the CLI into the store -------------------------------------------------------------------


def test_table_import_unchanged(tmp_path: Path) -> None:
    cfg = store_config(tmp_path)
    good = tmp_path / "links.parquet"
    pq.write_table(sample_table("links", 5), good)
    result = runner.invoke(app, ["--config", cfg, "import", str(good), "--table", "links"])
    assert result.exit_code == 0 and "imported 5 rows into links" in result.output


def test_cli_imports_every_file_kind(tmp_path: Path) -> None:
    """Each kind lands in the store. One store per run: the embedded pipeline's sink dedup tokens restart with
    each process (see the report on pipeline/runner.py), so two embedded runs into one store can collide."""
    topo = Topology(FabricSpec(hosts=4, rails=2))
    (tmp_path / "gpu-001.json").write_text(json.dumps(lldp_neighbors_json(topo, "gpu-001")))
    (tmp_path / "pods.json").write_text(json.dumps(pod_list_json(place_jobs(topo, [JobSpec("j", 2)]), topo)))
    (tmp_path / "garbage.json").write_text("{not json")

    def run(name: str, *args: str) -> str:
        (tmp_path / name).mkdir()
        cfg = store_config(tmp_path / name)
        result = runner.invoke(app, ["--config", cfg, "import", *args])
        assert result.exit_code == 0, (args, result.output)
        return cfg

    cfg = run("gnmic", "--kind", "gnmic", str(FIX / "gnmic" / "srl_event.json"))
    assert sql_rows(cfg, "SELECT device, count() FROM counters GROUP BY device ORDER BY device") == [
        '"203.0.113.12",4', '"leaf-r0-01",2', '"leaf1",1'
    ]  # fmt: skip
    dump = SONIC / "sonic-gnmi_db_dump_full_redis.json"
    cfg = run("sonic", "--kind", "sonic", "--device", "sonic-sw", str(dump))
    made, _, _ = sonic_dump(json.loads(dump.read_text()), "sonic-sw")
    assert sql_rows(cfg, "SELECT count() FROM counters") == [str(len(made))]  # every row the importer makes lands
    # SONiC's alias map lands beside the neighbours: `hundredGigE1/1` is what its LLDP calls `Ethernet0`
    aliases = sql_rows(cfg, "SELECT port, peer_port FROM links WHERE source = 'alias' ORDER BY peer_port")
    assert '"hundredGigE1/1","Ethernet0"' in aliases and len(aliases) == 32
    assert sql_rows(cfg, "SELECT device, port, peer_device, peer_port FROM links WHERE source != 'alias'") == [
        '"sonic-sw","eth0","swtor-b2lab2-1103","ethernet1/1/3"'
    ]
    cfg = run("lldp", "--kind", "lldpcli", str(tmp_path / "gpu-001.json"))
    assert sql_rows(cfg, "SELECT device, peer_device FROM links ORDER BY port") == [
        '"gpu-001","leaf-r0-01"', '"gpu-001","leaf-r1-01"'
    ]  # fmt: skip
    cfg = run("kubectl", "--kind", "kubectl", str(tmp_path / "pods.json"))
    assert sql_rows(cfg, "SELECT count(), countIf(rank = -1) FROM endpoints") == ["2,2"]  # no inventory: host rows
    pcap = FIX / "realdata" / "03_pcap" / "rdma_ib_tutorial_rdma_write_bw.pcap"
    cfg = run("pcap", "--kind", "pcap", "--device", "cap", str(pcap))
    assert int(sql_rows(cfg, "SELECT count() FROM packets WHERE capture_point = 'cap'")[0]) > 0
    result = runner.invoke(app, ["--config", cfg, "import", "--kind", "lldpcli", str(tmp_path / "garbage.json")])
    assert result.exit_code == 1 and "not JSON" in result.output
    result = runner.invoke(app, ["--config", cfg, "import", "--kind", "nope", "x"])
    assert result.exit_code == 2


def test_gnmic_kafka_topic(tmp_path: Path, broker: Broker) -> None:
    """gnmic's Kafka output (one JSON message per notification, event format) consumed with kafka-python."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=[broker.bootstrap])
    events = json.loads(GNMIC.split("\n]\n")[0] + "\n]")
    for value in (json.dumps(events[:1]).encode(), b"\x00not json", json.dumps(events[1]).encode()):
        producer.send("gnmic-telemetry", value).get(timeout=30)
    producer.flush()
    producer.close()
    cfg = store_config(tmp_path)
    result = runner.invoke(app, ["--config", cfg, "import", "--kind", "gnmic", "--kafka-topic", "gnmic-telemetry",
                                 "--bootstrap", broker.bootstrap, "--kafka-idle", "3"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "kafka gnmic-telemetry: 6 rows, 1 malformed" in result.output
    assert sql_rows(cfg, "SELECT metric, priority FROM counters WHERE device = 'leaf-r0-01' ORDER BY metric") == [
        '"queue_dropped_packets",3', '"queue_tx_packets",3'
    ]  # fmt: skip


def test_a_capture_that_holds_its_events_twice_lands_them_once_and_counts_the_repeats(tmp_path: Path) -> None:
    """gnmic writes a notification twice where two subscriptions cover one path, and captures get concatenated:
    a repeat is the same series, time and value, landed once and counted as a duplicate, so counts add up."""
    path = tmp_path / "twice.json"
    path.write_text(GNMIC + "\n" + GNMIC)
    cfg = store_config(tmp_path)
    done = runner.invoke(app, ["--config", cfg, "import", "--kind", "gnmic", "--json", str(path)])
    assert done.exit_code == 0, done.output
    (only,) = json.loads(done.stdout.strip().splitlines()[-1])["files"]
    (tmp_path / "once").mkdir()
    once = store_config(tmp_path / "once")
    alone = runner.invoke(
        app, ["--config", once, "import", "--kind", "gnmic", "--json", str(FIX / "gnmic" / "srl_event.json")]
    )
    (first,) = json.loads(alone.stdout.strip().splitlines()[-1])["files"]
    assert first["landed"] > 0 and "duplicates (the same series, time and value again)" not in first["skipped"]
    assert only["skipped"]["duplicates (the same series, time and value again)"] == first["landed"]
    assert only["landed"] == first["landed"]
    assert sql_rows(cfg, "SELECT count() FROM counters") == [str(first["landed"])]
