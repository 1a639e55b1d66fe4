"""Where Slurm ran training jobs: `squeue --json` / `sacct --json` -> `endpoints` rows.

Most GPU clusters that train schedule with Slurm, not Kubernetes; their jobs are joined to the fabric the same
way, by host and time. Both commands print `{"jobs": [...]}` (`slurmrestd`'s `/slurm/.../jobs` and
`/slurmdb/.../jobs` answers have the same shape). What differs between Slurm releases (data_parser v0.0.37-38 in
21.08-22.05, v0.0.39 and later since 23.02) is read by structure, not by version:

- times are plain epoch seconds (to v0.0.39), or `{"set": true, "infinite": false, "number": N}` (v0.0.40 on);
  squeue and scontrol have `start_time`/`end_time` (for a running job the end is its time limit, for a pending one
  the scheduler's forecast), sacct `time.start`/`time.end` (0 while running);
- the state is a word (`"RUNNING"`), a list of words (`["RUNNING", "COMPLETING"]`), or sacct's
  `state.current` (either of those);
- the nodes are a compressed hostlist (`"gpu-[001-004,007]"`, expanded by python-hostlist) in `nodes`.

Node order is the hostlist's (Slurm numbers the nodes of a job, `SLURM_NODEID`, in that order); GPU rank i of a
node uses its NIC i, as for pods (`placement.placement_rows`). A running job is placed from its start on; an
ended one (sacct, or squeue shortly after the end) from its start to its end, so a capture of the past is analyzed
with the jobs that ran then. Jobs that hold no nodes (pending, cancelled while pending) and job steps are no
placements.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

import hostlist

from rocescope.collectors.common.json_text import load_json
from rocescope.collectors.jobs.placement import Inventory, Pod, Row, placement_rows
from rocescope.errors import DecodeError

__all__ = ["parse_slurm_jobs"]

#: States of a job that holds its nodes now: the ranks are on them, and an end time beside them is a limit.
_HOLDING = frozenset({"RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT"})
#: States of a job that holds no nodes yet (a start time beside them is the scheduler's forecast).
_WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})


def _epoch(value: object) -> dt.datetime | None:
    """Epoch seconds as Slurm writes them (a number, or `{set, infinite, number}`); None when unset or 0."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return dt.datetime.fromtimestamp(value, dt.UTC)


def _states(value: object) -> set[str]:
    """A job's state words, from a word, a list of words, or sacct's `{"current": ..., "reason": ...}`."""
    if isinstance(value, Mapping):
        value = value.get("current")
    if isinstance(value, str):
        return {value.upper()}
    if isinstance(value, list):
        return {str(v).upper() for v in value}
    return set()


def _span(job: Mapping[str, Any]) -> tuple[dt.datetime | None, dt.datetime | None]:
    """(start, end): sacct's `time` block, else squeue's and scontrol's fields."""
    times = job.get("time")
    if isinstance(times, Mapping):
        return _epoch(times.get("start")), _epoch(times.get("end"))
    return _epoch(job.get("start_time")), _epoch(job.get("end_time"))


def _job_rows(job: Mapping[str, Any], inventory: Inventory) -> list[Row]:
    """One job's rows; [] for a job that holds no nodes in its record; raises on a broken record."""
    start, end = _span(job)
    states = _states(job.get("job_state", job.get("state")))
    nodes = job.get("nodes")
    if start is None or states & _WAITING or not isinstance(nodes, str) or nodes.strip() in ("", "None assigned"):
        return []
    if states & _HOLDING:
        end = None  # running: until it is seen gone (the end beside it is its time limit)
    elif end is None or end <= start:
        return []  # ended without running (cancelled while pending), or a record with no end
    job_id = str(job["job_id"])
    name = str(job.get("name") or job_id)
    partition = str(job.get("partition") or "")
    hosts = hostlist.expand_hostlist(nodes.strip())
    pods = [
        Pod(job_id, name, partition, "", host, "", i, False, "", None, None, (), start) for i, host in enumerate(hosts)
    ]
    rows = placement_rows(pods, inventory)  # running: until `placement.FAR_FUTURE`
    return [dataclasses.replace(r, valid_to=end) for r in rows] if end is not None else rows


def parse_slurm_jobs(output: str | bytes | Mapping[str, Any], inventory: Inventory) -> tuple[list[Row], int]:
    """(rows, malformed job records skipped) from `squeue --json` or `sacct --json` (or slurmrestd's answer).

    Raises DecodeError when the document has no job list at all.
    """
    doc: object = output if isinstance(output, Mapping) else load_json(output, "Slurm job list")
    jobs = doc.get("jobs") if isinstance(doc, Mapping) else None
    if not isinstance(jobs, list):
        raise DecodeError("not a Slurm job list (`squeue --json` or `sacct --json`): no `jobs` array")
    rows: list[Row] = []
    bad = 0
    for job in jobs:
        try:
            if not isinstance(job, Mapping):
                raise TypeError("a job that is no object")
            rows += _job_rows(job, inventory)
        except (KeyError, TypeError, ValueError, IndexError, hostlist.BadHostlist):  # one broken record, others placed
            bad += 1
    return rows, bad
