"""Where training jobs' ranks run: pods and the host NIC inventory -> `endpoints` rows.

Findings are reported per training job, so the detectors need the placement: Kubeflow training pods
(`training.kubeflow.org/job-name`, `.../replica-index`, `.../replica-type`) on their nodes, and the NICs
their ranks use. The node NICs come from a static host inventory (YAML: host -> [{netdev, rdma_dev, ip,
gid}]), not from LLDP or sysfs: the collector runs off-host (one per cluster), where a host's sysfs is out
of reach and LLDP names the switch port, not the RDMA device. Which of a node's NICs a pod uses: its
`NCCL_IB_HCA` env (NCCL's syntax: `mlx5_0,mlx5_1:1`, `=` exact, `^` exclude) when set; else the NICs an
RDMA device plugin resource it requests names (`rdma_resources` in the inventory, or the
k8s-rdma-shared-dev-plugin ConfigMap); else all the node's NICs. The node rank comes from
`PET_NODE_RANK` (torchrun, set by the training operator), `NODE_RANK`, `GROUP_RANK` or `RANK`, else the
replica index (workers after the master). GPU rank i of a node (i < `PET_NPROC_PER_NODE`, else one per
NIC) uses NIC i (rail-optimized: GPU i talks through NIC i; with fewer NICs than GPUs, consecutive GPUs
share one): rank = node_rank * nproc + i. Only Running pods are placements; a pod on a node the
inventory does not know gives one row with the node's address and rank -1.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from rocescope.collectors.common.json_text import load_json
from rocescope.config import read_yaml
from rocescope.errors import ConfigError, DecodeError
from rocescope.pipeline.batch import Batch, conform

__all__ = [
    "FAR_FUTURE",
    "JOB_LABEL",
    "KUBEFLOW",
    "HostNic",
    "Inventory",
    "Pod",
    "Row",
    "endpoints_batch",
    "parse_pods",
    "parse_time",
    "placement_rows",
    "rdma_plugin_resources",
    "select_hcas",
]

log = logging.getLogger(__name__)

KUBEFLOW = "training.kubeflow.org"
JOB_LABEL = f"{KUBEFLOW}/job-name"
#: `valid_to` of a placement that is still running (as the simulator writes it).
FAR_FUTURE = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
_RANK_ENVS = ("PET_NODE_RANK", "NODE_RANK", "GROUP_RANK", "RANK")


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
            doc = load_json(doc["data"].get("config.json", "{}"), "its config.json")
    except (DecodeError, ValueError, yaml.YAMLError, RecursionError) as exc:
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


# --- pods -> rows ----------------------------------------------------------------------------------------


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


def parse_time(text: object) -> dt.datetime | None:
    """A Kubernetes timestamp (`2026-03-01T10:00:00Z`), UTC when it names no zone; None when absent."""
    if isinstance(text, dt.datetime):  # an unquoted timestamp in a YAML pod list
        return text if text.tzinfo else text.replace(tzinfo=dt.UTC)
    if not isinstance(text, str) or not text:
        return None
    at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=dt.UTC)


@dataclass
class Pod:
    """A running training pod: what placing its ranks needs."""

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


def pod_facts(item: Mapping[str, Any], now: dt.datetime) -> Pod | None:
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
    started = parse_time(status.get("startTime")) or parse_time(meta.get("creationTimestamp")) or now
    return Pod(
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


def _nics(pod: Pod, inventory: Inventory) -> list[HostNic]:
    nics = list(inventory.hosts.get(pod.host, ()))
    if pod.hca is not None:
        return select_hcas(pod.hca, nics)
    for res in pod.resources:
        named = inventory.resources.get(res)
        if named:
            return [n for n in nics if n.netdev in named or n.rdma_dev in named]
    return nics


def placement_rows(pods: Iterable[Pod], inventory: Inventory) -> list[Row]:
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


def _pod_document(output: str | bytes) -> object:
    """`kubectl get pods -o json`, or `-o yaml` (read where the text is no JSON)."""
    import yaml

    try:
        return load_json(output, "pod list")
    except DecodeError as not_json:
        try:
            doc = yaml.load(output, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        except (yaml.YAMLError, ValueError, TypeError, RecursionError):
            raise not_json from None
        if not isinstance(doc, dict):
            raise DecodeError("pod list is neither JSON nor a YAML mapping") from None
        return doc


def parse_pods(
    output: str | bytes | Mapping[str, Any], inventory: Inventory, now: dt.datetime | None = None
) -> tuple[list[Row], int]:
    """(rows, malformed pods skipped) from a pod list (`kubectl get pods -o json` or `-o yaml`, or the API's
    PodList).

    Raises DecodeError when it is not a pod list at all.
    """
    when = now or dt.datetime.now(dt.UTC)
    doc: object = output if isinstance(output, Mapping) else _pod_document(output)
    if isinstance(doc, dict) and doc.get("kind") == "Pod":
        doc = {"items": [doc]}
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise DecodeError("not a pod list (no `items`)")
    pods: list[Pod] = []
    bad = 0
    for item in items:
        try:
            pod = pod_facts(item, when)
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
