"""Jobs collector: which training job's ranks run on which host, NIC, RDMA device and IP, into `endpoints`.

Findings are reported per training job, so the detectors need the placement: Kubeflow training pods
(`training.kubeflow.org/job-name`, `.../replica-index`, `.../replica-type`) on their nodes, and the NICs
their ranks use. Sources (the seam, each polled on its own, a failure never stopping the others):

* the Kubernetes API (`KubeApi`: in-cluster service account, or a kubeconfig with a token or client
  certificate), GET `/api/v1/pods?labelSelector=training.kubeflow.org/job-name` over plain HTTPS
  (stdlib: no client library to keep in step with the cluster);
* `kubectl get pods -A -o json` output (`PodListFile`), the fixture side of the same parser;
* a static YAML file of jobs -> hosts (-> NICs) (`StaticJobs`), for clusters without Kubernetes.

The node NICs come from a static host inventory (YAML: host -> [{netdev, rdma_dev, ip, gid}]), not from
LLDP or sysfs: the collector runs off-host (one per cluster), where a host's sysfs is out of reach and
LLDP names the switch port, not the RDMA device. Which of a node's NICs a pod uses: its `NCCL_IB_HCA`
env (NCCL's syntax: `mlx5_0,mlx5_1:1`, `=` exact, `^` exclude) when set; else the NICs an RDMA device
plugin resource it requests names (`rdma_resources` in the inventory, or the k8s-rdma-shared-dev-plugin
ConfigMap); else all the node's NICs. The node rank comes from `PET_NODE_RANK` (torchrun, set by the
training operator), `NODE_RANK`, `GROUP_RANK` or `RANK`, else the replica index (workers after the
master). GPU rank i of a node (i < `PET_NPROC_PER_NODE`, else one per NIC) uses NIC i (rail-optimized:
GPU i talks through NIC i; with fewer NICs than GPUs, consecutive GPUs share one): rank =
node_rank * nproc + i. Only Running pods are placements; a pod on a node the inventory does not know
gives one row with the node's address and rank -1.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import logging
import os
import ssl
import tempfile
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from rocescope.collectors.common.health import CollectorMetrics, Health, Targets
from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.common.polling import poll_target, run_polls
from rocescope.config import read_yaml
from rocescope.errors import ConfigError, DecodeError
from rocescope.pipeline.batch import Batch, conform
from rocescope.pipeline.transport import Producer

__all__ = [
    "FAR_FUTURE",
    "KUBEFLOW",
    "HostNic",
    "Inventory",
    "JobsCollector",
    "KubeApi",
    "PodListFile",
    "Row",
    "StaticJobs",
    "endpoints_batch",
    "parse_pods",
    "select_hcas",
]

log = logging.getLogger(__name__)

KUBEFLOW = "training.kubeflow.org"
JOB_LABEL = f"{KUBEFLOW}/job-name"
#: `valid_to` of a placement that is still running (as the simulator writes it).
FAR_FUTURE = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_RANK_ENVS = ("PET_NODE_RANK", "NODE_RANK", "GROUP_RANK", "RANK")
_SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class HostNic:
    """One RDMA NIC of a host."""

    netdev: str
    rdma_dev: str
    ip: str = ""
    gid: str = ""


@dataclass
class Inventory:
    """Hosts' NICs (in GPU order) and what RDMA device plugin resources name."""

    hosts: dict[str, tuple[HostNic, ...]] = field(default_factory=dict)
    resources: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def from_yaml(cls, path: Path) -> Inventory:
        """`hosts: {gpu-001: [{netdev, rdma_dev, ip, gid}]}` and optional `rdma_resources: {name: [dev...]}`,
        `rdma_plugin_config: FILE` (a k8s-rdma-shared-dev-plugin ConfigMap, relative to this file)."""
        import yaml

        try:
            raw = read_yaml(path.read_text())
        except (OSError, yaml.YAMLError, RecursionError) as exc:
            raise ConfigError(f"inventory {path}: {exc}") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("hosts", {}), dict):
            raise ConfigError(f"inventory {path}: want `hosts: {{host: [{{netdev, rdma_dev, ip, gid}}]}}`")
        extra = sorted(set(raw) - {"hosts", "rdma_resources", "rdma_plugin_config"})
        if extra:
            raise ConfigError(f"inventory {path}: unknown key(s) {extra}")
        inv = cls()
        for host, nics in (raw.get("hosts") or {}).items():
            if not isinstance(nics, list):
                raise ConfigError(f"inventory {path}: hosts.{host} must be a list of NICs")
            out = []
            for i, nic in enumerate(nics):
                if not isinstance(nic, dict) or (not nic.get("netdev") and not nic.get("rdma_dev")):
                    raise ConfigError(f"inventory {path}: hosts.{host}[{i}] needs netdev or rdma_dev")
                bad = sorted(set(nic) - {"netdev", "rdma_dev", "ip", "gid"})
                if bad:
                    raise ConfigError(f"inventory {path}: hosts.{host}[{i}]: unknown key(s) {bad}")
                out.append(HostNic(*(str(nic.get(k, "")) for k in ("netdev", "rdma_dev", "ip", "gid"))))
            inv.hosts[str(host)] = tuple(out)
        for name, devs in (raw.get("rdma_resources") or {}).items():
            if not isinstance(devs, list):
                raise ConfigError(f"inventory {path}: rdma_resources.{name} must be a list of devices")
            inv.resources[str(name)] = tuple(str(d) for d in devs)
        if raw.get("rdma_plugin_config"):
            inv.resources.update(rdma_plugin_resources((path.parent / str(raw["rdma_plugin_config"])).read_text()))
        return inv

    @classmethod
    def from_topology(cls, topology: Any) -> Inventory:
        """The simulator's hosts and NICs (rail order)."""
        return cls(
            {
                h.name: tuple(HostNic(n.netdev, n.rdma_dev, n.ip, n.gid) for n in topology.nics_of(h.name))
                for h in topology.hosts
            }
        )


