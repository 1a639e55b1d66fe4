"""NCCL collective timings with the training job each belongs to: the job's side of "per job".

Inspector names a host and a process, never a job, except under Slurm; the job comes, in this order, from:

0. Inspector's own `slurm_job_id` (its Prometheus label, its OTLP `slurm.job.id`: the process's SLURM_JOB_ID),
   the id Slurm placements (`collectors.jobs.slurm`) are stored under (attribution `slurm`);
1. `qp_owners` (eBPF or `rdma resource show qp`): the process's own queue pairs name its job, or its pod
   (`cgroup` `pod:<uid>`, or a pod name) that `endpoints` places in a job (attribution `qp_owner`);
2. `endpoints` by pod: NCCL in a pod off the host network reports the pod's name as its hostname (and the
   container's pid); a collective whose host is a pod `endpoints` places gets that pod's job, and the node
   the pod ran on as its host (attribution `pod`);
3. `endpoints`: the one job placed on the host when the collective ran (attribution `host`).

When several jobs share the host at that time and no QP owner names the process, the job is left empty
(`ambiguous`), and `none` when no job was placed there. This is analysis, not a view: the time-bounded
placement join and the precedence read better (and are tested) as polars than as SQL.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from rocescope import schema
from rocescope.analysis.frames import Window, check_schema
from rocescope.analysis.names import renamed, same_devices
from rocescope.pipeline.store import Store, query_polars

__all__ = [
    "ATTRIBUTED_SCHEMA",
    "COLLECTIVES_SCHEMA",
    "PLACEMENTS_SCHEMA",
    "PROCESS_OWNERS_SCHEMA",
    "attribute_jobs",
    "job_collectives",
    "read_collectives",
]


def _polars_type(col: schema.Column) -> pl.DataType:
    if col.ch_type.startswith("DateTime64"):
        return pl.Datetime("ns", "UTC")
    if "String" in col.ch_type:
        return pl.String()
    frame = pl.from_arrow(schema.arrow_schema("collectives").empty_table().select([col.name]))
    assert isinstance(frame, pl.DataFrame)
    return frame.schema[col.name]


#: `collectives` as frames carry it (derived from rocescope.schema: strings plain, times UTC nanoseconds)
COLLECTIVES_SCHEMA: dict[str, pl.DataType] = {c.name: _polars_type(c) for c in schema.TABLES["collectives"].columns}
#: ... plus the job and how it was found: slurm | qp_owner | pod | host | ambiguous | none
ATTRIBUTED_SCHEMA: dict[str, pl.DataType] = {**COLLECTIVES_SCHEMA, "job_id": pl.String(), "attribution": pl.String()}
PLACEMENTS_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "pod": pl.String(),
    "host": pl.String(),
    "valid_from": pl.Datetime("ns", "UTC"),
    "valid_to": pl.Datetime("ns", "UTC"),
}
PROCESS_OWNERS_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String(),
    "pid": pl.UInt32(),
    "job_id": pl.String(),
    "pod": pl.String(),
    "seen_at": pl.Datetime("ns", "UTC"),
}


def _typed(frame: pl.DataFrame, expected: dict[str, pl.DataType], what: str) -> pl.DataFrame:
    if frame.width == 0:
        frame = pl.DataFrame(schema=expected)
    casts = [pl.col(c).cast(t) for c, t in expected.items() if c in frame.columns and frame.schema[c] != t]
    return check_schema(frame.with_columns(casts) if casts else frame, expected, what)


#: what makes a collective record one: the same operation of the same rank of the same process, completed at the
#: same time (a file imported twice, or two collectors tailing one shared dump directory, store it twice)
RECORD_KEY = ("host", "pid", "communicator", "rank", "collective", "sequence", "ts")


def read_collectives(store: Store, window: Window, hosts: Sequence[str] | None = None) -> pl.DataFrame:
    """The collectives that ended in the window (of `hosts` only, when given), each record once whatever how many
    times it was stored (`RECORD_KEY`), COLLECTIVES_SCHEMA."""
    where = " AND host IN {hosts:Array(String)}" if hosts is not None else ""
    params: dict[str, object] = {"start": window.start, "end": window.end}
    if hosts is not None:
        params["hosts"] = list(hosts)
    # Sorted by every column of the record's key, a record stored twice is two adjacent rows, dropped here by one
    # comparison with the row before: ClickHouse's `LIMIT 1 BY` over the key hashed every row (an hour of 128x8 is
    # 6.6 M records: 2.5 s of an 8 s read). Its strings come as dictionaries (they are LowCardinality: a few hosts and
    # communicators over millions of rows), which is half the transfer.
    sql = f"""
SELECT * FROM collectives
WHERE ts >= {{start:DateTime64(9, 'UTC')}} AND ts < {{end:DateTime64(9, 'UTC')}}{where}
ORDER BY host, communicator, rank, ts, pid, collective, sequence
SETTINGS output_format_arrow_low_cardinality_as_dictionary = 1"""  # noqa: S608 - placeholders only
    rows = query_polars(store, sql, params)
    if rows.height:
        again = pl.all_horizontal(pl.col(k) == pl.col(k).shift(1) for k in RECORD_KEY).fill_null(False)
        rows = rows.filter(~again)
    return _typed(rows.with_columns(pl.col(pl.Categorical).cast(pl.String)), COLLECTIVES_SCHEMA, "collectives")


def _placements(store: Store, window: Window) -> pl.DataFrame:
    sql = """
