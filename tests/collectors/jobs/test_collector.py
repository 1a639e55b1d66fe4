"""Jobs collector: Kubeflow pods -> endpoints, against the sim's kubectl output and a real local API server."""

from __future__ import annotations

import base64
import copy
import datetime as dt
import http.server
import ipaddress
import json
import ssl
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.collectors.jobs.collector import (
    HostNic,
    Inventory,
    JobsCollector,
    KubeApi,
    PodListFile,
    StaticJobs,
    parse_pods,
    rdma_plugin_resources,
    select_hcas,
)
from rocescope.errors import ConfigError, DecodeError
from rocescope.sim.facades.pods import pod_list_json
from rocescope.sim.jobs import JobSpec, endpoints_arrow, place_jobs
from rocescope.sim.topology import FabricSpec, Topology

REAL = Path(__file__).parents[2] / "fixtures" / "realdata" / "07_jobmeta"
runner = CliRunner()
TOKEN = "s3cr3t-token"
KEYS = ("job_id", "job_name", "namespace", "pod", "rank", "host", "netdev", "rdma_dev", "ip", "gid")


@pytest.fixture(scope="module")
def topo() -> Topology:
    return Topology(FabricSpec(hosts=8, rails=4))


@pytest.fixture(scope="module")
def pods(topo: Topology) -> dict[str, Any]:
    jobs = place_jobs(topo, [JobSpec("llama", 4), JobSpec("bert", 2, namespace="ml", rails=(0, 1))])
    return pod_list_json(jobs, topo)


def _expected(topo: Topology) -> list[tuple[Any, ...]]:
    jobs = place_jobs(topo, [JobSpec("llama", 4), JobSpec("bert", 2, namespace="ml", rails=(0, 1))])
    t = endpoints_arrow(jobs, topo, dt.datetime(2025, 1, 1, tzinfo=dt.UTC)).to_pylist()
    return sorted(tuple(r[k] for k in KEYS) for r in t)


def _rows(rows: list[Any]) -> list[tuple[Any, ...]]:
    return sorted(tuple(getattr(r, k) for k in KEYS) for r in rows)


def test_sim_kubectl_output_gives_the_sim_ground_truth(topo: Topology, pods: dict[str, Any]) -> None:
    rows, bad = parse_pods(json.dumps(pods), Inventory.from_topology(topo))
    assert bad == 0
    assert _rows(rows) == _expected(topo)
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


# --- the live path: a real HTTP(S) server on loopback ------------------------------------------------


class _Api(http.server.BaseHTTPRequestHandler):
    pods: dict[str, Any] = {}
    seen: list[str] = []

    def log_message(self, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        url = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(url.query)
        type(self).seen.append(self.path)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_error(401, "Unauthorized")
            return
        if url.path != "/api/v1/pods" or q.get("labelSelector") != ["training.kubeflow.org/job-name"]:
            self.send_error(404)
            return
        items, limit = self.pods["items"], int(q["limit"][0])
        start = int(q.get("continue", ["0"])[0])
        page = {"kind": "PodList", "apiVersion": "v1", "items": items[start : start + limit], "metadata": {}}
        if start + limit < len(items):
            page["metadata"]["continue"] = str(start + limit)
        body = json.dumps(page).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _cert(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    c, k = tmp / "api.crt", tmp / "api.key"
    c.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    k.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))  # fmt: skip
    return c, k


@pytest.fixture(params=["http", "https"])
def api(request: pytest.FixtureRequest, tmp_path: Path, pods: dict[str, Any]) -> Iterator[tuple[str, Path]]:
    """A tiny Kubernetes API on 127.0.0.1 and a kubeconfig pointing at it."""
    _Api.pods, _Api.seen = pods, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    cluster: dict[str, Any] = {}
    if request.param == "https":
        c, k = _cert(tmp_path)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(c, k)
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        cluster["certificate-authority-data"] = base64.b64encode(c.read_bytes()).decode()
    url = f"{request.param}://127.0.0.1:{server.server_address[1]}"
    cluster["server"] = url
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": cluster}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "rocescope"}}],
        "users": [{"name": "rocescope", "user": {"token": TOKEN}}],
    }))  # fmt: skip
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield url, kubeconfig
    server.shutdown()
    server.server_close()


def test_live_api_through_a_kubeconfig_pages_and_matches_kubectl(
    api: tuple[str, Path], topo: Topology, pods: dict[str, Any]
) -> None:
    _, kubeconfig = api
    src = KubeApi.from_kubeconfig(kubeconfig)
    src.page = 4  # 6 pods: two pages
    rows, bad = src.rows(Inventory.from_topology(topo), dt.datetime.now(dt.UTC))
    assert bad == 0 and _rows(rows) == _expected(topo)
    assert len(_Api.seen) == 2 and "continue=4" in _Api.seen[1]