def rdma_plugin_resources(text: str) -> dict[str, tuple[str, ...]]:
    """resourceName -> device names from a k8s-rdma-shared-dev-plugin ConfigMap (or its config.json).

    Both its `devices` list and `selectors.ifNames` name netdevs; vendor/device-id selectors cannot be
    resolved off-host and are ignored (such a resource then means: all the node's NICs).
    """
    import yaml

    try:
        doc = read_yaml(text)
        if isinstance(doc, dict) and isinstance(doc.get("data"), dict):
            doc = json.loads(doc["data"].get("config.json", "{}"))
    except (ValueError, yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"RDMA device plugin config: {exc}") from exc
    out: dict[str, tuple[str, ...]] = {}
    for entry in doc.get("configList", []) if isinstance(doc, dict) else []:
        if not isinstance(entry, dict) or not entry.get("resourceName"):
            continue
        sel: dict[str, Any] = entry["selectors"] if isinstance(entry.get("selectors"), dict) else {}
        devs = [*(entry.get("devices") or []), *(sel.get("ifNames") or [])]
        if devs:
            out[str(entry["resourceName"])] = tuple(str(d) for d in devs)
    return out


def select_hcas(spec: str, nics: Sequence[HostNic]) -> list[HostNic]:
    """NICs an `NCCL_IB_HCA` value selects: prefix match per entry (`mlx5_1:1`), `=` exact, `^` excludes."""
    spec = spec.strip()
    if not spec:
        return list(nics)
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    spec = spec.lstrip("=")
    names = [part.split(":")[0].strip() for part in spec.split(",") if part.strip()]

    def hit(nic: HostNic) -> bool:
        return any(nic.rdma_dev == n if exact else nic.rdma_dev.startswith(n) for n in names)

    return [n for n in nics if hit(n) != exclude]


