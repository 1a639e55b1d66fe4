"""SQL fragments the dashboards share, named once so every panel agrees on what a "job NIC" or an "uplink" is.

Table and column names come from `rocescope.schema` and metric names from `rocescope.catalog`: a renamed
column or metric fails the dashboard build instead of shipping a panel that silently returns nothing.
Queries are written for the official ClickHouse plugin (`grafana-clickhouse-datasource`): time goes
through its macros (`$__timeFilter`, `$__timeInterval`, `$__fromTime`, ...), and template variables
only ever reach SQL through `text_var` / `list_var`, which keep any value a string literal.
"""

from __future__ import annotations

from rocescope import schema
from rocescope.catalog import METRICS_BY_NAME

#: Views created by `rocescope.pipeline.migrations` (not in `schema.TABLES`: they are derived).
PORT_RATES_1M = "port_rates_1m"


def table(name: str) -> str:
    """A table name checked against the schema."""
    return schema.TABLES[name].name


def col(table_name: str, name: str) -> str:
    """A column name checked against the schema."""
    return schema.TABLES[table_name].column(name).name


def metric(name: str) -> str:
    """A canonical metric as a SQL string literal, checked against the catalog."""
    return "'" + METRICS_BY_NAME[name].name + "'"


def metrics(*names: str) -> str:
    """Metrics as a SQL list for `IN (...)`."""
    return ", ".join(metric(n) for n in names)


def port_rates(*metric_names: str) -> str:
    """The rates of `metric_names` over the dashboard's time range, from the parameterized view
    `port_rates_fresh_of`: one source per series (a counter landed by gNMI and SNMP is not summed twice) and values
    re-sent between refreshes are no reads (a 10 s queue counter sampled every second is a steady rate, not nine
    zeros and a spike the `max` panels would show). Naming the metrics reads only theirs from the store (a panel
    over every counter of the window took 1.5-3 s on the demo, 0.3 s over its own)."""
    return f"port_rates_fresh_of(start = $__fromTime_ms, end = $__toTime_ms, metrics = [{metrics(*metric_names)}])"


def text_var(name: str) -> str:
    """A single-valued template variable as a ClickHouse string expression that no value can escape.

    Grafana's `singlequote` and `sqlstring` formats escape quotes but not backslashes, and ClickHouse
    reads a backslash inside a literal as an escape: a value ending in a backslash closes nothing and
    a value `\\' OR 1=1 --` breaks out. `percentencode` leaves only `[A-Za-z0-9._~%-]`, so the
    literal below always stays one literal, and ClickHouse decodes the exact value back.
    """
    return f"decodeURLComponent('${{{name}:percentencode}}')"


def list_var(name: str) -> str:
    """A multi-valued template variable as an Array(String) (`percentencode` gives `{a,b}` for lists)."""
    return f"splitByChar(',', trim(BOTH '{{}}' FROM {text_var(name)}))"


# --- findings

F = table("findings")
#: A finding has no id column: the run, kind and start identify it (stable across reads of one run).
FINDING_ID = f"toString(cityHash64({col(F, 'run_id')}, toString({col(F, 'kind')}), {col(F, 'start')}))"

#: Findings that overlap the dashboard's time range.
FINDINGS_IN_RANGE = f"{col(F, 'start')} <= $__toTime AND {col(F, 'end')} >= $__fromTime"


def annotation_sql(where: str = "1") -> str:
    """Findings as Grafana annotations (time, timeEnd, text, tags), narrowed by `where`."""
    return f"""SELECT {col(F, "start")} AS time, {col(F, "end")} AS timeEnd,
    concat(toString({col(F, "severity")}), ' ', toString({col(F, "kind")}), ': ', {col(F, "summary")}) AS text,
    arrayConcat([toString({col(F, "kind")}), toString({col(F, "severity")})], {col(F, "job_ids")}) AS tags
FROM {F}
WHERE {FINDINGS_IN_RANGE} AND ({where})
ORDER BY time"""


# --- placement: jobs, hosts, NICs, the leaf each NIC is cabled to

E = table("endpoints")
L = table("links")
C1M = table("counters_1m")

