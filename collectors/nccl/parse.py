"""NCCL Inspector output -> one Arrow batch of the `collectives` stream (both of Inspector's modes).

The layouts are NVIDIA/nccl's `plugins/profiler/inspector` (formerly `ext-profiler/inspector`):

* JSON mode writes `<hostname>-pid<pid>.log`: one compact object per line and per operation, `header`
  {`id` (communicator hash), `comm_name` (2.30+), `rank`, `n_ranks`, `nnodes`}, `metadata`
  {`dump_timestamp_us`, `hostname`, `pid`, ...} and `coll_perf` {`coll`, `coll_sn`, `coll_msg_size_bytes`,
  `coll_exec_time_us`, `coll_timing_source`, `coll_algobw_gbs`, `coll_busbw_gbs`, verbose: `event_trace_ts`}
  or (2.30+) `p2p_perf` with `p2p_*` names and `p2p_peer`. A NaN bandwidth is printed as the string "nan".
  Times are gettimeofday microseconds.
  From v4.1 (NCCL dev, 2026) each dump of a communicator starts with a `dump_stats` marker line (`header`,
  `metadata` and `dump_stats` {`coll_records`, `coll_dropped_since_last_dump`, `p2p_...`}: records its ring
  buffer overwrote); v4.2 adds `coll_algo`/`coll_proto`; from the marker-based v4.3 the operation lines carry
  neither header nor metadata ("all following records inherit the header/metadata of this dump_stats marker
  until the next marker", inspector_json.cc) and `proxy_trace` records may follow. The version string alone does
  not tell the layouts apart (two v4.3 exist), so lines are read by structure: a line without a header takes the
  last marker's before it in its file (carried from one read to the next in `context`); markers are counted, not
  rows; proxy traces are counted as unused; a major version other than 4 is refused with a count.
* Prometheus mode (`prom.py`) writes `nccl_inspector_metrics_<GPU UUID>.prom`, rewritten every interval.

JSON lines are parsed by pyarrow's JSON reader against an explicit schema (C++, ~5x `json.loads`), so ingest
keeps up with a busy job. A block it refuses is read again without the lines that are no record of the
expected shape (checked one by one with `json.loads`), halved further if the reader still refuses it: the
refused lines are counted as malformed, every other line is kept, and the rows all come from the one reader.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from rocescope import schema
from rocescope.collectors.common.rows import CounterRows
from rocescope.pipeline.batch import Batch, conform

__all__ = [
    "DROPPED_METRIC",
    "NO_MARKER",
    "STREAM",
    "Parsed",
    "collectives_batches",
    "collectives_table",
    "drops_batches",
    "empty",
    "is_prometheus",
    "last_marker",
    "one_batch",
    "parse_inspector",
    "parse_json_lines",
]

STREAM = "collectives"
#: the metric of Inspector's own drops (`drops_batches`)
DROPPED_METRIC = "nccl_records_dropped"
_SCHEMA = schema.arrow_schema(STREAM)
_BLOCK = 1 << 20
_SLICE = 4 << 20
#: Newest microsecond time that fits the table's nanosecond column (year 2262).
_MAX_US = (2**63 - 1) // 1000

_I64, _F64, _STR = pa.int64(), pa.float64(), pa.string()
_KERNELS = pa.list_(pa.struct([("kernel_start_ts", _I64), ("kernel_stop_ts", _I64)]))


def _perf(p: str) -> pa.DataType:
    """`coll_perf` / `p2p_perf` as inspector_json.cc writes them (fields we do not use are ignored)."""
    trace = pa.struct([(f"{p}_start_ts", _I64), (f"{p}_stop_ts", _I64), ("kernel_events", _KERNELS)])
    return pa.struct(
        [
            (p, _STR),
            (f"{p}_algo", _STR),
            (f"{p}_proto", _STR),
            (f"{p}_sn", _I64),
            (f"{p}_peer", _I64),
            (f"{p}_msg_size_bytes", pa.uint64()),
            (f"{p}_exec_time_us", _F64),
            (f"{p}_timing_source", _STR),
            (f"{p}_algobw_gbs", _F64),
            (f"{p}_busbw_gbs", _F64),
            ("event_trace_ts", trace),
        ]
    )


_JSON_SCHEMA = pa.schema(
    [
        ("header", pa.struct([("id", _STR), ("comm_name", _STR), ("rank", _I64), ("n_ranks", _I64), ("nnodes", _I64)])),
        (
            "metadata",
            pa.struct(
                [
                    ("inspector_output_format_version", _STR),
                    ("dump_timestamp_us", _I64),
                    ("hostname", _STR),
                    ("pid", _I64),
                ]
            ),
        ),
        ("coll_perf", _perf("coll")),
        ("p2p_perf", _perf("p2p")),
        (
            "dump_stats",
            pa.struct(
                [("coll_records", _I64), ("coll_dropped_since_last_dump", _I64), ("p2p_dropped_since_last_dump", _I64)]
            ),
        ),
        ("proxy_trace", pa.struct([("record_type", _STR)])),
    ]
)
#: The line that stands for "no marker yet" between files read together: a marker without a header, so lines
#: without one after it are malformed, never given another file's header
NO_MARKER = b'{"dump_stats":{}}\n'
_MARKER_KEY = b'"dump_stats"'

_PARSE = pj.ParseOptions(explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="ignore")
#: json.cc prints a NaN double as the string "nan" (only bandwidths can be NaN): read as "not given".
_NAN_BW = tuple((f'_{bw}_gbs":"nan"'.encode(), f'_{bw}_gbs":null'.encode()) for bw in ("algobw", "busbw"))


@dataclass
class Parsed:
    """What one read of Inspector output gave: the rows, what was skipped, how far the input was read."""

    batch: pa.RecordBatch  # of the `collectives` stream (schema.arrow_schema)
    malformed: int = 0  # records skipped; every other one is in `batch`
    problem: str = ""  # why the first of them was skipped, for the one log line
    consumed: int = 0  # bytes of the input read to the end; the rest is an unfinished record (read it again)
    unknown: int = 0  # lines that are no collective (other metrics of a textfile, Inspector's proxy traces)
    refused: int = 0  # records of a format version not read (counted, named in `problem`)
    writer_dropped: int = 0  # records Inspector's ring buffers dropped before writing (its `dump_stats` say so)
    markers: int = 0  # `dump_stats` markers the writer wrote (v4.1+), carried context and separators not counted
    #: the last `dump_stats` marker read (its header and metadata, as one JSON line), for the file's next read
    context: bytes = b""
    #: (dump time ns, hostname, pid, records dropped since the previous dump) of each marker that reports drops
    drops: list[tuple[int, str, int, int]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return int(self.batch.num_rows)


def empty() -> pa.RecordBatch:
    return conform(STREAM, collectives_table({}, 0))


_TIMES = ("ts", "start_ts", "stop_ts")


def collectives_table(cols: dict[str, object], n: int) -> pa.Table:
    """`n` rows of `collectives` from column values (times as int nanoseconds); defaults where a mode gives
    none: -1 for unknown ids, NaN bandwidths, 0 (1970) start and stop, empty strings. Conform it."""
    defaults: dict[str, object] = {
        "pid": np.zeros(n, np.uint32),
        "gpu": np.full(n, -1, np.int16),
        "communicator": [""] * n,
        "comm_name": [""] * n,
        "rank": np.full(n, -1, np.int32),
        "nodes": np.full(n, -1, np.int32),
        "peer": np.full(n, -1, np.int32),
        "sequence": np.full(n, -1, np.int64),
        "algo_bw_gbs": np.full(n, np.nan),
        "bus_bw_gbs": np.full(n, np.nan),
        "timing_source": [""] * n,
        "algorithm": [""] * n,
        "start_ts": np.zeros(n, np.int64),
        "stop_ts": np.zeros(n, np.int64),
        "slurm_job_id": [""] * n,
        "ts": np.zeros(n, np.int64),
        "host": [""] * n,
        "ranks": np.zeros(n, np.int32),
        "collective": [""] * n,
        "bytes": np.zeros(n, np.uint64),
        "exec_time_us": np.zeros(n, np.float64),
        "source": [""] * n,
    }
    defaults.update(cols)
    ns = pa.timestamp("ns", tz="UTC")
    out = {k: pa.array(v, pa.int64()).cast(ns) if k in _TIMES else v for k, v in defaults.items()}
    return pa.table(out)


def is_prometheus(name: str, data: bytes) -> bool:
    """Prometheus textfile rather than JSON lines: by the file's name (`.prom`; `.log`, `.jsonl`), else by the
    text (a comment or a metric name first; damage at the start of a JSON file does not make it one)."""
    if name.endswith(".prom"):
        return True
    if name.endswith((".log", ".jsonl")):
        return False
    head = data.lstrip()[:1]
    return head == b"#" or head.isalpha() or head == b"_"


def parse_inspector(
    data: bytes | str, name: str = "", dumped_at_ns: int = 0, final: bool = True, context: bytes = b""
) -> Parsed:
    """Any of Inspector's outputs (JSON lines, a Prometheus textfile, OTLP JSON bodies as an OpenTelemetry
    Collector's file exporter stores them), told apart by the file name or the text. `dumped_at_ns` dates
    Prometheus rows that carry no time of their own (2.30+: the file's mtime). `final=False` leaves an
    unfinished last record unread; `context` is the `Parsed.context` of the file's previous read."""
    raw = data.encode() if isinstance(data, str) else data
    if is_prometheus(name, raw):
        from rocescope.collectors.nccl.prom import parse_prom_text

        return parse_prom_text(raw, dumped_at_ns, final)
    from rocescope.collectors.nccl.otlp import is_otlp, parse_otlp

    if is_otlp(raw):
        return parse_otlp(raw)
    return parse_json_lines(raw, final, context)


# --- JSON mode ----------------------------------------------------------------------------------------------


def parse_json_lines(data: bytes | str, final: bool = True, context: bytes = b"") -> Parsed:
    """Inspector JSON lines -> `collectives`. With `final=False` a last line without its newline is left
    unread (`consumed` stops before it): the writer is still at it. `context`: the marker the lines of this
    file read before ended with (`Parsed.context`), or `NO_MARKER` lines separating files read together."""
    raw = data.encode() if isinstance(data, str) else data
    end = len(raw) if final else raw.rfind(b"\n") + 1
    out, parts, pos = Parsed(empty(), context=context), [], 0
    while pos < end:  # slices of a few MB: the reader is fastest there, and memory stays bounded
        cut = raw.rfind(b"\n", pos, pos + _SLICE) + 1 if pos + _SLICE < end else end
        cut = cut if cut > pos else min(end, raw.find(b"\n", pos) + 1 or end)
        text = out.context + raw[pos:cut] if out.context else raw[pos:cut]
        for bad, good in _NAN_BW:
            if bad in text:
                text = text.replace(bad, good)
        table, refused, why = _read_lines(text)
        got = _json_rows(table)
        parts.append(got.batch)
        out.malformed += refused + got.malformed
        out.problem = out.problem or why or got.problem
        out.unknown += got.unknown
        out.refused += got.refused
        out.writer_dropped += got.writer_dropped
        out.drops += got.drops
        out.markers += got.markers
        if got.markers:  # only then is there a marker to carry (a scan of the slice otherwise wasted)
            out.context = last_marker(raw[pos:cut]) or out.context
        pos = cut
    out.batch, out.consumed = one_batch(parts) if parts else empty(), end
    return out


def last_marker(text: bytes, end: int | None = None) -> bytes | None:
    """The last `dump_stats` marker line of `text` (up to `end`), as the context of the lines after it (its header
    and metadata; its drop counts emptied, so carrying it counts them once); None when `text` holds none."""
    limit = len(text) if end is None else end
    at = limit
    while (k := text.rfind(_MARKER_KEY, 0, at)) >= 0:
        start, stop = text.rfind(b"\n", 0, k) + 1, text.find(b"\n", k, limit)
        try:
            doc = json.loads(text[start : limit if stop < 0 else stop])
        except (ValueError, RecursionError):
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("dump_stats"), dict) and isinstance(doc.get("header"), dict):
            carried = {"header": doc["header"], "metadata": doc.get("metadata"), "dump_stats": {}}
            return json.dumps(carried, separators=(",", ":")).encode() + b"\n"
        at = start
    return None


