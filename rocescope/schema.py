"""THE list of tables and columns. DDL, Arrow schemas, polars schemas and topic names derive from here.

Change a column here and everything else follows: the ClickHouse DDL (`ddl`), the Arrow schema a
Batch must match (`arrow_schema`), the migrations (missing columns are added), the Kafka topic
(`topic`). The metric catalog lives in `rocescope.catalog` and is re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Literal, cast

from rocescope.catalog import METRICS, METRICS_BY_NAME, Metric, counter_metrics, resolve

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "METRICS",
    "METRICS_BY_NAME",
    "SCHEMA_VERSION",
    "STREAMS",
    "TABLES",
    "Column",
    "Metric",
    "Table",
    "arrow_schema",
    "arrow_type",
    "counter_metrics",
    "ddl",
    "resolve",
    "topic",
]

#: Bumped when a column changes incompatibly; carried in topic names and message headers.
SCHEMA_VERSION = 1

#: A column's Arrow type, by name: pyarrow's own type names (`pa.type_for_alias`), and four of ours. Names,
#: not types, so that importing the schema (`rocescope --help` lists the streams) does not load pyarrow.
ArrowType = Literal[
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float64", "string",
    "timestamp_ns", "timestamp_ms", "low_cardinality", "string_list",
]  # fmt: skip

_TS: ArrowType = "timestamp_ns"  # UTC
_LC: ArrowType = "low_cardinality"  # dictionary-encoded string
_STR_LIST: ArrowType = "string_list"  # list of non-null strings


@cache
def arrow_type(name: ArrowType) -> pa.DataType:
    """The Arrow type of a column's type name."""
    import pyarrow as pa

    ours = {
        "timestamp_ns": lambda: pa.timestamp("ns", tz="UTC"),
        "timestamp_ms": lambda: pa.timestamp("ms", tz="UTC"),
        "low_cardinality": lambda: pa.dictionary(pa.int32(), pa.string()),
        "string_list": lambda: pa.list_(pa.field("item", pa.string(), nullable=False)),
    }
    return ours[name]() if name in ours else pa.type_for_alias(name)


@dataclass(frozen=True)
class Column:
    """One column: its ClickHouse type and codec, its Arrow type and what it means."""

    name: str
    ch_type: str
    arrow: ArrowType
    description: str
    codec: str = ""
    default: str = ""
    #: The value that means "not given": a file imported without this column (or with nulls in it) gets it.
    #: None: the column must be given.
    unknown: int | float | str | None = None

    @property
    def arrow_type(self) -> pa.DataType:
        return arrow_type(self.arrow)


@dataclass(frozen=True)
class Table:
    """A MergeTree table. `stream` tables travel through the transport as Batches."""

    name: str
    description: str
    columns: tuple[Column, ...]
    order_by: tuple[str, ...]
    partition_by: str = ""
    ttl_column: str = ""
    #: a retention of the table's own (e.g. "6 HOUR"), instead of the configured days
    fixed_ttl: str = ""
    engine: str = "MergeTree"
    stream: bool = True
    settings: Mapping[str, str | int] = field(default_factory=dict)

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def column(self, name: str) -> Column:
        for col in self.columns:
            if col.name == name:
                return col
        raise KeyError(name)


#: The "not given" of an observation time: when the file is imported (`--at`, else now).
IMPORT_TIME = "import time"


def _ts(name: str, description: str, unknown: str | None = None) -> Column:
    return Column(name, "DateTime64(9, 'UTC')", _TS, description, "CODEC(DoubleDelta, ZSTD(1))", unknown=unknown)


def _lc(name: str, description: str, unknown: str | None = None) -> Column:
    return Column(name, "LowCardinality(String)", _LC, description, unknown=unknown)


def _str(name: str, description: str, codec: str = "CODEC(ZSTD(1))", unknown: str | None = None) -> Column:
    return Column(name, "String", "string", description, codec, unknown=unknown)


def _int(name: str, ch_type: str, description: str, unknown: int) -> Column:
    return Column(name, ch_type, cast(ArrowType, ch_type.lower()), description, unknown=unknown)


# Retried inserts carrying the same insert_deduplication_token land once (see pipeline.sink).
_DEDUP = {"non_replicated_deduplication_window": 10000}

