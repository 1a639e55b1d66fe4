"""Jobs collector: which training job's ranks run on which host, NIC, RDMA device and IP, into `endpoints`.

Sources (the seam, each polled on its own, a failure never stopping the others):

* the Kubernetes API (`kube.KubeApi`: in-cluster service account, or a kubeconfig with a token or client
  certificate);
* `kubectl get pods -A -o json` output (`PodListFile`), the fixture side of the same parser;
* a static YAML file of jobs -> hosts (-> NICs) (`StaticJobs`), for clusters without Kubernetes;
* Slurm: `squeue --json` run on each poll (or over ssh to a login node), or its output in a file
  (`SlurmJobs`, `slurm.py`).

Each source's pods become placement rows through the host NIC inventory (`placement.py`); a poll ships
only what changed since the last one.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from rocescope.collectors.common.command import Command
from rocescope.collectors.common.health import CollectorMetrics, Health, Targets
from rocescope.collectors.common.polling import poll_target, run_polls
from rocescope.collectors.jobs.placement import (
    Inventory,
    Pod,
    Row,
    endpoints_batch,
    parse_pods,
    parse_time,
    placement_rows,
)
from rocescope.collectors.jobs.slurm import parse_slurm_jobs
from rocescope.config import read_yaml
from rocescope.errors import ConfigError
from rocescope.pipeline.batch import Batch
from rocescope.pipeline.transport import Producer

__all__ = ["JobSource", "JobsCollector", "PodListFile", "SlurmJobs", "StaticJobs"]

log = logging.getLogger(__name__)


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
        return parse_pods(_read(self.data), inventory, now)


@dataclass
class SlurmJobs:
    """Jobs Slurm runs: `squeue --json` (or `sacct --json`) printed by a command on each poll, or in a file."""

    data: Command | Path | bytes
    name: str = "slurm"

    def rows(self, inventory: Inventory, _now: dt.datetime) -> tuple[list[Row], int]:
        raw = self.data.output() if isinstance(self.data, Command) else _read(self.data)
        return parse_slurm_jobs(raw, inventory)


def _read(data: Path | bytes) -> bytes:
    return data.read_bytes() if isinstance(data, Path) else data


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
        pods: list[Pod] = []
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
                started = parse_time(str(job["started"])) if job.get("started") else now
                for rank, host in enumerate(hosts):
                    pods.append(
                        Pod(f"{ns}/{name}", name, ns, f"{name}-{rank}", str(host), "", rank, False, "", nproc,
                             hca, (), started or now)
                    )  # fmt: skip
            except (KeyError, TypeError, ValueError) as exc:
                bad += 1
                log.warning("static jobs %s: jobs[%d] skipped: %s: %s", self.path, i, type(exc).__name__, exc)
        return placement_rows(pods, inventory), bad


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