def one_batch(parts: list[pa.RecordBatch]) -> pa.RecordBatch:
    """`collectives` record batches as one (dictionaries unified)."""
    if len(parts) == 1:
        return parts[0]
    table = pa.Table.from_batches(parts, _SCHEMA).unify_dictionaries().combine_chunks()
    return table.to_batches()[0] if table.num_rows else empty()


def _read(text: bytes, one_line: bool = False) -> pa.Table:
    block = len(text) + 1 if one_line or len(text) < _BLOCK else _BLOCK
    return pj.read_json(pa.BufferReader(text), pj.ReadOptions(block_size=block), _PARSE)


_SURROGATE = re.compile("[\ud800-\udfff]")
_ARROW_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def _read_lines(text: bytes) -> tuple[pa.Table, int, str]:
    """(parsed lines, lines refused, why the first was). A block the reader refuses is read again without
    the lines that are no JSON object at all (the usual damage: a cut or garbled line); if it is still
    refused (a field of the wrong type), it is halved until each refused line stands alone."""
    if not text or text.isspace():  # isspace stops at the first other byte; strip would copy the block
        return _JSON_SCHEMA.empty_table(), 0, ""
    try:
        return _read(text), 0, ""
    except _ARROW_ERRORS:
        pass
    kept, refused, problem = [], 0, ""
    for line in text.splitlines(keepends=True):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            doc, problem = None, problem or f"not JSON ({exc}): {line[:120]!r}"
        if isinstance(doc, dict) and _fits(doc, _JSON_SCHEMA):
            kept.append(line if line.endswith(b"\n") else line + b"\n")
        else:
            refused += 1
            problem = problem or f"not an Inspector record (no object, or a field of the wrong type): {line[:120]!r}"
    table, bad, why = _halves(kept)
    return table, refused + bad, problem or why