SELECT DISTINCT toString(job_id) AS job_id, pod, toString(host) AS host, valid_from, valid_to
FROM endpoints
WHERE valid_from < {end:DateTime64(9, 'UTC')} AND valid_to > {start:DateTime64(9, 'UTC')}"""
    frame = query_polars(store, sql, {"start": window.start, "end": window.end})
    return _typed(frame, PLACEMENTS_SCHEMA, "endpoints")


def _process_owners(store: Store, window: Window) -> pl.DataFrame:
    sql = """
SELECT toString(host) AS host, pid, toString(job_id) AS job_id,
    if(startsWith(cgroup, 'pod:'), substring(cgroup, 5), cgroup) AS pod, max(seen_at) AS last_seen
FROM qp_owners
WHERE seen_at < {end:DateTime64(9, 'UTC')} AND pid > 0
GROUP BY host, pid, job_id, pod"""
    frame = query_polars(store, sql, {"end": window.end}).rename({"last_seen": "seen_at"}, strict=False)
    return _typed(frame, PROCESS_OWNERS_SCHEMA, "qp_owners")


#: the Slurm job Inspector labelled the record with (None where it did not)
_SLURM_JOB = pl.when(pl.col("slurm_job_id") != "").then(pl.col("slurm_job_id"))


def attribute_jobs(collectives: pl.DataFrame, placements: pl.DataFrame, owners: pl.DataFrame) -> pl.DataFrame:
    """Each collective with its `job_id` and `attribution` (see the module docstring), ATTRIBUTED_SCHEMA.

    `placements` are `endpoints` rows (PLACEMENTS_SCHEMA), `owners` the processes `qp_owners` saw
    (PROCESS_OWNERS_SCHEMA); either may be empty."""
    frame = check_schema(collectives, COLLECTIVES_SCHEMA, "collectives").with_row_index("_row")
    placements = check_schema(placements, PLACEMENTS_SCHEMA, "placements")
    owners = check_schema(owners, PROCESS_OWNERS_SCHEMA, "process owners")
    pod_jobs = placements.filter(pl.col("pod") != "").select("pod", pod_job="job_id").unique("pod", keep="first")
    by_process = (
        owners.join(pod_jobs, on="pod", how="left")
        .with_columns(owner_job=pl.when(pl.col("job_id") != "").then("job_id").otherwise("pod_job"))
        .filter(pl.col("owner_job").is_not_null() & (pl.col("owner_job") != ""))
        .sort("seen_at")
        .unique(["host", "pid"], keep="last")  # the newest: a pid reused by a later job names that job
        .select("host", "pid", "owner_job")
    )
    # NCCL in a pod off the host network: its hostname is the pod's name (and its pid the container's, which
    # names no host process: the QP owners, keyed by the node's pids, are joined before the host is the node)
    in_pod = (
        frame.select("_row", pl.col("host").alias("pod"), "ts")
        .join(
            placements.filter(pl.col("pod") != "").select("job_id", "pod", "host", "valid_from", "valid_to"), on="pod"
        )
        .filter((pl.col("valid_from") <= pl.col("ts")) & (pl.col("ts") < pl.col("valid_to")))
        .group_by("_row")
        .agg(in_pod_job=pl.col("job_id").first(), node=pl.col("host").first())
    )
    frame = (
        frame.join(by_process, on=["host", "pid"], how="left")
        .join(in_pod, on="_row", how="left")
        .with_columns(pl.coalesce("node", "host").alias("host"))
        .drop("node")
    )
    on_host = (
        frame.select("_row", "host", "ts")
        .join(placements.select("job_id", "host", "valid_from", "valid_to").unique(), on="host")
        .filter((pl.col("valid_from") <= pl.col("ts")) & (pl.col("ts") < pl.col("valid_to")))
        .group_by("_row")
        .agg(host_jobs=pl.col("job_id").n_unique(), host_job=pl.col("job_id").first())
    )
    out = (
        frame.join(on_host, on="_row", how="left")
        .with_columns(
            job_id=pl.coalesce(
                _SLURM_JOB,
                "owner_job",
                "in_pod_job",
                pl.when(pl.col("host_jobs") == 1).then("host_job"),
                pl.lit(""),
            ),
            attribution=pl.when(_SLURM_JOB.is_not_null())
            .then(pl.lit("slurm"))
            .when(pl.col("owner_job").is_not_null())
            .then(pl.lit("qp_owner"))
            .when(pl.col("in_pod_job").is_not_null())
            .then(pl.lit("pod"))
            .when(pl.col("host_jobs") == 1)
            .then(pl.lit("host"))
            .when(pl.col("host_jobs") > 1)
            .then(pl.lit("ambiguous"))
            .otherwise(pl.lit("none")),
        )
        .sort("_row")
    )
    return check_schema(out, ATTRIBUTED_SCHEMA, "attributed collectives")


def job_collectives(store: Store, window: Window, hosts: Sequence[str] | None = None) -> pl.DataFrame:
    """The window's collectives, each with its job (ATTRIBUTED_SCHEMA): what impact and blame start from."""
    collectives = read_collectives(store, window, hosts)
    placements, owners = _placements(store, window), _process_owners(store, window)
    # NCCL's hostname and the Kubernetes node name may be one host's short name and FQDN
    known = collectives["host"].unique().to_list()
    placements = renamed(placements, ("host",), same_devices(known, placements["host"].unique().to_list()))
    owners = renamed(owners, ("host",), same_devices(known, owners["host"].unique().to_list()))
    return attribute_jobs(collectives, placements, owners)