# --- parsing pods -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One `endpoints` row."""

    job_id: str
    job_name: str
    namespace: str
    pod: str
    rank: int
    host: str
    netdev: str
    rdma_dev: str
    ip: str
    gid: str
    valid_from: dt.datetime
    valid_to: dt.datetime = FAR_FUTURE


def _time(text: object) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


@dataclass
class _Pod:
    job_id: str
    job_name: str
    namespace: str
    name: str
    host: str
    host_ip: str
    node_rank: int
    from_index: bool
    replica_type: str
    nproc: int | None
    hca: str | None
    resources: tuple[str, ...]
    started: dt.datetime


def _pod(item: Mapping[str, Any], now: dt.datetime) -> _Pod | None:
    """A training pod's facts, None when the pod is no (running) training pod; raises on a broken one."""
    meta = item["metadata"]
    labels = meta.get("labels") or {}
    job = labels.get(JOB_LABEL) or labels.get("pytorch-job-name")
    if not job:
        return None
    status = item.get("status") or {}
    if status.get("phase") != "Running":
        return None
    spec = item["spec"]
    host = spec.get("nodeName")
    if not isinstance(host, str) or not host:
        raise ValueError("running pod without spec.nodeName")
    env: dict[str, str] = {}
    resources: list[str] = []
    for c in spec.get("containers") or []:
        for e in c.get("env") or []:
            if isinstance(e.get("value"), str):
                env.setdefault(str(e["name"]), e["value"])
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            for name in res.get(part) or {}:
                if "/" in name and not name.startswith(("nvidia.com/gpu", "cpu", "memory")):
                    resources.append(name.partition("/")[2])
    rank_text = next((env[k] for k in _RANK_ENVS if k in env), None)
    from_index = rank_text is None
    if rank_text is None:
        rank_text = labels.get(f"{KUBEFLOW}/replica-index", "-1")
    node_rank = int(rank_text)
    nproc_text = env.get("PET_NPROC_PER_NODE", "")
    nproc = int(nproc_text) if nproc_text.isdigit() and int(nproc_text) > 0 else None
    namespace = str(meta.get("namespace") or "default")
    started = _time(status.get("startTime")) or _time(meta.get("creationTimestamp")) or now
    return _Pod(
        f"{namespace}/{job}",
        str(job),
        namespace,
        str(meta["name"]),
        host,
        str(status.get("hostIP") or ""),
        node_rank,
        from_index,
        str(labels.get(f"{KUBEFLOW}/replica-type", "")).lower(),
        nproc,
        env.get("NCCL_IB_HCA"),
        tuple(dict.fromkeys(resources)),
        started,
    )


def _nics(pod: _Pod, inventory: Inventory) -> list[HostNic]:
    nics = list(inventory.hosts.get(pod.host, ()))
    if pod.hca is not None:
        return select_hcas(pod.hca, nics)
    for res in pod.resources:
        named = inventory.resources.get(res)
        if named:
            return [n for n in nics if n.netdev in named or n.rdma_dev in named]
    return nics


