"""Slurm placements from real `squeue --json`, `scontrol show job --json` and `sacct --json` output (Slurm 21.08 to
23.11: data_parser v0.0.37 to v0.0.40; sources in tests/fixtures/slurm/*.source.txt), by command and by file."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rocescope.cli import app
from rocescope.collectors.common.command import Command
from rocescope.collectors.jobs.collector import JobsCollector, SlurmJobs
from rocescope.collectors.jobs.placement import FAR_FUTURE, HostNic, Inventory
from rocescope.collectors.jobs.slurm import parse_slurm_jobs
from rocescope.errors import DecodeError

SLURM = Path(__file__).parents[2] / "fixtures" / "slurm"
SQUEUE_21_08 = SLURM / "squeue-21.08.5-openapi-v0.0.37-rivosinc-prometheus-slurm-exporter.json"
SQUEUE_23_02 = SLURM / "squeue-23.02.4-dataparser-v0.0.39-rivosinc-prometheus-slurm-exporter.json"
SCONTROL_23_11 = SLURM / "scontrol-show-job-23.11.10-dataparser-v0.0.40-virtualcell-vcell.json"
SACCT_23_11 = SLURM / "sacct-23.11.10-dataparser-v0.0.40-virtualcell-vcell.json"

runner = CliRunner()


def _at(epoch: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)


@pytest.mark.parametrize(
    ("path", "job", "host", "start", "end"),
    [
        # Slurm 21.08, v0.0.37: plain epoch times, the state a word; running until seen gone (end_time is its limit)
        (SQUEUE_21_08, "26515966", "cs75", 1684114921, None),
        # 23.02, v0.0.39: numbers as {set, number} objects but times still plain; two PENDING jobs hold no nodes,
        # the COMPLETED one ran from its start to its end
        (SQUEUE_23_02, "52173767", "cs66", 1694675238, 1694675491),
        # 23.11, v0.0.40: times as {set, infinite, number}, the state a list
        (SCONTROL_23_11, "2710594", "mantis-041", 1786540679, None),
        # sacct 23.11: the state under state.current, times under time.{start,end} (end 0: running), 22 steps
        (SACCT_23_11, "2710593", "mantis-041", 1786540675, None),
    ],
)
def test_real_slurm_output_places_each_job_that_holds_nodes(
    path: Path, job: str, host: str, start: int, end: int | None
) -> None:
    rows, bad = parse_slurm_jobs(path.read_bytes(), Inventory())
    assert bad == 0
    # no inventory: one row per node, naming the host (its NICs come from what the host reports: placements.py)
    assert [(r.job_id, r.host, r.rank, r.netdev) for r in rows] == [(job, host, -1, "")]
    assert rows[0].valid_from == _at(start)
    assert rows[0].valid_to == (_at(end) if end else FAR_FUTURE)


def test_ranks_follow_the_node_list_and_the_nics_of_each_node() -> None:
    doc = json.loads(SCONTROL_23_11.read_text())
    doc["jobs"][0]["nodes"] = "mantis-[041-042]"  # the compressed hostlist of a two-node job
    nics = (HostNic("eth0", "mlx5_0"), HostNic("eth1", "mlx5_1"))
    rows, bad = parse_slurm_jobs(json.dumps(doc), Inventory({"mantis-041": nics, "mantis-042": nics}))
    assert bad == 0
    assert [(r.host, r.rank, r.rdma_dev) for r in rows] == [
        ("mantis-041", 0, "mlx5_0"), ("mantis-041", 1, "mlx5_1"),
        ("mantis-042", 2, "mlx5_0"), ("mantis-042", 3, "mlx5_1"),
    ]  # fmt: skip
    assert {r.job_name for r in rows} == {"V_ALPHA_321860413_0_0"} and {r.namespace for r in rows} == {"vcell"}


def test_a_broken_record_is_counted_and_the_others_placed() -> None:
    doc = json.loads(SQUEUE_23_02.read_text())
    doc["jobs"].append({"job_id": 7, "job_state": "RUNNING", "start_time": 1694675238, "nodes": "cs[1-"})
    doc["jobs"].append("not a job")
    rows, bad = parse_slurm_jobs(json.dumps(doc), Inventory())
    assert bad == 2 and [r.job_id for r in rows] == ["52173767"]
    with pytest.raises(DecodeError, match="no `jobs` array"):
        parse_slurm_jobs(b'{"nodes": []}', Inventory())


def test_the_collector_runs_squeue_and_ships_what_changed(tmp_path: Path) -> None:
    """The real side of the seam: a command whose output is squeue's (here a Python process printing the file)."""
    out = tmp_path / "squeue.json"
    out.write_bytes(SQUEUE_21_08.read_bytes())
    squeue = Command((sys.executable, "-c", f"import sys; sys.stdout.write(open({str(out)!r}).read())"))
    collector = JobsCollector([SlurmJobs(squeue)], Inventory())
    first = collector.poll_once()
    assert [b.data.column("job_id").to_pylist() for b in first] == [["26515966"]]
    assert collector.poll_once() == []  # nothing changed
    out.write_text(json.dumps({"jobs": []}))  # the job ended: its placement is closed
    (closed,) = collector.poll_once()
    assert closed.data.column("valid_to").to_pylist()[0] < FAR_FUTURE
    assert collector.health()["slurm"].up and collector.health()["slurm"].values == 2  # a row per poll
    failing = JobsCollector(
        [SlurmJobs(Command((sys.executable, "-c", "import sys; sys.exit('no slurmctld')")))], Inventory()
    )
    assert failing.poll_once() == [] and "no slurmctld" in str(failing.health()["slurm"].last_error)


def test_import_kind_slurm_lands_the_placements(tmp_path: Path) -> None:
    cfg = tmp_path / "rocescope.yaml"
    cfg.write_text(f"store:\n  path: {tmp_path / 'data'}\n  ttl_days: 0\n")
    files = [str(SQUEUE_23_02), str(SACCT_23_11)]
    result = runner.invoke(app, ["--config", str(cfg), "import", "--kind", "slurm", "--json", *files])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["landed"] == 2 and [f["skipped"] for f in summary["files"]] == [{"malformed": 0}] * 2
    sql = "SELECT job_id, host, valid_to < '2100-01-01' AS ended FROM endpoints ORDER BY job_id"
    result = runner.invoke(app, ["--config", str(cfg), "sql", sql, "-f", "csv"])
    assert result.stdout.split() == [
        '"job_id","host","ended"',
        '"2710593","mantis-041",0',
        '"52173767","cs66",1',
    ]
