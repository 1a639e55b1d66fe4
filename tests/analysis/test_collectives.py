"""Collectives attributed to jobs through `qp_owners` (pid -> job or pod) and `endpoints` (host, pod), in a real
store: the process's own QPs win, one job on the host is the job, several with no QP owner are ambiguous."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from rocescope.analysis.collectives import ATTRIBUTED_SCHEMA, attribute_jobs, job_collectives
from rocescope.analysis.frames import Window
from rocescope.collectors.nccl.parse import collectives_table
from rocescope.pipeline.batch import conform, make_batch
from rocescope.pipeline.store import ChdbStore

FAR = dt.datetime(2262, 1, 1, tzinfo=dt.UTC)


def placements(t0: dt.datetime) -> dict[str, list[object]]:
    """team-a on h1 and h2, team-b on h2 (sharing it) and h3, team-c on h4 from 30 minutes in."""
    rows = [
        ("ns/a", "a-0", "h1", t0),
        ("ns/a", "a-1", "h2", t0),
        ("ns/b", "b-0", "h2", t0),
        ("ns/b", "b-1", "h3", t0),
        ("ns/c", "c-0", "h4", t0 + dt.timedelta(minutes=30)),
    ]
    cols: dict[str, list[object]] = {
        k: []
        for k in (
            "job_id",
            "job_name",
            "namespace",
            "pod",
            "rank",
            "host",
            "netdev",
            "rdma_dev",
            "ip",
            "gid",
            "valid_from",
            "valid_to",
        )
    }
    for job, pod, host, start in rows:
        for nic in range(2):  # a row per rank and NIC: the join must not count a job twice
            for k, v in zip(
                cols, (job, job[3:], "ns", pod, nic, host, f"eth{nic}", f"mlx5_{nic}", "", "", start, FAR), strict=True
            ):
                cols[k].append(v)
    return cols


def owners(t0: dt.datetime) -> dict[str, list[object]]:
    """On the shared host: pid 100 named by its job, pid 200 by its pod (b-0) only."""
    return {
        "host": ["h2", "h2"],
        "rdma_dev": ["mlx5_0", "mlx5_1"],
        "qpn": [1, 2],
        "dest_qpn": [9, 9],
        "dest_ip": ["10.0.0.9"] * 2,
        "pid": [100, 200],
        "comm": ["python"] * 2,
        "cgroup": ["pod:a-1", "pod:b-0"],
        "job_id": ["ns/a", ""],
        "seen_at": [t0, t0],
        "dest_gid": ["", ""],
        "udp_sport": [0, 0],
    }


#: (host, pid, minutes in) -> (job, attribution)
CASES = {
    ("h1", 10, 5): ("ns/a", "host"),
    ("h2", 100, 5): ("ns/a", "qp_owner"),
    ("h2", 200, 5): ("ns/b", "qp_owner"),
    ("h2", 300, 5): ("", "ambiguous"),
    ("h3", 5, 5): ("ns/b", "host"),
    ("h5", 5, 5): ("", "none"),
    ("h4", 5, 5): ("", "none"),
    ("h4", 5, 40): ("ns/c", "host"),
}


@pytest.fixture
def t0() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(hours=2)


def collectives(t0: dt.datetime) -> pa.Table:
    n = len(CASES)
    ts = [int((t0 + dt.timedelta(minutes=m)).timestamp() * 1e9) for _, _, m in CASES]
    cols = {
        "ts": ts,
        "host": [h for h, _, _ in CASES],
        "pid": pa.array([p for _, p, _ in CASES], pa.uint32()),
        "collective": ["AllReduce"] * n,
        "ranks": pa.array([16] * n, pa.int32()),
        "rank": pa.array(range(n), pa.int32()),
        "exec_time_us": [100.0] * n,
        "source": ["inspector_json"] * n,
        "communicator": ["0x1"] * n,
    }
    return pa.Table.from_batches([conform("collectives", collectives_table(cols, n))])


def test_each_collective_gets_its_job(store: ChdbStore, t0: dt.datetime) -> None:
    store.insert("endpoints", pa.Table.from_batches([make_batch("endpoints", placements(t0)).data]))
    store.insert("qp_owners", pa.Table.from_batches([make_batch("qp_owners", owners(t0)).data]))
    store.insert("collectives", collectives(t0))
    got = job_collectives(store, Window(t0, t0 + dt.timedelta(hours=1)))
    assert got.schema == ATTRIBUTED_SCHEMA
    minutes = [int((t - t0).total_seconds() // 60) for t in got["ts"].to_list()]
    found = {
        (h, p, m): (j, a)
        for h, p, m, j, a in zip(got["host"], got["pid"], minutes, got["job_id"], got["attribution"], strict=True)
    }
    assert found == CASES
    only = job_collectives(store, Window(t0, t0 + dt.timedelta(hours=1)), hosts=["h1"])
    assert only["job_id"].to_list() == ["ns/a"]


def test_without_placements_nothing_is_attributed(store: ChdbStore, t0: dt.datetime) -> None:
    store.insert("collectives", collectives(t0))
    got = job_collectives(store, Window(t0, t0 + dt.timedelta(hours=1)))
    assert got.height == len(CASES)
    assert set(got["attribution"]) == {"none"} and set(got["job_id"]) == {""}


def test_a_reused_pid_names_the_newest_job(t0: dt.datetime) -> None:
    """The same pid on a host seen in two jobs' QPs: the newer sighting wins."""
    import polars as pl

    from rocescope.analysis.collectives import COLLECTIVES_SCHEMA, PLACEMENTS_SCHEMA, PROCESS_OWNERS_SCHEMA

    coll = pl.from_arrow(collectives(t0)).cast(COLLECTIVES_SCHEMA).filter(pl.col("host") == "h1")  # type: ignore[union-attr]
    seen = [t0, t0 + dt.timedelta(minutes=1)]
    own = pl.DataFrame(
        {"host": ["h1", "h1"], "pid": [10, 10], "job_id": ["old/job", "new/job"], "pod": ["", ""], "seen_at": seen},
        schema=PROCESS_OWNERS_SCHEMA,
    )
    got = attribute_jobs(coll, pl.DataFrame(schema=PLACEMENTS_SCHEMA), own)
    assert got["job_id"].to_list() == ["new/job"] and got["attribution"].to_list() == ["qp_owner"]


