"""Jobs facade: placed jobs as `kubectl get pods -o json` shows them (Kubeflow training operator pods).

One pod per `Pod` of each job: `<job>-worker-<rank>` in the job's namespace, labelled as the Kubeflow
training operator labels PyTorchJob replicas (`training.kubeflow.org/job-name`, `replica-type`
(`worker`), `replica-index`, `job-role` (`master` for rank 0), `operator-name`), with the node rank
in the `PET_NODE_RANK` env of its container, scheduled on its host (`spec.nodeName`, `status.hostIP`),
Running. The pod IP is the host's rail-0 NIC address (host networking, as RDMA training pods often run).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Iterable
from typing import Any

from rocescope.sim.jobs import Job, Pod
from rocescope.sim.topology import Topology

__all__ = ["KUBEFLOW", "pod_list_json", "pod_uid"]

KUBEFLOW = "training.kubeflow.org"
_EPOCH = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def _host_ip(topology: Topology | None, host: str) -> str | None:
    if topology is None:
        return None
    return topology.nics_of(host)[0].ip


def pod_uid(job: Job, pod: Pod) -> str:
    """The pod's UID (what the kubelet's cgroup path and eBPF's QP owners carry), stable per job and pod."""
    return str(uuid.UUID(bytes=hashlib.sha256(f"{job.job_id}/{pod.name}".encode()).digest()[:16], version=4))


def _pod(job: Job, pod: Pod, topology: Topology | None, started: str) -> dict[str, Any]:
    uid = pod_uid(job, pod)
    job_uid = str(uuid.UUID(bytes=hashlib.sha256(job.job_id.encode()).digest()[:16], version=4))
    labels = {
        f"{KUBEFLOW}/job-name": job.name,
        f"{KUBEFLOW}/operator-name": "pytorchjob-controller",
        f"{KUBEFLOW}/replica-type": "worker",
        f"{KUBEFLOW}/replica-index": str(pod.rank),
    }
    if pod.rank == 0:
        labels[f"{KUBEFLOW}/job-role"] = "master"
    ip = _host_ip(topology, pod.host)
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": started}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "startTime": started,
        "qosClass": "Guaranteed",
    }
    if ip is not None:
        status.update(hostIP=ip, podIP=ip, podIPs=[{"ip": ip}])
    env = [
        {"name": "PET_NODE_RANK", "value": str(pod.rank)},
        {"name": "PET_NNODES", "value": str(len(job.pods))},
        {"name": "PET_NPROC_PER_NODE", "value": str(len(job.rails))},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": job.namespace,
            "uid": uid,
            "creationTimestamp": started,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "PyTorchJob",
                    "name": job.name,
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": pod.host,
            "hostNetwork": ip is not None,
            "containers": [
                {
                    "name": "pytorch",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "env": env,
                    "resources": {
                        "limits": {"nvidia.com/gpu": str(len(job.rails)), "rdma/rdma_shared_device_a": "1"},
                        "requests": {"nvidia.com/gpu": str(len(job.rails)), "rdma/rdma_shared_device_a": "1"},
                    },
                }
            ],
        },
        "status": status,
    }


def pod_list_json(
    jobs: Iterable[Job], topology: Topology | None = None, started: dt.datetime | None = None
) -> dict[str, Any]:
    """`kubectl get pods -A -o json` for these jobs' pods (pod IPs need the topology)."""
    ts = (started or _EPOCH).astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "List",
        "items": [_pod(job, pod, topology, ts) for job in jobs for pod in job.pods],
        "metadata": {"resourceVersion": ""},
    }
