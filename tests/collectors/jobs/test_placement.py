"""Placement: Kubeflow pods and the host NIC inventory -> `endpoints` rows, against the sim's kubectl output."""

from __future__ import annotations

import copy
import datetime as dt
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocescope.collectors.jobs.placement import HostNic, Inventory, parse_pods, rdma_plugin_resources, select_hcas
from rocescope.errors import DecodeError
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.jobs import JobSpec, place_jobs
from rocescope.sim.topology import FabricSpec, Topology

REAL = Path(__file__).parents[2] / "fixtures" / "realdata" / "07_jobmeta"
Keyed = Callable[[Iterable[Any]], list[tuple[Any, ...]]]


def test_sim_kubectl_output_gives_the_sim_ground_truth(
    topo: Topology, pods: dict[str, Any], expected: list[tuple[Any, ...]], keyed: Keyed
) -> None:
    rows, bad = parse_pods(json.dumps(pods), Inventory.from_topology(topo))
    assert bad == 0
    assert keyed(rows) == expected
    assert {r.valid_from for r in rows} == {dt.datetime(2025, 1, 1, tzinfo=dt.UTC)}


def _pod(name: str, job: str, host: str, **kw: Any) -> dict[str, Any]:
    labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/replica-type": kw.get("type", "worker"),
              "training.kubeflow.org/replica-index": str(kw.get("index", 0))}  # fmt: skip
    container: dict[str, Any] = {"name": "pytorch", "env": kw.get("env", []), "resources": kw.get("resources", {})}
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": labels,
            "creationTimestamp": "2026-03-01T10:00:00Z",
        },
        "spec": {"nodeName": host, "containers": [container]},
        "status": {"phase": kw.get("phase", "Running"), "hostIP": "192.168.1.9"},
    }


INV = Inventory(
    {h: tuple(HostNic(f"eth{i}", f"mlx5_{i}", f"10.{h[-1]}.0.{i}") for i in range(4)) for h in ("node-1", "node-2")},
    rdma_plugin_resources((REAL / "k8s-rdma-shared-dev-plugin_configmap.yaml").read_text()),
)


def test_pytorchjob_master_worker_ranks_hca_env_and_device_plugin_resources() -> None:
    """The PyTorchJob (Master + Worker, as the real kubeflow example) has no rank env here: ranks come from
    the replica index, workers after the master. NICs: NCCL_IB_HCA, else the real device plugin config."""
    inv = copy.deepcopy(INV)
    inv.hosts["node-2"] = (HostNic("ib0", "mlx5_0"), HostNic("ib1", "mlx5_1"), HostNic("ib3", "mlx5_3"))
    master_env = [{"name": "NCCL_IB_HCA", "value": "=mlx5_1"}, {"name": "PET_NPROC_PER_NODE", "value": "1"}]
    worker_env = [{"name": "PET_NPROC_PER_NODE", "value": "2"}]
    plugin = {"limits": {"rdma/hca_shared_devices_a": 1, "nvidia.com/gpu": 2}}
    doc = {
        "items": [
            _pod("mnist-master-0", "mnist", "node-1", type="master", env=master_env),
            _pod("mnist-worker-0", "mnist", "node-2", resources=plugin, env=worker_env),
            _pod("mnist-worker-1", "mnist", "node-3"),  # not in the inventory: one row, rank -1
            _pod("done-0", "done", "node-1", phase="Succeeded"),
            {"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {}, "status": {"phase": "Running"}},
        ]
    }
    rows, bad = parse_pods(doc, inv)
    got = sorted((r.pod, r.rank, r.host, r.rdma_dev, r.ip) for r in rows)
    assert got == [
        ("mnist-master-0", 0, "node-1", "mlx5_1", "10.1.0.1"),
        ("mnist-worker-0", 2, "node-2", "mlx5_0", ""),  # node 1 (after the master) x 2 GPUs + 0
        ("mnist-worker-0", 3, "node-2", "mlx5_1", ""),
        ("mnist-worker-1", -1, "node-3", "", "192.168.1.9"),
    ]
    assert bad == 0 and rows[0].job_id == "team-a/mnist"


def test_nccl_ib_hca_syntax() -> None:
    nics = INV.hosts["node-1"]
    names = lambda sel: [n.rdma_dev for n in select_hcas(sel, nics)]  # noqa: E731
    assert names("mlx5") == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert names("mlx5_0:1,mlx5_3:1") == ["mlx5_0", "mlx5_3"]
    assert names("^mlx5_1") == ["mlx5_0", "mlx5_2", "mlx5_3"]
    assert names("^=mlx5_1,mlx5_2") == ["mlx5_0", "mlx5_3"]


def test_real_device_plugin_config_maps_resources() -> None:
    assert (REAL / "k8s-rdma-shared-dev-plugin_configmap.yaml.source.txt").exists()
    assert INV.resources == {"hca_shared_devices_a": ("ib0", "ib1"), "hca_shared_devices_b": ("ib3", "ib4")}


_GOOD = json.dumps(pod_list_json(place_jobs(Topology(FabricSpec(hosts=4, rails=2)), [JobSpec("j", 2)])))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, len(_GOOD)), junk=st.text(max_size=10))
def test_fuzz_truncated_pod_list(cut: int, junk: str) -> None:
    try:
        rows, bad = parse_pods(_GOOD[:cut] + junk, Inventory())
    except DecodeError:
        return
    assert bad >= 0 and all(r.job_id for r in rows)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["metadata", "spec", "labels", "env", "nodeName", "index"]),
       junk=st.none() | st.integers() | st.text(max_size=4) | st.lists(st.integers(), max_size=2))  # fmt: skip