def _fits(value: object, kind: pa.DataType | pa.Schema) -> bool:
    """`value` (from json.loads) reads as `kind` (the fields we ask the reader for; others are ignored)."""
    if value is None:
        return True
    if isinstance(kind, pa.Schema) or pa.types.is_struct(kind):
        return isinstance(value, dict) and all(_fits(value.get(f.name), f.type) for f in kind)
    if pa.types.is_list(kind):
        return isinstance(value, list) and all(_fits(v, kind.value_type) for v in value)
    if pa.types.is_string(kind):
        return isinstance(value, str) and not _SURROGATE.search(value)
    if isinstance(value, bool):
        return False
    if pa.types.is_floating(kind):
        return isinstance(value, int | float)
    if pa.types.is_unsigned_integer(kind):
        return isinstance(value, int) and 0 <= value < 2**64
    return isinstance(value, int) and -(2**63) <= value < 2**63


def _halves(lines: list[bytes]) -> tuple[pa.Table, int, str]:
    if not lines:
        return _JSON_SCHEMA.empty_table(), 0, ""
    try:
        return _read(b"".join(lines), len(lines) == 1), 0, ""
    except _ARROW_ERRORS as exc:
        if len(lines) == 1:
            return _JSON_SCHEMA.empty_table(), 1, f"{exc}: {lines[0][:120]!r}"
    mid = len(lines) // 2
    first, bad1, why1 = _halves(lines[:mid])
    second, bad2, why2 = _halves(lines[mid:])
    return pa.concat_tables([first, second]), bad1 + bad2, why1 or why2