#: One time series of `counters`. The table's sort key leads with it, metric first: a query naming its
#: metrics reads only their granules (the detectors and every panel name theirs), and per-series window
#: functions partitioned in this order read the table in key order.
COUNTER_SERIES = ("metric", "device", "port", "priority")
#: What a counters row's device is.
ROLES = ("switch", "nic", "host")

COUNTERS = Table(
    "counters",
    "One row per sampled value (Prometheus-style): switch, NIC and host counters and gauges.",
    (
        _ts("ts", "When the device sampled the value (device time where it gives one)."),
        _lc("device", "Switch or host name."),
        _lc("role", " | ".join(ROLES) + "."),
        _lc("port", "Interface name, or rdma_dev/port for RDMA counters."),
        _int("priority", "Int8", "802.1p priority / traffic class; -1 when none.", -1),
        _lc("metric", "Canonical metric name from the catalog (rocescope.catalog)."),
        Column("value", "Float64", "float64", "The value; counters are cumulative.", "CODEC(Gorilla, ZSTD(1))"),
        _lc("source", "gnmi | snmp | ethtool | rdma | ebpf | import | sim.", "import"),
        _lc("raw_name", "The vendor's own counter name or path.", ""),
    ),
    order_by=(*COUNTER_SERIES, "ts"),
    partition_by="toDate(ts)",
    ttl_column="ts",
    settings=_DEDUP,
)

PACKETS = Table(
    "packets",
    "Sampled RoCEv2 packets (data, ACK, CNP), one row each.",
    (
        _ts("ts", "Capture time."),
        _lc("capture_point", "Where the packet was sampled (host/netdev or switch mirror)."),
        _lc("src_ip", "Source IP address."),
        _lc("dst_ip", "Destination IP address."),
        Column("udp_sport", "UInt16", "uint16", "UDP source port: the ECMP entropy of the flow."),
        Column("dscp", "UInt8", "uint8", "DSCP."),
        Column("ecn", "UInt8", "uint8", "ECN bits: 0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE."),
        Column("opcode", "UInt8", "uint8", "BTH opcode (0x81 = CNP)."),
        Column("dest_qp", "UInt32", "uint32", "BTH destination QP."),
        Column("psn", "UInt32", "uint32", "BTH packet sequence number.", "CODEC(Delta, ZSTD(1))"),
        Column("pkey", "UInt16", "uint16", "BTH partition key."),
        Column("becn", "UInt8", "uint8", "BECN bit (set in CNPs)."),
        Column("length", "UInt32", "uint32", "Frame length in bytes."),
        Column("sampling_rate", "UInt32", "uint32", "1 in N packets was sampled."),
    ),
    order_by=("capture_point", "dst_ip", "ts"),
    partition_by="toDate(ts)",
    ttl_column="ts",
    settings=_DEDUP,
)

LINKS = Table(
    "links",
    "Adjacency from LLDP (or configuration): which port faces which.",
    (
        _lc("device", "Local device."),
        _lc("port", "Local port."),
        _lc("peer_device", "Neighbor device (LLDP system name)."),
        _lc("peer_port", "Neighbor port (LLDP port id)."),
        _lc(
            "source",
            "lldp | gnmi | config | sim: an adjacency; alias | rdma | chassis: another name of a port (a SONiC "
            "alias, a NIC's RDMA port, a multi-ASIC switch's front-panel port and the ASIC that owns it).",
            "config",
        ),
        _ts("seen_at", "When the adjacency was observed.", IMPORT_TIME),
    ),
    order_by=("device", "port", "seen_at"),
    engine="ReplacingMergeTree(seen_at)",
    settings=_DEDUP,
)

ENDPOINTS = Table(
    "endpoints",
    "Job attribution: which job's rank runs on which host, NIC, RDMA device and address.",
    (
        _lc("job_id", "Training job id (e.g. namespace/name)."),
        _lc("job_name", "Job name (PyTorchJob name)."),
        _lc("namespace", "Kubernetes namespace."),
        _str("pod", "Pod name."),
        _int("rank", "Int32", "Rank in the job; -1 when unknown.", -1),
        _lc("host", "Host name."),
        _lc("netdev", "Network device (eth3).", ""),
        _lc("rdma_dev", "RDMA device (mlx5_3).", ""),
        _lc("ip", "Address of the netdev.", ""),
        _str("gid", "RoCE GID.", unknown=""),
        _ts("valid_from", "Start of this placement."),
        _ts("valid_to", "End of this placement (far future while running)."),
    ),
    order_by=("job_id", "host", "rdma_dev", "valid_from"),
    settings=_DEDUP,
)