def test_fuzz_a_garbled_pod_keeps_the_good_ones(topo: Topology, pods: dict[str, Any], path: str, junk: object) -> None:
    doc = copy.deepcopy(pods)
    victim = doc["items"][0]
    if path in ("metadata", "spec"):
        victim[path] = junk
    elif path == "labels":
        victim["metadata"]["labels"] = junk
    elif path == "env":
        victim["spec"]["containers"][0]["env"] = [{"name": "PET_NODE_RANK", "value": junk}]
    elif path == "nodeName":
        victim["spec"]["nodeName"] = junk
    else:
        victim["metadata"]["labels"]["training.kubeflow.org/replica-index"] = junk
    rows, bad = parse_pods(doc, Inventory.from_topology(topo))
    others = {r.pod for r in rows} - {victim["metadata"]["name"] if isinstance(victim.get("metadata"), dict) else ""}
    assert others >= {p["metadata"]["name"] for p in pods["items"][1:]}
    assert bad <= 1


def test_kubectl_yaml_gives_what_its_json_gives(
    topo: Topology, pods: dict[str, Any], expected: list[tuple[Any, ...]], keyed: Keyed
) -> None:
    """`kubectl get pods -o yaml`: quoted timestamps as kubectl writes them, or unquoted as a person might."""
    inventory = Inventory.from_topology(topo)
    as_yaml = yaml.safe_dump(pods, sort_keys=False)
    assert "creationTimestamp: '2025-01-01T00:00:00Z'" in as_yaml
    for text in (as_yaml, as_yaml.replace("'2025-01-01T00:00:00Z'", "2025-01-01T00:00:00Z")):
        rows, bad = parse_pods(text, inventory)
        assert bad == 0 and keyed(rows) == expected
        assert {r.valid_from for r in rows} == {dt.datetime(2025, 1, 1, tzinfo=dt.UTC)}
    # a real pod manifest (no status: not running) is no error, and places nothing
    assert parse_pods((REAL / "k8s-rdma-shared-dev-plugin_test-hca-pod.yaml").read_text(), inventory) == ([], 0)
    for junk in ("- a\n- list\n", "just words", "{unclosed: [1, 2"):
        with pytest.raises(DecodeError, match="pod list"):
            parse_pods(junk, inventory)