def _valid(*arrays: pa.Array) -> pa.Array:
    mask = arrays[0].is_valid()
    for a in arrays[1:]:
        mask = pc.and_(mask, a.is_valid())
    return mask


def _fields(struct: pa.ChunkedArray) -> dict[str, pa.Array]:
    """A struct column's fields, null where the struct itself is null."""
    arr = struct.combine_chunks()
    return {f.name: child for f, child in zip(arr.type, arr.flatten(), strict=True)}


def _trace_span(trace: dict[str, pa.Array], p: str) -> tuple[pa.Array, pa.Array]:
    """(issued, last kernel stop) in microseconds per row of an `event_trace_ts`; null where not traced."""
    kernels = trace["kernel_events"]
    n = len(kernels)
    stop = trace[f"{p}_stop_ts"]
    flat = pc.list_flatten(kernels)
    if len(flat):
        parents = pc.list_parent_indices(kernels)
        stops = pc.struct_field(flat, "kernel_stop_ts")
        last = pa.table({"row": parents, "stop": stops}).group_by("row").aggregate([("stop", "max")])
        latest = np.full(n, -1, np.int64)
        rows = last.column("row").to_numpy()
        latest[rows] = last.column("stop_max").fill_null(-1).to_numpy()
        kernel_stop = pa.array(latest, mask=latest < 0)
        stop = pc.coalesce(kernel_stop, stop)
    return trace[f"{p}_start_ts"], stop