QP_OWNERS = Table(
    "qp_owners",
    "Which process, pod and job owns a queue pair (eBPF or `rdma resource show qp`).",
    (
        _lc("host", "Host name."),
        _lc("rdma_dev", "RDMA device."),
        Column("qpn", "UInt32", "uint32", "Local QP number."),
        Column("dest_qpn", "UInt32", "uint32", "Remote QP number."),
        _lc("dest_ip", "Remote address."),
        Column("pid", "UInt32", "uint32", "Owning process."),
        _lc("comm", "Process name."),
        _str("cgroup", "cgroup path or pod."),
        _lc("job_id", "Training job id; empty if unknown.", ""),
        _ts("seen_at", "When the ownership was observed.", IMPORT_TIME),
        _str("dest_gid", "Remote GID as sysfs `gids/N` prints it; empty if unknown.", unknown=""),
        _int("udp_sport", "UInt16", "RoCEv2 UDP source port of the QP (ECMP entropy); 0 if unknown.", 0),
    ),
    order_by=("host", "rdma_dev", "qpn", "seen_at"),
    settings=_DEDUP,
)

#: A collective that NCCL Inspector did not trace (no `event_trace_ts`) has 0 (1970-01-01) as start and stop.
COLLECTIVES = Table(
    "collectives",
    "NCCL collective (and P2P) timings per rank from NCCL Inspector (JSON or Prometheus textfile), or the "
    "simulator: the job's side of `per job`. Rows of source inspector_prom_agg or inspector_otlp_agg are one "
    "Inspector interval's means per message-size bucket, not single collectives (rank and sequence -1).",
    (
        _ts("ts", "When the collective ended (last kernel stop where traced), else when Inspector dumped it."),
        _lc("host", "Host the rank runs on (Inspector's hostname / node)."),
        _int("pid", "UInt32", "Process of the rank; 0 when not given (Prometheus mode).", 0),
        _int("gpu", "Int16", "CUDA device id (`GPU<n>`); -1 when not given (JSON mode).", -1),
        _lc("communicator", "NCCL communicator hash (`0x7f8c496ae9f661`); empty when not given.", ""),
        _lc("comm_name", "Communicator name given by the application; empty when not given.", ""),
        _int("rank", "Int32", "Rank in the communicator; -1 when not given.", -1),
        Column("ranks", "Int32", "int32", "Ranks in the communicator."),
        _int("nodes", "Int32", "Nodes the communicator spans; -1 when not given.", -1),
        _lc("collective", "AllReduce | AllGather | ReduceScatter | Broadcast | Reduce | ... | Send | Recv."),
        _int("peer", "Int32", "Peer rank of a P2P operation; -1 for collectives.", -1),
        _int("sequence", "Int64", "Inspector's sequence number in the communicator; -1 when none.", -1),
        Column("bytes", "UInt64", "uint64", "Message size in bytes (Prometheus: as its label rounds it)."),
        Column("exec_time_us", "Float64", "float64", "Execution time in microseconds.", "CODEC(Gorilla, ZSTD(1))"),
        Column("algo_bw_gbs", "Float64", "float64", "Algorithm bandwidth in GB/s (NaN when not given)."),
        Column("bus_bw_gbs", "Float64", "float64", "Bus bandwidth in GB/s (NaN when not given)."),
        _lc(
            "timing_source", "kernel_gpu | kernel_cpu | collective_cpu: how Inspector timed it; empty if not given.", ""
        ),
        _lc("algorithm", "Algorithm and protocol (`Ring_ll`) where Inspector names them; else empty.", ""),
        _ts("start_ts", "When the rank issued the collective (event_trace_ts coll_start_ts); 0 when not traced."),
        _ts("stop_ts", "When its last kernel stopped (event_trace_ts); 0 when not traced."),
        _lc("slurm_job_id", "Slurm job id Inspector labels Prometheus rows with; empty when none.", ""),
        _lc(
            "source",
            "inspector_json | inspector_prom | inspector_prom_agg | inspector_otlp | inspector_otlp_agg | sim.",
        ),
    ),
    order_by=("host", "communicator", "collective", "rank", "ts"),
    partition_by="toDate(ts)",
    ttl_column="ts",
    settings=_DEDUP,
)