def test_live_api_refusal_is_one_failed_target(api: tuple[str, Path], topo: Topology, pods: dict[str, Any]) -> None:
    url, _ = api
    good = PodListFile(json.dumps(pods).encode())
    bad = KubeApi(url, token="wrong", ssl_context=ssl._create_unverified_context())
    c = JobsCollector([bad, good], Inventory.from_topology(topo))
    batches = c.poll_once()
    assert [b.key for b in batches] == ["kubectl"] and batches[0].num_rows == len(_expected(topo))
    assert "HTTP 401" in (c.health()["kube-api"].last_error or "")
    assert c.metrics.value("rocescope_jobs_poll_failures_total", target="kube-api") == 1
    assert c.metrics.value("rocescope_jobs_polls_total", target="kubectl") == 1


def test_in_cluster_needs_the_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="in-cluster"):
        KubeApi.in_cluster(tmp_path)


def test_changes_only_ship_new_and_closed_placements(topo: Topology, pods: dict[str, Any]) -> None:
    doc = copy.deepcopy(pods)
    c = JobsCollector([PodListFile(json.dumps(doc).encode())], Inventory.from_topology(topo))
    first = c.poll_once()
    assert first[0].num_rows == len(_expected(topo))
    assert c.poll_once() == []
    gone = doc["items"].pop()  # the last bert pod ends
    c.sources = [PodListFile(json.dumps(doc).encode())]
    end = dt.datetime(2026, 5, 1, tzinfo=dt.UTC)
    closed = c.poll_once(now=end)[0].data.to_pylist()
    assert {r["pod"] for r in closed} == {gone["metadata"]["name"]} and len(closed) == 2
    assert {r["valid_to"] for r in closed} == {end}


def test_static_jobs_file(tmp_path: Path, topo: Topology) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text("jobs:\n  - {name: llama, hosts: [gpu-003, gpu-004], nics: [mlx5_0, mlx5_2]}\n  - {name: broken}\n")
    rows, bad = StaticJobs(f).rows(Inventory.from_topology(topo), dt.datetime.now(dt.UTC))
    assert [(r.host, r.rank, r.rdma_dev) for r in rows] == [
        ("gpu-003", 0, "mlx5_0"), ("gpu-003", 1, "mlx5_2"), ("gpu-004", 2, "mlx5_0"), ("gpu-004", 3, "mlx5_2")
    ]  # fmt: skip
    assert bad == 1


def test_cli_once_and_run(tmp_path: Path, topo: Topology, pods: dict[str, Any]) -> None:
    inv = tmp_path / "inventory.yaml"
    inv.write_text(json.dumps({"hosts": {h.name: [vars(n) | {} for n in
        [HostNic(x.netdev, x.rdma_dev, x.ip, x.gid) for x in topo.nics_of(h.name)]] for h in topo.hosts}}))  # fmt: skip
    kubectl = tmp_path / "pods.json"
    kubectl.write_text(json.dumps(pods))
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n")
    base = ["--config", str(cfg), "collect", "jobs", "--pods", str(kubectl), "--inventory", str(inv)]
    result = runner.invoke(app, [*base, "--once"])
    assert result.exit_code == 0, result.output
    assert "kubectl: up" in result.output and "ml/bert" in result.output
    result = runner.invoke(app, [*base, "--seconds", "0.5"])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["--config", str(cfg), "sql", "SELECT count() FROM endpoints", "-f", "csv"])
    assert result.stdout.splitlines()[1] == str(len(_expected(topo)))


def test_cli_sources_from_the_config_and_flags_replace_them(
    tmp_path: Path, topo: Topology, pods: dict[str, Any]
) -> None:
    kubectl = tmp_path / "pods.json"
    kubectl.write_text(json.dumps(pods))
    static = tmp_path / "jobs.yaml"
    static.write_text("jobs:\n  - {name: llama, hosts: [gpu-003], nics: [mlx5_0]}\n")
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(
        f"store:\n  path: {tmp_path / 'data'}\ncollectors:\n  jobs:\n    pods: {kubectl}\n    interval_s: 5\n"
    )
    result = runner.invoke(app, ["--config", str(cfg), "collect", "jobs", "--once"])
    assert result.exit_code == 0, result.output
    assert "kubectl: up" in result.output and "ml/bert" in result.output
    result = runner.invoke(app, ["--config", str(cfg), "collect", "jobs", "--once", "--static", str(static)])
    assert result.exit_code == 0, result.output
    assert "kubectl" not in result.output and "llama" in result.output  # a source flag replaces the config's
