"""Who owns a QP: a pid mapped to its comm, cgroup (the Kubernetes pod) and training job, from /proc.

The QP events and the QP table name a pid; jobs are what the analysis groups by. Inside a pod the
pod UID comes from the kubelet's cgroup path and the job from the jobs collector's pod -> job map;
elsewhere the job comes from the process environment (`JOB_ENV`: Slurm, torchelastic, or our own).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["JOB_ENV", "Owner", "ProcOwnerResolver", "pod_uid"]

#: Environment variables naming the job a process belongs to, first hit wins.
JOB_ENV: tuple[str, ...] = ("ROCESCOPE_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID")
_POD_RE = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


@dataclass(frozen=True)
class Owner:
    """What a pid maps to. `cgroup` is `pod:<uid>` inside a Kubernetes pod, else the cgroup path."""

    comm: str = ""
    cgroup: str = ""
    pod: str = ""
    job_id: str = ""


def pod_uid(cgroup_path: str) -> str:
    """The pod UID in a kubelet cgroup path (cgroupfs `/kubepods/burstable/pod<uid>/...` or systemd
    `kubepods-burstable-pod<uid with _>.slice`), or ""."""
    m = _POD_RE.search(cgroup_path)
    return m.group(1).replace("_", "-") if m else ""


def _cgroup_path(text: str) -> str:
    """The most telling line of /proc/<pid>/cgroup: a kubepods one, else cgroup v2 (`0::`), else the first."""
    paths = [(line.split(":", 2)[0], line.split(":", 2)[2]) for line in text.splitlines() if line.count(":") >= 2]
    for _, path in paths:
        if "kubepods" in path:
            return path
    for hier, path in paths:
        if hier == "0":
            return path
    return paths[0][1] if paths else ""


class ProcOwnerResolver:
    """Maps a pid to comm, cgroup/pod and job from /proc: the job from `pod_jobs` (pod UID -> job id,
    from the jobs collector) or else from the process environment (`JOB_ENV`). Cached briefly, since
    the same owner holds many QPs."""

    def __init__(
        self,
        proc_root: str | Path = "/proc",
        pod_jobs: Mapping[str, str] | None = None,
        job_env: Sequence[str] = JOB_ENV,
        ttl_s: float = 30.0,
    ):
        self.proc_root = Path(proc_root)
        self.pod_jobs = dict(pod_jobs or {})
        self.job_env = tuple(job_env)
        self.ttl_s = ttl_s
        self._cache: dict[int, tuple[float, Owner]] = {}

    def resolve(self, pid: int, comm: str = "", cgroup_id: int = 0) -> Owner:
        now = time.monotonic()
        hit = self._cache.get(pid)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        owner = self._read(pid, comm, cgroup_id)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[pid] = (now, owner)
        return owner

    def _read(self, pid: int, comm: str, cgroup_id: int) -> Owner:
        base = self.proc_root / str(pid)
        try:
            comm = comm or (base / "comm").read_text().strip()
            path = _cgroup_path((base / "cgroup").read_text())
        except OSError:  # gone already: keep what the event carried
            return Owner(comm=comm, cgroup=f"cgroup-id:{cgroup_id}" if cgroup_id else "")
        pod = pod_uid(path)
        job = self.pod_jobs.get(pod, "") if pod else ""
        if not job:
            job = self._job_from_env(base / "environ")
        return Owner(comm=comm, cgroup=f"pod:{pod}" if pod else path, pod=pod, job_id=job)

    def _job_from_env(self, path: Path) -> str:
        try:
            raw = path.read_bytes()
        except OSError:
            return ""
        env = dict(item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
        for name in self.job_env:
            value = env.get(name.encode())
            if value:
                return value.decode(errors="replace")
        return ""