FINDINGS = Table(
    "findings",
    "What the detectors found: one row per finding, attributed to jobs.",
    (
        _str("run_id", "Analysis run that produced the finding."),
        _lc("detector", "Detector name."),
        _lc("detector_version", "Detector version."),
        _lc(
            "kind",
            "microburst | polarization | ecmp_imbalance | incast | pfc_storm | pfc_deadlock | cnp_loss | "
            "unexplained_slowdown | ...",
        ),
        _lc("severity", "info | warning | critical."),
        _ts("start", "Start of the problem."),
        _ts("end", "End of the problem (or the end of the analysed window)."),
        Column("job_ids", "Array(String)", _STR_LIST, "Jobs affected."),
        Column("devices", "Array(String)", _STR_LIST, "Devices concerned."),
        Column("ports", "Array(String)", _STR_LIST, "Ports concerned (device:port)."),
        Column("priority", "Int8", "int8", "Priority concerned; -1 when none."),
        Column("score", "Float64", "float64", "Detector-specific strength; higher is worse."),
        _str("summary", "One line for humans."),
        _str(
            "evidence",
            "JSON with the numbers that support the finding; `impact` {job: GPU-seconds lost, inflation, ...} and "
            "`blame` {culprit_jobs, victim_jobs} where collectives were recorded (rocescope.analysis.impact, blame).",
        ),
    ),
    order_by=("kind", "start"),
    partition_by="toYYYYMM(start)",
    ttl_column="start",
    settings=_DEDUP,
)

INCIDENTS = Table(
    "incidents",
    "Ground truth of incidents injected by the simulator (or recorded by operators), to score detectors.",
    (
        _str("scenario", "Scenario (or source) the incident belongs to."),
        _lc("kind", "microburst | polarization | incast | pfc_storm | pfc_deadlock | cnp_loss | link_flap | ..."),
        _ts("start", "When the incident began."),
        _ts("end", "When it ended (the end of the run if it never cleared)."),
        Column("job_ids", "Array(String)", _STR_LIST, "Jobs it hurts."),
        Column("devices", "Array(String)", _STR_LIST, "Devices involved (root first where there is one)."),
        Column("ports", "Array(String)", _STR_LIST, "Ports involved (device:port)."),
        Column("priority", "Int8", "int8", "Priority concerned; -1 when none."),
        _str("description", "What was injected, for humans."),
    ),
    order_by=("scenario", "start"),
    settings=_DEDUP,
)

# --- tables the store keeps for itself (not streams): the catalog, rollups, migration history

METRIC_CATALOG = Table(
    "metric_catalog",
    "The canonical metrics (rocescope.catalog), so SQL users can look names and units up.",
    (
        _lc("metric", "Canonical metric name."),
        _lc("unit", "Unit of the value."),
        _lc("kind", "counter (cumulative) | gauge."),
        Column("per_priority", "UInt8", "uint8", "1 when the metric is kept per priority."),
        _str("description", "What the metric measures."),
        Column("vendor_names", "Array(String)", _STR_LIST, "vendor:raw_name pairs that map to it."),
    ),
    order_by=("metric",),
    stream=False,
)

COUNTERS_1M = Table(
    "counters_1m",
    "1-minute rollup of counters (fed by a materialized view) for long retention. Only simple "
    "aggregates: the view runs on every insert, and argMin/argMax states cost the sink half its speed.",
    (
        Column(
            "minute",
            "DateTime64(3, 'UTC')",
            "timestamp_ms",
            "Start of the minute.",
            "CODEC(DoubleDelta, ZSTD(1))",
        ),
        _lc("device", "Switch or host name."),
        _lc("role", "switch | nic | host."),
        _lc("port", "Interface or rdma_dev/port."),
        Column("priority", "Int8", "int8", "Priority; -1 when none."),
        _lc("metric", "Canonical metric name."),
        Column("samples", "SimpleAggregateFunction(sum, UInt64)", "uint64", "Samples in the minute."),
        Column("min_value", "SimpleAggregateFunction(min, Float64)", "float64", "Smallest value."),
        Column(
            "max_value",
            "SimpleAggregateFunction(max, Float64)",
            "float64",
            "Largest value; for a counter, its value at the end of the minute unless it reset in it.",
        ),
        Column(
            "sum_value",
            "SimpleAggregateFunction(sum, Float64)",
            "float64",
            "Sum (gauges: avg = sum/samples).",
        ),
    ),
    order_by=("device", "role", "port", "metric", "priority", "minute"),
    partition_by="toYYYYMM(minute)",
    ttl_column="minute",
    engine="AggregatingMergeTree",
    stream=False,
    settings=_DEDUP,
)

