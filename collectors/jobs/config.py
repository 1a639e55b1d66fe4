"""The `collectors.jobs` section: where training jobs' placement comes from."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from rocescope.collectors.common.config import Strict


class JobsSection(Strict):
    kubeconfig: Path | None = None
    context: str | None = None
    in_cluster: bool = False
    static: Path | None = Field(None, description="YAML `jobs: [{name, namespace, hosts, nics}]`.")
    pods: Path | None = Field(None, description="`kubectl get pods -A -o json` output.")
    slurm: list[str] | None = Field(
        None, description="A command printing `squeue --json` on each poll: [squeue, --json], or over ssh."
    )
    inventory: Path | None = Field(None, description="Host NIC inventory YAML.")
    interval_s: float = Field(30.0, gt=0)