#: The selected job's placements that were valid at some point of the time range.
JOB_ENDPOINTS = (
    f"SELECT * FROM {E} WHERE {col(E, 'job_id')} = {text_var('job')} "
    f"AND {col(E, 'valid_from')} <= $__toTime AND {col(E, 'valid_to')} >= $__fromTime"
)


def job_nic_filter(device: str = "device", port: str = "port") -> str:
    """Counter rows of the selected job's NICs: netdev counters (`eth3`) and RDMA ones (`mlx5_3/1`)."""
    return (
        f"(({device}, {port}) IN (SELECT host, netdev FROM ({JOB_ENDPOINTS}))"
        f" OR ({device}, splitByChar('/', {port})[1]) IN (SELECT host, rdma_dev FROM ({JOB_ENDPOINTS})))"
    )


#: The switch ports facing the selected job's NICs (from the adjacency).
JOB_LEAF_PORTS = (
    f"SELECT {col(L, 'peer_device')} AS device, {col(L, 'peer_port')} AS port FROM {L} "
    f"WHERE ({col(L, 'device')}, {col(L, 'port')}) IN (SELECT host, netdev FROM ({JOB_ENDPOINTS}))"
)

#: NCCL collectives (rocescope.collectors.nccl) of the selected job: those of its hosts while it was placed. A host
#: two jobs share gives both its collectives (the analysis tells them apart through `qp_owners`; SQL here does not).
CO = table("collectives")
JOB_COLLECTIVES = (
    f"SELECT * FROM {CO} WHERE $__timeFilter({col(CO, 'ts')}) "
    f"AND {col(CO, 'host')} IN (SELECT {col(E, 'host')} FROM ({JOB_ENDPOINTS}))"
)


def finding_blame(field: str) -> str:
    """A finding's `blame` jobs (`culprit_jobs` | `victim_jobs`, rocescope.analysis.blame) as Array(String)."""
    return f"JSONExtract({col(F, 'evidence')}, 'blame', '{field}', 'Array(String)')"


def finding_impact(job: str, field: str) -> str:
    """A number of a finding's `impact` for `job` (rocescope.analysis.impact): gpu_seconds_lost, exec_inflation."""
    return f"JSONExtractFloat({col(F, 'evidence')}, 'impact', {job}, '{field}')"


#: Hosts: devices that report NIC counters (the 1-minute rollup is small and keeps long history).
HOSTS = f"SELECT DISTINCT {col(C1M, 'device')} FROM {C1M} WHERE {col(C1M, 'role')} = 'nic'"
#: Leaves: switches a host is cabled to.
LEAVES = f"SELECT DISTINCT {col(L, 'peer_device')} FROM {L} WHERE {col(L, 'device')} IN ({HOSTS})"
#: Leaf uplinks: leaf ports whose peer is not a host (a spine).
UPLINKS = (
    f"SELECT {col(L, 'device')}, {col(L, 'port')} FROM {L} "
    f"WHERE {col(L, 'device')} IN ({LEAVES}) AND {col(L, 'peer_device')} NOT IN ({HOSTS})"
)

# --- rates

#: Counter increase of one rate row (rate x its interval): sums of it over a bucket are exact.
DELTA = "rate * dt_s"


def per_second(expr: str = DELTA) -> str:
    """Average per-second value of summed deltas over one `$__timeInterval` bucket."""
    return f"sum({expr}) / $__interval_s"


def rate_series(metric_names: tuple[str, ...], where: str, label: str, scale: str = "") -> str:
    """Per-second rate of `metric_names` over time, one series per `label` expression, from `port_rates_fresh`."""
    return f"""SELECT $__timeInterval(ts) AS time, {label} AS series, {per_second()}{scale} AS value
FROM {port_rates(*metric_names)}
WHERE $__timeFilter(ts) AND {where}
GROUP BY time, series
ORDER BY time"""


def gauge_series(metric_names: tuple[str, ...], where: str, label: str, agg: str = "max") -> str:
    """A gauge over time (`agg` per bucket), one series per `label` expression, from raw `counters`."""
    c = table("counters")
    return f"""SELECT $__timeInterval({col(c, "ts")}) AS time, {label} AS series, {agg}({col(c, "value")}) AS value
FROM {c}
WHERE $__timeFilter({col(c, "ts")}) AND {col(c, "metric")} IN ({metrics(*metric_names)}) AND {where}
GROUP BY time, series
ORDER BY time"""