def _inherited(table: pa.Table) -> tuple[pa.Array, pa.Array]:
    """(header, metadata) per line: its own, else the last `dump_stats` marker's before it (v4.3+)."""
    header, metadata = table.column("header").combine_chunks(), table.column("metadata").combine_chunks()
    marker = table.column("dump_stats").combine_chunks().is_valid().to_numpy(zero_copy_only=False)
    if not marker.any():
        return header, metadata
    own = header.is_valid().to_numpy(zero_copy_only=False)
    rows = np.arange(len(header))
    last = np.maximum.accumulate(np.where(marker, rows, -1))
    inherit = ~own & (last >= 0)
    if not inherit.any():  # v4.0-v4.2 lines carry their own (files read together are separated by markers)
        return header, metadata
    source = pa.array(np.where(inherit, last, rows))
    return header.take(source), metadata.take(source)


def _json_rows(table: pa.Table) -> Parsed:
    """Parsed lines -> `collectives` rows; records without what a row needs are counted and left out, markers
    and proxy traces are no records (counted apart), records of another major version are refused."""
    n = table.num_rows
    if not n:
        return Parsed(empty())
    header, metadata = _inherited(table)
    head = {f.name: c for f, c in zip(header.type, header.flatten(), strict=True)}
    meta = {f.name: c for f, c in zip(metadata.type, metadata.flatten(), strict=True)}
    coll, p2p = _fields(table.column("coll_perf")), _fields(table.column("p2p_perf"))
    is_coll = table.column("coll_perf").combine_chunks().is_valid()
    is_op = pc.or_(is_coll, table.column("p2p_perf").combine_chunks().is_valid())
    stats = _fields(table.column("dump_stats"))
    no_op = pc.invert(is_op)
    markers = pc.and_(table.column("dump_stats").combine_chunks().is_valid(), no_op)
    proxies = pc.and_(table.column("proxy_trace").combine_chunks().is_valid(), no_op)
    not_records = int(pc.sum(pc.or_(markers, proxies)).as_py() or 0)
    dropped = pc.add(pc.fill_null(stats["coll_dropped_since_last_dump"], 0),
                     pc.fill_null(stats["p2p_dropped_since_last_dump"], 0))  # fmt: skip
    writer_dropped = int(pc.sum(pc.if_else(markers, dropped, 0)).as_py() or 0)
    drops: list[tuple[int, str, int, int]] = []
    if writer_dropped:
        at = pc.and_(markers, pc.greater(dropped, 0))
        said = (meta["dump_timestamp_us"], meta["hostname"], meta["pid"], dropped)
        drops = [
            (int(us or 0) * 1000, str(host or ""), int(pid or 0), int(n))
            for us, host, pid, n in zip(*(pc.filter(c, at).to_pylist() for c in said), strict=True)
        ]
    # a writer's marker counts its records; a carried context or a separator between files (`{}`) does not
    written = int(pc.sum(pc.and_(markers, stats["coll_records"].is_valid())).as_py() or 0)

    def perf(name: str) -> pa.Array:
        return pc.if_else(is_coll, coll[f"coll{name}"], p2p[f"p2p{name}"])

    c_start, c_stop = _trace_span(_fields(pa.chunked_array([coll["event_trace_ts"]])), "coll")
    p_start, p_stop = _trace_span(_fields(pa.chunked_array([p2p["event_trace_ts"]])), "p2p")
    start, stop = pc.if_else(is_coll, c_start, p_start), pc.if_else(is_coll, c_stop, p_stop)
    op, sn, size, exec_us = perf(""), perf("_sn"), perf("_msg_size_bytes"), perf("_exec_time_us")
    dumped, pid, rank, ranks = meta["dump_timestamp_us"], meta["pid"], head["rank"], head["n_ranks"]
    ok = _valid(head["id"], rank, ranks, dumped, meta["hostname"], pid, op, sn, size, exec_us)
    ok = pc.and_(ok, pc.xor(is_coll, table.column("p2p_perf").combine_chunks().is_valid()))
    for cond in (
        pc.greater_equal(rank, 0),
        pc.greater(ranks, 0),
        pc.less(rank, ranks),
        pc.and_(pc.greater_equal(pid, 0), pc.less(pid, 2**32)),
        pc.and_(pc.greater_equal(dumped, 0), pc.less_equal(dumped, _MAX_US)),
        pc.and_(pc.greater_equal(exec_us, 0), pc.is_finite(exec_us)),
        pc.less_equal(pc.coalesce(start, 0), _MAX_US),
        pc.less_equal(pc.coalesce(stop, 0), _MAX_US),
        pc.greater_equal(pc.min_element_wise(pc.coalesce(start, 0), pc.coalesce(stop, 0)), 0),
    ):
        ok = pc.and_kleene(ok, pc.fill_null(cond, False))
    ok = pc.fill_null(ok, False)
    version = pc.fill_null(meta["inspector_output_format_version"], "v4.")
    other_version = pc.and_(ok, pc.invert(pc.starts_with(version, "v4.")))
    refused = int(pc.sum(other_version).as_py() or 0)
    ok = pc.and_(ok, pc.invert(other_version))
    good = int(pc.sum(ok).as_py() or 0)
    invalid = n - good - refused - not_records
    why = "" if not invalid else "a record without header, metadata or a complete coll_perf/p2p_perf"
    if refused:
        seen = pc.unique(pc.filter(version, other_version)).to_pylist()
        why = why or f"Inspector output format {', '.join(map(str, seen[:3]))} is not read (v4.x is)"

    def keep(a: pa.Array) -> pa.Array:
        return a.filter(ok) if good < n else a

    start_us, stop_us = keep(start), keep(stop)
    traced_stop = pc.if_else(pc.greater(pc.fill_null(stop_us, 0), 0), stop_us, keep(dumped))
    nodes, peer = keep(pc.fill_null(head["nnodes"], -1)), keep(pc.fill_null(perf("_peer"), -1))
    comm_name = pc.fill_null(head["comm_name"], "")  # Inspector names an unnamed communicator "unknown"
    cols: dict[str, object] = {
        "ts": pc.multiply(traced_stop, 1000),
        "host": keep(meta["hostname"]),
        "pid": keep(pid).cast(pa.uint32()),
        "communicator": keep(head["id"]),
        "comm_name": keep(pc.if_else(pc.equal(comm_name, "unknown"), "", comm_name)),
        "rank": keep(rank).cast(pa.int32()),
        "ranks": keep(ranks).cast(pa.int32()),
        "nodes": nodes.cast(pa.int32(), safe=False),
        "collective": keep(op),
        "peer": peer.cast(pa.int32(), safe=False),
        "sequence": keep(sn),
        "bytes": keep(size),
        "exec_time_us": keep(exec_us),
        "algo_bw_gbs": keep(pc.fill_null(perf("_algobw_gbs"), np.nan)),
        "bus_bw_gbs": keep(pc.fill_null(perf("_busbw_gbs"), np.nan)),
        "timing_source": keep(pc.fill_null(perf("_timing_source"), "")),
        "algorithm": keep(_algorithm(perf("_algo"), perf("_proto"))),
        "start_ts": pc.multiply(pc.fill_null(start_us, 0), 1000),
        "stop_ts": pc.multiply(pc.fill_null(stop_us, 0), 1000),
        "source": ["inspector_json"] * good,
    }
    batch = conform(STREAM, collectives_table(cols, good))
    return Parsed(batch, invalid, why, unknown=int(pc.sum(proxies).as_py() or 0), refused=refused,
                  writer_dropped=writer_dropped, markers=written, drops=drops)  # fmt: skip


