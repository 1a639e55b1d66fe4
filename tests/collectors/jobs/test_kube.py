"""The Kubernetes API source against a real HTTP(S) server on loopback, through a kubeconfig."""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import ipaddress
import json
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rocescope.collectors.jobs.collector import JobsCollector, PodListFile
from rocescope.collectors.jobs.kube import KubeApi
from rocescope.collectors.jobs.placement import Inventory
from rocescope.errors import ConfigError
from rocescope.sim.topology import Topology

TOKEN = "s3cr3t-token"
Keyed = Callable[[Iterable[Any]], list[tuple[Any, ...]]]


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
    api: tuple[str, Path], topo: Topology, expected: list[tuple[Any, ...]], keyed: Keyed
) -> None:
    _, kubeconfig = api
    src = KubeApi.from_kubeconfig(kubeconfig)
    src.page = 4  # 6 pods: two pages
    rows, bad = src.rows(Inventory.from_topology(topo), dt.datetime.now(dt.UTC))
    assert bad == 0 and keyed(rows) == expected
    assert len(_Api.seen) == 2 and "continue=4" in _Api.seen[1]


def test_live_api_refusal_is_one_failed_target(
    api: tuple[str, Path], topo: Topology, pods: dict[str, Any], expected: list[tuple[Any, ...]]
) -> None:
    url, _ = api
    good = PodListFile(json.dumps(pods).encode())
    bad = KubeApi(url, token="wrong", ssl_context=ssl._create_unverified_context())
    c = JobsCollector([bad, good], Inventory.from_topology(topo))
    batches = c.poll_once()
    assert [b.key for b in batches] == ["kubectl"] and batches[0].num_rows == len(expected)
    assert "HTTP 401" in (c.health()["kube-api"].last_error or "")
    assert c.metrics.value("rocescope_jobs_poll_failures_total", target="kube-api") == 1
    assert c.metrics.value("rocescope_jobs_polls_total", target="kubectl") == 1


def test_in_cluster_needs_the_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="in-cluster"):
        KubeApi.in_cluster(tmp_path)