COLLECTIVES_1M = Table(
    "collectives_1m",
    "1-minute rollup of collectives per rank (fed by a materialized view) for long retention: mean and "
    "peak execution time and mean bus bandwidth per communicator, collective and rank.",
    (
        Column(
            "minute",
            "DateTime64(3, 'UTC')",
            "timestamp_ms",
            "Start of the minute.",
            "CODEC(DoubleDelta, ZSTD(1))",
        ),
        _lc("host", "Host the rank runs on."),
        _lc("communicator", "NCCL communicator hash."),
        _lc("comm_name", "Communicator name."),
        _lc("collective", "Collective (or P2P operation)."),
        Column("rank", "Int32", "int32", "Rank in the communicator; -1 when not given."),
        _lc(
            "source",
            "inspector_json | inspector_prom | inspector_prom_agg | inspector_otlp | inspector_otlp_agg | sim.",
        ),
        Column("ranks", "SimpleAggregateFunction(max, Int32)", "int32", "Ranks in the communicator."),
        Column("samples", "SimpleAggregateFunction(sum, UInt64)", "uint64", "Rows in the minute."),
        Column("bytes_sum", "SimpleAggregateFunction(sum, UInt64)", "uint64", "Bytes of the minute's rows."),
        Column(
            "exec_time_us_sum",
            "SimpleAggregateFunction(sum, Float64)",
            "float64",
            "Sum of execution times (mean = exec_time_us_sum / samples).",
        ),
        Column("exec_time_us_min", "SimpleAggregateFunction(min, Float64)", "float64", "Shortest execution."),
        Column("exec_time_us_max", "SimpleAggregateFunction(max, Float64)", "float64", "Longest execution."),
        Column(
            "bus_bw_samples",
            "SimpleAggregateFunction(sum, UInt64)",
            "uint64",
            "Rows that gave a bus bandwidth.",
        ),
        Column(
            "bus_bw_gbs_sum",
            "SimpleAggregateFunction(sum, Float64)",
            "float64",
            "Sum of bus bandwidths in GB/s (mean = bus_bw_gbs_sum / bus_bw_samples).",
        ),
    ),
    order_by=("host", "communicator", "comm_name", "collective", "rank", "source", "minute"),
    partition_by="toYYYYMM(minute)",
    ttl_column="minute",
    engine="AggregatingMergeTree",
    stream=False,
    settings=_DEDUP,
)

#: Whose state a sink row is: the consumer group's, for one partition of one topic
_SINK_PARTITION = (
    _lc("group_id", "Consumer group of the sink."),
    _lc("topic", "Kafka topic."),
    Column("partition", "Int32", "int32", "Kafka partition."),
)

SINK_INTENTS = Table(
    "sink_intents",
    "The offset range each sink is about to insert, written before the insert (see pipeline.sink).",
    (
        *_SINK_PARTITION,
        Column("first_offset", "Int64", "int64", "First offset of the range."),
        Column("last_offset", "Int64", "int64", "Last offset of the range (inclusive)."),
        _str("token", "insert_deduplication_token used for the range."),
        _ts("written_at", "When the intent was written."),
    ),
    order_by=("group_id", "topic", "partition"),
    engine="ReplacingMergeTree(written_at)",
    stream=False,
)

SINK_MESSAGES = Table(
    "sink_messages",
    "The producer-given id of each message a sink took, by offset, written with its intent: a message "
    "logged twice (a producer's retry the broker kept twice) is recognised after a sink restart too. "
    "Kept 6 hours: a retry follows its original within the producer's delivery timeout (minutes).",
    (
        *_SINK_PARTITION,
        Column("offset", "Int64", "int64", "Offset of the message.", "CODEC(Delta, ZSTD(1))"),
        Column("message_id", "UInt64", "uint64", "First 8 bytes of the message's rocescope-id header."),
        _ts("written_at", "When the sink recorded it."),
    ),
    order_by=("group_id", "topic", "partition", "offset"),
    partition_by="toStartOfHour(written_at)",
    engine="ReplacingMergeTree(written_at)",
    ttl_column="written_at",
    fixed_ttl="6 HOUR",
    stream=False,
    settings={"ttl_only_drop_parts": 1},
)