def _algorithm(algo: pa.Array, proto: pa.Array) -> pa.Array:
    """`RING_SIMPLE` from v4.2's `coll_algo` and `coll_proto` (OTLP's `algo_proto`); empty where not named."""
    known = pc.and_(pc.fill_null(pc.not_equal(algo, "unknown"), False), algo.is_valid())
    joined = pc.binary_join_element_wise(algo, pc.fill_null(proto, "unknown"), "_")
    return pc.if_else(known, joined, "")


def drops_batches(drops: Sequence[tuple[int, str, int, int]]) -> list[Batch]:
    """`counters` Batches (role `host`, one per host) of `nccl_records_dropped`: what Inspector said it dropped,
    where the analysis reads it beside the job's collectives."""
    rows = CounterRows()
    for ts, host, pid, n in drops:
        if host:
            rows.add(ts, f"nccl:{pid}", DROPPED_METRIC, float(n), "dump_stats/dropped_since_last_dump", -1, host)
    return rows.to_batches("host", "nccl")


def collectives_batches(batch: pa.RecordBatch, max_rows: int = 10_000) -> list[Batch]:
    """`collectives` Batches of at most `max_rows` (a Kafka message stays small), each keyed by its first host."""
    out = []
    for start in range(0, batch.num_rows, max_rows):
        part = batch.slice(start, max_rows)
        host = part.column(part.schema.get_field_index("host"))
        key = str(host.dictionary[host.indices[0].as_py()]) if pa.types.is_dictionary(host.type) else str(host[0])
        out.append(Batch(STREAM, part, key=key))
    return out
