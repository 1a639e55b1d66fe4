"""Facades of the simulator read by real clients: the NIC collector over a host view, LLDP, pod lists."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

from rocescope.collectors.nic.collector import NicCollector
from rocescope.collectors.nic.host import LiveHost
from rocescope.sim.engine import Engine
from rocescope.sim.facades.hostview import write_host_view
from rocescope.sim.facades.lldp import lldp_neighbors_json, neighbor_interfaces
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.jobs import Flow, Job, JobSpec, place_jobs
from rocescope.sim.params import EngineParams
from rocescope.sim.roce import QpAllocator, udp_sport
from rocescope.sim.topology import FabricSpec, Nic, Topology

T0 = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.UTC)
FOREVER = 10**15


def fabric() -> Topology:
    return Topology(FabricSpec(hosts=4, rails=2, spines=1, host_speed_gbps=100, uplink_speed_gbps=100))


def flow(job: Job, qps: QpAllocator, src: Nic, dst: Nic) -> Flow:
    sq, dq = qps.allocate(src.host, src.rdma_dev), qps.allocate(dst.host, dst.rdma_dev)
    return Flow(job.job_id, "ring", src, dst, 0, 1, sq, dq, udp_sport(sq, dq), FOREVER)


@pytest.fixture(scope="module")
def world() -> tuple[Topology, Engine]:
    """3:1 incast into gpu-004 on rail 0 (CNPs, ECN) and one steady flow on rail 1."""
    topo = fabric()
    job = place_jobs(topo, [JobSpec("t", 4, "test", compute_ms=1e9)])[0]
    qps = QpAllocator(1)
    dst = topo.nic("gpu-004", 0)
    flows = [flow(job, qps, topo.nic(h, 0), dst) for h in ("gpu-001", "gpu-002", "gpu-003")]
    flows.append(flow(job, qps, topo.nic("gpu-001", 1), topo.nic("gpu-002", 1)))
    eng = Engine(topo, [job], flows, params=EngineParams(), start=T0, stagger=False)
    eng.run(0.2)
    return topo, eng


def poll(root: Path, host: str) -> pl.DataFrame:
    collector = NicCollector(LiveHost(sysfs_root=root, ethtool=str(root / "bin/ethtool")), host)
    df = pl.from_arrow(collector.poll(T0).data)
    assert isinstance(df, pl.DataFrame)
    assert collector.metrics.value("rocescope_nic_poll_failures_total") == 0
    return df.with_columns(pl.col("port", "metric", "raw_name", "source").cast(pl.String))


def value(df: pl.DataFrame, port: str, metric: str, priority: int = -1) -> float:
    hit = df.filter((pl.col("port") == port) & (pl.col("metric") == metric) & (pl.col("priority") == priority))
    assert hit.height == 1, (port, metric, hit)
    return float(hit["value"][0])


def test_nic_collector_reads_the_host_view(world: tuple[Topology, Engine], tmp_path: Path) -> None:
    topo, eng = world
    root = write_host_view(eng, topo, "gpu-004", tmp_path / "gpu-004")
    text = subprocess.run([root / "bin/ethtool", "-S", "eth0"], capture_output=True, text=True, check=True).stdout
    assert text.startswith("NIC statistics:\n     ") and "     rx_bytes_phy: " in text
    bad = subprocess.run([root / "bin/ethtool", "-S", "eth9"], capture_output=True, text=True, check=False)
    assert bad.returncode != 0 and "No such device" in bad.stderr

    df = poll(root, "gpu-004")
    assert set(df["port"]) == {"eth0", "eth1", "mlx5_0/1", "mlx5_1/1"}
    raw = {(p, m): r for p, m, r in df.select("port", "metric", "raw_name").iter_rows()}
    assert raw["eth0", "rx_bytes"] == "rx_bytes_phy" and raw["eth0", "tx_bytes"] == "tx_bytes_phy"
    assert raw["mlx5_0/1", "cnp_sent"] == "np_cnp_sent"
    assert raw["mlx5_0/1", "ecn_marked_roce_packets"] == "np_ecn_marked_roce_packets"
    for port, metric in [
        ("eth0", "rx_bytes"),
        ("eth0", "tx_bytes"),
        ("eth0", "rx_packets"),
        ("eth0", "rdma_rx_bytes"),
        ("eth1", "rx_bytes"),
        ("mlx5_0/1", "cnp_sent"),
        ("mlx5_0/1", "ecn_marked_roce_packets"),
        ("mlx5_0/1", "out_of_sequence"),
    ]:
        assert value(df, port, metric) == eng.counter("gpu-004", port, metric), (port, metric)
    assert value(df, "eth0", "rx_bytes") > 1e9  # 0.2 s of a 100G port, nearly saturated
    assert value(df, "mlx5_0/1", "cnp_sent") > 0 and value(df, "mlx5_0/1", "ecn_marked_roce_packets") > 0
    # IBTA counters/ (4-byte words) agree with the ethtool vport counters to a word
    assert abs(value(df, "mlx5_0/1", "rdma_rx_bytes") - value(df, "eth0", "rdma_rx_bytes")) < 4
    assert value(df, "eth0", "port_speed_bps") == 100e9 and value(df, "eth0", "oper_up") == 1
    assert value(df, "mlx5_0/1", "oper_up") == 1

    sender = poll(write_host_view(eng, topo, "gpu-001", tmp_path / "gpu-001"), "gpu-001")
    assert value(sender, "mlx5_0/1", "cnp_handled") == eng.counter("gpu-001", "mlx5_0/1", "cnp_handled") > 0
    assert value(sender, "eth0", "tx_bytes") == eng.counter("gpu-001", "eth0", "tx_bytes")


def test_host_view_refreshes_as_time_runs(tmp_path: Path) -> None:
    topo = fabric()
    job = place_jobs(topo, [JobSpec("t", 4, "test", compute_ms=1e9)])[0]
    qps = QpAllocator(2)
    flows = [flow(job, qps, topo.nic("gpu-001", 0), topo.nic("gpu-003", 0))]
    eng = Engine(topo, [job], flows, params=EngineParams(), start=T0, stagger=False)
    eng.run(0.05)
    root = write_host_view(eng, topo, "gpu-003", tmp_path)
    first = poll(root, "gpu-003")
    eng.run(0.05)
    assert write_host_view(eng, topo, "gpu-003", tmp_path) == root
    second = poll(root, "gpu-003")
    before, after = value(first, "eth0", "rx_bytes"), value(second, "eth0", "rx_bytes")
    assert 0 < before < after == eng.counter("gpu-003", "eth0", "rx_bytes")
    assert value(second, "mlx5_0/1", "rdma_rx_packets") > value(first, "mlx5_0/1", "rdma_rx_packets")
    assert not list((root / "sys/class/infiniband/mlx5_0/ports/1/hw_counters").glob(".*"))  # no temp files
    # a downed cable shows in operstate, speed and the RDMA port state
    eng.link_down("gpu-003", "eth0")
    eng.run(0.01)
    down = poll(write_host_view(eng, topo, "gpu-003", tmp_path), "gpu-003")
    assert value(down, "eth0", "oper_up") == 0 and value(down, "mlx5_0/1", "oper_up") == 0
    assert value(down, "eth1", "oper_up") == 1


def test_lldp_neighbors_cover_every_link_consistently() -> None:
    topo = Topology(FabricSpec(hosts=4, rails=2, spines=2))
    seen: set[tuple[str, str, str, str]] = set()
    for device in topo.devices:
        doc = json.loads(json.dumps(lldp_neighbors_json(topo, device.name)))  # plain JSON
        pairs = neighbor_interfaces(doc)
        assert len(pairs) == len(topo.ports_of(device.name))
        for ifname, body in pairs:
            assert body["via"] == "LLDP"
            ((sysname, chassis),) = body["chassis"].items()
            assert chassis["id"]["type"] == "mac"
            assert body["port"]["id"] == {"type": "ifname", "value": body["port"]["id"]["value"]}
            seen.add((device.name, ifname, sysname, body["port"]["id"]["value"]))
    links = {(link.device, link.port, link.peer_device, link.peer_port) for link in topo.links()}
    assert seen == links
    assert all((b, bp, a, ap) in seen for a, ap, b, bp in seen)  # both ends agree
    # one neighbor: lldpd prints an object, not a list
    single = Topology(FabricSpec(hosts=2, rails=1, spines=1))
    doc = lldp_neighbors_json(single, "gpu-001")
    assert isinstance(doc["lldp"]["interface"], dict) and set(doc["lldp"]["interface"]) == {"eth0"}
    assert neighbor_interfaces(doc)[0][1]["chassis"].keys() == {"leaf-r0-01"}


def test_pod_list_matches_the_jobs() -> None:
    topo = Topology(FabricSpec(hosts=8, rails=2, spines=1))
    jobs = place_jobs(topo, [JobSpec("llm-a", 5, "team-a"), JobSpec("llm-b", 3, "team-b")])
    doc = json.loads(json.dumps(pod_list_json(jobs, topo)))
    assert doc["kind"] == "List" and doc["apiVersion"] == "v1"
    items = doc["items"]
    assert len(items) == sum(len(j.pods) for j in jobs) == 8
    by_name = {(i["metadata"]["namespace"], i["metadata"]["name"]): i for i in items}
    for job in jobs:
        for pod in job.pods:
            item = by_name[job.namespace, pod.name]
            labels = item["metadata"]["labels"]
            assert labels["training.kubeflow.org/job-name"] == job.name
            assert labels["training.kubeflow.org/replica-type"] == "worker"
            assert labels["training.kubeflow.org/replica-index"] == str(pod.rank)
            assert item["spec"]["nodeName"] == pod.host
            assert item["status"]["phase"] == "Running"
            assert item["status"]["podIP"] == topo.nic(pod.host, 0).ip
            env = {e["name"]: e["value"] for e in item["spec"]["containers"][0]["env"]}
            assert env["PET_NODE_RANK"] == str(pod.rank)
    assert len({i["spec"]["nodeName"] for i in items}) == 8  # one pod per host
    assert len({i["metadata"]["uid"] for i in items}) == 8