IMPORTS = Table(
    "imports",
    "The files `rocescope import` landed, by content: a file imported again (the same bytes, kind and options) "
    "is recognised and skipped, so a re-import changes no table (`--again` imports it anyway).",
    (
        _str("digest", "SHA-256 of the import's kind and options and the file's bytes."),
        _lc("kind", "What the file was imported as (--kind, or table:<name>)."),
        _str("file", "The file's path as given."),
        Column("rows", "UInt64", "uint64", "Rows it landed."),
        _ts("imported_at", "When it was imported."),
    ),
    order_by=("digest",),
    engine="ReplacingMergeTree(imported_at)",
    stream=False,
)

SCHEMA_MIGRATIONS = Table(
    "schema_migrations",
    "Which versioned migrations ran, and when.",
    (
        Column("version", "UInt32", "uint32", "Migration version."),
        _str("name", "What the migration does."),
        _ts("applied_at", "When it was applied."),
    ),
    order_by=("version",),
    engine="ReplacingMergeTree(applied_at)",
    stream=False,
)

TABLES: Mapping[str, Table] = {
    t.name: t
    for t in (
        COUNTERS,
        PACKETS,
        LINKS,
        ENDPOINTS,
        QP_OWNERS,
        FINDINGS,
        INCIDENTS,
        COLLECTIVES,
        METRIC_CATALOG,
        COUNTERS_1M,
        COLLECTIVES_1M,
        SINK_INTENTS,
        SINK_MESSAGES,
        IMPORTS,
        SCHEMA_MIGRATIONS,
    )
}
#: Streams: tables whose rows travel through the transport as Batches.
STREAMS: tuple[str, ...] = tuple(name for name, t in TABLES.items() if t.stream)


@cache
def arrow_schema(table: str) -> pa.Schema:
    """The Arrow schema a Batch of `table` must have (cached: it sits on the decode hot path)."""
    import pyarrow as pa

    spec = TABLES[table]
    return pa.schema(
        [pa.field(c.name, c.arrow_type, nullable=False) for c in spec.columns],
        metadata={"rocescope.table": table, "rocescope.schema_version": str(SCHEMA_VERSION)},
    )


def topic(stream: str, prefix: str = "rocescope") -> str:
    """Kafka topic of a stream; the schema version is part of the name."""
    if stream not in TABLES:
        raise KeyError(f"unknown stream {stream!r}")
    return f"{prefix}.{stream}.v{SCHEMA_VERSION}"


def column_ddl(col: Column) -> str:
    parts = [f"`{col.name}`", col.ch_type]
    if col.default:
        parts.append(f"DEFAULT {col.default}")
    if col.codec:
        parts.append(col.codec)
    parts.append(f"COMMENT '{_sql_str(col.description)}'")
    return " ".join(parts)


def ddl(table: str, ttl_days: int = 0, database: str = "", as_name: str | None = None) -> str:
    """CREATE TABLE for `table` (named `as_name` if given, to rebuild it): identical on a ClickHouse
    server and on embedded chdb."""
    spec = TABLES[table]
    name = f"`{database}`.`{as_name or spec.name}`" if database else f"`{as_name or spec.name}`"
    cols = ",\n    ".join(column_ddl(c) for c in spec.columns)
    lines = [f"CREATE TABLE IF NOT EXISTS {name}\n(\n    {cols}\n)", f"ENGINE = {spec.engine}"]
    if spec.partition_by:
        lines.append(f"PARTITION BY {spec.partition_by}")
    lines.append(f"ORDER BY ({', '.join(spec.order_by)})")
    if spec.fixed_ttl:
        lines.append(f"TTL toDateTime({spec.ttl_column}) + INTERVAL {spec.fixed_ttl}")
    elif ttl_days > 0 and spec.ttl_column:
        lines.append(f"TTL toDateTime({spec.ttl_column}) + INTERVAL {int(ttl_days)} DAY")
    if spec.settings:
        lines.append("SETTINGS " + ", ".join(f"{k} = {v}" for k, v in spec.settings.items()))
    lines.append(f"COMMENT '{_sql_str(spec.description)}'")
    return "\n".join(lines)


def _sql_str(text: str) -> str:
    """Quote a literal that comes from this module (never from a user)."""
    return text.replace("\\", "\\\\").replace("'", "\\'")