def test_nccl_in_a_pod_off_the_host_network_is_joined_by_its_pod(store: ChdbStore, t0: dt.datetime) -> None:
    """NCCL in a pod that is not on the host network reports the pod's name as its hostname and the container's
    pid: pod a-1 (team-a, on h2) with pid 200, which on h2 is a process of b-0's. The pod names the job and the
    node; the container pid names no host process."""
    import polars as pl

    store.insert("endpoints", pa.Table.from_batches([make_batch("endpoints", placements(t0)).data]))
    store.insert("qp_owners", pa.Table.from_batches([make_batch("qp_owners", owners(t0)).data]))
    one = collectives(t0).slice(0, 1)
    pod = one.set_column(one.schema.get_field_index("host"), "host", pa.array(["a-1"]))
    pod = pod.set_column(pod.schema.get_field_index("pid"), "pid", pa.array([200], pa.uint32()))
    store.insert("collectives", pod)
    got = job_collectives(store, Window(t0, t0 + dt.timedelta(hours=1)))
    assert got.select("host", "pid", "job_id", "attribution").rows() == [("h2", 200, "ns/a", "pod")]
    assert got.schema == ATTRIBUTED_SCHEMA and isinstance(got, pl.DataFrame)


def test_a_collective_stored_twice_is_read_once(store: ChdbStore, t0: dt.datetime) -> None:
    """The same Inspector file imported twice, or two collectors tailing one shared dump directory: every record
    lands twice, and is read once."""
    store.insert("endpoints", pa.Table.from_batches([make_batch("endpoints", placements(t0)).data]))
    for _ in range(2):
        store.insert("collectives", collectives(t0))
    got = job_collectives(store, Window(t0, t0 + dt.timedelta(hours=1)))
    assert got.height == len(CASES)


def test_inspectors_slurm_label_names_the_job_where_the_host_cannot(store: ChdbStore, t0: dt.datetime) -> None:
    """Inspector under Slurm labels its records with the process's SLURM_JOB_ID (Prometheus `slurm_job_id`, OTLP
    `slurm.job.id`), the id Slurm placements are stored under: on h2, shared by three jobs, a labelled record of
    pid 300 is its job's; an unlabelled one stays ambiguous."""
    placed = placements(t0)
    for column, value in zip(
        placed, ("1670760", "train", "gpu", "1670760-0", 0, "h2", "eth0", "mlx5_0", "", "", t0, FAR), strict=True
    ):
        placed[column].append(value)
    store.insert("endpoints", pa.Table.from_batches([make_batch("endpoints", placed).data]))
    shared = collectives(t0).slice(3, 1)  # (h2, pid 300, 5 minutes in)
    labelled = shared.set_column(
        shared.schema.get_field_index("slurm_job_id"), "slurm_job_id", pa.array(["1670760"], pa.string())
    )
    labelled = labelled.set_column(labelled.schema.get_field_index("rank"), "rank", pa.array([9], pa.int32()))
    store.insert("collectives", pa.concat_tables([shared, labelled.cast(shared.schema)]))
    got = job_collectives(store, Window(t0, t0 + dt.timedelta(hours=1)))
    assert sorted(got.select("slurm_job_id", "job_id", "attribution").rows()) == [
        ("", "", "ambiguous"),
        ("1670760", "1670760", "slurm"),
    ]