def placement_rows(pods: Iterable[_Pod], inventory: Inventory) -> list[Row]:
    """Rows of the placed pods: one per GPU rank and the NIC it uses."""
    pods = list(pods)
    with_master = {p.job_id for p in pods if p.replica_type == "master"}
    rows: list[Row] = []
    for p in pods:
        node_rank = p.node_rank
        if p.from_index and p.replica_type == "worker" and p.job_id in with_master and node_rank >= 0:
            node_rank += 1  # PyTorchJob: the master is node 0, worker i is node i + 1
        nics = _nics(p, inventory)
        head = (p.job_id, p.job_name, p.namespace, p.name)
        if not nics:
            rows.append(Row(*head, -1, p.host, "", "", p.host_ip, "", p.started))
            continue
        per_node = p.nproc or len(nics)
        for i in range(per_node):
            nic = nics[i * len(nics) // per_node] if per_node > len(nics) else nics[i] if i < len(nics) else None
            if nic is None:
                break
            rank = node_rank * per_node + i if node_rank >= 0 else -1
            rows.append(Row(*head, rank, p.host, nic.netdev, nic.rdma_dev, nic.ip, nic.gid, p.started))
    return rows


def parse_pods(
    output: str | bytes | Mapping[str, Any], inventory: Inventory, now: dt.datetime | None = None
) -> tuple[list[Row], int]:
    """(rows, malformed pods skipped) from a pod list (`kubectl get pods -o json`, or the API's PodList).

    Raises DecodeError when it is not a pod list at all.
    """
    when = now or dt.datetime.now(dt.UTC)
    if isinstance(output, Mapping):
        doc: object = output
    else:
        doc = load_json(output, "pod list")
    if isinstance(doc, dict) and doc.get("kind") == "Pod":
        doc = {"items": [doc]}
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise DecodeError("not a pod list (no `items`)")
    pods: list[_Pod] = []
    bad = 0
    for item in items:
        try:
            pod = _pod(item, when)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            bad += 1
            meta = item.get("metadata") if isinstance(item, dict) else None
            name = meta.get("name", "?") if isinstance(meta, dict) else "?"
            log.debug("pod %s skipped: %s: %s", name, type(exc).__name__, exc)
            continue
        if pod is not None:
            pods.append(pod)
    return placement_rows(pods, inventory), bad


def endpoints_batch(rows: Sequence[Row], key: str = "") -> Batch:
    """An `endpoints` Batch of these rows."""
    names = [f for f in Row.__dataclass_fields__]
    cols: dict[str, Any] = {n: [getattr(r, n) for r in rows] for n in names}
    cols["rank"] = pa.array(cols["rank"], pa.int32())
    for ts in ("valid_from", "valid_to"):
        cols[ts] = pa.array(cols[ts], pa.timestamp("ns", tz="UTC"))
    return Batch("endpoints", conform("endpoints", pa.table(cols)), key=key)


# --- sources ------------------------------------------------------------------------------------------


class JobSource(Protocol):
    """Where placements come from."""

    @property
    def name(self) -> str: ...

    def rows(self, inventory: Inventory, now: dt.datetime) -> tuple[list[Row], int]: ...


@dataclass
class PodListFile:
    """`kubectl get pods -A -o json` output in a file (or bytes): the fixture side of the seam."""

    data: Path | bytes
    name: str = "kubectl"

    def rows(self, inventory: Inventory, now: dt.datetime) -> tuple[list[Row], int]:
        raw = self.data.read_bytes() if isinstance(self.data, Path) else self.data
        return parse_pods(raw, inventory, now)


class KubeApi:
    """The Kubernetes API over HTTPS (or HTTP, for a local test server), with a bearer token or client cert."""

    def __init__(
        self,
        server: str,
        *,
        token: str | None = None,
        token_file: Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
        name: str = "kube-api",
        page: int = 500,
    ):
        self.server = server.rstrip("/")
        self.token = token
        self.token_file = token_file
        self.ssl_context = ssl_context
        self.timeout_s = timeout_s
        self.name = name
        self.page = page

    @classmethod
    def in_cluster(cls, sa_dir: Path = _SA_DIR) -> KubeApi:
        """The pod's service account (token re-read on every poll: bound tokens rotate)."""
        host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host or not (sa_dir / "token").exists():
            raise ConfigError("--in-cluster: no KUBERNETES_SERVICE_HOST or service account token (not in a pod?)")
        ctx = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
        host = f"[{host}]" if ":" in host else host
        return cls(f"https://{host}:{port}", token_file=sa_dir / "token", ssl_context=ctx, name="kube-api")

    @classmethod
    def from_kubeconfig(cls, path: Path, context: str | None = None) -> KubeApi:
        """Server, CA and credentials of a kubeconfig context (token, tokenFile or client certificate).

        exec and auth-provider plugins are not run: give the collector a service account token instead.
        """
        import yaml

        try:
            cfg = read_yaml(path.read_text())
            ctx_name = context or cfg["current-context"]
            ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
            cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
            user: dict[str, Any] = (
                next((u["user"] for u in cfg.get("users") or [] if u["name"] == ctx.get("user")), {}) or {}
            )
        except (OSError, yaml.YAMLError, RecursionError, KeyError, StopIteration, TypeError) as exc:
            raise ConfigError(f"kubeconfig {path}: cannot read context {context or '(current)'}: {exc!r}") from None
        if "exec" in user or "auth-provider" in user:
            raise ConfigError(f"kubeconfig {path}: exec/auth-provider credentials are not supported; use a token")
        server = str(cluster.get("server", ""))
        ssl_ctx = None
        if server.startswith("https://"):
            if cluster.get("insecure-skip-tls-verify"):
                ssl_ctx = ssl.create_default_context()
                ssl_ctx.check_hostname = False
                ssl_ctx.verify_mode = ssl.CERT_NONE
            elif cluster.get("certificate-authority-data"):
                pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
                ssl_ctx = ssl.create_default_context(cadata=pem)
            elif cluster.get("certificate-authority"):
                ssl_ctx = ssl.create_default_context(cafile=str(path.parent / cluster["certificate-authority"]))
            else:
                ssl_ctx = ssl.create_default_context()
            _client_cert(ssl_ctx, user, path.parent)
        token_file = Path(path.parent / user["tokenFile"]) if user.get("tokenFile") else None
        return cls(server, token=user.get("token"), token_file=token_file, ssl_context=ssl_ctx, name=f"kube:{ctx_name}")

    def _get(self, url: str) -> dict[str, Any]:
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        token = self.token_file.read_text().strip() if self.token_file is not None else self.token
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self.ssl_context) as resp:
                body = resp.read()
        except urllib.error.HTTPError as exc:
            raise DecodeError(f"{self.server}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise DecodeError(f"{self.server}: {exc}") from None
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise DecodeError(f"{self.server}: answer is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise DecodeError(f"{self.server}: answer is not a pod list")
        return doc

    def pod_list(self) -> dict[str, Any]:
        """Every training pod of the cluster (paged with `limit`/`continue`)."""
        if not self.server.startswith(("https://", "http://")):
            raise ConfigError(f"Kubernetes server {self.server!r} is not an http(s) URL")
        items: list[Any] = []
        token = ""
        while True:
            query = {"labelSelector": JOB_LABEL, "limit": str(self.page)}
            if token:
                query["continue"] = token
            doc = self._get(f"{self.server}/api/v1/pods?{urllib.parse.urlencode(query)}")
            page = doc.get("items")
            if not isinstance(page, list):
                raise DecodeError(f"{self.server}: answer has no `items`")
            items.extend(page)
            token = str((doc.get("metadata") or {}).get("continue") or "")
            if not token:
                return {"kind": "PodList", "items": items}

    def rows(self, inventory: Inventory, now: dt.datetime) -> tuple[list[Row], int]:
        return parse_pods(self.pod_list(), inventory, now)


def _client_cert(ctx: ssl.SSLContext, user: Mapping[str, Any], base: Path) -> None:
    """Load a kubeconfig user's client certificate (files, or inline data written to a private temp dir)."""
    cert, key = user.get("client-certificate"), user.get("client-key")
    if cert and key:
        ctx.load_cert_chain(str(base / cert), str(base / key))
        return
    cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
    if cert_data and key_data:
        with tempfile.TemporaryDirectory() as tmp:
            c, k = Path(tmp) / "c.pem", Path(tmp) / "k.pem"
            c.write_bytes(base64.b64decode(cert_data))
            k.write_bytes(base64.b64decode(key_data))
            ctx.load_cert_chain(str(c), str(k))


@dataclass
class StaticJobs:
    """Jobs from YAML: `jobs: [{name, namespace, hosts: [in node-rank order], nics: [rdma devs], nproc, started}]`."""

    path: Path
    name: str = "static"

    def rows(self, inventory: Inventory, now: dt.datetime) -> tuple[list[Row], int]:
        import yaml

        try:
            raw = read_yaml(self.path.read_text())
        except (OSError, yaml.YAMLError, RecursionError) as exc:
            raise ConfigError(f"static jobs {self.path}: {exc}") from exc
        jobs = raw.get("jobs") if isinstance(raw, dict) else None
        if not isinstance(jobs, list):
            raise ConfigError(f"static jobs {self.path}: want `jobs:` with a list of {{name, hosts, ...}}")
        pods: list[_Pod] = []
        bad = 0
        for i, job in enumerate(jobs):
            try:
                name, ns = str(job["name"]), str(job.get("namespace", "default"))
                hosts = job["hosts"]
                if not isinstance(hosts, list) or not hosts:
                    raise ValueError("hosts must be a non-empty list")
                nics = job.get("nics")
                hca = "=" + ",".join(str(n) for n in nics) if nics else None
                nproc = int(job["nproc"]) if job.get("nproc") else None
                started = _time(str(job["started"])) if job.get("started") else now
                for rank, host in enumerate(hosts):
                    pods.append(
                        _Pod(f"{ns}/{name}", name, ns, f"{name}-{rank}", str(host), "", rank, False, "", nproc,
                             hca, (), started or now)
                    )  # fmt: skip
            except (KeyError, TypeError, ValueError) as exc:
                bad += 1
                log.warning("static jobs %s: jobs[%d] skipped: %s: %s", self.path, i, type(exc).__name__, exc)
        return placement_rows(pods, inventory), bad


# --- the collector ------------------------------------------------------------------------------------


class JobsCollector:
    """Polls every job source into `endpoints` Batches (one per source that answered)."""

    def __init__(
        self,
        sources: Sequence[JobSource],
        inventory: Inventory,
        producer: Producer | None = None,
        metrics: CollectorMetrics | None = None,
    ):
        self.sources = list(sources)
        self.inventory = inventory
        self.producer = producer
        self.metrics = metrics or CollectorMetrics("jobs")
        self.targets = Targets(self.metrics, log)
        self.targets.add(*(s.name for s in sources))
        self._open: dict[str, set[Row]] = {s.name: set() for s in sources}

    def health(self) -> dict[str, Health]:
        return dict(self.targets.health)

    def poll_once(self, now: dt.datetime | None = None, changes_only: bool = True) -> list[Batch]:
        """One poll of every source. With `changes_only` (the default) only new placements are shipped, and
        a placement gone since the last poll is shipped once more with `valid_to` = now, so a long-running job
        is not written again on every poll (a restarted collector ships the open placements once again)."""
        when = now or dt.datetime.now(dt.UTC)
        out: list[Batch] = []
        for src in self.sources:

            def poll(src: JobSource = src) -> tuple[list[Row], int, int]:
                rows, bad = src.rows(self.inventory, when)
                return rows, len(rows), bad

            rows = poll_target(src.name, poll, self.targets)
            if rows is None:
                continue  # a failed poll closes nothing: the placements are unknown, not gone
            ship = rows
            if changes_only:
                seen, current = self._open[src.name], set(rows)
                ship = [r for r in rows if r not in seen]
                ship += [replace(r, valid_to=when) for r in sorted(seen - current, key=lambda r: (r.job_id, r.rank))]
                self._open[src.name] = current
            if ship:
                out.append(endpoints_batch(ship, key=src.name))
        return out

    def run(self, interval_s: float, stop: threading.Event, on_batch: Callable[[Batch], None] | None = None) -> int:
        """Poll and publish every `interval_s` until `stop`."""
        return run_polls(self.poll_once, self.producer, interval_s, stop, on_batch)
